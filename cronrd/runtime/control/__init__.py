"""The daemon's commands and reads, whichever face asks: the handlers and
their table, access and audit (access), reads (reads, explain),
checkpoints, tokens and notifications requests, and the control socket
server (server) that serves them to the CLI."""

"""The peer port: framed, mutually authenticated TLS connections between
the daemons (transport), certificates and TLS contexts (tls), and
request/answer calls over them (rpc). It owns bytes between hosts, not what
they mean."""

"""Pure decisions of the runtime: functions of (a view of the state, now)
that return a decision or commands. No asyncio, sockets, files, clocks or
randomness: time comes in as an argument, so each is tested on a fake clock."""

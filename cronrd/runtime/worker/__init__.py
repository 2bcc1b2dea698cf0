"""The worker agent (``cronrd worker``): runs runs for the cluster without
being a member of it (docs/workers.md). ``view`` answers the executor from
the leader's assignments, ``link`` is the connection to the leader, and
``agent`` puts them together with the executor a member uses."""

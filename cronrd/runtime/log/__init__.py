"""The log seam and its two kinds: the ``Log`` the daemon is written
against (base), the direct log of one host (local), and the replicated log
(replicated) with the Raft node on asyncio that drives the pure core
(raft_node), its durable storage (raft_storage), snapshots (snapshot_data)
and proposals forwarded to the leader (forwarding). It owns "what is
committed, in which order"; it knows nothing of jobs or runs."""

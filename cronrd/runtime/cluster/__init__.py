"""Who this node is with: the members and their views (members), the
Raft cluster that ties the log, the peers and the state together
(raft_cluster), vouching for peers (trust), membership changes (admin),
joining as the first member (first_member), the leader's lease
(lease_keeper) and the clock watch (clock_watch)."""

"""This node's lease in a cluster: "may this node start a run now?"

The lease rests on round trips, both directions proven (monotonic times): a
follower's last ReadIndex round trip through a leader, and, on the leader,
each peer's last answer to what it sent (which also says which peers are
healthy, for placement, promotion and node loss). ``LeaseKeeper`` records
them, renews a follower's lease, and asks the pure rule
(decisions/lease.py) whether it holds. ``Cluster`` (cluster/raft_cluster.py) owns one.
"""

from __future__ import annotations

import asyncio
import logging

from ...decisions import lease
from ...errors import CronrdError
from ..clock import Clock
from ..log.raft_node import RaftNode
from ..tasks import wait_within

log = logging.getLogger("cronrd.cluster")


class LeaseKeeper:
    def __init__(self, node_id: str, node: RaftNode, clock: Clock, node_timeout: float,
                 election_timeout: float):
        self.node_id = node_id
        self.node = node
        self.clock = clock
        self.election_timeout = election_timeout
        # How long a node keeps starting its committed runs after its last
        # round trip with a leader (decisions/lease.py says why).
        self.length = lease.lease_length(node_timeout, election_timeout)
        self.leader_contact = 0.0            # a follower's last round trip (when sent)
        self.acked: dict[str, float] = {}    # on the leader: each peer's last answer
        self.lead_since = 0.0                # when this node last started leading
        self._leading = False                # it led when fresh() last looked

    def round_trip(self, sent: float) -> None:
        """A request sent at ``sent`` was answered through a leader."""
        self.leader_contact = max(self.leader_contact, sent)

    def answered(self, peer: str) -> None:
        """``peer`` answered what this leader sent it."""
        self.acked[peer] = self.clock.monotonic()

    def started_leading(self) -> None:
        self.lead_since = self.clock.monotonic()

    def ack_age(self, node: str) -> float | None:
        """Seconds since ``node`` last answered this leader: proof that traffic
        flows both ways (a node that can send but not receive does not count)."""
        if node == self.node_id:
            return 0.0
        last = self.acked.get(node)
        return None if last is None else self.clock.monotonic() - last

    def healthy(self, node: str) -> bool:
        age = self.ack_age(node)
        return age is not None and age < max(self.election_timeout, 1.0)

    def fresh(self) -> bool:
        """May this node start a run now? Only within one lease of its last
        ReadIndex round trip through a leader (for the leader: while a quorum
        of voters has answered it within the lease). Round trips, not any
        message: a node the leader cannot hear from must not keep a lease.
        A node cut off stops starting runs before the leader can have
        declared them lost (see the lease's definition, decisions/lease.py)."""
        now = self.clock.monotonic()
        if self.node.is_leader:
            self._leading = True
            return lease.leader_fresh(now, self.node_id, self.node.raft.conf.voters,
                                      self.acked, self.lead_since, self.length)
        if self._leading:  # it stopped leading: its last quorum round trip counts
            self._leading = False
            self.leader_contact = max(self.leader_contact, lease.leader_basis(
                self.node_id, self.node.raft.conf.voters, self.acked, self.lead_since))
        return lease.follower_fresh(now, self.leader_contact, self.length)

    async def renew(self) -> None:
        """On a follower: a ReadIndex round trip through the leader every
        quarter lease; the lease counts from when the request was sent.
        Runs until cancelled."""
        interval = min(0.25, self.length / 4)
        # A request sent to a leader that just died is never answered: give
        # up on it soon and ask the next leader, rather than wait out the lease.
        patience = min(self.length / 2, 2 * self.election_timeout)
        while True:
            if not self.node.is_leader and self.node.leader:
                sent = self.clock.monotonic()
                try:
                    await wait_within(self.node.read_barrier(), patience)
                    self.round_trip(sent)
                except (CronrdError, asyncio.TimeoutError) as exc:
                    log.debug("event=lease_renewal_failed error=%r after_s=%.2f", exc,
                              self.clock.monotonic() - sent)
            await asyncio.sleep(interval)

"""The lease: may this node start a committed run now?

A node starts runs only within one lease of its last round trip with a
leader; the leader declares a node's runs lost only after the node has not
answered it for ``node_timeout``. The lease is shorter than that by two
election timeouts and a second (message delays, clock rates, a leader change
in between), so a node cut off stops starting runs before anyone can have
given them to another node. Round trips count, not messages heard: a node
the leader cannot hear from must not keep a lease.
"""

from __future__ import annotations

from typing import Iterable, Mapping


def lease_length(node_timeout: float, election_timeout: float) -> float:
    """Seconds a lease lasts (at least one election timeout)."""
    return max(election_timeout, node_timeout - 2 * election_timeout - 1.0)


def follower_fresh(now: float, last_round_trip: float, lease: float) -> bool:
    """A follower's lease runs from when it sent its last request that a
    leader answered (a ReadIndex round trip). During an election the leader
    is unknown, but what it committed stands: the lease keeps running."""
    return now - last_round_trip < lease


def leader_fresh(now: float, me: str, voters: Iterable[str],
                 answered_at: Mapping[str, float], lead_since: float, lease: float) -> bool:
    """A leader's lease holds while a quorum of voters (itself included) has
    answered it within one lease, and for one lease after it won its election
    (its votes were a round trip with a quorum)."""
    voters = list(voters)
    heard = sum(1 for v in voters
                if v == me or (v in answered_at and now - answered_at[v] < lease))
    return heard >= len(voters) // 2 + 1 or now - lead_since < lease


def leader_basis(me: str, voters: Iterable[str], answered_at: Mapping[str, float],
                 lead_since: float) -> float:
    """When a leader last had a round trip with a quorum (itself included):
    its election, or the latest time by which a quorum's answers had come.
    A leader that stops leading (it handed leadership over, say for a slow
    disk) keeps its lease as a follower from then, as a follower's counts
    from its last round trip: without it, it fenced the runs it had just
    claimed at their fire time and they ran 2 s late elsewhere. No new
    leader declares its runs lost before it has not answered for
    node_timeout since that leader's election, which came after this
    basis."""
    voters = list(voters)
    need = len(voters) // 2  # answers needed besides its own
    answers = sorted((answered_at[v] for v in voters if v != me and v in answered_at),
                     reverse=True)
    quorum_at = answers[need - 1] if need and len(answers) >= need else float("-inf")
    return max(lead_since, quorum_at)

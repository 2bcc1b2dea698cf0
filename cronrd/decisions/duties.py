"""The leader's housekeeping decisions, as functions of a view and ``now``.

The runtime gathers the view (who is a member, who answered when, how many
active runs each node holds, how far each learner has replicated) and acts
on what these return; nothing here reads a clock or the state itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

MAX_VOTERS = 5
CAUGHT_UP = 64   # a learner this many entries or fewer behind the commit index is caught up


@dataclass(frozen=True)
class Lost:
    node: str
    runs: int
    reason: str


def nodes_lost(now: float, me: str, active_runs: Mapping[str | None, int],
               members: Iterable[str], answered_at: Mapping[str, float], lead_since: float,
               node_timeout: float, proposed_at: Mapping[str, float]) -> list[Lost]:
    """Nodes whose active runs are to be declared lost: a member that has not
    answered this leader for ``node_timeout`` (counted from when this leader
    took over, at the latest: it cannot know of answers before), or a node
    that is no longer a member. A node declared within the last
    ``node_timeout`` is left alone: that proposal's result is on its way."""
    members = set(members)
    out = []
    for node, count in sorted(active_runs.items(), key=lambda kv: str(kv[0])):
        if node is None or node == me or not count:
            continue
        last = max(answered_at.get(node, float("-inf")), lead_since)
        if node in members and now - last < node_timeout:
            continue
        if now - proposed_at.get(node, float("-inf")) < node_timeout:
            continue
        reason = (f"node {node} did not answer the leader for {node_timeout:g}s (node_timeout)"
                  if node in members else f"node {node} is no longer a member")
        out.append(Lost(node, count, reason))
    return out


def voter_target(members: int) -> int:
    """How many voters a cluster of ``members`` keeps: odd, at most MAX_VOTERS."""
    return min(MAX_VOTERS, members if members % 2 else members - 1)


def learner_to_promote(members: int, voters: int, learners: Iterable[str],
                       healthy: Iterable[str], match: Mapping[str, int],
                       commit: int) -> str | None:
    """The learner to promote next, if the voters are below their target:
    the first (by id) that is healthy and caught up."""
    if voters >= voter_target(members):
        return None
    healthy = set(healthy)
    for learner in sorted(learners):
        if learner in healthy and learner in match and match[learner] + CAUGHT_UP >= commit:
            return learner
    return None

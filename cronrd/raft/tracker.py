"""The leader's view of each follower's log (etcd's ``tracker/``): how far
it matches, what to send it next, and in which of three ways.

- *probe*: the follower's log end is not known; one append at a time, each
  answer moving ``next`` (back on a rejection, forward on success);
- *replicate*: the follower keeps up; appends are pipelined, at most
  ``max_inflight`` unanswered at once;
- *snapshot*: the follower is behind the leader's compacted log and is being
  sent a snapshot in chunks; no appends until it is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROBE, REPLICATE, SNAPSHOT = "probe", "replicate", "snapshot"


@dataclass
class Progress:
    """The leader's view of one follower."""
    match: int = 0
    next: int = 1
    state: str = PROBE
    probe_sent: bool = False         # probe: one APP outstanding, wait for its answer
    inflight: list[int] = field(default_factory=list)  # last index of each APP in flight
    recent_active: bool = False
    pending_snapshot: int = 0        # snapshot index being sent
    snap_offset: int = 0
    snap_sent_tick: int = 0          # the leader's tick count when the chunk in flight went out

    def become_probe(self) -> None:
        if self.state == SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
            self.pending_snapshot = 0
        else:
            self.next = self.match + 1
        self.state = PROBE
        self.probe_sent = False
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = REPLICATE
        self.next = self.match + 1
        self.inflight.clear()
        self.probe_sent = False

    def become_snapshot(self, index: int) -> None:
        self.state = SNAPSHOT
        self.pending_snapshot = index
        self.snap_offset = 0
        self.inflight.clear()

    def paused(self, max_inflight: int) -> bool:
        if self.state == PROBE:
            return self.probe_sent
        if self.state == SNAPSHOT:
            return True
        return len(self.inflight) >= max_inflight

    def maybe_update(self, index: int) -> bool:
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        self.inflight = [i for i in self.inflight if i > index]
        return updated


def most_caught_up(candidates: list[str], prs: dict[str, Progress]) -> str:
    """The candidate whose log matches the leader's furthest (ties: the first
    by name). Leadership handed to it needs the fewest appends before its
    TimeoutNow, so the cluster goes without a leader for the shortest time."""
    if not candidates:
        raise ValueError("no candidate to choose from")
    return min(candidates, key=lambda v: (-(prs[v].match if v in prs else 0), v))

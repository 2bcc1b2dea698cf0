"""Clock offsets between members, from round trips (NTP's way, without NTP).

A follower asks the leader for its wall clock about once a second. One
answer is a ``Sample``: the local wall clock when the question left, the
round trip by the local monotonic clock, and the leader's wall clock in the
answer. Assuming the answer was taken halfway through the round trip, the
local clock is ``sent + rtt/2 - remote`` ahead of the leader's, give or take
``rtt/2``. Of the samples of the last ``WINDOW`` seconds the one with the
shortest round trip is the most accurate (queueing only ever adds delay).

"The leader's clock" is not the truth either: the leader's own clock may be
the wrong one. So every member's offset is also taken relative to the
cluster's clock (``reference``: the median of the largest group of clocks
that agree, when that group is a majority; ``from_median``): with a
majority of good clocks, it is a good clock. That is the offset ``status``
shows and ``max_clock_offset`` bounds.

Nothing here reads a clock: times come in as arguments.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping

WINDOW = 30.0          # seconds of samples an estimate is taken from
MAX_SAMPLES = 64


@dataclass(frozen=True)
class Sample:
    sent: float     # local wall clock when the question left (epoch s)
    rtt: float      # round trip, by the local monotonic clock (s)
    remote: float   # the peer's wall clock in its answer (epoch s)
    at: float       # local monotonic clock when the answer came (s)

    @property
    def offset(self) -> float:
        """How far the local clock is ahead of the peer's (s; negative: behind)."""
        return self.sent + self.rtt / 2.0 - self.remote


@dataclass(frozen=True)
class Estimate:
    offset: float   # local clock minus the peer's (s)
    error: float    # +- this much (half the round trip of the sample used)
    at: float       # local monotonic time of that sample


def estimate(samples: Iterable[Sample], now: float, window: float = WINDOW) -> Estimate | None:
    """The offset from the shortest round trip among the samples of the last
    ``window`` seconds (``now``: local monotonic), or None without any."""
    recent = [s for s in samples if now - s.at <= window and s.rtt >= 0]
    if not recent:
        return None
    best = min(recent, key=lambda s: (s.rtt, -s.at))
    return Estimate(best.offset, best.rtt / 2.0, best.at)


def keep(samples: list[Sample], sample: Sample, now: float,
         window: float = WINDOW) -> list[Sample]:
    """``samples`` with ``sample`` added, those older than ``window`` gone,
    at most MAX_SAMPLES kept (the newest)."""
    out = [s for s in samples if now - s.at <= window] + [sample]
    return out[-MAX_SAMPLES:]


def from_median(ahead_of_leader: Mapping[str, float], median: float) -> dict[str, float]:
    """Each member's offset from the cluster's clock (``median``, from
    ``reference``), given each member's offset from the leader's clock (the
    leader's own is 0)."""
    return {node: off - median for node, off in ahead_of_leader.items()}


def reference(ahead_of_leader: Mapping[str, float], limit: float,
              members: int) -> float | None:
    """The cluster's clock, as an offset from the leader's: the median of
    the largest group of clocks that agree (all within ``limit`` of each
    other), if that group holds more than half of the ``members``; None
    when no such majority agrees (no telling which clocks are wrong). A
    plain median of an even count averages the two middle clocks: two good
    and two 30 s fast gave +15 s and called every clock wrong."""
    values = sorted(ahead_of_leader.values())
    best: list[float] = []
    lo = 0
    for hi in range(len(values)):
        while values[hi] - values[lo] > limit:
            lo += 1
        if hi - lo + 1 > len(best):
            best = values[lo:hi + 1]
    if len(best) <= members // 2:
        return None
    return statistics.median(best)


def off(offset: float | None, limit: float) -> bool:
    """Is an offset (s) beyond ``limit`` (max_clock_offset) either way?"""
    return offset is not None and abs(offset) > limit


def relative(offset: float) -> str:
    """'1.2s ahead of', '350ms behind', 'in step with' (the cluster's clock)."""
    text = describe(offset)
    return "in step with" if text == "in step" else (
        text + " of" if text.endswith("ahead") else text)


def describe(offset: float) -> str:
    """'1.2s ahead', '350ms behind', 'in step'."""
    a = abs(offset)
    if a < 0.0005:
        return "in step"
    size = f"{a:.1f}s" if a >= 1 else f"{a * 1000:.0f}ms"
    return f"{size} {'ahead' if offset > 0 else 'behind'}"


def placement_bar(node: str, leader: str, offsets: Mapping[str, float | None],
                  limit: float, own_fence: str | None, *, measured: bool = True) -> str | None:
    """Why the leader must not place a run on ``node`` for its clock, or
    None: a clock beyond ``limit`` would start it early or late (its node
    refuses to: it would be lost), the leader's own clock must be known good
    (``own_fence``), and a clock the leader has not measured (no entry in
    ``offsets``, the members' offsets from the cluster's clock as this
    leader knows them) may be either: right after an election a run once
    went to a node 30 s fast, which reported it lost 30 s late. With
    ``measured`` False (a follower's view, which measures only its own
    clock) an unmeasured clock is not held against its node."""
    if node == leader:
        return None if own_fence is None else f"its clock: {own_fence}"
    offset = offsets.get(node)
    if offset is None:
        return "its clock is not measured by this leader yet" if measured else None
    if off(offset, limit):
        return f"its clock is {relative(offset)} the cluster's (max_clock_offset)"
    return None


def behind(vs_leader: Mapping[str, float], limit: float) -> dict[str, float]:
    """How many seconds each member's clock is behind the leader's (``vs_leader``:
    each member's clock minus the leader's), for those behind by no more than
    ``limit`` (max_clock_offset): such a node claims that much later by the
    leader's clock, and its claim deadline waits for it. A clock further
    behind is off: its node claims nothing (fenced), so waiting for it only
    made its runs late; a node 30 s behind kept its runs until its clock came
    back (9 s late in the fault suite, up to 30 s)."""
    return {n: -off for n, off in vs_leader.items() if -limit <= off < 0}


def unmeasured(members: Iterable[str], leader: str, offsets: Mapping[str, float | None],
               answering: Iterable[str]) -> list[str]:
    """The members that answer the leader but whose clocks it has not
    measured yet: a new leader waits a moment for them before it places
    (they report within a fraction of a second of an election)."""
    answering = set(answering)
    return sorted(n for n in members if n != leader and offsets.get(n) is None
                  and n in answering)

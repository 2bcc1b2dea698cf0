"""The leader's side of claims: which runs to move because nobody claimed
them in time (a function of the runs and ``now``; no clock, no state).

A node starts a run only once its claim is committed (state/run_life.py).
A run its node has not claimed ``grace`` seconds after its fire time (or
after it was placed, if that was later) is moved to another node: the node
is dead, cut off, paused or overloaded, and the log's order makes the move
safe (its claim, if it still comes, loses). Each move gives the next node
one more ``grace`` to claim, so a cluster too slow to commit within
``grace`` moves a run ever more slowly rather than back and forth. A node
whose clock is behind the leader's (within max_clock_offset) asks that much
later by the leader's clock: its deadline moves back by as much
(``behind``), or it would lose every run it is given.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..model.run import Run

CLAIM_GRACE = 0.25   # s after its fire time a run must be claimed by (leader's clock)
STUCK_AFTER = 2.0    # s more for a node that answers the leader: slow, not gone
SUSPECT_FOR = 2.0    # s a node that missed a claim gets no new runs (unless nothing else can)


def moves(run: Run) -> int:
    """How many times the run was moved unclaimed."""
    return len(run.moved_from.split(",")) if run.moved_from else 0


def claim_deadline(run: Run, grace: float = CLAIM_GRACE, behind: float = 0.0) -> float:
    """When the run must be claimed by (the leader's wall clock); ``behind``:
    how far its node's clock is behind the leader's (s)."""
    return (max(run.due_at or 0.0, run.assigned_at or 0.0) + grace * (1 + moves(run))
            + max(0.0, behind))


def on_their_way(ack_ages: Mapping[str, float | None], slow_disks: Iterable[str],
                 within: float) -> set[str]:
    """The members whose unclaimed runs are on their way (``responsive`` to
    ``overdue``): they answered the leader within ``within`` seconds
    (``ack_ages``: the healthy members' last answers), and their disks are
    not slow. A node on a slow disk answers heartbeats at once but learns of
    the runs placed on it only once its log write is done: with one-second
    fsyncs its runs waited STUCK_AFTER and started 2.3 s late, where moved
    at the claim deadline they start well within a second."""
    slow = set(slow_disks)
    return {node for node, age in ack_ages.items()
            if age is not None and age < within and node not in slow}


def overdue(now: float, runs: Iterable[Run], grace: float = CLAIM_GRACE,
            behind: Mapping[str, float] = {}, responsive: Iterable[str] = ()) -> list[Run]:
    """Assigned runs nobody has claimed by their deadline, that may move: a
    per-node run (run_on: all) belongs to its node and waits for it. A node
    that answers the leader (``responsive``: healthy, heartbeats answered
    within a few ticks) is slow, not gone: its claims are on their way (a
    cluster short of CPU commits late); its runs move only STUCK_AFTER later."""
    alive = set(responsive)
    return [r for r in runs
            if r.state == "assigned" and r.claimed_at is None and not r.target
            and r.node and now >= claim_deadline(r, grace, behind.get(r.node, 0.0))
            + (STUCK_AFTER if r.node in alive else 0.0)]


def next_deadline(runs: Iterable[Run], after: float, grace: float = CLAIM_GRACE,
                  behind: Mapping[str, float] = {}, responsive: Iterable[str] = ()
                  ) -> float | None:
    """The earliest claim deadline later than ``after`` among ``runs`` that
    may move, if any."""
    alive = set(responsive)
    times = [d for d in (claim_deadline(r, grace, behind.get(r.node or "", 0.0))
                         + (STUCK_AFTER if r.node in alive else 0.0) for r in runs
                         if r.state == "assigned" and r.claimed_at is None
                         and not r.target and r.node) if d > after]
    return min(times) if times else None

"""A run's states, in one place: the enum, and the sets derived from it.

``pending -> assigned -> running -> succeeded | failed | timed_out | lost |
cancelled``, plus ``skipped`` (never started, with a reason) and
``waiting`` (held, with a reason: behind the job's previous run under
``concurrency: queue``, released to ``pending`` when it ends; or for its
parents, ``depends_on``, released when its gate opens, or ended ``skipped``
or ``failed`` when its upstream fails or its wait runs out). A retry, a
rerun or a backfill is a new attempt (a new record), never a way back.
"""

from __future__ import annotations

import enum
from typing import Iterable


class RunState(str, enum.Enum):
    PENDING = "pending"        # committed, waiting for the leader to place it
    ASSIGNED = "assigned"      # placed on a node, not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOST = "lost"              # its node went away (or the daemon stopped it)
    CANCELLED = "cancelled"
    SKIPPED = "skipped"        # never started, with the reason
    # held, with the reason, not placed: by a dependency gate (upstream_not_ready:JOB),
    # by concurrency: queue (in run_queue, behind the run it names) or by its
    # pool (in pool_runs: "pool db: 2/2 slots in use")
    WAITING = "waiting"

    def __str__(self) -> str:
        return self.value


_S = RunState
# Which state a run may move to from which: transitions as data. Everything
# else derives from this table.
TRANSITIONS: dict[str, frozenset[str]] = {
    # pending -> waiting: its pool's slots are all taken (state/pools.py)
    _S.PENDING.value: frozenset({_S.ASSIGNED.value, _S.CANCELLED.value, _S.SKIPPED.value,
                                 _S.WAITING.value}),
    _S.ASSIGNED.value: frozenset({_S.RUNNING.value, _S.SUCCEEDED.value, _S.FAILED.value,
                                  _S.TIMED_OUT.value, _S.CANCELLED.value, _S.LOST.value,
                                  _S.SKIPPED.value}),
    _S.RUNNING.value: frozenset({_S.SUCCEEDED.value, _S.FAILED.value, _S.TIMED_OUT.value,
                                 _S.CANCELLED.value, _S.LOST.value}),
    # Released when the run ahead of it ends (state/queue.py) or its parents'
    # gate opens (state/dependencies.py), or never started: skipped, cancelled,
    # or failed (its upstream failed, on_upstream_failure: fail).
    # A watch's run (state/watches.py) waits for its pings: to running (a
    # start ping), succeeded or failed (its end ping, or none in its grace).
    _S.WAITING.value: frozenset({_S.PENDING.value, _S.CANCELLED.value, _S.SKIPPED.value,
                                 _S.FAILED.value, _S.RUNNING.value, _S.SUCCEEDED.value}),
}
ALL = tuple(s.value for s in RunState)
ACTIVE = tuple(s for s in ALL if s in TRANSITIONS)            # may still change
FINAL = tuple(s for s in ALL if s not in TRANSITIONS)         # never change again
NOT_STARTED = tuple(s for s in ACTIVE if s != _S.RUNNING.value)  # pending, assigned, waiting
# What a node may report about a run it was given (anything final).
REPORTABLE = frozenset(FINAL)


def sql_in(states: Iterable[str]) -> str:
    """``('a','b')`` for an SQL ``IN``: the states are ours, never input."""
    return "(" + ",".join(f"'{RunState(s).value}'" for s in states) + ")"

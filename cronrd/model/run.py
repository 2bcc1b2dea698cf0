"""A run record, as one frozen value.

A row of the ``runs`` table (schema.py) is decoded once, by ``Run.from_row``,
and travels through the state machine's effects, the queries, the scheduler
and the executor as a ``Run``; a change is a new value
(``dataclasses.replace``). Where a run leaves the daemon (the control socket's
JSON, the CLI) it is serialised by one function, ``Run.view``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..schedule import iso_utc
from .run_states import RunState


@dataclass(frozen=True, slots=True)
class Run:
    run_id: int
    job: str
    origin: str                      # schedule | manual
    kind: str                        # scheduled | catchup | manual | retry | backfill | rerun
    fire_time: int                   # epoch seconds
    attempt: int
    target: str                      # node key for per-node runs, "" otherwise
    state: RunState
    node: str | None                 # None while pending (the leader places it)
    token: int | None                # log index of the assignment (fencing)
    due_at: float | None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    log_path: str | None = None
    reason: str | None = None
    cancel_requested: bool = False
    assigned_at: float | None = None   # when its current placement was committed
    claimed_at: float | None = None    # when its node's claim was committed (it may start)
    moved_from: str | None = None      # nodes it was taken from unclaimed ("a,b")

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> "Run":
        """A row of ``SELECT <COLUMNS> FROM runs``, in the order of ``COLUMNS``."""
        (run_id, job, origin, kind, fire_time, attempt, target, state, node, token, due_at,
         created_at, started_at, finished_at, pid, exit_code, signal, log_path, reason,
         cancel_requested, assigned_at, claimed_at, moved_from) = row
        return cls(run_id, job, origin, kind, fire_time, attempt, target, RunState(state),
                   node, token, due_at, created_at, started_at, finished_at, pid,
                   exit_code, signal, log_path, reason, bool(cancel_requested),
                   assigned_at, claimed_at, moved_from)

    def row(self) -> tuple[Any, ...]:
        """The value as a ``runs`` row again (``from_row``'s inverse)."""
        return tuple(self.state.value if f.name == "state" else
                     int(self.cancel_requested) if f.name == "cancel_requested" else
                     getattr(self, f.name) for f in fields(self))

    @property
    def key(self) -> str:
        """``job/fire time/attempt``: what names this attempt to an operator
        and to the job (CRONRD_RUN_KEY)."""
        return f"{self.job}/{iso_utc(self.fire_time)}/{self.attempt}"

    def view(self) -> dict[str, Any]:
        """The run as the control socket and the CLI show it: stable field
        names, ISO 8601 UTC times. The one wire form of a run."""
        return {
            "run_id": self.run_id,
            "job": self.job,
            "kind": self.kind,
            "fire_time": iso_utc(self.fire_time),
            "attempt": self.attempt,
            "state": self.state.value,
            "node": self.node,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "started_at": iso_utc(self.started_at),
            "finished_at": iso_utc(self.finished_at),
            "log_path": self.log_path,
            "reason": self.reason,
            "due_at": iso_utc(self.due_at),
            "run_key": self.key,
            "claimed_at": iso_utc(self.claimed_at),
            "moved_from": self.moved_from.split(",") if self.moved_from else [],
        }


# The columns of a run, in the order ``Run.from_row`` reads them.
COLUMNS = tuple(f.name for f in fields(Run))
SELECT = f"SELECT {','.join(COLUMNS)} FROM runs"

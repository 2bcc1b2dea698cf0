"""One-off runs planned for a later time (`cronrd run-now JOB --at TIME`,
``PlanRun``): the SQL of ``planned_runs``.

A plan is replicated state, so it survives a leader's death: whichever node
leads at its time starts it (runtime/leader/planned.py proposes a
``ManualRun`` with its ``plan_id``), and apply removes the plan in the
same transaction that records the run: it starts once. Its run's
idempotency key is the plan's ``--key``, or ``plan-ID``: a start proposed
again (a timeout, a new leader) returns the run the first one made."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from ..schedule import iso_utc

MAX_PLANS = 10_000        # planned runs the cluster holds at once
MAX_PLANS_PER_JOB = 100   # ... and one job


@dataclass(frozen=True)
class Plan:
    plan_id: int
    job: str
    due: float
    params: dict[str, str]
    key: str
    by: str
    created_at: float

    @property
    def run_key(self) -> str:
        """The idempotency key its run gets."""
        return self.key or f"plan-{self.plan_id}"

    def view(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "job": self.job, "due": iso_utc(self.due),
                "params": self.params, "key": self.key, "by": self.by,
                "created_at": iso_utc(self.created_at)}


_COLS = "plan_id, job, due, params, key, by, created_at"


def _plan(row: tuple[Any, ...]) -> Plan:
    plan_id, job, due, params, key, by, created = row
    return Plan(plan_id, job, due, json.loads(params), key, by, created)


def add(conn: apsw.Connection, plan_id: int, job: str, due: float, params: dict[str, Any],
        key: str, by: str, at: float) -> Plan:
    conn.execute(f"INSERT INTO planned_runs({_COLS}) VALUES(?,?,?,?,?,?,?)",
                 (plan_id, job, due, json.dumps(params, sort_keys=True, separators=(",", ":")),
                  key, by, at))
    return Plan(plan_id, job, due, dict(params), key, by, at)


def get(conn: apsw.Connection, plan_id: int) -> Plan | None:
    for row in conn.execute(f"SELECT {_COLS} FROM planned_runs WHERE plan_id=?", (plan_id,)):
        return _plan(row)
    return None


def remove(conn: apsw.Connection, plan_id: int) -> None:
    conn.execute("DELETE FROM planned_runs WHERE plan_id=?", (plan_id,))


def remove_job(conn: apsw.Connection, job: str) -> int:
    """A removed job's plans go with it; how many there were."""
    n = count(conn, job)
    conn.execute("DELETE FROM planned_runs WHERE job=?", (job,))
    return n


def count(conn: apsw.Connection, job: str | None = None) -> int:
    sql = "SELECT COUNT(*) FROM planned_runs"
    args: tuple[str, ...] = ()
    if job is not None:
        sql, args = sql + " WHERE job=?", (job,)
    for (n,) in conn.execute(sql, args):
        return int(n)
    return 0


def plans(conn: apsw.Connection, job: str | None = None, limit: int = 1000) -> list[Plan]:
    """Plans by due time (``job``: its only)."""
    if job is None:
        rows = conn.execute(f"SELECT {_COLS} FROM planned_runs ORDER BY due, plan_id LIMIT ?",
                            (limit,))
    else:
        rows = conn.execute(f"SELECT {_COLS} FROM planned_runs WHERE job=? "
                            "ORDER BY due, plan_id LIMIT ?", (job, limit))
    return [_plan(r) for r in rows]


def due_by(conn: apsw.Connection, until: float, limit: int = 256) -> list[Plan]:
    """Plans due at or before ``until``, soonest first."""
    return [_plan(r) for r in conn.execute(
        f"SELECT {_COLS} FROM planned_runs WHERE due <= ? ORDER BY due, plan_id LIMIT ?",
        (until, limit))]


def soonest(conn: apsw.Connection) -> float | None:
    for (due,) in conn.execute("SELECT MIN(due) FROM planned_runs"):
        return None if due is None else float(due)
    return None

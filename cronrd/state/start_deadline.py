"""``start_deadline``: a run that could not start within it of its due time
is recorded ``skipped`` with reason ``start_deadline`` (Kubernetes'
``startingDeadlineSeconds``), whatever held it (its pool's slots, its
job's queue, its parents, no node up).

A scheduled (or catch-up) run is due at its fire time; any other run (a
manual run, a retry, a backfill run, a rerun) from when it was made. A fire
already past its deadline when it is committed is skipped at once (apply of
``Fire``); a run held afterwards is skipped by the leader's duty, which
proposes ``StartDeadline``, and apply decides again (it may have started).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from ..schedule import human_duration, iso_utc
from . import queries as Q
from ..model.run import COLUMNS, Run
from ..model.run_states import NOT_STARTED, sql_in

if TYPE_CHECKING:
    from ..jobspec import JobSpec

ON_TIME_KINDS = ("scheduled", "catchup", "upstream")
SCAN_LIMIT = 500  # runs proposed per pass at most


def due_time(run: Run) -> float:
    return float(run.fire_time) if run.kind in ON_TIME_KINDS else run.created_at


def expires(run: Run, spec: JobSpec | None) -> float | None:
    """When ``run`` is past its job's start_deadline (None: it has none)."""
    if spec is None or not spec.start_deadline:
        return None
    return due_time(run) + spec.start_deadline


def not_started(run: Run) -> bool:
    """Not started and no node may start it yet (a claimed run may be starting)."""
    return run.state.value in NOT_STARTED and run.claimed_at is None


def reason(run: Run, spec: JobSpec, *, at_fire: bool = False) -> str:
    assert spec.start_deadline is not None  # asked only of a run past its start_deadline
    held = f"; it waited: {run.reason}" if run.reason and run.state.value == "waiting" else ""
    what = "committed" if at_fire else "started"
    return (f"start_deadline: not {what} within {human_duration(spec.start_deadline)} of its "
            f"due time {iso_utc(due_time(run))}{held}")


def fire_reason(fire_time: int, spec: JobSpec | None, at: float) -> str | None:
    """A fire committed when its start_deadline has passed already: the skip
    reason (an outage's catch-up, a leader that was down)."""
    if spec is None or not spec.start_deadline or at < fire_time + spec.start_deadline:
        return None
    return (f"start_deadline: not started within {human_duration(spec.start_deadline)} of "
            f"its due time {iso_utc(fire_time)}")


def overdue(conn: apsw.Connection, now: float) -> list[int]:
    """Runs not started whose job's start_deadline has passed (the leader's
    duty, every second): read from the runs not started (few, by index
    runs_active) and their jobs' definitions in force, not from every job."""
    cols = ",".join(f"r.{c}" for c in COLUMNS)
    specs: dict[str, JobSpec | None] = {}

    out: list[int] = []
    for row in list(conn.execute(
            f"SELECT {cols} FROM runs r JOIN jobs j ON j.name = r.job "
            "JOIN specs s ON s.name = j.name AND s.digest = j.digest "
            f"WHERE r.{Q.ACTIVE_SQL} AND r.state IN {sql_in(NOT_STARTED)} "
            "AND r.claimed_at IS NULL "
            "AND instr(s.spec, '\"start_deadline\":') > 0 ORDER BY r.run_id")):
        run = Run.from_row(row)
        if run.job not in specs:
            specs[run.job] = Q.job_spec(conn, run.job)
        end = expires(run, specs[run.job])
        if end is not None and now >= end:
            out.append(run.run_id)
            if len(out) >= SCAN_LIMIT:
                break
    return out

"""Which run outcomes are events (state/events.py), decided inside apply.

Two hooks, both deterministic (everything comes from the run's record):

* ``on_final``: a run is its job's final outcome for its fire time (no retry
  follows; ``dependencies.parent_final`` calls it). ``failed`` for a run that
  ended failed, timed_out or lost (after its last retry; ``data.state`` says
  which), ``launch_failed`` for one its node could not start (failed, placed,
  never started), ``skipped`` for a skip (with the reason), ``recovered`` for
  the first success after a failure of the job.
* ``on_retry``: an attempt that failed, timed out or was lost gets another
  one: ``retrying`` (``launch_failed`` if it could not be started: the node
  is the problem, the operator hears of it at once).

A job is "failing" from its first ``failed`` or ``launch_failed`` event until
a run of it succeeds (table ``failing_jobs``): that success is the one
``recovered`` event, however many failures came before it. A ``run_on: all``
job fails and recovers on each node apart (its runs' ``target``).
"""

from __future__ import annotations

from typing import Any

import apsw

from . import events as EV
from . import versions as V
from ..model.run import SELECT as SELECT_RUNS, Run

FAILURES = ("failed", "timed_out", "lost")


def is_launch_failure(run: Run) -> bool:
    """A run its node was given but could not start (spawn, user, gate)."""
    return run.state == "failed" and run.node is not None and run.started_at is None


def _get(conn: apsw.Connection, run_id: int) -> Run | None:
    for row in conn.execute(f"{SELECT_RUNS} WHERE run_id=?", (run_id,)):
        return Run.from_row(row)
    return None


def _data(run: Run, **more: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"state": run.state.value, "attempt": run.attempt, "kind": run.kind,
         "node": run.node, "reason": run.reason, "exit_code": run.exit_code,
         "signal": run.signal, "started_at": run.started_at,
         "finished_at": run.finished_at}
    if run.target:
        d["target"] = run.target  # a run_on: all job's run on that node
    d.update(more)
    return d


def _failing(conn: apsw.Connection, run: Run, event_id: int, at: float) -> None:
    conn.execute("INSERT OR IGNORE INTO failing_jobs(job, target, event_id, since) "
                 "VALUES(?,?,?,?)", (run.job, run.target, event_id, at))


def on_final(conn: apsw.Connection, run_id: int, at: float) -> int | None:
    """The event (its id) of run ``run_id``'s final outcome, if it is one."""
    run = _get(conn, run_id)
    if run is None:
        return None
    state = run.state.value
    if state == "succeeded":
        for event_id, since in list(conn.execute(
                "SELECT event_id, since FROM failing_jobs WHERE job=? AND target=?",
                (run.job, run.target))):
            conn.execute("DELETE FROM failing_jobs WHERE job=? AND target=?",
                         (run.job, run.target))
            return EV.emit(conn, "recovered", job=run.job, at=at, fire_time=run.fire_time,
                           run_id=run.run_id,
                           data=_data(run, failing_since=since, failed_event=event_id))
        return None
    if state == "skipped":
        return EV.emit(conn, "skipped", job=run.job, at=at, fire_time=run.fire_time,
                       run_id=run.run_id, data=_data(run))
    if state in FAILURES:
        kind = "launch_failed" if is_launch_failure(run) else "failed"
        eid = EV.emit(conn, kind, job=run.job, at=at, fire_time=run.fire_time,
                      run_id=run.run_id, data=_data(run, final=True))
        _failing(conn, run, eid, at)
        if V.at_least(conn, V.FAILED_ALERT_EVENT):  # the alert it opened (state/alerts.py)
            # (the alert this very failure opened: one opened before, for an
            # earlier attempt or before the version, keeps its own)
            conn.execute("UPDATE alerts SET event_id=? WHERE job=? AND fire_time=? AND "
                         "kind='failed' AND event_id IS NULL AND opened_at=?",
                         (eid, run.job, run.fire_time, at))
        return eid
    return None


def on_retry(conn: apsw.Connection, run_id: int, retry_run_id: int, at: float) -> int | None:
    """Run ``run_id`` ended and ``retry_run_id`` is its next attempt."""
    run, retry = _get(conn, run_id), _get(conn, retry_run_id)
    if run is None or retry is None or run.state.value not in FAILURES:
        return None
    more = {"final": False, "retry_run_id": retry.run_id, "next_attempt": retry.attempt,
            "retry_at": retry.due_at}
    if is_launch_failure(run):
        eid = EV.emit(conn, "launch_failed", job=run.job, at=at, fire_time=run.fire_time,
                      run_id=run.run_id, data=_data(run, **more))
        _failing(conn, run, eid, at)
        return eid
    return EV.emit(conn, "retrying", job=run.job, at=at, fire_time=run.fire_time,
                   run_id=run.run_id, data=_data(run, **more))


def forget(conn: apsw.Connection, job
: str) -> None:
    """The job is removed: a job of that name made later has no failures to
    recover from."""
    conn.execute("DELETE FROM failing_jobs WHERE job=?", (job,))

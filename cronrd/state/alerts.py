"""Alerts and the dead letter, inside ``apply``.

An alert is keyed by (job, fire time, kind): the leader proposes the SLA
misses it finds (RaiseAlerts; decisions/sla.py) and ``apply`` keeps the
first, so a change of leader during a deadline gives one alert, never two.
A run that fails its last retry opens an alert of kind ``failed`` itself.
Each new alert records an event (state/events.py) for the notifiers.

An alert is ``open`` until acked (`cronrd alerts ack ID --note`), or
``resolved`` when a later run of the job succeeds (kinds ``failed``,
``failure_tolerance``, ``stale_after``: the job recovered), or, from cluster
version 2, when the run of its own fire time succeeds (kinds
``start_within``, ``finish_within``, ``finish_by``, ``max_runtime``: late,
but done; its note says which run, and the alert stays listed).

The dead letter: a run of a job with ``on_final_failure: dead_letter`` that
failed its last retry is marked as needing attention (a row of
``dead_letter``, not a lifecycle state) until an operator requeues it (a new
attempt of the same record, kind ``rerun``) or discards it with a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from . import events as EV
from . import versions as V
from . import seq as SEQ
from . import run_params as RP
from ..model.run_states import ACTIVE

if TYPE_CHECKING:
    from ..model.run import Run
    from . import commands as C
    from .effects import Effect
    from .writes import MachineWrites

ALERT_KINDS = ("failed",) + EV.SLA_KINDS
RECOVER = ("failed", "failure_tolerance", "stale_after")  # resolved by a later success
# resolved by the success of the run of their own fire time (versions.SLA_RESOLVED_BY_SUCCESS)
DONE_LATE = ("start_within", "finish_within", "finish_by", "max_runtime")
FINAL_FAILURES = ("failed", "timed_out", "lost")
MAX_DETAIL = 2000


def raise_alert(conn: apsw.Connection, *, job: str, fire_time: int, kind: str, detail: str, at: float,
                run_id: int | None = None) -> int | None:
    """Open the alert (job, fire_time, kind) unless it exists; its id if new."""
    if kind not in ALERT_KINDS:
        raise ValueError(f"unknown alert kind {kind!r}")
    alert_id = SEQ.peek(conn, "alert_seq", "alerts", "alert_id")
    conn.execute("INSERT OR IGNORE INTO alerts(alert_id, job, fire_time, kind, detail, "
                 "opened_at, state, note, by) VALUES(?,?,?,?,?,?,'open','','')",
                 (alert_id, job, fire_time, kind, str(detail)[:MAX_DETAIL], at))
    if not conn.changes():
        return None
    SEQ.taken(conn, "alert_seq", alert_id)
    if kind in DONE_LATE and V.at_least(conn, V.SLA_RESOLVED_BY_SUCCESS):
        done = succeeded_run(conn, job, fire_time)
        if done is not None:   # the miss was proposed before its run's success applied
            conn.execute("UPDATE alerts SET state='resolved', closed_at=?, note=? "
                         "WHERE alert_id=?",
                         (at, f"done late: run {done} of this fire time succeeded",
                          alert_id))
    if kind != "failed":  # (a failed run's own event is the notifiers' "failed")
        event = EV.emit(conn, f"sla_{kind}", job=job, at=at, fire_time=fire_time,
                        run_id=run_id, data={"alert_id": alert_id,
                                             "detail": str(detail)[:MAX_DETAIL]})
        conn.execute("UPDATE alerts SET event_id=? WHERE alert_id=?", (event, alert_id))
    return alert_id


def exists(conn: apsw.Connection, job: str, fire_time: int, kind: str) -> bool:
    for _ in conn.execute("SELECT 1 FROM alerts WHERE job=? AND fire_time=? AND kind=?",
                          (job, fire_time, kind)):
        return True
    return False


def succeeded_run(conn: apsw.Connection, job: str, fire_time: int) -> int | None:
    """The run (its id) that made fire time ``fire_time`` of ``job`` a
    success, when it is one: a run of it succeeded and the latest attempt
    of each of its records (each node's, for ``run_on: all``) did; else None."""
    best = None
    for run_id, state in conn.execute(
            "SELECT r.run_id, r.state FROM runs r WHERE r.job=? AND r.fire_time=? AND "
            "r.origin='schedule' AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.job=r.job AND n.fire_time=r.fire_time "
            "AND n.target=r.target AND n.origin=r.origin AND n.attempt > r.attempt)",
            (job, fire_time)):
        if state != "succeeded":
            return None
        best = run_id if best is None else max(best, run_id)
    return best


def on_final(sm: MachineWrites, run: Run, at: float) -> None:
    """``run`` is its record's final outcome (no retry follows)."""
    conn = sm.conn
    run = sm._get_run(run.run_id)
    state = run.state.value if hasattr(run.state, "value") else str(run.state)
    if state == "succeeded":
        if V.at_least(conn, V.SLA_RESOLVED_BY_SUCCESS) and \
                succeeded_run(conn, run.job, run.fire_time) is not None:
            # done late: every node's run of the fire time succeeded
            conn.execute("UPDATE alerts SET state='resolved', closed_at=?, note=? WHERE job=? "
                         f"AND fire_time=? AND state='open' AND kind IN {DONE_LATE!r}",
                         (at, f"done late: run {run.run_id} of this fire time succeeded",
                          run.job, run.fire_time))
        if run.target and next(iter(conn.execute(
                "SELECT 1 FROM failing_jobs WHERE job=? AND target!=? LIMIT 1",
                (run.job, run.target))), None) is not None:
            return  # run_on: all: another node still fails (state/run_events.py)
        conn.execute("UPDATE alerts SET state='resolved', closed_at=?, note=? WHERE job=? AND "
                     f"state='open' AND kind IN {tuple(RECOVER)!r}",
                     (at, f"recovered: run {run.run_id} succeeded", run.job))
        return
    if state not in FINAL_FAILURES:
        return
    raise_alert(conn, job=run.job, fire_time=run.fire_time, kind="failed", at=at,
                run_id=run.run_id,
                detail=f"attempt {run.attempt} {state}" + (f": {run.reason}" if run.reason
                                                           else "")
                + (f" (exit {run.exit_code})" if run.exit_code is not None else ""))
    spec = sm._job_spec(run.job)
    if spec is not None and spec.on_final_failure == "dead_letter":
        conn.execute("INSERT OR IGNORE INTO dead_letter(run_id, job, fire_time, at, state, "
                     "note, by) VALUES(?,?,?,?,'open','','')",
                     (run.run_id, run.job, run.fire_time, at))
        if conn.changes():
            EV.emit(conn, "dead_lettered", job=run.job, at=at, fire_time=run.fire_time,
                    run_id=run.run_id, data={"attempt": run.attempt, "state": state})


def ack(conn: apsw.Connection, alert_id: int, note: str, who: str, at: float,
        refused: type[Exception]) -> dict[str, Any]:
    row = next(iter(conn.execute("SELECT state FROM alerts WHERE alert_id=?", (alert_id,))),
               None)
    if row is None:
        raise refused(f"no alert with id {alert_id}; `cronrd alerts --all` lists them")
    if row[0] != "open":
        raise refused(f"alert {alert_id} is {row[0]} already; only an open alert is acked")
    conn.execute("UPDATE alerts SET state='acked', note=?, by=?, closed_at=? WHERE alert_id=?",
                 (str(note)[:1000], str(who), at, alert_id))
    return {"alert_id": alert_id, "state": "acked"}


def dead_letter_action(sm: MachineWrites, index: int, cmd: C.DeadLetterAction,
                       refused: type[Exception], effects: list[Effect]) -> dict[str, Any]:
    """Requeue (a new attempt of the same record) or discard a dead-lettered run."""
    from .effects import RunPending
    conn = sm.conn
    row = next(iter(conn.execute("SELECT job, fire_time, state FROM dead_letter WHERE "
                                 "run_id=?", (cmd.run_id,))), None)
    if row is None:
        raise refused(f"run {cmd.run_id} is not in the dead letter; `cronrd dead-letter list` "
                      "lists what is")
    job, fire_time, state = row
    if state != "open":
        raise refused(f"run {cmd.run_id} was {state} already")
    if cmd.action == "discard":
        conn.execute("UPDATE dead_letter SET state='discarded', note=?, by=?, closed_at=? "
                     "WHERE run_id=?", (str(cmd.note)[:1000], str(cmd.who), cmd.at,
                                        cmd.run_id))
        return {"run_id": cmd.run_id, "state": "discarded", "job": job}
    if cmd.action != "requeue":
        raise refused("dead letter action is requeue or discard")
    old = sm._get_run(cmd.run_id)
    if sm._job_spec(job) is None:
        raise refused(f"job {job!r} is no longer defined; discard the run instead")
    last = next(iter(conn.execute(
        "SELECT attempt, state FROM runs WHERE job=? AND fire_time=? AND origin=? AND "
        "target=? ORDER BY attempt DESC LIMIT 1", (job, fire_time, old.origin, old.target))))
    if last[1] in ACTIVE:
        raise refused(f"job {job!r} at that fire time has attempt {last[0]} {last[1]} "
                      "already; wait for it to end")
    # The job's concurrency, as for a rerun (a rerun's gate never skips it).
    job_row = sm._job(job)
    assert job_row is not None  # _job_spec found it just above
    why = sm._admit(index, job_row, cmd.at, effects)
    if why is not None:
        raise refused(f"run {cmd.run_id} not requeued: {why}; wait for the active run to "
                      f"finish (`cronrd runs {job} --state running`)")
    hold = sm._queue_hold(job, old.target, fire_time)
    if hold is not None and hold.skip is not None:
        raise refused(f"run {cmd.run_id} not requeued: {hold.skip}; wait for the queue to "
                      f"drain (`cronrd runs {job} --state waiting`)")
    if hold is not None and hold.wait is not None:  # queued, by its fire time
        run = sm._enqueue(index, job=job, origin=old.origin, kind="rerun",
                          fire_time=fire_time, attempt=last[0] + 1, due_at=cmd.at, at=cmd.at,
                          reason=hold.wait, target=old.target)
    else:
        run = sm._insert_run(index, job=job, origin=old.origin, kind="rerun",
                             fire_time=fire_time, attempt=last[0] + 1, state="pending",
                             node=None, due_at=cmd.at, at=cmd.at, target=old.target,
                             reason=f"requeued from the dead letter by {cmd.who}" if cmd.who
                             else "requeued from the dead letter")
        effects.append(RunPending(run=run))
    RP.carry(conn, cmd.run_id, run.run_id)
    conn.execute("UPDATE dead_letter SET state='requeued', note=?, by=?, closed_at=?, "
                 "requeue_run_id=? WHERE run_id=?", (str(cmd.note)[:1000], str(cmd.who),
                                                     cmd.at, run.run_id, cmd.run_id))
    return {"run_id": cmd.run_id, "state": "requeued", "new_run_id": run.run_id,
            "attempt": last[0] + 1, "job": job}


# -- reads ---------------------------------------------------------------------------
_ALERT_COLS = ("alert_id", "job", "fire_time", "kind", "detail", "opened_at", "state", "note",
               "by", "closed_at", "event_id")


def alerts(conn: apsw.Connection, *, include_closed: bool = False, job: str | None = None,
           limit: int = 100, before: int | None = None) -> list[dict[str, Any]]:
    where: list[str] = []
    args: list[Any] = []
    if before is not None:  # pages back (the API's cursor)
        where.append("alert_id<?")
        args.append(before)
    if not include_closed:
        where.append("state='open'")
    if job is not None:
        where.append("job=?")
        args.append(job)
    sql = (f"SELECT {', '.join(_ALERT_COLS)} FROM alerts"
           + (f" WHERE {' AND '.join(where)}" if where else "")
           + " ORDER BY alert_id DESC LIMIT ?")
    return [dict(zip(_ALERT_COLS, r)) for r in conn.execute(sql, (*args, limit))]


_DL_COLS = ("run_id", "job", "fire_time", "at", "state", "note", "by", "closed_at",
            "requeue_run_id")


def dead_letters(conn: apsw.Connection, *, include_closed: bool = False, limit: int = 100,
                 before: int | None = None) -> list[dict[str, Any]]:
    where = ([] if include_closed else ["state='open'"]) + \
        (["run_id<?"] if before is not None else [])
    sql = (f"SELECT {', '.join(_DL_COLS)} FROM dead_letter"
           + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY run_id DESC LIMIT ?")
    return [dict(zip(_DL_COLS, r)) for r in conn.execute(
        sql, ((before,) if before is not None else ()) + (limit,))]


def prune(conn: apsw.Connection, before
: float) -> None:
    """Closed alerts and dead letters older than ``before``; and open alerts
    but the newest of each job and kind (it still shows the job failing, or
    late) whose fire time's records were pruned (a ``failed`` one) or that
    are older than ``before``: a job failing every minute would otherwise
    keep 1,440 open alerts a day for ever."""
    conn.execute("DELETE FROM alerts WHERE state!='open' AND closed_at < ?", (before,))
    conn.execute(
        "DELETE FROM alerts WHERE state='open' AND (opened_at < ? OR (kind='failed' AND "
        "NOT EXISTS (SELECT 1 FROM runs r WHERE r.job=alerts.job AND "
        "r.fire_time=alerts.fire_time))) AND alert_id < (SELECT MAX(a.alert_id) FROM "
        "alerts a WHERE a.job=alerts.job AND a.kind=alerts.kind)", (before,))
    conn.execute("DELETE FROM dead_letter WHERE state!='open' AND closed_at < ?", (before,))

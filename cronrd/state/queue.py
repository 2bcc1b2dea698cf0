"""``concurrency: queue`` in the replicated state: the queue of each job.

A run of a queued job that is committed while another run of the job (and
target: a per-node job queues per node) is pending, assigned, running or
waiting is held: state ``waiting``, a row in ``run_queue``, and a reason
naming the run directly ahead of it. The command that ends the last run in
flight releases the first waiting one in fire-time order to ``pending``
(the leader places it, by ``run_on``, on any eligible node), so the
decision "this run may start now" is made once, in the log, by ``apply``.

The decisions are pure (decisions/overlap.py: ``hold``, ``release``); this
module reads and writes the rows they are about. All SQL lives in state/.
"""

from __future__ import annotations

import apsw

from ..decisions import overlap
from ..model.run import SELECT as SELECT_RUNS, Run
from ..model.run_states import ACTIVE, RunState, TRANSITIONS, sql_in

# The runs_live_job partial index's term (schema.py): a query repeats it to use it.
_LIVE = f"state IN {sql_in(ACTIVE)}"
_WAITING = RunState.WAITING.value


def in_flight(conn: apsw.Connection, job: str, target: str) -> list[Run]:
    """The job's runs (of ``target``) pending, assigned or running (or
    released from the queue and waiting for their pool), oldest first."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE {_LIVE} AND job=? AND target=? AND (state != '{_WAITING}' "
        "OR run_id IN (SELECT run_id FROM pool_runs WHERE waiting=1)) "
        "ORDER BY run_id", (job, target))]


def queued(conn: apsw.Connection, job: str, target: str) -> list[Run]:
    """The job's runs (of ``target``) waiting in its queue, in the order
    they start: by fire time (a manual run's is when it was asked for)."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE run_id IN (SELECT run_id FROM run_queue WHERE job=? AND "
        "target=?) ORDER BY fire_time, run_id", (job, target))]


def all_queued(conn: apsw.Connection, job: str) -> list[Run]:
    """Every waiting run of the job in its queues (all targets), in order."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE run_id IN (SELECT run_id FROM run_queue WHERE job=?) "
        "ORDER BY target, fire_time, run_id", (job,))]


def has_queue(conn: apsw.Connection, job: str, target: str) -> bool:
    for _ in conn.execute("SELECT 1 FROM run_queue WHERE job=? AND target=? LIMIT 1",
                          (job, target)):
        return True
    return False


def _ahead_of(run: Run) -> overlap.Ahead:
    state = run.state.value
    at = (run.started_at if state == "running" else
          run.fire_time if state == _WAITING else run.due_at)
    return overlap.Ahead(run.run_id, state, at)


def hold(conn: apsw.Connection, job: str, target: str, fire_time: int,
         max_queued: int) -> overlap.Decision:
    """May a new run of ``job`` at ``fire_time`` start (``Decision()``), or
    must it wait (``wait``), or is the queue full (``skip``)?"""
    waiting = queued(conn, job, target)
    flying = in_flight(conn, job, target)
    before = [r for r in waiting if r.fire_time <= fire_time]
    ahead = before[-1] if before else flying[-1] if flying else None
    return overlap.hold(None if ahead is None else _ahead_of(ahead), len(waiting),
                        max_queued)


def enqueue(conn: apsw.Connection, run: Run) -> None:
    conn.execute("INSERT INTO run_queue(run_id, job, target, fire_time) VALUES(?,?,?,?)",
                 (run.run_id, run.job, run.target, run.fire_time))


def dequeue(conn: apsw.Connection, run_id: int) -> bool:
    """Take a run out of its queue (it was released or ended); was it there?"""
    conn.execute("DELETE FROM run_queue WHERE run_id=?", (run_id,))
    return bool(conn.changes())


def to_pending(conn: apsw.Connection, run: Run, at: float, reason: str) -> None:
    """Release a waiting run: the leader places it now; it is not due
    before its own time, nor before ``at`` (it was held until then)."""
    assert RunState.PENDING.value in TRANSITIONS[run.state.value]
    conn.execute("UPDATE runs SET state='pending', node=NULL, token=NULL, due_at=?, "
                 "reason=? WHERE run_id=?", (max(run.due_at or at, at), reason, run.run_id))
    dequeue(conn, run.run_id)


def refresh_reasons(conn: apsw.Connection, job: str, target: str) -> None:
    """Each waiting run names the run directly ahead of it: rewritten
    where that changed (a run ahead started, ended or was cancelled)."""
    waiting = queued(conn, job, target)
    if not waiting:
        return
    flying = in_flight(conn, job, target)
    ahead = flying[-1] if flying else None
    for run in waiting:
        if ahead is not None:
            reason = overlap.waiting_reason(_ahead_of(ahead))
            if reason != run.reason:
                conn.execute("UPDATE runs SET reason=? WHERE run_id=?", (reason, run.run_id))
        ahead = run

"""Dependencies inside ``apply``: the gates of child jobs, evaluated when a
parent's final outcome is committed (so a leader change can neither miss a
child nor start it twice), when a scheduled child's fire is applied, and
when its wait for its parents runs out.

The state keeps, per child, the parents in force (``job_deps``, derived from
its definition), the parent run it consumed last (``dep_cursors``) and, per
child run, which parent runs it consumed (``run_lineage``). The rule itself
is pure: ``decisions/dependencies.py``.

A parent's outcome is new to a child from when it is committed until the
child consumes it (``dep_cursors.new_run_id``: the newest, in commit order,
whatever order its runs started in). An ``@after`` child's run is keyed like
every scheduled run, by (child, fire time), its fire time the newest of its
parents' fire times in the generation; a generation whose fire time has a
record already is a new attempt of it (a parent's rerun), or, while that
record is still active, is absorbed by it (its lineage says so). Called by
the state machine only.

A child with ``concurrency: queue`` passes its gate first, then its queue:
a run whose gate opens while a run of the child is in flight waits in the
queue (state/queue.py). Both holds are state ``waiting``; a run in
``run_queue`` waits for its turn, any other waiting run for its parents
(``UPSTREAM_WAIT``), and each hold ends only its own kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ..decisions import dependencies as D
from ..schedule import parse_schedule
from . import downstream as DS
from .effects import RunAssigned, RunDone, RunPending
from . import queue as QU
from . import run_events as RE
from ..model.run import SELECT as SELECT_RUNS, Run
from ..model.run_states import ACTIVE, FINAL, sql_in

if TYPE_CHECKING:
    from ..jobspec import JobSpec
    from . import commands as C
    from .effects import Effect
    from .writes import MachineWrites

ACTIVE_SQL = f"state IN {sql_in(ACTIVE)}"  # the runs_active index's predicate
# A run waiting for its parents: state waiting, and not one of the runs that
# wait in their job's queue (concurrency: queue, run_queue; state/queue.py).
UPSTREAM_WAIT = ("state='waiting' AND run_id NOT IN (SELECT run_id FROM run_queue) AND "
                 "run_id NOT IN (SELECT run_id FROM pool_runs WHERE waiting=1) AND "
                 "run_id NOT IN (SELECT run_id FROM watch_waits)")   # (a watch's: its ping)
MAX_DEPTH = 64  # skips propagated down a chain in one apply at most


def is_after(spec: "JobSpec") -> bool:
    try:
        return parse_schedule(spec.schedule).kind == "after"
    except Exception:
        return False


# -- the parents in force ----------------------------------------------------------
def sync_parents(sm: "MachineWrites", name: str) -> None:
    """Make ``job_deps`` and ``dep_cursors`` follow job ``name``'s definition
    (after it was created, changed or removed). A parent new to the child
    counts only outcomes committed from now on (a new dependency is not
    fired by history)."""
    conn = sm.conn
    spec = sm._job_spec(name)
    parents = sorted({d.job for d in spec.depends_on}) if spec is not None else []
    have = [p for (p,) in conn.execute("SELECT parent FROM job_deps WHERE child=? "
                                       "ORDER BY parent", (name,))]
    if have == parents:
        return
    conn.execute("DELETE FROM job_deps WHERE child=?", (name,))
    if not parents:
        conn.execute("DELETE FROM dep_cursors WHERE child=?", (name,))
        return
    for parent in parents:
        conn.execute("INSERT INTO job_deps(parent, child) VALUES(?, ?)", (parent, name))
        conn.execute("INSERT OR IGNORE INTO dep_cursors(child, parent, run_id) VALUES(?,?,0)",
                     (name, parent))
    conn.execute("DELETE FROM dep_cursors WHERE child=? AND parent NOT IN "
                 "(SELECT parent FROM job_deps WHERE child=?)", (name, name))


# -- what a child sees of its parents ------------------------------------------------
# A fresh success: the parent's newest succeeded run by when it ended, if that
# was at or after the cutoff -- one step down the runs_succeeded index (schema.py),
# however many other records the parent has.
_FRESH = ("SELECT run_id, fire_time, state FROM runs WHERE job=? AND state='succeeded' "
          "AND finished_at>=? ORDER BY finished_at DESC, run_id DESC LIMIT 1")


def parents_view(sm: "MachineWrites", child: str, spec: "JobSpec", at: float) -> list[D.Parent]:
    return parents_of(sm.conn, child, spec, at)


def parents_of(conn: apsw.Connection, child: str, spec: "JobSpec", at: float) -> list[D.Parent]:
    """What child ``child`` sees of each parent at ``at``: its newest outcome
    not consumed yet, and a success within its ``within`` window (read only:
    `cronrd explain` asks it too)."""
    out: list[D.Parent] = []
    for dep in spec.depends_on:
        new = next((D.Outcome(*r) for r in conn.execute(
            "SELECT r.run_id, r.fire_time, r.state FROM dep_cursors c JOIN runs r ON "
            "r.run_id = c.new_run_id WHERE c.child=? AND c.parent=?", (child, dep.job))), None)
        fresh = None
        if dep.within is not None:
            fresh = next((D.Outcome(*r) for r in conn.execute(
                _FRESH, (dep.job, at - dep.within))), None)
        out.append(D.Parent(dep.job, new, fresh))
    return out


def _consume(sm: "MachineWrites", child: str, gate: D.Gate, run_id: int | None) -> None:
    for parent, outcome in gate.consume:
        sm.conn.execute("UPDATE dep_cursors SET run_id=?, new_run_id=NULL WHERE child=? AND "
                        "parent=? AND new_run_id=?", (outcome.run_id, child, parent,
                                                      outcome.run_id))
    if run_id is not None:
        for parent, outcome in gate.lineage:
            sm.conn.execute("INSERT OR IGNORE INTO run_lineage(run_id, parent_job, "
                            "parent_run_id) VALUES(?,?,?)", (run_id, parent, outcome.run_id))


def _blocked_state(spec: "JobSpec", gate: D.Gate) -> str:
    """The final state of a run its upstream keeps from running."""
    if gate.action == D.SKIP:
        return "skipped"  # a skip propagates as a skip
    return "failed" if spec.on_upstream_failure == "fail" else "skipped"


def _held(sm: "MachineWrites", name: str, spec: "JobSpec") -> str | None:
    """Why a child that may run does not (paused, maintenance, disabled)."""
    job = sm._job(name)
    if job is not None and job["paused"]:
        return "paused: `cronrd resume` re-enables the job"
    reason = sm._maintenance_reason()
    if reason is None and not spec.enabled:
        reason = "disabled: enabled is false in the job file"
    return reason


def _record_final(sm: "MachineWrites", index: int, *, job: str, kind: str, fire_time: int,
                  attempt: int, state: str, reason: str, at: float, target: str = "") -> Run:
    run = sm._insert_run(index, job=job, origin="schedule", kind=kind, fire_time=fire_time,
                         attempt=attempt, state=state, node=None, due_at=None, at=at,
                         reason=reason, target=target)
    sm.conn.execute("UPDATE runs SET finished_at=? WHERE run_id=?", (at, run.run_id))
    return run


# -- a parent's outcome is final -----------------------------------------------------
def parent_final(sm: "MachineWrites", index: int, parent: str, run_id: int, at: float,
                 effects: list[Effect], depth: int = 0) -> None:
    """``parent``'s run ``run_id`` ended and no retry follows: once that is
    the parent's final outcome for the fire time (``fire_time_outcome``: a
    per-node run waits for its fire time's other nodes' runs), it is the
    newest outcome new to each child; evaluate the gate of each child (in
    name order: the same on every node)."""
    RE.on_final(sm.conn, run_id, at)  # failed, skipped, recovered...: an event
    if depth > MAX_DEPTH:
        return
    outcome_id = fire_time_outcome(sm.conn, run_id)
    if outcome_id is None:
        return
    sm.conn.execute("UPDATE dep_cursors SET new_run_id=? WHERE parent=?", (outcome_id, parent))
    # a --downstream rerun's children follow it there, and consume it
    handled = DS.on_final(sm, index, parent, outcome_id, at, effects)
    children = [c for (c,) in sm.conn.execute(
        "SELECT child FROM job_deps WHERE parent=? ORDER BY child", (parent,))
                if c not in handled]
    for child in children:
        spec = sm._job_spec(child)
        if spec is None or not spec.depends_on:
            continue
        if is_after(spec):
            _after_child(sm, index, child, spec, at, effects, depth)
        else:
            for row in list(sm.conn.execute(
                    f"{SELECT_RUNS} WHERE {ACTIVE_SQL} AND {UPSTREAM_WAIT} AND job=? "
                    "ORDER BY run_id", (child,))):
                run = Run.from_row(row)
                if waits_for_upstream(sm.conn, run.run_id):  # (its group may have gone)
                    resolve_waiting(sm, index, run, spec, at, effects, depth,
                                    timed_out=False)


def fire_time_outcome(conn: apsw.Connection, run_id: int) -> int | None:
    """The run that is the job's final outcome for the fire time run
    ``run_id`` ended (no retry follows), or None while there is none yet.

    A run of one record per fire time is that outcome. A per-node run
    (``run_on: all``, target set) is one of a group: the group's outcome is
    final when the last attempt of every node's run of that fire time has
    ended, and is the worst of them (decisions/dependencies.py: ``worst``),
    so a child sees one outcome per fire time, not one per node. A node's
    run whose fire was committed after all the others had ended (a new
    leader completing the fire) comes after the outcome was delivered: it
    is not a second one."""
    row = next(iter(conn.execute("SELECT job, origin, fire_time, target FROM runs "
                                 "WHERE run_id=?", (run_id,))), None)
    if row is None or not row[3]:
        return run_id
    job, origin, fire_time, target = row
    # (the literal origin: runs_key is partial on origin = 'schedule')
    origin_sql = "origin='schedule'" if origin == "schedule" else "origin='manual'"
    latest: dict[str, tuple[int, str]] = {}
    others: list[int] = []
    for rid, tgt, state in conn.execute(
            f"SELECT run_id, target, state FROM runs WHERE job=? AND {origin_sql} AND "
            "fire_time=? AND target!='' ORDER BY target, attempt", (job, fire_time)):
        latest[tgt] = (rid, state)
        if tgt != target:
            others.append(rid)
    if any(state not in FINAL for _rid, state in latest.values()):
        return None  # a node's run of this fire time has not ended yet
    if others and _delivered(conn, job, others):
        return None
    return D.worst([D.Outcome(rid, fire_time, state)
                    for rid, state in latest.values()]).run_id


def _delivered(conn: apsw.Connection, parent: str, run_ids: list[int]) -> bool:
    """Was one of these runs of ``parent`` delivered to a child as an
    outcome (new to it, consumed by it, or in a run's lineage)?"""
    marks = ",".join("?" * len(run_ids))
    for _ in conn.execute(
            f"SELECT 1 FROM dep_cursors WHERE parent=? AND (run_id IN ({marks}) OR "
            f"new_run_id IN ({marks})) LIMIT 1", (parent, *run_ids, *run_ids)):
        return True
    for _ in conn.execute(f"SELECT 1 FROM run_lineage WHERE parent_run_id IN ({marks}) "
                          "AND parent_job=? LIMIT 1", (*run_ids, parent)):
        return True
    return False


def _after_child(sm: "MachineWrites", index: int, child: str, spec: "JobSpec", at: float,
                 effects: list[Effect], depth: int) -> None:
    gate = D.decide(spec.trigger_rule, parents_view(sm, child, spec, at))
    if gate.action == D.WAIT:
        return
    fire_time = gate.fire_time if gate.fire_time is not None else int(at)
    rows = list(sm.conn.execute(
        "SELECT run_id, attempt, state FROM runs WHERE job=? AND origin='schedule' AND "
        "fire_time=? AND target='' ORDER BY attempt DESC LIMIT 1", (child, fire_time)))
    if rows and rows[0][2] not in FINAL:
        _consume(sm, child, gate, rows[0][0])  # absorbed by the attempt in progress
        return
    attempt = rows[0][1] + 1 if rows else 1
    if gate.action == D.FIRE:
        held = _held(sm, child, spec)
        hold = sm._queue_hold(child, "", fire_time, spec) if held is None else None
        if hold is not None and hold.skip is not None:
            held = hold.skip  # concurrency: queue, and its queue is full
        elif hold is not None and hold.wait is not None:
            # concurrency: queue with a run of it in flight: it waits its turn
            run = sm._enqueue(index, job=child, origin="schedule", kind="upstream",
                              fire_time=fire_time, attempt=attempt, due_at=at, at=at,
                              reason=hold.wait, target="")
            _consume(sm, child, gate, run.run_id)
            return
        if held is None:
            run = sm._insert_run(index, job=child, origin="schedule", kind="upstream",
                                 fire_time=fire_time, attempt=attempt, state="pending",
                                 node=None, due_at=at, at=at)
            _consume(sm, child, gate, run.run_id)
            effects.append(RunPending(run=run))
            return
        run = _record_final(sm, index, job=child, kind="upstream", fire_time=fire_time,
                            attempt=attempt, state="skipped", reason=held, at=at)
    else:
        run = _record_final(sm, index, job=child, kind="upstream", fire_time=fire_time,
                            attempt=attempt, state=_blocked_state(spec, gate),
                            reason=gate.reason, at=at)
    _consume(sm, child, gate, run.run_id)
    parent_final(sm, index, child, run.run_id, at, effects, depth + 1)


# -- a scheduled child --------------------------------------------------------------
def scheduled_fire(sm: "MachineWrites", index: int, cmd: C.Fire, spec: "JobSpec",
                   effects: list[Effect]) -> dict[str, Any]:
    """A scheduled child's fire (not skipped otherwise): run it if its gate
    is open, else hold it ``waiting`` (wait_for_upstream), else record why not."""
    if cmd.target:
        done = _like_sibling(sm, index, cmd, effects)
        if done is not None:
            return done
    gate = D.decide(spec.trigger_rule, parents_view(sm, cmd.job, spec, cmd.at),
                    need_new=False)
    if gate.action == D.FIRE:
        queued = _enqueue_if_held(sm, index, cmd, spec)
        if queued is not None:
            _consume(sm, cmd.job, gate, queued["run_id"])
            return queued
        run = sm._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                             fire_time=cmd.fire_time, attempt=1, state="assigned",
                             node=cmd.node, due_at=cmd.due_at, at=cmd.at, target=cmd.target)
        _consume(sm, cmd.job, gate, run.run_id)
        effects.append(RunAssigned(run=run))
        return {"run_id": run.run_id, "state": "assigned"}
    if gate.action == D.WAIT and spec.wait_for_upstream > 0:
        run = sm._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                             fire_time=cmd.fire_time, attempt=1, state="waiting", node=None,
                             due_at=cmd.due_at, at=cmd.at, reason=gate.reason,
                             target=cmd.target)
        return {"run_id": run.run_id, "state": "waiting", "reason": gate.reason}
    state = "skipped" if gate.action == D.WAIT and spec.on_upstream_failure == "skip" \
        else _blocked_state(spec, gate)
    run = _record_final(sm, index, job=cmd.job, kind=cmd.kind, fire_time=cmd.fire_time,
                        attempt=1, state=state, reason=gate.reason, at=cmd.at,
                        target=cmd.target)
    if gate.action != D.WAIT:
        _consume(sm, cmd.job, gate, run.run_id)
    parent_final(sm, index, cmd.job, run.run_id, cmd.at, effects, 1)
    return {"run_id": run.run_id, "state": state, "reason": gate.reason}


def _enqueue_if_held(sm: "MachineWrites", index: int, cmd: C.Fire,
                     spec: "JobSpec | None") -> dict[str, Any] | None:
    """A fire whose gate is open, of a ``concurrency: queue`` job with a run
    in flight: it waits in the queue (the bound was checked at the fire)."""
    hold = sm._queue_hold(cmd.job, cmd.target, cmd.fire_time, spec, bounded=False)
    if hold is None or hold.wait is None:
        return None
    run = sm._enqueue(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                      fire_time=cmd.fire_time, due_at=cmd.due_at, at=cmd.at,
                      reason=hold.wait, target=cmd.target)
    return {"run_id": run.run_id, "state": "waiting", "reason": hold.wait}


def _like_sibling(sm: "MachineWrites", index: int, cmd: C.Fire,
                  effects: list[Effect]) -> dict[str, Any] | None:
    """A per-node run (run_on: all) of a fire time another node's run of
    which had its gate looked at already: the same decision, the same
    lineage (the first one consumed the parents' outcomes for them all)."""
    for rid, state, reason in sm.conn.execute(
            "SELECT run_id, state, reason FROM runs WHERE job=? AND origin='schedule' AND "
            "fire_time=? AND attempt=1 AND target!=? ORDER BY run_id", (cmd.job, cmd.fire_time,
                                                                      cmd.target)):
        consumed = list(sm.conn.execute("SELECT parent_job, parent_run_id FROM run_lineage "
                                        "WHERE run_id=?", (rid,)))
        upstream = (reason or "").startswith("upstream_")
        if state == "waiting" and waits_for_upstream(sm.conn, rid):
            run = sm._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                 fire_time=cmd.fire_time, attempt=1, state="waiting",
                                 node=None, due_at=cmd.due_at, at=cmd.at, reason=reason,
                                 target=cmd.target)
            return {"run_id": run.run_id, "state": "waiting", "reason": reason}
        if state in FINAL and upstream:
            run = _record_final(sm, index, job=cmd.job, kind=cmd.kind,
                                fire_time=cmd.fire_time, attempt=1, state=state,
                                reason=reason, at=cmd.at, target=cmd.target)
            return {"run_id": run.run_id, "state": state, "reason": reason}
        if consumed:
            done = _enqueue_if_held(sm, index, cmd, sm._job_spec(cmd.job))
            if done is None:
                run = sm._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                     fire_time=cmd.fire_time, attempt=1, state="assigned",
                                     node=cmd.node, due_at=cmd.due_at, at=cmd.at,
                                     target=cmd.target)
                effects.append(RunAssigned(run=run))
                done = {"run_id": run.run_id, "state": "assigned"}
            sm.conn.executemany("INSERT OR IGNORE INTO run_lineage(run_id, parent_job, "
                                "parent_run_id) VALUES(?,?,?)",
                                [(done["run_id"], p, prid) for p, prid in consumed])
            return done
    return None


def resolve_waiting(sm: "MachineWrites", index: int, run: Run, spec: "JobSpec", at: float,
                    effects: list[Effect], depth: int = 0, *, timed_out: bool) -> str:
    """Look at a waiting run's gate again: release it (pending: the leader
    places it), end it (skipped or failed, with the reason), or, unless its
    wait is over (``timed_out``), leave it waiting. The other nodes' runs of
    the same fire time (run_on: all) that wait go with it. Its new state."""
    gate = D.decide(spec.trigger_rule, parents_view(sm, run.job, spec, at), need_new=False)
    group = [rid for (rid,) in sm.conn.execute(
        f"SELECT run_id FROM runs WHERE {ACTIVE_SQL} AND {UPSTREAM_WAIT} AND job=? AND "
        "fire_time=? AND origin=? ORDER BY run_id", (run.job, run.fire_time, run.origin))]
    held = _held(sm, run.job, spec) if gate.action == D.FIRE else None
    if held is not None:  # paused or disabled while it waited
        gate = D.Gate(D.SKIP, held, gate.consume, gate.lineage)
    if gate.action == D.FIRE:
        _consume(sm, run.job, gate, None)
        for rid in group:
            _consume(sm, run.job, D.Gate(D.FIRE, lineage=gate.lineage), rid)
            one = sm._get_run(rid)
            # concurrency: queue with a run of it in flight: on to the queue
            # (admitted against max_queued at its fire time)
            hold = sm._queue_hold(one.job, one.target, one.fire_time, spec, bounded=False)
            if hold is not None and hold.wait is not None:
                sm.conn.execute("UPDATE runs SET reason=? WHERE run_id=?", (hold.wait, rid))
                QU.enqueue(sm.conn, sm._get_run(rid))
                QU.refresh_reasons(sm.conn, one.job, one.target)
                continue
            sm.conn.execute("UPDATE runs SET state='pending', reason=NULL WHERE run_id=?",
                            (rid,))
            effects.append(RunPending(run=sm._pool_gate(sm._get_run(rid))))
        return sm._get_run(run.run_id).state.value
    if gate.action == D.WAIT and not timed_out:
        if gate.reason != run.reason:
            for rid in group:
                sm.conn.execute("UPDATE runs SET reason=? WHERE run_id=?", (gate.reason, rid))
        return "waiting"
    if gate.action == D.WAIT:
        state = "failed" if spec.on_upstream_failure == "fail" else "skipped"
        reason = f"{gate.reason} (waited {spec.wait_for_upstream:g}s: wait_for_upstream)"
    else:
        state, reason = _blocked_state(spec, gate), gate.reason
        _consume(sm, run.job, gate, None)
    for rid in group:
        sm.conn.execute("UPDATE runs SET state=?, finished_at=?, reason=? WHERE run_id=?",
                        (state, at, reason, rid))
        effects.append(RunDone(run=sm._get_run(rid)))
        parent_final(sm, index, run.job, rid, at, effects, depth + 1)
    return state


def waits_for_upstream(conn: apsw.Connection, run_id: int) -> bool:
    """Is run ``run_id`` waiting for its parents (not in its job's queue)?"""
    for _ in conn.execute(f"SELECT 1 FROM runs WHERE run_id=? AND {UPSTREAM_WAIT}",
                          (run_id,)):
        return True
    return False


def waiting_due(conn: apsw.Connection, now: float) -> list[tuple[int, float]]:
    """(run id, when its wait ends) of the waiting runs whose wait is over:
    the leader proposes an UpstreamTimeout for each."""
    from .queries import job_spec
    out: list[tuple[int, float]] = []
    for run_id, job, due_at in list(conn.execute(
            f"SELECT run_id, job, due_at FROM runs WHERE {ACTIVE_SQL} AND {UPSTREAM_WAIT} "
            "ORDER BY run_id")):
        spec = job_spec(conn, job)
        end = (due_at or 0) + (spec.wait_for_upstream if spec is not None else 0)
        if end <= now:
            out.append((run_id, end))
    return out


def lineage(conn: apsw.Connection, run_id: int) -> list[dict[str, Any]]:
    """Which parent runs a run consumed: [{job, run_id, fire_time, state}]."""
    from ..schedule import iso_utc
    return [{"job": job, "run_id": prid, "fire_time": iso_utc(ft), "state": st}
            for job, prid, ft, st in conn.execute(
                "SELECT l.parent_job, l.parent_run_id, r.fire_time, r.state FROM run_lineage l "
                "LEFT JOIN runs r ON r.run_id = l.parent_run_id WHERE l.run_id=? "
                "ORDER BY l.parent_job", (run_id,))]


def consumed_last(conn: apsw.Connection, child
: str) -> dict[str, int]:
    """Per parent of ``child``, the run it consumed last (0: none yet)."""
    return {parent: run_id for parent, run_id in conn.execute(
        "SELECT parent, run_id FROM dep_cursors WHERE child=? ORDER BY parent", (child,))}

"""``--downstream`` of a rerun or a backfill, inside ``apply``: the records
that consumed a fire time run again after it, in dependency order.

When a rerun (or a backfill's reprocess) of ``job`` at fire time T is
committed with ``downstream``, the state takes its *closure*: every record
(child, fire time) whose lineage (``run_lineage``) holds a run of (job, T),
then every record that consumed one of those, and so on. Each is an item of
``downstream_items`` under the run id of the attempt that started it (its
``root``); ``downstream_edges`` says which items of the set each one waits
for. A diamond (A -> B, A -> C, B and C -> D) reruns D once, after both B
and C.

An item waits until every item it waits for has ended (its outcome is final:
no retry follows; ``on_final``, called by ``dependencies.parent_final``).
Then, if at least one of them ran again, it gets a new attempt of its record
(kind ``rerun``, never a second record) when its trigger rule passes over its
lineage as it is now: for each parent run it consumed, the newest attempt of
that parent's record. It is not rerun (its record stays as it was, the item
says why) when no parent of it ran again, when that rule does not pass (a
parent's rerun failed: the old outcome stands rather than being replaced by
a skip), when its record is still active, or when the job is paused,
disabled or removed. Its own children then see it did not run again.

A child handled here has consumed that parent outcome: its ``@after``
generation does not fire for it a second time. Deterministic, like all of
``apply``: the order is the items' (job, fire time) order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ..decisions import dependencies as D
from ..model.run_states import ACTIVE, FINAL

if TYPE_CHECKING:
    from ..jobspec import JobSpec
    from .effects import Effect
    from .writes import MachineWrites

MAX_ITEMS = 10_000  # records one --downstream may rerun


class TooMany(Exception):
    pass


def _children_of(conn: apsw.Connection, job: str, fire_time: int) -> list[tuple[str, int]]:
    """The records (child, fire time) whose lineage holds a run of (job, fire_time)."""
    return list(conn.execute(
        "SELECT DISTINCT r.job, r.fire_time FROM runs p JOIN run_lineage l ON "
        "l.parent_run_id = p.run_id AND l.parent_job = p.job JOIN runs r ON "
        "r.run_id = l.run_id WHERE p.job=? AND p.fire_time=? AND p.origin='schedule' AND "
        "r.origin='schedule' AND r.target='' ORDER BY r.job, r.fire_time",
        (job, fire_time)))


def closure(conn: apsw.Connection, job: str, fire_time: int, limit: int = MAX_ITEMS
            ) -> tuple[list[tuple[str, int]], list[tuple[tuple[str, int], tuple[str, int]]]]:
    """The records downstream of (job, fire_time), in an order where each
    comes after the ones it waits for, and the edges (parent, child)
    between the records of the set (the root included)."""
    root = (job, fire_time)
    edges: list[tuple[tuple[str, int], tuple[str, int]]] = []
    seen = {root}
    frontier = [root]
    while frontier:
        nxt: list[tuple[str, int]] = []
        for rec in frontier:
            for child in _children_of(conn, *rec):
                child = (child[0], int(child[1]))
                if child == root:
                    continue  # (a record cannot consume itself; guard all the same)
                edges.append((rec, child))
                if child not in seen:
                    seen.add(child)
                    if len(seen) - 1 > limit:
                        raise TooMany(f"more than {limit} records are downstream of "
                                      f"{job} at {fire_time}")
                    nxt.append(child)
        frontier = nxt
    # topological order (Kahn from the root, ties by (job, fire time)):
    # each record after every record of the set it waits for
    waits = {r: 0 for r in seen}
    out_edges: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for p, c in set(edges):
        waits[c] += 1
        out_edges.setdefault(p, []).append(c)
    order: list[tuple[str, int]] = []
    todo = [root]
    while todo:
        rec = todo.pop(0)
        if rec != root:
            order.append(rec)
        for c in sorted(out_edges.get(rec, [])):
            waits[c] -= 1
            if waits[c] == 0:
                todo.append(c)
    return order, sorted(set(edges))


def start(sm: "MachineWrites", root_run: int, job: str, fire_time: int) -> list[tuple[str, int]]:
    """Record the closure of (job, fire_time) under ``root_run`` (the attempt
    the rerun or backfill made of it). The records it will rerun, in order."""
    conn = sm.conn
    order, edges = closure(conn, job, fire_time)
    conn.execute("INSERT OR REPLACE INTO downstream_items(root, job, fire_time, waits_on, "
                 "fresh, state, run_id, note) VALUES(?,?,?,0,0,'released',?,'')",
                 (root_run, job, fire_time, root_run))
    waits: dict[tuple[str, int], int] = {}
    for _p, c in edges:
        waits[c] = waits.get(c, 0) + 1
    for rec in order:
        conn.execute("INSERT OR REPLACE INTO downstream_items(root, job, fire_time, waits_on, "
                     "fresh, state, run_id, note) VALUES(?,?,?,?,0,'waiting',NULL,'')",
                     (root_run, rec[0], rec[1], waits.get(rec, 0)))
    conn.executemany("INSERT OR IGNORE INTO downstream_edges(root, parent_job, "
                     "parent_fire_time, child_job, child_fire_time) VALUES(?,?,?,?,?)",
                     [(root_run, p[0], p[1], c[0], c[1]) for p, c in edges])
    return order


def on_final(sm: "MachineWrites", index: int, job: str, run_id: int, at: float,
             effects: list[Effect]) -> set[str]:
    """Run ``run_id`` of ``job`` is its record's final outcome: end the
    downstream items it was the attempt of, and move their children on.
    The children (job names) that consumed it here."""
    conn = sm.conn
    ft = next(iter(conn.execute("SELECT fire_time FROM runs WHERE run_id=?", (run_id,))),
              (None,))[0]
    roots = [r for (r,) in conn.execute(
        "SELECT root FROM downstream_items WHERE job=? AND fire_time=? AND state='released' "
        "ORDER BY root", (job, ft))]
    handled: set[str] = set()
    for root in roots:
        assert ft is not None  # roots matched fire_time=ft, which a NULL never does
        handled |= {c for c, _ in _edges_from(conn, root, job, ft)}
        _ended(sm, index, root, job, ft, at, effects, ran=True)
    for child in sorted(handled):
        conn.execute("UPDATE dep_cursors SET run_id=?, new_run_id=NULL WHERE child=? AND "
                     "parent=?", (run_id, child, job))
    return handled


def _edges_from(conn: apsw.Connection, root: int, job: str, ft: int) -> list[tuple[str, int]]:
    return list(conn.execute(
        "SELECT child_job, child_fire_time FROM downstream_edges WHERE root=? AND "
        "parent_job=? AND parent_fire_time=? ORDER BY child_job, child_fire_time",
        (root, job, ft)))


def _ended(sm: "MachineWrites", index: int, root: int, job: str, ft: int, at: float,
           effects: list[Effect], *, ran: bool) -> None:
    """Item (root, job, ft) has ended (``ran``: it ran again, else it was not
    rerun): its children items move on, and each whose parents in the set
    have all ended is released or not rerun in turn (a worklist, not a
    recursion: a chain may be long)."""
    conn = sm.conn
    work = [(job, ft, ran)]
    while work:
        job, ft, ran = work.pop(0)
        conn.execute("UPDATE downstream_items SET state=? WHERE root=? AND job=? AND "
                     "fire_time=? AND state IN ('released', 'waiting')",
                     ("done" if ran else "not_rerun", root, job, ft))
        children = _edges_from(conn, root, job, ft)
        for cj, cft in children:
            conn.execute("UPDATE downstream_items SET waits_on=waits_on-1, fresh=fresh+? "
                         "WHERE root=? AND job=? AND fire_time=?",
                         (1 if ran else 0, root, cj, cft))
        for cj, cft in children:
            row = next(iter(conn.execute(
                "SELECT waits_on, fresh, state FROM downstream_items WHERE root=? AND job=? "
                "AND fire_time=?", (root, cj, cft))), None)
            if row is None or row[0] > 0 or row[2] != "waiting":
                continue
            why = _release(sm, index, root, cj, cft, bool(row[1]), job, ft, at, effects)
            if why is not None:
                conn.execute("UPDATE downstream_items SET note=? WHERE root=? AND job=? AND "
                             "fire_time=?", (f"not rerun: {why}", root, cj, cft))
                work.append((cj, cft, False))


def record_lineage(conn: apsw.Connection, job: str, fire_time: int) -> dict[str, int]:
    """parent job -> the fire time of the parent run the record consumed
    (its newest attempt that consumed one, per parent)."""
    out: dict[str, int] = {}
    for parent, pft in conn.execute(
            "SELECT l.parent_job, p.fire_time FROM runs r JOIN run_lineage l ON "
            "l.run_id = r.run_id JOIN runs p ON p.run_id = l.parent_run_id WHERE r.job=? AND "
            "r.fire_time=? AND r.origin='schedule' AND r.target='' ORDER BY r.attempt",
            (job, fire_time)):
        out[parent] = pft
    return out


def _latest(conn: apsw.Connection, job: str, fire_time: int) -> tuple[Any, ...] | None:
    """(run_id, attempt, state) of the record's newest attempt, or None."""
    return next(iter(conn.execute(
        "SELECT run_id, attempt, state FROM runs WHERE job=? AND fire_time=? AND "
        "origin='schedule' AND target='' ORDER BY attempt DESC LIMIT 1", (job, fire_time))),
        None)


def gate(conn: apsw.Connection, spec: JobSpec, job: str, fire_time: int) -> D.Gate:
    """The record's trigger rule over its lineage as it is now."""
    consumed = record_lineage(conn, job, fire_time)
    parents: list[D.Parent] = []
    for dep in spec.depends_on:
        new = None
        if dep.job in consumed:
            last = _latest(conn, dep.job, consumed[dep.job])
            if last is not None and last[2] in FINAL:
                new = D.Outcome(last[0], consumed[dep.job], last[2])
        parents.append(D.Parent(dep.job, new))
    return D.decide(spec.trigger_rule, parents)


def _release(sm: "MachineWrites", index: int, root: int, job: str, ft: int, fresh: bool,
             by_job: str, by_ft: int, at: float, effects: list[Effect]) -> str | None:
    """Give item (root, job, ft) its new attempt; or why it is not rerun."""
    from ..schedule import iso_utc
    from .effects import RunPending
    conn = sm.conn
    if not fresh:
        return "no parent of it ran again"
    spec = sm._job_spec(job)
    sj = sm._job(job)
    if spec is None or sj is None:
        return "job removed"
    if sj["paused"]:
        return "job paused"
    held = sm._maintenance_reason() or (None if spec.enabled else "job disabled")
    if held is not None:
        return held
    last = _latest(conn, job, ft)
    if last is None:
        return "its record was pruned"
    if last[2] in ACTIVE:
        return f"attempt {last[1]} is {last[2]}"
    g = gate(conn, spec, job, ft)
    if g.action != D.FIRE:
        return g.reason or g.action
    reason = f"downstream of {by_job}@{iso_utc(by_ft)}"
    why = sm._admit(index, sj, at, effects)
    if why is not None:
        return why
    hold = sm._queue_hold(job, "", ft, spec, bounded=False)
    if hold is not None and hold.wait is not None:
        run = sm._enqueue(index, job=job, origin="schedule", kind="rerun", fire_time=ft,
                          attempt=last[1] + 1, due_at=at, at=at, reason=hold.wait, target="")
    else:
        run = sm._insert_run(index, job=job, origin="schedule", kind="rerun", fire_time=ft,
                             attempt=last[1] + 1, state="pending", node=None, due_at=at,
                             at=at, reason=reason)
        effects.append(RunPending(run=run))
    conn.executemany("INSERT OR IGNORE INTO run_lineage(run_id, parent_job, parent_run_id) "
                     "VALUES(?,?,?)", [(run.run_id, p, o.run_id) for p, o in g.lineage])
    conn.execute("UPDATE downstream_items SET state='released', run_id=? WHERE root=? AND "
                 "job=? AND fire_time=?", (run.run_id, root, job, ft))
    return None


def items(conn: apsw.Connection, root: int) -> list[dict[str, Any]]:
    """The items of one --downstream, in (job, fire time) order."""
    return [dict(zip(("job", "fire_time", "state", "run_id", "note"), r)) for r in conn.execute(
        "SELECT job, fire_time, state, run_id, note FROM downstream_items WHERE root=? "
        "ORDER BY job, fire_time", (root,))]


def of_record(conn: apsw.Connection, job: str, fire_time: int) -> list[dict[str, Any]]:
    """The --downstream items a record was part of (for explain), oldest first."""
    return [dict(zip(("root", "state", "run_id", "note"), r)) for r in conn.execute(
        "SELECT root, state, run_id, note FROM downstream_items WHERE job=? AND fire_time=? "
        "ORDER BY root", (job, fire_time))]


def prune(conn: apsw.Connection) -> None:

    """After run records were pruned: the lineage of runs that are gone, and
    each --downstream whose root run is gone and that has nothing left to do."""
    conn.execute("DELETE FROM run_lineage WHERE run_id NOT IN (SELECT run_id FROM runs)")
    gone = [r for (r,) in conn.execute(
        "SELECT DISTINCT root FROM downstream_items WHERE root NOT IN (SELECT run_id FROM "
        "runs) EXCEPT SELECT root FROM downstream_items WHERE state IN ('waiting', "
        "'released')")]
    for root in gone:
        conn.execute("DELETE FROM downstream_items WHERE root=?", (root,))
        conn.execute("DELETE FROM downstream_edges WHERE root=?", (root,))

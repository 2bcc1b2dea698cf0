"""Pools in the replicated state: the pools in force and the runs in them.

The leader's daemon config names the pools (``SetPools`` puts them in
table ``pools``). Every run of a job with ``pool:`` has a row in
``pool_runs`` from the moment it would be placed: it either holds its slots
(pending, assigned or running; a node-scoped pool counts assigned and
running runs by node) or waits for them (state ``waiting``, the reason
``pool db: 2/2 slots in use``). The command that frees slots releases the
waiting runs in order, to ``pending`` (the leader places them), so "this
run may take the slots now" is decided once, in the log, by ``apply``: two
leaders can never put more runs in a pool than it has slots.

Decisions are pure (decisions/pools.py); this module reads and writes the
rows they are about. All SQL lives in state/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ..decisions import pools as D
from ..schedule import iso_utc
from ..model.run import Run
from ..model.run_states import ACTIVE, sql_in
from . import versions as V

if TYPE_CHECKING:
    from ..jobspec import JobSpec

HOLDING = ("pending", "assigned", "running")   # a cluster pool's slots are taken
PLACED = ("assigned", "running")               # a node pool's slots are taken, by node
BACKFILL_KIND = "backfill"


def defined(conn: apsw.Connection, name: str) -> tuple[int, str] | None:
    """(slots, scope) of a pool in force, or None."""
    for slots, scope in conn.execute("SELECT slots, scope FROM pools WHERE name=?", (name,)):
        return slots, scope
    return None


def check_pools(pools: object) -> list[tuple[str, int, str]] | None:
    """A SetPools list, checked (it comes from the log): None if malformed."""
    if not isinstance(pools, list):
        return None
    out: list[tuple[str, int, str]] = []
    for p in pools:
        if not (isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and p[0]
                and isinstance(p[1], int) and not isinstance(p[1], bool) and p[1] >= 1
                and p[2] in ("cluster", "node")):
            return None
        out.append((p[0], p[1], p[2]))
    if len({p[0] for p in out}) != len(out):
        return None
    return sorted(out)


def set_pools(conn: apsw.Connection, pools: list[tuple[str, int, str]]) -> bool:
    """Make ``pools`` the ones in force; did anything change?"""
    if list(conn.execute("SELECT name, slots, scope FROM pools ORDER BY name")) == \
            [tuple(p) for p in pools]:
        return False
    conn.execute("DELETE FROM pools")
    conn.executemany("INSERT INTO pools(name, slots, scope) VALUES(?,?,?)", pools)
    return True


def in_use(conn: apsw.Connection, pool: str, node: str | None = None, *,
           but: int = 0) -> int:
    """Slots of ``pool`` taken now (on ``node``: by its assigned and running
    runs), by runs other than ``but``."""
    if node is None:
        sql = (f"SELECT COALESCE(SUM(p.slots), 0) FROM pool_runs p JOIN runs r ON "
               f"r.run_id = p.run_id WHERE p.pool=? AND p.waiting=0 AND p.run_id != ? AND "
               f"r.state IN {sql_in(HOLDING)}")
        used: int = next(iter(conn.execute(sql, (pool, but))))[0]
        return used
    sql = (f"SELECT COALESCE(SUM(p.slots), 0) FROM pool_runs p JOIN runs r ON "
           f"r.run_id = p.run_id WHERE p.pool=? AND p.waiting=0 AND p.run_id != ? AND "
           f"r.node=? AND r.state IN {sql_in(PLACED)}")
    used_on: int = next(iter(conn.execute(sql, (pool, but, node))))[0]
    return used_on


def waiters(conn: apsw.Connection, pool: str) -> list[D.Waiter]:
    """The runs waiting for ``pool``, in the order they are released."""
    return [D.Waiter(rid, slots, prio, ft, bool(late)) for rid, slots, prio, ft, late in
            conn.execute("SELECT run_id, slots, priority, fire_time, late FROM pool_runs "
                         "WHERE pool=? AND waiting=1 ORDER BY late, priority DESC, fire_time,"
                         " run_id", (pool,))]


def is_waiting(conn: apsw.Connection, run_id: int) -> bool:
    for _ in conn.execute("SELECT 1 FROM pool_runs WHERE run_id=? AND waiting=1", (run_id,)):
        return True
    return False


def _late(conn: apsw.Connection, run: Run) -> bool:
    """A backfill run (or a retry of one): after the on-time runs."""
    if run.kind == BACKFILL_KIND:
        return True
    if run.kind != "retry":
        return False
    for _ in conn.execute(
            "SELECT 1 FROM backfill_items i JOIN backfills b ON b.id = i.backfill WHERE "
            "b.job=? AND i.fire_time=? AND i.state='released' LIMIT 1", (run.job, run.fire_time)):
        return True
    return False


def _to_waiting(conn: apsw.Connection, run_id: int, why: str) -> None:
    conn.execute("UPDATE runs SET state='waiting', node=NULL, token=NULL, assigned_at=NULL, "
                 "reason=? WHERE run_id=?", (why, run_id))
    conn.execute("UPDATE pool_runs SET waiting=1 WHERE run_id=?", (run_id,))


def gate(conn: apsw.Connection, run: Run, spec: JobSpec | None) -> str | None:
    """``run`` has just become pending or assigned: may it take its pool's
    slots now? Records its row; if not, it waits (state waiting) and the
    reason is returned."""
    if spec is None or not spec.pool:
        return None
    row: tuple[Any, ...] | None = next(iter(conn.execute(
        "SELECT pool, slots, priority, late FROM pool_runs WHERE run_id=?", (run.run_id,))), None)
    if row is None:
        late = _late(conn, run)
        if late and spec.backfill_priority is not None:  # ranked with the on-time runs
            row = (spec.pool, spec.slots_needed, spec.backfill_priority, 0)
        else:
            row = (spec.pool, spec.slots_needed, spec.priority or 0, int(late))
        conn.execute("INSERT INTO pool_runs(run_id, pool, slots, priority, late, fire_time, "
                     "waiting) VALUES(?,?,?,?,?,?,0)", (run.run_id, *row, run.fire_time))
    pool, need, priority, late = row
    conf = defined(conn, pool)
    why: str | None
    if conf is None:
        why = D.reason(pool, 0, 0, defined=False)
    else:
        slots, scope = conf
        if scope == "node":
            if run.node is None or run.state.value == "pending":
                return None  # counted where it is placed (AssignRun)
            used = in_use(conn, pool, run.node, but=run.run_id)
            why = None if D.admit(slots, used, need, 0) else \
                D.reason(pool, used, slots, node=run.node, need=need)
        else:
            mine = D.order_key(bool(late), priority, run.fire_time, run.run_id)
            ahead = sum(1 for w in waiters(conn, pool)
                        if w.key() < mine and D.fits_ever(w, slots))
            used = in_use(conn, pool, but=run.run_id)
            why = None if D.admit(slots, used, need, ahead) else \
                D.reason(pool, used, slots, ahead=ahead, need=need)
    if why is not None:
        _to_waiting(conn, run.run_id, why)
        if conf is not None and conf[1] == "cluster":
            _refresh(conn, pool, conf[0])  # those behind it have one more ahead
    return why


def placed_check(conn: apsw.Connection, run: Run, node: str) -> str | None:
    """May ``run`` (pending, in a node-scoped pool) be placed on ``node``?
    If not, it waits (the reason is returned)."""
    row = next(iter(conn.execute("SELECT pool, slots FROM pool_runs WHERE run_id=? AND "
                                 "waiting=0", (run.run_id,))), None)
    if row is None:
        return None
    conf = defined(conn, row[0])
    if conf is None or conf[1] != "node":
        return None
    used = in_use(conn, row[0], node, but=run.run_id)
    if D.admit(conf[0], used, row[1], 0):
        return None
    why = D.reason(row[0], used, conf[0], node=node, need=row[1])
    _to_waiting(conn, run.run_id, why)
    return why


def fits_on(conn: apsw.Connection, run_id: int, node: str) -> bool:
    """Would an assigned run of a node-scoped pool fit on ``node`` (a move)?"""
    row: tuple[str, int] | None = next(iter(conn.execute(
        "SELECT pool, slots FROM pool_runs WHERE run_id=? AND waiting=0", (run_id,))), None)
    conf = None if row is None else defined(conn, row[0])
    if conf is None or conf[1] != "node":
        return True
    assert row is not None  # conf is None when row is
    return in_use(conn, row[0], node, but=run_id) + row[1] <= conf[0]


def drop(conn: apsw.Connection, run_id: int) -> str | None:
    """The run ended: it leaves its pool. Its pool's name, if it was in one."""
    pool: str | None = next(iter(conn.execute("SELECT pool FROM pool_runs WHERE run_id=?",
                                              (run_id,))), (None,))[0]
    if pool is not None:
        conn.execute("DELETE FROM pool_runs WHERE run_id=?", (run_id,))
    return pool


def _release_by_node(conn: apsw.Connection, pool: str, slots: int, freed_on: str | None
                     ) -> list[int]:
    """A node-scoped pool: the waiting runs that fit on some node now (the
    leader places them where there is room, runtime/leader/placement.py). The
    nodes are the members and those running the pool's runs (and
    ``freed_on``, where a run just ended)."""
    nodes: set[str | None] = {freed_on} | {n for (n,) in conn.execute("SELECT node FROM nodes")} | {
        n for (n,) in conn.execute(
        f"SELECT DISTINCT r.node FROM pool_runs p JOIN runs r ON r.run_id = p.run_id WHERE "
        f"p.pool=? AND p.waiting=0 AND r.state IN {sql_in(PLACED)}", (pool,))}
    if V.at_least(conn, V.POOL_RELEASE_WITHOUT_NODE):
        names = sorted(n for n in nodes if n)
    else:
        # The rule of cluster version 1, kept as it was (state/versions.py):
        # with freed_on None, sorted() meets None beside the names and raises
        # TypeError, so apply refuses the SetPools or CancelRun.
        names = [n for n in sorted(nodes) if n]  # type: ignore[type-var]
    free = {n: max(0, slots - in_use(conn, pool, n)) for n in names} or {"": slots}
    placing: int = next(iter(conn.execute(
        "SELECT COALESCE(SUM(p.slots), 0) FROM pool_runs p JOIN runs r ON r.run_id = p.run_id "
        "WHERE p.pool=? AND p.waiting=0 AND r.state='pending'", (pool,))))[0]
    waiting = [(D.Waiter(rid, n, prio, ft, bool(late)), target) for rid, n, prio, ft, late, target
               in conn.execute("SELECT p.run_id, p.slots, p.priority, p.fire_time, p.late, "
                               "r.target FROM pool_runs p JOIN runs r ON r.run_id = p.run_id "
                               "WHERE p.pool=? AND p.waiting=1", (pool,))]
    return D.release_by_node(free, sum(free.values()) - placing, slots, waiting)


def release(conn: apsw.Connection, pool: str, at: float, freed_on: str | None = None
            ) -> list[int]:
    """Slots of ``pool`` may have freed: the waiting runs that fit now go to
    pending, in order. Their ids; the others' reasons are brought up to date."""
    conf = defined(conn, pool)
    waiting = waiters(conn, pool)
    if conf is None or not waiting:
        return []
    slots, scope = conf
    out = (D.release(slots - in_use(conn, pool), waiting, slots) if scope == "cluster"
           else _release_by_node(conn, pool, slots, freed_on))
    why = f"waited for pool {pool} until {iso_utc(at)}"
    for run_id in out:
        conn.execute("UPDATE runs SET state='pending', node=NULL, token=NULL, "
                     "due_at=MAX(COALESCE(due_at, ?1), ?1), reason=?2 WHERE run_id=?3",
                     (at, why, run_id))
        conn.execute("UPDATE pool_runs SET waiting=0 WHERE run_id=?", (run_id,))
    if scope == "cluster":
        _refresh(conn, pool, slots)
    return out


def _refresh(conn: apsw.Connection, pool: str, slots: int) -> None:
    """Each waiting run of a cluster pool says how many wait ahead of it."""
    used = in_use(conn, pool)
    n = 0  # runs ahead (one that can never fit is nobody's: decisions/pools.py)
    for w in waiters(conn, pool):
        why = D.reason(pool, used, slots, ahead=n, need=w.slots)
        conn.execute("UPDATE runs SET reason=? WHERE run_id=? AND state='waiting' AND "
                     "reason IS NOT ?", (why, w.run_id, why))
        n += D.fits_ever(w, slots)


def pools_with_waiters(conn: apsw.Connection) -> list[str]:
    return [p for (p,) in conn.execute(
        "SELECT DISTINCT pool FROM pool_runs WHERE waiting=1 ORDER BY pool")]


def prune(conn: apsw.Connection) -> None:
    """Rows of runs that ended or are gone (a run leaves its pool when it ends)."""
    conn.execute(f"DELETE FROM pool_runs WHERE run_id NOT IN (SELECT run_id FROM runs "
                 f"WHERE state IN {sql_in(ACTIVE)})")


# -- reads (the control socket's `pools`, explain) -------------------------------------
def usage(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Each pool in force (or named by a run): its slots, what is in use
    (by node for a node-scoped pool) and how many runs wait."""
    names = [n for (n,) in conn.execute(
        "SELECT name FROM pools UNION SELECT pool FROM pool_runs ORDER BY 1")]
    out: list[dict[str, Any]] = []
    for name in names:
        conf = defined(conn, name)
        row: dict[str, Any] = {"pool": name, "slots": None if conf is None else conf[0],
               "scope": None if conf is None else conf[1], "defined": conf is not None,
               "in_use": in_use(conn, name),
               "waiting": next(iter(conn.execute(
                   "SELECT count(*) FROM pool_runs p JOIN runs r ON r.run_id = p.run_id "
                   "WHERE p.pool=? AND p.waiting=1 AND r.state='waiting'", (name,))))[0],
               "runs": [rid for (rid,) in conn.execute(
                   f"SELECT p.run_id FROM pool_runs p JOIN runs r ON r.run_id = p.run_id "
                   f"WHERE p.pool=? AND p.waiting=0 AND r.state IN {sql_in(HOLDING)} "
                   "ORDER BY p.run_id", (name,))]}
        if conf is not None and conf[1] == "node":
            row["in_use"] = next(iter(conn.execute(
                f"SELECT COALESCE(SUM(p.slots), 0) FROM pool_runs p JOIN runs r ON "
                f"r.run_id = p.run_id WHERE p.pool=? AND p.waiting=0 AND r.state IN "
                f"{sql_in(PLACED)}", (name,))))[0]
            row["by_node"] = {n: u for n, u in conn.execute(
                f"SELECT r.node, SUM(p.slots) FROM pool_runs p JOIN runs r ON "
                f"r.run_id = p.run_id WHERE p.pool=? AND p.waiting=0 AND r.state IN "
                f"{sql_in(PLACED)} GROUP BY r.node ORDER BY r.node", (name,))}
        out.append(row)
    return out


def of_run(conn: apsw.Connection, run_id: int) -> dict[str, Any] | None:

    """A run's pool row (for explain), or None."""
    for pool, slots, priority, late, waiting in conn.execute(
            "SELECT pool, slots, priority, late, waiting FROM pool_runs WHERE run_id=?",
            (run_id,)):
        return {"pool": pool, "slots": slots, "priority": priority, "late": bool(late),
                "waiting": bool(waiting)}
    return None


def names_pool(conn: apsw.Connection, job: str) -> bool:
    """Does the job's definition in force name a pool (cheap: no decoding)?"""
    for _ in conn.execute("SELECT 1 FROM jobs JOIN specs USING(name, digest) WHERE name=? "
                          "AND instr(spec, '\"pool\":') > 0", (job,)):
        return True
    return False


def in_force(conn: apsw.Connection) -> list[tuple[str, int, str]]:
    """The pools in force, [(name, slots, scope)] by name."""
    return list(conn.execute("SELECT name, slots, scope FROM pools ORDER BY name"))

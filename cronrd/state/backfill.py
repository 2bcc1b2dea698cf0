"""Backfills and reruns in the replicated state: what ``apply`` does for
CreateBackfill, BackfillStep, SetBackfillState and Rerun (the machine calls
these; decisions/backfill.py decides each fire time).

A backfill is a row of ``backfills`` and one row of ``backfill_items`` per
fire time. The leader's duty proposes a BackfillStep when one can move; the
step counts the backfill's runs in flight *in apply*, from the state, so no
number of leaders proposing at once can release more than its limit. A fire
time's run is a record keyed (job, fire_time) like any scheduled one: a new
record of kind ``backfill``, or the next attempt of the record there is.
Deterministic: times come from the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import apsw

from ..decisions import backfill as D
from . import queries as Q
from ..model.run_states import ACTIVE, sql_in

if TYPE_CHECKING:
    from ..jobspec import JobSpec
    from . import commands as C


def records(conn: apsw.Connection, job: str, first: int, last: int) -> dict[int, D.Record]:
    """The last attempt of each of the job's scheduled records (not per-node
    ones) with a fire time in [first, last]."""
    out: dict[int, D.Record] = {}
    for fire_time, attempt, state in conn.execute(
            "SELECT fire_time, attempt, state FROM runs WHERE job=? AND origin='schedule' "
            "AND target='' AND fire_time BETWEEN ? AND ? ORDER BY fire_time, attempt",
            (job, first, last)):
        out[fire_time] = D.Record(attempt, state)
    return out


def held(conn: apsw.Connection, job: str) -> str | None:
    """Why a backfill of ``job`` releases nothing now (it waits, it does not
    skip): the job is gone, paused, disabled, or every job is paused."""
    row = next(iter(conn.execute("SELECT paused FROM jobs WHERE name=?", (job,))), None)
    if row is None:
        return "job removed"
    if row[0]:
        return "job paused"
    if next(iter(conn.execute("SELECT count(*) FROM pauses WHERE name=''")))[0]:
        return "maintenance pause of every job"
    spec = Q.job_spec(conn, job)
    if spec is not None and not spec.enabled:
        return "job disabled"
    return None


def open_backfill(conn: apsw.Connection, job: str) -> int | None:
    bid: int
    for (bid,) in conn.execute("SELECT id FROM backfills WHERE job=? AND state IN "
                               "('running', 'paused') ORDER BY id LIMIT 1", (job,)):
        return bid
    return None


def check_job(spec: JobSpec | None, name: str, refused: type[Exception]) -> None:
    """A job a backfill or rerun can take: one record per fire time."""
    if spec is None:
        raise refused(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
    if spec.run_on.mode == "all":
        raise refused(f"job {name!r} runs on every node (run_on: all): backfill and rerun "
                      "take jobs with one run per fire time; use `cronrd run-now` instead")


def create(conn: apsw.Connection, cmd: C.CreateBackfill, job: dict[str, Any], spec: JobSpec | None,
           refused: type[Exception]) -> dict[str, Any]:
    check_job(spec, cmd.job, refused)
    assert spec is not None  # check_job refused a job that is gone
    if cmd.reprocess not in D.REPROCESS or cmd.order not in D.ORDERS:
        raise refused(f"backfill: reprocess must be one of {', '.join(D.REPROCESS)} and "
                      f"order one of {', '.join(D.ORDERS)}")
    if not isinstance(cmd.parallel, int) or isinstance(cmd.parallel, bool) \
            or not 1 <= cmd.parallel <= 1000:
        raise refused("backfill: parallel must be a whole number from 1 to 1000")
    times = cmd.fire_times
    if not isinstance(times, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in times):
        raise refused("backfill: fire_times must be a list of whole seconds")
    if len(set(times)) != len(times) or not all(cmd.from_time <= t <= cmd.to_time
                                                for t in times):
        raise refused("backfill: each fire time once, within the range")
    if len(times) > D.HARD_MAX_FIRES:
        raise refused(D.too_many(len(times), True))
    if not times:
        raise refused(f"job {cmd.job!r} has no fire time in that range; `cronrd show "
                      f"{cmd.job}` shows its schedule")
    other = open_backfill(conn, cmd.job)
    if other is not None:
        raise refused(f"job {cmd.job!r} has backfill {other} still open; one backfill per "
                      f"job at a time: wait for it (`cronrd backfills`) or `cronrd backfill "
                      f"cancel {other}`")
    recs = records(conn, cmd.job, min(times), max(times))
    lines = D.plan(times, recs, cmd.reprocess, cmd.order, cursor=job["cursor"])
    rows = [(t, "skipped", d.reason) if d.action == "skip" else (t, "waiting", "")
            for t, d in lines]
    skips = sum(1 for r in rows if r[1] == "skipped")
    conn.execute(
        "INSERT INTO backfills(job, from_time, to_time, reprocess, parallel, ord, state, note, "
        "who, created_at, updated_at, total, planned_skips, downstream) "
        "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (cmd.job, cmd.from_time, cmd.to_time, cmd.reprocess, cmd.parallel, cmd.order,
         "running" if skips < len(rows) else "done", str(cmd.note), str(cmd.who), cmd.at,
         cmd.at, len(rows), skips, 1 if cmd.downstream is True else 0))
    bid = conn.last_insert_rowid()
    conn.executemany("INSERT INTO backfill_items(backfill, fire_time, state, note) "
                     "VALUES(?,?,?,?)", [(bid, t, st, note) for t, st, note in rows])
    return {"backfill": bid, "total": len(rows), "skipped": skips,
            "limit": D.limit(cmd.parallel, spec.concurrency)}


def get(conn: apsw.Connection, bid: int, refused: type[Exception]) -> dict[str, Any]:
    for row in conn.execute("SELECT id, job, state, parallel, ord, reprocess, downstream FROM "
                            "backfills WHERE id=?", (bid,)):
        return dict(zip(("id", "job", "state", "parallel", "order", "reprocess",
                         "downstream"), row))
    raise refused(f"no backfill with id {bid}; `cronrd backfills` lists them")


def _active_fire_times(conn: apsw.Connection, job: str) -> list[tuple[int, str]]:
    """(fire_time, origin) of the job's runs that have not ended."""
    return list(conn.execute(
        f"SELECT fire_time, origin FROM runs WHERE job=? AND state IN {sql_in(ACTIVE)} "
        "AND target=''", (job,)))


def step(conn: apsw.Connection, bid: int, at: float, *, spec: JobSpec | None, held: str | None,
         cursor: int | None, new_attempt: Callable[[str, int, int], int],
         refused: type[Exception]) -> dict[str, Any]:
    """Account for the backfill's runs that ended; release what its limit
    allows now (``held``: why nothing is released, e.g. the job is paused).
    ``new_attempt(kind, fire_time, attempt)`` inserts a pending run."""
    bf = get(conn, bid, refused)
    if bf["state"] not in D.OPEN and bf["state"] != "cancelled":
        raise refused(f"backfill {bid} is {bf['state']}")
    job = bf["job"]
    active = _active_fire_times(conn, job)
    busy = {t for t, origin in active if origin == "schedule"}
    released = [t for (t,) in conn.execute(
        "SELECT fire_time FROM backfill_items WHERE backfill=? AND state='released'", (bid,))]
    ended = [t for t in released if t not in busy]
    for t in ended:
        rec = records(conn, job, t, t).get(t)
        conn.execute("UPDATE backfill_items SET state='done', outcome=? WHERE backfill=? AND "
                     "fire_time=?", (rec.state if rec else "gone", bid, t))
    in_flight = len(released) - len(ended)
    out: dict[str, Any] = {"backfill": bid, "ended": len(ended), "released": [], "skipped": 0}
    if spec is None and bf["state"] in D.OPEN:
        _close(conn, bid, "cancelled", at, "job removed")
        out["state"] = "cancelled"
        return out
    if bf["state"] == "running" and held is None:
        assert spec is not None  # a running backfill of a removed job was closed just above
        others = len(active) - in_flight

        free = D.slots(bf["parallel"], spec.concurrency, in_flight, others)
        order = "DESC" if bf["order"] == "newest" else "ASC"
        while free > 0:
            batch = list(conn.execute(
                "SELECT fire_time FROM backfill_items WHERE backfill=? AND state='waiting' "
                f"ORDER BY fire_time {order} LIMIT ?", (bid, free + 16)))
            if not batch:
                break
            for (t,) in batch:
                if free <= 0:
                    break
                [(_t, d)] = D.plan([t], records(conn, job, t, t), bf["reprocess"],
                                   bf["order"], cursor=cursor)
                if d.action == "skip":
                    conn.execute("UPDATE backfill_items SET state='skipped', note=? WHERE "
                                 "backfill=? AND fire_time=?", (d.reason, bid, t))
                    out["skipped"] += 1
                    continue
                run_id = new_attempt("backfill", t, d.attempt)
                conn.execute("UPDATE backfill_items SET state='released', run_id=? WHERE "
                             "backfill=? AND fire_time=?", (run_id, bid, t))
                out["released"].append(run_id)
                free -= 1
    if bf["state"] == "running" and not next(iter(conn.execute(
            "SELECT count(*) FROM backfill_items WHERE backfill=? AND state IN "
            "('waiting', 'released')", (bid,))))[0]:
        _close(conn, bid, "done", at)
        out["state"] = "done"
    elif out["released"] or ended:
        conn.execute("UPDATE backfills SET updated_at=? WHERE id=?", (at, bid))
    return out


def _close(conn: apsw.Connection, bid: int, state: str, at: float, why: str = "") -> None:
    conn.execute("UPDATE backfills SET state=?, updated_at=? WHERE id=?", (state, at, bid))
    if state == "cancelled":
        conn.execute("UPDATE backfill_items SET state='cancelled', note=? WHERE backfill=? "
                     "AND state='waiting'", (why or "backfill cancelled", bid))


def set_state(conn: apsw.Connection, cmd: C.SetBackfillState,
              refused: type[Exception]) -> dict[str, Any]:
    bf = get(conn, cmd.backfill, refused)
    want = cmd.state
    if want not in ("paused", "running", "cancelled"):
        raise refused(f"backfill state {want!r}: use paused, running or cancelled")
    if bf["state"] not in D.OPEN:
        raise refused(f"backfill {cmd.backfill} is {bf['state']} already; only a running or "
                      "paused backfill can be paused, resumed or cancelled")
    if bf["state"] == want:
        return {"backfill": cmd.backfill, "state": want, "changed": False}
    if want == "cancelled":
        who = f" by {cmd.who}" if cmd.who else ""
        _close(conn, cmd.backfill, "cancelled", cmd.at, f"backfill cancelled{who}")
    else:
        conn.execute("UPDATE backfills SET state=?, updated_at=? WHERE id=?",
                     (want, cmd.at, cmd.backfill))
    return {"backfill": cmd.backfill, "state": want, "changed": True}


def rerun_attempt(conn: apsw.Connection, job: str, fire_time: int, refused: type[Exception]) -> int:
    """The attempt a rerun of (job, fire_time) makes: the record's next."""
    rec = records(conn, job, fire_time, fire_time).get(fire_time)
    if rec is None:
        raise refused(f"job {job!r} has no record at fire time {fire_time}")
    if rec.state in ACTIVE:  # waiting too: its own end may still retry it
        raise refused(f"job {job!r} at fire time {fire_time}: attempt {rec.attempt} is "
                      f"{rec.state}; wait for it to end, or `cronrd cancel --job {job}`")
    return rec.attempt + 1


# -- reads (the control socket's `backfills`) -------------------------------------------
def listing(conn: apsw.Connection, bid: int | None = None, limit: int = 50,
            before: int | None = None) -> list[dict[str, Any]]:
    """Backfills with their progress, newest first (or one, ``bid``; those
    before id ``before``)."""
    rows = list(conn.execute(
        "SELECT id, job, from_time, to_time, reprocess, parallel, ord, state, note, who, "
        "created_at, updated_at, total FROM backfills "
        + ("WHERE id=? " if bid is not None else "WHERE id<? " if before is not None else "")
        + "ORDER BY id DESC LIMIT ?",
        ((bid,) if bid is not None else (before,) if before is not None else ()) + (limit,)))
    out: list[dict[str, Any]] = []
    for r in rows:
        d: dict[str, Any] = dict(zip(("id", "job", "from", "to", "reprocess", "parallel", "order", "state",
                      "note", "who", "created_at", "updated_at", "total"), r))
        counts = {"waiting": 0, "released": 0, "done": 0, "skipped": 0, "cancelled": 0}
        outcomes: dict[str, int] = {}
        for state, outcome, n in conn.execute(
                "SELECT state, outcome, count(*) FROM backfill_items WHERE backfill=? "
                "GROUP BY state, outcome", (d["id"],)):
            counts[state] = counts.get(state, 0) + n
            if state == "done":
                outcomes[outcome or "unknown"] = outcomes.get(outcome or "unknown", 0) + n
        d["counts"] = counts
        d["outcomes"] = outcomes
        # why an open backfill releases nothing now (None: it releases)
        d["held"] = held(conn, d["job"]) if d["state"] in D.OPEN else None
        out.append(d)
    return out


def items(conn: apsw.Connection, bid: int) -> list[tuple[Any, ...]]:
    """(fire_time, state, note, run_id, outcome) of each fire time, in time order."""
    return list(conn.execute("SELECT fire_time, state, note, run_id, outcome FROM "
                             "backfill_items WHERE backfill=? ORDER BY fire_time", (bid,)))


def open_ids(conn: apsw.Connection) -> list[int]:
    return [bid for (bid,) in conn.execute(
        "SELECT id FROM backfills WHERE state IN ('running', 'paused') ORDER BY id")]


def movable(conn: apsw.Connection, bid: int, spec: JobSpec | None, held: str | None) -> bool:

    """Would a BackfillStep change anything now? (The leader proposes one only then.)"""
    bf = next(iter(conn.execute("SELECT job, state, parallel FROM backfills WHERE id=?",
                                (bid,))), None)
    if bf is None or bf[1] not in D.OPEN:
        return False
    job, state, parallel = bf
    if spec is None:
        return True
    active = _active_fire_times(conn, job)
    busy = {t for t, origin in active if origin == "schedule"}
    released = [t for (t,) in conn.execute(
        "SELECT fire_time FROM backfill_items WHERE backfill=? AND state='released'", (bid,))]
    in_flight = sum(1 for t in released if t in busy)
    if in_flight < len(released):
        return True  # some ended: account for them
    if state != "running" or held is not None:
        return False
    waiting = next(iter(conn.execute(
        "SELECT count(*) FROM backfill_items WHERE backfill=? AND state='waiting'", (bid,))))[0]
    if not waiting:
        return not released  # all done: close it
    return D.slots(parallel, spec.concurrency, in_flight, len(active) - in_flight) > 0

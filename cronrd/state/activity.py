"""What the cluster did over a span of time, for the web UI's pictures: the
overview's charts (outcomes, start lateness and runs running per node, per
step of time), the timeline of runs across nodes, a job's calendar of fire
times. Read-only, over the replicated state; time comes in as an argument.

Each reads through an index that bounds it by the span asked for, never the
whole history (a million records in bench/api.py):

* every run that was running at some moment of [start, end] either ended at
  or after ``start`` (``runs_ended``, on finished_at) or has not ended
  (``runs_active``). So those two sets hold every run a picture of the span
  can show, exactly, whatever the span or the runs' length;
* a job's calendar reads its scheduled fire times in the span
  (``runs_key``: job, fire_time).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import itertools
import math
import weakref
import datetime
import zoneinfo
from typing import Any, Callable, Iterator

import apsw

from ..model.run_states import ACTIVE
from .queries import ACTIVE_SQL

Allowed = Callable[[str], bool] | None   # may a viewer see this job? (None: all)

# Outcome classes a picture colours apart (each run's state is one of them).
OUTCOME_CLASS = {"succeeded": "succeeded", "failed": "failed", "timed_out": "failed",
                 "lost": "failed", "skipped": "skipped", "cancelled": "other"}
OUTCOMES = ("succeeded", "failed", "skipped", "other")

# The overview's spans: name -> (seconds, step of its buckets).
SPANS = {"1h": (3600, 60), "6h": (6 * 3600, 300), "1d": (86400, 900), "7d": (7 * 86400, 3600)}

# The columns a picture reads of a run, in this order.
_COLS = "run_id, job, kind, fire_time, attempt, state, node, started_at, finished_at"


# A timeline of a past window reads the runs that ended up to this long after
# it: a run that went on longer past the window's end is not drawn there (the
# page says so). Without a bound, a window of last year would read every
# record since.
TIMELINE_TAIL = 86400.0


def _in_span(conn: apsw.Connection, start: float,
             until: float | None = None) -> Iterator[tuple[Any, ...]]:
    """Every run that ended at or after ``start`` (and before ``until``,
    when given) or has not ended: with no ``until``, every run that ran at
    some moment since ``start`` (see the module's note). A caller clips."""
    yield from conn.execute(
        f"SELECT {_COLS} FROM runs INDEXED BY runs_ended "
        "WHERE finished_at >= ? AND finished_at < ? AND finished_at IS NOT NULL",
        (start, until if until is not None else float("inf")))
    yield from conn.execute(
        f"SELECT {_COLS} FROM runs WHERE {ACTIVE_SQL}")


# The viewer's job filter while a picture's queries run (they run to the end
# on the calling thread, one picture at a time: the faces' process reads
# synchronously), read by the SQL function cronrd_allowed. The function is
# registered once per connection: replacing one while another statement of
# the connection is active is refused (apsw BusyError).
_ALLOWED: list[Allowed] = [None]
_REGISTERED: "weakref.WeakSet[apsw.Connection]" = weakref.WeakSet()


def _visible(*values: Any) -> int:
    allowed = _ALLOWED[-1]
    return 1 if allowed is None or (isinstance(values[0], str) and allowed(values[0])) else 0


def _allow_on(conn: apsw.Connection) -> None:
    if conn not in _REGISTERED:
        conn.create_scalar_function("cronrd_allowed", _visible, 1)
        _REGISTERED.add(conn)


@contextlib.contextmanager
def _allowing(allowed: Allowed) -> Iterator[None]:
    _ALLOWED.append(allowed)
    try:
        yield
    finally:
        _ALLOWED.pop()


def _pct(values: list[float], p: float) -> float:
    """The ``p`` percentile (0-100) of ``values`` (sorted, not empty), by
    nearest rank: the smallest value with at least p % of them at or below
    it (p50 of two values is the first, p99 of a hundred the 99th)."""
    rank = math.ceil(p / 100 * len(values) - 1e-9)
    return values[max(0, min(len(values) - 1, rank - 1))]


def fleet_activity(conn: apsw.Connection, now: float, span: str = "1h",
                   allowed: Allowed = None) -> dict[str, Any]:
    """The overview's charts over the last ``span`` (a key of SPANS), in
    buckets of its step, the last one holding ``now``:

    * ``outcomes``: runs that ended in each bucket, per outcome class;
    * ``lateness``: p50 and p99 start lateness (started at minus fire time)
      of the first attempts of scheduled fire times, by their fire time's
      bucket (catch-ups, retries, reruns and manual runs are late by
      design, so they are left out);
    * ``running``: per node, the runs running in each bucket (each run
      counted in every bucket it overlapped).

    ``allowed(job) -> bool`` leaves out jobs a viewer may not see. The
    counting is SQL's (a day of a 100,000-job fleet is 100,000 records:
    in Python, a loop over them took 160 ms)."""
    seconds, step = SPANS[span]
    n = seconds // step
    first = (int(now) // step - (n - 1)) * step
    end = first + n * step
    xs = [first + i * step for i in range(n)]
    args = {"first": first, "end": end, "step": step, "now": now, "last": n - 1}
    mine = ""
    if allowed is not None:
        _allow_on(conn)
        mine = " AND cronrd_allowed(job)"
    with _allowing(allowed):
        return _fleet_activity(conn, span, n, first, end, step, now, xs, args, mine)


def _fleet_activity(conn: apsw.Connection, span: str, n: int, first: int, end: int,
                    step: int, now: float, xs: list[int], args: dict[str, Any],
                    mine: str) -> dict[str, Any]:
    outcomes = {o: [0] * n for o in OUTCOMES}
    for bucket, state, count in conn.execute(
            "SELECT CAST((finished_at - :first) / :step AS INTEGER), state, count(*) "
            "FROM runs INDEXED BY runs_ended WHERE finished_at >= :first AND "
            f"finished_at < :end AND finished_at IS NOT NULL{mine} GROUP BY 1, 2", args):
        outcomes[OUTCOME_CLASS.get(state, "other")][bucket] += count
    spanning = (f"SELECT {_COLS} FROM runs INDEXED BY runs_ended WHERE finished_at >= :first "
                f"AND finished_at IS NOT NULL{mine} UNION ALL SELECT {_COLS} FROM runs "
                f"WHERE {ACTIVE_SQL}{mine}")
    p50: list[float | None] = [None] * n
    p99: list[float | None] = [None] * n
    rows = conn.execute(
        "SELECT CAST((fire_time - :first) / :step AS INTEGER) b, "
        f"max(0.0, started_at - fire_time) late FROM ({spanning}) WHERE kind='scheduled' "
        "AND attempt=1 AND started_at IS NOT NULL AND fire_time >= :first AND "
        "fire_time < :end ORDER BY b, late", args)
    for bucket, group in itertools.groupby(rows, key=lambda r: r[0]):
        values = [late for _, late in group]
        p50[bucket] = round(_pct(values, 50), 3)
        p99[bucket] = round(_pct(values, 99), 3)
    marks: dict[str, list[int]] = {}   # +count where runs' first bucket is, -count after the last
    for node, lo, hi, count in conn.execute(
            "SELECT node, max(0, CAST((started_at - :first) / :step AS INTEGER)), "
            "min(:last, CAST((coalesce(finished_at, :now) - :first) / :step AS INTEGER)), "
            f"count(*) FROM ({spanning}) WHERE node IS NOT NULL AND node != '' AND "
            "started_at IS NOT NULL AND started_at < :end AND "
            "coalesce(finished_at, :now) >= :first GROUP BY 1, 2, 3", args):
        m = marks.setdefault(node, [0] * (n + 1))
        hi = max(lo, hi)    # ended "before" it started: the node's clock and the leader's
        m[lo] += count
        m[hi + 1] -= count
    running = {node: list(itertools.accumulate(marks[node][:n])) for node in sorted(marks)}
    return {"span": span, "step": step, "x": xs, "outcomes": outcomes,
            "lateness": {"p50": p50, "p99": p99}, "running": running}


# The timeline draws at most this many runs (the longest first when cut): at
# a thousand pixels across, more bars than that are not told apart anyway.
TIMELINE_LIMIT = 2000


def timeline(conn: apsw.Connection, start: float, end: float, now: float,
             allowed: Allowed = None, limit: int = TIMELINE_LIMIT) -> dict[str, Any]:
    """The runs that were running at some moment of [start, end], as bars
    per node: ``{"start", "end", "nodes": [...], "bars": [{run_id, job,
    node, start, end, state, running}], "cut": N}``. A running run's bar
    ends at ``now``. Over ``limit`` runs those with the least time inside
    the window are left out (``cut`` says how many): at that density a short
    bar is not visible anyway. A window that ended more than a minute ago
    reads the runs that ended up to TIMELINE_TAIL after it."""
    found = []   # (time in the window, started, stop, run_id, job, node, state, running)
    past = end < now - 60   # a window that ended: runs that ended long after it are not read
    for rid, job, _kind, _fire, _attempt, state, node, started, finished in _in_span(
            conn, start, end + TIMELINE_TAIL if past else None):
        if started is None or not node or started > end:
            continue
        stop = finished if finished is not None else now
        if stop < start or (allowed is not None and not allowed(job)):
            continue
        found.append((min(stop, end) - max(started, start), started, stop, rid, job, node,
                      state, finished is None))
    cut = max(0, len(found) - limit)
    if cut:
        found = heapq.nlargest(limit, found)
    bars = [{"run_id": rid, "job": job, "node": node, "start": started, "end": stop,
             "state": state, "running": running}
            for _, started, stop, rid, job, node, state, running in found]
    bars.sort(key=lambda b: (b["node"], b["start"], b["run_id"]))
    return {"start": start, "end": end, "now": now,
            "nodes": sorted({b["node"] for b in bars}), "bars": bars, "cut": cut}


def job_calendar(conn: apsw.Connection, job: str, tz: str, today: datetime.date,
                 days: int = 84) -> list[dict[str, Any]]:
    """A job's scheduled fire times by day (in the job's time zone ``tz``)
    over the ``days`` days up to ``today``, oldest first: ``{"day":
    "2026-12-05", "counts": {outcome class: fire times}}`` per day, each
    fire time counted once by its last attempt's state (a retry that made
    it good counts as succeeded); "running", and "pending" for fire times
    not started yet (planned, placed, or held)."""
    zone = zoneinfo.ZoneInfo(tz)
    first = today - datetime.timedelta(days=days - 1)
    bounds = [datetime.datetime.combine(first + datetime.timedelta(days=i), datetime.time(),
                                        tzinfo=zone).timestamp() for i in range(days + 1)]
    out: list[dict[str, Any]] = [
        {"day": (first + datetime.timedelta(days=i)).isoformat(), "counts": {}}
        for i in range(days)]
    last: dict[tuple[int, str], str] = {}
    for fire, target, state in conn.execute(
            "SELECT fire_time, target, state FROM runs WHERE job=? AND origin='schedule' "
            "AND fire_time >= ? AND fire_time < ? ORDER BY fire_time, target, attempt",
            (job, int(bounds[0]), int(bounds[-1]) + 1)):
        last[(fire, target)] = state     # the highest attempt comes last
    for (fire, _target), state in last.items():
        i = bisect.bisect_right(bounds, fire) - 1
        if 0 <= i < days:
            cls = ("running" if state == "running" else "pending") if state in ACTIVE \
                else OUTCOME_CLASS.get(state, "other")
            counts = out[i]["counts"]
            counts[cls] = counts.get(cls, 0) + 1
    return out

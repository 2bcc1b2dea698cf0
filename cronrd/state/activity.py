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
import heapq
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


def _in_span(conn: apsw.Connection, start: float, end: float) -> Iterator[tuple[Any, ...]]:
    """Every run that existed as a record at some moment of [start, end]
    and ended at or after ``start`` or has not ended (see the module's
    note). Those that ended after ``end`` or were made after it come too: a
    caller clips."""
    yield from conn.execute(
        f"SELECT {_COLS} FROM runs INDEXED BY runs_ended "
        "WHERE finished_at >= ? AND finished_at IS NOT NULL", (start,))
    yield from conn.execute(
        f"SELECT {_COLS} FROM runs WHERE {ACTIVE_SQL}")


def _pct(values: list[float], p: float) -> float:
    """The ``p`` percentile (0-100) of ``values`` (sorted, not empty),
    nearest rank."""
    k = max(0, min(len(values) - 1, int(round(p / 100 * len(values) + 0.5)) - 1))
    return values[k]


def fleet_activity(conn: apsw.Connection, now: float, span: str = "1h",
                   allowed: Allowed = None) -> dict[str, Any]:
    """The overview's charts over the last ``span`` (a key of SPANS), in
    buckets of its step, the last one holding ``now``:

    * ``outcomes``: runs that ended in each bucket, per outcome class;
    * ``lateness``: p50 and p99 start lateness (started at minus fire time)
      of the first attempts of scheduled fire times, by their fire time's
      bucket (catch-ups, retries, reruns and manual runs are late by
      design, so they are left out);
    * ``running``: per node, the most runs running at once in each bucket
      (each run counted in every bucket it overlapped).

    ``allowed(job) -> bool`` leaves out jobs a viewer may not see."""
    seconds, step = SPANS[span]
    n = seconds // step
    first = (int(now) // step - (n - 1)) * step
    xs = [first + i * step for i in range(n)]
    end = first + n * step
    outcomes = {o: [0] * n for o in OUTCOMES}
    late: list[list[float]] = [[] for _ in range(n)]
    # per node: +1 where a run's first bucket starts, -1 after its last
    spans: dict[str, list[int]] = {}
    for _rid, job, kind, fire, attempt, state, node, started, finished in _in_span(
            conn, first, end):
        if allowed is not None and not allowed(job):
            continue
        if finished is not None and first <= finished < end:
            outcomes[OUTCOME_CLASS.get(state, "other")][int(finished - first) // step] += 1
        if started is None:
            continue
        if kind == "scheduled" and attempt == 1 and first <= fire < end:
            late[int(fire - first) // step].append(max(0.0, started - fire))
        if node:
            lo = max(0, int(started - first) // step) if started >= first else 0
            stop = finished if finished is not None else now
            if stop < first or started >= end:
                continue
            hi = min(n - 1, int(stop - first) // step)
            marks = spans.setdefault(node, [0] * (n + 1))
            marks[lo] += 1
            marks[hi + 1] -= 1
    running: dict[str, list[int]] = {}
    for node in sorted(spans):
        total, series = 0, []
        for mark in spans[node][:n]:
            total += mark
            series.append(total)
        running[node] = series
    p50, p99 = [], []
    for values in late:
        values.sort()
        p50.append(None if not values else round(_pct(values, 50), 3))
        p99.append(None if not values else round(_pct(values, 99), 3))
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
    ends at ``now``. Over ``limit`` runs the shortest are left out (``cut``
    says how many): at that density a short bar is not visible anyway."""
    found = []   # (length, started, stop, run_id, job, node, state, running): tuples, cheap
    for rid, job, _kind, _fire, _attempt, state, node, started, finished in _in_span(
            conn, start, end):
        if started is None or not node or started > end:
            continue
        stop = finished if finished is not None else now
        if stop < start or (allowed is not None and not allowed(job)):
            continue
        found.append((stop - started, started, stop, rid, job, node, state, finished is None))
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

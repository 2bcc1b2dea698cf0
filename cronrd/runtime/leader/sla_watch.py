"""The leader's SLA watch: every few seconds, the SLA misses of each job
with an ``sla:`` (decisions/sla.py, over the replicated state), proposed
as alerts; ``apply`` keeps one per (job, fire time, kind), so a new leader
that finds the same miss proposes it in vain.

Also the reads of ``cronrd alerts`` and ``cronrd dead-letter``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from typing import Awaitable, Callable

from ...decisions import sla as S
from ...errors import CronrdError
from ...jobspec import JobSpec
from ...schedule import parse_schedule, resolve_timezone
from ...schedule.calendars import CalendarTrigger
from ...state.calendars import job_trigger
from ...schedule.delays import jitter_for
from ...state import alerts as AL
from ...state import commands as C

log = logging.getLogger("cronrd.alerting")

WINDOW = 2 * 86400       # fire times looked at: at most this far back (besides the SLA's own)
MAX_EXPECTED = 2000      # fire times of one job's schedule looked at, newest
MAX_RECORDS = 5000       # records of one job looked at, newest
EVERY = 5.0              # seconds between looks


def sla_jobs(conn) -> list[tuple[str, JobSpec, float]]:
    """(name, definition, in force since) of the jobs that have an ``sla:``."""
    out = []
    for name, text, since in conn.execute(
            "SELECT j.name, s.spec, j.updated_at FROM specs s "  # (CROSS: specs_sla first)
            "CROSS JOIN jobs j ON j.name = s.name AND j.digest = s.digest "
            "WHERE instr(s.spec, '\"sla\":') > 0 ORDER BY j.name"):
        spec = JobSpec.from_dict(json.loads(text))
        if spec.sla is not None:
            out.append((name, spec, since))
    return out


def _pause_state(conn, name: str) -> tuple[bool, float | None]:
    """Whether the job is paused now (or every job is: `pause --all`), and
    when it (or every job) was last resumed."""
    paused = any(p for (p,) in conn.execute("SELECT paused FROM jobs WHERE name=?", (name,))) \
        or any(conn.execute("SELECT 1 FROM pauses WHERE name=''"))  # `pause --all`
    resumed = [t for t in (_resumed_at(conn, name), _resumed_at(conn, "")) if t is not None]
    return paused, max(resumed) if resumed else None


def _resumed_at(conn, name: str, look: int = 50) -> float | None:
    """When the pause of ``name`` ("" every job's) last ended: a resume that
    followed a pause (one of a job that was not paused, a deploy script's
    habit, ends nothing and must not put staleness off)."""
    events = list(conn.execute("SELECT paused, at FROM pause_log WHERE name=? "
                               "ORDER BY at DESC, event_id DESC LIMIT ?", (name, look)))
    for (paused, at), (before, _) in zip(events, events[1:]):
        if not paused and before:
            return at
    return None


def _records(conn, job: str, first: int) -> tuple[list[S.Record], float | None]:
    # Keyed by (fire time, target): a run_on: all job has one record per node
    # at each fire time (target = the node), merged below.
    by: dict[tuple[int, str], dict] = {}
    rows = list(conn.execute(
        "SELECT fire_time, target, attempt, state, reason, started_at, finished_at FROM runs "
        "WHERE job=? AND origin='schedule' AND fire_time >= ? "
        "ORDER BY fire_time DESC, attempt DESC, target DESC LIMIT ?", (job, first, MAX_RECORDS)))
    for ft, target, _attempt, state, reason, started, finished in reversed(rows):
        d = by.setdefault((ft, target), {"started": None, "ok": None, "running": None})
        d["state"], d["reason"] = state, reason
        if started is not None and (d["started"] is None or started < d["started"]):
            d["started"] = started
        if state == "succeeded" and finished is not None and d["ok"] is None:
            d["ok"] = finished
        d["running"] = started if state == "running" else None
    per_time: dict[int, list[dict]] = {}
    for (ft, _target), d in sorted(by.items()):
        per_time.setdefault(ft, []).append(d)
    recs = [_merged(ft, ds) for ft, ds in sorted(per_time.items())]
    last = next(iter(conn.execute(
        "SELECT MAX(finished_at) FROM (SELECT finished_at FROM runs WHERE job=? AND "
        "state='succeeded' ORDER BY run_id DESC LIMIT 100)", (job,))), (None,))[0]
    return recs, last


def _rank(d: dict) -> int:
    """Which node's record speaks for a run_on: all fire time: one still
    active, else a failure, else one skipped not by choice, else a success."""
    if d["state"] in ("pending", "assigned", "running", "waiting"):
        return 0
    if d["state"] in S.FAILURES:
        return 1
    if d["state"] != "succeeded" and not S.chosen(S.Record(0, d["state"], d["reason"])):
        return 2
    return 3 if d["state"] == "succeeded" else 4


def _merged(ft: int, ds: list[dict]) -> S.Record:
    """One fire time's record from its nodes' (one, but for run_on: all): it
    started when the first node started, succeeded when the last did (never,
    while one has not), runs since the first still running."""
    if len(ds) == 1:
        d = ds[0]
        return S.Record(ft, d["state"], d["reason"], d["started"], d["ok"], d["running"])
    head = min(ds, key=_rank)
    starts = [d["started"] for d in ds if d["started"] is not None]
    oks = [d["ok"] for d in ds if not S.chosen(S.Record(ft, d["state"], d["reason"]))]
    running = [d["running"] for d in ds if d["running"] is not None]
    return S.Record(ft, head["state"], head["reason"], min(starts) if starts else None,
                    None if None in oks else max(oks), min(running) if running else None)


def _finish_by(hhmm: str, zone) -> Callable[[int], float]:
    hh, mm = (int(x) for x in hhmm.split(":"))

    def deadline(t: int) -> float:
        local = _dt.datetime.fromtimestamp(t, zone)
        cand = local.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if cand.timestamp() < t:
            cand = (local + _dt.timedelta(days=1)).replace(hour=hh, minute=mm, second=0,
                                                           microsecond=0)
        return cand.timestamp()
    return deadline


def job_misses(conn, name: str, spec: JobSpec, since: float, now: float,
               default_tz: str) -> list[S.Miss]:
    sla = spec.sla
    assert sla is not None  # sla_jobs() gives the jobs with an sla:
    offsets = [x for x in (sla.start_within, sla.finish_within) if x is not None]
    first = int(max(since, now - WINDOW - max(offsets + [86400.0 if sla.finish_by else 0.0])))
    zone = resolve_timezone(spec.timezone or default_tz)
    expected: list[int] = []
    try:
        schedule = parse_schedule(spec.schedule)
        if schedule.kind not in ("reboot", "after") and (offsets or sla.finish_by):
            trigger = job_trigger(conn, spec, schedule, zone)
            until = int(now - min(offsets)) if offsets else int(now)
            # about the newest MAX_EXPECTED of them: narrow the span until it
            # holds no more (an every-second job looks at the last half hour)
            span = max(until - first, 1)
            while True:
                expected = list(trigger.fires_between(until - span - 1, until,
                                                      limit=MAX_EXPECTED + 1))
                if len(expected) <= MAX_EXPECTED or span <= 60:
                    break
                span //= 8
            expected = [t for t in expected[:MAX_EXPECTED] if t >= since]
            if isinstance(trigger, CalendarTrigger):   # a day its calendar skips: no miss
                expected = [t for t in expected if trigger.skip_reason(t) is None]
    except CronrdError:
        expected = []
    recs, last = _records(conn, name, first)
    finish_by = _finish_by(sla.finish_by, zone) if sla.finish_by else None
    due_at = ((lambda t: t + jitter_for(name, t, spec.jitter)) if spec.jitter else None)
    paused, resumed_at = _pause_state(conn, name)
    out = S.misses(sla, recs, expected, now, since=since, last_success=last,
                   finish_by=finish_by, due_at=due_at, paused=paused, resumed_at=resumed_at)
    return [m for m in out if not _streak_alerted(conn, name, m, recs, first, last)]


def _streak_alerted(conn, job: str, miss: S.Miss, recs: list[S.Record], first: int,
                    last_success: float | None) -> bool:
    """A failure_tolerance streak that reaches back to the first record read
    (the window starts at ``first``) may have begun before it: if an alert of
    it was opened before the window, since the last success, it is that
    streak's (keyed by its real first failure), not a new one."""
    if miss.kind != "failure_tolerance":
        return False
    head = next((r.fire_time for r in recs if not S.chosen(r)), None)
    if head != miss.fire_time:
        return False  # the streak began inside the window: its key is its own
    return next(iter(conn.execute(
        "SELECT 1 FROM alerts WHERE job=? AND kind='failure_tolerance' AND fire_time < ? "
        "AND opened_at > ? LIMIT 1",
        (job, min(first, miss.fire_time), -1.0 if last_success is None else last_success))),
        None) is not None


async def watch_once(conn, now: float, default_tz: str,
                     propose: Callable[[C.Command], Awaitable[dict]]) -> int:
    """Propose the misses not alerted yet; how many were proposed."""
    todo: list[list] = []
    for name, spec, since in sla_jobs(conn):
        try:
            for m in job_misses(conn, name, spec, since, now, default_tz):
                if not AL.exists(conn, name, m.fire_time, m.kind):
                    todo.append([name, m.fire_time, m.kind, m.detail])
        except Exception:
            log.exception("event=sla_check_failed job=%s", name)
    for i in range(0, len(todo), 500):
        await propose(C.RaiseAlerts(alerts=todo[i:i + 500], at=now))
    return len(todo)

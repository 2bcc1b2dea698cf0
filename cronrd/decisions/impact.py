"""What a change to job files does (`cronrd diff OLD NEW`), before it is
merged: pure, a function of the two sets of definitions, the cluster's
pools, calendars and recorded run durations, and a window of time.

For each job: whether it is added, removed or changed (and which keys);
its fire times over the window added, removed or moved; the daylight-saving
changes in the window that touch its new fire times; whether its runs may
now overlap each other; parents it depends on that the new set lacks; and
SLAs its recorded durations cannot meet. Across jobs: pools whose slots
the new set over-commits (more runs of the pool at one time than slots)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..jobspec.model import JobSpec
from ..schedule import Trigger, human_duration, iso_utc, make_trigger, parse_schedule
from ..schedule.calendars import Calendar, CalendarTrigger
from ..schedule.zones import resolve_timezone, transitions

MAX_FIRES = 10_000      # fire times of one job looked at in the window
SHOWN = 5               # fire times listed per kind (the rest are counted)
POOL_DEFAULT_RUN = 1.0  # seconds a run is taken to hold its slots when nothing says more


@dataclass(frozen=True)
class Context:
    """What the definitions alone do not say: the pools (name -> slots; None:
    unknown, not checked), the calendars in force, each job's typical run
    in seconds (the median of its recent successes, where known) and the
    zone of jobs that name none."""
    pools: Mapping[str, int] | None = None
    calendars: Mapping[str, Calendar] = field(default_factory=dict)
    durations: Mapping[str, float] = field(default_factory=dict)
    default_tz: str = "UTC"


@dataclass
class JobImpact:
    name: str
    change: str                                   # added | removed | changed | unchanged
    keys: list[str] = field(default_factory=list)  # the definition's keys that changed
    old_fires: int = 0
    new_fires: int = 0
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    moved: list[tuple[int, int]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)   # (kind, text)

    @property
    def noteworthy(self) -> bool:
        return self.change != "unchanged" or bool(self.added or self.removed or self.notes)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.name, "change": self.change, "keys": self.keys,
                "fire_times": {"old": self.old_fires, "new": self.new_fires,
                               "added": [iso_utc(t) for t in self.added],
                               "removed": [iso_utc(t) for t in self.removed],
                               "moved": [[iso_utc(a), iso_utc(b)] for a, b in self.moved]},
                "notes": [{"kind": k, "text": t} for k, t in self.notes]}


@dataclass
class Report:
    start: int
    end: int
    jobs: list[JobImpact]
    pools: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.pools) or any(j.noteworthy for j in self.jobs)

    def to_dict(self) -> dict[str, Any]:
        return {"window": {"from": iso_utc(self.start), "to": iso_utc(self.end)},
                "changed": self.changed,
                "jobs": [j.to_dict() for j in self.jobs if j.noteworthy],
                "unchanged": sorted(j.name for j in self.jobs if not j.noteworthy),
                "pools": self.pools}


def _trigger(spec: JobSpec, ctx: Context) -> Trigger | None:
    try:
        schedule = parse_schedule(spec.schedule)
    except Exception:
        return None
    if schedule.kind in ("reboot", "after"):
        return None
    trigger = make_trigger(schedule, spec.timezone or ctx.default_tz)
    if spec.calendar is not None:
        return CalendarTrigger(trigger, spec.calendar, ctx.calendars)
    return trigger


def fires(spec: JobSpec | None, ctx: Context, start: int, end: int) -> list[int]:
    """The fire times of a definition in (start, end] that run (a calendar's
    skips are not runs), at most MAX_FIRES."""
    if spec is None or not spec.enabled:
        return []
    trig = _trigger(spec, ctx)
    if trig is None:
        return []
    out = list(trig.fires_between(start, end, MAX_FIRES))
    if isinstance(trig, CalendarTrigger):
        out = [t for t in out if trig.skip_reason(t) is None]
    return out


def _changed_keys(old: JobSpec, new: JobSpec) -> list[str]:
    a, b = old.to_dict(), new.to_dict()
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def impact(old: Mapping[str, JobSpec], new: Mapping[str, JobSpec], ctx: Context,
           start: int, end: int) -> Report:
    jobs: list[JobImpact] = []
    new_fires: dict[str, list[int]] = {}
    old_fires: dict[str, list[int]] = {}
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        change = "added" if o is None else "removed" if n is None else \
            "changed" if o.to_dict() != n.to_dict() else "unchanged"
        ji = JobImpact(name, change, _changed_keys(o, n) if o is not None and n is not None
                       else [])
        a = old_fires[name] = fires(o, ctx, start, end)
        b = new_fires[name] = fires(n, ctx, start, end)
        ji.old_fires, ji.new_fires = len(a), len(b)
        gone, came = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if o is not None and n is not None:
            ji.moved, gone, came = _moves(gone, came, _zone(o, ctx), _zone(n, ctx))
        ji.removed, ji.added = gone, came
        if n is not None and change != "unchanged":
            ji.notes += dst_notes(n, ctx, start, end)
            note = overlap_note(n, b, ctx)
            if note and not (o is not None and overlap_note(o, a, ctx)):
                ji.notes.append(("overlap", note))
            ji.notes += [("sla", t) for t in sla_notes(n, b, ctx)]
        if n is not None:
            ji.notes += [("depends_on", t) for t in dep_notes(n, new, old)]
        jobs.append(ji)
    pools = pool_notes(old, new, old_fires, new_fires, ctx)
    return Report(start, end, jobs, pools)


def _zone(spec: JobSpec, ctx: Context) -> _dt.tzinfo:
    return resolve_timezone(spec.timezone or ctx.default_tz)


def _moves(gone: list[int], came: list[int], old_zone: _dt.tzinfo, new_zone: _dt.tzinfo
           ) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """A fire time removed and one added on the same local day (the only
    ones of that day) are one fire time moved: (moved, removed, added)."""
    def by_day(ts: list[int], zone: _dt.tzinfo) -> dict[_dt.date, list[int]]:
        out: dict[_dt.date, list[int]] = {}
        for t in ts:
            out.setdefault(_dt.datetime.fromtimestamp(t, zone).date(), []).append(t)
        return out
    g, c = by_day(gone, old_zone), by_day(came, new_zone)
    moved = sorted((g[d][0], c[d][0]) for d in g.keys() & c.keys()
                   if len(g[d]) == 1 and len(c[d]) == 1)
    was = {m[0] for m in moved}
    now = {m[1] for m in moved}
    return moved, [t for t in gone if t not in was], [t for t in came if t not in now]


# -- daylight saving --------------------------------------------------------------------
def dst_notes(spec: JobSpec, ctx: Context, start: int, end: int) -> list[tuple[str, str]]:
    """The clock changes in the window that touch the job's fire times."""
    try:
        schedule = parse_schedule(spec.schedule)
    except Exception:
        return []
    if schedule.kind != "cron" or schedule.cron is None:
        return []
    tzname = spec.timezone or ctx.default_tz
    zone = resolve_timezone(tzname)
    out = []
    for t0, before, after in transitions(zone, start, end):
        lo, hi = (t0 + before, t0 + after) if after > before else (t0 + after, t0 + before)
        n = 0
        x = schedule.cron.next_ge(lo)
        first = x
        while x is not None and x < hi and n < 3600:
            n += 1
            x = schedule.cron.next_ge(x + 1)
        if not n or first is None:
            continue
        day = _dt.datetime.fromtimestamp(t0, zone).date().isoformat()
        wall = _dt.datetime.fromtimestamp(first % 86400, _dt.timezone.utc).strftime("%H:%M")
        if after > before:   # spring forward: [lo, hi) does not exist
            if schedule.fixed_time:
                out.append(("dst", f"{day}: the clocks go forward in {tzname}; {wall} does not "
                                   f"exist that day: it runs at {iso_utc(t0)}, the jump"))
            else:
                out.append(("dst", f"{day}: the clocks go forward in {tzname}; {n} fire "
                                   f"time{'s' if n != 1 else ''} from {wall} fall in the "
                                   "missing hour and do not happen"))
        elif schedule.fixed_time:
            out.append(("dst", f"{day}: the clocks go back in {tzname}; {wall} happens twice "
                               "that day: it runs once, in the first pass"))
        else:
            out.append(("dst", f"{day}: the clocks go back in {tzname}; {n} fire "
                               f"time{'s' if n != 1 else ''} from {wall} happen twice (the "
                               "repeated hour runs again)"))
    return out


# -- a job against itself ---------------------------------------------------------------
def _duration(spec: JobSpec, ctx: Context) -> tuple[float, str] | None:
    if spec.name in ctx.durations:
        return ctx.durations[spec.name], "its recorded runs' median"
    if spec.timeout is not None:
        return spec.timeout, "its timeout"
    return None


def overlap_note(spec: JobSpec, times: list[int], ctx: Context) -> str | None:
    dur = _duration(spec, ctx)
    if dur is None or len(times) < 2:
        return None
    gap = min(b - a for a, b in zip(times, times[1:]))
    if dur[0] <= gap:
        return None
    what = {"forbid": "a fire time that finds a run still going is skipped",
            "replace": "each fire time cancels the run still going",
            "queue": "runs queue behind each other and start ever later",
            "allow": "runs pile up, several at once"}.get(spec.concurrency, "")
    return (f"runs may overlap: fire times as close as {human_duration(gap)}, a run takes "
            f"{human_duration(dur[0])} ({dur[1]}); concurrency {spec.concurrency}: {what}")


def sla_notes(spec: JobSpec, times: list[int], ctx: Context) -> list[str]:
    sla = spec.sla
    if sla is None or spec.name not in ctx.durations:
        return []
    d = ctx.durations[spec.name]
    out = []
    took = f"its runs take {human_duration(d)} (recorded median)"
    if sla.finish_within is not None and sla.finish_within < d:
        out.append(f"sla.finish_within {human_duration(sla.finish_within)} cannot be met: "
                   f"{took}")
    if sla.max_runtime is not None and sla.max_runtime < d:
        out.append(f"sla.max_runtime {human_duration(sla.max_runtime)} alerts on a typical "
                   f"run: {took}")
    if sla.start_within is not None and spec.jitter > sla.start_within:
        out.append(f"sla.start_within {human_duration(sla.start_within)} is shorter than its "
                   f"jitter ({human_duration(spec.jitter)}): runs may start after it on "
                   "purpose")
    if sla.finish_by is not None and times:
        zone = resolve_timezone(spec.timezone or ctx.default_tz)
        hh, mm = (int(x) for x in sla.finish_by.split(":"))
        late = 0
        for t in times:
            local = _dt.datetime.fromtimestamp(t, zone)
            due = local.replace(hour=hh, minute=mm, second=0)
            if due < local:
                due += _dt.timedelta(days=1)
            if t + d > due.timestamp():
                late += 1
        if late:
            out.append(f"sla.finish_by {sla.finish_by} cannot be met by {late} of its "
                       f"{len(times)} fire times in the window: {took}")
    return out


def dep_notes(spec: JobSpec, new: Mapping[str, JobSpec], old: Mapping[str, JobSpec]
              ) -> list[str]:
    out = []
    for dep in spec.depends_on:
        if dep.job not in new:
            was = " (the old set had it)" if dep.job in old else ""
            out.append(f"depends on {dep.job}, which the new set does not define{was}: its "
                       "gate never opens")
    return out


# -- pools ------------------------------------------------------------------------------
def _pool_peak(jobs: Mapping[str, JobSpec], fires_of: Mapping[str, list[int]], pool: str,
               ctx: Context) -> tuple[int, int, list[str]]:
    """(most slots held at once, when, the jobs then) of one pool."""
    events: list[tuple[float, int, int, str]] = []
    for name, spec in jobs.items():
        if spec.pool != pool:
            continue
        dur = ctx.durations.get(name) or spec.timeout or POOL_DEFAULT_RUN
        for t in fires_of.get(name, []):
            events.append((t, 1, spec.slots_needed, name))
            events.append((t + dur, 0, -spec.slots_needed, name))
    events.sort()
    held, peak, when = 0, 0, 0
    now_in: list[str] = []
    at_peak: list[str] = []
    for at, _kind, delta, name in events:   # (at one instant, ends before starts)
        held += delta
        if delta > 0:
            now_in.append(name)
        else:
            now_in.remove(name)
        if held > peak:
            peak, when, at_peak = held, int(at), sorted(set(now_in))
    return peak, when, at_peak


def pool_notes(old: Mapping[str, JobSpec], new: Mapping[str, JobSpec],
               old_fires: Mapping[str, list[int]], new_fires: Mapping[str, list[int]],
               ctx: Context) -> list[str]:
    if ctx.pools is None:
        return []
    out = []
    for pool in sorted({s.pool for s in new.values() if s.pool}):
        slots = ctx.pools.get(pool)
        if slots is None:
            out.append(f"pool {pool}: jobs use it ({', '.join(sorted(n for n, s in new.items() if s.pool == pool))}) "
                       "but the daemon config does not define it")
            continue
        peak, when, names = _pool_peak(new, new_fires, pool, ctx)
        before = _pool_peak(old, old_fires, pool, ctx)[0]
        if peak > slots and peak > before:
            out.append(f"pool {pool}: {peak} slots wanted at {iso_utc(when)} ({', '.join(names)}"
                       f"), it has {slots}; the runs beyond wait for a slot (was at most "
                       f"{before} at once)")
    return out

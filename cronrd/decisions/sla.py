"""SLA misses of one job, as a pure function of its records and ``now``.

The leader gathers, for each job with an ``sla:``, what its records of the
recent past say (``Record``) and the fire times its schedule expected, and
proposes an alert for each ``Miss`` that has none yet; ``apply`` keys each
alert by (job, fire time, kind), so however many leaders propose it, there
is one. A miss is decided from the replicated state alone: a job whose node
is down, or that no node may run, still misses (its record is pending or
there is none), and still alerts.

The kinds, each for one fire time F (unless said otherwise):

* ``start_within``: no attempt of F started by F + start_within;
* ``finish_within``: F had no succeeded attempt by F + finish_within;
* ``finish_by``: F had no succeeded attempt by the first HH:MM (the job's
  zone) at or after F (the caller gives that deadline);
* ``max_runtime``: an attempt of F has been running longer than that (an
  alert only: ``timeout`` still kills);
* ``stale_after``: no success for that long (keyed by the time the job went
  stale: one alert per stale spell);
* ``failure_tolerance``: that many final failures in a row (keyed by the
  first of them: one alert per streak).

A fire time the operator chose not to run is not a miss: a record skipped
because the job was paused, disabled or in a maintenance pause, or on a day
its calendar excludes, or cancelled. Staleness does not count the time
from such a skip to the next fire time: a daily job does not go stale over
a weekend its calendar skips, and one that fails on every weekday does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..jobspec.model import Sla
from ..schedule import human_duration, iso_utc

FAILURES = ("failed", "timed_out", "lost")
_CHOSEN = ("paused", "disabled", "maintenance", "calendar")


@dataclass(frozen=True)
class Record:
    """What the attempts of one fire time say."""
    fire_time: int
    state: str                       # the last attempt's state
    reason: str | None = None        # the last attempt's reason
    started_at: float | None = None  # the first start of any attempt
    succeeded_at: float | None = None
    running_since: float | None = None  # the start of an attempt running now


@dataclass(frozen=True)
class Miss:
    fire_time: int
    kind: str
    due: float       # when it became a miss
    detail: str


def chosen(rec: Record) -> bool:
    """Did the operator choose that this fire time not run?"""
    if rec.state == "cancelled":
        return True
    return rec.state == "skipped" and (rec.reason or "").startswith(_CHOSEN)


def misses(sla: Sla, records: Iterable[Record], expected: Iterable[int], now: float, *,
           since: float, last_success: float | None,
           finish_by: Callable[[int], float] | None = None,
           due_at: Callable[[int], float] | None = None,
           paused: bool = False, resumed_at: float | None = None) -> list[Miss]:
    """The misses of one job at ``now``. ``records``: its records of the
    window looked at; ``expected``: the fire times its schedule had in it
    (one without a record never ran: a miss of start and finish);
    ``since``: when the definition with this SLA came into force (nothing
    before it is judged); ``last_success``: when its newest success ended;
    ``due_at``: when a fire time's run is due (its jitter after it, on
    purpose): start_within and finish_within count from then. A job the
    operator paused is not stale (``paused``), and after its resume
    (``resumed_at``) staleness counts from the resume at the earliest."""
    recs = {r.fire_time: r for r in records}
    times = sorted(set(recs) | {t for t in expected if t >= since})
    out: list[Miss] = []
    for t in times:
        rec = recs.get(t)
        if t < since or (rec is not None and chosen(rec)):
            continue
        started = rec.started_at if rec else None
        done = rec.succeeded_at if rec else None
        base = due_at(t) if due_at is not None else t
        if sla.start_within is not None:
            due = base + sla.start_within
            if due <= now and (started is None or started > due):
                out.append(Miss(t, "start_within", due, _late(
                    "no attempt started", t, sla.start_within, started, rec)))
        if sla.finish_within is not None:
            due = base + sla.finish_within
            if due <= now and (done is None or done > due):
                out.append(Miss(t, "finish_within", due, _late(
                    "not succeeded", t, sla.finish_within, done, rec)))
        if sla.finish_by is not None and finish_by is not None:
            due = finish_by(t)
            if due <= now and (done is None or done > due):
                out.append(Miss(t, "finish_by", due, f"not succeeded by {sla.finish_by} "
                                f"({iso_utc(due)}){_state(rec)}"))
        if sla.max_runtime is not None and rec is not None and rec.running_since is not None:
            due = rec.running_since + sla.max_runtime
            if due <= now:
                out.append(Miss(t, "max_runtime", due, f"running for longer than "
                                f"{human_duration(sla.max_runtime)} (since "
                                f"{iso_utc(rec.running_since)})"))
    if sla.stale_after is not None and not paused:
        base = max(last_success, since) if last_success is not None else since
        if resumed_at is not None:
            base = max(base, resumed_at)
        # the time from a skipped fire time (a day its calendar excludes, a
        # pause) to the next fire time does not count as time without success
        later = [t for t in times if t >= base]
        excluded = 0.0
        for i, t in enumerate(later):
            rec = recs.get(t)
            if rec is not None and rec.state == "skipped" and chosen(rec):
                nxt = later[i + 1] if i + 1 < len(later) else now
                excluded += max(0.0, min(nxt, now) - t)
        due = base + sla.stale_after + excluded
        if due <= now:
            what = (f"no success since {iso_utc(last_success)}" if last_success is not None
                    else "no success yet")
            out.append(Miss(int(due), "stale_after", due,
                            f"{what} ({human_duration(sla.stale_after)}: stale_after)"))
    if sla.failure_tolerance is not None:
        streak: list[Record] = []
        for t in times:
            rec = recs.get(t)
            if rec is None or rec.running_since is not None or rec.state in (
                    "pending", "assigned", "running", "waiting") or chosen(rec):
                continue
            streak = streak + [rec] if rec.state in FAILURES else []
        if len(streak) >= sla.failure_tolerance:
            first = streak[0]
            out.append(Miss(first.fire_time, "failure_tolerance", now,
                            f"{len(streak)} failures in a row since {iso_utc(first.fire_time)} "
                            f"(failure_tolerance {sla.failure_tolerance})"))
    return out


def _state(rec: Record | None) -> str:
    if rec is None:
        return "; it has no record (it never fired: was the cluster down?)"
    return f"; it is {rec.state}" + (f" ({rec.reason})" if rec.reason else "")


def _late(what: str, t: int, within: float, at: float | None, rec: Record | None) -> str:
    text = f"{what} within {human_duration(within)} of {iso_utc(t)}"
    if at is not None:
        return f"{text} (at {iso_utc(at)}, {human_duration(at - t)} after)"
    return text + _state(rec)

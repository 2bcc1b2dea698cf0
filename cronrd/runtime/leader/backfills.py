"""Backfills and reruns on the daemon: the fire times a request names (from
the job's own trigger: its schedule, zone and DST rule, as the scheduler
has them), the plan a dry run prints, and the leader's duty that steps the
open backfills (state/backfill.py does the counting, in apply)."""

from __future__ import annotations

import asyncio
import logging

from ...decisions import backfill as D
from ...errors import CronrdError, RequestError
from ...schedule import Trigger, iso_utc, make_trigger, parse_schedule
from ...schedule.calendars import CalendarTrigger
from ...state.calendars import job_trigger
from ...state import backfill as BF
from ...state import commands as C
from ...state import queries as Q
from ...state.effects import Effect, RunDone
from ..tasks import wait_within

log = logging.getLogger("cronrd.backfill")

PREV_SEARCH = (3600, 86400, 31 * 86400, 400 * 86400, 5 * 366 * 86400)


def trigger_of(spec, default_tz: str, conn=None) -> Trigger:
    """The job's trigger (with its calendar, given ``conn``), or a
    RequestError for a schedule without fire times."""
    try:
        schedule = parse_schedule(spec.schedule)
        if schedule.kind == "reboot":
            raise RequestError(f"job {spec.name!r} runs at boot (@reboot): it has no fire "
                               "times to backfill or rerun")
        if conn is not None:
            return job_trigger(conn, spec, schedule, spec.timezone or default_tz)
        return make_trigger(schedule, spec.timezone or default_tz)
    except RequestError:
        raise
    except CronrdError as exc:
        raise RequestError(f"job {spec.name!r}: schedule {spec.schedule!r} has no fire times "
                           f"of its own ({exc})") from None


def fire_times(trigger: Trigger, first: int, last: int, limit: int) -> list[int]:
    """The fire times in [first, last], at most ``limit``."""
    return list(trigger.fires_between(first - 1, last, limit))


def previous_fire(trigger: Trigger, t: int) -> int | None:
    """The last fire time before ``t``, looking back at most five years."""
    for span in PREV_SEARCH:
        got = None
        for got in trigger.fires_between(t - span - 1, t - 1):
            pass
        if got is not None:
            return got
    return None


def plan(conn, spec, default_tz: str, first: int, last: int, reprocess: str,
         order: str, force: bool) -> tuple[list[int], list[tuple[int, D.Decision]]]:
    """The fire times of a backfill request and what the backfill would do
    with each, from the records there are now (RequestError: too many).
    Counts first: it generates at most one fire time more than the request
    may take (``force``: D.fire_limit), so a refusal costs that at most."""
    if last < first:
        raise RequestError(f"--to ({iso_utc(last)}) is before --from ({iso_utc(first)}); "
                           "give the earlier time to --from")
    cap = D.fire_limit(force)
    trigger = trigger_of(spec, default_tz, conn)
    times = fire_times(trigger, first, last, cap + 1)
    if len(times) > cap:
        raise RequestError(f"backfill of {spec.name} from {iso_utc(first)} to "
                           f"{iso_utc(last)}: {D.over_limit(force)}")
    if not times:
        raise RequestError(f"job {spec.name!r} has no fire time from {iso_utc(first)} to "
                           f"{iso_utc(last)} (schedule {spec.schedule!r}); `cronrd show "
                           f"{spec.name}` shows its next fire times")
    recs = BF.records(conn, spec.name, times[0], times[-1])
    cursor, created_at = next(iter(conn.execute(
        "SELECT cursor, created_at FROM jobs WHERE name=?", (spec.name,))), (None, None))
    decisions = D.plan(times, recs, reprocess, order, job_created_at=created_at,
                       cursor=cursor)
    if isinstance(trigger, CalendarTrigger):   # a day its calendar skips stays skipped
        decisions = [(t, D.Decision("skip", reason=why)
                      if (why := trigger.skip_reason(t)) is not None else d)
                     for t, d in decisions]
    return times, decisions


def rerun_time(conn, spec, default_tz: str, t: int) -> int:
    """``t`` if it is a fire time of the job with a record; else a
    RequestError that names the nearest fire times (and records)."""
    trigger = trigger_of(spec, default_tz, conn)
    is_fire = trigger.next_after(t - 1) == t
    if is_fire and BF.records(conn, spec.name, t, t):
        return t
    near = [f for f in (previous_fire(trigger, t), trigger.next_after(t)) if f is not None]
    rec = []
    for sql in ("SELECT max(fire_time) FROM runs WHERE job=? AND origin='schedule' AND "
                "target='' AND fire_time < ?",
                "SELECT min(fire_time) FROM runs WHERE job=? AND origin='schedule' AND "
                "target='' AND fire_time > ?"):
        got = next(iter(conn.execute(sql, (spec.name, t))))[0]
        if got is not None:
            rec.append(got)
    what = (f"{iso_utc(t)} is a fire time of {spec.name} but it has no record (never "
            "handled: `cronrd backfill` creates one)" if is_fire else
            f"{iso_utc(t)} is not a fire time of {spec.name} (schedule {spec.schedule!r})")
    hint = []
    if near and not is_fire:
        hint.append("nearest fire times " + ", ".join(iso_utc(f) for f in near))
    if rec:
        hint.append("nearest with a record " + ", ".join(iso_utc(f) for f in rec))
    return_hint = "; ".join(hint) if hint else "the job has no run records yet"
    raise RequestError(f"cannot rerun: {what}; {return_hint}")


class Backfiller:
    """The leader's duty: step each open backfill when a step would change
    something (a run of it ended, or it has room and fire times waiting), at
    once when a run ends and every ``interval`` otherwise. Only while this
    node leads; the proposals are leader-only."""

    def __init__(self, conn, propose, clock, interval: float):
        self.conn = conn
        self.propose = propose
        self.clock = clock
        self.interval = interval
        self.wake = asyncio.Event()

    def on_effects(self, effects: list[Effect]) -> None:
        if any(isinstance(e, RunDone) for e in effects):
            self.wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self.step_all()
            except CronrdError as exc:
                log.info("event=backfill_step_failed error=\"%s\"", exc)
            try:
                await wait_within(self.wake.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    async def step_all(self) -> None:
        for bid in BF.open_ids(self.conn):
            job = next(iter(self.conn.execute("SELECT job FROM backfills WHERE id=?",
                                              (bid,))))[0]
            if not BF.movable(self.conn, bid, Q.job_spec(self.conn, job),
                              BF.held(self.conn, job)):
                continue
            res = await self.propose(C.BackfillStep(backfill=bid, at=self.clock.now()))
            if res.get("released") or res.get("state"):
                log.info("event=backfill_step backfill=%d job=%s released=%d ended=%d "
                         "state=%s", bid, job, len(res.get("released", [])),
                         res.get("ended", 0), res.get("state", "running"))

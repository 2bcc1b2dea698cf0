"""The steps of the schedule: the job, its schedule (cron or @after),
pauses, catch-up."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import apsw

from ..schedule import Trigger, human_duration, iso_utc, parse_iso, plan_catchup
from ..schedule.calendars import CalendarTrigger
from ..state import pause_log
from ..state import queries as Q
from ..state import trail
from .subject import Step, Subject, _is_fire, _jump_text, _offset, prev_fire


def job_step(s: Subject) -> list[Step]:
    """Is the job defined, since when, which definition, any conflict?"""
    if s.spec is None:
        return [Step("job", f"{s.name} is no longer defined (removed from the job files); "
                     "its records remain", {"defined": False})]
    assert s.times is not None and s.job is not None  # a defined job has its row
    created, updated = s.times["created_at"], s.times["updated_at"]
    src = s.job["source"]
    text = f"{s.name} defined since {iso_utc(round(created))} (from {src}"
    if updated > created + 1:
        text += f"; its definition in force dates from {iso_utc(round(updated))}"
    text += ")"
    data = {"defined": True, "created_at": iso_utc(round(created)),
            "updated_at": iso_utc(round(updated)), "source": src, "digest": s.job["digest"]}
    out = []
    blocks = None
    if s.t < created and not s.records:
        text += (f"; {iso_utc(s.t)} is before it existed: fire times before a job is created "
                 "are not missed")
    elif updated > s.t and not s.future and not s.records:
        text += "; the definition in force now is newer than T (the one at T may differ)"
    if not s.spec.enabled:
        text += "; disabled (enabled: false in its job file)"
        blocks = "disabled: enabled is false in the job file"
    out.append(Step("job", text, data, blocks))
    if s.job.get("conflict"):
        out.append(Step("conflict", str(s.job["conflict"])))
    return out


def schedule_step(s: Subject) -> list[Step]:
    """Is ``t`` a fire time of the schedule in its zone, with the DST rule?"""
    out = []
    if s.time_note:
        out.append(Step("time", s.time_note))
    if s.spec is None:
        return out
    head = f"{s.spec.schedule} in {s.tz}:"
    t = s.t
    data: dict[str, Any] = {"schedule": s.spec.schedule, "timezone": s.tz,
                            "local": s.local(t)}
    if s.schedule is None:
        return out + [Step("schedule", f"{head} the schedule does not parse here",
                           data | {"fire_time": None})]
    if s.schedule.kind == "after":
        return out + _after_schedule(s, data)
    if s.schedule.kind == "reboot":
        return out + [Step("schedule", f"{head} fires once when cronrd starts after a boot "
                           "(its fire times are the boot times)", data | {"fire_time": None})]
    fire = _is_fire(s.trigger, t)
    data["fire_time"] = fire
    if s.schedule.kind == "every":
        what = "is a fire time" if fire else "is not a fire time"
        text = f"{head} {iso_utc(t)} {what} ({s.local(t)}; @every counts in UTC, " \
               "daylight saving does not move it)"
    else:
        text = _cron_text(s, head, fire, data)
    if s.time_note and " does not exist " in s.time_note and not s.schedule.fixed_time \
            and s.schedule.kind == "cron":
        text += ("; the wall time asked does not exist that day, and a wildcard schedule "
                 "does not fire at wall times that do not exist")
    if not fire and s.records:
        text += ("; the records below were made under the definition in force then (the "
                 "schedule or zone changed since)")
    if not fire:
        assert s.trigger is not None  # a cron or @every schedule has one
        before = prev_fire(s.trigger, t)
        after = s.trigger.next_after(t)
        data["previous"], data["next"] = iso_utc(before), iso_utc(after)
        near = [f"before: {iso_utc(v)} ({s.local(v)})" if k == "b" else
                f"after: {iso_utc(v)} ({s.local(v)})"
                for k, v in (("b", before), ("a", after)) if v is not None]
        if near:
            text += "; nearest fire times " + ", ".join(near)
    return out + [Step("schedule", text, data,
                       None if fire or s.records else "not a fire time of the schedule")]

def calendar_step(s: Subject) -> list[Step]:
    """What the job's calendar does at ``t``: a day it excludes (skipped,
    or the fire time moved), the n-th business day, or allowed."""
    trig = s.trigger
    if not isinstance(trig, CalendarTrigger) or s.spec is None or s.spec.calendar is None:
        return []
    t = s.t
    rule = s.spec.calendar
    data: dict[str, Any] = {"calendar": rule.to_dict(), "day": trig.day_of(t).isoformat()}
    own = Trigger.next_after(trig, t - 1) == t      # a fire time of the schedule itself
    if not own and _is_fire(trig, t):
        return [Step("calendar", f"{iso_utc(t)} is a fire time its calendar moved here "
                     f"(shift: {rule.shift}) from a day it excludes", data | {"moved": True})]
    if not own:
        return []
    text = trig.judge(t)
    skip = trig.skip_reason(t)
    data["skipped"] = skip is not None
    return [Step("calendar", text, data, skip)]


AFTER_FIRE_TIME = ("an @after child has no fire times of its own: it runs once per generation "
                   "of its parents' outcomes, and a generation's fire time is the newest fire "
                   "time among the parent runs it consumed")


def _after_schedule(s: Subject, data: dict) -> list[Step]:
    """@after: what its fire times are; is ``t`` the fire time of a record
    (a generation), and if not, the nearest that are."""
    data = data | {"fire_time": None}
    if s.gate_now:
        return [Step("schedule", f"@after: {AFTER_FIRE_TIME}; the next generation is decided "
                     "when a parent's outcome comes (its gate below)", data)]
    if s.records:
        data["fire_time"] = True
        gens = sum(r.kind == "upstream" for r in s.records)
        what = (f"the fire time of {gens} generation{'s' if gens != 1 else ''} of its "
                "parents' outcomes" if gens else "a fire time of its records")
        return [Step("schedule", f"@after: {iso_utc(s.t)} ({s.local(s.t)}) is {what} (the "
                     "newest fire time among the parent runs consumed)", data)]
    near = trail.fire_times_near(s.conn, s.name, s.t)
    data["fire_time"] = False
    data["previous"] = iso_utc(near["before"][0]) if near["before"] else None
    data["next"] = iso_utc(near["after"][0]) if near["after"] else None
    data["records_before"] = [iso_utc(t) for t in near["before"]]
    data["records_after"] = [iso_utc(t) for t in near["after"]]
    text = f"@after: no record has fire time {iso_utc(s.t)}; {AFTER_FIRE_TIME}"
    parts = ([f"before: {', '.join(data['records_before'])}"] if near["before"] else []) + \
        ([f"after: {', '.join(data['records_after'])}"] if near["after"] else [])
    text += ("; nearest record fire times " + "; ".join(parts)) if parts else \
        "; it has no records yet (`cronrd explain " + s.name + " --next`: its gate now)"
    return [Step("schedule", text, data, "no generation has this fire time")]


def _cron_text(s: Subject, head: str, fire: bool, data: dict) -> str:
    """The DST rule (triggers.py) as it applies at ``t``."""
    assert s.schedule is not None and s.schedule.cron is not None  # a cron schedule
    t, zone, cron = s.t, s.zone, s.schedule.cron
    fixed = s.schedule.fixed_time
    kind = "fixed-time" if fixed else "wildcard"
    naive = t + _offset(t, zone)
    matches = cron.next_ge(naive) == naive
    off_before = _offset(t - 1, zone)
    jump = _offset(t, zone) - off_before   # > 0: t is the instant of a spring-forward
    here = f"{iso_utc(t)} ({s.local(t)})"
    # the wall time of t, again an hour later or earlier (a repeated hour)?
    wall = _dt.datetime.fromtimestamp(t, zone).replace(tzinfo=None)
    passes = sorted({int(wall.replace(tzinfo=zone, fold=f).timestamp()) for f in (0, 1)})
    twice = len(passes) == 2
    if fire and not matches and jump > 0:
        # a fixed-time schedule's wall time skipped by the jump runs at the jump
        n = cron.next_ge(naive - jump)
        what = (_dt.datetime(1970, 1, 1) + _dt.timedelta(seconds=n)).strftime("%H:%M") \
            if n is not None and n < naive else "a wall time"
        data["dst"] = "moved"
        return (f"{head} {here} is a fire time, moved by daylight saving: {what} does not "
                f"exist that day (clocks jump from {_jump_text(t, zone)}); "
                f"a {kind} schedule runs a time the jump skips once, at the jump")
    if fire and twice:
        other = passes[1] if passes[0] == t else passes[0]
        data["dst"] = "repeated"
        if fixed:
            return (f"{head} {here} is a fire time; that wall time occurs twice (the clocks "
                    f"go back) and a {kind} schedule runs once, in the first pass: this one "
                    f"(the second, {iso_utc(other)}, does not fire)")
        return (f"{head} {here} is a fire time; that wall time occurs twice (the clocks go "
                f"back) and a {kind} schedule follows the wall clock: it fires in both "
                f"passes (the other: {iso_utc(other)})")
    if fire:
        return f"{head} {here} is a fire time"
    if matches and twice and fixed and t == passes[1]:
        data["dst"] = "merged"
        return (f"{head} {here} is not a fire time: it is the second pass of a repeated hour "
                f"(the clocks go back); a {kind} schedule runs once, in the first pass, at "
                f"{iso_utc(passes[0])} ({s.local(passes[0])})")
    return f"{head} {here} is not a fire time"


def pause_step(s: Subject) -> list[Step]:
    """Was the job paused at ``t`` (who, why), or the maintenance pause on;
    is it paused now (for a fire time still to come)?"""
    out: list[Step] = []
    if s.after and not s.records and not s.gate_now:
        return out   # no generation at T: no pause held one (a held one has a record)
    for name, what in ((s.name, "paused"), ("", "maintenance")):
        if s.open:
            now = Q.pause_note(s.conn, name)
            if name:   # the job's flag is the truth (a database from before notes)
                now = (now or {}) if s.job is not None and s.job["paused"] else None
            if now is None:
                out.append(Step(what, "no" if name else "off", {what: False}))
                continue
            hint = f"`cronrd resume {s.name}`" if name else "`cronrd resume --all`"
            fire = "the next generation" if s.gate_now else "a fire at T"
            out.append(Step(what, f"{'paused' if name else 'on'} now{_who(now)}; {fire} "
                            f"is recorded skipped unless {hint} comes first",
                            {what: True, **now},
                            "paused" if name else "maintenance pause of every job"))
            continue
        # A fire committed ahead is skipped when the pause comes, before its
        # time: the pause that counts is the one in force when it was decided.
        said = [r for r in s.records if r.state == "skipped" and (r.reason or "").startswith(
            "paused" if name else "maintenance")]
        when = said[0].finished_at if said and said[0].finished_at is not None else s.t
        if s.after and s.records and not said:   # decided when its gate opened
            when = s.records[0].created_at
        at_t = _pause_at(s.conn, name, when)
        if at_t is None:
            if said:
                out.append(Step(what, f"yes at {iso_utc(s.t)} (who and why are not known: "
                                "paused before cronrd kept a pause history)", {what: True}))
            else:
                out.append(Step(what, "no" if name else "off", {what: False}))
            continue
        until = f", resumed at {at_t['until']}" if at_t["until"] else ", still paused"
        over = at_t["until"] is not None and parse_iso(at_t["until"]) < s.t
        head = f"{'paused' if name else 'on'} at {iso_utc(s.t)}" if not over else \
            f"{'paused' if name else 'on'} when the fire time was decided ahead of it " \
            f"({iso_utc(round(when, 3))})"
        if s.after:   # its fire time is a parent's: what counts is when it was decided
            head = f"{'paused' if name else 'on'} when its generation was decided " \
                f"({iso_utc(round(when, 3))})"
        out.append(Step(what, f"{head}{_who(at_t)}{until}", {what: True, **at_t}))
    return out


def _pause_at(conn: apsw.Connection, name: str, t: float) -> dict | None:
    try:
        return pause_log.in_force_at(conn, name, t)
    except apsw.SQLError:   # a database from before the pause history (read offline)
        return None


def _who(p: dict) -> str:
    by = f" by {p['by']}" if p.get("by") else ""
    note = f": {p['note']}" if p.get("note") else ""
    return f"{by} since {p['at']}{note}" if p.get("at") else f"{by}{note}"


def catchup_step(s: Subject) -> list[Step]:
    """The catch-up policy, and what it did or would do with ``t``."""
    if s.spec is None or s.trigger is None:
        return []
    policy, window = s.spec.catchup, s.spec.catchup_window
    rule = f"catchup: {policy}, catchup_window {human_duration(window)}"
    data = {"catchup": policy, "catchup_window": window}
    out = []
    for g in s.gaps:
        out.append(Step("gap", f"{g['count'] if g['count'] >= 0 else 'very many'} fire times "
                        f"from {g['first']} to {g['last']} skipped together (recorded at "
                        f"{g['recorded_at']}): {g['reason']}", {"gap": g}))
    late = [r for r in s.records if r.kind == "catchup" or
            (r.reason or "").startswith(("catchup:", "catch-up:"))]
    if late:
        r = late[0]
        did = (f"skipped: {r.reason}" if r.state == "skipped" else
               f"run late (committed at {iso_utc(round(r.created_at))}) under the policy")
        out.append(Step("catchup", f"{rule}: cronrd was not scheduling at {iso_utc(s.t)} "
                         f"(down, or no leader); the fire time was {did}", data))
        return out
    if s.gaps:
        return out + [Step("catchup", f"{rule}: cronrd was not scheduling at {iso_utc(s.t)} "
                           "(down, or no leader); the fire time was skipped in the gap above",
                           data)]
    if s.records:
        return out + [Step("catchup", f"{rule} (not needed: handled on time)", data)]
    if s.future:
        return [Step("catchup", f"{rule} (applies if cronrd is not scheduling at T)", data)]
    if not _is_fire(s.trigger, s.t):
        return [Step("catchup", f"{rule} (not applied: T is not a fire time)", data)]
    cursor = s.times["cursor"] if s.times else None
    if s.times is not None and s.t < s.times["created_at"]:
        return [Step("catchup", f"{rule} (not applied: the job did not exist at T)", data)]
    if cursor is not None and s.t <= cursor:
        return [Step("catchup", f"{rule}; no record and no gap for T although the scheduler "
                     f"is past it (cursor {iso_utc(cursor)}): the record was pruned "
                     "(history retention), or the schedule or zone changed after T",
                     data | {"cursor": iso_utc(cursor)})]
    # not handled yet: the scheduler is behind (down, no leader)
    # (T's fate depends only on T, the later fires and now: the plan from
    # just before T, so that no fire before it is enumerated)
    if policy == "all" and window is None:
        run, why = True, None
    else:
        plan = plan_catchup(s.trigger, s.t - 1, int(s.now), policy, window, max_records=1)
        reasons = dict(plan.skipped)
        run = s.t in plan.run
        why = reasons.get(s.t) or (plan.skipped_range[3] if plan.skipped_range else
                                   "superseded by a later fire time")
    would, blocks = ("run it, late", None) if run else (f"skip it ({why})", why)
    return [Step("catchup", f"{rule}; not handled yet: the scheduler has not reached T "
                 f"(cursor {iso_utc(cursor)}; is the daemon running, is there a leader? "
                 f"`cronrd status`); when it does, the policy would {would}",
                 data | {"cursor": iso_utc(cursor), "handled": False}, blocks)]

"""`cronrd explain JOB [--at T | --next]`: why a job did (not) run at one
fire time, past or future, from the replicated state alone.

Like control/reads.py it takes a connection and plain values, so the daemon answers
it on its connection and the CLI from the state database with the daemon
down (offline.py). ``explain`` resolves the time asked, gathers a
``Subject`` (the job, its schedule, the records and gaps of that fire
time, the nodes) and runs the step providers of ``STEPS`` over it, in
order; each returns the lines of its step. The verdict comes last, from
the records (a fire time handled) or from the first step that says it
would keep the fire from running (one not handled yet).

Extension points: a provider is ``(Subject) -> list[Step]``. Dependency
gates and pools go in ``STEPS`` between "overlap" and "placement" (a
scheduled child's gate at T: the reason its record stores,
``upstream_not_ready:JOB`` or ``upstream_failed:JOB@T``, and for a future T
whether each parent has a qualifying run now, ``blocks`` set if not); a
backfill that made or reprocessed the record names itself in the record
lines (kind ``backfill``) or in a provider of its own after "record".

An ``@after`` child has no fire times of its own: a record's fire time is
the newest fire time among the parent runs its generation consumed. ``--at
T`` explains the generation(s) recorded at T (steps "parent" and "gate":
the lineage, each outcome, the trigger rule's verdict) or names the nearest
record fire times; without ``--at`` its latest generation (and a "next"
line); ``--next`` (or no generation yet) its gate now (``gate_now``: each
parent's outcome not consumed yet, a fresh ``within`` success, what it
waits for), read from the state and decided by decisions/dependencies.py
without changing anything; ``at`` is then None.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Callable
from zoneinfo import ZoneInfo

import apsw

from ...errors import CronrdError, RequestError, UsageError
from ...jobspec import JobSpec
from ...schedule import (Schedule, Trigger, human_duration, iso_utc, make_trigger,
                        parse_iso, parse_schedule, plan_catchup, resolve_timezone)
from ...decisions import dependencies as D
from ...state import dependencies as deps
from ...state import alerts as AL
from ...state import downstream as DS
from ...state import node_drains
from ...state import pause_log
from ...state import pools as PL
from ...state import queries as Q
from ...state import trail
from ...model.run import Run
from ...decisions.placement import TAKES_RUNS, NodeView, fits

MAX_BACK = 400 * 366 * 86400   # a previous fire time is looked for this far back at most
MAX_RECORD_LINES = 50          # attempts shown (a run_on: all job on many nodes)


@dataclass(frozen=True)
class Step:
    """One step of the trail: its name (the first column), its text, its
    facts for --json and, for a fire time not handled yet, why it would
    not run (``blocks``)."""
    step: str
    text: str
    data: dict = field(default_factory=dict)
    blocks: str | None = None

    def view(self) -> dict:
        out: dict[str, Any] = {"step": self.step, "text": self.text, **self.data}
        if self.blocks is not None:
            out["blocks"] = self.blocks
        return out


@dataclass
class Subject:
    """What the step providers look at: one job at one instant ``t``."""
    conn: Any
    name: str
    t: int
    now: float
    tz: str
    zone: ZoneInfo
    spec: JobSpec | None                 # None: the job is no longer defined
    job: dict | None                     # its row (queries.jobs), paused, cursor, conflict
    times: dict | None                   # created_at, updated_at, cursor (trail.job_times)
    schedule: Schedule | None
    trigger: Trigger | None
    records: list[Run]
    gaps: list[dict]
    nodes: list[NodeView] | None         # the members now (None: not known here)
    nodes_note: str                      # how the members' health is known ("": live)
    time_note: str | None = None         # how a --local time was resolved
    gate_now: bool = False               # an @after child's next generation: its gate now
    latest: bool = False                 # T was chosen as the latest (no --at, no --next)

    @property
    def after(self) -> bool:
        """Is the job an ``@after`` child (fired by its parents' outcomes)?"""
        return self.schedule is not None and self.schedule.kind == "after"

    @property
    def future(self) -> bool:
        """Is ``t`` still to come (and not yet committed ahead)?"""
        if self.after:   # an @after child's times are its parents': only its gate is to come
            return self.gate_now
        return self.t > self.now and not self.records

    @property
    def open(self) -> bool:
        """Is ``t`` still to be decided (to come, or not reached by the
        scheduler yet)? Then what holds now decides it."""
        if self.after:
            return self.gate_now and self.spec is not None
        if self.handled or self.spec is None:
            return False
        cursor = self.times["cursor"] if self.times else None
        return self.t > self.now or (cursor is not None and self.t > cursor
                                     and self.t >= self.times["created_at"])

    @property
    def handled(self) -> bool:
        """Was ``t`` decided: a record or a gap says what became of it?"""
        return bool(self.records or self.gaps)

    def local(self, t: float) -> str:
        return _local(t, self.zone)


# -- times ----------------------------------------------------------------------------------
def _local(t: float, zone: ZoneInfo) -> str:
    return _dt.datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _wall(t: float, zone: ZoneInfo) -> str:
    return _dt.datetime.fromtimestamp(t, zone).strftime("%H:%M %Z")


def _jump_text(jump: int, zone: ZoneInfo) -> str:
    """"02:00 CET to 03:00 CEST": the wall clock at a spring-forward jump."""
    before = _dt.datetime.fromtimestamp(jump - 1, zone)
    at_old = (before + _dt.timedelta(seconds=1)).replace(tzinfo=None)
    return f"{at_old.strftime('%H:%M')} {before.strftime('%Z')} to {_wall(jump, zone)}"


def _offset(t: float, zone: ZoneInfo) -> int:
    return int(_dt.datetime.fromtimestamp(t, zone).utcoffset().total_seconds())


def _jump_in(lo: int, hi: int, zone: ZoneInfo) -> int:
    """The instant in (lo, hi] where the zone's offset changes (there is one)."""
    before = _offset(lo, zone)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(mid, zone) == before:
            lo = mid
        else:
            hi = mid
    return hi


def resolve_local(text: str, zone: ZoneInfo) -> tuple[int, str | None]:
    """A wall-clock time in ``zone`` (no offset) as an instant, and a note
    when the wall clock is ambiguous (a repeated hour: the first pass is
    taken) or does not exist (a skipped hour: the jump is taken, as a
    fixed-time schedule fires there)."""
    try:
        naive = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--local time {text!r}: use a wall-clock time such as "
                         "2026-03-29T02:30 (no offset)") from None
    if naive.tzinfo is not None:
        raise UsageError(f"--local time {text!r} has an offset; --local takes the wall clock "
                         "of the job's zone (2026-03-29T02:30): drop the offset or --local")
    first = int(naive.replace(tzinfo=zone, fold=0).timestamp())
    second = int(naive.replace(tzinfo=zone, fold=1).timestamp())
    wall = naive.strftime("%Y-%m-%d %H:%M:%S")
    if _dt.datetime.fromtimestamp(first, zone).replace(tzinfo=None) != naive:
        lo, hi = sorted((first, second))
        jump = _jump_in(lo, hi, zone)
        return jump, (f"{wall} does not exist in {zone} (clocks jump from "
                      f"{_jump_text(jump, zone)} at {iso_utc(jump)}); "
                      f"explained: the jump, {iso_utc(jump)}")
    if first != second:
        lo, hi = sorted((first, second))
        return lo, (f"{wall} occurs twice in {zone} ({iso_utc(lo)} and {iso_utc(hi)}: the "
                    f"clocks go back); explained: the first, {iso_utc(lo)} (`--at "
                    f"{iso_utc(hi)}` for the second)")
    return first, None


def resolve_time(at: Any, local: bool, zone: ZoneInfo) -> tuple[int, str | None]:
    """--at: ISO 8601 (UTC unless it has an offset) or epoch seconds; with
    ``local``, a wall-clock time in the job's zone."""
    if isinstance(at, bool) or not isinstance(at, (str, int, float)):
        raise UsageError("at must be a time (ISO 8601 or epoch seconds)")
    if isinstance(at, (int, float)):
        return int(at), None
    if local:
        return resolve_local(at, zone)
    try:
        return parse_iso(at), None
    except CronrdError as exc:
        raise UsageError(f"--at: {exc}") from None


def prev_fire(trigger: Trigger, t: int) -> int | None:
    """The last fire time before ``t``, or None (within MAX_BACK)."""
    span = 64
    while True:
        lo = t - span
        if trigger.count_between(lo, t - 1) != 0:
            break
        if span > MAX_BACK:
            return None
        span *= 4
    a, b = lo, t - 1   # fires in (a, t-1]: some; in (b, t-1]: none
    while b - a > 1:
        mid = (a + b) // 2
        if trigger.count_between(mid, t - 1) != 0:
            a = mid
        else:
            b = mid
    got = trigger.next_after(a)   # a + 1, as next_after sees it
    return got if got is not None and got < t else a + 1


def _is_fire(trigger: Trigger | None, t: int) -> bool:
    return trigger is not None and trigger.next_after(t - 1) == t


# -- the step providers ----------------------------------------------------------------------
def job_step(s: Subject) -> list[Step]:
    """Is the job defined, since when, which definition, any conflict?"""
    if s.spec is None:
        return [Step("job", f"{s.name} is no longer defined (removed from the job files); "
                     "its records remain", {"defined": False})]
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
    out = []
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


def _pause_at(conn, name: str, t: int) -> dict | None:
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
            (r.reason or "").startswith("catch-up")]
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


# What a record's reason says about concurrency (forbid, replace, queue).
CONCURRENCY_REASONS = ("overlap", "replaced by", "waiting for run", "waited in the queue", "queue full",
                 "released from the queue")


def overlap_step(s: Subject) -> list[Step]:
    """concurrency: what overlapped at ``t``, or what runs now."""
    if s.spec is None:
        return []
    policy = s.spec.concurrency
    said = [r for r in s.records if (r.reason or "").startswith(CONCURRENCY_REASONS)]
    if said:
        return [Step("overlap", f"concurrency: {policy}: {said[0].reason}",
                     {"concurrency": policy})]
    if s.future:
        fire = "the next generation" if s.gate_now else "a fire at T"
        active = Q.active_runs_of(s.conn, s.name)
        if active and policy == "queue":
            flying = sum(r.state.value != "waiting" for r in active)
            waiting = sum(r.state.value == "waiting" and not deps.waits_for_upstream(
                s.conn, r.run_id) for r in active)   # in the queue, not for its parents
            return [Step("overlap", f"concurrency: queue; {flying} in flight "
                         f"and {waiting} waiting now: {fire} waits for its turn",
                         {"concurrency": policy, "active": [r.run_id for r in active]})]
        if active and policy == "forbid":
            ids = ", ".join(str(r.run_id) for r in active)
            runs = f"runs {ids} are" if len(active) > 1 else f"run {ids} is"
            return [Step("overlap", f"concurrency: forbid; {runs} active now: {fire} "
                         "while it still runs is skipped", {"concurrency": policy,
                                                             "active": [r.run_id for r in active]})]
    return [Step("overlap", f"concurrency: {policy}" + (
        "" if s.future else " (nothing overlapped)"), {"concurrency": policy})]


def placement_step(s: Subject) -> list[Step]:
    """run_on, the nodes that may take it, where it was placed."""
    if s.spec is None:
        return []
    ro = s.spec.run_on
    rule = "run_on: any node" if ro.mode == "any" else \
        "run_on: every node" if ro.mode == "all" else \
        f"run_on: {ro.mode} {', '.join(ro.values)}"
    data: dict[str, Any] = {"run_on": {"mode": ro.mode, "values": list(ro.values)}}
    placed = [r for r in s.records if r.node]
    if s.records:
        said = [r.reason for r in s.records
                if (r.reason or "").startswith(("no eligible node", "node "))
                and r.state == "skipped"]
        parts = []
        if placed:
            where = sorted({r.node for r in placed})
            data["nodes"] = where
            parts.append(f"placed on {', '.join(where)}")
        for r in placed:
            if r.moved_from:
                parts.append(f"run {r.run_id} was moved from {r.moved_from.replace(',', ', ')}"
                             " (they did not claim it)")
        parts += said
        return [Step("placement", f"{rule}: " + ("; ".join(parts) or "not placed"), data)]
    if not s.future and (s.handled or s.after):   # (@after: no generation at T)
        return [Step("placement", rule, data)]
    if s.nodes is None:
        return [Step("placement", f"{rule} (the members are not known here)", data)]
    fit = [n for n in s.nodes if fits(ro, n)]
    ready = [n.id for n in fit if n.healthy and n.state in TAKES_RUNS]
    others = [f"{n.id}: {n.why_not or n.state}" for n in fit if n.id not in ready]
    data["eligible"] = ready
    live = f" ({s.nodes_note})" if s.nodes_note else ""
    if not fit:
        why = (f"no member has tags {', '.join(ro.values)}" if ro.mode == "tags" else
               f"run_on {', '.join(ro.values)} names no member of the cluster")
        return [Step("placement", f"{rule}: {why}", data, f"no eligible node: {why}")]
    if not ready:
        why = "; ".join(others)
        return [Step("placement", f"{rule}: no eligible node is up now{live} ({why})", data,
                     f"no eligible node is up ({why})")]
    text = f"{rule}: eligible now{live}: {', '.join(ready)}"
    if others:
        text += f" (not: {'; '.join(others)})"
    return [Step("placement", text, data)]


def record_step(s: Subject) -> list[Step]:
    """Every record of the fire time: attempt, state, node, times, exit, reason."""
    if not s.records:
        if s.gaps or s.gate_now:
            return []
        return [Step("record", "none", {"records": []})]
    out = []
    for r in s.records[:MAX_RECORD_LINES]:
        out.append(Step("record", _record_text(r), {"run": r.view()}))
    if len(s.records) > MAX_RECORD_LINES:
        out.append(Step("record", f"... and {len(s.records) - MAX_RECORD_LINES} more "
                        f"(`cronrd runs {s.name} --since {iso_utc(s.t)}`)"))
    return out


def _record_text(r: Run) -> str:
    state = r.state.value
    text = f"run {r.run_id} attempt {r.attempt} ({r.kind})"
    if r.node:
        text += f" on node {r.node}"
    elif r.target:
        text += f" for node {r.target}"
    text += f": {state}"
    if r.exit_code is not None and state != "succeeded":
        text += f" exit {r.exit_code}"
    if r.signal:
        text += f" signal {r.signal}"
    if r.started_at is not None:
        text += f", started {iso_utc(round(r.started_at, 3))}"
        if r.finished_at is not None:
            text += f", took {human_duration(round(r.finished_at - r.started_at, 1))}"
    elif r.finished_at is not None:
        text += f", recorded at {iso_utc(round(r.finished_at, 3))}"
    elif r.due_at is not None:
        text += f", due {iso_utc(round(r.due_at, 3))}"
    if r.reason:
        text += f"; {r.reason}"
    return text


def upstream_step(s: Subject) -> list[Step]:
    """depends_on: the parents' gate at ``t``: a run waiting for its
    parents (until when), the reason its upstream kept it from running, or
    the parent runs it consumed (its lineage); for a future T, when its
    gate is looked at. A run waiting in the queue after its gate opened
    shows its lineage here and its queue wait under "overlap"."""
    if s.spec is None or not s.spec.depends_on:
        return []
    parents = ", ".join(d.job + (f" (within {human_duration(d.within)})" if d.within else "")
                        for d in s.spec.depends_on)
    rule = f"depends_on {parents}, trigger_rule: {s.spec.trigger_rule}"
    data: dict[str, Any] = {"depends_on": [d.job for d in s.spec.depends_on],
                            "trigger_rule": s.spec.trigger_rule}
    if s.after:
        return _after_upstream(s, rule, data)
    for r in s.records:
        if r.state.value == "waiting" and deps.waits_for_upstream(s.conn, r.run_id):
            until = iso_utc((r.due_at or 0) + s.spec.wait_for_upstream)
            return [Step("upstream", f"{rule}: waiting for its parents ({r.reason}) until "
                         f"{until} (wait_for_upstream)", data | {"waiting": r.run_id})]
        if (r.reason or "").startswith("upstream_"):
            return [Step("upstream", f"{rule}: {r.reason}", data)]
    for r in s.records:
        consumed = deps.lineage(s.conn, r.run_id)
        if consumed:
            runs = ", ".join(f"{x['job']} run {x['run_id']} ({x['state']}, fire time "
                             f"{x['fire_time']})" for x in consumed)
            return [Step("upstream", f"{rule}: gate opened with {runs}",
                         data | {"lineage": consumed})]
    if s.records:
        return [Step("upstream", f"{rule} (no parent run consumed)", data)]
    if not s.future:
        return [Step("upstream", f"{rule}: its gate is looked at when T fires", data)]
    lines, gate, pending = _parents_now(s, need_new=False)
    return [Step("upstream", f"{rule}: its gate is looked at when T fires; if it fired now: "
                 + _gate_now_text(s, gate, pending, need_new=False), data)] + lines


def _after_upstream(s: Subject, rule: str, data: dict) -> list[Step]:
    """An @after child: each generation at ``t`` (the parent runs it
    consumed, each one's outcome, the rule's verdict), or its gate now."""
    head = f"{rule}; @after: one run per generation of their outcomes"
    if s.gate_now:
        lines, gate, pending = _parents_now(s, need_new=True)
        text = _gate_now_text(s, gate, pending, need_new=True)
        blocks = text if gate.action == D.WAIT else None
        return [Step("upstream", head, data)] + lines + [
            Step("gate", ("next generation " if gate.action == D.WAIT else "") + text,
                 {"action": gate.action, "waits_for": pending}, blocks)]
    lin = {r.run_id: deps.lineage(s.conn, r.run_id) for r in s.records}
    gens = [r for r in s.records if lin[r.run_id] or r.kind == "upstream"]
    out = [Step("upstream", head + (f" ({len(gens)} generations at T: a parent's rerun makes a "
                                    "new attempt of the fire time)" if len(gens) > 1 else ""),
                data)]
    for g in gens:
        who = f"run {g.run_id} (attempt {g.attempt})"
        consumed = {x["job"]: x for x in lin[g.run_id]}
        for d in s.spec.depends_on:
            x = consumed.get(d.job)
            text = (f"{who} consumed {d.job} run {x['run_id']}: {x['state'] or 'pruned'} "
                    f"(fire time {x['fire_time']})" if x else
                    f"{who}: {d.job} is not in this generation (nothing new from it)")
            out.append(Step("parent", text, {"run_id": g.run_id, "parent": d.job,
                                             "consumed": x}))
        out.append(Step("gate", f"{who}: {_generation_verdict(s, g, consumed)}",
                        {"run_id": g.run_id, "reason": g.reason}))
    if s.latest:
        _lines, gate, pending = _parents_now(s, need_new=True)
        out.append(Step("next", "next generation " + _gate_now_text(s, gate, pending, True)
                        + f" (`cronrd explain {s.name} --next`)", {"action": gate.action}))
    return out


def _open_why(rule: str, consumed: dict) -> str:
    def cls(x):
        try:
            return D.outcome_class(x["state"])
        except KeyError:
            return None
    if rule in ("any_succeeded", "any_failed"):
        want = D.SUCCESS if rule == "any_succeeded" else D.FAILURE
        hit = [j for j, x in consumed.items() if cls(x) == want]
        return f"{hit[0]} {'succeeded' if want == D.SUCCESS else 'failed'}" if hit else rule
    return {"all_succeeded": "every parent succeeded", "none_failed": "no parent failed",
            "all_finished": "every parent finished"}.get(rule, rule)


def _generation_verdict(s: Subject, g: Run, consumed: dict) -> str:
    """What the trigger rule made of one generation, from its record."""
    rule = s.spec.trigger_rule
    reason = g.reason or ""
    if reason.startswith("upstream_"):
        text = f"trigger_rule {rule} closed the gate: {reason}; recorded {g.state.value}"
        if reason.startswith("upstream_failed"):
            text += f" (on_upstream_failure: {s.spec.on_upstream_failure})"
        return text
    text = f"trigger_rule {rule} opened the gate ({_open_why(rule, consumed)})"
    if g.state.value == "skipped" and reason:
        return f"{text}, but it was held: {reason}"
    if reason.startswith(("waiting for run", "waited in the queue", "released from the queue")):
        return f"{text}, then it {'waits' if g.state.value == 'waiting' else 'waited'} in its " \
            "queue (overlap above)"
    if g.kind != "upstream":
        return text
    return f"{text}: the run was made (attempts below)"


def _parents_now(s: Subject, need_new: bool) -> tuple[list[Step], D.Gate, list[str]]:
    """What the child sees of each parent now (read only), and its gate."""
    view = deps.parents_of(s.conn, s.name, s.spec, s.now)
    last = deps.consumed_last(s.conn, s.name)
    lines = []
    for d, p in zip(s.spec.depends_on, view):
        bits = []
        if p.new is not None:
            bits.append(f"new outcome not consumed yet: run {p.new.run_id} {p.new.state} "
                        f"(fire time {iso_utc(p.new.fire_time)})")
        if p.fresh is not None:
            bits.append(f"a success within {human_duration(d.within)}: run {p.fresh.run_id} "
                        f"(fire time {iso_utc(p.fresh.fire_time)})")
        lr = last.get(d.job, 0)
        if not bits:
            bits.append(f"nothing new since run {lr} (consumed last)" if lr else
                        "no outcome yet")
        active = Q.active_runs_of(s.conn, d.job)
        if active:
            bits.append("active now: " + ", ".join(f"run {r.run_id} ({r.state.value})"
                                                   for r in active[:5]))
        lines.append(Step("parent", f"{d.job}: " + "; ".join(bits), {
            "parent": d.job, "consumed_last": lr,
            "new": p.new.__dict__ if p.new else None,
            "fresh": p.fresh.__dict__ if p.fresh else None,
            "active": [r.run_id for r in active]}))
    gate = D.decide(s.spec.trigger_rule, view, need_new=need_new)
    pending = [p.job for p in view if p.new is None and p.fresh is None]
    return lines, gate, pending


def _gate_now_text(s: Subject, gate: D.Gate, pending: list[str], need_new: bool) -> str:
    rule = s.spec.trigger_rule
    if gate.action == D.FIRE:
        return f"the gate is open (trigger_rule {rule}): it would run"
    if gate.action != D.WAIT:
        return f"the gate would close: {gate.reason}"
    if not need_new:   # a scheduled child: its own fire time is its trigger
        who = ", ".join(pending)
        wait = s.spec.wait_for_upstream
        if wait > 0:
            return (f"nothing new from {who}: at T it would wait for it up to "
                    f"{human_duration(wait)} (wait_for_upstream)")
        state = "skipped" if s.spec.on_upstream_failure == "skip" else "failed"
        return (f"nothing new from {who}: at T it would be recorded {state} ({gate.reason}; "
                "wait_for_upstream is 0)")
    if not pending:   # only fresh `within` successes: an @after child needs a new outcome
        return ("waits for: a new outcome of a parent (fresh `within` successes alone do not "
                f"make a generation; trigger_rule {rule})")
    who = "waits for: " + ", ".join(pending)
    if rule in ("any_succeeded", "any_failed"):
        x = " or ".join(pending)
        return (f"{who}; runs as soon as {x} {'succeeds' if rule == 'any_succeeded' else 'fails'}"
                f" (trigger_rule {rule})")
    x = " and ".join(pending)
    then = {"all_succeeded": "runs if every parent succeeded",
            "none_failed": "runs unless a parent failed",
            "all_finished": "runs whatever their outcomes"}.get(rule, "")
    return (f"{who}; fires when {x} finish{'' if len(pending) > 1 else 'es'}; {then} "
            f"(trigger_rule {rule})")


# The trail, in order. Dependency gates and pools go between "overlap" and
# "placement" (see the module's docstring).
def downstream_step(s: Subject) -> list[Step]:
    """Each ``--downstream`` rerun this record was part of, and what it got
    (rerun, or why not)."""
    if s.gate_now or not s.records:
        return []
    out = []
    for item in DS.of_record(s.conn, s.name, s.t):
        root = Q.get_run(s.conn, item["root"])
        by = (f"{root.job}@{iso_utc(root.fire_time)} (run {root.run_id})" if root is not None
              else f"run {item['root']}")
        if root is not None and root.job == s.name and root.fire_time == s.t:
            text = f"its rerun (run {root.run_id}) was --downstream"
        elif item["state"] == "waiting":
            text = f"downstream of {by}: waits for its parents in that rerun to end"
        elif item["run_id"] is not None:
            text = f"downstream of {by}: rerun as run {item['run_id']}"
        else:
            text = f"downstream of {by}: {item['note'] or item['state']}"
        out.append(Step("downstream", text, {"downstream": item}))
    return out


def pool_step(s: Subject) -> list[Step]:
    """pool: the job's pool and priority; what its records waited for, or
    how full the pool is now (a fire to come waits for a slot: it is not
    skipped, unless its start_deadline passes first)."""
    if s.spec is None or not s.spec.pool:
        return []
    spec = s.spec
    pool = spec.pool
    data: dict[str, Any] = {"pool": pool, "pool_slots": spec.slots_needed,
                            "priority": spec.priority or 0}
    if spec.start_deadline:
        data["start_deadline"] = spec.start_deadline
    use = next((u for u in PL.usage(s.conn) if u["pool"] == pool), None)
    size = ("not defined in the leader's daemon config" if use is None or not use["defined"]
            else f"{use['slots']} slot{'s' if use['slots'] != 1 else ''}"
            f"{' per node' if use['scope'] == 'node' else ''}")
    head = (f"pool {pool} ({size}); takes {spec.slots_needed}, priority "
            f"{spec.priority or 0}")
    if spec.start_deadline:
        head += f", start_deadline {human_duration(spec.start_deadline)}"
    if s.records:
        parts = []
        for r in s.records:
            reason = r.reason or ""
            if r.state.value == "waiting" and PL.of_run(s.conn, r.run_id) is not None \
                    and PL.is_waiting(s.conn, r.run_id):
                parts.append(f"run {r.run_id} waits: {reason}")
            elif reason.startswith(("waited for pool", "start_deadline")):
                parts.append(f"run {r.run_id}: {reason}")
        return [Step("pool", head + ("; " + "; ".join(parts) if parts else ""), data)]
    if not s.open or use is None:
        return [Step("pool", head, data)]
    data.update({"in_use": use["in_use"], "waiting": use["waiting"]})
    now = (f"{use['in_use']}/{use['slots']} slots in use now" if use["defined"] else
           "its runs wait until it is")
    if use["waiting"]:
        now += f", {use['waiting']} run{'s' if use['waiting'] != 1 else ''} waiting"
    return [Step("pool", f"{head}: {now}", data)]
def alerts_step(s: Subject) -> list[Step]:
    """The alerts of this fire time (SLA misses, a final failure) and where
    they stand; a fire time with an SLA and none says so."""
    if s.gate_now:
        return []
    out = []
    for a in AL.alerts(s.conn, include_closed=True, job=s.name, limit=1000):
        if a["fire_time"] != s.t:
            continue
        state = a["state"] + (f" by {a['by']}" if a["by"] else "") + \
            (f": {a['note']}" if a["note"] else "")
        out.append(Step("alert", f"{a['kind']} (alert {a['alert_id']}, {state}): "
                        f"{a['detail']}", {"alert": a}))
    if not out and s.spec is not None and s.spec.sla is not None and s.handled:
        out.append(Step("alert", "none: no SLA miss or failure alerted for this fire time"))
    return out


STEPS: list[Callable[[Subject], list[Step]]] = [
    job_step, schedule_step, pause_step, catchup_step, overlap_step, upstream_step,
    pool_step, placement_step, record_step, downstream_step, alerts_step,
]


# -- the verdict ----------------------------------------------------------------------------
def verdict(s: Subject, steps: list[Step]) -> dict:
    """What became (or would become) of the fire time, in one line."""
    if s.records:
        return _records_verdict(s.records)
    if s.gaps:
        g = s.gaps[-1]
        return {"outcome": "skipped", "text": f"skipped (in a gap of {g['count']} fire "
                f"times): {g['reason']}"}
    blocks = [st.blocks for st in steps if st.blocks]
    if s.gate_now:
        wait = [b for b in blocks if b.startswith("waits for")]
        others = [b for b in blocks if not b.startswith("waits for")]
        if wait:
            return {"outcome": "waits_for_upstream", "text": "next generation " + wait[0] + (
                f"; then would be skipped now: {others[0]}" if others else "")}
        if others:
            return {"outcome": "would_skip", "text": f"would be skipped now: {others[0]}"}
        return {"outcome": "would_run", "text": "would run at its parents' next outcome"}
    if s.after and s.spec is not None:
        return {"outcome": "not_a_fire_time", "text": "no run: no generation of its parents "
                "has fire time T (@after)"}
    if s.spec is None:
        return {"outcome": "unknown", "text": "no record; the job is no longer defined"}
    if s.times and s.t < s.times["created_at"]:
        return {"outcome": "not_a_fire_time", "text": "no fire time: the job did not exist yet"}
    if not _is_fire(s.trigger, s.t) and s.schedule is not None and s.schedule.kind != "reboot":
        return {"outcome": "not_a_fire_time", "text": "no run: T is not a fire time of the "
                "schedule"}
    if s.future:
        if blocks:
            return {"outcome": "would_skip", "text": f"would be skipped now: {blocks[0]}"}
        return {"outcome": "would_run", "text": "would run (if nothing changes before T)"}
    cursor = s.times["cursor"] if s.times else None
    if cursor is not None and s.t > cursor:
        if blocks:
            return {"outcome": "not_handled", "text": f"not handled yet; would be skipped: "
                    f"{blocks[0]}"}
        return {"outcome": "not_handled", "text": "not handled yet (the scheduler is behind); "
                "would run late"}
    return {"outcome": "unknown", "text": "no record (pruned, or the schedule changed since)"}


def _records_verdict(records: list[Run]) -> dict:
    by_target: dict[str, list[Run]] = {}
    for r in records:
        by_target.setdefault(r.target, []).append(r)
    parts = []
    outcomes = set()
    for target, rs in sorted(by_target.items()):
        last = max(rs, key=lambda r: (r.attempt, r.run_id))
        state = last.state.value
        n = len(rs)
        where = f"on {target}: " if target else ""
        if state == "succeeded":
            outcome, text = "ran", "ran (succeeded" + (f" on attempt {last.attempt})"
                                                        if n > 1 else ")")
        elif state in ("failed", "timed_out", "lost"):
            outcome = "ran"
            text = f"ran ({state} after {n} attempt{'s' if n > 1 else ''})"
        elif state == "skipped":
            outcome, text = "skipped", f"skipped: {last.reason}"
        elif state == "cancelled":
            outcome, text = "cancelled", f"cancelled: {last.reason}"
        elif state == "running":
            outcome, text = "running", f"running on {last.node} (attempt {last.attempt})"
        else:
            due = f", due {iso_utc(round(last.due_at, 3))}" if last.due_at else ""
            outcome = "waiting"
            text = f"{state} (attempt {last.attempt}{due})" + (
                f"; {last.reason}" if last.reason else "")
        outcomes.add(outcome)
        parts.append(where + text)
    outcome = outcomes.pop() if len(outcomes) == 1 else "mixed"
    return {"outcome": outcome, "text": "; ".join(parts)}


# -- entry point ----------------------------------------------------------------------------
def nodes_from_state(conn) -> list[NodeView]:
    """The members as last announced in the replicated state (with the
    daemon down: no health of its own to add)."""
    drains = node_drains.drained(conn)
    views = []
    for n in Q.nodes(conn):
        state = "drained" if n["node"] in drains and n["state"] == "up" else n["state"]
        views.append(NodeView(n["node"], n["state"] == "up", state, frozenset(n["tags"]),
                              "" if state == "up" else state))
    return views


OFFLINE_NODES = "as last announced; the daemon is not running"
FOLLOWER_NODES = ("as last announced; this node is not the leader, which alone sees who "
                  "answers: `cronrd explain` on the leader for that")


def explain(conn, args: dict, *, now: float, default_tz: str,
            nodes: list[NodeView] | None = None, nodes_note: str = "",
            steps: list[Callable[[Subject], list[Step]]] | None = None) -> dict:
    """The decision trail of job ``args["job"]`` at ``args["at"]`` (ISO 8601,
    UTC unless it has an offset; with ``args["local"]`` the wall clock of
    the job's zone), at its next fire time (``args["next"]``) or, with
    neither, at its latest fire time up to ``now``. ``nodes``: the members
    for placement (None: not known); ``nodes_note``: how their health is
    known ("": live, on the leader)."""
    name = args.get("job")
    if not isinstance(name, str) or not name:
        raise UsageError("explain needs a job name")
    found = Q.jobs(conn, name=name)
    job = found[0] if found else None
    if job is None and not Q.job_has_runs(conn, name):
        raise RequestError(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
    spec = job["spec"] if job else None
    tz = (spec.timezone if spec is not None else None) or default_tz
    zone = resolve_timezone(tz)
    schedule = trigger = None
    if spec is not None:
        try:
            schedule = parse_schedule(spec.schedule)
            trigger = make_trigger(schedule, zone) \
                if schedule.kind not in ("reboot", "after") else None
        except CronrdError:
            schedule = trigger = None
    after = schedule is not None and schedule.kind == "after"
    at, want_next = args.get("at"), bool(args.get("next"))
    if at is not None and want_next:
        raise UsageError("give --at T or --next, not both")
    times = trail.job_times(conn, name)
    note = None
    gate_now = latest = False
    if at is not None:
        t, note = resolve_time(at, bool(args.get("local")), zone)
    elif after:
        # an @after child: its latest generation, or (--next, or none yet) its gate now
        got = None if want_next else trail.latest_fire_time(conn, name)
        gate_now, latest = got is None, got is not None
        t = int(now) if got is None else got
    elif trigger is not None:
        start = max(int(now), times["cursor"] if times else 0) if want_next else int(now) + 1
        got = trigger.next_after(start) if want_next else prev_fire(trigger, start)
        if got is None:
            raise RequestError(f"job {name!r} has no {'next' if want_next else 'past'} fire "
                               "time; give one with --at T")
        t = got
    else:
        last = Q.list_runs(conn, name, None, 1, kind=None)
        if want_next or not last:
            raise RequestError(f"job {name!r} has no schedule to look at (@reboot, or not "
                               "defined any more); give a time with --at T")
        t = last[0].fire_time
    subject = Subject(conn=conn, name=name, t=t, now=now, tz=tz, zone=zone, spec=spec, job=job,
                      times=times, schedule=schedule, trigger=trigger,
                      records=trail.records_at(conn, name, t),
                      gaps=trail.gaps_covering(conn, name, t),
                      nodes=nodes, nodes_note=nodes_note, time_note=note, gate_now=gate_now,
                      latest=latest)
    if gate_now:
        subject.records, subject.gaps = [], []
    out: list[Step] = []
    for provider in (STEPS if steps is None else steps):
        out.extend(provider(subject))
    # an @after child's next generation has no time yet: "at" is None
    return {"job": name, "at": None if gate_now else iso_utc(t),
            "local": None if gate_now else subject.local(t), "timezone": tz,
            "future": subject.future, "now": iso_utc(round(now)),
            "steps": [st.view() for st in out], "verdict": verdict(subject, out)}


__all__ = ["explain", "Step", "Subject", "STEPS", "verdict", "prev_fire", "resolve_time",
           "nodes_from_state"]

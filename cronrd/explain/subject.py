"""What an explanation is about and made of: the subject (a job, a fire
time, the state and the nodes as they are), its steps, and the time
arithmetic they share (wall clock, DST jumps, the previous fire time)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo


from ..errors import CronrdError, UsageError
from ..jobspec import JobSpec
from ..schedule import Schedule, Trigger, iso_utc, parse_iso
from ..model.run import Run
from ..decisions.placement import NodeView


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
        return self.t > self.now or (cursor is not None and self.times is not None and self.t > cursor
                                     and self.t >= self.times["created_at"])

    @property
    def handled(self) -> bool:
        """Was ``t`` decided: a record or a gap says what became of it?"""
        return bool(self.records or self.gaps)

    def local(self, t: float) -> str:
        return _local(t, self.zone)


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
    offset = _dt.datetime.fromtimestamp(t, zone).utcoffset()
    assert offset is not None  # an aware datetime always has one
    return int(offset.total_seconds())


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
    if not 1970 <= naive.year <= 9998:
        raise UsageError(f"--local time {text!r}: explain looks at times from 1970 to 9998")
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


# The times explain looks at: 1970 to 9998 (a year of room before the last
# time Python's datetime holds, for the fire times around it).
FIRST_TIME, LAST_TIME = 0, 253370764799   # 9998-12-31T23:59:59Z


def resolve_time(at: Any, local: bool, zone: ZoneInfo) -> tuple[int, str | None]:
    """--at: ISO 8601 (UTC unless it has an offset) or epoch seconds; with
    ``local``, a wall-clock time in the job's zone. Between 1970 and 9998."""
    if isinstance(at, bool) or not isinstance(at, (str, int, float)):
        raise UsageError("at must be a time (ISO 8601 or epoch seconds)")
    note = None
    if isinstance(at, (int, float)):
        if not FIRST_TIME <= at <= LAST_TIME:  # (NaN is in no range)
            raise UsageError(f"--at {at!r}: explain looks at times from 1970 to 9998")
        return int(at), None
    if local:
        t, note = resolve_local(at, zone)
    else:
        try:
            t = parse_iso(at)
        except CronrdError as exc:
            raise UsageError(f"--at: {exc}") from None
    if not FIRST_TIME <= t <= LAST_TIME:
        raise UsageError(f"--at {at}: explain looks at times from 1970 to 9998")
    return t, note


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

"""Triggers: the fire times of one schedule in one time zone (pure).

:mod:`.matching` finds the next *naive* wall-clock time matching a cron
expression.  Mapping wall-clock times to instants across
daylight-saving changes is done here, the way Debian's cron and cronie do it:

* a **fixed-time** job (minute and hour fields both not starting with ``*``)
  whose wall-clock time falls into a skipped hour runs once, at the instant of
  the jump; one whose time falls into a repeated hour runs once, in the first
  pass;
* a **wildcard** job (minute or hour field starts with ``*``) follows the wall
  clock: times that do not exist do not fire, repeated times fire twice.

The time line of a zone is cut into *segments* of constant UTC offset (found
once per zone and year by sampling the offset and bisecting each change, then
cached: :mod:`.zones`).  Inside a segment wall clock and instants map one to
one, so the next fire is "the next naive match, minus the segment's offset",
and the rules above only apply where a segment starts or ends.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as _dt
import math
from typing import Iterator, cast
from zoneinfo import ZoneInfo

from .expressions import Schedule
from .matching import DAY as _DAY, CronFields
from .timestamps import _EPOCH
from .zones import _Window, _window, resolve_timezone

# Instants outside these bounds have no fire times (keeps datetime happy).
_MIN_T = calendar.timegm((1900, 1, 1, 0, 0, 0))
_MAX_T = calendar.timegm((9000, 1, 1, 0, 0, 0))

# (hours, set(hours), minutes, set(minutes), seconds, matches per hour): see Trigger._tod_tables
_TodTables = tuple[tuple[int, ...], set[int], tuple[int, ...], set[int], tuple[int, ...], int]


class Trigger:
    """Fire times of one schedule in one time zone.  Build with :func:`make_trigger`.

    Pure but not thread-safe: it keeps a cached window of the zone's offset
    changes.
    """

    def __init__(self, schedule: Schedule, tz: ZoneInfo):
        self.schedule = schedule
        self.tz = tz
        self._win: _Window | None = None
        self._at: int | None = None
        if schedule.kind == "at":
            self._at = at_instant(schedule, tz)
        if schedule.kind == "cron":
            self._fixed = schedule.fixed_time
            self._cron = cast(CronFields, schedule.cron)  # parse_schedule sets it for every cron schedule
            self._tod: _TodTables | None = None

    def __repr__(self) -> str:
        return f"Trigger({self.schedule.expr!r}, {self.tz})"

    # -- segments ----------------------------------------------------------

    def _segment(self, x: int) -> tuple[int | None, int, int, int, int]:
        """``(start, offset_before_start, offset, end, offset_after_end)`` of the segment holding x."""
        win = self._win
        if win is None or not win.lo <= x < win.hi:
            year = (_EPOCH + _dt.timedelta(seconds=x)).year
            win = self._win = _window(self.tz, year)
        i = bisect.bisect_right(win.times, x)
        if i:
            start, before, off = win.entries[i - 1]
        else:
            start, before, off = None, win.first_offset, win.first_offset
        if i < len(win.entries):
            end, _, after = win.entries[i]
        else:
            end, after = win.horizon, win.horizon_offset
        return start, before, off, end, after

    def _match_ge(self, n: int) -> int | None:
        """First naive wall-clock second >= n matching the cron fields."""
        return self._cron.next_ge(n)

    # -- public ------------------------------------------------------------

    def next_after(self, t: int) -> int | None:
        """The first fire time strictly after ``t``; None if there is none (``@reboot``)."""
        kind = self.schedule.kind
        t = math.floor(t)
        if kind == "every":
            step = self.schedule.interval
            return (t // step + 1) * step
        if kind == "at":
            return self._at if self._at is not None and self._at > t else None
        if kind != "cron":
            return None
        x = t + 1  # looking for instants >= x
        last_lo = 0  # only read once last_n is set
        last_n: int | None = None
        first = True
        while _MIN_T <= x < _MAX_T:
            start, before, off, end, after = self._segment(x)
            if first and self._fixed and start == x and before < off:
                # x is the instant of a spring-forward jump: a wall time the
                # jump skips fires here (as when asked from further back)
                n = self._match_ge(x + before)
                if n is not None and n < x + off:
                    return x
            first = False
            lo = x + off
            if self._fixed and start is not None and before > off:
                lo = max(lo, start + before)  # the repeated hour already ran in its first pass
            if last_n is not None and last_lo <= lo <= last_n:
                n = last_n
            else:
                n = self._match_ge(lo)
                if n is None:
                    return None
            last_lo, last_n = lo, n
            if n < end + off:
                return n - off
            if self._fixed and after > off and n < end + after:
                return end  # wall-clock time skipped by a spring-forward: run at the jump
            x = end
        return None

    def fires_between(self, after: int, until: int, limit: int | None = None) -> Iterator[int]:
        """Fire times f with ``after < f <= until``, ascending, at most ``limit`` of them."""
        count = 0
        t = after
        while limit is None or count < limit:
            f = self.next_after(t)
            if f is None or f > until:
                return
            yield f
            count += 1
            t = f

    def count_between(self, after: int, until: int, max_days: int = 200_000) -> int:
        """How many fires f have ``after < f <= until``; -1 if that needs more than ``max_days`` matching days."""
        after, until = math.floor(after), math.floor(until)
        if until <= after:
            return 0
        kind = self.schedule.kind
        if kind == "every":
            step = self.schedule.interval
            return until // step - after // step
        if kind == "at":
            return 1 if self._at is not None and after < self._at <= until else 0
        if kind != "cron":
            return 0
        after = max(after, _MIN_T - 1)
        until = min(until, _MAX_T - 1)
        total = 0
        x = after + 1
        budget = [max_days]
        start, before, off, _end, _after = self._segment(x)
        if self._fixed and start == x and before < off:
            # ``after`` is the second before a spring-forward jump: count the
            # fire a skipped wall time makes at the jump (unless the first
            # wall time after the jump matches too: counted with its segment)
            got = self._naive_count(x + before, x + off - 1, budget)
            same = self._naive_count(x + off, x + off, budget)
            total += 1 if got > 0 and not same else 0
        while x <= until:
            start, before, off, end, after_off = self._segment(x)
            lo = x + off
            if self._fixed and start is not None and before > off:
                lo = max(lo, start + before)
            hi = min(until, end - 1) + off
            got = self._naive_count(lo, hi, budget)
            if got < 0:
                return -1
            total += got
            if end > until:
                break
            if self._fixed and after_off > off:
                # times skipped by the jump run once at the jump, unless the first
                # wall time after the jump matches too (same instant, counted next)
                got = self._naive_count(end + off, end + after_off - 1, budget)
                same = self._naive_count(end + after_off, end + after_off, budget)
                if got < 0 or same < 0:
                    return -1
                total += 1 if got and not same else 0
            x = end
        return total

    # -- counting helpers (naive wall clock) ---------------------------------

    def _tod_tables(self) -> _TodTables:
        if self._tod is None:
            c = self._cron
            hours, minutes, seconds = c.hours, c.minutes, c.seconds
            self._tod = (hours, set(hours), minutes, set(minutes), seconds, len(minutes) * len(seconds))
        return self._tod

    def _tod_le(self, s: int) -> int:
        """Matching seconds-of-day <= s."""
        if s < 0:
            return 0
        assert self._tod is not None  # _naive_count builds it first
        hours, hset, minutes, mset, seconds, per_hour = self._tod
        h, rem = divmod(s, 3600)
        m, sec = divmod(rem, 60)
        c = bisect.bisect_left(hours, h) * per_hour
        if h in hset:
            c += bisect.bisect_left(minutes, m) * len(seconds)
            if m in mset:
                c += bisect.bisect_right(seconds, sec)
        return c

    def _day_matches(self, day: int) -> bool:
        return self._cron.day_matches(day)

    def _naive_count(self, lo: int, hi: int, budget: list[int]) -> int:
        """Matching naive seconds n with lo <= n <= hi; -1 when over the day budget."""
        if hi < lo:
            return 0
        self._tod_tables()
        per_day = self._tod_le(_DAY - 1)
        d0, s0 = divmod(lo, _DAY)
        d1, s1 = divmod(hi, _DAY)
        if d0 == d1:
            return self._tod_le(s1) - self._tod_le(s0 - 1) if self._day_matches(d0) else 0
        total = 0
        if self._day_matches(d0):
            total += per_day - self._tod_le(s0 - 1)
        if self._day_matches(d1):
            total += self._tod_le(s1)
        # whole days strictly between d0 and d1: walk the matching days
        day = d0
        while True:
            found = self._cron.next_day(day + 1)
            if found is None or found >= d1:
                break
            day = found
            budget[0] -= 1
            if budget[0] < 0:
                return -1
            total += per_day
        return total


def at_instant(schedule: Schedule, tz: _dt.tzinfo) -> int:
    """The instant of an ``@at`` schedule: its own offset, else its wall
    time in ``tz`` by :func:`local_instant`."""
    y, mo, d, h, mi, sec = schedule.at
    if schedule.at_offset is not None:
        aware = _dt.datetime(y, mo, d, h, mi, sec,
                             tzinfo=_dt.timezone(_dt.timedelta(seconds=schedule.at_offset)))
        return int((aware - _EPOCH).total_seconds())
    return local_instant(_dt.date(y, mo, d), h, mi, sec, tz)


def local_instant(day: _dt.date, hour: int, minute: int, second: int, tz: _dt.tzinfo) -> int:
    """The instant of a wall-clock time in ``tz``, with cron's rules for a
    fixed time across a change: a time a spring-forward skips is the
    instant of the jump; a repeated time is its first pass."""
    wall = _dt.datetime(day.year, day.month, day.day, hour, minute, second)
    t = int((wall.replace(tzinfo=tz, fold=0) - _EPOCH).total_seconds())
    back = (_EPOCH + _dt.timedelta(seconds=t)).astimezone(tz).replace(tzinfo=None)
    if back != wall:
        # a skipped wall time: fold=0 read it with the offset before the
        # jump, which lands after it; the jump is the first instant whose
        # wall clock is past it
        lo, hi = t - 4 * 3600, t
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (_EPOCH + _dt.timedelta(seconds=mid)).astimezone(tz).replace(tzinfo=None) > wall:
                hi = mid
            else:
                lo = mid
        return hi
    return t


def make_trigger(schedule: Schedule, tz: str | ZoneInfo) -> Trigger:
    """A :class:`Trigger` for ``schedule`` in zone ``tz`` (name or ZoneInfo)."""
    zone = tz if isinstance(tz, _dt.tzinfo) else resolve_timezone(tz)
    return Trigger(schedule, zone)


def at_time(text: str, tz: str | ZoneInfo, now: float) -> int:
    """A later time as an operator writes it (`run-now --at`): ISO 8601
    (without an offset: in ``tz``, by the ``@at`` rules) or ``+DURATION``
    from ``now``. ScheduleError for anything else."""
    from .durations import parse_duration
    from .expressions import parse_schedule
    from cronrd.errors import ScheduleError
    text = text.strip()
    if text.startswith("+"):
        try:
            return math.ceil(now + parse_duration(text[1:]))
        except ScheduleError as exc:
            raise ScheduleError(f"--at {text!r}: {exc.message}; e.g. +90m") from None
    try:
        sched = parse_schedule("@at " + text)
    except ScheduleError as exc:
        raise ScheduleError(exc.message.replace("@at time", "time") + "; or +DURATION, "
                            "e.g. +90m") from None
    zone = tz if isinstance(tz, _dt.tzinfo) else resolve_timezone(tz)
    return at_instant(sched, zone)

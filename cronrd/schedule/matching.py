"""Which wall-clock seconds a cron expression's fields match (pure).

:class:`CronFields` is what :mod:`.expressions` makes of the six fields: the
seconds, minutes, hours and months as sets, and the day rule.  The day rule is
Vixie cron's (and Debian's, cronie's, cronsim's): if the day-of-month or the
day-of-week field *begins with* ``*``, a day must match both fields (the
starred one usually matches every day); otherwise it must match either.  So
``1 1 */100,1-7 * MON`` runs on the Monday among the 1st to 7th, and
``0 0 13 * 5`` on every 13th and every Friday.

Beside the numbers, a day field may hold these forms:

* day of month: ``L`` the last day, ``LW`` the last weekday (Mon-Fri),
  ``15W`` the weekday nearest the 15th, in the same month (``31W`` in a month
  of 30 days is the weekday nearest the 30th);
* day of week: ``5L`` the last Friday, ``5#2`` the second Friday.

Times are naive wall-clock seconds counted from 1970-01-01 00:00 (no zone):
:mod:`.triggers` maps them to instants.  Which days of a month match depends
only on the weekday of its first day and its length, so the days are worked
out once per such shape (7 x 4 of them) and kept.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as _dt
from dataclasses import dataclass, field

DAY = 86400
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_MIN_ORDINAL = _dt.date(1, 1, 1).toordinal()
_MAX_ORDINAL = _dt.date(9999, 12, 31).toordinal()
# The Gregorian calendar repeats every 400 years: a day rule that matches no
# day in 400 years of its months matches none ever.
_CYCLE_MONTHS = 400 * 12
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class CronFields:
    """The six fields of a cron expression as sets (day of week 0 = Sunday)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    dom: frozenset[int] = frozenset()
    dom_last: bool = False  # L
    dom_last_weekday: bool = False  # LW
    dom_nearest: frozenset[int] = frozenset()  # 15W
    dow: frozenset[int] = frozenset()
    dow_nth: frozenset[tuple[int, int]] = frozenset()  # (weekday, n): 5#2
    dow_last: frozenset[int] = frozenset()  # 5L
    day_or: bool = False  # neither day field begins with '*'
    _shapes: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    # -- days ----------------------------------------------------------------

    def _dom_match(self, day: int, wd: int, length: int) -> bool:
        if day in self.dom:
            return True
        if self.dom_last and day == length:
            return True
        if self.dom_last_weekday and day == _last_weekday(wd, day, length):
            return True
        return any(day == _nearest_weekday(n, wd, day, length) for n in self.dom_nearest)

    def _dow_match(self, day: int, wd: int, length: int) -> bool:
        if wd in self.dow:
            return True
        if wd in self.dow_last and day + 7 > length:
            return True
        return (wd, (day - 1) // 7 + 1) in self.dow_nth

    def shape_days(self, first_wd: int, length: int) -> tuple[int, ...]:
        """Matching days (ascending) of a month whose 1st is weekday ``first_wd`` and which has ``length`` days."""
        key = (first_wd, length)
        days = self._shapes.get(key)
        if days is None:
            out = []
            for day in range(1, length + 1):
                wd = (first_wd + day - 1) % 7
                a = self._dom_match(day, wd, length)
                b = self._dow_match(day, wd, length)
                if (a or b) if self.day_or else (a and b):
                    out.append(day)
            days = self._shapes[key] = tuple(out)
        return days

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """Matching days (ascending) of one month; () if the month does not match."""
        if month not in self.months:
            return ()
        monday_first, length = calendar.monthrange(year, month)
        return self.shape_days((monday_first + 1) % 7, length)

    def ever_matches(self) -> bool:
        """Whether any day of any year matches the day and month fields."""
        for month in self.months:
            lengths = (28, 29) if month == 2 else (_MONTH_DAYS[month - 1],)
            for length in lengths:
                for first_wd in range(7):
                    if self.shape_days(first_wd, length):
                        return True
        return False

    def day_matches(self, day_index: int) -> bool:
        """Whether day ``day_index`` (days since 1970-01-01) matches."""
        d = _dt.date.fromordinal(_EPOCH_ORDINAL + day_index)
        return d.day in self.month_days(d.year, d.month)

    def next_day(self, day_index: int) -> int | None:
        """The first matching day >= ``day_index``; None if none within 400 years or the calendar's end."""
        ordinal = _EPOCH_ORDINAL + day_index
        if not _MIN_ORDINAL <= ordinal <= _MAX_ORDINAL:
            return None
        d = _dt.date.fromordinal(ordinal)
        year, month, day = d.year, d.month, d.day
        for _ in range(_CYCLE_MONTHS + 1):
            days = self.month_days(year, month)
            i = bisect.bisect_left(days, day)
            if i < len(days):
                return _dt.date(year, month, days[i]).toordinal() - _EPOCH_ORDINAL
            month, day = month + 1, 1
            if month > 12:
                month, year = 1, year + 1
                if year > 9999:
                    return None
        return None

    # -- times of day --------------------------------------------------------

    def time_ge(self, s: int) -> int | None:
        """The first matching second of the day >= ``s``; None if none is left that day."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        h, rem = divmod(s, 3600)
        m, sec = divmod(rem, 60)
        hi = bisect.bisect_left(hours, h)
        if hi < len(hours) and hours[hi] == h:
            mi = bisect.bisect_left(minutes, m)
            if mi < len(minutes) and minutes[mi] == m:
                si = bisect.bisect_left(seconds, sec)
                if si < len(seconds):
                    return h * 3600 + m * 60 + seconds[si]
                mi += 1
            if mi < len(minutes):
                return h * 3600 + minutes[mi] * 60 + seconds[0]
            hi += 1
        if hi < len(hours):
            return hours[hi] * 3600 + minutes[0] * 60 + seconds[0]
        return None

    def next_ge(self, n: int) -> int | None:
        """The first matching naive second >= ``n``; None if there is none."""
        day_index, s = divmod(n, DAY)
        d = self.next_day(day_index)
        if d is None:
            return None
        if d == day_index:
            t = self.time_ge(s)
            if t is not None:
                return d * DAY + t
            d = self.next_day(d + 1)
            if d is None:
                return None
        return d * DAY + self.hours[0] * 3600 + self.minutes[0] * 60 + self.seconds[0]


def _last_weekday(wd: int, day: int, length: int) -> int:
    """The last Monday-to-Friday of a month, given that ``day`` is weekday ``wd`` (0 = Sunday)."""
    last_wd = (wd + length - day) % 7
    return length - {6: 1, 0: 2}.get(last_wd, 0)


def _nearest_weekday(n: int, wd: int, day: int, length: int) -> int:
    """The Monday-to-Friday nearest day ``n`` (clamped to the month), in the same month."""
    n = min(n, length)
    n_wd = (wd + n - day) % 7
    if n_wd == 6:  # Saturday: the Friday before, or Monday the 3rd if n is the 1st
        return n - 1 if n > 1 else n + 2
    if n_wd == 0:  # Sunday: the Monday after, or the Friday before if n is the last day
        return n + 1 if n < length else n - 2
    return n

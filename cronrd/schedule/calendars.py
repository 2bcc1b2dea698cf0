"""Business calendars (pure): named sets of days, and a job's ``calendar:``
rule applied to its fire times.

A :class:`Calendar` is a set of calendar days: days of the week, explicit
days (a list, an ICS file's events, a country's public holidays, resolved
to days by the daemon config: config/calendars.py), minus the days of
other calendars. The leader replicates the resolved calendars
(``SetCalendars``), so every node reads the same days.

A job's :class:`CalendarRule` (``calendar: {skip, only, shift,
business_day}``) judges each fire time by its day in the job's zone. A
day is *allowed* when it is in none of ``skip`` and, if ``only`` is given,
in at least one of ``only``. Then:

* ``shift: none`` (the default): a fire time on a day not allowed is still a
  fire time, recorded ``skipped`` with the calendar that says so
  (:meth:`CalendarTrigger.skip_reason`): "why did it not run?" has an answer;
* ``shift: next`` / ``previous``: it moves to the same wall-clock time on the
  next (previous) allowed day, at most MAX_SHIFT days away; fire times that
  land on the same instant are one;
* ``business_day: N``: the schedule fires only on the N-th allowed day of
  each month (-1: the last, -2: the one before it), e.g. ``0 18 * * *``
  with ``business_day: -1`` is 18:00 on the last business day.

:class:`CalendarTrigger` is a :class:`~.triggers.Trigger` (the scheduler,
catch-up, ``next``, ``explain``, backfill and SLAs take it where they take
any trigger)."""

from __future__ import annotations

import bisect
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .timestamps import _EPOCH
from .triggers import Trigger, local_instant

SHIFTS = ("none", "next", "previous")
MAX_SHIFT = 31            # days a fire time may move to find an allowed day
MAX_BUSINESS_DAY = 23     # |business_day|: no month has more weekdays
_DAY_SEARCH = 800         # days next_after looks ahead for a fire (more than 2 years)
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Calendar:
    """A set of days: those of ``weekdays`` (0, Monday, to 6, Sunday) and
    ``days`` (proleptic ordinals, ``date.toordinal()``), less those of the
    calendars named in ``except_``. ``years``: the years ``days`` is known
    for (public holidays and yearly events are computed for a span of
    years; None: every year); ``source``: what it was made of."""
    name: str
    weekdays: frozenset[int] = frozenset()
    days: frozenset[int] = frozenset()
    minus: frozenset[int] = frozenset()
    years: tuple[int, int] | None = None
    source: str = ""
    except_: tuple[str, ...] = ()

    def contains(self, day: _dt.date, others: Mapping[str, "Calendar"],
                 _depth: int = 0) -> bool:
        n = day.toordinal()
        if not (day.weekday() in self.weekdays or n in self.days) or n in self.minus:
            return False
        if _depth > 16:   # (the config refuses circles; a bound all the same)
            return False
        return not any(other in others and others[other].contains(day, others, _depth + 1)
                       for other in self.except_)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source}
        if self.weekdays:
            d["weekdays"] = sorted(self.weekdays)
        if self.days:
            d["days"] = [_dt.date.fromordinal(n).isoformat() for n in sorted(self.days)]
        if self.minus:
            d["minus"] = [_dt.date.fromordinal(n).isoformat() for n in sorted(self.minus)]
        if self.years is not None:
            d["years"] = list(self.years)
        if self.except_:
            d["except"] = list(self.except_)
        return d

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> "Calendar":
        def ords(key: str) -> frozenset[int]:
            return frozenset(_dt.date.fromisoformat(s).toordinal() for s in d.get(key) or ())
        years = d.get("years")
        return cls(name, frozenset(int(w) for w in d.get("weekdays") or ()), ords("days"),
                   ords("minus"), None if years is None else (int(years[0]), int(years[1])),
                   str(d.get("source", "")), tuple(str(e) for e in d.get("except") or ()))


@dataclass(frozen=True)
class CalendarRule:
    """A job's ``calendar:``."""
    skip: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    shift: str = "none"
    business_day: int | None = None
    names_line: int = field(default=0, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.skip + self.only))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.skip:
            d["skip"] = list(self.skip)
        if self.only:
            d["only"] = list(self.only)
        if self.shift != "none":
            d["shift"] = self.shift
        if self.business_day is not None:
            d["business_day"] = self.business_day
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "CalendarRule":
        if isinstance(d, CalendarRule):
            return d
        bd = d.get("business_day")
        return cls(tuple(str(n) for n in d.get("skip") or ()),
                   tuple(str(n) for n in d.get("only") or ()), str(d.get("shift", "none")),
                   None if bd is None else int(bd))


def _day_text(day: _dt.date) -> str:
    return f"{day.isoformat()} ({WEEKDAYS[day.weekday()]})"


class CalendarTrigger(Trigger):
    """The fire times of a schedule in a zone under a job's calendar rule;
    ``calendars``: the cluster's calendars by name (a name it lacks makes
    every day not allowed, with the reason: never a silent run on a
    holiday)."""

    def __init__(self, base: Trigger, rule: CalendarRule, calendars: Mapping[str, Calendar]):
        super().__init__(base.schedule, base.tz)
        self.rule = rule
        self.calendars = dict(calendars)
        self._why: dict[int, str | None] = {}
        self._nth: dict[tuple[int, int], int | None] = {}
        self._days: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return f"CalendarTrigger({self.schedule.expr!r}, {self.tz}, {self.rule.to_dict()})"

    # -- days -------------------------------------------------------------------------
    def day_of(self, t: int) -> _dt.date:
        return (_EPOCH + _dt.timedelta(seconds=t)).astimezone(self.tz).date()

    def why_not(self, day: _dt.date) -> str | None:
        """Why ``day`` is not allowed (the calendar that says so), or None."""
        n = day.toordinal()
        if n in self._why:
            return self._why[n]
        why = None
        for name in self.rule.skip:
            cal = self.calendars.get(name)
            if cal is None:
                why = _missing(name)
                break
            if cal.contains(day, self.calendars):
                why = f"{_day_text(day)} is in calendar {name}"
                break
        if why is None and self.rule.only:
            missing = [n for n in self.rule.only if n not in self.calendars]
            if missing:
                why = _missing(missing[0])
            elif not any(self.calendars[name].contains(day, self.calendars)
                         for name in self.rule.only):
                why = f"{_day_text(day)} is not in calendar {' or '.join(self.rule.only)}"
        if len(self._why) > 4096:
            self._why.clear()
        self._why[n] = why
        return why

    def allowed(self, day: _dt.date) -> bool:
        return self.why_not(day) is None

    def nth_allowed(self, year: int, month: int, n: int) -> _dt.date | None:
        """The n-th allowed day of a month (n < 0: from its end)."""
        key = (year * 12 + month, n)
        if key in self._nth:
            found = self._nth[key]
            return None if found is None else _dt.date.fromordinal(found)
        first = _dt.date(year, month, 1)
        nxt = _dt.date(year + (month == 12), month % 12 + 1, 1)
        days = [first + _dt.timedelta(days=i) for i in range((nxt - first).days)]
        ok = [d for d in days if self.allowed(d)]
        idx = n - 1 if n > 0 else n
        day = ok[idx] if -len(ok) <= idx < len(ok) else None
        if len(self._nth) > 4096:
            self._nth.clear()
        self._nth[key] = None if day is None else day.toordinal()
        return day

    # -- fire times -------------------------------------------------------------------
    def _base_on(self, day: _dt.date) -> list[int]:
        """The schedule's own fire times on ``day`` (local)."""
        start = local_instant(day, 0, 0, 0, self.tz)
        end = local_instant(day + _dt.timedelta(days=1), 0, 0, 0, self.tz)
        out: list[int] = []
        t = start - 1
        while True:   # (the schedule's own next_after: fires_between would call ours)
            f = Trigger.next_after(self, t)
            if f is None or f >= end:
                return out
            out.append(f)
            t = f

    def _moved(self, fire: int, day: _dt.date) -> int:
        wall = (_EPOCH + _dt.timedelta(seconds=fire)).astimezone(self.tz)
        return local_instant(day, wall.hour, wall.minute, wall.second, self.tz)

    def fires_on(self, day: _dt.date) -> list[int]:
        """The fire times the rule gives ``day``, ascending (the last few
        days' are kept: the scheduler asks for the next fire time after
        each one, and a day of an every-second schedule is 86,400)."""
        n = day.toordinal()
        got = self._days.get(n)
        if got is None:
            got = self._days[n] = self._fires_on(day)
            if len(self._days) > 8:
                del self._days[next(iter(self._days))]
        return got

    def _fires_on(self, day: _dt.date) -> list[int]:
        rule = self.rule
        if rule.business_day is not None:
            nth = self.nth_allowed(day.year, day.month, rule.business_day)
            return self._base_on(day) if nth == day else []
        if rule.shift == "none":
            return self._base_on(day)
        if not self.allowed(day):
            return []
        out = set(self._base_on(day))
        step = 1 if rule.shift == "previous" else -1   # the days whose fires come here
        other = day + _dt.timedelta(days=step)
        for _ in range(MAX_SHIFT):
            if self.allowed(other):
                break
            out.update(self._moved(f, day) for f in self._base_on(other))
            other += _dt.timedelta(days=step)
        return sorted(out)

    @property
    def plain(self) -> bool:
        """Fire times are the schedule's own (shift: none, or a calendar
        the cluster lacks: then each is recorded skipped, saying so)."""
        rule = self.rule
        return (rule.shift == "none" and rule.business_day is None) or _unknown(self)

    def next_after(self, t: int) -> int | None:
        if self.plain:
            return super().next_after(t)
        t = int(t)
        day = self.day_of(t)
        one = _dt.timedelta(days=1)
        carry = 0   # days walked since a day not allowed whose fires move ahead
        for _ in range(_DAY_SEARCH):
            fires = self.fires_on(day)
            i = bisect.bisect_right(fires, t)
            if i < len(fires):
                return fires[i]
            own = self._base_on(day) if self.rule.shift == "next" else ()
            if self.rule.shift == "next" and not self.allowed(day) and (own or carry) \
                    and carry < MAX_SHIFT:
                carry += 1
                day += one        # its fires move to a day ahead: walk to it
                continue
            carry = 0
            nxt = Trigger.next_after(self, local_instant(day + one, 0, 0, 0, self.tz) - 1)
            if nxt is None:
                if self.rule.shift != "next":
                    return None
                day += one        # (fires moved from behind may still come)
                continue
            target = self.day_of(nxt)
            if self.rule.shift == "previous":
                target -= _dt.timedelta(days=MAX_SHIFT)
            day = max(day + one, target)
        return None

    def count_between(self, after: int, until: int, max_days: int = 200_000) -> int:
        if self.plain:
            return super().count_between(after, until, max_days)
        after, until = int(after), int(until)
        if until <= after:
            return 0
        first, last = self.day_of(after + 1), self.day_of(until)
        if (last - first).days > max_days:
            return -1
        n = 0
        day = first
        while day <= last:   # a day at a time: the fires each holds, by bisection
            fires = self.fires_on(day)
            n += bisect.bisect_right(fires, until) - bisect.bisect_right(fires, after)
            day += _dt.timedelta(days=1)
        return n

    # -- skips ------------------------------------------------------------------------
    def skip_reason(self, fire: int) -> str | None:
        """Why fire time ``fire`` is recorded skipped (shift: none), or None."""
        why = self.why_not(self.day_of(fire)) if self.plain else None
        return None if why is None else f"calendar: {why}"

    def judge(self, t: int) -> str:
        """What the rule does with an instant that is a fire time of the
        schedule itself (for ``explain``)."""
        day = self.day_of(t)
        why = self.why_not(day)
        rule = self.rule
        if rule.business_day is not None:
            nth = self.nth_allowed(day.year, day.month, rule.business_day)
            which = f"business day {rule.business_day} of the month"
            if nth == day:
                return f"{_day_text(day)} is {which}"
            return (f"not a fire time: {which} is "
                    + (_day_text(nth) if nth else "none (no allowed day)")
                    + (f"; {why}" if why else ""))
        if why is None:
            return f"{_day_text(day)} is allowed by its calendar"
        if rule.shift == "none":
            return f"skipped: {why}"
        moved = [f for f in self._shift_targets(t)]
        return (f"{why}: moved to the {rule.shift} allowed day"
                + (f", {_day_text(self.day_of(moved[0]))}" if moved else
                   f" (none within {MAX_SHIFT} days: not run)"))

    def _shift_targets(self, t: int) -> Iterable[int]:
        step = 1 if self.rule.shift == "next" else -1
        day = self.day_of(t)
        for _ in range(MAX_SHIFT):
            day += _dt.timedelta(days=step)
            if self.allowed(day):
                yield self._moved(t, day)
                return


def _missing(name: str) -> str:
    return (f"calendar {name} is not defined (the leader's daemon config has no calendar "
            f"{name}: add it under calendars:)")


def _unknown(trigger: CalendarTrigger) -> bool:
    return any(n not in trigger.calendars for n in trigger.rule.names)

"""The ``calendars:`` section of the daemon config: named sets of days that
job files use in ``calendar: {skip, only, ...}`` (schedule/calendars.py).

    calendars:
      de-holidays: {holidays: DE}                  # or {holidays: {country: DE, subdivision: BY}}
      closures: {dates: [2026-12-24, 2026-08-03..2026-08-14]}
      company: {ics: /etc/cronrd/closures.ics}
      business-days: {weekdays: [mon, tue, wed, thu, fri], except: [de-holidays, closures]}

A calendar holds the days of all its sources (``weekdays``, ``dates``,
``ics``, ``holidays``) minus the days of the calendars under ``except``.
``weekdays`` (Monday to Friday) and ``weekends`` are defined unless the
config defines them. Public holidays come from the ``holidays`` package
(python-holidays: 150+ countries and their subdivisions, kept up to date by
its maintainers, which tables of our own would not be); they are computed
for the years around now. :func:`resolve` turns the definitions into days;
the leader replicates the result (``SetCalendars``), so every node and every
later leader reads the same days."""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

from cronrd.errors import ConfigError
from cronrd.jobspec.model import NAME_RE
from cronrd.schedule.calendars import WEEKDAYS, Calendar

from .problems import ConfigProblems

CALENDAR_KEYS = ("weekdays", "dates", "ics", "holidays", "except")
MAX_CALENDARS = 100
MAX_DATES = 10_000          # days one calendar lists (dates and ICS events)
MAX_ICS_BYTES = 4 << 20
YEARS_BACK, YEARS_AHEAD = 1, 5   # holidays and yearly ICS events are computed for these years
_EXAMPLE = "calendars: {de-holidays: {holidays: DE}}"
_RANGE = re.compile(r"^(\d{4}-\d{2}-\d{2})\s*\.\.\s*(\d{4}-\d{2}-\d{2})$")
BUILT_IN = {"weekdays": ("mon", "tue", "wed", "thu", "fri"), "weekends": ("sat", "sun")}


@dataclass(frozen=True)
class CalendarConfig:
    """One of ``calendars:`` as written (its days are found by resolve())."""
    name: str
    weekdays: tuple[int, ...] = ()
    dates: tuple[int, ...] = ()            # ordinals
    ics: str | None = None                 # absolute path
    country: str | None = None
    subdivision: str | None = None
    except_: tuple[str, ...] = ()


def parse_calendars(raw: object, base: str, report: ConfigProblems
                    ) -> tuple[CalendarConfig, ...]:
    """The calendars, sorted by name, built-ins included (problems go to
    ``report``); ``base``: the directory a relative ics path is read from."""
    out: dict[str, CalendarConfig] = {
        name: CalendarConfig(name, tuple(WEEKDAYS.index(d) for d in days))
        for name, days in BUILT_IN.items()}
    if raw is None:
        return tuple(out[n] for n in sorted(out))
    if not isinstance(raw, dict):
        report.add(("calendars",), f"calendars must be a mapping of names to calendars, "
                                   f"e.g. {_EXAMPLE} (got {type(raw).__name__})")
        return tuple(out[n] for n in sorted(out))
    if len(raw) > MAX_CALENDARS:
        report.add(("calendars",), f"calendars defines {len(raw)} calendars; at most "
                                   f"{MAX_CALENDARS} are allowed")
        return ()
    for name, body in raw.items():
        cal = _one(name, body, base, report)
        if cal is not None:
            out[name] = cal
    for cal in out.values():
        for other in cal.except_:
            if other not in out:
                report.add(("calendars", cal.name, "except"),
                           f"calendars.{cal.name}.except names {other!r}, which is not a "
                           f"calendar (defined: {', '.join(sorted(out))})")
    cycle = _cycle(out)
    if cycle:
        report.add(("calendars", cycle[0], "except"),
                   f"calendars.{cycle[0]}.except goes round in a circle: "
                   f"{' -> '.join(cycle)}; a calendar cannot except itself")
    return tuple(out[n] for n in sorted(out))


def _one(name: object, body: object, base: str, report: ConfigProblems
         ) -> CalendarConfig | None:
    key = ("calendars", name)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        report.add(key, f"calendar name {name!r} is not valid: use letters, digits, '_', '.' "
                        "and '-', starting with a letter or digit", at_key=True)
        return None
    if not isinstance(body, dict) or not body:
        report.add(key, f"calendars.{name} must be a mapping with one or more of "
                        f"{', '.join(CALENDAR_KEYS)}, e.g. {_EXAMPLE}")
        return None
    bad = False
    for k in body:
        if k not in CALENDAR_KEYS:
            report.unknown(key, k, CALENDAR_KEYS)
            bad = True
    weekdays: list[int] = []
    for day in _list(body.get("weekdays")):
        if not isinstance(day, str) or day.lower()[:3] not in WEEKDAYS:
            report.add(key + ("weekdays",), f"calendars.{name}.weekdays lists {day!r}, which "
                                            "is not a day of the week (mon ... sun)")
            bad = True
        else:
            weekdays.append(WEEKDAYS.index(day.lower()[:3]))
    dates: set[int] = set()
    for item in _list(body.get("dates")):
        got = _dates(item)
        if got is None:
            report.add(key + ("dates",), f"calendars.{name}.dates lists {item!r}: write a "
                                         "date as 2026-12-24 and a span as "
                                         "2026-08-03..2026-08-14 (first <= last)")
            bad = True
        else:
            dates.update(got)
    if len(dates) > MAX_DATES:
        report.add(key + ("dates",), f"calendars.{name}.dates holds {len(dates)} days; at "
                                     f"most {MAX_DATES}")
        bad = True
    ics = body.get("ics")
    if ics is not None:
        if not isinstance(ics, str) or not ics:
            report.add(key + ("ics",), f"calendars.{name}.ics must be the path of an "
                                       "iCalendar (.ics) file")
            bad = True
        else:
            ics = os.path.join(base, ics)
            try:
                read_ics(ics, range(1970, 1971))
            except ConfigError as exc:
                report.add(key + ("ics",), f"calendars.{name}.ics: {exc}")
                bad = True
    country = subdivision = None
    hol = body.get("holidays")
    if hol is not None:
        if isinstance(hol, str):
            country = hol
        elif isinstance(hol, dict) and set(hol) <= {"country", "subdivision"} \
                and isinstance(hol.get("country"), str):
            country, subdivision = hol["country"], hol.get("subdivision")
        else:
            report.add(key + ("holidays",), f"calendars.{name}.holidays must be a country "
                                            "code (DE) or {country: DE, subdivision: BY}")
            bad = True
        if country is not None:
            problem = holidays_problem(country, subdivision)
            if problem:
                report.add(key + ("holidays",), f"calendars.{name}.holidays: {problem}")
                bad = True
    excepts = _list(body.get("except"))
    if not all(isinstance(e, str) for e in excepts):
        report.add(key + ("except",), f"calendars.{name}.except must list calendar names")
        bad = True
    if bad:
        return None
    return CalendarConfig(name, tuple(sorted(set(weekdays))), tuple(sorted(dates)),
                          ics, country, subdivision, tuple(excepts))


def _list(value: object) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _dates(item: object) -> range | None:
    if isinstance(item, _dt.date) and not isinstance(item, _dt.datetime):
        n = item.toordinal()
        return range(n, n + 1)
    if not isinstance(item, str):
        return None
    m = _RANGE.match(item.strip())
    try:
        if m:
            lo, hi = (_dt.date.fromisoformat(g).toordinal() for g in m.groups())
            return range(lo, hi + 1) if lo <= hi else None
        n = _dt.date.fromisoformat(item.strip()).toordinal()
        return range(n, n + 1)
    except ValueError:
        return None


def _cycle(cals: dict[str, CalendarConfig]) -> list[str]:
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> list[str]:
        if state.get(name) == 1:
            return path[path.index(name):] + [name]
        if state.get(name) == 2 or name not in cals:
            return []
        state[name] = 1
        for other in cals[name].except_:
            found = visit(other, path + [name])
            if found:
                return found
        state[name] = 2
        return []
    for name in sorted(cals):
        found = visit(name, [])
        if found:
            return found
    return []


# -- public holidays ------------------------------------------------------------------
def holidays_problem(country: str, subdivision: str | None) -> str | None:
    try:
        import holidays
    except ImportError:  # pragma: no cover - a dependency
        return "the holidays package is not installed (pip install holidays)"
    supported = holidays.list_supported_countries()
    if country not in supported:
        return (f"{country!r} is not a country the holidays package knows; use an ISO "
                "3166 code such as DE, FR, US, GB")
    if subdivision is not None and subdivision not in supported[country]:
        subs = ", ".join(supported[country][:20])
        return (f"{subdivision!r} is not a subdivision of {country}"
                + (f" (those are: {subs}...)" if subs else f" ({country} has none)"))
    return None


def _holidays(country: str, subdivision: str | None, years: range) -> set[int]:
    import holidays
    days = holidays.country_holidays(country, subdiv=subdivision, years=list(years))
    return {d.toordinal() for d in days}


# -- iCalendar --------------------------------------------------------------------------
def read_ics(path: str, years: range) -> set[int]:
    """The days of an iCalendar file's events (all-day events from DTSTART
    up to DTEND, exclusive; timed ones on the days they touch; a yearly
    RRULE repeated within ``years``). ConfigError naming the line for what
    it cannot read."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_ICS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror}): check the path and that "
                          "the daemon's user may read it") from None
    if len(data) > MAX_ICS_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_ICS_BYTES >> 20} MiB")
    return parse_ics(data.decode("utf-8", "replace"), path, years)


def parse_ics(text: str, path: str, years: range) -> set[int]:
    lines: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw[:1] in (" ", "\t") and lines:
            lines[-1] = (lines[-1][0], lines[-1][1] + raw[1:])
        elif raw.strip():
            lines.append((number, raw.rstrip("\r")))
    if not lines or lines[0][1].strip().upper() != "BEGIN:VCALENDAR":
        raise ConfigError(f"{path}:1: not an iCalendar file (it does not begin with "
                          "BEGIN:VCALENDAR)")
    days: set[int] = set()
    event: dict[str, tuple[int, str, str]] | None = None
    for number, line in lines:
        name, _, value = line.partition(":")
        prop, _, params = name.partition(";")
        prop = prop.upper()
        if prop == "BEGIN" and value.upper() == "VEVENT":
            event = {}
        elif prop == "END" and value.upper() == "VEVENT":
            if event is not None:
                days.update(_event_days(event, path, years))
            event = None
        elif event is not None and prop in ("DTSTART", "DTEND", "RRULE"):
            event[prop] = (number, params.upper(), value.strip())
        if len(days) > MAX_DATES:
            raise ConfigError(f"{path}: more than {MAX_DATES} days of events")
    return days


def _ics_date(number: int, value: str, path: str) -> tuple[_dt.date, bool]:
    """(date, whether a time of day was given)."""
    m = re.fullmatch(r"(\d{4})(\d{2})(\d{2})(T(\d{2})(\d{2})(\d{2})Z?)?", value)
    if not m:
        raise ConfigError(f"{path}:{number}: cannot read the date {value!r} (iCalendar "
                          "writes 20261224 or 20261224T090000)")
    try:
        day = _dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise ConfigError(f"{path}:{number}: {value!r} is not a date") from None
    timed = m.group(4) is not None and (m.group(5), m.group(6), m.group(7)) != ("00", "00", "00")
    return day, m.group(4) is not None and timed


def _event_days(event: dict[str, tuple[int, str, str]], path: str, years: range) -> Iterable[int]:
    if "DTSTART" not in event:
        return []
    number, _, value = event["DTSTART"]
    start, _ = _ics_date(number, value, path)
    last = start
    if "DTEND" in event:
        n2, _, v2 = event["DTEND"]
        end, timed = _ics_date(n2, v2, path)
        last = end if timed else max(start, end - _dt.timedelta(days=1))
    span = range(start.toordinal(), last.toordinal() + 1)
    if "RRULE" not in event:
        return span
    rn, _, rule = event["RRULE"]
    parts = dict(p.partition("=")[::2] for p in rule.upper().split(";") if p)
    if parts.get("FREQ") != "YEARLY" or set(parts) - {"FREQ", "COUNT", "UNTIL", "INTERVAL"}:
        raise ConfigError(f"{path}:{rn}: RRULE {rule!r} is not supported (only FREQ=YEARLY, "
                          "with COUNT, UNTIL or INTERVAL): list the days as events")
    try:
        step = int(parts.get("INTERVAL") or "1")
        count = int(parts["COUNT"]) if parts.get("COUNT") else None
    except ValueError:
        raise ConfigError(f"{path}:{rn}: RRULE {rule!r}: INTERVAL and COUNT are whole "
                          "numbers") from None
    if step < 1 or (count is not None and count < 0):
        raise ConfigError(f"{path}:{rn}: RRULE {rule!r}: INTERVAL is 1 or more and COUNT 0 "
                          "or more")
    until = _ics_date(rn, parts["UNTIL"], path)[0] if parts.get("UNTIL") else None
    out: list[int] = []
    n = 0
    year = start.year
    while year <= years.stop and (count is None or n < count):
        try:
            first = start.replace(year=year)
        except ValueError:   # Feb 29 in a year without one: not that year
            year += step
            n += 1
            continue
        if until is not None and first > until:
            break
        if year in years:
            out.extend(range(first.toordinal(), first.toordinal() + len(span)))
        n += 1
        year += step
    return out


# -- resolving ------------------------------------------------------------------------
def resolve(cals: Iterable[CalendarConfig], year: int) -> dict[str, Calendar]:
    """The days of each calendar, for holidays and yearly events in the
    years around ``year``. ConfigError if an ICS file cannot be read now."""
    years = range(year - YEARS_BACK, year + YEARS_AHEAD + 1)
    out: dict[str, Calendar] = {}
    for c in cals:
        days = set(c.dates)
        sources = []
        if c.weekdays:
            sources.append("weekdays " + ",".join(WEEKDAYS[w] for w in c.weekdays))
        if c.dates:
            sources.append(f"{len(c.dates)} dates")
        known: tuple[int, int] | None = None
        if c.ics is not None:
            days |= read_ics(c.ics, years)
            sources.append(f"ics {c.ics}")
            known = (years.start, years.stop - 1)
        if c.country is not None:
            days |= _holidays(c.country, c.subdivision, years)
            sources.append(f"holidays {c.country}" + (f"-{c.subdivision}" if c.subdivision
                                                      else ""))
            known = (years.start, years.stop - 1)
        if c.except_:
            sources.append("except " + ",".join(c.except_))
        out[c.name] = Calendar(c.name, frozenset(c.weekdays), frozenset(days), frozenset(),
                               known, "; ".join(sources), c.except_)
    return out

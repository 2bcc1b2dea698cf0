"""Schedule expressions: cron fields (5 or 6), @-words, ``@every D`` and ``@reboot``
-> :class:`Schedule` (pure).

Cron fields are read the way Vixie cron (Debian's cron, cronie) reads them:
numbers, names, ranges, lists and steps, where a step may be larger than its
range (``*/100`` in day-of-month is the 1st, ``10-20/50`` is 10).  Beside
them the day fields take ``L``, ``LW`` and ``15W`` (day of month) and ``5L``
and ``5#2`` (day of week).  :mod:`.matching` holds what the fields mean.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from dataclasses import dataclass, field as _field
from functools import lru_cache
from typing import Callable

from cronrd.errors import ScheduleError

from .durations import parse_duration
from .matching import CronFields

_ALIASES: dict[str, tuple[str, ...]] = {
    "@yearly": ("0", "0", "0", "1", "1", "*"),
    "@annually": ("0", "0", "0", "1", "1", "*"),
    "@monthly": ("0", "0", "0", "1", "*", "*"),
    "@weekly": ("0", "0", "0", "*", "*", "0"),
    "@daily": ("0", "0", "0", "*", "*", "*"),
    "@midnight": ("0", "0", "0", "*", "*", "*"),
    "@hourly": ("0", "0", "*", "*", "*", "*"),
}
_AT_WORDS = list(_ALIASES) + ["@every", "@reboot", "@after", "@at"]
_AT_HELP = ", ".join(list(_ALIASES) + ["@every <duration>", "@reboot", "@after",
                                       "@at <ISO 8601 time>"])
_AT_EXAMPLE = "'@at 2026-12-24T18:00:00+01:00' (or without the offset: in the job's time zone)"
_FIELD_HELP = (
    "use 5 fields (minute hour day-of-month month day-of-week), "
    "6 fields (second minute hour day-of-month month day-of-week) or an @-word such as @daily"
)

# (name, low, high, aliases) in our field order: second minute hour dom month dow
_Spec = tuple[str, int, int, dict[str, int]]
_FIELD_SPECS: tuple[_Spec, ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}),
)
_DOM, _DOW = 3, 5
_ITEM_RE = re.compile(r"(?P<a>[0-9a-z]+)(?:-(?P<b>[0-9a-z]+))?(?:/(?P<step>[^/]*))?")
_STAR_RE = re.compile(r"\*(?:/(?P<step>[^/]*))?")
_DIGITS = re.compile(r"[0-9]+")
_RANDOM_RE = re.compile(r"[hr](?:$|\(|/)")
_NEAREST_RE = re.compile(r"(?:(?P<a>[0-9]+)w|w(?P<b>[0-9]+))")  # 15W (and croniter's W15)
_LAST_DOW_RE = re.compile(r"(?:(?P<a>[0-9]+)l|l(?P<b>[0-9]+))")  # 5L (and croniter's L5)
_NTH_RE = re.compile(r"(?P<a>[0-9]+|[a-z]+)#(?P<n>[0-9]*)")
_DOM_FORMS = ("the day-of-month forms are L (the last day of the month), LW (its last weekday) "
              "and 15W (the weekday nearest the 15th), each alone between commas")
_DOW_FORMS = ("the day-of-week forms are 5L (the last Friday of the month) and 5#2 (its second "
              "Friday), each alone between commas")


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule.

    ``fields`` (cron only) are six normalised fields: second, minute, hour,
    day-of-month, month, day-of-week; ``cron`` is what they mean.  ``interval``
    (every only) is seconds.
    """

    kind: str  # "cron" | "every" | "reboot" | "after" (no time: fired by its parents) | "at"
    expr: str
    fields: tuple[str, ...] = ()
    interval: int = 0
    # "at" only: the wall-clock time (year, month, day, hour, minute, second)
    # and its UTC offset in seconds (None: the job's time zone says).
    at: tuple[int, ...] = ()
    at_offset: int | None = None
    cron: CronFields | None = _field(default=None, compare=False, repr=False)

    @property
    def fixed_time(self) -> bool:
        """Whether the minute and hour fields are both fixed (not starting with ``*``)."""
        return self.kind == "cron" and not self.fields[1].startswith("*") and not self.fields[2].startswith("*")


class _Field:
    """What the items of one field add up to."""

    def __init__(self) -> None:
        self.values: set[int] = set()
        self.last = self.last_weekday = False
        self.nearest: set[int] = set()
        self.nth: set[tuple[int, int]] = set()
        self.last_dow: set[int] = set()


def _field_value(text: str, spec: _Spec, column: int, field: str) -> int:
    name, low, high, aliases = spec
    if text.isdigit():
        value = int(text)
    elif text in aliases:
        value = aliases[text]
    else:
        raise ScheduleError(f"{name} field '{field}': '{text}' is not a number or name", column)
    if not low <= value <= high:
        raise ScheduleError(f"{name} field '{text}' is out of range {low}-{high}", column)
    return value


def _is_value(text: str | None, spec: _Spec) -> bool:
    return text is None or text.isdigit() or text in spec[3]


def _step(step: str | None, spec: _Spec, field: str, column: int) -> int:
    if step is None:
        return 1
    if not _DIGITS.fullmatch(step) or int(step) < 1:  # not str.isdigit: '¹' and '٣' are digits to it
        raise ScheduleError(
            f"{spec[0]} field '{field}': step '{step}' must be a whole number of 1 or more", column)
    return int(step)  # larger than the range is fine: '*/100' is the range's start, as in cron


def _special(index: int, item: str, shown: str, field: str, column: int, out: _Field) -> bool:
    """Read an L, W or # form of a day field into ``out``; False if ``item`` is none."""
    name = _FIELD_SPECS[index][0]

    def bad(why: str) -> ScheduleError:
        return ScheduleError(f"{name} field '{field}' is not valid: {why}", column)

    if index == _DOM:
        if item == "l":
            out.last = True
            return True
        if item == "lw":
            out.last_weekday = True
            return True
        m = _NEAREST_RE.fullmatch(item)
        if m:
            day = int(m.group("a") or m.group("b"))
            if not 1 <= day <= 31:
                raise bad(f"the day in '{shown}' must be 1-31 ('15W' is the weekday nearest the 15th)")
            out.nearest.add(day)
            return True
    if index == _DOW:
        m = _LAST_DOW_RE.fullmatch(item)
        if m:
            out.last_dow.add(_weekday(m.group("a") or m.group("b"), shown, bad))
            return True
        m = _NTH_RE.fullmatch(item)
        if m:
            wd = _weekday(m.group("a"), shown, bad)
            n = m.group("n")
            if not n.isdigit() or not 1 <= int(n) <= 5:
                raise bad(f"the n in '{shown}' is the week of the month, 1-5 ('5#2' is the second Friday)")
            out.nth.add((wd, int(n)))
            return True
    return False


def _weekday(text: str, shown: str, bad: Callable[[str], ScheduleError]) -> int:
    names = _FIELD_SPECS[_DOW][3]
    if text in names:
        return names[text]
    if text.isdigit() and int(text) <= 7:
        return int(text) % 7
    raise bad(f"'{text}' in '{shown}' is not a day of the week (0-7 or sun-sat)")


def _misplaced(index: int, shown: str, field: str, column: int) -> ScheduleError:
    """The error for an item with L, W or # that no form of this field reads."""
    name = _FIELD_SPECS[index][0]
    if index == _DOM:
        why = _DOM_FORMS + ("; 5L and 5#2 belong in the day-of-week field" if "#" in shown or
                            re.fullmatch(r"[0-9]+[lL]", shown) else "")
    elif index == _DOW:
        why = _DOW_FORMS + ("; L, LW and 15W belong in the day-of-month field"
                            if re.fullmatch(r"(?i)lw?|[0-9]*w[0-9]*", shown) else "")
    else:
        why = ("L, W and # are only read in the day fields: L, LW and 15W in day-of-month, "
               "5L and 5#2 in day-of-week")
    return ScheduleError(f"{name} field '{field}': cannot read '{shown}': {why}", column)


def _check_field(index: int, field: str, column: int) -> tuple[str, _Field]:
    """Validate one field; return it normalised, and what it holds."""
    spec = _FIELD_SPECS[index]
    name, low, high, _ = spec
    out = _Field()
    norm = []
    for shown in field.split(","):
        item = shown.lower()
        if not item:
            raise ScheduleError(f"{name} field '{field}' has an empty list item", column)
        if _RANDOM_RE.match(item):
            raise ScheduleError(
                f"{name} field '{field}': hashed/random values (H, R) are not supported; use fixed values", column
            )
        if item == "?":
            if index not in (_DOM, _DOW):
                raise ScheduleError(f"{name} field '{field}': '?' is only allowed in day-of-month "
                                    "and day-of-week", column)
            item = "*"
        m = _STAR_RE.fullmatch(item)
        if m:
            out.values.update(range(low, high + 1, _step(m.group("step"), spec, field, column)))
            norm.append(item)
            continue
        m = _ITEM_RE.fullmatch(item)
        if m and _is_value(m.group("a"), spec) and _is_value(m.group("b"), spec):
            a = _field_value(m.group("a"), spec, column, field)
            b = m.group("b")
            step = m.group("step")
            stride = _step(step, spec, field, column)
            if b is not None:
                end = _field_value(b, spec, column, field)
                if end < a:
                    raise ScheduleError(
                        f"{name} field '{field}': range '{m.group('a')}-{b}' starts after it ends", column
                    )
                if end == a and step is None:
                    item = m.group("a")  # '5-5' is written 5
            else:
                end = a if step is None else high  # '5/15' is 5, 20, 35, 50
            out.values.update(range(a, end + 1, stride))
            norm.append(item)
            continue
        if _special(index, item, shown, field, column, out):
            norm.append(item)
            continue
        if "#" in item or re.sub(r"[^a-z]", "", item) in ("l", "w", "lw"):
            raise _misplaced(index, shown, field, column)
        if m:
            for text in (m.group("a"), m.group("b")):
                if text is not None:
                    _field_value(text, spec, column, field)
        raise ScheduleError(f"{name} field '{field}': cannot read '{shown}'", column)
    return ",".join(norm), out


def _compile(parts: list[_Field], fields: tuple[str, ...]) -> CronFields:
    sec, minute, hour, dom, month, dow = parts
    return CronFields(
        seconds=tuple(sorted(sec.values)),
        minutes=tuple(sorted(minute.values)),
        hours=tuple(sorted(hour.values)),
        months=frozenset(month.values),
        dom=frozenset(dom.values),
        dom_last=dom.last,
        dom_last_weekday=dom.last_weekday,
        dom_nearest=frozenset(dom.nearest),
        dow=frozenset(v % 7 for v in dow.values),
        dow_nth=frozenset(dow.nth),
        dow_last=frozenset(dow.last_dow),
        # Vixie cron's DOM_STAR / DOW_STAR: a day field that begins with '*' makes the
        # two day fields an AND; otherwise a day matches either of them.
        day_or=not fields[_DOM].startswith("*") and not fields[_DOW].startswith("*"),
    )


def _parse_at(expr: str, text: str, tokens: list[tuple[str, int]], end: int) -> Schedule:
    """``@at 2026-12-24T18:00:00+01:00``: one fire time. Without an
    offset, the time is read in the job's time zone (the trigger's)."""
    if len(tokens) < 2:
        raise ScheduleError(f"@at needs a time, e.g. {_AT_EXAMPLE}", end)
    col = tokens[1][1]
    when = expr[col:].strip()
    iso = when[:-1] + "+00:00" if when[-1:] in ("z", "Z") else when
    try:
        value = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise ScheduleError(f"@at time '{when}' is not an ISO 8601 time: use e.g. "
                            f"{_AT_EXAMPLE}", col) from None
    if value.microsecond:
        raise ScheduleError(f"@at time '{when}' has a fraction of a second: fire times are "
                            "whole seconds", col)
    if not 1971 <= value.year <= 8999:
        raise ScheduleError(f"@at time '{when}': the year must be 1971-8999", col)
    offset = value.utcoffset()
    wall = (value.year, value.month, value.day, value.hour, value.minute, value.second)
    return Schedule("at", text, at=wall,
                    at_offset=None if offset is None else int(offset.total_seconds()))


@lru_cache(maxsize=16384)
def parse_schedule(expr: str) -> Schedule:
    """Parse a cron expression (5 or 6 fields), an @-word, ``@every D`` or ``@reboot``.

    Five fields are minute-first; six fields are **seconds-first**.  Errors carry
    the 0-based column of the offending field in ``expr`` when it is known.
    """
    if not isinstance(expr, str):
        raise ScheduleError(f"schedule must be a string, not {type(expr).__name__}")
    text = expr.strip()
    if not text:
        raise ScheduleError(f"empty schedule: {_FIELD_HELP}", 0)
    tokens = [(m.group(), m.start()) for m in re.finditer(r"\S+", expr)]
    first, first_col = tokens[0]
    if first.startswith("@"):
        word = first.lower()
        if word == "@every":
            if len(tokens) < 2:
                raise ScheduleError("@every needs a duration, e.g. '@every 5m'", first_col + len(first))
            dur_col = tokens[1][1]
            dur_text = expr[dur_col:].strip()
            try:
                seconds = parse_duration(dur_text)
            except ScheduleError as exc:
                raise ScheduleError(exc.message, dur_col) from None
            if seconds < 1:
                raise ScheduleError(f"@every interval '{dur_text}' is shorter than 1s", dur_col)
            if seconds != int(seconds):
                raise ScheduleError(f"@every interval '{dur_text}' must be a whole number of seconds", dur_col)
            return Schedule("every", text, (), int(seconds))
        if word == "@at":
            return _parse_at(expr, text, tokens, first_col + len(first))
        if word in _ALIASES or word in ("@reboot", "@after"):
            if len(tokens) > 1:
                raise ScheduleError(f"unexpected '{tokens[1][0]}' after {first}", tokens[1][1])
            if word == "@reboot":
                return Schedule("reboot", text)
            if word == "@after":  # no time of its own: its parents' runs fire it
                return Schedule("after", text)
            fields = _ALIASES[word]
            parts = [_check_field(i, f, 0)[1] for i, f in enumerate(fields)]
            return Schedule("cron", text, fields, cron=_compile(parts, fields))
        guess = difflib.get_close_matches(word, _AT_WORDS, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        raise ScheduleError(f"unknown schedule '{first}': use one of {_AT_HELP}{hint}", first_col)
    if len(tokens) not in (5, 6):
        column = tokens[6][1] if len(tokens) > 6 else None
        raise ScheduleError(f"schedule '{text}' has {len(tokens)} fields: {_FIELD_HELP}", column)
    padded: list[tuple[str, int | None]] = list(tokens)
    if len(tokens) == 5:
        padded = [("0", None)] + padded
    checked = [_check_field(i, tok, col if col is not None else 0) for i, (tok, col) in enumerate(padded)]
    fields = tuple(norm for norm, _ in checked)
    cron = _compile([part for _, part in checked], fields)
    # A schedule that can never match (Feb 30, the 1st that is a fourth Monday)
    # is an error, not a silent no-op.
    if not cron.ever_matches():
        why = ""
        if not cron.day_or and "*" not in (fields[_DOM], fields[_DOW]):
            starred = "day-of-month" if fields[_DOM].startswith("*") else "day-of-week"
            why = (f"; as in cron, the {starred} field begins with '*', so a day must match both "
                   "day fields, not either (man 5 cronrd.d, SCHEDULES)")
        raise ScheduleError(
            f"schedule '{text}' never fires: no date matches its day and month fields{why}", padded[3][1])
    return Schedule("cron", text, fields, cron=cron)

"""Schedule expressions: cron fields (5 or 6), @-words, ``@every D`` and ``@reboot``
-> :class:`Schedule` (pure).

croniter has the last word on cron syntax (the L, W and # forms) and is built
here, by :func:`_croniter_for`, with the options cronrd relies on.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from croniter import CroniterBadDateError, CroniterError, croniter

from cronrd.errors import ScheduleError

from .durations import parse_duration

_NAIVE_EPOCH = _dt.datetime(1970, 1, 1)

_ALIASES = {
    "@yearly": ("0", "0", "0", "1", "1", "*"),
    "@annually": ("0", "0", "0", "1", "1", "*"),
    "@monthly": ("0", "0", "0", "1", "*", "*"),
    "@weekly": ("0", "0", "0", "*", "*", "0"),
    "@daily": ("0", "0", "0", "*", "*", "*"),
    "@midnight": ("0", "0", "0", "*", "*", "*"),
    "@hourly": ("0", "0", "*", "*", "*", "*"),
}
_AT_WORDS = list(_ALIASES) + ["@every", "@reboot"]
_AT_HELP = ", ".join(list(_ALIASES) + ["@every <duration>", "@reboot"])
_FIELD_HELP = (
    "use 5 fields (minute hour day-of-month month day-of-week), "
    "6 fields (second minute hour day-of-month month day-of-week) or an @-word such as @daily"
)

# (name, low, high, aliases) in our field order: second minute hour dom month dow
_FIELD_SPECS = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}),
)
_ITEM_RE = re.compile(r"(?P<a>[0-9a-z]+)(?:-(?P<b>[0-9a-z]+))?(?:/(?P<step>[^/]*))?")
_STAR_RE = re.compile(r"\*(?:/(?P<step>[^/]*))?")
_SPECIAL_RE = re.compile(r"[0-9a-z]*[lw#][0-9a-z#]*")  # L, W, # forms: croniter validates
_RANDOM_RE = re.compile(r"[hr](?:$|\(|/)")


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule.

    ``fields`` (cron only) are six normalised fields: second, minute, hour,
    day-of-month, month, day-of-week.  ``interval`` (every only) is seconds.
    """

    kind: str  # "cron" | "every" | "reboot"
    expr: str
    fields: tuple[str, ...] = ()
    interval: int = 0

    @property
    def fixed_time(self) -> bool:
        """Whether the minute and hour fields are both fixed (not starting with ``*``)."""
        return self.kind == "cron" and not self.fields[1].startswith("*") and not self.fields[2].startswith("*")


def _field_value(text: str, spec, column: int, field: str) -> int:
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


def _check_field(index: int, field: str, column: int) -> str:
    """Validate one field; return it normalised for croniter."""
    spec = _FIELD_SPECS[index]
    name = spec[0]
    low_field = field.lower()
    items = low_field.split(",")
    out = []
    for item in items:
        if not item:
            raise ScheduleError(f"{name} field '{field}' has an empty list item", column)
        if _RANDOM_RE.match(item):
            raise ScheduleError(
                f"{name} field '{field}': hashed/random values (H, R) are not supported; use fixed values", column
            )
        if item == "?":
            if index not in (3, 5):
                raise ScheduleError(f"{name} field '{field}': '?' is only allowed in day-of-month and day-of-week", column)
            out.append("*")
            continue
        m = _STAR_RE.fullmatch(item)
        if m:
            step = m.group("step")
            if step is not None:
                _check_step(step, spec, field, column)
            out.append(item)
            continue
        m = _ITEM_RE.fullmatch(item)
        if m and not (index in (3, 5) and _SPECIAL_RE.fullmatch(item) and not _is_name(item, spec)):
            a = _field_value(m.group("a"), spec, column, field)
            b = m.group("b")
            step = m.group("step")
            if step is not None:
                _check_step(step, spec, field, column)
            if b is not None:
                bv = _field_value(b, spec, column, field)
                if bv < a:
                    raise ScheduleError(
                        f"{name} field '{field}': range '{m.group('a')}-{b}' starts after it ends", column
                    )
                if bv == a:  # croniter reads "5-5" as the whole cycle; we mean 5
                    item = m.group("a")
            out.append(item)
            continue
        if index in (3, 5) and _SPECIAL_RE.fullmatch(item):
            out.append(item)  # L / W / # forms; croniter decides below
            continue
        raise ScheduleError(f"{name} field '{field}': cannot read '{item}'", column)
    return ",".join(out)


def _is_name(item: str, spec) -> bool:
    return all(part in spec[3] or part.isdigit() for part in re.split(r"[-/]", item))


def _check_step(step: str, spec, field: str, column: int) -> None:
    name, low, high, _ = spec
    if not step.isdigit() or int(step) < 1:
        raise ScheduleError(f"{name} field '{field}': step '{step}' must be a whole number of 1 or more", column)
    if int(step) > high - low + 1:
        raise ScheduleError(f"{name} field '{field}': step {step} is larger than the range {low}-{high}", column)


def _croniter_for(fields: tuple[str, ...], start: _dt.datetime | None = None) -> croniter:
    return croniter(
        " ".join(fields),
        start or _NAIVE_EPOCH,
        ret_type=float,
        second_at_beginning=True,
        day_or=True,
        implement_cron_bug=True,
    )


def _why(exc: Exception) -> str:
    """croniter's complaint without its echo of the whole expression."""
    text = re.sub(r"^\[[^\]]*\]\s*(is not acceptable[.,]?\s*)?", "", str(exc)).strip()
    return text or "not a valid cron field"


_PLAIN_FIELD = re.compile(r"[0-9*,/-]+")


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
        if word in _ALIASES or word == "@reboot":
            if len(tokens) > 1:
                raise ScheduleError(f"unexpected '{tokens[1][0]}' after {first}", tokens[1][1])
            if word == "@reboot":
                return Schedule("reboot", text)
            return Schedule("cron", text, _ALIASES[word])
        guess = difflib.get_close_matches(word, _AT_WORDS, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        raise ScheduleError(f"unknown schedule '{first}': use one of {_AT_HELP}{hint}", first_col)
    if len(tokens) not in (5, 6):
        column = tokens[6][1] if len(tokens) > 6 else None
        raise ScheduleError(f"schedule '{text}' has {len(tokens)} fields: {_FIELD_HELP}", column)
    if len(tokens) == 5:
        tokens = [("0", None)] + tokens
    fields = tuple(
        _check_field(i, tok, col if col is not None else 0) for i, (tok, col) in enumerate(tokens)
    )
    # Fields of numbers, ranges, steps and lists were checked whole above;
    # for names and the L, W, # forms croniter has the last word (building
    # one costs ~150 us: a fleet's 100,000 schedules are checked at start).
    plain = all(_PLAIN_FIELD.fullmatch(f) for f in fields)
    try:
        if not plain:
            _croniter_for(fields)
    except (CroniterError, ValueError, TypeError, KeyError) as exc:
        column = None
        for i, (tok, col) in enumerate(tokens):
            probe = tuple(f if j == i else "*" for j, f in enumerate(fields))
            try:
                _croniter_for(probe)
            except (CroniterError, ValueError, TypeError, KeyError):
                column = col
                raise ScheduleError(f"{_FIELD_SPECS[i][0]} field '{tok}' is not valid: {_why(exc)}", column) from None
        raise ScheduleError(f"schedule '{text}' is not valid: {_why(exc)}", column) from None
    # A schedule that can never match (Feb 30) is an error, not a silent no-op.
    # croniter looks 50 years ahead, which covers every calendar pattern (Feb 29 included).
    # Only a day of month and a month both restricted can miss each other.
    if plain and (fields[3] == "*" or fields[4] == "*"):
        return Schedule("cron", text, fields)
    try:
        _croniter_for(fields, _dt.datetime(2000, 1, 1)).get_next(float)
    except CroniterBadDateError:
        col = tokens[3][1] if tokens[3][1] is not None else None
        raise ScheduleError(f"schedule '{text}' never fires: no date matches its day and month fields", col) from None
    return Schedule("cron", text, fields)

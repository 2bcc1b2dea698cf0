"""Schedules, triggers and fire-time math (pure).

Everything here is a function of its arguments: no clocks, no randomness and
no I/O, except :func:`host_timezone`, which reads the host's zone setting.
Times are integer epoch seconds (UTC) throughout the public API.

croniter is used only inside this module, and only to find the next *naive*
wall-clock time matching a cron expression.  Mapping wall-clock times to
instants across daylight-saving changes is done here, the way Debian's cron
and cronie do it:

* a **fixed-time** job (minute and hour fields both not starting with ``*``)
  whose wall-clock time falls into a skipped hour runs once, at the instant of
  the jump; one whose time falls into a repeated hour runs once, in the first
  pass;
* a **wildcard** job (minute or hour field starts with ``*``) follows the wall
  clock: times that do not exist do not fire, repeated times fire twice.

The time line of a zone is cut into *segments* of constant UTC offset (found
once per zone and year by sampling the offset and bisecting each change, then
cached).  Inside a segment wall clock and instants map one to one, so the next
fire is "the next naive match, minus the segment's offset", and the rules
above only apply where a segment starts or ends.
"""

from __future__ import annotations

import bisect
import calendar
import datetime as _dt
import difflib
import hashlib
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from cronrd.errors import ScheduleError

__all__ = [
    "MAX_DST_SHIFT",
    "CatchupPlan",
    "Schedule",
    "Trigger",
    "format_fire",
    "host_timezone",
    "human_duration",
    "iso_utc",
    "jitter_for",
    "make_trigger",
    "parse_duration",
    "parse_iso",
    "parse_schedule",
    "parse_size",
    "plan_catchup",
    "resolve_timezone",
    "retry_delay",
]

#: Largest change of a zone's UTC offset we plan for (seconds).  Used as a
#: search margin; real daylight-saving shifts are 30 minutes to 2 hours.
MAX_DST_SHIFT = 3 * 3600

_UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_UTC)
_NAIVE_EPOCH = _dt.datetime(1970, 1, 1)
_DAY = 86400
# Instants outside these bounds have no fire times (keeps datetime happy).
_MIN_T = calendar.timegm((1900, 1, 1, 0, 0, 0))
_MAX_T = calendar.timegm((9000, 1, 1, 0, 0, 0))

# ---------------------------------------------------------------------------
# durations and sizes
# ---------------------------------------------------------------------------

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d|w)\s*)+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _bad_duration(value: object, why: str = "") -> ScheduleError:
    hint = "use a number with units ms, s, m, h, d, w, e.g. 30s or 1h30m"
    return ScheduleError(f"bad duration '{value}': {why + '; ' if why else ''}{hint}")


def parse_duration(value: object) -> float:
    """Seconds from ``30``, ``"500ms"``, ``"1h30m"``, ``"1h 30m"``, ``"2d"``, ``"1w"``.

    A plain number (or numeric string) is seconds.  Negative values, booleans,
    empty strings and unknown units raise :class:`ScheduleError`.
    """
    if isinstance(value, bool):
        raise _bad_duration(value, "not a number")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise _bad_duration(value, "must be finite")
        if value < 0:
            raise _bad_duration(value, "must not be negative")
        return float(value)
    if not isinstance(value, str):
        raise _bad_duration(value, f"expected a string or number, not {type(value).__name__}")
    text = value.strip().lower()
    if not text:
        raise _bad_duration(value, "empty")
    if text.startswith("-"):
        raise _bad_duration(value, "must not be negative")
    if _PLAIN_NUMBER.fullmatch(text):
        return float(text)
    if not _DURATION_FULL.fullmatch(text):
        raise _bad_duration(value)
    return float(sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text)))


_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_size(value: object) -> int:
    """Bytes from ``2048``, ``"500B"``, ``"100KB"``, ``"1MB"``, ``"512KiB"``, ``"10MiB"``, ``"1GiB"``.

    KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of 1024.
    Fractions of a byte are rounded down.
    """
    hint = "use a whole number of bytes or a number with a unit B, KB, MB, GB, KiB, MiB, GiB, e.g. 10MiB"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ScheduleError(f"bad size '{value}': {hint}")
    if isinstance(value, int):
        if value < 0:
            raise ScheduleError(f"bad size '{value}': must not be negative; {hint}")
        return value
    m = _SIZE_RE.fullmatch(value.strip().lower())
    if not m or m.group(2) not in _SIZE_UNITS:
        raise ScheduleError(f"bad size '{value}': {hint}")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2)])


def human_duration(seconds: float) -> str:
    """``5400 -> "1h30m"``, ``30 -> "30s"``, ``0.5 -> "500ms"``, ``0 -> "0s"``."""
    if seconds < 0:
        return "-" + human_duration(-seconds)
    ms = int(round(seconds * 1000))
    if ms == 0:
        return "0s"
    whole, ms = divmod(ms, 1000)
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, whole = divmod(whole, size)
        if n:
            out.append(f"{n}{unit}")
    if ms:
        out.append(f"{ms}ms")
    return "".join(out)


# ---------------------------------------------------------------------------
# time zones
# ---------------------------------------------------------------------------


def _load_zone(name: str) -> ZoneInfo | None:
    if not name or name.startswith("/") or ".." in name.split("/"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def resolve_timezone(name: str) -> ZoneInfo:
    """The :class:`ZoneInfo` for an IANA name, or a :class:`ScheduleError` with a suggestion."""
    if isinstance(name, ZoneInfo):
        return name
    text = name.strip() if isinstance(name, str) else ""
    zone = _load_zone(text)
    if zone is not None:
        return zone
    message = f"unknown time zone '{name}': use an IANA name such as Europe/Berlin or UTC"
    if text:
        names = sorted(available_timezones())
        by_lower = {n.lower(): n for n in names}
        guess = [by_lower[text.lower()]] if text.lower() in by_lower else difflib.get_close_matches(
            text, names, n=3, cutoff=0.6
        )
        if guess:
            message += f" (did you mean {' or '.join(guess)}?)"
    raise ScheduleError(message)


def _zone_name_from_path(path: str) -> str | None:
    marker = "zoneinfo/"
    idx = path.rfind(marker)
    if idx < 0:
        return None
    name = path[idx + len(marker):]
    for prefix in ("posix/", "right/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name if _load_zone(name) is not None else None


def host_timezone(*, environ: Mapping[str, str] | None = None, root: str = "/") -> str:
    """The host's IANA zone name: ``$TZ``, ``/etc/timezone``, the ``/etc/localtime`` link, else ``UTC``.

    ``environ`` and ``root`` exist for tests (defaults: ``os.environ`` and ``/``).
    """
    env = os.environ if environ is None else environ
    tz = env.get("TZ", "").strip()
    if tz:
        tz = tz[1:] if tz.startswith(":") else tz
        if _load_zone(tz) is not None:
            return tz
        from_path = _zone_name_from_path(tz)
        if from_path:
            return from_path
    try:
        with open(os.path.join(root, "etc/timezone"), encoding="utf-8") as fh:
            name = fh.readline().strip()
        if _load_zone(name) is not None:
            return name
    except OSError:
        pass
    try:
        target = os.readlink(os.path.join(root, "etc/localtime"))
    except OSError:
        target = ""
    name = _zone_name_from_path(target) if target else None
    return name or "UTC"


def _offset_at(tz: _dt.tzinfo, t: int) -> int:
    return int(_dt.datetime.fromtimestamp(t, tz).utcoffset().total_seconds())


_SAMPLE_STEP = 6 * 3600  # two offset changes closer than this are not expected


def _year_start(year: int) -> int:
    return calendar.timegm((year, 1, 1, 0, 0, 0))


@lru_cache(maxsize=4096)
def _year_transitions(tz: _dt.tzinfo, year: int) -> tuple[tuple[int, int, int], ...]:
    """Offset changes ``(instant, offset_before, offset_after)`` with instant in the UTC year."""
    start, end = _year_start(year), _year_start(year + 1)
    out = []
    prev_t, prev_o = start - 1, _offset_at(tz, start - 1)
    t = start - 1
    while t < end - 1:
        t = min(t + _SAMPLE_STEP, end - 1)
        o = _offset_at(tz, t)
        if o != prev_o:
            lo, hi = prev_t, t  # offset(lo) == prev_o, offset(hi) != prev_o
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_at(tz, mid) == prev_o:
                    lo = mid
                else:
                    hi = mid
            out.append((hi, prev_o, _offset_at(tz, hi)))
        prev_t, prev_o = t, o
    return tuple(out)


@dataclass(frozen=True)
class _Window:
    """Transitions around one UTC year: valid for instants in [lo, hi)."""

    lo: int
    hi: int
    times: list[int]
    entries: tuple[tuple[int, int, int], ...]
    first_offset: int  # offset before the first entry (or everywhere, if none)
    horizon: int  # no transition known in (last entry, horizon)
    horizon_offset: int


@lru_cache(maxsize=1024)
def _window(tz: _dt.tzinfo, year: int) -> _Window:
    entries = _year_transitions(tz, year - 1) + _year_transitions(tz, year) + _year_transitions(tz, year + 1)
    horizon = _year_start(year + 2)
    first = entries[0][1] if entries else _offset_at(tz, _year_start(year - 1))
    return _Window(
        lo=_year_start(year),
        hi=_year_start(year + 1),
        times=[e[0] for e in entries],
        entries=entries,
        first_offset=first,
        horizon=horizon,
        horizon_offset=_offset_at(tz, horizon),
    )


# ---------------------------------------------------------------------------
# schedule expressions
# ---------------------------------------------------------------------------

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
    # croniter has the last word on syntax (L, W, # forms); find the field it objects to.
    try:
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
    try:
        _croniter_for(fields, _dt.datetime(2000, 1, 1)).get_next(float)
    except CroniterBadDateError:
        col = tokens[3][1] if tokens[3][1] is not None else None
        raise ScheduleError(f"schedule '{text}' never fires: no date matches its day and month fields", col) from None
    return Schedule("cron", text, fields)


# ---------------------------------------------------------------------------
# triggers
# ---------------------------------------------------------------------------


def _naive(n: int) -> _dt.datetime:
    return _NAIVE_EPOCH + _dt.timedelta(seconds=n)


def _full(values: list, low: int, high: int) -> list[int]:
    if values == ["*"]:
        return list(range(low, high + 1))
    return sorted({int(v) for v in values})


class Trigger:
    """Fire times of one schedule in one time zone.  Build with :func:`make_trigger`.

    Pure but not thread-safe: it keeps a croniter instance and a cached
    window of the zone's offset changes.
    """

    def __init__(self, schedule: Schedule, tz: ZoneInfo):
        self.schedule = schedule
        self.tz = tz
        self._win: _Window | None = None
        if schedule.kind == "cron":
            self._fixed = schedule.fixed_time
            self._cron = _croniter_for(schedule.fields)
            self._day_cron: croniter | None = None
            self._tod: tuple | None = None

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
        try:
            return int(self._cron.get_next(float, start_time=_naive(n - 1)))
        except (CroniterBadDateError, OverflowError, ValueError):
            return None

    # -- public ------------------------------------------------------------

    def next_after(self, t: int) -> int | None:
        """The first fire time strictly after ``t``; None if there is none (``@reboot``)."""
        kind = self.schedule.kind
        t = math.floor(t)
        if kind == "every":
            step = self.schedule.interval
            return (t // step + 1) * step
        if kind != "cron":
            return None
        x = t + 1  # looking for instants >= x
        last_lo = last_n = None
        while _MIN_T <= x < _MAX_T:
            start, before, off, end, after = self._segment(x)
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
        if kind != "cron":
            return 0
        after = max(after, _MIN_T - 1)
        until = min(until, _MAX_T - 1)
        total = 0
        x = after + 1
        budget = [max_days]
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

    def _tod_tables(self):
        if self._tod is None:
            expanded, _ = croniter.expand(" ".join(self.schedule.fields), second_at_beginning=True)
            minutes, hours, seconds = (
                _full(expanded[0], 0, 59), _full(expanded[1], 0, 23), _full(expanded[5], 0, 59)
            )
            self._tod = (hours, set(hours), minutes, set(minutes), seconds, len(minutes) * len(seconds))
            f = self.schedule.fields
            self._day_cron = _croniter_for(("0", "0", "0", f[3], f[4], f[5]))
        return self._tod

    def _tod_le(self, s: int) -> int:
        """Matching seconds-of-day <= s."""
        if s < 0:
            return 0
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
        try:
            return int(self._day_cron.get_next(float, start_time=_naive(day * _DAY - 1))) == day * _DAY
        except (CroniterBadDateError, OverflowError, ValueError):
            return False

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
        n = (d0 + 1) * _DAY - 1
        limit = (d1 - 1) * _DAY
        while True:
            try:
                n = int(self._day_cron.get_next(float, start_time=_naive(n)))
            except (CroniterBadDateError, OverflowError, ValueError):
                break
            if n > limit:
                break
            budget[0] -= 1
            if budget[0] < 0:
                return -1
            total += per_day
        return total


def make_trigger(schedule: Schedule, tz: str | ZoneInfo) -> Trigger:
    """A :class:`Trigger` for ``schedule`` in zone ``tz`` (name or ZoneInfo)."""
    zone = tz if isinstance(tz, _dt.tzinfo) else resolve_timezone(tz)
    return Trigger(schedule, zone)


# ---------------------------------------------------------------------------
# jitter and retries
# ---------------------------------------------------------------------------


def _unit_hash(text: str) -> float:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def jitter_for(job: str, fire_time: int, max_jitter: float) -> float:
    """Deterministic delay in ``[0, max_jitter)`` for one fire of one job (same on every node)."""
    if not max_jitter or max_jitter <= 0:
        return 0.0
    if isinstance(fire_time, float) and fire_time.is_integer():
        fire_time = int(fire_time)
    return _unit_hash(f"{job}\0{fire_time}") * max_jitter


def retry_delay(attempt: int, delay: float, backoff: float, max_delay: float, jitter: float, key: str) -> float:
    """Delay before ``attempt`` (2 = first retry): ``delay * backoff**(attempt-2)`` capped at
    ``max_delay`` (None: no cap), plus a deterministic jitter in ``[0, jitter)`` from sha256(key)."""
    exponent = max(attempt - 2, 0)
    try:
        base = delay * (backoff**exponent)
    except OverflowError:
        base = math.inf
    if max_delay is not None:
        base = min(base, max_delay)
    if jitter and jitter > 0:
        base += _unit_hash(key) * jitter
    return float(base)


# ---------------------------------------------------------------------------
# catch-up after downtime
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CatchupPlan:
    run: tuple[int, ...]
    skipped: tuple[tuple[int, str], ...]
    skipped_range: tuple[int, int, int, str] | None
    cursor: int


def _nth_from_end(trigger: Trigger, lo: int, hi: int, j: int) -> int | None:
    """The j-th last fire (j >= 1) in (lo, hi], or None if there are fewer than j."""
    if hi <= lo:
        return None

    def enough(p: int) -> bool:
        c = trigger.count_between(p, hi)
        return c < 0 or c >= j

    span = max(1, j)
    known_short = hi  # count(known_short, hi] < j
    while True:
        p = hi - span
        if p <= lo:
            if not enough(lo):
                return None
            p = lo
            break
        if enough(p):
            break
        known_short = p
        span *= 2
    # count(p, hi] >= j > count(known_short, hi]: the answer is in (p, known_short]
    a, b = p, known_short
    while b - a > 1:
        mid = (a + b) // 2
        if enough(mid):
            a = mid
        else:
            b = mid
    return a + 1


def plan_catchup(
    trigger: Trigger,
    cursor: int,
    now: int,
    policy: str,
    window: float | None,
    max_records: int = 1000,
) -> CatchupPlan:
    """Decide what to do with the fires due in ``(cursor, now]``.

    Every due fire ends up in ``run``, in ``skipped`` (the newest
    ``max_records`` skipped fires, each with a reason) or is counted in
    ``skipped_range`` (the older skipped fires: first, last, count, reason).

    * ``"all"``: run the fires with ``now - f <= window`` (all of them when
      ``window`` is None; note that this enumerates every one), skip older ones.
    * ``"latest"``: run only the newest due fire, if within ``window``.
    * ``"none"``: run only a fire that is on time (``f >= now - 1``).

    Large gaps stay cheap: skipped fires are split from the newest end with
    arithmetic counting (``@every``) or counting per matching day (cron), so
    an every-second job down for a month costs milliseconds.  The count in
    ``skipped_range`` is exact, except that it is -1 ("unknown, very many")
    when counting would need to walk more than 200,000 matching days.
    """
    if policy not in ("all", "latest", "none"):
        raise ScheduleError(f"unknown catch-up policy '{policy}': use all, latest or none")
    cursor, now = math.floor(cursor), math.floor(now)
    last = _nth_from_end(trigger, cursor, now, 1)
    if last is None:
        return CatchupPlan((), (), None, cursor)
    too_old = None if window is None else math.ceil(now - window)  # fires < too_old are out of window
    window_reason = (
        "catch-up: missed at {iso}, older than catchup_window " + human_duration(window)
        if window is not None else ""
    )

    if policy == "all":
        boundary = cursor if too_old is None else max(cursor, too_old - 1)
        run = tuple(trigger.fires_between(boundary, now))
        reason_for = lambda f: window_reason.format(iso=iso_utc(f))  # noqa: E731
        skip_hi = boundary
        range_reason = "catch-up: missed, older than catchup_window " + (human_duration(window) if window is not None else "")
        extra: list[tuple[int, str]] = []
    elif policy == "none":
        boundary = max(cursor, now - 2)
        run = tuple(trigger.fires_between(boundary, now))
        none_reason = "catch-up: missed while cronrd was not running (catchup: none)"
        reason_for = lambda f: none_reason  # noqa: E731
        skip_hi = boundary
        range_reason = none_reason
        extra = []
    else:  # latest
        superseded = f"catch-up: superseded by the later fire at {iso_utc(last)} (catchup: latest)"
        reason_for = lambda f: superseded  # noqa: E731
        range_reason = superseded
        skip_hi = last - 1
        if too_old is None or last >= too_old:
            run, extra = (last,), []
        else:
            run, extra = (), [(last, window_reason.format(iso=iso_utc(last)))]

    # split the skipped fires in (cursor, skip_hi] into records (newest) and a range (oldest)
    room = max(0, max_records - len(extra))
    records: list[tuple[int, str]] = []
    skipped_range = None
    if skip_hi > cursor:
        oldest_of_range = _nth_from_end(trigger, cursor, skip_hi, room + 1)
        if oldest_of_range is None:
            records = [(f, reason_for(f)) for f in trigger.fires_between(cursor, skip_hi)]
        else:
            records = [(f, reason_for(f)) for f in trigger.fires_between(oldest_of_range, skip_hi)]
            first = trigger.next_after(cursor)
            count = trigger.count_between(cursor, oldest_of_range)
            if policy == "all" and window is not None:
                range_reason = (
                    f"catch-up: missed from {iso_utc(first)} to {iso_utc(oldest_of_range)}, "
                    f"older than catchup_window {human_duration(window)}"
                )
            skipped_range = (first, oldest_of_range, count, range_reason)
    skipped = tuple(records + extra)
    if len(skipped) > max_records:  # only when max_records < len(extra)
        skipped = skipped[len(skipped) - max_records:]
    return CatchupPlan(run, skipped, skipped_range, max(last, cursor))


# ---------------------------------------------------------------------------
# formatting
# ---------------------------------------------------------------------------


def iso_utc(t: int | float | None) -> str | None:
    """``"2026-03-29T01:00:00Z"``; with milliseconds (``"...:00.250Z"``) only if t has a fraction."""
    if t is None:
        return None
    ms = int(round(t * 1000))
    whole, frac = divmod(ms, 1000)
    text = (_EPOCH + _dt.timedelta(seconds=whole)).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{frac:03d}Z" if frac else f"{text}Z"


def parse_iso(text: str) -> int:
    """Epoch seconds from ISO 8601 (``Z``, ``+02:00`` or naive = UTC); fractions are dropped."""
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError(f"bad time '{text}': use ISO 8601 such as 2026-03-29T01:00:00Z")
    s = text.strip()
    if s[-1:] in ("z", "Z"):
        s = s[:-1] + "+00:00"
    try:
        value = _dt.datetime.fromisoformat(s)
    except ValueError:
        raise ScheduleError(f"bad time '{text}': use ISO 8601 such as 2026-03-29T01:00:00Z") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_UTC)
    return math.floor((value - _EPOCH).total_seconds())


def format_fire(t: int, tz: ZoneInfo | str) -> str:
    """``"2026-03-29T01:00:00Z  2026-03-29 03:00:00 CEST (Europe/Berlin)"``."""
    zone = tz if isinstance(tz, _dt.tzinfo) else resolve_timezone(tz)
    local = (_EPOCH + _dt.timedelta(seconds=t)).astimezone(zone)
    return f"{iso_utc(t)}  {local.strftime('%Y-%m-%d %H:%M:%S %Z')} ({zone})"

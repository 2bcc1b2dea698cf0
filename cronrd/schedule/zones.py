"""Time zones: IANA names, the host's zone, and a zone's UTC offset changes (pure
except :func:`host_timezone`, which reads the host's zone setting).

A zone's offset changes are found once per zone and year, by sampling the
offset and bisecting each change, then cached; :func:`_window` gives the
changes around one year, which :class:`~cronrd.schedule.triggers.Trigger`
cuts into segments of constant offset.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import difflib
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronrd.errors import ScheduleError

#: Largest change of a zone's UTC offset we plan for (seconds).  Used as a
#: search margin; real daylight-saving shifts are 30 minutes to 2 hours.
MAX_DST_SHIFT = 3 * 3600


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
    from_link = _zone_name_from_path(target) if target else None
    return from_link or "UTC"


def _offset_at(tz: _dt.tzinfo, t: int) -> int:
    offset = _dt.datetime.fromtimestamp(t, tz).utcoffset()
    assert offset is not None  # an aware datetime always has one
    return int(offset.total_seconds())


_SAMPLE_STEP = 6 * 3600  # two offset changes closer than this are not expected


def _year_start(year: int) -> int:
    return calendar.timegm((year, 1, 1, 0, 0, 0))


@lru_cache(maxsize=4096)
def _year_transitions(tz: _dt.tzinfo, year: int) -> tuple[tuple[int, int, int], ...]:
    """Offset changes ``(instant, offset_before, offset_after)`` with instant in the UTC year."""
    start, end = _year_start(year), _year_start(year + 1)
    out: list[tuple[int, int, int]] = []
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


def transitions(tz: _dt.tzinfo, start: int, end: int) -> list[tuple[int, int, int]]:
    """The offset changes ``(instant, offset_before, offset_after)`` of a
    zone with ``start <= instant < end``."""
    years = range(_dt.datetime.fromtimestamp(start, _dt.timezone.utc).year,
                  _dt.datetime.fromtimestamp(end, _dt.timezone.utc).year + 1)
    return [e for y in years for e in _year_transitions(tz, y) if start <= e[0] < end]

"""Durations and sizes as operators write them: ``1h30m``, ``500ms``, ``10MiB`` (pure)."""

from __future__ import annotations

import math
import re

from cronrd.errors import ScheduleError


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

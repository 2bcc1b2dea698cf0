"""The one place runtime code reads time. Tests inject their own."""

from __future__ import annotations

import time


class Clock:
    """Wall clock (UTC epoch seconds) for decisions, monotonic for timers."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def now() -> float:
    """The wall clock, for code handed no Clock (the offline CLI)."""
    return time.time()


def monotonic() -> float:
    """The monotonic clock, the default of what takes one as a callable."""
    return time.monotonic()

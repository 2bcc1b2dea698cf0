"""The fire time before a given instant (pure): what a run's data interval
starts at (``CRONRD_PREV_FIRE_TIME``, ``CRONRD_INTERVAL_START``).

A trigger only walks forward (``Trigger.next_after``), and that walk is the
one truth about fire times (the DST rules live there). Looking back, a
window before ``t`` is doubled until it holds a fire; when it holds many
(a every-second schedule, a dense hour), ``count_between`` halves it; the
last few are found by walking forward again, so the answer is always a
time ``next_after`` gives.
"""

from __future__ import annotations

import math

from .triggers import _MIN_T, Trigger

_WALK = 64          # at most this many fires are walked one by one
_FIRST_WINDOW = 60  # seconds looked back first


def prev_before(trigger: Trigger, t: float) -> int | None:
    """The last fire time strictly before ``t``; None if there is none
    (``@reboot``, a schedule that never matches, before 1900)."""
    t = math.floor(t)
    kind = trigger.schedule.kind
    if kind == "every":
        step = trigger.schedule.interval
        return ((t - 1) // step) * step
    if kind == "at":
        at = trigger.next_after(_MIN_T)
        return at if at is not None and at < t else None
    if kind != "cron" or t <= _MIN_T:
        return None
    window = _FIRST_WINDOW
    while True:
        after = max(t - 1 - window, _MIN_T - 1)
        first = trigger.next_after(after)
        if first is not None and first < t:
            return _last_from(trigger, first, t)
        if after <= _MIN_T - 1:
            return None
        window *= 2


def _last_from(trigger: Trigger, lo: int, hi: int) -> int:
    """The last fire before ``hi``, given ``lo``, a fire before ``hi``."""
    while True:
        n = trigger.count_between(lo, hi - 1)  # fires in (lo, hi - 1]
        if n == 0:
            return lo
        if 0 < n <= _WALK:
            return _walk(trigger, lo, hi)
        mid = (lo + hi) // 2
        if mid <= lo or trigger.count_between(mid, hi - 1) == 0:
            if mid <= lo:
                return _walk(trigger, lo, hi)
            hi = mid + 1          # none in (mid, hi): the last one is <= mid
        else:
            nxt = trigger.next_after(mid)
            if nxt is None or nxt >= hi:   # the counts disagree with the walk: walk
                return _walk(trigger, lo, hi)
            lo = nxt


def _walk(trigger: Trigger, lo: int, hi: int) -> int:
    while True:
        nxt = trigger.next_after(lo)
        if nxt is None or nxt >= hi:
            return lo
        lo = nxt

"""Catch-up after downtime: which missed fires run and which are skipped, with a reason (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, cast

from cronrd.errors import ScheduleError

from .durations import human_duration
from .timestamps import iso_utc
from .triggers import Trigger


# The reasons a missed fire is skipped, and the lateness rules: one source,
# used by plan_catchup (the scheduler, for fires never committed) and by
# stale_reason (the executor, for fires committed but never started).
ON_TIME = 1.0  # seconds: catchup: none still runs a fire this late
NONE_REASON = "catchup: missed while cronrd was not running (catchup: none)"


def window_reason(fire: float, window: float) -> str:
    return (f"catchup: missed at {iso_utc(int(fire))}, older than catchup_window "
            f"{human_duration(window)}")


def stale_reason(policy: str, window: float | None, due: float, now: float) -> str | None:
    """Why a fire due at ``due``, committed but not started by ``now`` (the
    daemon was down), is no longer wanted by the job's catch-up policy; None
    if it should start now, late."""
    late = now - due
    if policy == "none" and late > ON_TIME:
        return NONE_REASON
    if window is not None and late > window:
        return window_reason(due, window)
    return None


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

    if policy == "all":
        boundary = cursor if too_old is None else max(cursor, too_old - 1)
        run = tuple(trigger.fires_between(boundary, now))
        # only fires older than the window are skipped here, so there is a window
        reason_for: Callable[[int], str] = lambda f: window_reason(f, cast(float, window))  # noqa: E731
        skip_hi = boundary
        range_reason = ("catchup: missed, older than catchup_window "
                        + (human_duration(window) if window is not None else ""))
        extra: list[tuple[int, str]] = []
    elif policy == "none":
        boundary = max(cursor, now - 1 - math.ceil(ON_TIME))
        run = tuple(trigger.fires_between(boundary, now))
        reason_for = lambda f: NONE_REASON  # noqa: E731
        skip_hi = boundary
        range_reason = NONE_REASON
        extra = []
    else:  # latest
        superseded = f"catchup: superseded by the later fire at {iso_utc(last)} (catchup: latest)"
        reason_for = lambda f: superseded  # noqa: E731
        range_reason = superseded
        skip_hi = last - 1
        if too_old is None or last >= too_old:
            run, extra = (last,), []
        else:
            assert window is not None  # too_old is set
            run, extra = (), [(last, window_reason(last, window))]

    # split the skipped fires in (cursor, skip_hi] into records (newest) and a range (oldest)
    room = max(0, max_records - len(extra))
    records: list[tuple[int, str]] = []
    skipped_range: tuple[int, int, int, str] | None = None
    if skip_hi > cursor:
        oldest_of_range = _nth_from_end(trigger, cursor, skip_hi, room + 1)
        if oldest_of_range is None:
            records = [(f, reason_for(f)) for f in trigger.fires_between(cursor, skip_hi)]
        else:
            records = [(f, reason_for(f)) for f in trigger.fires_between(oldest_of_range, skip_hi)]
            # (None only for a cursor before the triggers' range, year 1900: kept
            # as it was, a range apply then refuses; no assert on the leader's path)
            first = cast(int, trigger.next_after(cursor))
            count = trigger.count_between(cursor, oldest_of_range)
            if policy == "all" and window is not None:
                range_reason = (
                    f"catchup: missed from {iso_utc(first)} to {iso_utc(oldest_of_range)}, "
                    f"older than catchup_window {human_duration(window)}"
                )
            skipped_range = (first, oldest_of_range, count, range_reason)
    skipped = tuple(records + extra)
    if len(skipped) > max_records:  # only when max_records < len(extra)
        skipped = skipped[len(skipped) - max_records:]
    return CatchupPlan(run, skipped, skipped_range, max(last, cursor))

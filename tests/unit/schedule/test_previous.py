"""prev_before: the fire time before an instant, checked against the
forward walk (next_after), across DST changes, and on hand-worked cases."""

from __future__ import annotations

import calendar

import pytest

from cronrd.schedule import make_trigger, parse_schedule, prev_before


def utc(*fields) -> int:
    return calendar.timegm((*fields, 0, 0, 0)[:6])


def trig(expr: str, tz: str = "UTC"):
    return make_trigger(parse_schedule(expr), tz)


def test_daily_previous_is_yesterday_or_today():
    t = trig("0 3 * * *")
    assert prev_before(t, utc(2026, 6, 10, 3, 0, 0)) == utc(2026, 6, 9, 3, 0, 0)
    assert prev_before(t, utc(2026, 6, 10, 3, 0, 1)) == utc(2026, 6, 10, 3, 0, 0)
    assert prev_before(t, utc(2026, 6, 10, 2, 59, 59)) == utc(2026, 6, 9, 3, 0, 0)


def test_every_is_the_previous_multiple():
    t = trig("@every 5m")
    assert prev_before(t, utc(2026, 6, 10, 3, 5, 0)) == utc(2026, 6, 10, 3, 0, 0)
    assert prev_before(t, utc(2026, 6, 10, 3, 7, 0)) == utc(2026, 6, 10, 3, 5, 0)


def test_reboot_and_before_1900_have_none():
    assert prev_before(trig("@reboot"), utc(2026, 6, 10, 3, 0, 0)) is None
    assert prev_before(trig("0 3 * * *"), utc(1900, 1, 1, 2, 0, 0)) is None


def test_rare_schedule_far_back():
    # Feb 29 only: from mid-2026 the last one is 2024-02-29.
    t = trig("0 0 29 2 *")
    assert prev_before(t, utc(2026, 6, 10, 0, 0, 0)) == utc(2024, 2, 29, 0, 0, 0)


def test_dense_hour_is_narrowed_not_walked_wrong():
    # Every second of 03:xx: looking back from 05:00 the last one is 03:59:59.
    t = trig("* * 3 * * *")
    assert prev_before(t, utc(2026, 6, 10, 5, 0, 0)) == utc(2026, 6, 10, 3, 59, 59)
    assert prev_before(t, utc(2026, 6, 10, 3, 30, 0)) == utc(2026, 6, 10, 3, 29, 59)


@pytest.mark.parametrize("expr,tz", [
    ("30 2 * * *", "Europe/Berlin"),        # skipped hour in spring: runs at the jump
    ("30 2 * * *", "America/New_York"),
    ("*/20 * * * *", "Europe/Berlin"),      # wildcard: follows the wall clock
    ("0 1-3 * * *", "Europe/London"),
    ("*/7 * * * * *", "UTC"),
    ("15 */5 * * 1-5", "Australia/Sydney"),
])
@pytest.mark.parametrize("start", [utc(2026, 3, 27, 0, 0, 0), utc(2026, 10, 23, 0, 0, 0),
                                   utc(2026, 4, 3, 12, 0, 0)])
def test_agrees_with_the_forward_walk(expr, tz, start):
    t = trig(expr, tz)
    fires = list(t.fires_between(start, start + 4 * 86400, limit=2000))
    assert len(fires) > 3
    for before, fire in zip(fires, fires[1:]):
        assert prev_before(t, fire) == before
        if fire - 1 > before:
            assert prev_before(t, fire - 1) == before
        assert prev_before(t, fire + 1) == fire

"""schedule/calendars.py: a job's calendar rule over its fire times, against
a brute-force reading of the rule, across daylight-saving changes and
month ends; and the skip reasons that say which calendar decided."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from cronrd.schedule import iso_utc, make_trigger, parse_iso, parse_schedule, prev_before
from cronrd.schedule.calendars import (MAX_SHIFT, Calendar, CalendarRule, CalendarTrigger)
from cronrd.schedule.triggers import local_instant

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def o(text: str) -> int:
    return dt.date.fromisoformat(text).toordinal()


WEEKDAYS = Calendar("weekdays", frozenset(range(5)))
DE = Calendar("de", days=frozenset({o("2026-12-25"), o("2026-12-26"), o("2027-01-01"),
                                    o("2027-03-26"), o("2027-03-29"), o("2027-10-31")}))
CALS = {"weekdays": WEEKDAYS, "de": DE,
        "business": Calendar("business", frozenset(range(5)), except_=("de",))}


def trigger(expr: str, tz: str, **rule) -> CalendarTrigger:
    return CalendarTrigger(make_trigger(parse_schedule(expr), tz), CalendarRule(**rule), CALS)


def walk(trig, start: int, end: int) -> list[int]:
    out, t = [], start
    while True:
        f = trig.next_after(t)
        if f is None or f > end:
            return out
        out.append(f)
        t = f


def oracle(trig: CalendarTrigger, start: int, end: int) -> list[int]:
    """The rule read literally: every fire time of the schedule, kept,
    dropped or moved one by one."""
    base = make_trigger(trig.schedule, trig.tz)
    rule = trig.rule
    got: set[int] = set()
    for f in walk(base, start - (MAX_SHIFT + 2) * 86400, end + (MAX_SHIFT + 2) * 86400):
        day = trig.day_of(f)
        allowed = trig.why_not(day) is None
        if rule.business_day is not None:
            first = day.replace(day=1)
            days = [first + dt.timedelta(days=i) for i in range(31)
                    if (first + dt.timedelta(days=i)).month == day.month]
            ok = [d for d in days if trig.why_not(d) is None]
            n = rule.business_day
            idx = n - 1 if n > 0 else n
            if -len(ok) <= idx < len(ok) and ok[idx] == day:
                got.add(f)
        elif rule.shift == "none" or allowed:
            got.add(f)
        else:
            step = 1 if rule.shift == "next" else -1
            for k in range(1, MAX_SHIFT + 1):
                d = day + dt.timedelta(days=step * k)
                if trig.why_not(d) is None:
                    wall = dt.datetime.fromtimestamp(f, trig.tz)
                    got.add(local_instant(d, wall.hour, wall.minute, wall.second, trig.tz))
                    break
    return sorted(g for g in got if start < g <= end)


@pytest.mark.parametrize("expr", ["0 18 * * *", "30 2 * * *", "0 9 25 * *", "0 0 L * *",
                                  "15 1,3 * * 1-5", "0 12 1 * *"])
@pytest.mark.parametrize("tz", [BERLIN, NEW_YORK, "UTC"])
@pytest.mark.parametrize("rule", [
    {"skip": ("de",)}, {"only": ("business",), "shift": "next"},
    {"only": ("weekdays",), "skip": ("de",), "shift": "previous"},
    {"only": ("business",), "business_day": -1}, {"only": ("business",), "business_day": 1},
    {"only": ("business",), "business_day": 3}, {"skip": ("de",), "business_day": -2}])
def test_the_fire_times_are_the_rule_read_literally(expr, tz, rule):
    trig = trigger(expr, tz, **rule)
    # a winter with holidays, both daylight-saving changes and month ends
    for start, end in (("2026-12-15", "2027-01-10"), ("2027-03-01", "2027-04-10"),
                       ("2027-10-20", "2027-11-10")):
        a, b = parse_iso(start + "T00:00:00Z"), parse_iso(end + "T00:00:00Z")
        assert walk(trig, a, b) == oracle(trig, a, b), (expr, tz, rule, start)
        assert trig.count_between(a, b) == len(oracle(trig, a, b))


def test_random_calendars_agree_with_the_literal_reading():
    rng = random.Random(35)
    for _ in range(30):
        days = frozenset(o("2027-03-01") + rng.randrange(60) for _ in range(rng.randrange(25)))
        cal = Calendar("r", frozenset(rng.sample(range(7), rng.randrange(3, 7))), days)
        rule = rng.choice([{"skip": ("r",)}, {"only": ("r",), "shift": "next"},
                           {"only": ("r",), "shift": "previous"},
                           {"only": ("r",), "business_day": rng.choice([1, 2, -1, -3])}])
        expr = rng.choice(["0 18 * * *", "30 2 * * *", "0 9 */3 * *", "0 6 * * 1"])
        tz = rng.choice([BERLIN, NEW_YORK])
        trig = CalendarTrigger(make_trigger(parse_schedule(expr), tz), CalendarRule(**rule),
                               {"r": cal})
        a, b = parse_iso("2027-03-05T00:00:00Z"), parse_iso("2027-04-25T00:00:00Z")
        assert walk(trig, a, b) == oracle(trig, a, b), (expr, tz, rule, sorted(days))


def test_the_last_business_day_across_month_ends_and_new_year():
    trig = trigger("0 18 * * *", BERLIN, only=("business",), business_day=-1)
    got = [iso_utc(f) for f in walk(trig, parse_iso("2026-11-01T00:00:00Z"),
                                    parse_iso("2027-05-01T00:00:00Z"))]
    # Dec 31 2026 is a Thursday; Apr 30 2027 a Friday; Jan 2027 ends on a Sunday
    assert got == ["2026-11-30T17:00:00Z", "2026-12-31T17:00:00Z", "2027-01-29T17:00:00Z",
                   "2027-02-26T17:00:00Z", "2027-03-31T16:00:00Z", "2027-04-30T16:00:00Z"]


def test_a_shifted_fire_keeps_its_wall_time_across_a_daylight_saving_change():
    # 25 March 2027 is a Thursday; the 26th (Good Friday in DE) is excluded: a
    # job on the 26th at 02:30 moves to Monday the 29th? -- also excluded
    # (Easter Monday): to Tuesday the 30th, 02:30 CEST (the clocks went
    # forward on the 28th)
    trig = trigger("30 2 26 * *", BERLIN, only=("business",), shift="next")
    assert iso_utc(trig.next_after(parse_iso("2027-03-20T00:00:00Z"))) == "2027-03-30T00:30:00Z"
    back = trigger("30 2 26 * *", BERLIN, only=("business",), shift="previous")
    assert iso_utc(back.next_after(parse_iso("2027-03-20T00:00:00Z"))) == "2027-03-25T01:30:00Z"
    assert "moved to the next allowed day, 2027-03-30 (tue)" in trig.judge(
        parse_iso("2027-03-26T01:30:00Z"))


def test_skip_reasons_name_the_calendar_and_a_missing_one_skips_everything():
    trig = trigger("0 18 * * *", BERLIN, skip=("de",), only=("weekdays",))
    xmas = parse_iso("2026-12-25T17:00:00Z")
    assert trig.skip_reason(xmas) == "calendar: 2026-12-25 (fri) is in calendar de"
    assert trig.skip_reason(parse_iso("2026-12-27T17:00:00Z")) == \
        "calendar: 2026-12-27 (sun) is not in calendar weekdays"
    assert trig.skip_reason(parse_iso("2026-12-28T17:00:00Z")) is None
    lost = CalendarTrigger(trig, CalendarRule(only=("gone",), shift="next"), CALS)
    f = lost.next_after(xmas)    # no silent run, no silent stop: each fire time says why
    assert f == xmas + 86400 and "calendar gone is not defined" in lost.skip_reason(f)


def test_previous_fire_time_and_the_round_trip_of_the_rule():
    trig = trigger("0 18 * * *", BERLIN, only=("business",), business_day=-1)
    assert iso_utc(prev_before(trig, parse_iso("2027-01-15T00:00:00Z"))) == \
        "2026-12-31T17:00:00Z"
    rule = CalendarRule(skip=("de",), only=("weekdays",), shift="previous")
    assert CalendarRule.from_dict(rule.to_dict()) == rule
    cal = CALS["business"]
    assert Calendar.from_dict("business", cal.to_dict()) == cal

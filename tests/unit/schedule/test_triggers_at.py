"""@at schedules and `run-now --at` times (schedule/expressions.py,
schedule/triggers.py): one fire time, read in the job's zone when it has
no offset, with cron's rules across daylight-saving changes."""

from __future__ import annotations

import pytest

from cronrd.errors import ScheduleError
from cronrd.schedule import at_time, iso_utc, make_trigger, parse_iso, parse_schedule, prev_before

BERLIN = "Europe/Berlin"


def one(expr: str, tz: str = "UTC") -> int:
    trig = make_trigger(parse_schedule(expr), tz)
    at = trig.next_after(0)
    assert at is not None
    assert trig.next_after(at) is None          # one fire time, then none
    assert trig.count_between(0, at) == 1 and trig.count_between(at, at + 10**9) == 0
    assert prev_before(trig, at + 1) == at and prev_before(trig, at) is None
    return at


def test_an_offset_says_the_instant_whatever_the_zone():
    assert iso_utc(one("@at 2026-12-24T18:00:00+01:00", BERLIN)) == "2026-12-24T17:00:00Z"
    assert iso_utc(one("@at 2026-12-24T17:00:00Z", "America/New_York")) == "2026-12-24T17:00:00Z"


def test_without_an_offset_it_is_read_in_the_jobs_zone():
    assert iso_utc(one("@at 2027-01-01 00:00", BERLIN)) == "2026-12-31T23:00:00Z"
    assert iso_utc(one("@at 2027-07-01T00:00", BERLIN)) == "2027-06-30T22:00:00Z"


def test_a_time_the_spring_forward_skips_fires_at_the_jump():
    # 2027-03-28 02:00 CET -> 03:00 CEST in Berlin: 02:30 does not exist
    assert iso_utc(one("@at 2027-03-28T02:30:00", BERLIN)) == "2027-03-28T01:00:00Z"


def test_a_repeated_time_fires_in_its_first_pass():
    # 2027-10-31 03:00 CEST -> 02:00 CET: 02:30 happens twice; the first is CEST
    assert iso_utc(one("@at 2027-10-31T02:30:00", BERLIN)) == "2027-10-31T00:30:00Z"


@pytest.mark.parametrize("expr,said", [
    ("@at", "@at needs a time"),
    ("@at tomorrow", "is not an ISO 8601 time"),
    ("@at 2026-13-01T00:00", "is not an ISO 8601 time"),
    ("@at 2026-01-01T00:00:00.5Z", "has a fraction of a second"),
    ("@at 1900-01-01T00:00Z", "the year must be 1971-8999"),
])
def test_bad_times_say_what_a_good_one_looks_like(expr, said):
    with pytest.raises(ScheduleError, match=said):
        parse_schedule(expr)


def test_run_now_at_takes_iso_times_and_durations_from_now():
    now = parse_iso("2026-12-06T10:00:00Z")
    assert at_time("+90m", "UTC", now) == now + 5400
    assert at_time("2026-12-06T12:00", BERLIN, now) == parse_iso("2026-12-06T11:00:00Z")
    assert at_time("2026-12-06T12:00:00+00:00", BERLIN, now) == parse_iso("2026-12-06T12:00:00Z")
    with pytest.raises(ScheduleError, match=r"or \+DURATION"):
        at_time("soon", "UTC", now)
    with pytest.raises(ScheduleError, match=r"e\.g\. \+90m"):
        at_time("+lots", "UTC", now)

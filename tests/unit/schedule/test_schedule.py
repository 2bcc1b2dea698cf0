"""Unit tests for cronrd.schedule (pure: no clocks, no randomness).

Expected instants are written as UTC wall times worked out by hand from the
zone rules (noted in comments) and converted with calendar.timegm, never
copied from the implementation's output.

Calendar facts used below (2026): Jan 1 is a Thursday, so Mar 1 is a Sunday,
Apr 1 a Wednesday, May 1 a Friday, Jun 1 a Monday, Oct 1 a Thursday and
Nov 1 a Sunday.
"""

from __future__ import annotations

import calendar
import os
import random
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from cronrd.errors import ScheduleError
from cronrd.schedule import (
    MAX_DST_SHIFT,
    CatchupPlan,
    Schedule,
    format_fire,
    host_timezone,
    human_duration,
    iso_utc,
    jitter_for,
    make_trigger,
    parse_duration,
    parse_iso,
    parse_schedule,
    parse_size,
    plan_catchup,
    resolve_timezone,
    retry_delay,
)


def utc(text: str) -> int:
    """'2026-03-29 01:00:00' (UTC) -> epoch seconds, independently of the module."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


def trig(expr: str, tz: str = "UTC"):
    return make_trigger(parse_schedule(expr), tz)


def fires(expr: str, tz: str, after: str, until: str, limit: int | None = None) -> list[int]:
    return list(trig(expr, tz).fires_between(utc(after), utc(until), limit))


# ---------------------------------------------------------------------------
# durations, sizes, formatting
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds",
    [
        (0, 0.0),
        (30, 30.0),
        (2.5, 2.5),
        ("90", 90.0),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),  # 2 * 86400
        ("1w", 604800.0),  # 7 * 86400
        ("1.5h", 5400.0),
        (" 10s ", 10.0),
    ],
)
def test_parse_duration_accepts(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["5x", "", "   ", "-5", "-5s", "s", "1h30", "5 m x", "1.s", True, False, -1, -0.5, None, [1], float("nan"), float("inf")])
def test_parse_duration_rejects(value):
    with pytest.raises(ScheduleError) as err:
        parse_duration(value)
    assert err.value.message.startswith(f"bad duration '{value}'")
    assert "e.g. 30s or 1h30m" in err.value.message


def test_parse_duration_message_exact():
    with pytest.raises(ScheduleError) as err:
        parse_duration("5x")
    assert str(err.value) == "bad duration '5x': use a number with units ms, s, m, h, d, w, e.g. 30s or 1h30m"


@pytest.mark.parametrize(
    "value, size",
    [
        (2048, 2048),
        ("2048", 2048),
        ("500B", 500),
        ("100KB", 100_000),
        ("1MB", 1_000_000),
        ("512KiB", 524_288),  # 512 * 1024
        ("10MiB", 10_485_760),  # 10 * 1024**2
        ("1GiB", 1_073_741_824),  # 1024**3
        ("1.5KiB", 1536),
        (" 7 kib ", 7168),
    ],
)
def test_parse_size_accepts(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["", "10XB", "MiB", "-1", "1 0MB", -1, True, 1.5, None, "10MiBs"])
def test_parse_size_rejects(value):
    with pytest.raises(ScheduleError, match="bad size"):
        parse_size(value)


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (30, "30s"), (0.5, "500ms"), (5400, "1h30m"), (86400, "1d"), (90061, "1d1h1m1s"), (1.25, "1s250ms"), (3600, "1h")],
)
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_human_duration_round_trips_through_parse_duration():
    for seconds in (1, 59, 61, 3599, 3601, 86399, 90061, 1234567, 0.5, 2.75):
        assert parse_duration(human_duration(seconds)) == pytest.approx(seconds)


def test_iso_utc_and_parse_iso():
    t = utc("2026-03-29 01:00:00")
    assert iso_utc(t) == "2026-03-29T01:00:00Z"
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(0.25) == "1970-01-01T00:00:00.250Z"
    assert iso_utc(10.0) == "1970-01-01T00:00:10Z"  # no fraction when it is zero
    assert iso_utc(None) is None
    assert parse_iso("2026-03-29T01:00:00Z") == t
    assert parse_iso("2026-03-29T03:00:00+02:00") == t  # CEST wall time of the same instant
    assert parse_iso("2026-03-28T20:00:00-05:00") == t
    assert parse_iso("2026-03-29T01:00:00") == t  # naive means UTC
    assert parse_iso("2026-03-29 01:00:00") == t
    assert parse_iso("2026-03-29T01:00:00.750Z") == t  # fractions dropped
    for s in (0, 1, t, 4102444800, -86400):
        assert parse_iso(iso_utc(s)) == s


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-03-29T25:00:00Z", None, 12])
def test_parse_iso_rejects(text):
    with pytest.raises(ScheduleError, match="bad time"):
        parse_iso(text)


def test_format_fire():
    # 2026-03-29 01:00Z is just after the spring jump: 03:00 CEST in Berlin.
    t = utc("2026-03-29 01:00:00")
    assert format_fire(t, "Europe/Berlin") == "2026-03-29T01:00:00Z  2026-03-29 03:00:00 CEST (Europe/Berlin)"
    assert format_fire(t, ZoneInfo("UTC")) == "2026-03-29T01:00:00Z  2026-03-29 01:00:00 UTC (UTC)"
    # New York is on EDT (UTC-4) since 2026-03-08.
    assert format_fire(t, "America/New_York") == "2026-03-29T01:00:00Z  2026-03-28 21:00:00 EDT (America/New_York)"


# ---------------------------------------------------------------------------
# time zones
# ---------------------------------------------------------------------------


def test_resolve_timezone_ok():
    assert resolve_timezone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    assert resolve_timezone(" UTC ") == ZoneInfo("UTC")


def test_resolve_timezone_did_you_mean():
    with pytest.raises(ScheduleError) as err:
        resolve_timezone("Europe/Berln")
    msg = err.value.message
    assert msg.startswith("unknown time zone 'Europe/Berln': use an IANA name such as Europe/Berlin or UTC")
    assert "did you mean Europe/Berlin" in msg


def test_resolve_timezone_case_suggestion():
    with pytest.raises(ScheduleError, match=r"did you mean America/New_York\?"):
        resolve_timezone("america/new_york")


@pytest.mark.parametrize("name", ["", "Mars/Olympus_Mons", "/etc/passwd", "../../etc/passwd", "Europe/"])
def test_resolve_timezone_rejects(name):
    with pytest.raises(ScheduleError, match="unknown time zone"):
        resolve_timezone(name)


def test_host_timezone_sources(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    # nothing at all -> UTC
    assert host_timezone(environ={}, root=str(tmp_path)) == "UTC"
    # /etc/localtime symlink target
    os.symlink("/usr/share/zoneinfo/America/New_York", etc / "localtime")
    assert host_timezone(environ={}, root=str(tmp_path)) == "America/New_York"
    # /etc/timezone wins over the symlink
    (etc / "timezone").write_text("Europe/Berlin\n")
    assert host_timezone(environ={}, root=str(tmp_path)) == "Europe/Berlin"
    # $TZ wins over both, with or without the leading ':'
    assert host_timezone(environ={"TZ": ":Asia/Tokyo"}, root=str(tmp_path)) == "Asia/Tokyo"
    assert host_timezone(environ={"TZ": "Asia/Tokyo"}, root=str(tmp_path)) == "Asia/Tokyo"
    # an invalid $TZ (a POSIX rule string) is ignored
    assert host_timezone(environ={"TZ": "CET-1CEST"}, root=str(tmp_path)) == "Europe/Berlin"
    # an invalid /etc/timezone falls through to the symlink
    (etc / "timezone").write_text("Not/AZone\n")
    assert host_timezone(environ={}, root=str(tmp_path)) == "America/New_York"


# ---------------------------------------------------------------------------
# parsing schedules
# ---------------------------------------------------------------------------


def test_five_fields_get_second_zero():
    s = parse_schedule("  30 2 * * 1-5 ")
    assert s == Schedule("cron", "30 2 * * 1-5", ("0", "30", "2", "*", "*", "1-5"), 0)
    assert s.fixed_time


def test_six_fields_are_seconds_first():
    s = parse_schedule("15 30 2 * * *")
    assert s.fields == ("15", "30", "2", "*", "*", "*")
    # 2026-01-01 00:00Z -> first 02:30:15
    assert trig("15 30 2 * * *").next_after(utc("2026-01-01 00:00:00")) == utc("2026-01-01 02:30:15")
    # every 20 seconds: :00, :20, :40
    t = trig("*/20 * * * * *")
    assert t.next_after(utc("2026-01-01 00:00:00")) == utc("2026-01-01 00:00:20")
    assert t.next_after(utc("2026-01-01 00:00:41")) == utc("2026-01-01 00:01:00")


@pytest.mark.parametrize(
    "word, fields",
    [
        ("@yearly", ("0", "0", "0", "1", "1", "*")),
        ("@annually", ("0", "0", "0", "1", "1", "*")),
        ("@monthly", ("0", "0", "0", "1", "*", "*")),
        ("@weekly", ("0", "0", "0", "*", "*", "0")),
        ("@daily", ("0", "0", "0", "*", "*", "*")),
        ("@midnight", ("0", "0", "0", "*", "*", "*")),
        ("@hourly", ("0", "0", "*", "*", "*", "*")),
        ("@DAILY", ("0", "0", "0", "*", "*", "*")),
    ],
)
def test_at_words(word, fields):
    s = parse_schedule(word)
    assert (s.kind, s.expr, s.fields) == ("cron", word, fields)


def test_at_words_fire_times():
    start = utc("2026-03-18 10:20:00")  # a Wednesday
    assert trig("@hourly").next_after(start) == utc("2026-03-18 11:00:00")
    assert trig("@daily").next_after(start) == utc("2026-03-19 00:00:00")
    assert trig("@weekly").next_after(start) == utc("2026-03-22 00:00:00")  # next Sunday
    assert trig("@monthly").next_after(start) == utc("2026-04-01 00:00:00")
    assert trig("@yearly").next_after(start) == utc("2027-01-01 00:00:00")


def test_every_and_reboot():
    assert parse_schedule("@every 5m") == Schedule("every", "@every 5m", (), 300)
    assert parse_schedule("@every 1h 30m").interval == 5400
    assert parse_schedule("@every 90").interval == 90
    assert parse_schedule("@reboot") == Schedule("reboot", "@reboot")
    r = trig("@reboot", "Europe/Berlin")
    assert r.next_after(0) is None
    assert list(r.fires_between(0, 10**10)) == []


def test_every_is_aligned_to_the_epoch_and_ignores_the_zone():
    for tz in ("UTC", "Europe/Berlin", "Australia/Lord_Howe"):
        t = trig("@every 5m", tz)
        assert t.next_after(1000) == 1200  # multiples of 300: 900, 1200
        assert t.next_after(1200) == 1500  # strictly after
        assert t.next_after(1199) == 1200
    t = trig("@every 7s")
    assert t.next_after(0) == 7
    assert list(t.fires_between(0, 30)) == [7, 14, 21, 28]
    # a restart or another node computes the same times from any starting point
    assert list(t.fires_between(13, 30)) == [14, 21, 28]
    # 1h schedule across the Berlin fall-back still fires every real hour
    h = trig("@every 1h", "Europe/Berlin")
    got = list(h.fires_between(utc("2026-10-24 23:30:00"), utc("2026-10-25 02:30:00")))
    assert got == [utc("2026-10-25 00:00:00"), utc("2026-10-25 01:00:00"), utc("2026-10-25 02:00:00")]


@pytest.mark.parametrize(
    "expr, column, fragment",
    [
        ("61 * * * *", 0, "minute field '61' is out of range 0-59"),
        ("0 24 * * *", 2, "hour field '24' is out of range 0-23"),
        ("0 0 0 * *", 4, "day-of-month field '0' is out of range 1-31"),
        ("0 0 32 * *", 4, "day-of-month field '32' is out of range 1-31"),
        ("0 0 * 13 *", 6, "month field '13' is out of range 1-12"),
        ("0 0 * * 8", 8, "day-of-week field '8' is out of range 0-7"),
        ("60 0 0 * * *", 0, "second field '60' is out of range 0-59"),
        ("0 60 0 * * *", 2, "minute field '60' is out of range 0-59"),
        ("0  0   1,2,99 * *", 7, "day-of-month field '99' is out of range 1-31"),
        ("*/0 * * * *", 0, "step '0'"),
        ("*/x * * * *", 0, "step 'x'"),
        ("5-1 * * * *", 0, "starts after it ends"),
        ("1,,2 * * * *", 0, "empty list item"),
        ("foo * * * *", 0, "'foo' is not a number or name"),
        ("0 0 * foo *", 6, "'foo' is not a number or name"),
        ("0 0 * * funday", 8, "'funday' is not a number or name"),
        ("H * * * *", 0, "not supported"),
        ("R * * * *", 0, "not supported"),
        ("0 ? * * *", 2, "'?' is only allowed"),
        ("0 0 * * 5#9", 8, "day-of-week field '5#9' is not valid"),
        ("0 0 32W * *", 4, "day-of-month field '32W' is not valid"),
        ("0 0 30 2 *", 4, "never fires"),
        ("0 0 31 4,6,9,11 *", 4, "never fires"),
        ("  61 * * * *", 2, "minute field '61'"),  # column counts from the text as given
    ],
)
def test_parse_schedule_field_errors(expr, column, fragment):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(expr)
    assert fragment in err.value.message
    assert err.value.column == column


@pytest.mark.parametrize("expr, found", [("* * * *", 4), ("*", 1), ("1 2 3 4 5 6 7", 7)])
def test_parse_schedule_wrong_field_count(expr, found):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(expr)
    msg = err.value.message
    assert f"has {found} fields" in msg
    assert "5 fields (minute hour day-of-month month day-of-week)" in msg
    assert "6 fields (second minute hour day-of-month month day-of-week)" in msg
    if found == 7:
        assert err.value.column == 12  # the seventh field starts at offset 12


@pytest.mark.parametrize("expr", ["", "   "])
def test_parse_schedule_empty(expr):
    with pytest.raises(ScheduleError, match="empty schedule"):
        parse_schedule(expr)


def test_parse_schedule_not_a_string():
    with pytest.raises(ScheduleError, match="must be a string"):
        parse_schedule(5)


def test_unknown_at_word_lists_valid_ones():
    with pytest.raises(ScheduleError) as err:
        parse_schedule("@dayly")
    msg = err.value.message
    assert err.value.column == 0
    for word in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@every", "@reboot"):
        assert word in msg
    assert "did you mean @daily?" in msg


@pytest.mark.parametrize(
    "expr, column, fragment",
    [
        ("@every", 6, "needs a duration"),
        ("@every 5x", 7, "bad duration '5x'"),
        ("@every -5s", 7, "bad duration"),
        ("@every 500ms", 7, "shorter than 1s"),
        ("@every 0", 7, "shorter than 1s"),
        ("@every 1.5s", 7, "whole number of seconds"),
        ("@daily now", 7, "unexpected 'now'"),
        ("@reboot 5", 8, "unexpected '5'"),
    ],
)
def test_every_and_alias_errors(expr, column, fragment):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(expr)
    assert fragment in err.value.message
    assert err.value.column == column


def test_names_specials_and_equal_ranges():
    # names
    assert trig("0 9 * * mon-fri").next_after(utc("2026-03-21 12:00:00")) == utc("2026-03-23 09:00:00")  # Sat -> Mon
    assert trig("0 0 1 jul *").next_after(utc("2026-03-01 00:00:00")) == utc("2026-07-01 00:00:00")
    # 7 is Sunday too
    assert trig("0 0 * * 7").next_after(utc("2026-03-02 00:00:00")) == utc("2026-03-08 00:00:00")
    # last day of month: Feb 2026 has 28 days
    assert trig("0 0 L * *").next_after(utc("2026-02-02 00:00:00")) == utc("2026-02-28 00:00:00")
    # second Friday of March 2026: Fridays are 6, 13 -> the 13th
    assert trig("0 0 * * 5#2").next_after(utc("2026-03-01 00:00:00")) == utc("2026-03-13 00:00:00")
    # an equal range is that one value (croniter alone would read it as the whole week)
    assert parse_schedule("0 12 * * 1-1").fields[5] == "1"
    assert trig("0 12 * * 1-1").next_after(utc("2026-03-03 00:00:00")) == utc("2026-03-09 12:00:00")  # Tue -> next Mon


# ---------------------------------------------------------------------------
# calendar rules
# ---------------------------------------------------------------------------


def test_feb_29():
    t = trig("0 0 29 2 *", "UTC")
    # After Mar 2026 the next Feb 29 is in 2028, then 2032.
    assert t.next_after(utc("2026-03-01 00:00:00")) == utc("2028-02-29 00:00:00")
    assert t.next_after(utc("2028-02-29 00:00:00")) == utc("2032-02-29 00:00:00")
    # In Berlin, midnight CET (UTC+1) is 23:00Z the day before.
    b = trig("0 0 29 2 *", "Europe/Berlin")
    assert b.next_after(utc("2026-03-01 00:00:00")) == utc("2028-02-28 23:00:00")
    # 2100 is not a leap year: after 2096 comes 2104
    assert t.next_after(utc("2096-03-01 00:00:00")) == utc("2104-02-29 00:00:00")


def test_dom_dow_or_rule():
    # Both restricted: the 10th OR any Monday. March 2026 Mondays: 2, 9, 16, 23, 30;
    # the 10th is a Tuesday.
    got = fires("0 0 10 * 1", "UTC", "2026-03-01 00:00:00", "2026-03-31 23:59:59")
    assert got == [utc(f"2026-03-{d:02d} 00:00:00") for d in (2, 9, 10, 16, 23, 30)]
    # Only one restricted: plain AND with '*' (Mondays only).
    got = fires("0 0 * * 1", "UTC", "2026-03-01 00:00:00", "2026-03-31 23:59:59")
    assert got == [utc(f"2026-03-{d:02d} 00:00:00") for d in (2, 9, 16, 23, 30)]


def test_dom_dow_vixie_star_rule():
    # Vixie cron: a field starting with '*' is not "restricted", so '*/10' with a
    # weekday is an AND: a Monday that is the 1st, 11th, 21st or 31st.
    # Mar 2026: 11 Wed, 21 Sat, 31 Tue; Apr: 1 Wed, 11 Sat, 21 Tue; May 1 Fri,
    # May 11 = Monday.
    t = trig("0 0 */10 * 1")
    assert t.next_after(utc("2026-03-01 00:00:00")) == utc("2026-05-11 00:00:00")


# ---------------------------------------------------------------------------
# daylight saving time
# ---------------------------------------------------------------------------
# Europe/Berlin 2026: CET (+1) -> CEST (+2) on Sun Mar 29 at 01:00Z (02:00 -> 03:00 local);
#                     CEST -> CET on Sun Oct 25 at 01:00Z (03:00 -> 02:00 local).
# America/New_York 2026: EST (-5) -> EDT (-4) on Sun Mar 8 at 07:00Z (02:00 -> 03:00);
#                        EDT -> EST on Sun Nov 1 at 06:00Z (02:00 -> 01:00).
# Australia/Lord_Howe 2026: +10:30 -> +11 on Sun Oct 4 at 02:00 local = Oct 3 15:30Z
#                           (02:00 -> 02:30 local).


def test_berlin_spring_forward_fixed_time_runs_once_at_the_jump():
    t = trig("30 2 * * *", "Europe/Berlin")
    # Mar 28: 02:30 CET = 01:30Z
    assert t.next_after(utc("2026-03-27 12:00:00")) == utc("2026-03-28 01:30:00")
    # Mar 29: 02:30 does not exist -> once at the jump, 01:00Z (03:00 CEST)
    assert t.next_after(utc("2026-03-28 01:30:00")) == utc("2026-03-29 01:00:00")
    # Mar 30: 02:30 CEST = 00:30Z
    assert t.next_after(utc("2026-03-29 01:00:00")) == utc("2026-03-30 00:30:00")


def test_spring_forward_fire_is_found_from_the_second_before_the_jump():
    """Asked from 00:59:59Z (a cursor or a leader's "now" that second), the
    fire a fixed-time schedule makes at the 01:00Z jump was missed: next_after
    skipped to the next day and count_between counted 0."""
    t = trig("30 2 * * *", "Europe/Berlin")
    jump = utc("2026-03-29 01:00:00")
    assert t.next_after(jump - 1) == jump
    assert t.count_between(jump - 1, jump) == 1
    assert list(t.fires_between(jump - 1, jump + 86400)) == [jump, utc("2026-03-30 00:30:00")]
    # 03:00 CEST itself matches too: still one fire at the jump, counted once
    both = trig("0 2,3 * * *", "Europe/Berlin")
    assert both.next_after(jump - 1) == jump and both.count_between(jump - 1, jump) == 1
    # a wildcard schedule has no fire at the jump for the skipped hour
    wild = trig("*/30 2 * * *", "Europe/Berlin")
    assert wild.next_after(jump - 1) == utc("2026-03-30 00:00:00")
    assert wild.count_between(jump - 1, jump) == 0


def test_berlin_spring_forward_several_times_in_the_gap_fire_once():
    got = fires("15,45 2 * * *", "Europe/Berlin", "2026-03-28 12:00:00", "2026-03-30 12:00:00")
    # Mar 29: both in the gap -> one run at 01:00Z; Mar 30: 02:15/02:45 CEST
    assert got == [utc("2026-03-29 01:00:00"), utc("2026-03-30 00:15:00"), utc("2026-03-30 00:45:00")]
    # a range of hours touching the gap: 1-3 at minute 30 -> 01:30 CET (00:30Z),
    # 02:30 (gap, 01:00Z), 03:30 CEST (01:30Z)
    got = fires("30 1-3 * * *", "Europe/Berlin", "2026-03-29 00:00:00", "2026-03-29 12:00:00")
    assert got == [utc("2026-03-29 00:30:00"), utc("2026-03-29 01:00:00"), utc("2026-03-29 01:30:00")]
    # 02:00 (in the gap, runs at the jump) and 03:00 CEST are the same instant,
    # 01:00Z: one fire, not two
    got = fires("0 1-3 * * *", "Europe/Berlin", "2026-03-28 23:30:00", "2026-03-29 12:00:00")
    assert got == [utc("2026-03-29 00:00:00"), utc("2026-03-29 01:00:00")]


def test_berlin_spring_forward_wildcard_skips_missing_times():
    got = fires("*/15 * * * *", "Europe/Berlin", "2026-03-29 00:30:00", "2026-03-29 01:30:00")
    # 01:45 CET = 00:45Z, then 03:00 CEST = 01:00Z; 02:xx never existed
    assert got == [utc("2026-03-29 00:45:00"), utc("2026-03-29 01:00:00"), utc("2026-03-29 01:15:00"), utc("2026-03-29 01:30:00")]
    # minute is a wildcard, hour fixed at 2: nothing on Mar 29; next 02:00 CEST Mar 30 = 00:00Z
    t = trig("*/30 2 * * *", "Europe/Berlin")
    assert t.next_after(utc("2026-03-28 12:00:00")) == utc("2026-03-30 00:00:00")


def test_berlin_fall_back_fixed_time_runs_once_in_the_first_pass():
    t = trig("30 2 * * *", "Europe/Berlin")
    # Oct 25: 02:30 CEST (first pass) = 00:30Z; not again at 02:30 CET = 01:30Z
    assert t.next_after(utc("2026-10-24 12:00:00")) == utc("2026-10-25 00:30:00")
    assert t.next_after(utc("2026-10-25 00:30:00")) == utc("2026-10-26 01:30:00")  # Oct 26 02:30 CET
    got = fires("0,30 2 * * *", "Europe/Berlin", "2026-10-24 12:00:00", "2026-10-25 23:59:59")
    assert got == [utc("2026-10-25 00:00:00"), utc("2026-10-25 00:30:00")]


def test_berlin_fall_back_wildcard_fires_in_both_passes():
    got = fires("*/15 * * * *", "Europe/Berlin", "2026-10-24 23:59:59", "2026-10-25 01:59:59")
    # 02:00..02:45 CEST = 00:00..00:45Z, then 02:00..02:45 CET = 01:00..01:45Z
    assert got == [utc("2026-10-25 00:00:00") + 900 * i for i in range(8)]
    hourly = fires("@hourly", "Europe/Berlin", "2026-10-24 22:30:00", "2026-10-25 02:30:00")
    # 01:00 CEST 23:00Z, 02:00 CEST 00:00Z, 02:00 CET 01:00Z, 03:00 CET 02:00Z
    assert hourly == [utc("2026-10-24 23:00:00"), utc("2026-10-25 00:00:00"), utc("2026-10-25 01:00:00"), utc("2026-10-25 02:00:00")]


def test_new_york_spring_forward():
    t = trig("30 2 * * *", "America/New_York")
    # Mar 7: 02:30 EST = 07:30Z; Mar 8: gap -> the jump at 07:00Z; Mar 9: 02:30 EDT = 06:30Z
    got = list(t.fires_between(utc("2026-03-07 00:00:00"), utc("2026-03-09 23:00:00")))
    assert got == [utc("2026-03-07 07:30:00"), utc("2026-03-08 07:00:00"), utc("2026-03-09 06:30:00")]
    # wildcard minute: 01:45 EST = 06:45Z then 03:00 EDT = 07:00Z
    got = fires("*/15 * * * *", "America/New_York", "2026-03-08 06:40:00", "2026-03-08 07:00:00")
    assert got == [utc("2026-03-08 06:45:00"), utc("2026-03-08 07:00:00")]


def test_new_york_fall_back():
    # fixed 01:30: first pass 01:30 EDT = 05:30Z; next day 01:30 EST = 06:30Z
    got = fires("30 1 * * *", "America/New_York", "2026-10-31 12:00:00", "2026-11-02 12:00:00")
    assert got == [utc("2026-11-01 05:30:00"), utc("2026-11-02 06:30:00")]
    # wildcard hour: 01:00/01:30 EDT (05:00Z, 05:30Z), 01:00/01:30 EST (06:00Z, 06:30Z), 02:00 EST 07:00Z
    got = fires("0,30 * * * *", "America/New_York", "2026-11-01 04:59:59", "2026-11-01 07:00:00")
    assert got == [utc("2026-11-01 05:00:00"), utc("2026-11-01 05:30:00"), utc("2026-11-01 06:00:00"), utc("2026-11-01 06:30:00"), utc("2026-11-01 07:00:00")]


def test_lord_howe_half_hour_shift():
    t = trig("15 2 * * *", "Australia/Lord_Howe")
    # Oct 4: 02:15 is in the 02:00-02:30 gap -> at the jump, Oct 3 15:30Z
    # Oct 5: 02:15 +11 = Oct 4 15:15Z
    assert t.next_after(utc("2026-10-03 00:00:00")) == utc("2026-10-03 15:30:00")
    assert t.next_after(utc("2026-10-03 15:30:00")) == utc("2026-10-04 15:15:00")
    # 02:45 exists on Oct 4 (+11): Oct 3 15:45Z
    assert trig("45 2 * * *", "Australia/Lord_Howe").next_after(utc("2026-10-03 00:00:00")) == utc("2026-10-03 15:45:00")


def test_fixed_offset_zone():
    # Etc/GMT-5 is UTC+5 (POSIX sign convention): 12:00 local = 07:00Z
    assert trig("0 12 * * *", "Etc/GMT-5").next_after(utc("2026-06-01 00:00:00")) == utc("2026-06-01 07:00:00")


def test_next_after_is_strict_and_fires_between_bounds():
    t = trig("*/5 * * * *", "Europe/Berlin")
    f = utc("2026-06-01 10:05:00")
    assert t.next_after(f - 1) == f
    assert t.next_after(f) == f + 300
    # after < f <= until
    assert list(t.fires_between(f, f + 600)) == [f + 300, f + 600]
    assert list(t.fires_between(f - 1, f + 600, limit=2)) == [f, f + 300]
    assert list(t.fires_between(f, f)) == []
    assert list(t.fires_between(f, f + 299)) == []


# ---------------------------------------------------------------------------
# property-style checks
# ---------------------------------------------------------------------------

_EXPRS = [
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "15,45 2 * * *",
    "0 1-3 * * *",
    "*/7 1-3 * * *",
    "0 0 29 2 *",
    "0 9 * * mon-fri",
    "10,20 * * * * *",
]


def _in(value: int, spec: str, low: int, high: int) -> bool:
    """A tiny independent cron field matcher (numbers, ranges, steps, lists)."""
    for item in spec.split(","):
        rng, _, step = item.partition("/")
        if rng == "*":
            a, b = low, high
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = b = int(rng)
        if a <= value <= b and (value - a) % int(step or 1) == 0:
            return True
    return False


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expr", ["*/15 * * * *", "0 * * * *", "*/7 1-3 * * *", "45 */2 * * *"])
def test_wildcard_jobs_follow_the_wall_clock_brute_force(tz, expr):
    """Wildcard jobs fire at exactly the instants whose local wall time matches."""
    zone = ZoneInfo(tz)
    minute, hour = expr.split()[:2]
    t = trig(expr, tz)
    for day in ("2026-03-07", "2026-03-28", "2026-10-03", "2026-10-24", "2026-10-31"):
        start = utc(f"{day} 00:00:00")
        end = start + 3 * 86400
        expected = []
        for s in range(start + 60, end + 1, 60):
            local = datetime.fromtimestamp(s, zone)
            if _in(local.minute, minute, 0, 59) and _in(local.hour, hour, 0, 23):
                expected.append(s)
        assert list(t.fires_between(start, end)) == expected


def _fixed_time_oracle(zone: ZoneInfo, minute: str, hour: str, start: int, end: int) -> list[int]:
    """Debian cron's rule, computed per local day from zoneinfo's fold semantics.

    Each matching wall time: if it exists, fire at its first occurrence (fold=0);
    if it falls in a gap, fire at the instant of the jump (found by scanning
    the minutes between its two possible readings).  Instants are a set.
    """
    out = set()
    first_day = datetime.fromtimestamp(start, zone).date()
    for d in range(-1, (end - start) // 86400 + 2):
        day = datetime.fromordinal(first_day.toordinal() + d)
        for h in range(24):
            for m in range(60):
                if not (_in(m, minute, 0, 59) and _in(h, hour, 0, 23)):
                    continue
                naive = day.replace(hour=h, minute=m)
                early = int(naive.replace(tzinfo=zone, fold=0).timestamp())
                if datetime.fromtimestamp(early, zone).replace(tzinfo=None) == naive:
                    out.add(early)
                    continue
                late = int(naive.replace(tzinfo=zone, fold=1).timestamp())  # reading with the new offset
                lo, hi = sorted((early, late))
                jump = next(s for s in range(lo, hi + 1, 60) if datetime.fromtimestamp(s, zone).utcoffset() != datetime.fromtimestamp(lo - 1, zone).utcoffset())
                out.add(jump)
    return sorted(f for f in out if start < f <= end)


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "15,45 2 * * *", "0 1-3 * * *", "30 1 * * *", "0,30 0-4 * * *", "59 1,2 * * *"])
def test_fixed_time_jobs_match_debian_rule_oracle(tz, expr):
    zone = ZoneInfo(tz)
    minute, hour = expr.split()[:2]
    t = trig(expr, tz)
    for day in ("2026-03-06", "2026-03-27", "2026-10-02", "2026-10-23", "2026-10-30"):
        start = utc(f"{day} 00:00:00")
        end = start + 4 * 86400
        expected = _fixed_time_oracle(zone, minute, hour, start, end)
        assert list(t.fires_between(start, end)) == expected
        assert t.count_between(start, end) == len(expected)


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"])
def test_random_starts_strictly_increasing_and_consistent(tz):
    rng = random.Random(20260329)
    year0, year1 = utc("2026-01-01 00:00:00"), utc("2027-01-01 00:00:00")
    for expr in _EXPRS:
        t = trig(expr, tz)
        for _ in range(12):
            start = rng.randrange(year0, year1)
            prev = start
            seq = []
            for _ in range(6):
                nxt = t.next_after(prev)
                assert nxt is not None and nxt > prev
                seq.append(nxt)
                prev = nxt
            assert list(t.fires_between(start, seq[-1])) == seq
            assert list(t.fires_between(start, seq[-1], limit=3)) == seq[:3]
            # any point between two consecutive fires leads to the later one
            for a, b in zip([start] + seq, seq):
                mid = rng.randrange(a, b)
                assert t.next_after(mid) == b
            assert t.count_between(start, seq[-1]) == len(seq)


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
def test_count_between_matches_enumeration_across_dst(tz):
    windows = [
        ("2026-03-06 00:00:00", "2026-03-10 00:00:00"),
        ("2026-03-27 00:00:00", "2026-03-31 00:00:00"),
        ("2026-10-02 00:00:00", "2026-10-06 00:00:00"),
        ("2026-10-23 00:00:00", "2026-10-27 00:00:00"),
        ("2026-10-30 00:00:00", "2026-11-03 00:00:00"),
    ]
    for expr in ["*/15 * * * *", "30 2 * * *", "15,45 2 * * *", "0 1-3 * * *", "*/7 1-3 * * *", "0 0 L * *"]:
        t = trig(expr, tz)
        for a, b in windows:
            lo, hi = utc(a) + 1234, utc(b) - 4321
            assert t.count_between(lo, hi) == len(list(t.fires_between(lo, hi))), (expr, a)


def test_berlin_day_counts_across_dst():
    # every minute: 23h of wall clock on Mar 29, 25h on Oct 25 -> 1380 and 1500 real minutes
    t = trig("* * * * *", "Europe/Berlin")
    # local midnight Mar 29 = Mar 28 23:00Z; Mar 30 local midnight = Mar 29 22:00Z
    assert t.count_between(utc("2026-03-28 23:00:00") - 1, utc("2026-03-29 22:00:00") - 1) == 1380
    # Oct 25 local midnight = Oct 24 22:00Z; Oct 26 local midnight = Oct 25 23:00Z
    assert t.count_between(utc("2026-10-24 22:00:00") - 1, utc("2026-10-25 23:00:00") - 1) == 1500
    # an ordinary June day (CEST): local midnight Jun 10 = Jun 9 22:00Z
    assert t.count_between(utc("2026-06-09 22:00:00") - 1, utc("2026-06-10 22:00:00") - 1) == 1440


def test_max_dst_shift_constant():
    assert MAX_DST_SHIFT == 3 * 3600


# ---------------------------------------------------------------------------
# catch-up
# ---------------------------------------------------------------------------

T0 = utc("2026-01-01 00:00:00")  # a multiple of 600


def test_catchup_all_with_window():
    t = trig("@every 10m")
    # fires T0+600 .. T0+3600 (6); window 1200: run those with now - f <= 1200
    plan = plan_catchup(t, T0, T0 + 3600, "all", 1200)
    assert plan.run == (T0 + 2400, T0 + 3000, T0 + 3600)
    assert [f for f, _ in plan.skipped] == [T0 + 600, T0 + 1200, T0 + 1800]
    assert plan.skipped[0][1] == "catchup: missed at 2026-01-01T00:10:00Z, older than catchup_window 20m"
    assert plan.skipped_range is None
    assert plan.cursor == T0 + 3600


def test_catchup_all_unlimited_and_max_records():
    t = trig("@every 10m")
    plan = plan_catchup(t, T0, T0 + 3600, "all", None)
    assert plan.run == tuple(T0 + 600 * i for i in range(1, 7))
    assert plan.skipped == () and plan.skipped_range is None
    # window 0 runs only a fire exactly at now; two records, the oldest three summarised
    plan = plan_catchup(t, T0, T0 + 3600, "all", 0, max_records=2)
    assert plan.run == (T0 + 3600,)
    assert [f for f, _ in plan.skipped] == [T0 + 2400, T0 + 3000]
    first, last, count, reason = plan.skipped_range
    assert (first, last, count) == (T0 + 600, T0 + 1800, 3)
    assert "older than catchup_window 0s" in reason


def test_catchup_latest():
    t = trig("@every 10m")
    plan = plan_catchup(t, T0, T0 + 3650, "latest", None)
    assert plan.run == (T0 + 3600,)
    assert [f for f, _ in plan.skipped] == [T0 + 600 * i for i in range(1, 6)]
    assert {r for _, r in plan.skipped} == {
        "catchup: superseded by the later fire at 2026-01-01T01:00:00Z (catchup: latest)"
    }
    assert plan.cursor == T0 + 3600
    # the latest fire is 50s old; a 30s window skips it too, with the window reason
    plan = plan_catchup(t, T0, T0 + 3650, "latest", 30)
    assert plan.run == ()
    assert [f for f, _ in plan.skipped] == [T0 + 600 * i for i in range(1, 7)]
    assert plan.skipped[-1] == (T0 + 3600, "catchup: missed at 2026-01-01T01:00:00Z, older than catchup_window 30s")
    assert plan.cursor == T0 + 3600


def test_catchup_none():
    t = trig("@every 10m")
    none_reason = "catchup: missed while cronrd was not running (catchup: none)"
    # the fire at T0+3600 is 1s late: on time
    plan = plan_catchup(t, T0, T0 + 3601, "none", None)
    assert plan.run == (T0 + 3600,)
    assert plan.skipped == tuple((T0 + 600 * i, none_reason) for i in range(1, 6))
    # 2s late: missed
    plan = plan_catchup(t, T0, T0 + 3602, "none", None)
    assert plan.run == ()
    assert len(plan.skipped) == 6 and plan.cursor == T0 + 3600


def test_catchup_nothing_due():
    t = trig("@every 10m")
    plan = plan_catchup(t, T0, T0 + 599, "all", None)
    assert plan == CatchupPlan((), (), None, T0)
    plan = plan_catchup(t, T0 + 100, T0 + 50, "latest", None)  # clock behind cursor
    assert plan == CatchupPlan((), (), None, T0 + 100)
    assert plan_catchup(trig("@reboot"), T0, T0 + 10**6, "all", None) == CatchupPlan((), (), None, T0)


def test_catchup_bad_policy():
    with pytest.raises(ScheduleError, match="unknown catch-up policy 'some'"):
        plan_catchup(trig("@every 10m"), T0, T0 + 3600, "some", None)


@pytest.mark.parametrize("expr, tz", [("@every 1s", "UTC"), ("* * * * * *", "UTC"), ("* * * * * *", "Europe/Berlin")])
@pytest.mark.parametrize("policy", ["all", "latest", "none"])
def test_catchup_huge_gap_is_fast_and_accounts_for_every_fire(expr, tz, policy):
    t = trig(expr, tz)
    cursor = utc("2026-03-10 00:00:00")
    now = cursor + 30 * 86400  # an every-second job down for 30 days, over Berlin's spring change
    total = 30 * 86400  # one fire per real second
    started = time.perf_counter()
    plan = plan_catchup(t, cursor, now, policy, 3600)
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0
    assert len(plan.skipped) == 1000
    first, last, count, _ = plan.skipped_range
    assert first == cursor + 1
    assert len(plan.run) + len(plan.skipped) + count == total
    # nothing overlaps and everything is in order: range < records < run
    assert last < plan.skipped[0][0]
    assert [f for f, _ in plan.skipped] == sorted(f for f, _ in plan.skipped)
    assert not plan.run or plan.skipped[-1][0] < plan.run[0]
    assert plan.skipped[-1][0] - plan.skipped[0][0] == 999
    assert plan.cursor == now
    expected_run = {"all": 3601, "latest": 1, "none": 2}[policy]  # all: now-3600..now
    assert len(plan.run) == expected_run


# ---------------------------------------------------------------------------
# jitter and retries
# ---------------------------------------------------------------------------


def test_jitter_is_deterministic_and_bounded():
    a = jitter_for("backup", 1_774_746_000, 60)
    assert a == jitter_for("backup", 1_774_746_000, 60)
    assert 0 <= a < 60
    assert jitter_for("backup", 1_774_746_000.0, 60) == a  # same fire, same delay
    assert jitter_for("backup", 1_774_746_000, 0) == 0
    assert jitter_for("backup", 1_774_746_000, -5) == 0
    values = [jitter_for("job", T0 + i, 10) for i in range(2000)]
    assert all(0 <= v < 10 for v in values)
    assert len(set(values)) > 1990  # it really varies per fire
    assert 4.5 < sum(values) / len(values) < 5.5  # roughly uniform
    assert jitter_for("a", T0, 10) != jitter_for("b", T0, 10)


def test_retry_delay():
    # attempt 2 is the first retry: delay * backoff**0
    assert retry_delay(2, 10, 2, 300, 0, "k") == 10
    assert retry_delay(3, 10, 2, 300, 0, "k") == 20
    assert retry_delay(4, 10, 2, 300, 0, "k") == 40
    assert retry_delay(7, 10, 2, 300, 0, "k") == 300  # 320 capped
    assert retry_delay(5000, 10, 2, 300, 0, "k") == 300  # no overflow
    assert retry_delay(3, 10, 1, 300, 0, "k") == 10  # constant
    d = retry_delay(3, 10, 2, 300, 5, "job\0fire\0attempt3")
    assert 20 <= d < 25
    assert d == retry_delay(3, 10, 2, 300, 5, "job\0fire\0attempt3")
    capped = retry_delay(9, 10, 2, 300, 5, "x")
    assert 300 <= capped < 305  # jitter is added after the cap

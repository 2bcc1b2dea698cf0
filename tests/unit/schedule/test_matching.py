"""Fire times of cron expressions read as cron reads them (a table).

Every expected time below was worked out by hand from a printed calendar
and the rules in cron(5) / Vixie cron, never from cronrd's output:

* a step larger than its range leaves the range's start (``*/100`` in
  day-of-month is the 1st, ``10-20/50`` is 10);
* if the day-of-month or the day-of-week field begins with ``*``, a day must
  match both (Vixie's DOM_STAR / DOW_STAR); otherwise either;
* ``L`` / ``LW`` / ``15W`` in day-of-month, ``5L`` / ``5#2`` in day-of-week.

Calendar facts used (Sunday-first weeks):
  2020 Jan 1 Wed, Feb 1 Sat, Mar 1 Sun, Apr 1 Wed.
  2026 Jan 1 Thu (31 = Sat), Feb 1 Sun (28 = Sat), Mar 1 Sun (31 = Tue),
  Apr 1 Wed (30 = Thu), May 1 Fri (31 = Sun; Fridays 1 8 15 22 29),
  Jun 1 Mon (30 = Tue), Jul 1 Wed (Fridays 3 10 17 24 31), Aug 1 Sat
  (31 = Mon), Nov 1 Sun.  2027 Jan 1 Fri, so Feb 1 and Mar 1 2027 are Mondays.
  2028 is a leap year.
"""

from __future__ import annotations

import calendar
import time

import pytest

from cronrd.schedule import make_trigger, parse_schedule


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


def _days(*dates: str, at: str = "00:00:00") -> list[str]:
    return [f"{d} {at}" for d in dates]


CASES = [
    # -- a step larger than its range is the range's start, in every field ------------
    ("*/100 * * * * *", "2026-03-01 00:00:00",  # seconds (6 fields, seconds first)
     ["2026-03-01 00:01:00", "2026-03-01 00:02:00", "2026-03-01 00:03:00"]),
    ("*/90 * * * *", "2026-03-01 00:00:00",
     ["2026-03-01 01:00:00", "2026-03-01 02:00:00", "2026-03-01 03:00:00"]),
    ("*/100 * * * *", "2026-03-01 00:30:00",
     ["2026-03-01 01:00:00", "2026-03-01 02:00:00", "2026-03-01 03:00:00"]),
    ("0 */100 * * *", "2026-03-01 00:00:00", _days("2026-03-02", "2026-03-03", "2026-03-04")),
    ("0 0 */100 * *", "2026-03-01 00:00:00", _days("2026-04-01", "2026-05-01", "2026-06-01")),
    ("0 0 */32 * *", "2026-03-01 00:00:00", _days("2026-04-01", "2026-05-01", "2026-06-01")),
    ("0 0 1 */100 *", "2026-03-01 00:00:00", _days("2027-01-01", "2028-01-01", "2029-01-01")),
    ("0 0 * * */100", "2026-03-01 00:00:00", _days("2026-03-08", "2026-03-15", "2026-03-22")),  # Sundays
    ("10-20/50 * * * *", "2026-03-01 00:00:00",
     ["2026-03-01 00:10:00", "2026-03-01 01:10:00", "2026-03-01 02:10:00"]),
    ("0 0 10-20/50 * *", "2026-03-01 00:00:00", _days("2026-03-10", "2026-04-10", "2026-05-10")),
    ("0 0 * 3-5/7 *", "2026-03-01 00:00:00", _days("2026-03-02", "2026-03-03", "2026-03-04")),
    ("0 0 * * 1-5/9", "2026-03-01 00:00:00", _days("2026-03-02", "2026-03-09", "2026-03-16")),  # Mondays
    ("*/59 * * * *", "2026-03-01 00:00:00",  # 0 and 59
     ["2026-03-01 00:59:00", "2026-03-01 01:00:00", "2026-03-01 01:59:00"]),
    # -- a day field beginning with '*' makes the day fields an AND -------------------
    ("1 1 */100,1-7 * MON", "2020-01-01 00:00:00",  # the first Monday of the month
     _days("2020-01-06", "2020-02-03", "2020-03-02", "2020-04-06", at="01:01:00")),
    ("1 1 */100,1-7 * MON", "2026-01-01 00:00:00",
     _days("2026-01-05", "2026-02-02", "2026-03-02", "2026-04-06", "2026-05-04", "2026-06-01",
           at="01:01:00")),
    ("1 1 1-7 * */7", "2020-01-01 00:00:00",  # the first Sunday of the month
     _days("2020-01-05", "2020-02-02", "2020-03-01", "2020-04-05", at="01:01:00")),
    ("0 0 */100 * 1", "2026-01-01 00:00:00",  # a 1st that is a Monday
     _days("2026-06-01", "2027-02-01", "2027-03-01")),
    # ... and neither beginning with '*' makes them an OR: every 13th and every Friday
    ("0 0 13 * 5", "2026-03-01 00:00:00",
     _days("2026-03-06", "2026-03-13", "2026-03-20", "2026-03-27", "2026-04-03", "2026-04-10",
           "2026-04-13", "2026-04-17")),
    ("0 0 L * 5", "2026-02-20 00:00:00",  # the last day or a Friday
     _days("2026-02-27", "2026-02-28", "2026-03-06")),
    # -- 5L: the last Friday (May and July 2026 have five Fridays) --------------------
    ("0 0 * * 5L", "2026-01-01 00:00:00",
     _days("2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29", "2026-06-26",
           "2026-07-31")),
    ("0 0 * * 0L", "2026-01-01 00:00:00", _days("2026-01-25", "2026-02-22", "2026-03-29")),
    ("0 0 * * 7L", "2026-01-01 00:00:00", _days("2026-01-25", "2026-02-22", "2026-03-29")),
    ("0 0 * * 1,5L", "2026-05-20 00:00:00",  # Mondays and the last Friday
     _days("2026-05-25", "2026-05-29", "2026-06-01")),
    # -- LW: the last weekday (Jan and Feb 2026 end on a Saturday, May on a Sunday) ---
    ("0 0 LW * *", "2026-01-01 00:00:00",
     _days("2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29", "2026-06-30")),
    ("0 0 lw * *", "2026-07-31 00:00:00", _days("2026-08-31")),  # Aug 31 2026 is a Monday
    # -- L, W and # as before ------------------------------------------------------
    ("0 0 L * *", "2028-02-01 00:00:00", _days("2028-02-29", "2028-03-31", "2028-04-30")),
    ("0 0 L,15 * *", "2026-02-01 00:00:00", _days("2026-02-15", "2026-02-28", "2026-03-15")),
    ("0 0 * * 5#2", "2026-01-01 00:00:00", _days("2026-01-09", "2026-02-13", "2026-03-13")),
    ("0 0 * * fri#2", "2026-01-01 00:00:00", _days("2026-01-09", "2026-02-13", "2026-03-13")),
    ("0 0 * * 1#5", "2026-01-01 00:00:00", _days("2026-03-30", "2026-06-29", "2026-08-31")),
    ("0 0 * * 1,3#1", "2026-03-01 00:00:00",  # Mondays and the first Wednesday
     _days("2026-03-02", "2026-03-04", "2026-03-09")),
    ("0 0 15W * *", "2026-02-01 00:00:00",  # Feb 15 and Mar 15 2026 are Sundays
     _days("2026-02-16", "2026-03-16", "2026-04-15")),
    ("0 0 1W * *", "2026-07-15 00:00:00", _days("2026-08-03")),  # Aug 1 is a Saturday: Monday the 3rd
    ("0 0 L * *", "2026-02-02 00:00:00", _days("2026-02-28")),
]


@pytest.mark.parametrize("expr, after, expected", CASES)
def test_fire_times(expr, after, expected):
    trigger = make_trigger(parse_schedule(expr), "UTC")
    want = [utc(t) for t in expected]
    assert list(trigger.fires_between(utc(after), want[-1], limit=len(want))) == want
    assert trigger.count_between(utc(after), want[-1]) == len(want)


def test_the_day_rules_hold_in_a_zone_with_daylight_saving():
    # Berlin: CET (+1) until Mar 29 2026, CEST (+2) after; 01:01 local is 00:01Z / 23:01Z the day before.
    trigger = make_trigger(parse_schedule("1 1 */100,1-7 * MON"), "Europe/Berlin")
    got = list(trigger.fires_between(utc("2026-01-01 00:00:00"), utc("2026-05-31 00:00:00")))
    assert got == [utc(t) for t in ("2026-01-05 00:01:00", "2026-02-02 00:01:00", "2026-03-02 00:01:00",
                                    "2026-04-05 23:01:00", "2026-05-03 23:01:00")]

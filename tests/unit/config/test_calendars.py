"""The daemon config's ``calendars:`` (cronrd/config/calendars.py): parsing,
the ICS reader, public holidays, ``except`` and what resolve() makes."""

from __future__ import annotations

import datetime as dt

import pytest

from cronrd.config import load_config, parse_config
from cronrd.config.calendars import parse_ics, resolve
from cronrd.errors import ConfigError


def day(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


def cals(raw: dict, year: int = 2026):
    cfg = parse_config({"node_id": "n1", "calendars": raw}, "/etc/cronrd/cronrd.yaml")
    return resolve(cfg.calendars, year)


def test_sources_union_and_except_subtracts():
    got = cals({"closures": {"dates": ["2026-12-24", "2026-08-03..2026-08-05"]},
                "de": {"holidays": {"country": "DE", "subdivision": "BY"}},
                "business-days": {"weekdays": ["mon", "tue", "wed", "thu", "fri"],
                                  "except": ["de", "closures"]}})
    assert sorted(got) == ["business-days", "closures", "de", "weekdays", "weekends"]
    biz = got["business-days"]
    assert biz.contains(day("2026-12-23"), got)
    for off in ("2026-12-24", "2026-12-25", "2026-08-04", "2026-12-26", "2027-01-06"):
        assert not biz.contains(day(off), got), off   # closures, Christmas, BY's Epiphany
    assert got["de"].years == (2025, 2031) and "holidays DE-BY" in got["de"].source
    assert got["weekends"].contains(day("2026-12-26"), got)


def test_the_built_in_weekdays_may_be_redefined():
    got = cals({"weekdays": {"weekdays": ["mon", "tue", "wed", "thu"]}})
    assert not got["weekdays"].contains(day("2026-12-11"), got)   # a Friday


@pytest.mark.parametrize("raw, message", [
    ([1], "calendars must be a mapping of names to calendars"),
    ({"x": {}}, "calendars.x must be a mapping with one or more of"),
    ({"x": {"weekday": ["mon"]}}, "unknown key calendars.x.weekday (did you mean 'weekdays'?)"),
    ({"x": {"weekdays": ["monday", "funday"]}}, "lists 'funday', which is not a day"),
    ({"x": {"dates": ["2026-13-01"]}}, "write a date as 2026-12-24 and a span as"),
    ({"x": {"dates": ["2026-12-05..2026-12-01"]}}, "(first <= last)"),
    ({"x": {"holidays": "XX"}}, "'XX' is not a country the holidays package knows"),
    ({"x": {"holidays": {"country": "DE", "subdivision": "ZZ"}}},
     "'ZZ' is not a subdivision of DE"),
    ({"x": {"except": ["nope"]}}, "calendars.x.except names 'nope', which is not a calendar"),
    ({"a": {"weekdays": ["mon"], "except": ["b"]}, "b": {"weekdays": ["tue"], "except": ["a"]}},
     "goes round in a circle: a -> b -> a"),
    ({"x": {"ics": "/nonexistent/x.ics"}}, "cannot read /nonexistent/x.ics"),
])
def test_bad_calendars_are_refused_with_what_to_do(raw, message):
    with pytest.raises(ConfigError) as exc:
        parse_config({"node_id": "n1", "calendars": raw}, "/etc/cronrd/cronrd.yaml")
    assert message in str(exc.value)


def test_a_bad_calendar_is_reported_at_its_line(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\ncalendars:\n  x:\n    dates: [2026-02-30]\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert str(exc.value).startswith(f"{path}:4:")


ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20261224\r
DTEND;VALUE=DATE:20261227\r
SUMMARY:Closed over\r
  Christmas\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART:20260501T090000Z\r
DTEND:20260501T170000Z\r
RRULE:FREQ=YEARLY\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20270301\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_ics_all_day_spans_timed_events_and_yearly_rules():
    got = {dt.date.fromordinal(n).isoformat() for n in parse_ics(ICS, "x.ics", range(2025, 2028))}
    assert got == {"2026-12-24", "2026-12-25", "2026-12-26", "2026-05-01",  # (not before DTSTART)
                   "2027-05-01", "2027-03-01"}


def test_ics_problems_name_the_line():
    with pytest.raises(ConfigError, match="x.ics:1: not an iCalendar file"):
        parse_ics("hello\n", "x.ics", range(2026, 2027))
    with pytest.raises(ConfigError, match=r"x.ics:4: RRULE 'FREQ=WEEKLY' is not supported"):
        parse_ics("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20260101\nRRULE:FREQ=WEEKLY\n"
                  "END:VEVENT\nEND:VCALENDAR\n", "x.ics", range(2026, 2027))
    with pytest.raises(ConfigError, match=r"x.ics:3: cannot read the date '2026-01-01'"):
        parse_ics("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:2026-01-01\nEND:VEVENT\n"
                  "END:VCALENDAR\n", "x.ics", range(2026, 2027))


def test_an_ics_file_is_read_relative_to_the_config(tmp_path):
    (tmp_path / "closed.ics").write_text(ICS)
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\ncalendars:\n  closed: {ics: closed.ics}\n")
    cfg = load_config(str(path))
    got = resolve(cfg.calendars, 2026)["closed"]
    assert got.contains(day("2026-12-25"), {}) and not got.contains(day("2026-12-27"), {})


def test_an_ics_rrule_that_would_never_end_or_cannot_be_read_is_refused():
    """Review of issue 35: INTERVAL=0 looped for ever in the leader's
    thread (no job fired anywhere), INTERVAL=x raised a ValueError."""
    for rule, said in (("FREQ=YEARLY;INTERVAL=0", "INTERVAL is 1 or more"),
                       ("FREQ=YEARLY;INTERVAL=-2", "INTERVAL is 1 or more"),
                       ("FREQ=YEARLY;INTERVAL=x", "INTERVAL and COUNT are whole numbers"),
                       ("FREQ=YEARLY;COUNT=2x", "INTERVAL and COUNT are whole numbers")):
        text = ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20260101\n"
                f"RRULE:{rule}\nEND:VEVENT\nEND:VCALENDAR\n")
        with pytest.raises(ConfigError, match=said):
            parse_ics(text, "x.ics", range(2025, 2032))

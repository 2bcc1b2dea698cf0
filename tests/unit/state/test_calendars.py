"""state/calendars.py and SetCalendars: the calendars in force, replicated
(the same days on every node), refused before cluster version 2."""

from __future__ import annotations

import pytest

from cronrd.errors import Refused
from cronrd.schedule.calendars import Calendar
from cronrd.state import calendars as CAL
from cronrd.state import commands as C
from cronrd.state.effects import CalendarsChanged
from tests.unit.state.test_state import T0, Log

DE = Calendar("de", days=frozenset({739610}), years=(2025, 2031), source="holidays DE")


def test_set_calendars_replaces_them_and_says_when_they_changed():
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    before = log.sm.full_digest()
    res = log.apply(C.SetCalendars(calendars={"de": DE.to_dict()}, at=T0))
    assert res == {"changed": True} and isinstance(log.effects[-1], CalendarsChanged)
    assert CAL.in_force(log.sm.conn) == {"de": DE}
    assert log.sm.full_digest() != before        # replicated state: in the digest
    n = len(log.effects)
    assert log.apply(C.SetCalendars(calendars={"de": DE.to_dict()}, at=T0 + 1)) == \
        {"changed": False}
    assert len(log.effects) == n
    log.apply(C.SetCalendars(calendars={}, at=T0 + 2))
    assert CAL.in_force(log.sm.conn) == {}


def test_malformed_calendars_are_refused():
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    for bad in ([], {"x": {"days": ["2026-02-30"]}}, {"x": "days"}):
        with pytest.raises(Refused, match="set_calendars"):
            log.apply(C.SetCalendars(calendars=bad, at=T0))


def test_before_version_2_calendars_are_refused():
    with pytest.raises(Refused, match="needs cluster version 2"):
        Log().apply(C.SetCalendars(calendars={"de": DE.to_dict()}, at=T0))

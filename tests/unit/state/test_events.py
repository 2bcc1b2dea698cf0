"""The outbox of events: ids the same on every node, undelivered first-in
first-out, pruned only once delivered."""

from __future__ import annotations

import pytest

from cronrd.state import events as EV
from tests.unit.state.test_state import T0, Log


def test_events_are_numbered_in_apply_order_and_listed_until_delivered():
    a, b = Log(), Log()
    for log in (a, b):
        e1 = EV.emit(log.sm.conn, "failed", job="j", at=T0, fire_time=T0, run_id=3,
                     data={"exit_code": 2})
        e2 = EV.emit(log.sm.conn, "sla_finish_by", job="j", at=T0 + 1)
        assert (e1, e2) == (1, 2)
    assert a.sm.full_digest() == b.sm.full_digest()
    assert [e["event_id"] for e in EV.undelivered(a.sm.conn)] == [1, 2]
    assert EV.get(a.sm.conn, 1)["data"] == {"exit_code": 2}
    a.sm.conn.execute("UPDATE events SET delivered=1 WHERE event_id=1")
    assert [e["event_id"] for e in EV.undelivered(a.sm.conn)] == [2]
    EV.prune(a.sm.conn, T0 + 100)      # the undelivered one stays, whatever its age
    assert EV.get(a.sm.conn, 1) is None and EV.get(a.sm.conn, 2) is not None


def test_an_unknown_kind_is_a_bug_not_an_event():
    with pytest.raises(ValueError, match="unknown event kind"):
        EV.emit(Log().sm.conn, "exploded", job="j", at=T0)


def test_an_event_id_is_never_given_again_after_its_event_was_pruned():
    """Receivers drop an id they have seen: an id given again (SQLite reuses
    the largest rowid once its row is deleted) would be a lost event."""
    log = Log()
    conn = log.sm.conn
    first = EV.emit(conn, "failed", job="j", at=T0)
    conn.execute("UPDATE events SET delivered=1")
    EV.prune(conn, T0 + 100)           # delivered and old: gone
    assert EV.get(conn, first) is None
    again = EV.emit(conn, "failed", job="j", at=T0 + 200)
    assert again > first

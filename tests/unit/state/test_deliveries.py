"""Delivery attempts recorded through the log: the same on every node, a
repeated proposal changes nothing, delivered marks the event, prune takes
the attempts with their events."""

from __future__ import annotations

from cronrd.state import commands as C
from cronrd.state import deliveries as DL
from cronrd.state import events as EV
from tests.unit.state.test_state import T0, Log


def test_attempts_are_recorded_once_and_done_marks_delivered():
    a, b = Log(), Log()
    for log in (a, b):
        eid = EV.emit(log.sm.conn, "failed", job="j", at=T0, run_id=1)
        cmd = C.DeliveryResult(at=T0 + 1, leader="n1",
                               attempts=[[eid, "chat", 1, False, False, "HTTP 500"]])
        assert log.apply(cmd) == {"attempts": 1, "delivered": 0}
        assert log.apply(cmd) == {"attempts": 0, "delivered": 0}   # proposed again
        assert log.apply(C.DeliveryResult(
            at=T0 + 12, leader="n2", attempts=[[eid, "chat", 2, True, False, ""]],
            done=[eid])) == {"attempts": 1, "delivered": 1}
    assert a.sm.full_digest() == b.sm.full_digest()
    [row] = DL.listing(a.sm.conn)
    assert row["delivered"] and [(x["attempt"], x["ok"], x["final"], x["leader"], x["error"])
                                 for x in row["attempts"]] == [
        (1, False, False, "n1", "HTTP 500"), (2, True, True, "n2", "")]
    assert EV.undelivered(a.sm.conn) == []
    assert [(x.attempt, x.ok) for x in DL.attempts_of(a.sm.conn, [1])[1]] == [(1, False),
                                                                           (2, True)]


def test_prune_takes_the_attempts_of_pruned_events():
    log = Log()
    eid = EV.emit(log.sm.conn, "failed", job="j", at=T0)
    log.apply(C.DeliveryResult(at=T0, leader="n1", attempts=[[eid, "c", 1, True, True, ""]],
                               done=[eid]))
    log.apply(C.Prune(before=T0 + 10, keep=10, at=T0 + 10))
    assert DL.listing(log.sm.conn) == [] and DL.attempts_of(log.sm.conn, [eid]) == {}


def test_a_malformed_result_is_refused():
    import pytest
    from cronrd.errors import Refused
    for attempts, done in (([[1, "c"]], []), ([["x", "c", 1, True, True, ""]], []),
                           ([[1, "c", 1, 1, True, ""]], []), ([], ["1"]), ([], [True])):
        with pytest.raises(Refused, match="attempts must be"):
            Log().apply(C.DeliveryResult(at=T0, leader="n1", attempts=attempts, done=done))


def test_a_pruned_runs_delivered_events_go_with_it_undelivered_ones_stay():
    log = Log()
    log.put()
    for t in (1, 2, 3):
        log.finish(log.fire(T0 + t)["run_id"], "failed", exit_code=1)
    events = EV.undelivered(log.sm.conn, 100)
    assert [e["run_id"] for e in events] == [1, 2, 3]
    log.apply(C.DeliveryResult(at=T0 + 5, leader="n1", done=[events[0]["event_id"]]))
    log.apply(C.Prune(before=T0 - 100, keep=1, at=T0 + 10))   # keeps run 3 only
    left = [(e["run_id"], e["delivered"]) for e in DL.listing(log.sm.conn)]
    assert left == [(3, False), (2, False)]   # run 1's delivered event went with it

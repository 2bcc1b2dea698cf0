"""The pause history (cronrd/state/pause_log.py): every pause and resume is
kept, replicated, so who paused a job and why can be told for a past T."""

from __future__ import annotations

from cronrd.state import commands as C
from cronrd.state import pause_log
from cronrd.state.schema import SCHEMA
from tests.unit.state.test_state import T0, Log


def test_a_pause_and_its_resume_are_kept_after_the_resume():
    log = Log()
    log.put("j")
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 10, note="disk full", by="alice"))
    log.apply(C.SetPaused(name="j", paused=False, at=T0 + 20, by="bob"))
    conn = log.sm.conn
    assert pause_log.in_force_at(conn, "j", T0 + 5) is None
    assert pause_log.in_force_at(conn, "j", T0 + 15) == {
        "note": "disk full", "by": "alice", "at": "2027-01-15T08:00:10Z",
        "until": "2027-01-15T08:00:20Z"}
    assert pause_log.in_force_at(conn, "j", T0 + 25) is None
    assert [e["paused"] for e in pause_log.history(conn, "j")] == [False, True]


def test_the_maintenance_pause_is_logged_under_the_empty_name():
    log = Log()
    log.put("j")
    log.apply(C.SetPaused(name="", paused=True, at=T0 + 10, note="kernel update", by="root"))
    got = pause_log.in_force_at(log.sm.conn, "", T0 + 11)
    assert got["note"] == "kernel update" and got["until"] is None
    assert pause_log.in_force_at(log.sm.conn, "j", T0 + 11) is None


def test_prune_keeps_the_newest_event_of_each_name():
    log = Log()
    log.put("j")
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 1, note="old"))
    log.apply(C.SetPaused(name="j", paused=False, at=T0 + 2))
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 3, note="still"))
    log.apply(C.Prune(before=T0 + 100, at=T0 + 100))
    assert [e["note"] for e in pause_log.history(log.sm.conn, "j")] == ["still"]
    # a job paused long ago and still paused: who did it is still known
    assert pause_log.in_force_at(log.sm.conn, "j", T0 + 1000)["note"] == "still"


def test_the_log_is_part_of_the_replicated_digest():
    a, b = Log(), Log()
    for log in (a, b):
        log.put("j")
    a.apply(C.SetPaused(name="j", paused=True, at=T0 + 1, note="x"))
    b.apply(C.SetPaused(name="j", paused=True, at=T0 + 1, note="x"))
    assert a.sm.full_digest() == b.sm.full_digest()
    a.sm.conn.execute("UPDATE pause_log SET note='y'")
    assert a.sm.full_digest() != b.sm.full_digest()
    assert "pause_log" in SCHEMA

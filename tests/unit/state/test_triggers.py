"""Which jobs a webhook starts (cronrd/state/triggers.py)."""

from __future__ import annotations

from cronrd.state import commands as C
from cronrd.state.triggers import jobs_triggered_by
from tests.unit.state.test_state import T0, Log


def test_the_jobs_listing_a_hook_with_whether_they_are_paused():
    log = Log()
    log.put("build", triggers=["deploy", "nightly"])
    log.put("notify", triggers=["deploy"])
    log.put("plain")
    log.put("other", triggers=["deployment"])  # a longer name is another hook
    log.apply(C.SetPaused(name="notify", paused=True, at=T0 + 1))
    conn = log.sm.conn
    assert jobs_triggered_by(conn, "deploy") == [("build", False), ("notify", True)]
    assert jobs_triggered_by(conn, "nightly") == [("build", False)]
    assert jobs_triggered_by(conn, "nosuch") == []
    log.put("build")  # the definition in force no longer lists it
    assert jobs_triggered_by(conn, "deploy") == [("notify", True)]

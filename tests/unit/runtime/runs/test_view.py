"""The executor's seam to the state (runs/view.py): on a member, the
replicated state's answers, unchanged."""

from __future__ import annotations

from cronrd.runtime.runs.view import ReplicatedView
from cronrd.state import queries as Q
from tests.unit.state.test_state import T0, Log


def test_a_members_view_is_the_replicated_state():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    run = log.run(rid)
    view = ReplicatedView(log.sm.conn)
    assert view.job_spec("j") == Q.job_spec(log.sm.conn, "j")
    assert view.runs_for_node("n1", ("assigned",)) == [run]
    assert view.run_assignments([rid]) == {rid: ("assigned", "n1", run.token)}
    assert view.refused_source("n1", None, "j") is None
    assert view.inputs(run) == ({}, None, None)
    env, secret = view.attempt_env(run, "/s")
    assert env["CRONRD_SOCKET"] == "/s" and len(secret) == 64
    assert view.running_elsewhere(run, "n1") == []

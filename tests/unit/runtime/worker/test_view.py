"""A worker's view of the state (worker/view.py): what the leader sent, and
nothing else; a run it does not hold is not the worker's."""

from __future__ import annotations

import pytest

from cronrd.errors import CronrdError
from cronrd.runtime.cluster.worker_hub import WorkerHub
from cronrd.runtime.worker.view import WorkerView
from cronrd.state import checkpoints as CK
from tests.unit.runtime.cluster.test_worker_hub import _hub, _state


def _sent(log, rid):
    hub: WorkerHub = _hub(log)
    return hub.assignment(log.run(rid))


def test_the_view_answers_from_the_assignments_the_leader_sent():
    log, mine, theirs = _state()
    view = WorkerView("wk1")
    run, changed = view.assigned(_sent(log, mine))
    assert run == log.run(mine) and changed is False
    assert view.job_spec("j").command == log.sm.conn.execute(
        "SELECT json_extract(spec, '$.command') FROM specs").fetchone()[0]
    assert view.runs_for_node("wk1", ("assigned",)) == [run]
    assert view.run_assignments([mine, theirs]) == {mine: ("assigned", "wk1", run.token)}
    assert view.refused_source("wk1", ("a",), "j") is None   # the leader decided
    assert view.inputs(run) == ({}, None, None)
    env, secret = view.attempt_env(run, "/run/cronrd.sock")
    assert "CRONRD_SOCKET" not in env and CK.token_hash(env["CRONRD_RUN_TOKEN"]) == secret
    assert view.running_elsewhere(run, "wk1") == []


def test_a_new_definition_is_noticed_and_an_end_drops_the_run():
    log, mine, _ = _state()
    view = WorkerView("wk1")
    msg = _sent(log, mine)
    view.assigned(msg)
    changed = dict(msg, spec=msg["spec"].replace('"command":"', '"command":"true; '))
    assert view.assigned(changed)[1] is True
    assert view.job_spec("j").command.startswith("true; ")
    view.changed(msg["run"], "run_done")
    assert view.run_assignments([mine]) == {} and view.runs_for_node("wk1", ("assigned",)) == []
    view.replace_all([msg])
    assert list(view.runs) == [mine]
    view.replace_all([])
    assert view.runs == {}


def test_the_view_refuses_what_is_not_this_workers_run():
    log, _, theirs = _state()
    view = WorkerView("wk1")
    with pytest.raises(CronrdError, match="of node wk2 to worker wk1"):
        view.assigned(_sent(log, theirs))
    with pytest.raises(CronrdError, match="cannot read"):
        view.assigned({"run": [1, 2]})

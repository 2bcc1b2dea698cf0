"""A run record as one frozen value (cronrd/model/run.py): decoded once from
a row, changed only into new values, serialised for the wire by one function."""

from __future__ import annotations

import dataclasses
import json

import apsw
import pytest

from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state.machine import StateMachine
from cronrd.model.run import COLUMNS, SELECT, Run
from cronrd.model.run_states import RunState

T0 = 1_800_000_000


def machine_with_a_run() -> StateMachine:
    sm = StateMachine(apsw.Connection(":memory:"))
    spec = {"name": "j", "schedule": "* * * * *", "command": "true"}
    with sm.conn:
        sm.apply(1, C.PutJob(name="j", spec=spec, digest="d", source="/etc/cronrd.d/j.yaml",
                             at=T0 - 60))
        sm.apply(2, C.Fire(job="j", fire_time=T0, kind="scheduled", node="n1", due_at=T0,
                           at=T0 - 0.5))
        sm.apply(3, C.RunStarted(run_id=1, token=2, node="n1", pid=4242, started_at=T0 + 0.25,
                                 log_path="/var/log/cronrd/j/x.log"))
    return sm


def test_the_columns_are_the_runs_table_in_order():
    sm = StateMachine(apsw.Connection(":memory:"))
    table = [name for _, name, *_ in sm.conn.execute("PRAGMA table_info(runs)")]
    assert list(COLUMNS) == table
    assert SELECT == f"SELECT {','.join(table)} FROM runs"


def test_a_row_decodes_into_typed_fields():
    sm = machine_with_a_run()
    (row,) = list(sm.conn.execute(f"{SELECT} WHERE run_id=1"))
    run = Run.from_row(row)
    assert run == Q.get_run(sm.conn, 1)
    assert (run.run_id, run.job, run.origin, run.kind, run.fire_time, run.attempt,
            run.target) == (1, "j", "schedule", "scheduled", T0, 1, "")
    assert run.state is RunState.RUNNING and run.state == "running"
    assert (run.node, run.token, run.due_at, run.created_at) == ("n1", 2, T0, T0 - 0.5)
    assert (run.pid, run.started_at, run.log_path) == (4242, T0 + 0.25,
                                                       "/var/log/cronrd/j/x.log")
    assert (run.finished_at, run.exit_code, run.signal, run.reason) == (None,) * 4
    assert run.cancel_requested is False
    with sm.conn:
        sm.conn.execute("UPDATE runs SET cancel_requested=1 WHERE run_id=1")
    assert Q.get_run(sm.conn, 1).cancel_requested is True


def test_a_row_with_a_state_nobody_knows_is_refused():
    row = list(machine_with_a_run().conn.execute(f"{SELECT} WHERE run_id=1"))[0]
    with pytest.raises(ValueError):
        Run.from_row(row[:7] + ("halfway",) + row[8:])
    with pytest.raises(ValueError):
        Run.from_row(row[:-1])  # a column short


def test_the_row_round_trips():
    sm = machine_with_a_run()
    (row,) = list(sm.conn.execute(f"{SELECT} WHERE run_id=1"))
    run = Run.from_row(row)
    assert run.row() == tuple(row)
    assert Run.from_row(run.row()) == run
    assert type(run.row()[COLUMNS.index("state")]) is str


def test_a_run_is_immutable_and_changes_are_new_values():
    run = Q.get_run(machine_with_a_run().conn, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.state = RunState.SUCCEEDED
    with pytest.raises((AttributeError, TypeError)):
        run.extra = 1  # slots: no room for fields it does not have
    done = dataclasses.replace(run, state=RunState.SUCCEEDED, exit_code=0)
    assert run.state is RunState.RUNNING and run.exit_code is None
    assert (done.state, done.exit_code, done.run_id) == (RunState.SUCCEEDED, 0, 1)
    assert hash(done) != hash(run) and done != run


def test_the_wire_form_is_the_clis_json():
    run = Q.get_run(machine_with_a_run().conn, 1)
    assert run.view() == {
        "run_id": 1, "job": "j", "kind": "scheduled", "fire_time": "2027-01-15T08:00:00Z",
        "attempt": 1, "state": "running", "node": "n1", "pid": 4242, "exit_code": None,
        "signal": None, "started_at": "2027-01-15T08:00:00.250Z", "finished_at": None,
        "log_path": "/var/log/cronrd/j/x.log", "reason": None,
        "due_at": "2027-01-15T08:00:00Z", "run_key": "j/2027-01-15T08:00:00Z/1",
        # Started: claimed then at the latest (a node claims before it starts).
        "claimed_at": "2027-01-15T08:00:00.250Z", "moved_from": []}
    assert type(run.view()["state"]) is str
    assert json.loads(json.dumps(run.view())) == run.view()
    assert run.key == "j/2027-01-15T08:00:00Z/1"


def test_the_wire_form_follows_a_changed_value():
    run = Q.get_run(machine_with_a_run().conn, 1)
    done = dataclasses.replace(run, state=RunState.FAILED, exit_code=None, signal=9,
                               finished_at=T0 + 3, reason="killed by signal SIGKILL",
                               attempt=2)
    view = done.view()
    assert (view["state"], view["signal"], view["finished_at"], view["reason"]) == (
        "failed", 9, "2027-01-15T08:00:03Z", "killed by signal SIGKILL")
    assert view["run_key"] == "j/2027-01-15T08:00:00Z/2"

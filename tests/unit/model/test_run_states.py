"""Run states (cronrd.model.run_states): one enum, everything derived."""

from __future__ import annotations

import apsw
import pytest

from cronrd.model import run_states as rs
from cronrd.state.machine import StateMachine


def test_active_final_and_not_started_derive_from_the_transitions():
    assert rs.ACTIVE == ("pending", "assigned", "running", "waiting")
    assert rs.NOT_STARTED == ("pending", "assigned", "waiting")
    assert set(rs.FINAL) == {"succeeded", "failed", "timed_out", "lost", "cancelled", "skipped"}
    assert set(rs.ACTIVE) | set(rs.FINAL) == set(rs.ALL) and not set(rs.ACTIVE) & set(rs.FINAL)
    for src, dests in rs.TRANSITIONS.items():
        assert src in rs.ACTIVE and dests <= set(rs.ALL) and src not in dests


def test_sql_in_takes_only_our_states():
    assert rs.sql_in(rs.NOT_STARTED) == "('pending','assigned','waiting')"
    with pytest.raises(ValueError):
        rs.sql_in(["x'); DROP TABLE runs; --"])


def test_queries_on_active_runs_still_use_the_partial_index():
    conn = StateMachine(apsw.Connection(":memory:")).conn
    plan = " ".join(str(r) for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE state IN {rs.sql_in(rs.ACTIVE)}"))
    assert "runs_active" in plan


def test_a_waiting_run_is_released_to_pending_or_never_starts():
    # pending: released (its queue moved on, or its parents' gate opened);
    # failed: its upstream failed or its wait ran out (on_upstream_failure: fail);
    # a watch's run: running (a start ping), succeeded or failed (its end ping,
    # or missed)
    assert rs.TRANSITIONS["waiting"] == {"pending", "cancelled", "skipped", "failed",
                                         "running", "succeeded"}


def test_an_active_runs_index_made_before_the_waiting_state_is_remade(tmp_path):
    path = str(tmp_path / "state.db")
    StateMachine(apsw.Connection(path)).conn.execute(
        "DROP INDEX runs_active; CREATE INDEX runs_active ON runs(state) "
        "WHERE state IN ('pending', 'assigned', 'running')")
    conn = StateMachine(apsw.Connection(path)).conn
    plan = " ".join(str(r) for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE state IN {rs.sql_in(rs.ACTIVE)}"))
    assert "runs_active" in plan

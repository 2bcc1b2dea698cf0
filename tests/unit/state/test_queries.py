"""Queries over the replicated state (cronrd/state/queries.py); most are
exercised through the state machine's tests. Here: the one decoder of a
stored job definition."""

from __future__ import annotations

import json

from cronrd.jobspec import JobSpec
from cronrd.state import queries as Q


def test_a_stored_definition_decodes_to_the_spec_that_was_stored():
    spec = JobSpec(name="backup", schedule="0 3 * * *", command="run-backup",
                   concurrency="replace", on_node_loss="skip")
    decoded = Q.decode_spec(json.dumps(spec.to_dict()), "/etc/cronrd.d/b.yaml")
    assert decoded == JobSpec(**{**spec.__dict__, "source": "/etc/cronrd.d/b.yaml"})


def test_keys_an_older_version_did_not_write_take_the_specs_defaults():
    """The machine used to restate these defaults as .get() fallbacks."""
    old = {"name": "j", "schedule": "* * * * *", "command": "true"}
    spec = Q.decode_spec(json.dumps(old))
    defaults = JobSpec(name="j", schedule="* * * * *", command="true")
    assert (spec.concurrency, spec.enabled, spec.on_node_loss, spec.retries) == (
        defaults.concurrency, defaults.enabled, defaults.on_node_loss, defaults.retries)
    assert spec.retries.delay == 10.0 and spec.retries.max == 0


def test_a_definition_is_decoded_once_and_shared():
    text = json.dumps({"name": "k", "schedule": "@hourly", "command": "true"})
    assert Q.decode_spec(text, "f") is Q.decode_spec(text, "f")


def test_a_page_of_the_streamed_listing_seeks_to_its_first_name():
    """`jobs --json` reads 1,000 jobs a page. With "no after" spelled as an
    OR in SQL, every page scanned the names from the first one (100 pages of
    100,000 jobs: 5 million index entries read)."""
    import apsw
    from cronrd.state.machine import StateMachine
    conn = StateMachine(apsw.Connection(":memory:")).conn
    plan = " ".join(str(row) for row in conn.execute(
        "EXPLAIN QUERY PLAN " + Q._VIEW_JSON,
        {"tz": "UTC", "after": "x", "glob": None, "limit": 1000}))
    assert "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (name>?)" in plan, plan


def test_status_counts_paused_jobs_and_finds_conflicts_without_reading_every_job():
    """`status` (polled by operators and scripts) read all 100,000 rows of
    jobs twice: 30-50 ms of the loop per call while a fleet loads."""
    import apsw
    from cronrd.state.machine import StateMachine
    conn = StateMachine(apsw.Connection(":memory:")).conn
    with conn:
        conn.executemany(
            "INSERT INTO jobs(name, digest, source, paused, cursor, created_at, updated_at, "
            "conflict) VALUES(?, 'd', 's', ?, 0, 0, 0, ?)",
            [(f"j{i:03d}", int(i % 10 == 0), "differs" if i % 50 == 0 else None)
             for i in range(200)])
    assert Q.count_jobs(conn) == (200, 20)
    assert Q.conflicts(conn, limit=3) == ["differs"] * 3
    plans = " ".join(str(r) for sql in (
        "SELECT COUNT(*) FROM jobs WHERE paused != 0",
        "SELECT conflict FROM jobs WHERE conflict IS NOT NULL ORDER BY name LIMIT 100")
        for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
    assert "USING INDEX jobs_paused" in plans and "USING INDEX jobs_conflict" in plans


def test_next_attempt_follows_a_runs_own_retry_when_two_manual_runs_share_a_fire_time():
    # Before: `run-now --wait` twice within one second followed the other
    # run's retry (the same job, origin and fire time) and exited with its code.
    from cronrd.state import commands as C
    from tests.unit.state.test_backfill import finish
    from tests.unit.state.test_state import T0, Log
    log = Log()
    log.put(concurrency="allow", retries={"max": 1, "delay": 0})
    one = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.2))["run_id"]
    two = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.7))["run_id"]
    assert log.run(one).fire_time == log.run(two).fire_time
    finish(log, one, state="failed")             # one is retried
    finish(log, two, state="succeeded")
    retry = Q.next_attempt(log.sm.conn, log.run(one))
    assert retry is not None and log.run(retry).kind == "retry"
    assert Q.next_attempt(log.sm.conn, log.run(two)) is None
    # pruning the runs forgets their links
    finish(log, retry, state="succeeded")
    log.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000))
    assert list(log.sm.conn.execute("SELECT * FROM run_retries")) == []


def test_listing_active_states_uses_the_index_of_active_runs():
    # Before: `runs --state running` (and the web UI's overview) scanned
    # every record newest first: 65 ms at a million records, for none found.
    from tests.unit.state.test_state import Log
    log = Log()
    traced = []
    log.sm.conn.set_exec_trace(lambda cur, sql, bindings: traced.append(sql) or True)
    Q.list_runs(log.sm.conn, state="running", limit=50)
    Q.list_runs(log.sm.conn, state=["pending", "waiting"], limit=50)
    log.sm.conn.set_exec_trace(None)
    for sql, args in ((traced[0], ("running", 50)), (traced[1], ("pending", "waiting", 50))):
        plan = " ".join(r[3] for r in log.sm.conn.execute("EXPLAIN QUERY PLAN " + sql, args))
        assert "runs_active" in plan, plan


def _not_started(log, rid, at):
    from cronrd.state import commands as C
    run = log.run(rid)
    return log.apply(C.RunFinished(run_id=rid, token=run.token, node="n1", state="lost",
                                   exit_code=None, signal=None, started_at=None,
                                   finished_at=at, log_path=None, not_started=True))


def test_a_run_lost_then_reported_never_started_is_linked_to_its_retry():
    # Found in review: that retry path made no link, so `run-now --wait`
    # could not follow it.
    from cronrd.state import commands as C
    from tests.unit.state.test_state import T0, Log
    log = Log()
    log.put(concurrency="allow", on_node_loss="fail")
    rid = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.2))["run_id"]
    log.apply(C.ClaimRuns(node="n1", claims=[[rid, log.run(rid).token]], at=T0 + 0.3))
    log.apply(C.NodeLost(node="n1", at=T0 + 5, reason="down"))
    retry = _not_started(log, rid, T0 + 6)["retry_run_id"]
    assert retry is not None and Q.next_attempt(log.sm.conn, log.run(rid)) == retry


def test_a_manual_run_that_never_started_is_run_again_beside_a_retried_sibling():
    # Found in review: "is there an attempt 2 of (job, fire time)?" found the
    # other manual run's retry, and this one, which never ran, was not run.
    from cronrd.state import commands as C
    from tests.unit.state.test_state import T0, Log
    log = Log()
    log.put(concurrency="allow", on_node_loss="fail", retries={"max": 1, "delay": 0})
    a = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.2))["run_id"]
    b = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.7))["run_id"]
    log.finish(a, state="failed", exit_code=1)
    log.finish(Q.next_attempt(log.sm.conn, log.run(a)), state="succeeded")
    log.apply(C.ClaimRuns(node="n1", claims=[[b, log.run(b).token]], at=T0 + 0.8))
    log.apply(C.NodeLost(node="n1", at=T0 + 5, reason="down"))
    assert _not_started(log, b, T0 + 6).get("retry_run_id") is not None

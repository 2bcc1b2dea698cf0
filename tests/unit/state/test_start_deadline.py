"""start_deadline in the state machine (cronrd.state.start_deadline): a run
that could not start within it of its due time is recorded skipped, with
reason start_deadline; the leader proposes, apply decides."""

from __future__ import annotations

import pytest

from cronrd.state import commands as C
from cronrd.state import start_deadline as SD
from cronrd.errors import Refused

from .test_pools import place, pool_log, start, state
from .test_state import T0, Log


def test_a_run_held_by_its_pool_past_the_deadline_is_skipped_with_the_reason():
    log = pool_log(slots=1, b={"start_deadline": 300.0})
    log.fire(T0 + 1, "a")
    b = log.fire(T0 + 2, "b")["run_id"]
    assert SD.overdue(log.sm.conn, T0 + 301) == []
    with pytest.raises(Refused, match="not past its start_deadline"):
        log.apply(C.StartDeadline(run_id=b, at=T0 + 301))
    assert SD.overdue(log.sm.conn, T0 + 302) == [b]
    log.effects.clear()
    assert log.apply(C.StartDeadline(run_id=b, at=T0 + 302)) == {"run_id": b,
                                                                 "state": "skipped"}
    run = log.run(b)
    assert run.state == "skipped" and run.reason == (
        "start_deadline: not started within 5m of its due time 2027-01-15T08:00:02Z; "
        "it waited: pool db: 1/1 slots in use")
    assert [e.kind for e in log.effects] == ["run_done"]
    assert SD.overdue(log.sm.conn, T0 + 400) == []


def test_a_started_or_claimed_run_is_not_skipped():
    log = pool_log(slots=1, a={"start_deadline": 10.0})
    a = log.fire(T0 + 1, "a")["run_id"]
    run = log.run(a)
    log.apply(C.ClaimRuns(node="n1", claims=[[a, run.token]], at=T0 + 1))
    assert SD.overdue(log.sm.conn, T0 + 100) == []
    with pytest.raises(Refused, match=r"assigned \(claimed\): started or ended already"):
        log.apply(C.StartDeadline(run_id=a, at=T0 + 100))
    start(log, a)
    with pytest.raises(Refused, match="running .claimed.: started or ended already"):
        log.apply(C.StartDeadline(run_id=a, at=T0 + 100))


def test_a_fire_committed_past_its_deadline_is_skipped_at_once():
    log = Log()
    log.put("j", start_deadline=30.0)
    res = log.fire(T0 + 1, "j", kind="catchup", at=T0 + 40)
    assert res["state"] == "skipped" and res["reason"] == (
        "start_deadline: not started within 30s of its due time 2027-01-15T08:00:01Z")
    assert log.fire(T0 + 2, "j", at=T0 + 3)["state"] == "assigned"


def test_a_manual_run_counts_from_when_it_was_asked_and_a_queue_moves_on():
    log = Log()
    log.put("q", concurrency="queue", start_deadline=60.0)
    first = log.apply(C.ManualRun(job="q", node="", at=T0))["run_id"]
    place(log, first, at=T0)
    second = log.apply(C.ManualRun(job="q", node="", at=T0 + 30))["run_id"]
    third = log.apply(C.ManualRun(job="q", node="", at=T0 + 70))["run_id"]
    assert state(log, second) == "waiting"
    start(log, first, at=T0 + 1)
    assert SD.overdue(log.sm.conn, T0 + 91) == [second]
    log.apply(C.StartDeadline(run_id=second, at=T0 + 91))
    assert state(log, second) == "skipped"
    log.finish(first, at=T0 + 95)
    assert state(log, third) == "pending"  # the queue went on past the skipped one


def _vm_steps(conn, fn) -> int:
    """SQLite virtual machine steps ``fn`` takes (in hundreds)."""
    steps = [0]

    def tick():
        steps[0] += 1
        return 0
    conn.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        conn.set_progress_handler(None)
    return steps[0]


def test_the_duty_reads_the_runs_not_started_not_every_jobs_definition():
    """The leader looks every second: with 100,000 jobs, reading each
    definition held its loop for a fifth of a second each time. Its cost
    follows the runs not started, not the jobs."""
    log = pool_log(slots=1, b={"start_deadline": 300.0})
    log.fire(T0 + 1, "a")
    b = log.fire(T0 + 2, "b")["run_id"]
    conn = log.sm.conn

    def more_jobs(n, start):
        with conn:
            for i in range(start, start + n):
                text = '{"command":"true","name":"x%d","schedule":"* * * * *",' \
                       '"start_deadline":60.0}' % i
                conn.execute("INSERT INTO specs(name, digest, spec) VALUES(?,?,?)",
                             (f"x{i}", f"d{i}", text))
                conn.execute("INSERT INTO jobs(name, digest, source, paused, cursor, "
                             "created_at, updated_at) VALUES(?,?,'/x',0,0,0,0)",
                             (f"x{i}", f"d{i}"))
    more_jobs(100, 0)
    few = _vm_steps(conn, lambda: SD.overdue(conn, T0 + 302))
    more_jobs(5000, 100)
    many = _vm_steps(conn, lambda: SD.overdue(conn, T0 + 302))
    assert SD.overdue(conn, T0 + 302) == [b]
    assert many <= few + 5

"""Dependencies in the state machine: generations, exactly one child run per
generation, skip propagation, a scheduled child's wait, determinism."""

from __future__ import annotations

import itertools

import apsw
import pytest

from cronrd.state import commands as C
from cronrd.state import dependencies as deps
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from cronrd.state.effects import RunPending
from replay import Replay
from tests.unit.state.test_state import T0, Log


def put_all(log, **jobs):
    for name, over in jobs.items():
        log.put(name=name, **over)


def after(*parents, **over):
    return dict(schedule="@after", depends_on=[{"job": p} for p in parents], **over)


def child_runs(log, job):
    return list(reversed(Q.list_runs(log.sm.conn, job, limit=1000)))


def ok(log, job, t, state="succeeded"):
    """Fire ``job`` at ``t`` and finish it with ``state``; its run id."""
    rid = log.fire(t, name=job)["run_id"]
    log.finish(rid, state=state, exit_code=0 if state == "succeeded" else 1)
    return rid


def test_after_child_runs_once_per_parent_outcome_with_its_lineage():
    log = Log()
    put_all(log, a={}, b=after("a"))
    rid = log.fire(T0 + 1, name="a")["run_id"]
    assert child_runs(log, "b") == []
    log.effects.clear()
    log.finish(rid)
    (run,) = child_runs(log, "b")
    assert (run.state, run.kind, run.fire_time, run.origin) == ("pending", "upstream", T0 + 1,
                                                                "schedule")
    assert any(isinstance(e, RunPending) and e.run.run_id == run.run_id for e in log.effects)
    assert deps.lineage(log.sm.conn, run.run_id) == [
        {"job": "a", "run_id": rid, "fire_time": "2027-01-15T08:00:01Z", "state": "succeeded"}]
    # the same report again (a retried proposal) starts nothing more
    log.finish(rid)
    assert len(child_runs(log, "b")) == 1


def test_fan_in_at_different_rates_runs_once_per_generation():
    log = Log()
    put_all(log, a={}, b={}, c=after("a", "b"))
    for t in range(1, 6):               # a runs five times, b not yet
        ok(log, "a", T0 + t)
    assert child_runs(log, "c") == []
    b1 = ok(log, "b", T0 + 10)
    (c1,) = child_runs(log, "c")
    assert c1.fire_time == T0 + 10      # the newest of the parents' fire times
    assert {x["job"]: x["run_id"] for x in deps.lineage(log.sm.conn, c1.run_id)}["b"] == b1
    b2 = ok(log, "b", T0 + 20)          # b again: a has nothing new, no generation
    assert len(child_runs(log, "c")) == 1
    a6 = ok(log, "a", T0 + 21)          # a's new run completes the next generation
    c = child_runs(log, "c")
    assert len(c) == 2 and c[1].fire_time == T0 + 21
    assert {x["job"]: x["run_id"] for x in deps.lineage(log.sm.conn, c[1].run_id)} == {
        "a": a6, "b": b2}


def test_a_retried_parent_counts_once_when_its_last_attempt_ends():
    log = Log()
    put_all(log, a={"retries": {"max": 1, "delay": 1.0, "backoff": 2.0, "max_delay": 10.0,
                                "jitter": 0.0}}, b=after("a"))
    first = log.fire(T0 + 1, name="a")["run_id"]
    retry = log.finish(first, state="failed", exit_code=1)["retry_run_id"]
    assert retry and child_runs(log, "b") == []   # a retry follows: not final yet
    log.finish(retry)
    (run,) = child_runs(log, "b")
    assert run.state == "pending" and run.fire_time == T0 + 1


@pytest.mark.parametrize("policy, state", [("skip", "skipped"), ("fail", "failed")])
def test_failed_parent_records_the_child_and_skips_propagate(policy, state):
    log = Log()
    put_all(log, a={}, b={}, c=after("a", "b", on_upstream_failure=policy), d=after("c"),
            e=after("c", trigger_rule="all_finished"))
    ok(log, "a", T0 + 1)
    ok(log, "b", T0 + 2, state="failed")
    (c,) = child_runs(log, "c")
    assert (c.state, c.reason) == (state, "upstream_failed:b@2027-01-15T08:00:02Z")
    (d,) = child_runs(log, "d")
    (e,) = child_runs(log, "e")
    if policy == "skip":   # all_succeeded: a skipped parent skips the child
        assert (d.state, d.reason) == ("skipped", "upstream_skipped:c@2027-01-15T08:00:02Z")
    else:
        assert (d.state, d.reason) == ("skipped", "upstream_failed:c@2027-01-15T08:00:02Z")
    assert e.state == "pending"          # all_finished runs whatever happened


def test_none_failed_runs_after_a_skipped_parent():
    log = Log()
    put_all(log, a={}, b=after("a", trigger_rule="none_failed"))
    log.apply(C.Fire(job="a", fire_time=T0 + 1, kind="catchup", node="n1", due_at=T0,
                     at=T0, skip_reason="catchup: missed"))
    (b,) = child_runs(log, "b")
    assert b.state == "pending"


def test_reordered_parent_reports_make_the_same_single_child_run():
    results = set()
    for order in itertools.permutations(["a", "b", "x"]):
        log = Log()
        put_all(log, a={}, b={}, x={}, c=after("a", "b", "x"))
        ids = {j: log.fire(T0 + i + 1, name=j)["run_id"] for i, j in enumerate("abx")}
        for j in order:
            log.finish(ids[j])
            log.finish(ids[j])   # duplicated
        (c,) = child_runs(log, "c")
        results.add((c.fire_time, c.state, tuple(
            x["run_id"] for x in deps.lineage(log.sm.conn, c.run_id))))
    assert len(results) == 1


def test_a_new_dependency_is_not_fired_by_history():
    log = Log()
    log.put(name="a")
    ok(log, "a", T0 + 1)
    log.put(name="b", **after("a"))
    assert child_runs(log, "b") == []
    ok(log, "a", T0 + 2)
    assert len(child_runs(log, "b")) == 1


def test_paused_after_child_records_a_skip_and_consumes():
    log = Log()
    put_all(log, a={}, b=after("a"))
    log.apply(C.SetPaused(name="b", paused=True, at=T0))
    ok(log, "a", T0 + 1)
    (b,) = child_runs(log, "b")
    assert b.state == "skipped" and b.reason.startswith("paused")


def test_within_parent_satisfies_without_a_new_run():
    log = Log()
    put_all(log, fx={}, extract={}, load=dict(schedule="@after", depends_on=[
        {"job": "extract"}, {"job": "fx", "within": 3600.0}]))
    ok(log, "fx", T0 + 1)                 # finished at T0 + 2
    assert child_runs(log, "load") == []  # extract has nothing new yet
    ok(log, "extract", T0 + 100)
    assert len(child_runs(log, "load")) == 1
    ok(log, "extract", T0 + 200)          # fx's success is still fresh: runs again
    assert len(child_runs(log, "load")) == 2
    ok(log, "extract", T0 + 5000)         # too old now: waits for fx
    assert len(child_runs(log, "load")) == 2
    ok(log, "fx", T0 + 5001)
    assert len(child_runs(log, "load")) == 3


def test_within_finds_a_success_behind_many_newer_failures():
    """``within`` is exact: a parent's fresh success counts however many
    records it has after it (it was looked for in the newest 1,000 only)."""
    log = Log()
    put_all(log, fx={"concurrency": "allow"}, extract={}, load=dict(
        schedule="@after", depends_on=[{"job": "extract"}, {"job": "fx", "within": 3600.0}]))
    good = ok(log, "fx", T0 + 1)         # finished at T0 + 2
    ok(log, "extract", T0 + 10)
    assert len(child_runs(log, "load")) == 1   # consumed fx's success
    for i in range(1100):               # 1,100 newer records of fx, all failed
        log.finish(log.fire(T0 + 20 + i, name="fx")["run_id"], state="failed",
                   exit_code=1)
    ok(log, "extract", T0 + 2000)
    runs = child_runs(log, "load")
    assert len(runs) == 2 and runs[1].state == "pending", runs[1]
    assert {x["job"]: x["run_id"] for x in deps.lineage(log.sm.conn, runs[1].run_id)}[
        "fx"] == good


def test_the_fresh_success_lookup_uses_an_index_also_in_an_older_database():
    sm = StateMachine(apsw.Connection(":memory:"))
    with sm.conn:
        sm.conn.execute("DROP INDEX runs_succeeded")   # a database made before it
    sm.migrate()                                       # (reopened)
    plan = " ".join(str(r) for r in sm.conn.execute(
        "EXPLAIN QUERY PLAN " + deps._FRESH, ("fx", 0.0)))
    assert "runs_succeeded" in plan and "TEMP B-TREE" not in plan, plan


def scheduled_child(log, wait=60.0, policy="skip"):
    put_all(log, a={}, c=dict(schedule="* * * * * *", depends_on=[{"job": "a"}],
                              wait_for_upstream=wait, on_upstream_failure=policy))


def test_scheduled_child_waits_then_runs_when_its_parent_succeeds():
    log = Log()
    scheduled_child(log)
    ra = log.fire(T0 + 1, name="a")["run_id"]
    res = log.fire(T0 + 2, name="c")
    assert res["state"] == "waiting" and res["reason"] == "upstream_not_ready:a"
    assert log.run(res["run_id"]).state == "waiting"
    log.finish(ra)
    run = log.run(res["run_id"])
    assert run.state == "pending" and run.reason is None
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, run.run_id)] == [ra]
    # the next fire time has nothing new from a: it waits again
    assert log.fire(T0 + 3, name="c")["state"] == "waiting"


@pytest.mark.parametrize("policy, state", [("skip", "skipped"), ("fail", "failed")])
def test_scheduled_child_wait_runs_out(policy, state):
    log = Log()
    scheduled_child(log, policy=policy)
    rid = log.fire(T0 + 2, name="c")["run_id"]
    assert deps.waiting_due(log.sm.conn, T0 + 61) == []
    with pytest.raises(Refused, match="waits for its parents until"):
        log.apply(C.UpstreamTimeout(run_id=rid, at=T0 + 61))
    assert deps.waiting_due(log.sm.conn, T0 + 62) == [(rid, T0 + 62)]
    assert log.apply(C.UpstreamTimeout(run_id=rid, at=T0 + 62))["state"] == state
    run = log.run(rid)
    assert run.state == state and run.reason.startswith("upstream_not_ready:a")
    with pytest.raises(Refused, match="not waiting"):   # a second timeout changes nothing
        log.apply(C.UpstreamTimeout(run_id=rid, at=T0 + 63))


def test_scheduled_child_with_a_failed_parent_and_no_wait():
    log = Log()
    scheduled_child(log, wait=0.0)
    assert log.fire(T0 + 1, name="c")["state"] == "skipped"   # not ready, no wait
    ok(log, "a", T0 + 2, state="failed")
    res = log.fire(T0 + 3, name="c")
    assert res["state"] == "skipped" and res["reason"] == "upstream_failed:a@2027-01-15T08:00:02Z"
    ok(log, "a", T0 + 4)
    assert log.fire(T0 + 5, name="c")["state"] == "assigned"


def test_the_timeout_reopens_a_gate_that_opened_meanwhile():
    log = Log()
    scheduled_child(log)
    rid = log.fire(T0 + 2, name="c")["run_id"]
    # a's outcome arrives, but the child is held by something else: simulate a
    # gate re-check only at the timeout by finishing a before it fires
    ra = log.fire(T0 + 3, name="a")["run_id"]
    log.finish(ra)
    assert log.run(rid).state == "pending"
    with pytest.raises(Refused):
        log.apply(C.UpstreamTimeout(run_id=rid, at=T0 + 100))


def test_removing_a_child_cancels_its_waiting_run_and_forgets_its_parents():
    log = Log()
    scheduled_child(log)
    rid = log.fire(T0 + 2, name="c")["run_id"]
    log.apply(C.RemoveJob(name="c", at=T0 + 3))
    assert log.run(rid).state == "cancelled"
    assert list(log.sm.conn.execute("SELECT * FROM job_deps")) == []
    assert list(log.sm.conn.execute("SELECT * FROM dep_cursors")) == []


class RecordingLog(Log):
    def __init__(self):
        super().__init__()
        self.cmds = []

    def apply(self, cmd):
        self.cmds.append(cmd)
        return super().apply(cmd)


def test_replaying_the_log_gives_the_same_state():
    log = RecordingLog()
    put_all(log, a={}, b={}, c=after("a", "b"), d=after("c", trigger_rule="none_failed"),
            s=dict(schedule="* * * * * *", depends_on=[{"job": "d"}], wait_for_upstream=5.0))
    for t in range(1, 8):
        ok(log, "a", T0 + t, state="failed" if t % 3 == 0 else "succeeded")
        if t % 2:
            ok(log, "b", T0 + t + 100)
        log.fire(T0 + t * 10, name="s")
    other = StateMachine(apsw.Connection(":memory:"))
    for i, cmd in enumerate(log.cmds, 1):
        with other.conn:
            try:
                other.apply(i, C.decode(cmd.encode()))
            except Refused:
                pass
    assert other.full_digest() == log.sm.full_digest()
    assert other.state_digest == log.sm.state_digest
    assert list(other.conn.execute("SELECT * FROM run_lineage")) != []


def test_per_node_runs_of_one_fire_time_share_their_gate():
    """run_on: all: one run per node at the same fire time; the first
    consumes the parents' outcomes for all of them."""
    log = Log()
    put_all(log, a={}, c=dict(schedule="* * * * * *", depends_on=[{"job": "a"}],
                              wait_for_upstream=60.0, run_on={"mode": "all", "values": []}))
    ra = log.fire(T0 + 1, name="a")["run_id"]
    w1 = log.fire(T0 + 2, name="c", target="n1")["run_id"]
    w2 = log.fire(T0 + 2, name="c", target="n2", node="n2")["run_id"]
    assert log.run(w1).state == log.run(w2).state == "waiting"
    log.finish(ra)
    assert log.run(w1).state == log.run(w2).state == "pending"
    for rid in (w1, w2):
        assert [x["run_id"] for x in deps.lineage(log.sm.conn, rid)] == [ra]
    # ready at the fire time: every node's run starts, with the same lineage
    rb = ok(log, "a", T0 + 3)
    r1 = log.fire(T0 + 4, name="c", target="n1")
    r2 = log.fire(T0 + 4, name="c", target="n2", node="n2")
    assert r1["state"] == r2["state"] == "assigned"
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, r2["run_id"])] == [rb]
    # not ready, and its wait runs out: all of them are skipped
    w3 = log.fire(T0 + 5, name="c", target="n1")["run_id"]
    w4 = log.fire(T0 + 5, name="c", target="n2", node="n2")["run_id"]
    log.apply(C.UpstreamTimeout(run_id=w3, at=T0 + 70))
    assert log.run(w3).state == log.run(w4).state == "skipped"
    # a node that fires after that follows them
    assert log.fire(T0 + 5, name="c", target="n3", node="n3")["state"] == "skipped"


def test_a_child_paused_while_it_waits_is_skipped_when_its_gate_opens():
    log = Log()
    scheduled_child(log)
    rid = log.fire(T0 + 2, name="c")["run_id"]
    log.apply(C.SetPaused(name="c", paused=True, at=T0 + 3))
    ok(log, "a", T0 + 4)
    run = log.run(rid)
    assert run.state == "skipped" and run.reason.startswith("paused")


def test_a_parents_rerun_is_a_new_attempt_of_the_childs_record():
    """`cronrd rerun a --at T`: its new outcome is a new generation for b,
    whose fire time T has a record already: a new attempt, never a second
    record (and b's children follow it the same way)."""
    log = Log()
    put_all(log, a={}, b=after("a"))
    ok(log, "a", T0 + 1)
    (b1,) = child_runs(log, "b")
    log.apply(C.AssignRun(run_id=b1.run_id, node="n1", at=T0 + 3))
    log.finish(b1.run_id)
    rerun = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 10))["run_id"]
    log.apply(C.AssignRun(run_id=rerun, node="n1", at=T0 + 10))
    log.finish(rerun, at=T0 + 11)
    runs = child_runs(log, "b")
    assert [(r.fire_time, r.attempt, r.kind) for r in runs] == [
        (T0 + 1, 1, "upstream"), (T0 + 1, 2, "upstream")]
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, runs[1].run_id)] == [rerun]


def test_parent_runs_that_end_out_of_order_are_each_a_generation():
    """New means committed since the child's last consumption (commit order),
    not started later: a long run that ends after a shorter, later one is
    not lost (a backfill's parallel runs end in any order)."""
    log = Log()
    put_all(log, a={"concurrency": "allow"}, b=after("a"))
    r1 = log.fire(T0 + 1, name="a")["run_id"]
    r2 = log.fire(T0 + 2, name="a")["run_id"]
    log.finish(r2)
    log.finish(r1)
    runs = child_runs(log, "b")
    assert [(r.fire_time, [x["run_id"] for x in deps.lineage(log.sm.conn, r.run_id)])
            for r in runs] == [(T0 + 2, [r2]), (T0 + 1, [r1])]


def test_dependency_lookups_use_indexes():
    sm = StateMachine(apsw.Connection(":memory:"))
    plan = " ".join(str(r) for r in sm.conn.execute(
        "EXPLAIN QUERY PLAN UPDATE dep_cursors SET new_run_id=1 WHERE parent='a'"))
    assert "dep_cursors_parent" in plan
    plan = " ".join(str(r) for r in sm.conn.execute(
        "EXPLAIN QUERY PLAN SELECT child FROM job_deps WHERE parent='a'"))
    assert "PRIMARY KEY" in plan or "INDEX" in plan
    plan = " ".join(str(r) for r in sm.conn.execute(
        "EXPLAIN QUERY PLAN SELECT 1 FROM run_lineage WHERE parent_run_id IN (1, 2) AND "
        "parent_job='a'"))
    assert "run_lineage_parent" in plan


# -- with concurrency: queue (state/queue.py) ----------------------------------------
def queued_child(log, wait=600.0):
    put_all(log, a={}, c=dict(schedule="* * * * * *", depends_on=[{"job": "a"}],
                              wait_for_upstream=wait, concurrency="queue"))


def started(log, rid):
    run = log.run(rid)
    if run.state.value == "pending":
        log.apply(C.AssignRun(run_id=rid, node="n1", at=run.due_at))
        run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node=run.node, pid=100 + rid,
                           started_at=run.due_at, log_path="/l"))
    return rid


def in_queue(log, rid):
    return bool(list(log.sm.conn.execute("SELECT 1 FROM run_queue WHERE run_id=?", (rid,))))


def test_a_run_waiting_in_its_queue_is_not_waiting_for_its_parents():
    log = Log()
    queued_child(log)
    ok(log, "a", T0 + 1)
    c1 = started(log, log.fire(T0 + 2, name="c")["run_id"])
    res = log.apply(C.ManualRun(job="c", node="", at=T0 + 4))   # c1 runs: it queues
    c2 = res["run_id"]
    assert res["state"] == "waiting" and res["reason"].startswith(f"waiting for run {c1} ")
    assert in_queue(log, c2)
    # the leader's wait_for_upstream duty does not see it, nor may it end it
    assert deps.waiting_due(log.sm.conn, T0 + 10**6) == []
    with pytest.raises(Refused, match="queue"):
        log.apply(C.UpstreamTimeout(run_id=c2, at=T0 + 10**6))
    # a parent's new outcome does not release it past the run in flight
    ok(log, "a", T0 + 5)
    run = log.run(c2)
    assert run.state == "waiting" and run.reason.startswith(f"waiting for run {c1} ")
    log.finish(c1, at=T0 + 7)                 # the queue releases it
    assert log.run(c2).state == "pending" and not in_queue(log, c2)


def test_the_queue_does_not_release_a_run_waiting_for_its_parents():
    log = Log()
    queued_child(log)
    ok(log, "a", T0 + 1)
    c1 = started(log, log.fire(T0 + 2, name="c")["run_id"])
    res = log.fire(T0 + 3, name="c")          # nothing new from a: it waits for a
    c2 = res["run_id"]
    assert res["state"] == "waiting" and res["reason"] == "upstream_not_ready:a"
    assert not in_queue(log, c2)
    log.finish(c1, at=T0 + 5)                 # the last run in flight ends
    run = log.run(c2)
    assert run.state == "waiting" and run.reason == "upstream_not_ready:a"
    ok(log, "a", T0 + 6)                      # its gate opens, nothing in flight
    assert log.run(c2).state == "pending"


def test_a_run_released_by_its_parents_waits_in_the_queue_behind_the_run_in_flight():
    log = Log()
    queued_child(log)
    ok(log, "a", T0 + 1)
    c1 = started(log, log.fire(T0 + 2, name="c")["run_id"])
    c2 = log.fire(T0 + 3, name="c")["run_id"]  # waits for a
    a2 = ok(log, "a", T0 + 4)                  # gate open, but c1 still runs
    run = log.run(c2)
    assert run.state == "waiting" and run.reason.startswith(f"waiting for run {c1} ")
    assert in_queue(log, c2)
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, c2)] == [a2]
    assert deps.waiting_due(log.sm.conn, T0 + 10**6) == []
    log.finish(c1, at=T0 + 7)
    assert log.run(c2).state == "pending" and not in_queue(log, c2)


def test_an_after_child_that_queues_waits_for_its_previous_run():
    log = Log()
    put_all(log, a={}, b=after("a", concurrency="queue"))
    ok(log, "a", T0 + 1)
    (b1,) = child_runs(log, "b")
    started(log, b1.run_id)
    ok(log, "a", T0 + 2)                       # the next generation: b1 still runs
    b2 = child_runs(log, "b")[1]
    assert b2.state.value == "waiting" and b2.reason.startswith(f"waiting for run {b1.run_id} ")
    assert in_queue(log, b2.run_id) and b2.kind == "upstream" and b2.fire_time == T0 + 2
    log.finish(b1.run_id, at=T0 + 9)
    assert log.run(b2.run_id).state == "pending"


def test_per_node_runs_whose_gate_opened_queue_each_on_their_node():
    """run_on: all with concurrency: queue: a node's run that follows a
    sibling's open gate waits in its own node's queue, not for its parents."""
    log = Log()
    put_all(log, a={}, c=dict(schedule="* * * * * *", depends_on=[{"job": "a"}],
                              wait_for_upstream=60.0, concurrency="queue",
                              run_on={"mode": "all", "values": []}))
    ok(log, "a", T0 + 1)
    log.fire(T0 + 2, name="c", target="n1")
    first2 = log.fire(T0 + 2, name="c", target="n2", node="n2")["run_id"]
    rb = ok(log, "a", T0 + 3)
    q1 = log.fire(T0 + 4, name="c", target="n1")
    q2 = log.fire(T0 + 4, name="c", target="n2", node="n2")
    assert q1["state"] == q2["state"] == "waiting"
    assert in_queue(log, q1["run_id"]) and in_queue(log, q2["run_id"])
    assert log.run(q2["run_id"]).reason.startswith(f"waiting for run {first2} ")
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, q2["run_id"])] == [rb]
    assert deps.waiting_due(log.sm.conn, T0 + 10**6) == []
    run = log.run(first2)
    log.apply(C.RunFinished(run_id=first2, token=run.token, node="n2", state="succeeded",
                            exit_code=0, signal=None, started_at=T0 + 2, finished_at=T0 + 5,
                            log_path="/l"))
    assert log.run(q2["run_id"]).state == "pending"
    assert log.run(q1["run_id"]).state == "waiting"   # n1's queue waits for n1's run


def random_queued_dag_commands(rng, n):
    """A random history of a parent ``p`` and two children with
    concurrency: queue: ``c`` on a schedule (it waits for ``p``), ``b``
    @after ``p``; runs placed, started, ended, cancelled and timed out
    against the state as it goes."""
    from tests.unit.state.test_state import spec
    cmds = [C.PutJob(name="p", spec=spec(name="p"), digest="p", source="/x", at=T0)]
    for name, over in (("c", dict(schedule="* * * * * *", depends_on=[{"job": "p"}],
                                  wait_for_upstream=rng.choice([0.0, 3.0, 600.0]))),
                       ("b", after("p"))):
        s = spec(name=name, concurrency="queue", max_queued=3,
                 retries={"max": rng.randint(0, 1), "delay": 1.0, "backoff": 2.0,
                          "max_delay": 60.0, "jitter": 0.0}, **over)
        cmds.append(C.PutJob(name=name, spec=s, digest=name, source="/x", at=T0))
    replay = Replay()
    sm, apply = replay.sm, replay.apply

    for cmd in cmds:
        apply(cmd)
    t = T0
    for _ in range(n):
        t += rng.choice([0, 1, 2])
        name = rng.choice("pcb")
        runs = [r for r in Q.list_runs(sm.conn, name, limit=20)
                if r.state.value in ("pending", "assigned", "running", "waiting")]
        run = rng.choice(runs) if runs else None
        k = rng.random()
        due = deps.waiting_due(sm.conn, t)
        if due and k < 0.1:
            cmd = C.UpstreamTimeout(run_id=due[0][0], at=t)
        elif name != "b" and (k < 0.25 or run is None):
            cmd = C.Fire(job=name, fire_time=t + 1, kind="scheduled", node="n1",
                         due_at=t + 1, at=t)
        elif run is None or k < 0.28:
            cmd = C.ManualRun(job=name, node="", at=t)
        elif k < 0.31:
            cmd = C.CancelRun(run_id=run.run_id, at=t, reason="by hand")
        elif run.state.value == "pending":
            cmd = C.AssignRun(run_id=run.run_id, node=rng.choice(["n1", "n2"]), at=t)
        elif run.state.value == "assigned" and k < 0.6:
            cmd = C.RunStarted(run_id=run.run_id, token=run.token, node=run.node, pid=100,
                               started_at=t, log_path="/l")
        elif run.state.value in ("assigned", "running"):
            cmd = C.RunFinished(run_id=run.run_id, token=run.token, node=run.node,
                                state=rng.choice(["succeeded", "succeeded", "failed",
                                                  "skipped"]),
                                exit_code=0, signal=None, started_at=t, finished_at=t + 1,
                                log_path="/l")
        else:
            continue
        cmds.append(cmd)
        apply(cmd)
    return cmds


def queue_and_upstream_waits_apart(sm):
    """Every queued run waits; every other waiting run waits for its
    parents; a queued child never has two runs in flight."""
    queued = {r for (r,) in sm.conn.execute("SELECT run_id FROM run_queue")}
    for rid, job, reason in sm.conn.execute(
            "SELECT run_id, job, reason FROM runs WHERE state='waiting'"):
        if rid in queued:
            assert reason.startswith("waiting for run"), (rid, reason)
        else:
            assert job == "c" and reason.startswith("upstream_"), (rid, job, reason)
    assert queued <= {r for (r,) in sm.conn.execute(
        "SELECT run_id FROM runs WHERE state='waiting'")}
    for job, count in sm.conn.execute(
            "SELECT job, COUNT(*) FROM runs WHERE state IN ('pending','assigned','running') "
            "AND job IN ('b', 'c') GROUP BY job, target"):
        assert count <= 1, f"job {job}: {count} runs in flight"


@pytest.mark.parametrize("seed", range(10))
def test_queued_children_keep_both_waits_apart_and_are_deterministic(seed):
    import random
    from tests.unit.state.test_queue import play
    cmds = random_queued_dag_commands(random.Random(seed), 300)
    d1, r1 = play(cmds, batch=1, check=queue_and_upstream_waits_apart)
    d2, r2 = play(cmds, batch=17)
    assert d1 == d2 and r1 == r2
    assert any(isinstance(r, dict) and r.get("state") == "waiting" for r in r1)


# -- a parent that runs on every node (run_on: all) ----------------------------------
ALL = {"run_on": {"mode": "all", "values": []}}
NODES = ("n1", "n2", "n3")


def fire_on_nodes(log, job, t, nodes=NODES):
    """A run_on: all fire: one run per node; {node: run id}."""
    return {n: log.fire(t, name=job, target=n, node=n)["run_id"] for n in nodes}


def end_on_node(log, rid, state="succeeded", at=None):
    run = log.run(rid)
    return log.apply(C.RunFinished(
        run_id=rid, token=run.token, node=run.node, state=state,
        exit_code=0 if state == "succeeded" else 1, signal=None, started_at=run.due_at,
        finished_at=at if at is not None else run.due_at + 1, log_path="/l"))


@pytest.mark.parametrize("states, child_state, worst", [
    (("succeeded", "succeeded", "succeeded"), "pending", "n1"),
    (("succeeded", "failed", "skipped"), "skipped", "n2"),
    (("skipped", "succeeded", "skipped"), "skipped", "n1"),
    (("succeeded", "succeeded", "timed_out"), "skipped", "n3"),
])
def test_a_parent_on_every_node_is_one_outcome_per_fire_time(states, child_state, worst):
    """run_on: all: the parent's outcome for a fire time is final when every
    node's run of it has ended, and is the worst of them: one generation."""
    log = Log()
    put_all(log, p=ALL, c=after("p"))
    rids = fire_on_nodes(log, "p", T0 + 1)
    for node, state in list(zip(NODES, states))[:-1]:
        end_on_node(log, rids[node], state)
        assert child_runs(log, "c") == []      # a node's run has not ended yet
    end_on_node(log, rids["n3"], states[-1])
    (c,) = child_runs(log, "c")
    assert (c.state, c.fire_time) == (child_state, T0 + 1)
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, c.run_id)] == [rids[worst]]


def test_a_node_that_cannot_run_the_fire_is_a_skip_in_its_outcome():
    """(The scheduler commits that node's skipped record after the runnable
    nodes' fires: it does not end the fire time on its own.)"""
    log = Log()
    put_all(log, p=ALL, c=after("p"))
    rids = fire_on_nodes(log, "p", T0 + 1, NODES[:2])
    down = log.fire(T0 + 1, name="p", target="n3", node="n3",
                    skip_reason="node n3 cannot run it: silent")["run_id"]
    assert child_runs(log, "c") == []
    for rid in rids.values():
        end_on_node(log, rid)
    (c,) = child_runs(log, "c")
    assert (c.state, c.reason) == ("skipped", "upstream_skipped:p@2027-01-15T08:00:01Z")
    assert [x["run_id"] for x in deps.lineage(log.sm.conn, c.run_id)] == [down]


def test_a_parent_on_every_node_waits_for_a_nodes_retry():
    log = Log()
    put_all(log, p=dict(ALL, retries={"max": 1, "delay": 1.0, "backoff": 2.0,
                                      "max_delay": 10.0, "jitter": 0.0}), c=after("p"))
    rids = fire_on_nodes(log, "p", T0 + 1, NODES[:2])
    end_on_node(log, rids["n1"])
    retry = end_on_node(log, rids["n2"], "failed")["retry_run_id"]
    assert retry and child_runs(log, "c") == []
    if log.run(retry).state == "pending":
        log.apply(C.AssignRun(run_id=retry, node="n2", at=T0 + 5))
    end_on_node(log, retry)
    (c,) = child_runs(log, "c")
    assert c.state == "pending"


def test_a_node_fired_after_the_others_ended_is_not_a_second_generation():
    """A new leader completes a run_on: all fire after the nodes that had
    theirs ran and ended: their outcome was delivered; the late node's run
    does not make another."""
    log = Log()
    put_all(log, p=ALL, c=after("p"), d=after("c"))
    rids = fire_on_nodes(log, "p", T0 + 1, NODES[:2])
    for rid in rids.values():
        end_on_node(log, rid)
    (c,) = child_runs(log, "c")
    log.apply(C.AssignRun(run_id=c.run_id, node="n1", at=T0 + 20))
    log.finish(c.run_id, at=T0 + 21)    # (not absorbed by a run in progress)
    late = log.fire(T0 + 1, name="p", target="n3", node="n3", at=T0 + 30)["run_id"]
    end_on_node(log, late, "failed", at=T0 + 40)
    assert [r.run_id for r in child_runs(log, "c")] == [c.run_id]
    # the next fire time is one generation again
    nxt = fire_on_nodes(log, "p", T0 + 60)
    for rid in nxt.values():
        end_on_node(log, rid, at=T0 + 61)
    assert [(r.fire_time, r.attempt) for r in child_runs(log, "c")] == [(T0 + 1, 1),
                                                                      (T0 + 60, 1)]


def test_a_child_on_every_node_is_one_outcome_for_its_own_children():
    """A scheduled run_on: all child whose wait runs out ends on every node
    at once: its children see one outcome for that fire time."""
    log = Log()
    put_all(log, a={}, c=dict(schedule="* * * * * *", depends_on=[{"job": "a"}],
                              wait_for_upstream=60.0, **ALL), d=after("c"))
    w = fire_on_nodes(log, "c", T0 + 5)
    log.apply(C.UpstreamTimeout(run_id=w["n1"], at=T0 + 70))
    (d,) = child_runs(log, "d")
    assert d.state == "skipped" and d.fire_time == T0 + 5


@pytest.mark.parametrize("seed", range(20))
def test_random_per_node_histories_make_one_generation_per_fire_time(seed):
    """Per-node runs of several fire times ending in any order and state
    (some nodes' fires late): exactly one child record per parent fire time,
    its state and lineage from the worst per-node outcome."""
    import random
    from cronrd.decisions import dependencies as D
    rng = random.Random(seed)
    log = Log()
    put_all(log, p=dict(ALL, concurrency="allow"), c=after("p", trigger_rule="all_succeeded"))
    live, ended = [], {}      # (fire time, run id) in flight; fire time -> {run id: state}

    def end(ft, rid, state, at):
        end_on_node(log, rid, state, at=at)
        ended.setdefault(ft, {})[rid] = state

    for t in range(T0 + 10, T0 + 70, 10):
        nodes = [n for n in NODES if rng.random() < 0.7] or ["n1"]
        for n in nodes:
            live.append((t, log.fire(t, name="p", target=n, node=n, at=t - 0.5)["run_id"]))
        while live and rng.random() < 0.6:
            ft, rid = live.pop(rng.randrange(len(live)))
            end(ft, rid, rng.choice(["succeeded", "succeeded", "failed", "skipped"]), t + 1)
        for n in NODES:       # a node's fire completed by a new leader, later
            if n in nodes or rng.random() < 0.5:
                continue
            rid = log.fire(t, name="p", target=n, node=n, at=t + 2)["run_id"]
            if any(ft == t for ft, _ in live):
                live.append((t, rid))     # the others run still: one of them
            else:                         # they ended: their outcome was delivered
                end_on_node(log, rid, "failed", at=t + 3)
    rng.shuffle(live)
    for ft, rid in live:
        end(ft, rid, rng.choice(["succeeded", "failed"]), T0 + 1000)
    runs = child_runs(log, "c")
    assert sorted(r.fire_time for r in runs) == sorted(ended)
    for r in runs:
        assert r.attempt == 1
        outcome = D.worst([D.Outcome(rid, r.fire_time, st)
                           for rid, st in ended[r.fire_time].items()])
        assert [x["run_id"] for x in deps.lineage(log.sm.conn, r.run_id)] == [
            outcome.run_id]
        assert (r.state == "pending") == (outcome.state == "succeeded")

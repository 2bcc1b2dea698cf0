"""Run outcomes become events inside apply: failed only after the last retry,
retrying in between, launch_failed when a node could not start the run,
skipped with its reason, recovered once, on the first success after failures.
Replayed on another node, the same commands give the same events (and the
same digest)."""

from __future__ import annotations

from cronrd.state import commands as C
from cronrd.state import events as EV
from tests.unit.state.test_state import T0, Log


def kinds(log: Log) -> list[tuple[str, int | None]]:
    return [(e["kind"], e["run_id"]) for e in EV.undelivered(log.sm.conn, 1000)]


def retry_of(log: Log, run_id: int) -> int:
    rows = list(log.sm.conn.execute(
        "SELECT r2.run_id FROM runs r1 JOIN runs r2 ON r2.job=r1.job AND "
        "r2.fire_time=r1.fire_time AND r2.attempt=r1.attempt+1 WHERE r1.run_id=?", (run_id,)))
    return rows[0][0]


def launch_failed(log: Log, run_id: int, at: float):
    run = log.run(run_id)
    return log.apply(C.RunFinished(
        run_id=run_id, token=run.token, node="n1", state="failed", exit_code=127,
        signal=None, started_at=None, finished_at=at,
        reason="cannot start the run: no such user 'nobody2'", log_path=None))


def scenario(log: Log) -> None:
    """Fail, retry, fail for good; skip; launch failure; recover."""
    log.put(retries={"max": 1, "delay": 5.0, "backoff": 2.0, "max_delay": 60.0,
                     "jitter": 0.0})
    first = log.fire(T0 + 1)["run_id"]
    log.finish(first, "failed", exit_code=3)               # retrying
    second = retry_of(log, first)
    log.finish(second, "failed", exit_code=3)              # failed (final)
    log.apply(C.Fire(job="j", fire_time=T0 + 2, kind="scheduled", node="n1", due_at=T0 + 2,
                     at=T0 + 1.9, skip_reason="missed while the cluster was down"))  # skipped
    ok = log.fire(T0 + 3)["run_id"]
    log.finish(ok)                                         # recovered
    again = log.fire(T0 + 4)["run_id"]
    log.finish(again)                                      # nothing: not failing
    bad = log.fire(T0 + 5)["run_id"]
    launch_failed(log, bad, T0 + 5.1)                      # launch_failed (retried)
    launch_failed(log, retry_of(log, bad), T0 + 20)        # launch_failed (final)


def test_each_outcome_is_its_event_and_recovery_comes_once():
    log = Log()
    scenario(log)
    got = kinds(log)
    assert [k for k, _ in got] == ["retrying", "failed", "skipped", "recovered",
                                   "launch_failed", "launch_failed"]
    events = EV.undelivered(log.sm.conn, 1000)
    retrying, failed, skipped, recovered, lf1, lf2 = events
    assert retrying["data"]["final"] is False and retrying["data"]["next_attempt"] == 2
    assert retrying["data"]["exit_code"] == 3 and retrying["fire_time"] == T0 + 1
    assert failed["data"]["final"] is True and failed["data"]["attempt"] == 2
    assert skipped["data"]["reason"] == "missed while the cluster was down"
    assert recovered["data"]["failed_event"] == failed["event_id"]
    assert recovered["data"]["failing_since"] == failed["at"]
    assert lf1["data"]["final"] is False and lf2["data"]["final"] is True
    assert "cannot start the run" in lf2["data"]["reason"]


def test_replayed_on_another_node_the_events_and_digest_are_the_same():
    a, b = Log(), Log()
    scenario(a)
    scenario(b)
    assert EV.undelivered(a.sm.conn, 1000) == EV.undelivered(b.sm.conn, 1000)
    assert a.sm.full_digest() == b.sm.full_digest()
    assert a.sm.state_digest == b.sm.state_digest


def test_a_success_after_success_or_a_cancel_is_no_event():
    log = Log()
    log.put()
    log.finish(log.fire(T0 + 1)["run_id"])
    rid = log.fire(T0 + 2)["run_id"]
    log.apply(C.CancelRun(run_id=rid, at=T0 + 1.95, reason="operator"))
    assert kinds(log) == []


def test_timed_out_and_a_lost_run_not_retried_are_failures():
    log = Log()
    log.put(on_node_loss="fail")
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid, "timed_out", exit_code=None)
    lost = log.fire(T0 + 2)["run_id"]
    log.apply(C.RunStarted(run_id=lost, token=log.run(lost).token, node="n1", pid=7,
                           started_at=T0 + 2, log_path="/l"))
    log.apply(C.NodeLost(node="n1", at=T0 + 30, reason="node n1 silent"))
    events = EV.undelivered(log.sm.conn, 1000)
    assert [(e["kind"], e["data"]["state"]) for e in events] == [
        ("failed", "timed_out"), ("failed", "lost")]
    assert events[1]["run_id"] == lost


def test_a_removed_failing_job_made_again_does_not_recover():
    log = Log()
    log.put()
    log.finish(log.fire(T0 + 1)["run_id"], "failed", exit_code=1)
    log.apply(C.RemoveJob(name="j", at=T0 + 5, node=""))
    log.put(at=T0 + 6)
    log.finish(log.fire(T0 + 10)["run_id"])
    assert [k for k, _ in kinds(log)] == ["failed"]


def test_a_run_on_all_job_recovers_on_each_node_apart():
    log = Log()
    log.put(run_on={"mode": "all", "values": []})
    a = log.fire(T0 + 1, target="n1")["run_id"]
    b = log.fire(T0 + 1, target="n2", node="n2")["run_id"]
    log.finish(a, "failed", exit_code=1)
    log.apply(C.RunFinished(run_id=b, token=log.run(b).token, node="n2", state="succeeded",
                            exit_code=0, signal=None, started_at=T0 + 1, finished_at=T0 + 2,
                            log_path="/l"))
    assert [k for k, _ in kinds(log)] == ["failed"]  # n2's success is not n1's recovery
    c = log.fire(T0 + 3, target="n1")["run_id"]
    log.finish(c)
    events = EV.undelivered(log.sm.conn, 100)
    assert [(e["kind"], e["data"].get("target")) for e in events] == [
        ("failed", "n1"), ("recovered", "n1")]

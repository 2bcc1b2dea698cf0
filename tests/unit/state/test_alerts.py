"""Alerts keyed (job, fire time, kind): one however often proposed; failures
open one, a success resolves it; the dead letter's requeue and discard."""

from __future__ import annotations

import pytest

from cronrd.state import alerts as AL
from cronrd.state import commands as C
from cronrd.state import events as EV
from cronrd.errors import Refused
from tests.unit.state.test_backfill import finish
from tests.unit.state.test_state import T0, Log


def miss(job="j", t=T0, kind="start_within", detail="late"):
    return [job, t, kind, detail]


def test_the_same_miss_proposed_by_two_leaders_is_one_alert_and_one_event():
    log = Log()
    log.put()
    first = log.apply(C.RaiseAlerts(alerts=[miss(), miss(kind="finish_within")], at=T0 + 5))
    again = log.apply(C.RaiseAlerts(alerts=[miss(detail="later look")], at=T0 + 9))
    assert len(first["opened"]) == 2 and again["opened"] == []
    (a, b) = AL.alerts(log.sm.conn)
    assert {a["kind"], b["kind"]} == {"start_within", "finish_within"}
    assert [e["kind"] for e in EV.undelivered(log.sm.conn)] == ["sla_start_within",
                                                               "sla_finish_within"]
    for bad in ([["j", T0, "nonsense", "x"]], [["j", "T0", "start_within", "x"]], "x"):
        with pytest.raises(Refused, match="raise_alerts"):
            log.apply(C.RaiseAlerts(alerts=bad, at=T0))


def test_ack_closes_an_open_alert_once():
    log = Log()
    log.put()
    (aid,) = log.apply(C.RaiseAlerts(alerts=[miss()], at=T0))["opened"]
    log.apply(C.AckAlert(alert_id=aid, note="known: node down", who="root", at=T0 + 1))
    assert AL.alerts(log.sm.conn) == []
    (row,) = AL.alerts(log.sm.conn, include_closed=True)
    assert (row["state"], row["note"], row["by"]) == ("acked", "known: node down", "root")
    with pytest.raises(Refused, match="acked already"):
        log.apply(C.AckAlert(alert_id=aid, at=T0 + 2))
    with pytest.raises(Refused, match="no alert with id 99"):
        log.apply(C.AckAlert(alert_id=99, at=T0 + 2))


def test_a_final_failure_opens_an_alert_a_retry_does_not_and_a_success_resolves_it():
    log = Log()
    log.put(retries={"max": 1, "delay": 1.0, "backoff": 2.0, "max_delay": 10.0,
                     "jitter": 0.0})
    rid = log.fire(T0 + 1)["run_id"]
    retry = log.finish(rid, state="failed", exit_code=1)["retry_run_id"]
    assert AL.alerts(log.sm.conn) == []          # a retry follows: not final
    finish(log, retry, state="failed", at=T0 + 5)
    (a,) = AL.alerts(log.sm.conn)
    assert (a["kind"], a["fire_time"]) == ("failed", T0 + 1)
    assert a["detail"].startswith("attempt 2 failed")
    ok = log.fire(T0 + 20)["run_id"]
    log.finish(ok)
    assert AL.alerts(log.sm.conn) == []
    (a,) = AL.alerts(log.sm.conn, include_closed=True)
    assert a["state"] == "resolved" and a["note"] == f"recovered: run {ok} succeeded"


def test_dead_letter_requeue_is_a_new_attempt_of_the_record_and_discard_needs_it_open():
    log = Log()
    log.put(on_final_failure="dead_letter")
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid, state="failed", exit_code=2)
    (d,) = AL.dead_letters(log.sm.conn)
    assert (d["run_id"], d["state"]) == (rid, "open")
    assert "dead_lettered" in [e["kind"] for e in EV.undelivered(log.sm.conn)]
    res = log.apply(C.DeadLetterAction(run_id=rid, action="requeue", who="root", at=T0 + 9))
    new = log.run(res["new_run_id"])
    assert (new.fire_time, new.attempt, new.kind, new.state) == (T0 + 1, 2, "rerun",
                                                                 "pending")
    with pytest.raises(Refused, match="requeued already"):
        log.apply(C.DeadLetterAction(run_id=rid, action="discard", at=T0 + 10))
    # the requeued attempt fails again: a second dead letter, discarded with a note
    finish(log, new.run_id, state="failed", at=T0 + 11)
    (d2,) = AL.dead_letters(log.sm.conn)
    assert d2["run_id"] == new.run_id
    log.apply(C.DeadLetterAction(run_id=new.run_id, action="discard", note="bad input",
                                 who="root", at=T0 + 12))
    assert AL.dead_letters(log.sm.conn) == []
    with pytest.raises(Refused, match="not in the dead letter"):
        log.apply(C.DeadLetterAction(run_id=12345, action="requeue", at=T0))


def test_a_job_without_dead_letter_keeps_its_failure_out_of_it():
    log = Log()
    log.put()
    log.finish(log.fire(T0 + 1)["run_id"], state="failed", exit_code=1)
    assert AL.dead_letters(log.sm.conn) == []


def test_a_run_on_all_jobs_success_on_one_node_does_not_resolve_another_nodes_failure():
    """run_on: all fails and recovers on each node apart (as its recovered
    event): n1's success is no recovery of n2, which still fails."""
    from tests.unit.state.test_dependencies import end_on_node
    log = Log()
    log.put(run_on={"mode": "all", "values": []})
    rids = {n: log.fire(T0 + 1, target=n, node=n)["run_id"] for n in ("n1", "n2")}
    end_on_node(log, rids["n2"], "failed")
    end_on_node(log, rids["n1"])
    (a,) = AL.alerts(log.sm.conn)
    assert (a["kind"], a["state"]) == ("failed", "open")
    more = {n: log.fire(T0 + 2, target=n, node=n)["run_id"] for n in ("n1", "n2")}
    end_on_node(log, more["n1"])
    assert len(AL.alerts(log.sm.conn)) == 1      # n2 has not succeeded since
    end_on_node(log, more["n2"])
    assert AL.alerts(log.sm.conn) == []          # now it has: recovered


@pytest.mark.parametrize("concurrency", ["forbid", "queue"])
def test_a_requeue_keeps_the_jobs_concurrency_like_a_rerun(concurrency):
    """A requeued run is a rerun (its gate does not skip it): under forbid
    it is refused while another run of the job runs, under queue it waits
    its turn; never a second run at once."""
    log = Log()
    log.put(on_final_failure="dead_letter", concurrency=concurrency)
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid, state="failed", exit_code=2)
    busy = log.fire(T0 + 2)["run_id"]
    run = log.run(busy)
    log.apply(C.RunStarted(run_id=busy, token=run.token, node="n1", pid=5,
                           started_at=T0 + 2, log_path="/l"))
    if concurrency == "forbid":
        with pytest.raises(Refused, match="still running"):
            log.apply(C.DeadLetterAction(run_id=rid, action="requeue", at=T0 + 3))
        assert AL.dead_letters(log.sm.conn)[0]["state"] == "open"
        return
    res = log.apply(C.DeadLetterAction(run_id=rid, action="requeue", at=T0 + 3))
    assert log.run(res["new_run_id"]).state == "waiting"
    log.apply(C.RunFinished(run_id=busy, token=run.token, node="n1", state="succeeded",
                            exit_code=0, signal=None, started_at=T0 + 2, finished_at=T0 + 4,
                            log_path="/l"))
    assert log.run(res["new_run_id"]).state == "pending"


def test_an_always_failing_jobs_failed_alerts_go_with_its_run_history():
    """One open alert per failed fire time: a job failing every minute made
    1,440 a day, kept for ever. An open failed alert whose fire time's
    records were pruned goes with them, but the job's newest one stays open
    (it still shows the job failing)."""
    log = Log()
    log.put()
    for i in range(10):
        rid = log.fire(T0 + 1 + i)["run_id"]
        log.finish(rid, state="failed", exit_code=1)
    assert len(AL.alerts(log.sm.conn)) == 10
    log.apply(C.Prune(before=T0 - 1, at=T0 + 30, keep=3))
    assert [a["fire_time"] for a in AL.alerts(log.sm.conn)] == [T0 + 10, T0 + 9, T0 + 8]
    # a job whose every record is pruned keeps its newest open alert
    log.apply(C.Prune(before=T0 + 1000, at=T0 + 1000))
    assert [a["fire_time"] for a in AL.alerts(log.sm.conn)] == [T0 + 10]


def test_from_version_2_an_sla_alert_is_resolved_when_its_fire_times_run_succeeds():
    """Issue 33 (6): an SLA alert stayed open after its run succeeded. From
    cluster version 2 a late start, a late finish or a long run is resolved
    when the run of that fire time succeeds; another fire time's alert and
    the recover-kinds keep their own rules."""
    from cronrd.state import versions as V
    log = Log()
    log.put()
    log.apply(C.SetClusterVersion(version=V.SLA_RESOLVED_BY_SUCCESS, members={}, at=T0))
    rid = log.fire(T0 + 1)["run_id"]
    log.apply(C.RaiseAlerts(alerts=[miss(t=T0 + 1), miss(t=T0 + 1, kind="max_runtime"),
                                    miss(t=T0 + 99, kind="finish_by")], at=T0 + 5))
    assert len(AL.alerts(log.sm.conn)) == 3
    log.finish(rid)
    (left,) = AL.alerts(log.sm.conn)
    assert (left["kind"], left["fire_time"]) == ("finish_by", T0 + 99)
    done = [a for a in AL.alerts(log.sm.conn, include_closed=True) if a["state"] == "resolved"]
    assert {a["kind"] for a in done} == {"start_within", "max_runtime"}
    assert all(a["note"] == f"done late: run {rid} of this fire time succeeded" for a in done)


def test_before_version_2_an_sla_alert_stays_open_as_the_old_nodes_left_it():
    """A log replayed from before the raise decides what 0.2.0 decided."""
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    log.apply(C.RaiseAlerts(alerts=[miss(t=T0 + 1)], at=T0 + 5))
    log.finish(rid)
    (a,) = AL.alerts(log.sm.conn)
    assert (a["kind"], a["state"]) == ("start_within", "open")


@pytest.mark.parametrize("version", [1, 2])
def test_a_failed_alert_names_its_event_from_version_2(version):
    """Issue 33 (6): a failed alert showed event_id null though its run's
    failure event was delivered."""
    log = Log()
    log.put()
    if version == 2:
        log.apply(C.SetClusterVersion(version=2, members={}, at=T0))
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid, state="failed", exit_code=1)
    (a,) = AL.alerts(log.sm.conn)
    failed = [e for e in EV.undelivered(log.sm.conn) if e["kind"] == "failed"]
    assert len(failed) == 1
    assert a["event_id"] == (failed[0]["event_id"] if version == 2 else None)


def test_a_run_on_all_fire_times_sla_alert_is_resolved_once_every_nodes_run_succeeded():
    """Review: the first node's success resolved it while the other's run was
    still late; and with another node failing, never."""
    from cronrd.state import versions as V
    log = Log()
    log.put(run_on={"mode": "all", "values": []})
    log.apply(C.SetClusterVersion(version=V.SLA_RESOLVED_BY_SUCCESS, members={}, at=T0))
    one = log.fire(T0 + 1, node="n1", target="n1")["run_id"]
    two = log.fire(T0 + 1, node="n2", target="n2")["run_id"]
    log.apply(C.RaiseAlerts(alerts=[miss(t=T0 + 1, kind="finish_within")], at=T0 + 5))
    log.finish(one)
    assert [a["state"] for a in AL.alerts(log.sm.conn, include_closed=True)] == ["open"]
    run = log.run(two)
    log.apply(C.RunFinished(run_id=two, token=run.token, node="n2", state="succeeded",
                            exit_code=0, signal=None, started_at=run.due_at,
                            finished_at=run.due_at + 9, log_path="/l"))
    (a,) = AL.alerts(log.sm.conn, include_closed=True)
    assert a["state"] == "resolved" and a["note"].startswith("done late")


def test_a_miss_proposed_after_its_runs_success_is_recorded_resolved():
    """Review: the leader read the state before the success applied, and its
    RaiseAlerts committed after: the alert opened and nothing closed it."""
    from cronrd.state import versions as V
    log = Log()
    log.put()
    log.apply(C.SetClusterVersion(version=V.SLA_RESOLVED_BY_SUCCESS, members={}, at=T0))
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid)
    log.apply(C.RaiseAlerts(alerts=[miss(t=T0 + 1)], at=T0 + 5))
    (a,) = AL.alerts(log.sm.conn, include_closed=True)
    assert a["state"] == "resolved" and a["note"] == f"done late: run {rid} of this fire time succeeded"
    assert "sla_start_within" in [e["kind"] for e in EV.undelivered(log.sm.conn)]

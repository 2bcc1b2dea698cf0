"""state/apply_watches.py: a watch's fire times wait for pings; a ping
goes to the oldest open one; none within the grace is a miss, once."""

from __future__ import annotations

import pytest

from cronrd.errors import Refused
from cronrd.state import commands as C
from cronrd.state.apply_watches import overdue
from cronrd.state import alerts as AL
from tests.unit.state.test_state import T0, Log


def watch_log(grace: float = 600.0) -> Log:
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    log.put("w", schedule="*/10 * * * *", command="", watch={"grace": grace})
    return log


def ping(log: Log, what: str = "success", at: float = T0, exit_code=None) -> dict:
    return log.apply(C.Ping(job="w", what=what, node="n1", by="uid 0 (root)", at=at,
                            exit_code=exit_code))


def test_a_fire_time_waits_and_a_start_then_an_end_ping_close_it():
    log = watch_log()
    rid = log.fire(T0 + 600, "w")["run_id"]
    run = log.run(rid)
    assert (run.state.value, run.node) == ("waiting", None)
    assert run.reason.startswith("waiting for a ping until ")
    assert ping(log, "start", T0 + 601) == {"run_id": rid, "state": "running"}
    assert ping(log, "success", T0 + 700) == {"run_id": rid, "state": "succeeded"}
    run = log.run(rid)
    assert (run.started_at, run.finished_at, run.exit_code) == (T0 + 601, T0 + 700, 0)
    assert "ping from uid 0 (root) via n1" in run.reason


def test_a_failed_ping_fails_the_run_and_raises_its_alert():
    log = watch_log()
    rid = log.fire(T0 + 600, "w")["run_id"]
    assert ping(log, "fail", T0 + 650, exit_code=3)["state"] == "failed"
    assert log.run(rid).exit_code == 3
    (alert,) = AL.alerts(log.sm.conn, job="w")
    assert alert["kind"] == "failed" and alert["fire_time"] == T0 + 600
    assert alert["detail"] == "attempt 1 failed: failed (ping from uid 0 (root) via n1) (exit 3)"


def test_no_ping_within_the_grace_is_a_miss_recorded_once():
    log = watch_log(grace=300.0)
    rid = log.fire(T0 + 600, "w")["run_id"]
    assert overdue(log.sm.conn, T0 + 899) == []
    # asked too early (a leader's clock behind): it still waits
    assert log.apply(C.WatchMissed(run_id=rid, at=T0 + 899))["state"] == "waiting"
    assert overdue(log.sm.conn, T0 + 900) == [(rid, "w")]
    log.apply(C.WatchMissed(run_id=rid, at=T0 + 900))
    run = log.run(rid)
    assert run.state.value == "failed" and run.reason.startswith("missed: no ping within its "
                                                                 "grace (5m)")
    with pytest.raises(Refused, match="recorded missed already"):
        log.apply(C.WatchMissed(run_id=rid, at=T0 + 901))
    assert len(AL.alerts(log.sm.conn, job="w")) == 1
    # the late ping is kept, on a record of its own, saying so
    late = ping(log, "success", T0 + 960)
    assert late["stray"] and late["state"] == "succeeded"
    assert "this ping is late" in log.run(late["run_id"]).reason


def test_pings_go_to_the_oldest_open_run_and_not_to_one_far_ahead():
    log = watch_log(grace=3600.0)
    first = log.fire(T0 + 600, "w")["run_id"]
    second = log.fire(T0 + 1200, "w")["run_id"]
    assert ping(log, "success", T0 + 1210)["run_id"] == first
    assert ping(log, "success", T0 + 1220)["run_id"] == second
    third = log.fire(T0 + 1800, "w")["run_id"]
    stray = ping(log, "success", T0 + 1000)     # 800 s before it: not its ping
    assert stray["stray"] and log.run(third).state.value == "waiting"


def test_a_job_is_no_watch_and_a_watch_runs_nothing():
    log = watch_log()
    log.put("j")
    with pytest.raises(Refused, match="'j' is not a watch"):
        log.apply(C.Ping(job="j", what="success", node="n1", by="x", at=T0))
    with pytest.raises(Refused, match="is a watch: it runs nothing here"):
        log.apply(C.ManualRun(job="w", node="", at=T0))


def test_before_version_2_pings_are_refused():
    log = Log()
    with pytest.raises(Refused, match="needs cluster version 2"):
        log.apply(C.Ping(job="w", what="success", node="n1", by="x", at=T0))


def test_a_watch_removed_changed_or_given_more_grace_leaves_no_run_stuck():
    """Review of issue 35: these runs stayed open, and the leader proposed
    a refused WatchMissed for each every duty interval."""
    log = watch_log(grace=300.0)
    rid = log.fire(T0 + 600, "w")["run_id"]
    ping(log, "start", T0 + 601)
    log.apply(C.RemoveJob(name="w", at=T0 + 700))
    assert log.run(rid).state.value == "cancelled" and overdue(log.sm.conn, T0 + 10**6) == []
    log = watch_log(grace=300.0)
    rid = log.fire(T0 + 600, "w")["run_id"]
    log.put("w", schedule="*/10 * * * *", command="true")       # a job now
    assert log.apply(C.WatchMissed(run_id=rid, at=T0 + 900))["state"] == "cancelled"
    assert overdue(log.sm.conn, T0 + 10**6) == []
    log = watch_log(grace=300.0)
    rid = log.fire(T0 + 600, "w")["run_id"]
    log.put("w", schedule="*/10 * * * *", command="", watch={"grace": 3600.0})
    res = log.apply(C.WatchMissed(run_id=rid, at=T0 + 900))
    assert res["state"] == "waiting" and overdue(log.sm.conn, T0 + 901) == []
    assert overdue(log.sm.conn, T0 + 4200) == [(rid, "w")]


def test_a_ping_a_little_before_its_fire_time_counts_for_it():
    """Review of issue 35: a host clock 2 s fast pinged before the fire was
    recorded (fires are committed only a moment ahead): the ping became a
    run of its own and the fire time was recorded missed, a false alarm."""
    log = watch_log(grace=300.0)
    early = ping(log, "start", T0 + 598)
    assert early["stray"]
    rid = log.fire(T0 + 600, "w")["run_id"]
    assert log.run(rid).state.value == "running" and log.run(rid).started_at == T0 + 598
    assert log.run(early["run_id"]).state.value == "cancelled"
    assert ping(log, "success", T0 + 650)["run_id"] == rid
    assert log.run(rid).state.value == "succeeded" and overdue(log.sm.conn, T0 + 10**6) == []
    # an end ping alone, early: the fire time's record is its outcome
    ping(log, "fail", T0 + 1199, exit_code=4)
    rid = log.fire(T0 + 1200, "w")["run_id"]
    run = log.run(rid)
    assert (run.state.value, run.exit_code) == ("failed", 4)
    assert "before the fire time" in run.reason

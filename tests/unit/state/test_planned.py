"""Planned runs (`run-now --at`; state/planned.py and their commands in
state/apply_runs.py): replicated, started once, cancellable before."""

from __future__ import annotations

import pytest

from cronrd.errors import Conflict, PermissionDenied, Refused
from cronrd.state import commands as C
from cronrd.state import planned as PLN
from cronrd.state.effects import PlansChanged
from cronrd.state.forwarded import check_forwarded
from tests.unit.state.test_state import T0, Log


def at_v2() -> Log:
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    log.put()
    return log


def plan(log: Log, due: float = T0 + 3600, **kw) -> dict:
    return log.apply(C.PlanRun(job="j", due=due, by="uid 0 (root)", at=T0, **kw))["plan"]


def start(log: Log, p: dict) -> dict:
    return log.apply(C.ManualRun(job="j", node="", at=T0 + 3600, params=p["params"],
                                 key=p["key"] or f"plan-{p['plan_id']}",
                                 plan_id=p["plan_id"]))


def test_a_plan_is_kept_until_its_start_which_happens_once():
    log = at_v2()
    p = plan(log, params={})
    assert [x.plan_id for x in PLN.plans(log.sm.conn, "j")] == [p["plan_id"]]
    assert any(isinstance(e, PlansChanged) for e in log.effects)
    res = start(log, p)
    run = log.run(res["run_id"])
    assert (run.kind, run.due_at, run.fire_time) == ("manual", T0 + 3600, T0 + 3600)
    assert PLN.plans(log.sm.conn) == []
    # proposed again (a timeout, a new leader): the same run, no second one
    again = start(log, p)
    assert again == {"run_id": run.run_id, "state": run.state.value, "existing": True}


def test_a_cancelled_plan_never_starts():
    log = at_v2()
    p = plan(log)
    log.apply(C.CancelPlan(plan_id=p["plan_id"], by="uid 0 (root)", at=T0 + 1))
    with pytest.raises(Refused, match="is not planned"):
        start(log, p)
    with pytest.raises(Refused, match="it started or was cancelled"):
        log.apply(C.CancelPlan(plan_id=p["plan_id"], by="uid 0 (root)", at=T0 + 2))


def test_a_plan_in_the_past_a_used_key_and_too_many_are_refused():
    log = at_v2()
    with pytest.raises(Refused, match="is not after the request's time"):
        plan(log, due=T0)
    plan(log, key="deploy-7")
    with pytest.raises(Conflict, match="with key 'deploy-7' already"):
        plan(log, key="deploy-7", due=T0 + 7200)
    for i in range(PLN.MAX_PLANS_PER_JOB - 1):
        plan(log, due=T0 + 10 + i)
    with pytest.raises(Refused, match="as many planned runs as it may"):
        plan(log, due=T0 + 99999)


def test_at_its_time_a_conflict_is_recorded_skipped_not_lost_in_a_loop():
    log = at_v2()
    running = log.fire(T0 + 1)["run_id"]   # forbid: a run of it is running
    r = log.run(running)
    log.apply(C.RunStarted(run_id=running, token=r.token, node="n1", pid=42,
                           started_at=T0 + 1, log_path="/l"))
    p = plan(log)
    res = start(log, p)
    assert res["state"] == "skipped"
    assert log.run(res["run_id"]).reason.startswith(f"planned run {p['plan_id']} not started:")
    assert log.run(running).state == "running"
    assert PLN.plans(log.sm.conn) == []


def test_removing_the_job_removes_its_plans():
    log = at_v2()
    plan(log)
    log.apply(C.RemoveJob(name="j", at=T0 + 5))
    assert PLN.plans(log.sm.conn) == []


def test_before_version_2_a_plan_is_refused():
    log = Log()
    log.put()
    with pytest.raises(Refused, match="needs cluster version 2"):
        plan(log)


def test_a_member_may_forward_a_plan_but_never_start_one():
    check_forwarded(C.PlanRun(job="j", due=T0 + 60, by="x", at=T0), "n2")
    with pytest.raises(PermissionDenied, match="the leader's alone"):
        check_forwarded(C.ManualRun(job="j", node="", at=T0, key="plan-3", plan_id=3), "n2")


def test_a_plan_that_cannot_start_is_recorded_skipped_and_never_proposed_again():
    """Review of issue 35: a start refused left the plan in place, and the
    leader proposed it again at once, thousands of times a second."""
    log = at_v2()
    p = plan(log, key="k1")
    log.apply(C.ManualRun(job="j", node="", at=T0 + 10, key="k1"))   # the key used meanwhile
    res = log.apply(C.ManualRun(job="j", node="", at=T0 + 3600, key="k1",
                                plan_id=p["plan_id"]))
    assert res["state"] == "skipped" and "its key 'k1' was used meanwhile" in res["reason"]
    assert PLN.plans(log.sm.conn) == []

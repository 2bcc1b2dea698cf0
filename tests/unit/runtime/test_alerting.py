"""The leader's SLA watch over the replicated state: what it proposes, and
that proposing again (a new leader) adds nothing."""

from __future__ import annotations

import asyncio

from cronrd.runtime import alerting
from cronrd.state import alerts as AL
from tests.unit.state.test_state import T0, Log


def watch(log, now):
    return asyncio.run(alerting.watch_once(log.sm.conn, now, "UTC",
                                           _propose(log)))


def _propose(log):
    async def propose(cmd):
        return log.apply(cmd)
    return propose


def test_a_job_no_node_runs_misses_its_start_and_alerts_once():
    log = Log()
    log.put(schedule="0 * * * *", sla={"start_within": 300.0}, at=T0 - 1800)
    # T0 is on the hour; no leader fired it (the cluster was down)
    assert watch(log, T0 + 299) == 0
    assert watch(log, T0 + 301) == 1          # the fire time has no record at all
    (a,) = AL.alerts(log.sm.conn)
    assert (a["kind"], a["fire_time"]) == ("start_within", T0)
    assert "it has no record" in a["detail"]
    assert watch(log, T0 + 400) == 0          # a later look, or a new leader: nothing new
    assert len(AL.alerts(log.sm.conn)) == 1


def test_only_jobs_with_an_sla_are_looked_at_and_history_before_it_is_not_judged():
    log = Log()
    log.put(name="plain", schedule="* * * * *", at=T0 - 7200)
    log.put(name="kept", schedule="* * * * *", sla={"start_within": 60.0}, at=T0)
    assert [n for n, _s, _t in alerting.sla_jobs(log.sm.conn)] == ["kept"]
    watch(log, T0 + 150)
    # minute fire times from T0 (its SLA came in then), due by T0 + 150: T0 and T0 + 60
    assert sorted(a["fire_time"] for a in AL.alerts(log.sm.conn)) == [T0, T0 + 60]


def test_finish_by_is_the_next_wall_clock_time_in_the_jobs_zone():
    deadline = alerting._finish_by("06:00", alerting.resolve_timezone("Europe/Berlin"))
    # 2027-01-15T08:00:00Z is 09:00 in Berlin: the next 06:00 is the 16th, 05:00Z
    assert deadline(T0) == T0 + 21 * 3600
    assert deadline(T0 + 21 * 3600) == T0 + 21 * 3600


def test_explain_lists_the_alerts_of_a_fire_time():
    from cronrd.runtime.explain import explain
    log = Log()
    log.put(schedule="0 * * * *", sla={"start_within": 300.0}, at=T0 - 1800)
    watch(log, T0 + 301)
    (a,) = AL.alerts(log.sm.conn)
    from cronrd.state import commands as C
    log.apply(C.AckAlert(alert_id=a["alert_id"], note="cluster was down", who="root",
                         at=T0 + 400))
    out = explain(log.sm.conn, {"job": "j", "at": T0}, now=T0 + 500, default_tz="UTC")
    (step,) = [s for s in out["steps"] if s["step"] == "alert"]
    assert step["text"].startswith(f"start_within (alert {a['alert_id']}, acked by root: "
                                   "cluster was down): no attempt started within 5m")

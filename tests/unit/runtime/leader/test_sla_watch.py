"""The leader's SLA watch over the replicated state: what it proposes, and
that proposing again (a new leader) adds nothing."""

from __future__ import annotations

import asyncio

from cronrd.runtime.leader import sla_watch as alerting
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
    from cronrd.explain.explain import explain
    from cronrd.ops.admin import Explain
    log = Log()
    log.put(schedule="0 * * * *", sla={"start_within": 300.0}, at=T0 - 1800)
    watch(log, T0 + 301)
    (a,) = AL.alerts(log.sm.conn)
    from cronrd.state import commands as C
    log.apply(C.AckAlert(alert_id=a["alert_id"], note="cluster was down", who="root",
                         at=T0 + 400))
    out = explain(log.sm.conn, Explain(job="j", at=T0), now=T0 + 500, default_tz="UTC")
    (step,) = [s for s in out["steps"] if s["step"] == "alert"]
    assert step["text"].startswith(f"start_within (alert {a['alert_id']}, acked by root: "
                                   "cluster was down): no attempt started within 5m")


def test_a_run_on_all_job_that_started_and_succeeded_on_every_node_misses_nothing():
    """run_on: all: a fire time's records are one per node (target = the
    node); they are its records, not a fire time that never fired."""
    from cronrd.state import commands as C
    log = Log()
    log.put(schedule="0 * * * *", run_on={"mode": "all", "values": []},
            sla={"start_within": 300.0, "finish_within": 600.0}, at=T0 - 1800)
    for t, ends in ((T0, ("succeeded", "succeeded")), (T0 + 3600, ("succeeded", "failed"))):
        for node, state in zip(("n1", "n2"), ends):
            rid = log.fire(t, target=node, node=node)["run_id"]
            run = log.run(rid)
            log.apply(C.RunStarted(run_id=rid, token=run.token, node=node, pid=10,
                                   started_at=t + 1, log_path="/l"))
            log.apply(C.RunFinished(run_id=rid, token=run.token, node=node, state=state,
                                    exit_code=0 if state == "succeeded" else 1, signal=None,
                                    started_at=t + 1, finished_at=t + 2, log_path="/l"))
    assert watch(log, T0 + 700) == 0
    assert [a["kind"] for a in AL.alerts(log.sm.conn)] == ["failed"]  # n2's, at T0 + 3600
    # A fire time succeeds when every node's run did: n2 failed, it missed its finish.
    watch(log, T0 + 3600 + 700)
    assert [(a["fire_time"], a["kind"]) for a in AL.alerts(log.sm.conn)
            if a["kind"] != "failed"] == [(T0 + 3600, "finish_within")]


def test_finding_the_jobs_with_an_sla_does_not_read_every_definition():
    """The leader looks every 5 s: with 100,000 jobs, reading each
    definition held its loop for a quarter of a second each time."""
    from tests.unit.state.test_start_deadline import _vm_steps
    log = Log()
    log.put(name="kept", schedule="* * * * *", sla={"start_within": 60.0}, at=T0)
    conn = log.sm.conn

    def more_jobs(n, start):
        with conn:
            for i in range(start, start + n):
                conn.execute("INSERT INTO specs(name, digest, spec) VALUES(?,?,?)",
                             (f"x{i}", f"d{i}", '{"command":"true","name":"x%d",'
                              '"schedule":"* * * * *"}' % i))
                conn.execute("INSERT INTO jobs(name, digest, source, paused, cursor, "
                             "created_at, updated_at) VALUES(?,?,'/x',0,0,0,0)",
                             (f"x{i}", f"d{i}"))
    more_jobs(100, 0)
    few = _vm_steps(conn, lambda: alerting.sla_jobs(conn))
    more_jobs(5000, 100)
    many = _vm_steps(conn, lambda: alerting.sla_jobs(conn))
    assert [n for n, _s, _t in alerting.sla_jobs(conn)] == ["kept"]
    assert many <= few + 5


def test_start_within_counts_from_the_runs_due_time_with_its_jitter():
    """jitter delays each fire's start on purpose (deterministically): the
    SLA counts from when the run is due, not from the bare fire time."""
    from cronrd.schedule.delays import jitter_for
    from cronrd.state import commands as C
    log = Log()
    log.put(name="spread", schedule="0 * * * *", jitter=600.0,
            sla={"start_within": 300.0, "finish_within": 400.0}, at=T0 - 1800)
    due = T0 + jitter_for("spread", T0, 600.0)
    assert due - T0 > 500                       # later than start_within, on purpose
    rid = log.fire(T0, name="spread", due_at=due)["run_id"]
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=10,
                           started_at=due + 1, log_path="/l"))
    log.apply(C.RunFinished(run_id=rid, token=run.token, node="n1", state="succeeded",
                            exit_code=0, signal=None, started_at=due + 1,
                            finished_at=due + 2, log_path="/l"))
    assert watch(log, T0 + 1500) == 0
    # the next fire time, never fired: a miss from its own due time on
    nxt = T0 + 3600 + jitter_for("spread", T0 + 3600, 600.0)
    assert watch(log, nxt + 299) == 0
    assert watch(log, nxt + 301) == 1


def test_a_failure_streak_longer_than_the_window_looked_at_is_one_alert():
    """failure_tolerance is keyed by the streak's first failure: a streak
    that began before the window the watch reads (two days) is the same
    streak as the window slides, not a new alert each hour."""
    log = Log()
    log.put(schedule="0 * * * *", sla={"failure_tolerance": 3}, at=T0 - 1800)
    for h in range(80):
        t = T0 + h * 3600
        rid = log.fire(t)["run_id"]
        log.finish(rid, state="failed", exit_code=1, at=t + 10)
        watch(log, t + 60)
    kinds = [a["kind"] for a in AL.alerts(log.sm.conn) if a["kind"] != "failed"]
    assert kinds == ["failure_tolerance"]


def test_a_paused_job_is_not_stale_and_after_its_resume_gets_its_whole_span():
    # Before: stale_after alerted while the operator had the job paused (no
    # success was expected), and again at once on its resume.
    from cronrd.state import commands as C
    log = Log()
    log.put(schedule="@yearly", sla={"stale_after": 600.0}, at=T0)
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 10, note="migration", by="root"))
    assert watch(log, T0 + 5000) == 0
    log.apply(C.SetPaused(name="j", paused=False, at=T0 + 5000, note="", by="root"))
    assert watch(log, T0 + 5599) == 0           # 600 s from the resume
    assert watch(log, T0 + 5601) == 1
    (a,) = AL.alerts(log.sm.conn)
    assert a["kind"] == "stale_after"
    # a maintenance pause of every job (`pause --all`) is a pause too
    log.put(name="k", schedule="@yearly", sla={"stale_after": 600.0}, at=T0 + 6000)
    log.apply(C.SetPaused(name="", paused=True, at=T0 + 6001, note="", by="root"))
    assert watch(log, T0 + 9000) == 0


def test_a_resume_of_a_job_that_was_not_paused_puts_nothing_off():
    # Found in review: any resume reset the stale clock, so a deploy script
    # running `cronrd resume j` every time silenced stale_after for ever.
    from cronrd.state import commands as C
    log = Log()
    log.put(schedule="@yearly", sla={"stale_after": 600.0}, at=T0)
    log.apply(C.SetPaused(name="j", paused=False, at=T0 + 500, note="", by="deploy"))
    log.apply(C.SetPaused(name="", paused=False, at=T0 + 550, note="", by="deploy"))
    assert watch(log, T0 + 601) == 1           # 600 s from when the SLA came in

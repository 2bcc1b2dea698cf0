"""`cronrd explain` assembled from a state in memory (cronrd/runtime/control/explain.py):
the trail and the verdict for a run that succeeded, one that failed after
retries, a skip by pause with its note, catch-up skips and gaps, a time that
is no fire time, the daylight-saving rules in Europe/Berlin, and fire times
still to come (paused, no eligible node)."""

from __future__ import annotations

import calendar

import pytest

from cronrd.errors import RequestError, UsageError
from cronrd.explain.explain import (FOLLOWER_NODES, STEPS, Step, explain, nodes_from_state,
                                    prev_fire)
from cronrd.decisions.placement import NodeView
from cronrd.ops.admin import Explain
from cronrd.schedule import make_trigger, parse_schedule
from cronrd.schedule.catchup import window_reason
from cronrd.state import commands as C
from tests.unit.state.test_state import T0, Log

RETRY_ONCE = {"max": 1, "delay": 1.0, "backoff": 1.0, "max_delay": 1.0, "jitter": 0.0}


def utc(*parts) -> int:
    return calendar.timegm(parts + (0,) * (6 - len(parts)))


def trail(log, now, **args):
    return explain(log.sm.conn, Explain(**args), now=now, default_tz="UTC")


def steps(res, name):
    return [s for s in res["steps"] if s["step"] == name]


def text(res, name):
    return " | ".join(s["text"] for s in steps(res, name))


def test_a_run_that_succeeded():
    log = Log()
    log.put("a")
    r = log.fire(T0 + 1, "a")
    log.finish(r["run_id"])
    res = trail(log, T0 + 5, job="a", at="2027-01-15T08:00:01Z")
    assert res["at"] == "2027-01-15T08:00:01Z" and res["future"] is False
    assert steps(res, "schedule")[0]["fire_time"] is True
    assert text(res, "paused") == "no" and text(res, "maintenance") == "off"
    assert text(res, "placement") == "run_on: any node: placed on n1"
    assert text(res, "record").startswith(f"run {r['run_id']} attempt 1 (scheduled) on node "
                                          "n1: succeeded, started 2027-01-15T08:00:01Z")
    assert res["verdict"] == {"outcome": "ran", "text": "ran (succeeded)"}


def test_a_run_that_failed_after_its_retries_lists_every_attempt():
    log = Log()
    log.put("b", retries=RETRY_ONCE)
    r = log.fire(T0 + 1, "b")
    log.finish(r["run_id"], state="failed", exit_code=3)
    retry = log.run(r["run_id"] + 1)
    log.finish(retry.run_id, state="failed", exit_code=4)
    res = trail(log, T0 + 10, job="b", at=T0 + 1)
    lines = [s["text"] for s in steps(res, "record")]
    assert len(lines) == 2
    assert "attempt 1 (scheduled) on node n1: failed exit 3" in lines[0]
    assert "attempt 2 (retry) on node n1: failed exit 4" in lines[1]
    assert res["verdict"] == {"outcome": "ran", "text": "ran (failed after 2 attempts)"}


def test_a_skip_by_pause_names_who_paused_it_and_why_after_the_resume():
    log = Log()
    log.put("a")
    log.apply(C.SetPaused(name="a", paused=True, at=T0 + 0.5, note="disk full",
                          by="alice (uid 1000)"))
    log.fire(T0 + 1, "a")
    log.apply(C.SetPaused(name="a", paused=False, at=T0 + 3, by="bob"))
    res = trail(log, T0 + 10, job="a", at=T0 + 1)
    assert text(res, "paused") == ("paused at 2027-01-15T08:00:01Z by alice (uid 1000) since "
                                   "2027-01-15T08:00:00.500Z: disk full, resumed at "
                                   "2027-01-15T08:00:03Z")
    assert steps(res, "paused")[0]["note"] == "disk full"
    assert res["verdict"]["outcome"] == "skipped"
    assert res["verdict"]["text"].startswith("skipped: paused")
    # the maintenance pause the same way
    log.apply(C.SetPaused(name="", paused=True, at=T0 + 4, note="kernel", by="root"))
    log.fire(T0 + 5, "a")
    res = trail(log, T0 + 10, job="a", at=T0 + 5)
    assert text(res, "maintenance").startswith("on at 2027-01-15T08:00:05Z by root")
    assert "kernel" in res["verdict"]["text"]


def test_a_catch_up_skip_and_a_gap():
    log = Log()
    log.put("c", schedule="0 * * * *", catchup="latest", catchup_window=3600.0)
    hour = 3600
    base = T0 - T0 % hour   # 08:00Z
    log.apply(C.RecordGap(job="c", first=base + hour, last=base + 5 * hour, count=5,
                          reason="catchup: superseded by the later fire at "
                                 "2027-01-15T15:00:00Z (catchup: latest)", at=base + 7 * hour))
    log.fire(base + 6 * hour, "c", kind="catchup", skip_reason=window_reason(base + 6 * hour,
                                                                            3600.0))
    now = base + 7 * hour + 10
    res = trail(log, now, job="c", at=base + 3 * hour)
    assert text(res, "gap").startswith("5 fire times from 2027-01-15T09:00:00Z to "
                                       "2027-01-15T13:00:00Z skipped together")
    assert text(res, "record") == ""   # the gap is the record
    assert text(res, "catchup").endswith("the fire time was skipped in the gap above")
    assert res["verdict"]["outcome"] == "skipped"
    assert res["verdict"]["text"].startswith("skipped (in a gap of 5 fire times): catchup:")
    res = trail(log, now, job="c", at=base + 6 * hour)
    assert "cronrd was not scheduling at 2027-01-15T14:00:00Z" in text(res, "catchup")
    assert res["verdict"]["text"] == ("skipped: catchup: missed at 2027-01-15T14:00:00Z, "
                                      "older than catchup_window 1h")


def test_a_fire_time_the_scheduler_has_not_reached_says_what_catch_up_would_do():
    log = Log()
    log.put("c", schedule="0 * * * *", catchup="latest", catchup_window=3600.0)
    base = T0 - T0 % 3600
    # daemon down since creation; now 5 hours later: only the latest runs
    res = trail(log, base + 5 * 3600 + 60, job="c", at=base + 2 * 3600)
    assert "not handled yet" in text(res, "catchup")
    assert res["verdict"]["outcome"] == "not_handled"
    assert "superseded by the later fire at 2027-01-15T13:00:00Z" in res["verdict"]["text"]
    res = trail(log, base + 5 * 3600 + 60, job="c", at=base + 5 * 3600)
    assert res["verdict"]["text"].endswith("would run late")


def test_a_time_that_is_no_fire_time_names_the_nearest_ones():
    log = Log()
    log.put("d", schedule="30 2 * * *")
    res = trail(log, utc(2027, 2, 1), job="d", at="2027-01-20T02:31:00Z")
    s = steps(res, "schedule")[0]
    assert s["fire_time"] is False
    assert s["previous"] == "2027-01-20T02:30:00Z" and s["next"] == "2027-01-21T02:30:00Z"
    assert "nearest fire times before: 2027-01-20T02:30:00Z" in s["text"]
    assert res["verdict"] == {"outcome": "not_a_fire_time",
                              "text": "no run: T is not a fire time of the schedule"}
    # an offset in --at is honoured
    res = trail(log, utc(2027, 2, 1), job="d", at="2027-01-20T03:30:00+01:00")
    assert steps(res, "schedule")[0]["fire_time"] is True


def test_before_the_job_existed():
    log = Log()
    log.put("d", schedule="30 2 * * *", at=utc(2027, 1, 20, 12))
    res = trail(log, utc(2027, 2, 1), job="d", at="2027-01-20T02:30:00Z")
    assert "is before it existed" in text(res, "job")
    assert res["verdict"]["outcome"] == "not_a_fire_time"


def test_daylight_saving_gap_in_berlin_moves_a_fixed_time_to_the_jump():
    log = Log()
    log.put("b", schedule="30 2 * * *", timezone="Europe/Berlin", at=utc(2026, 3, 1))
    jump = utc(2026, 3, 29, 1)          # 02:00 CET -> 03:00 CEST
    r = log.fire(jump, "b")
    log.finish(r["run_id"])
    now = utc(2026, 4, 1)
    res = trail(log, now, job="b", at="2026-03-29T01:00:00Z")
    s = steps(res, "schedule")[0]
    assert s["fire_time"] is True and s["dst"] == "moved"
    assert ("02:30 does not exist that day (clocks jump from 02:00 CET to 03:00 CEST); a "
            "fixed-time schedule runs a time the jump skips once, at the jump") in s["text"]
    assert res["verdict"]["outcome"] == "ran"
    # the wall clock asked with --local, which does not exist that day: the jump
    res = trail(log, now, job="b", at="2026-03-29T02:30", local=True)
    assert res["at"] == "2026-03-29T01:00:00Z"
    assert text(res, "time").startswith("2026-03-29 02:30:00 does not exist in Europe/Berlin "
                                        "(clocks jump from 02:00 CET to 03:00 CEST")
    # a wildcard schedule does not fire in the skipped hour
    log.put("w", schedule="*/30 * * * *", timezone="Europe/Berlin", at=utc(2026, 3, 1))
    res = trail(log, now, job="w", at="2026-03-29T01:00:00Z")
    assert steps(res, "schedule")[0]["fire_time"] is True     # 03:00 CEST itself
    assert steps(res, "schedule")[0].get("dst") is None


def test_daylight_saving_overlap_in_berlin_runs_a_fixed_time_once():
    log = Log()
    log.put("b", schedule="30 2 * * *", timezone="Europe/Berlin", at=utc(2026, 10, 1))
    now = utc(2026, 11, 1)
    res = trail(log, now, job="b", at="2026-10-25T02:30", local=True)
    assert res["at"] == "2026-10-25T00:30:00Z"        # the first pass (CEST)
    assert "occurs twice" in text(res, "time")
    s = steps(res, "schedule")[0]
    assert s["fire_time"] is True and s["dst"] == "repeated"
    res = trail(log, now, job="b", at="2026-10-25T01:30:00Z")   # 02:30 CET, the second pass
    s = steps(res, "schedule")[0]
    assert s["fire_time"] is False and s["dst"] == "merged"
    assert "runs once, in the first pass, at 2026-10-25T00:30:00Z" in s["text"]
    assert res["verdict"]["outcome"] == "not_a_fire_time"


def test_prev_fire_across_the_jump():
    trig = make_trigger(parse_schedule("30 2 * * *"), "Europe/Berlin")
    assert prev_fire(trig, utc(2026, 3, 30)) == utc(2026, 3, 29, 1)
    assert prev_fire(trig, utc(2026, 3, 29, 1)) == utc(2026, 3, 28, 1, 30)
    assert prev_fire(make_trigger(parse_schedule("@every 1h"), "UTC"), T0 + 1) == T0


def test_next_while_paused_would_be_skipped():
    log = Log()
    log.put("p", schedule="0 9 * * *")
    log.apply(C.SetPaused(name="p", paused=True, at=T0 + 1, note="migrating", by="carol"))
    res = trail(log, T0 + 60, job="p", next=True)
    assert res["at"] == "2027-01-15T09:00:00Z" and res["future"] is True
    assert text(res, "paused").startswith("paused now by carol since 2027-01-15T08:00:01Z: "
                                          "migrating")
    assert res["verdict"] == {"outcome": "would_skip", "text": "would be skipped now: paused"}
    log.apply(C.SetPaused(name="p", paused=False, at=T0 + 2))
    res = trail(log, T0 + 60, job="p", next=True)
    assert res["verdict"]["outcome"] == "would_run"


def test_future_placement_no_node_with_the_tags():
    log = Log()
    log.put("g", schedule="0 9 * * *", run_on={"mode": "tags", "values": ["gpu"]})
    nodes = [NodeView("a", True, "up", frozenset({"ssd"})),
             NodeView("b", False, "up", frozenset({"gpu"}), "no answer for 12.0s")]
    res = explain(log.sm.conn, Explain(job="g", next=True), now=T0, default_tz="UTC",
                  nodes=nodes)
    assert text(res, "placement") == ("run_on: tags gpu: no eligible node is up now "
                                      "(b: no answer for 12.0s)")
    assert res["verdict"]["text"].startswith("would be skipped now: no eligible node is up")
    res = explain(log.sm.conn, Explain(job="g", next=True), now=T0, default_tz="UTC",
                  nodes=nodes[:1])
    assert text(res, "placement") == "run_on: tags gpu: no member has tags gpu"
    nodes[1] = NodeView("b", True, "up", frozenset({"gpu"}))
    res = explain(log.sm.conn, Explain(job="g", next=True), now=T0, default_tz="UTC",
                  nodes=nodes)
    assert text(res, "placement") == "run_on: tags gpu: eligible now: b"
    assert res["verdict"]["outcome"] == "would_run"


def test_a_disabled_job_would_be_skipped():
    log = Log()
    log.put("x", schedule="0 9 * * *", enabled=False)
    res = trail(log, T0, job="x", next=True)
    assert "disabled" in text(res, "job")
    assert res["verdict"]["text"] == ("would be skipped now: disabled: enabled is false in "
                                      "the job file")


def test_without_a_time_the_latest_fire_time_is_explained():
    log = Log()
    log.put("a")
    r = log.fire(T0 + 1, "a")
    log.finish(r["run_id"])
    res = trail(log, T0 + 1.5, job="a")
    assert res["at"] == "2027-01-15T08:00:01Z" and res["verdict"]["outcome"] == "ran"


def test_a_removed_job_keeps_its_trail_of_records():
    log = Log()
    log.put("a")
    r = log.fire(T0 + 1, "a")
    log.finish(r["run_id"])
    log.apply(C.RemoveJob(name="a", at=T0 + 2))
    res = trail(log, T0 + 5, job="a", at=T0 + 1)
    assert text(res, "job").startswith("a is no longer defined")
    assert res["verdict"]["outcome"] == "ran"
    with pytest.raises(RequestError, match="no schedule to look at"):
        trail(log, T0 + 5, job="a", next=True)


def test_bad_requests():
    log = Log()
    log.put("a")
    with pytest.raises(RequestError, match="no job named 'nosuch'"):
        trail(log, T0, job="nosuch")
    with pytest.raises(UsageError, match="not both"):
        trail(log, T0, job="a", at=T0, next=True)
    with pytest.raises(UsageError, match="--at"):
        trail(log, T0, job="a", at="yesterday")
    with pytest.raises(UsageError, match="has an offset"):
        trail(log, T0, job="a", at="2027-01-15T08:00:00Z", local=True)


def test_step_providers_are_an_extension_point():
    log = Log()
    log.put("a")

    def gate(subject):
        return [Step("gate", "upstream extract: no success since T", blocks="upstream")]
    res = explain(log.sm.conn, Explain(job="a", next=True), now=T0, default_tz="UTC",
                  steps=STEPS[:-4] + [gate] + STEPS[-4:])
    assert [s["step"] for s in res["steps"]][-3:] == ["gate", "placement", "record"]
    assert res["verdict"]["text"] == "would be skipped now: upstream"


def test_a_definition_changed_after_t_is_said():
    log = Log()
    log.put("a")
    r = log.fire(T0 + 1, "a")
    log.finish(r["run_id"])
    log.put("a", at=T0 + 100, command="echo new")
    res = trail(log, T0 + 200, job="a", at=T0 + 1)
    assert "its definition in force dates from 2027-01-15T08:01:40Z" in text(res, "job")
    log.put("b")
    res = trail(log, T0 + 200, job="b", at=T0 + 150)
    assert "dates from" not in text(res, "job")


def test_a_record_under_an_older_schedule_is_still_shown():
    log = Log()
    log.put("a", schedule="0 9 * * *")
    nine = utc(2027, 1, 16, 9)
    r = log.fire(nine, "a")
    log.finish(r["run_id"])
    log.put("a", schedule="0 10 * * *", at=nine + 60)
    res = trail(log, nine + 3600 * 5, job="a", at=nine)
    assert steps(res, "schedule")[0]["fire_time"] is False
    assert "the schedule or zone changed since" in text(res, "schedule")
    assert res["verdict"]["outcome"] == "ran"


def test_a_wildcard_schedule_at_a_wall_time_that_does_not_exist():
    log = Log()
    log.put("w", schedule="*/30 * * * *", timezone="Europe/Berlin", at=utc(2026, 3, 1))
    res = trail(log, utc(2026, 4, 1), job="w", at="2026-03-29T02:30", local=True)
    assert "a wildcard schedule does not fire at wall times that do not exist" in \
        text(res, "schedule")


def test_a_fire_committed_ahead_and_skipped_by_a_pause_resumed_before_its_time():
    """The fire at T+1 is committed ahead; the pause at T+0.5 skips it at
    once; the resume at T+0.8 comes before T+1: the pause is still named."""
    log = Log()
    log.put("a")
    log.fire(T0 + 1, "a", at=T0 + 0.3)
    log.apply(C.SetPaused(name="a", paused=True, at=T0 + 0.5, note="oops", by="dave"))
    log.apply(C.SetPaused(name="a", paused=False, at=T0 + 0.8))
    res = trail(log, T0 + 5, job="a", at=T0 + 1)
    assert text(res, "paused") == (
        "paused when the fire time was decided ahead of it (2027-01-15T08:00:00.500Z) by "
        "dave since 2027-01-15T08:00:00.500Z: oops, resumed at 2027-01-15T08:00:00.800Z")
    assert res["verdict"]["text"].startswith("skipped: paused")


def test_members_as_last_announced_when_health_is_not_known_here():
    log = Log()
    log.put("g", schedule="0 9 * * *", run_on={"mode": "tags", "values": ["gpu"]})
    log.apply(C.NodeInfo(node="a", state="up", addr="a:1", tags=["gpu"], at=T0))
    log.apply(C.NodeInfo(node="b", state="draining", addr="b:1", tags=["gpu"], at=T0))
    conn = log.sm.conn
    res = explain(conn, Explain(job="g", next=True), now=T0, default_tz="UTC",
                  nodes=nodes_from_state(conn), nodes_note=FOLLOWER_NODES)
    assert text(res, "placement") == (f"run_on: tags gpu: eligible now ({FOLLOWER_NODES}): a "
                                      "(not: b: draining)")


@pytest.mark.parametrize("policy, window, expect", [
    ("all", 3 * 3600.0, "would run late"),
    ("all", 3600.0, "older than catchup_window 1h"),
    ("none", 86400.0, "catchup: none"),
    ("latest", 86400.0, "superseded by the later fire at 2027-01-15T13:00:00Z"),
])
def test_what_each_catch_up_policy_would_do_with_a_fire_time_not_reached_yet(policy, window,
                                                                              expect):
    log = Log()
    log.put("c", schedule="0 * * * *", catchup=policy, catchup_window=window)
    base = T0 - T0 % 3600
    res = trail(log, base + 5 * 3600 + 60, job="c", at=base + 3 * 3600)
    assert res["verdict"]["outcome"] == "not_handled"
    assert expect in res["verdict"]["text"]


def test_a_queued_run_says_what_it_waits_for_and_a_future_fire_its_turn():
    log = Log()
    log.put("q", concurrency="queue")
    a = log.fire(T0 + 1, "q")["run_id"]
    run = log.run(a)
    log.apply(C.RunStarted(run_id=a, token=run.token, node="n1", pid=7, started_at=T0 + 1,
                           log_path="/l"))
    b = log.fire(T0 + 2, "q")["run_id"]
    res = trail(log, T0 + 2.5, job="q", at=T0 + 2)
    assert text(res, "overlap") == (f"concurrency: queue: waiting for run {a} (started "
                                    "2027-01-15T08:00:01Z) to end: concurrency: queue")
    assert res["verdict"]["outcome"] == "waiting"
    res = trail(log, T0 + 2.5, job="q", next=True)
    assert text(res, "overlap") == ("concurrency: queue; 1 in flight and 1 waiting now: a "
                                    "fire at T waits for its turn")
    log.finish(a, at=T0 + 3)
    res = trail(log, T0 + 3.5, job="q", at=T0 + 2)
    assert text(res, "overlap").startswith(f"concurrency: queue: waited in the queue until "
                                           f"run {a} ended")
    assert log.run(b).state == "pending"


def test_a_child_says_its_upstream_wait_and_then_its_queue_wait():
    log = Log()
    log.put("a")
    log.put("c", schedule="* * * * * *", depends_on=[{"job": "a"}], wait_for_upstream=60.0,
            concurrency="queue")
    ra = log.fire(T0 + 1, "a")["run_id"]
    log.finish(ra)
    c1 = log.fire(T0 + 2, "c")["run_id"]
    run = log.run(c1)
    log.apply(C.RunStarted(run_id=c1, token=run.token, node="n1", pid=7, started_at=T0 + 2,
                           log_path="/l"))
    c2 = log.fire(T0 + 3, "c")["run_id"]        # nothing new from a: waits for it
    res = trail(log, T0 + 3.5, job="c", at=T0 + 3)
    assert text(res, "upstream") == ("depends_on a, trigger_rule: all_succeeded: waiting for "
                                     "its parents (upstream_not_ready:a) until "
                                     "2027-01-15T08:01:03Z (wait_for_upstream)")
    assert text(res, "overlap") == "concurrency: queue (nothing overlapped)"
    # an upstream wait is not counted in the queue
    assert "1 in flight and 0 waiting now" in text(trail(log, T0 + 3.5, job="c", next=True),
                                                   "overlap")
    rb = log.fire(T0 + 4, "a")["run_id"]
    log.finish(rb)                               # its gate opens; c1 still runs: the queue
    res = trail(log, T0 + 5.5, job="c", at=T0 + 3)
    assert text(res, "upstream").startswith(f"depends_on a, trigger_rule: all_succeeded: gate "
                                            f"opened with a run {rb} (succeeded")
    assert text(res, "overlap") == (f"concurrency: queue: waiting for run {c1} (started "
                                    "2027-01-15T08:00:02Z) to end: concurrency: queue")
    assert res["verdict"]["outcome"] == "waiting"
    assert log.run(c2).state == "waiting"


# -- an @after child: generations, not fire times -------------------------------------------
def _etl(log, **over):
    """extract and transform, scheduled; load @after both."""
    log.put("extract")
    log.put("transform")
    log.put("load", schedule="@after", depends_on=[{"job": "extract"}, {"job": "transform"}],
            **over)


def test_an_after_child_at_the_fire_time_of_its_generation():
    log = Log()
    _etl(log)
    e = log.fire(T0 + 1, "extract")["run_id"]
    log.finish(e)
    t = log.fire(T0 + 2, "transform")["run_id"]
    log.finish(t)                                  # the generation: load's fire time T0 + 2
    (load,) = [r for r in log.sm.conn.execute("SELECT run_id FROM runs WHERE job='load'")]
    res = trail(log, T0 + 5, job="load", at="2027-01-15T08:00:02Z")
    assert text(res, "schedule").startswith("@after: 2027-01-15T08:00:02Z (2027-01-15 "
                                            "08:00:02 UTC) is the fire time of 1 generation")
    assert text(res, "upstream") == ("depends_on extract, transform, trigger_rule: "
                                     "all_succeeded; @after: one run per generation of their "
                                     "outcomes")
    assert [s["text"] for s in steps(res, "parent")] == [
        f"run {load[0]} (attempt 1) consumed extract run {e}: succeeded (fire time "
        "2027-01-15T08:00:01Z)",
        f"run {load[0]} (attempt 1) consumed transform run {t}: succeeded (fire time "
        "2027-01-15T08:00:02Z)"]
    assert text(res, "gate") == (f"run {load[0]} (attempt 1): trigger_rule all_succeeded "
                                 "opened the gate (every parent succeeded): the run was made "
                                 "(attempts below)")
    assert text(res, "record").startswith(f"run {load[0]} attempt 1 (upstream): pending")
    assert res["verdict"]["outcome"] == "waiting"
    # with no time: the latest generation, and what the next one waits for
    res = trail(log, T0 + 5, job="load")
    assert res["at"] == "2027-01-15T08:00:02Z"
    assert text(res, "next") == ("next generation waits for: extract, transform; fires when "
                                 "extract and transform finish; runs if every parent "
                                 "succeeded (trigger_rule all_succeeded) (`cronrd explain "
                                 "load --next`)")
    # placement and attempts are the usual steps
    log.apply(C.AssignRun(run_id=load[0], node="n1", at=T0 + 3))
    log.finish(load[0], state="failed", exit_code=1, at=T0 + 4)
    res = trail(log, T0 + 5, job="load", at=T0 + 2)
    assert text(res, "placement") == "run_on: any node: placed on n1"
    assert res["verdict"] == {"outcome": "ran", "text": "ran (failed after 1 attempt)"}
    # the parents' reruns are a new generation: a new attempt of the same fire time
    for job, ft in (("extract", T0 + 1), ("transform", T0 + 2)):
        rerun = log.apply(C.Rerun(job=job, fire_time=ft, at=T0 + 10))["run_id"]
        log.apply(C.AssignRun(run_id=rerun, node="n1", at=T0 + 10))
        log.finish(rerun, at=T0 + 11)
    res = trail(log, T0 + 12, job="load", at=T0 + 2)
    assert "(2 generations at T: a parent's rerun makes a new attempt" in text(res, "upstream")
    second = max(x for (x,) in log.sm.conn.execute("SELECT run_id FROM runs WHERE job='load'"))
    assert f"run {second} (attempt 2) consumed transform run {rerun}: succeeded" in \
        text(res, "parent")
    assert [s["text"].split(":")[0] for s in steps(res, "record")] == [
        f"run {load[0]} attempt 1 (upstream) on node n1", f"run {second} attempt 2 (upstream)"]


def test_an_after_child_skipped_by_a_failed_parent_and_held_by_a_pause():
    log = Log()
    _etl(log, on_upstream_failure="skip")
    log.finish(log.fire(T0 + 1, "extract")["run_id"])
    t = log.fire(T0 + 2, "transform")["run_id"]
    log.finish(t, state="failed", exit_code=2)
    res = trail(log, T0 + 5, job="load", at=T0 + 2)
    assert f"consumed transform run {t}: failed" in text(res, "parent")
    assert text(res, "gate").endswith("trigger_rule all_succeeded closed the gate: "
                                      "upstream_failed:transform@2027-01-15T08:00:02Z; "
                                      "recorded skipped (on_upstream_failure: skip)")
    assert res["verdict"] == {"outcome": "skipped", "text": "skipped: upstream_failed:"
                              "transform@2027-01-15T08:00:02Z"}
    # paused when the next generation came: the gate opened, the pause held it
    log.apply(C.SetPaused(name="load", paused=True, at=T0 + 5, note="db upgrade", by="alice"))
    log.finish(log.fire(T0 + 6, "extract")["run_id"])
    log.finish(log.fire(T0 + 7, "transform")["run_id"])
    res = trail(log, T0 + 9, job="load", at=T0 + 7)
    assert text(res, "paused") == ("paused when its generation was decided "
                                   "(2027-01-15T08:00:08Z) by alice since "
                                   "2027-01-15T08:00:05Z: db upgrade, still paused")
    assert text(res, "gate").endswith("opened the gate (every parent succeeded), but it was "
                                      "held: paused: `cronrd resume` re-enables the job")
    assert res["verdict"]["outcome"] == "skipped"


def test_an_after_child_at_a_time_with_no_generation_names_the_nearest():
    log = Log()
    _etl(log)
    for base in (0, 10):
        log.finish(log.fire(T0 + base + 1, "extract")["run_id"])
        log.finish(log.fire(T0 + base + 2, "transform")["run_id"], at=T0 + base + 3)
    res = trail(log, T0 + 20, job="load", at=T0 + 5)
    s = steps(res, "schedule")[0]
    assert s["fire_time"] is False
    assert s["records_before"] == ["2027-01-15T08:00:02Z"]
    assert s["records_after"] == ["2027-01-15T08:00:12Z"]
    assert "an @after child has no fire times of its own" in s["text"]
    assert s["text"].endswith("nearest record fire times before: 2027-01-15T08:00:02Z; "
                              "after: 2027-01-15T08:00:12Z")
    assert text(res, "placement") == "run_on: any node"
    assert res["verdict"] == {"outcome": "not_a_fire_time", "text": "no run: no generation "
                              "of its parents has fire time T (@after)"}


def test_an_after_childs_gate_now_says_what_it_waits_for():
    log = Log()
    _etl(log)
    res = trail(log, T0 + 1, job="load")          # no generation yet: its gate now
    assert res["at"] is None and res["future"] is True
    assert [s["text"] for s in steps(res, "parent")] == ["extract: no outcome yet",
                                                         "transform: no outcome yet"]
    e = log.fire(T0 + 1, "extract")["run_id"]
    res = trail(log, T0 + 1.5, job="load", next=True)
    assert text(res, "parent").startswith(f"extract: no outcome yet; active now: run {e} "
                                          "(assigned)")
    log.finish(e)
    res = trail(log, T0 + 3, job="load", next=True)
    assert [s["text"] for s in steps(res, "parent")] == [
        f"extract: new outcome not consumed yet: run {e} succeeded (fire time "
        "2027-01-15T08:00:01Z)", "transform: no outcome yet"]
    assert text(res, "gate") == ("next generation waits for: transform; fires when transform "
                                 "finishes; runs if every parent succeeded (trigger_rule "
                                 "all_succeeded)")
    assert steps(res, "gate")[0]["waits_for"] == ["transform"]
    assert text(res, "record") == ""
    assert res["verdict"] == {"outcome": "waits_for_upstream",
                              "text": "next generation waits for: transform; fires when "
                                      "transform finishes; runs if every parent succeeded "
                                      "(trigger_rule all_succeeded)"}
    # paused now: the next generation would be recorded skipped
    log.apply(C.SetPaused(name="load", paused=True, at=T0 + 3))
    res = trail(log, T0 + 4, job="load", next=True)
    assert "the next generation is recorded skipped unless `cronrd resume load`" in \
        text(res, "paused")
    assert res["verdict"]["text"].endswith("; then would be skipped now: paused")
    # the state is only read
    assert log.sm.conn.execute("SELECT new_run_id FROM dep_cursors WHERE child='load' AND "
                               "parent='extract'").fetchall() == [(e,)]


def test_an_after_child_with_any_succeeded_and_a_fresh_within_parent():
    log = Log()
    log.put("ref")
    log.put("feed")
    log.put("use", schedule="@after", trigger_rule="any_succeeded",
            depends_on=[{"job": "ref", "within": 3600.0}, {"job": "feed"}])
    log.finish(log.fire(T0 + 1, "ref")["run_id"])   # fires use at once (any_succeeded)
    res = trail(log, T0 + 5, job="use", next=True)
    lines = [s["text"] for s in steps(res, "parent")]
    assert lines[0].startswith("ref: a success within 1h: run 1")
    assert lines[1] == "feed: no outcome yet"
    assert text(res, "gate") == ("next generation waits for: feed; runs as soon as feed "
                                 "succeeds (trigger_rule any_succeeded)")
    res = trail(log, T0 + 5, job="use", at=T0 + 1)
    assert text(res, "gate").endswith("opened the gate (ref succeeded): the run was made "
                                      "(attempts below)")
    assert "feed is not in this generation" in text(res, "parent")


def test_a_scheduled_childs_next_fire_says_its_parents_now():
    log = Log()
    log.put("a")
    log.put("c", schedule="0 * * * *", depends_on=[{"job": "a"}])
    res = trail(log, T0 + 5, job="c", next=True)
    assert text(res, "upstream") == ("depends_on a, trigger_rule: all_succeeded: its gate is "
                                     "looked at when T fires; if it fired now: nothing new "
                                     "from a: at T it would be recorded skipped "
                                     "(upstream_not_ready:a; wait_for_upstream is 0)")
    assert text(res, "parent") == "a: no outcome yet"
    assert all("blocks" not in s for s in steps(res, "parent") + steps(res, "upstream"))
    log.finish(log.fire(T0 + 1, "a")["run_id"])
    res = trail(log, T0 + 5, job="c", next=True)
    assert "if it fired now: the gate is open (trigger_rule all_succeeded): it would run" in \
        text(res, "upstream")
    log.put("w", schedule="0 * * * *", depends_on=[{"job": "a"}], wait_for_upstream=600.0)
    res = trail(log, T0 + 5, job="w", next=True)
    assert text(res, "upstream").endswith("if it fired now: nothing new from a: at T it would "
                                          "wait for it up to 10m (wait_for_upstream)")


def test_an_after_child_at_a_time_to_come_is_no_generation_not_a_fire_to_come():
    log = Log()
    _etl(log)
    log.apply(C.SetPaused(name="load", paused=True, at=T0 + 1))
    res = trail(log, T0 + 5, job="load", at=T0 + 3600)
    assert res["future"] is False
    assert text(res, "paused") == ""   # no generation to hold (a held one has a record)
    assert res["verdict"]["outcome"] == "not_a_fire_time"
    assert "no generation has this fire time" == steps(res, "schedule")[0]["blocks"]


def test_an_after_child_with_concurrency_queue_says_its_generation_waits_in_the_queue():
    log = Log()
    log.put("a")
    log.put("c", schedule="@after", depends_on=[{"job": "a"}], concurrency="queue")
    log.finish(log.fire(T0 + 1, "a")["run_id"])
    first = log.sm.conn.execute("SELECT run_id FROM runs WHERE job='c'").fetchall()[0][0]
    log.apply(C.AssignRun(run_id=first, node="n1", at=T0 + 2))
    log.finish(log.fire(T0 + 3, "a")["run_id"])   # c's first run is still assigned: queued
    res = trail(log, T0 + 5, job="c", at=T0 + 3)
    assert text(res, "gate").endswith("opened the gate (every parent succeeded), then it waits "
                                      "in its queue (overlap above)")
    assert text(res, "overlap").startswith(f"concurrency: queue: waiting for run {first}")
    assert res["verdict"]["outcome"] == "waiting"


def test_the_pool_step_says_what_a_record_waited_for_and_how_full_the_pool_is():
    log = Log()
    log.apply(C.SetPools(pools=[["db", 1, "cluster"]], at=T0))
    log.put("a", pool="db")
    log.put("b", pool="db", priority=3, start_deadline=300.0)
    log.fire(T0 + 1, "a")
    w = log.fire(T0 + 1, "b")["run_id"]
    res = trail(log, T0 + 2, job="b", at=T0 + 1)
    assert text(res, "pool") == ("pool db (1 slot); takes 1, priority 3, start_deadline 5m; "
                                 f"run {w} waits: pool db: 1/1 slots in use")
    names = [s["step"] for s in res["steps"]]
    assert names.index("upstream" if "upstream" in names else "overlap") < \
        names.index("pool") < names.index("placement")
    log.finish(1, at=T0 + 5)
    res = trail(log, T0 + 6, job="b", at=T0 + 1)
    assert text(res, "pool").endswith(
        f"run {w}: waited for pool db until 2027-01-15T08:00:05Z")
    # a fire to come: how full the pool is now
    res = trail(log, T0 + 6, job="a", at=T0 + 60)
    assert text(res, "pool") == "pool db (1 slot); takes 1, priority 0: 1/1 slots in use now"
    # a job without a pool has no pool step
    log.put("c")
    assert steps(trail(log, T0 + 6, job="c", at=T0 + 60), "pool") == []

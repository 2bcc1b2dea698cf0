"""The workflow variables of a run: idempotency key, origin, previous fire
time, data interval and parameters, for scheduled runs, retries, manual
runs (with and without a key) and @reboot."""

from __future__ import annotations

import calendar

from cronrd.decisions.run_env import run_env
from cronrd.jobspec import JobSpec, Param
from cronrd.model.run import Run
from cronrd.model.run_states import RunState


def utc(*f) -> int:
    return calendar.timegm((*f, 0, 0, 0)[:6])


def run(fire_time: int, origin="schedule", kind="scheduled", attempt=1) -> Run:
    return Run(run_id=7, job="load", origin=origin, kind=kind, fire_time=fire_time,
               attempt=attempt, target="", state=RunState("assigned"), node="n1", token=3,
               due_at=float(fire_time), created_at=float(fire_time))


DAILY = JobSpec(name="load", schedule="0 3 * * *", command="true",
                params=(Param("day", "string", "today"), Param("n", "int", 5)))


def test_scheduled_run_gets_its_interval_and_key():
    env = run_env(run(utc(2026, 6, 10, 3, 0, 0)), DAILY, "UTC", {}, None)
    assert env == {
        "CRONRD_IDEMPOTENCY_KEY": "load/2026-06-10T03:00:00Z",
        "CRONRD_ORIGIN": "schedule",
        "CRONRD_PREV_FIRE_TIME": "2026-06-09T03:00:00Z",
        "CRONRD_INTERVAL_START": "2026-06-09T03:00:00Z",
        "CRONRD_INTERVAL_END": "2026-06-10T03:00:00Z",
        "CRONRD_PARAM_DAY": "today",
        "CRONRD_PARAM_N": "5",
    }


def test_a_retry_keeps_the_idempotency_key():
    first = run_env(run(utc(2026, 6, 10, 3, 0, 0)), DAILY, "UTC", {}, None)
    retry = run_env(run(utc(2026, 6, 10, 3, 0, 0), kind="retry", attempt=3), DAILY, "UTC",
                    {}, None)
    assert retry == first


def test_the_zone_of_the_job_decides_the_previous_fire():
    # 03:00 in Berlin (CEST, +2) is 01:00Z.
    spec = JobSpec(name="load", schedule="0 3 * * *", command="true",
                   timezone="Europe/Berlin")
    env = run_env(run(utc(2026, 6, 10, 1, 0, 0)), spec, "UTC", {}, None)
    assert env["CRONRD_PREV_FIRE_TIME"] == "2026-06-09T01:00:00Z"
    # without a zone of its own, the node's default zone
    plain = JobSpec(name="load", schedule="0 3 * * *", command="true")
    env = run_env(run(utc(2026, 6, 10, 1, 0, 0)), plain, "Europe/Berlin", {}, None)
    assert env["CRONRD_PREV_FIRE_TIME"] == "2026-06-09T01:00:00Z"


def test_manual_run_gets_the_last_interval_and_its_params():
    env = run_env(run(utc(2026, 6, 10, 15, 30, 7), origin="manual", kind="manual"), DAILY,
                  "UTC", {"day": "2026-06-01"}, None)
    assert env["CRONRD_ORIGIN"] == "manual"
    assert env["CRONRD_IDEMPOTENCY_KEY"] == "load/2026-06-10T15:30:07Z"
    assert env["CRONRD_PREV_FIRE_TIME"] == ""
    assert env["CRONRD_INTERVAL_START"] == "2026-06-09T03:00:00Z"
    assert env["CRONRD_INTERVAL_END"] == "2026-06-10T03:00:00Z"
    assert env["CRONRD_PARAM_DAY"] == "2026-06-01" and env["CRONRD_PARAM_N"] == "5"


def test_manual_run_at_a_fire_time_takes_that_fire():
    env = run_env(run(utc(2026, 6, 10, 3, 0, 0), origin="manual", kind="manual"), DAILY,
                  "UTC", {}, "k")
    assert env["CRONRD_INTERVAL_END"] == "2026-06-10T03:00:00Z"
    assert env["CRONRD_IDEMPOTENCY_KEY"] == "load/key:k"


def test_reboot_has_no_previous_fire_nor_interval():
    spec = JobSpec(name="load", schedule="@reboot", command="true")
    for r in (run(utc(2026, 6, 10, 3, 0, 0)), run(utc(2026, 6, 10, 3, 0, 0), "manual",
                                                   "manual")):
        env = run_env(r, spec, "UTC", {}, None)
        assert (env["CRONRD_PREV_FIRE_TIME"], env["CRONRD_INTERVAL_START"],
                env["CRONRD_INTERVAL_END"]) == ("", "", "")


def test_every_schedule_interval():
    spec = JobSpec(name="load", schedule="@every 15m", command="true")
    env = run_env(run(utc(2026, 6, 10, 3, 15, 0)), spec, "UTC", {}, None)
    assert env["CRONRD_INTERVAL_START"] == "2026-06-10T03:00:00Z"
    assert env["CRONRD_INTERVAL_END"] == "2026-06-10T03:15:00Z"


def test_a_rerun_has_a_key_of_its_own():
    r = run(utc(2026, 6, 10, 3, 0, 0), kind="retry", attempt=4)
    env = run_env(r, DAILY, "UTC", {}, None, rerun=3)
    assert env["CRONRD_IDEMPOTENCY_KEY"] == "load/2026-06-10T03:00:00Z/rerun-3"
    assert env["CRONRD_INTERVAL_END"] == "2026-06-10T03:00:00Z"

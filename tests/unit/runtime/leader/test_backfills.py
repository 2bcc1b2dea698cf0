"""The daemon's side of backfills: fire times from the job's own trigger
(DST rule included), the plan, rerun's errors, the leader's duty."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.errors import RequestError
from cronrd.runtime.leader import backfills as B
from cronrd.schedule import iso_utc, make_trigger, parse_iso, parse_schedule
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused

from ...state.test_state import T0, Log

MIN = 60


def test_fire_times_follow_the_schedulers_dst_rule():
    # 02:30 does not exist in Berlin on 2027-03-28: the scheduler runs it at
    # the jump (03:00 CEST), and so does a backfill.
    trig = make_trigger(parse_schedule("30 2 * * *"), "Europe/Berlin")
    got = B.fire_times(trig, parse_iso("2027-03-27T00:00:00Z"),
                       parse_iso("2027-03-29T23:00:00Z"), 10)
    assert [iso_utc(t) for t in got] == ["2027-03-27T01:30:00Z", "2027-03-28T01:00:00Z",
                                         "2027-03-29T00:30:00Z"]
    assert B.previous_fire(trig, got[2]) == got[1]
    # the range is inclusive at both ends
    assert B.fire_times(trig, got[0], got[1], 10) == got[:2]


def job_log(schedule="* * * * *", **over) -> Log:
    log = Log()
    log.put(schedule=schedule, **over)
    return log


def test_plan_marks_each_fire_time_and_refuses_too_many_without_force():
    log = job_log()
    spec = Q.job_spec(log.sm.conn, "j")
    times, lines = B.plan(log.sm.conn, spec, "UTC", T0 - 3 * MIN, T0 + MIN, "missing",
                          "oldest", False)
    assert times == [T0 - 3 * MIN, T0 - 2 * MIN, T0 - MIN, T0, T0 + MIN]
    assert [d.line() for _t, d in lines] == ["create (before the job existed)"] * 3 + [
        "create", "skip: not due yet: the scheduler runs it"]
    with pytest.raises(RequestError, match="more than 10000 fire times; narrow the range"
                       ".*an admin passes --force"):
        B.plan(log.sm.conn, spec, "UTC", T0 - 10_001 * MIN + 1, T0, "missing", "oldest",
               False)
    times, _ = B.plan(log.sm.conn, spec, "UTC", T0 - 10_001 * MIN + 1, T0, "missing",
                      "oldest", True)
    assert len(times) == 10_001
    with pytest.raises(RequestError, match="before --from"):
        B.plan(log.sm.conn, spec, "UTC", T0, T0 - 1, "missing", "oldest", False)


def test_a_boot_job_has_no_fire_times():
    log = job_log(schedule="@reboot")
    with pytest.raises(RequestError, match="@reboot"):
        B.plan(log.sm.conn, Q.job_spec(log.sm.conn, "j"), "UTC", T0 - MIN, T0, "missing",
               "oldest", False)


def test_rerun_names_the_nearest_fire_times_and_records():
    log = job_log()
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (T0 - 10 * MIN,))
    log.fire(T0 - 5 * MIN)
    spec = Q.job_spec(log.sm.conn, "j")
    assert B.rerun_time(log.sm.conn, spec, "UTC", T0 - 5 * MIN) == T0 - 5 * MIN
    with pytest.raises(RequestError) as exc:
        B.rerun_time(log.sm.conn, spec, "UTC", T0 - 2 * MIN + 20)
    msg = str(exc.value)
    assert "is not a fire time of j" in msg
    assert f"nearest fire times {iso_utc(T0 - 2 * MIN)}, {iso_utc(T0 - MIN)}" in msg
    assert f"nearest with a record {iso_utc(T0 - 5 * MIN)}" in msg
    with pytest.raises(RequestError, match="no record .*`cronrd backfill` creates one"):
        B.rerun_time(log.sm.conn, spec, "UTC", T0 - 3 * MIN)


class Clock:
    def now(self):
        return T0 + 5


def test_the_duty_proposes_a_step_only_when_it_changes_something():
    log = job_log(concurrency="allow")
    proposed = []

    async def propose(cmd):
        proposed.append(cmd)
        try:
            return log.apply(cmd)
        except Refused:
            return {}
    duty = B.Backfiller(log.sm.conn, propose, Clock(), 1.0)
    times = [T0 - k * MIN for k in range(3, 0, -1)]
    log.apply(C.CreateBackfill(job="j", fire_times=times, from_time=times[0],
                               to_time=times[-1], reprocess="missing", parallel=2,
                               order="oldest", at=T0))
    asyncio.run(duty.step_all())
    assert len(proposed) == 1
    asyncio.run(duty.step_all())          # both slots taken: nothing to propose
    assert len(proposed) == 1
    log.apply(C.SetPaused(name="j", paused=True, at=T0))
    first = next(iter(log.sm.conn.execute("SELECT min(run_id) FROM runs")))[0]
    log.apply(C.CancelRun(run_id=first, reason="test", at=T0))
    asyncio.run(duty.step_all())          # a run ended: account for it
    assert len(proposed) == 2
    asyncio.run(duty.step_all())          # the job is paused: nothing released
    assert len(proposed) == 2

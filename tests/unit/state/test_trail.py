"""The reads of `cronrd explain` (cronrd/state/trail.py): one fire time's
records, the gaps covering it, the job's times."""

from __future__ import annotations

from cronrd.state import commands as C
from cronrd.state import trail
from tests.unit.state.test_state import T0, Log


def test_records_at_are_every_attempt_of_that_fire_time_only():
    log = Log()
    log.put("j", retries={"max": 1, "delay": 1.0, "backoff": 1.0, "max_delay": 1.0,
                          "jitter": 0.0})
    first = log.fire(T0 + 1)
    log.finish(first["run_id"], state="failed", exit_code=3)
    log.fire(T0 + 2)
    log.apply(C.ManualRun(job="j", at=T0 + 1, node="n1"))
    got = trail.records_at(log.sm.conn, "j", T0 + 1)
    assert [(r.attempt, r.kind, r.state.value) for r in got] == [
        (1, "scheduled", "failed"), (2, "retry", "assigned")]   # not the manual run


def test_gaps_covering_a_time_and_the_job_times():
    log = Log()
    log.put("j", at=T0)
    log.apply(C.RecordGap(job="j", first=T0 + 10, last=T0 + 20, count=11, reason="catchup: x",
                          at=T0 + 30))
    conn = log.sm.conn
    assert [g["count"] for g in trail.gaps_covering(conn, "j", T0 + 10)] == [11]
    assert trail.gaps_covering(conn, "j", T0 + 21) == []
    assert trail.job_times(conn, "j") == {"created_at": T0, "updated_at": T0,
                                          "cursor": T0 + 20}
    assert trail.job_times(conn, "nosuch") is None

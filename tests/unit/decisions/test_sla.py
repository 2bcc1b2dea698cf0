"""SLA misses, as a pure function of a job's records and now."""

from __future__ import annotations

from cronrd.decisions.sla import Miss, Record, chosen, misses
from cronrd.jobspec.model import Sla

T = 1_800_000_000  # 2027-01-15T08:00:00Z


def kinds(ms: list[Miss]) -> list[tuple[int, str]]:
    return [(m.fire_time, m.kind) for m in ms]


def test_start_within_is_missed_by_a_late_start_a_pending_run_or_no_record():
    sla = Sla(start_within=300)
    recs = [Record(T, "succeeded", started_at=T + 10, succeeded_at=T + 20),      # on time
            Record(T + 60, "succeeded", started_at=T + 400, succeeded_at=T + 410),  # late
            Record(T + 120, "pending")]                                          # no node
    ms = misses(sla, recs, [T, T + 60, T + 120, T + 180], T + 1000, since=T - 1,
                last_success=T + 410)
    assert kinds(ms) == [(T + 60, "start_within"), (T + 120, "start_within"),
                         (T + 180, "start_within")]
    assert "it has no record" in ms[-1].detail and ms[-1].due == T + 480
    # not yet due: nothing
    assert misses(sla, [Record(T, "pending")], [T], T + 299, since=T - 1,
                  last_success=None) == []


def test_finish_within_and_finish_by_want_a_success_in_time():
    sla = Sla(finish_within=3600, finish_by="06:00")
    deadline = T + 3 * 3600     # the caller's "next 06:00"
    recs = [Record(T, "failed", started_at=T, reason="exit 1")]
    ms = misses(sla, recs, [T], T + 4 * 3600, since=T - 1, last_success=None,
                finish_by=lambda t: deadline)
    assert kinds(ms) == [(T, "finish_within"), (T, "finish_by")]
    assert ms[1].due == deadline and "it is failed (exit 1)" in ms[1].detail
    ok = [Record(T, "succeeded", started_at=T, succeeded_at=T + 100)]
    assert misses(sla, ok, [T], T + 4 * 3600, since=T - 1, last_success=T + 100,
                  finish_by=lambda t: deadline) == []


def test_what_the_operator_chose_is_no_miss_and_nothing_before_since():
    sla = Sla(start_within=60, finish_within=60)
    recs = [Record(T, "skipped", reason="paused: `cronrd resume` re-enables the job"),
            Record(T + 60, "cancelled"), Record(T + 120, "skipped", reason="overlap")]
    assert chosen(recs[0]) and chosen(recs[1]) and not chosen(recs[2])
    ms = misses(sla, recs, [T, T + 60, T + 120, T - 600], T + 1000, since=T - 1,
                last_success=None)
    assert kinds(ms) == [(T + 120, "start_within"), (T + 120, "finish_within")]


def test_max_runtime_stale_after_and_failure_tolerance():
    sla = Sla(max_runtime=600, stale_after=3600, failure_tolerance=2)
    recs = [Record(T, "succeeded", started_at=T, succeeded_at=T + 5),
            Record(T + 60, "failed"), Record(T + 120, "timed_out"), Record(T + 180, "lost"),
            Record(T + 240, "running", started_at=T + 240, running_since=T + 240)]
    ms = misses(sla, recs, [], T + 5000, since=T - 1, last_success=T + 5)
    assert kinds(ms) == [(T + 240, "max_runtime"), (T + 3605, "stale_after"),
                         (T + 60, "failure_tolerance")]
    assert "3 failures in a row" in ms[-1].detail
    # one success breaks the streak; the running attempt is not counted either way
    recs.append(Record(T + 200, "succeeded", started_at=T + 200, succeeded_at=T + 201))
    ms = misses(sla, recs, [], T + 1000, since=T - 1, last_success=T + 201)
    assert ("failure_tolerance" not in [m.kind for m in ms])
    # no success ever: stale from when the SLA came into force
    assert kinds(misses(Sla(stale_after=60), [], [], T + 100, since=T,
                        last_success=None)) == [(T + 60, "stale_after")]


def test_days_a_calendar_skips_do_not_count_as_stale_and_failures_still_do():
    """Issue 35, review: a daily job with stale_after 30h does not go stale
    over a weekend its calendar skips; one that fails every weekday does,
    skipped weekends or not (a skip does not restart the clock)."""
    day = 86400
    sla = Sla(stale_after=30 * 3600.0)
    cal = "calendar: 2026-12-12 (sat) is not in calendar weekdays"
    ok_fri = Record(T, "succeeded", started_at=T, succeeded_at=T + 60)
    weekend = [Record(T + day, "skipped", reason=cal), Record(T + 2 * day, "skipped", reason=cal)]
    got = misses(sla, [ok_fri, *weekend], [], T + 3 * day - 60, since=T - day,
                 last_success=T + 60)
    assert [m.kind for m in got] == []            # Monday 17:59: 30h of weekday time not passed
    failing = [Record(T + i * day, "failed") for i in (3, 4, 5, 6, 7)]
    got = misses(sla, [ok_fri, *weekend, *failing], [], T + 8 * day, since=T - day,
                 last_success=T + 60)
    assert [m.kind for m in got] == ["stale_after"]

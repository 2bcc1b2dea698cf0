"""The backfill plan: one decision per fire time, from its record (pure)."""

from __future__ import annotations

from cronrd.decisions import backfill as D

R = D.Record


def test_missing_creates_only_fire_times_without_a_record_or_that_never_ran():
    recs = {60: R(1, "succeeded"), 120: R(2, "failed"), 180: R(1, "skipped"),
            240: R(1, "running")}
    lines = [(t, d.line()) for t, d in D.plan([0, 60, 120, 180, 240], recs, "missing",
                                               "oldest")]
    assert lines == [
        (0, "create"),
        (60, "skip: already succeeded"),
        (120, "skip: already ran (failed); --reprocess failed runs it again"),
        (180, "reprocess (attempt 2; was skipped)"),
        (240, "skip: running"),
    ]


def test_failed_reprocesses_failures_as_the_next_attempt():
    recs = {0: R(3, "failed"), 60: R(1, "timed_out"), 120: R(1, "succeeded"),
            180: R(1, "lost"), 240: R(1, "assigned")}
    got = {t: d for t, d in D.plan(recs, recs, "failed", "oldest")}
    assert got[0] == D.Decision("reprocess", 4, "failed")
    assert got[60].attempt == 2 and got[60].action == "reprocess"
    assert got[120].line() == "skip: already succeeded"
    assert got[180].line() == "reprocess (attempt 2; was lost)"
    assert got[240].line() == "skip: running (assigned)"


def test_all_reprocesses_successes_too_but_never_a_running_one():
    recs = {0: R(1, "succeeded"), 60: R(1, "running")}
    got = dict(D.plan(recs, recs, "all", "oldest"))
    assert got[0] == D.Decision("reprocess", 2, "succeeded")
    assert got[60].action == "skip"


def test_order_newest_releases_latest_first_and_each_fire_time_once():
    assert [t for t, _ in D.plan([120, 0, 60, 60], {}, "missing", "newest")] == [120, 60, 0]
    assert [t for t, _ in D.plan([120, 0, 60], {}, "missing", "oldest")] == [0, 60, 120]


def test_fire_times_before_the_job_existed_are_created_and_marked():
    lines = [d.line() for _, d in D.plan([0, 60], {}, "missing", "oldest", job_created_at=30)]
    assert lines == ["create (before the job existed)", "create"]


def test_more_than_ten_thousand_fire_times_need_force():
    assert D.too_many(10_000, False) is None
    msg = D.too_many(10_001, False)
    assert "10001 fire times" in msg and "--force" in msg and "--dry-run" in msg
    assert D.too_many(10_001, True) is None
    assert "split the range" in D.too_many(D.HARD_MAX_FIRES + 1, True)


def test_slots_respect_parallel_and_yield_to_other_runs():
    assert D.slots(3, "allow", 0, 0) == 3
    assert D.slots(3, "allow", 2, 0) == 1
    assert D.slots(3, "allow", 3, 0) == 0
    assert D.slots(3, "allow", 0, 1) == 0          # an on-time run is active: yield
    # any other policy: one at a time, queued behind every run of the job
    assert D.limit(5, "forbid") == 1
    assert D.slots(5, "forbid", 0, 0) == 1
    assert D.slots(5, "forbid", 1, 0) == 0
    assert D.slots(5, "replace", 0, 1) == 0


def test_nearest_fire_times():
    assert D.nearest([0, 60], [120, 180], 100) == [60, 120]
    assert D.nearest([0], [], 100, n=2) == [0]


def test_fire_times_after_the_cursor_are_the_schedulers():
    lines = [(t, d.line()) for t, d in D.plan([0, 60, 120], {}, "all", "oldest", cursor=60)]
    assert lines == [(0, "create"), (60, "create"),
                     (120, "skip: not due yet: the scheduler runs it")]

"""The web UI's pictures of time (cronrd/state/activity.py): what they count,
in which bucket, and that they read through indexes bounded by the span."""

from __future__ import annotations

import datetime

import apsw
import pytest

from cronrd.state import activity as A
from cronrd.state.machine import StateMachine

T0 = 1796464800   # 2026-12-05T10:00:00Z, a whole hour


@pytest.fixture
def conn():
    return StateMachine(apsw.Connection(":memory:")).conn


def add(conn, job, fire, state, *, node="a", started=None, finished=None, attempt=1,
        kind="scheduled", origin="schedule", target=""):
    conn.execute(
        "INSERT INTO runs(job, origin, kind, fire_time, attempt, target, state, node, "
        "created_at, started_at, finished_at) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
        (job, origin, kind, fire, attempt, target, state, node, fire, started, finished))


def test_outcomes_count_by_the_bucket_the_run_ended_in(conn):
    now = T0 + 3599.5                      # the hour 10:00-11:00, last bucket 10:59
    add(conn, "a", T0 + 60, "succeeded", started=T0 + 60.1, finished=T0 + 61)
    add(conn, "a", T0 + 120, "failed", started=T0 + 120.1, finished=T0 + 185)   # ends 10:03
    add(conn, "b", T0 + 120, "timed_out", started=T0 + 121, finished=T0 + 130)
    add(conn, "b", T0 + 180, "skipped", node=None, finished=T0 + 180)
    add(conn, "c", T0 - 7200, "succeeded", started=T0 - 7200, finished=T0 - 7000)  # before
    a = A.fleet_activity(conn, now, "1h")
    assert a["step"] == 60 and len(a["x"]) == 60 and a["x"][0] == T0
    assert a["outcomes"]["succeeded"][1] == 1
    assert a["outcomes"]["failed"][2] == 1 and a["outcomes"]["failed"][3] == 1
    assert a["outcomes"]["skipped"][3] == 1
    assert sum(sum(v) for v in a["outcomes"].values()) == 4


def test_lateness_is_of_first_scheduled_attempts_by_fire_time(conn):
    now = T0 + 3599
    for i, late in enumerate([0.01, 0.02, 0.03, 0.04, 2.0]):
        add(conn, f"j{i}", T0, "succeeded", started=T0 + late, finished=T0 + 5)
    add(conn, "r", T0, "succeeded", started=T0 + 30, finished=T0 + 31, attempt=2)  # a retry
    add(conn, "m", T0, "succeeded", started=T0 + 50, finished=T0 + 51, kind="manual",
        origin="manual")
    add(conn, "run", T0 + 60, "running", started=T0 + 60.5)      # running: counted already
    a = A.fleet_activity(conn, now, "1h")
    assert a["lateness"]["p50"][0] == 0.03 and a["lateness"]["p99"][0] == 2.0
    assert a["lateness"]["p50"][1] == 0.5
    assert a["lateness"]["p50"][2] is None


def test_running_counts_every_bucket_a_run_overlapped_per_node(conn):
    now = T0 + 3599
    # started two hours before the span, ended in its 11th minute: it was
    # running in the first eleven buckets, though it began before the span
    add(conn, "long", T0 - 7200, "succeeded", node="a", started=T0 - 7200, finished=T0 + 630)
    add(conn, "x", T0 + 300, "running", node="b", started=T0 + 300)
    add(conn, "y", T0 + 310, "succeeded", node="b", started=T0 + 310, finished=T0 + 320)
    a = A.fleet_activity(conn, now, "1h")
    assert a["running"]["a"][:11] == [1] * 11 and a["running"]["a"][11] == 0
    assert a["running"]["b"][4] == 0 and a["running"]["b"][5] == 2
    assert a["running"]["b"][6:] == [1] * 54


def test_a_viewer_sees_only_the_jobs_its_token_allows(conn):
    add(conn, "ours", T0, "failed", started=T0 + 1, finished=T0 + 2)
    add(conn, "theirs", T0, "failed", started=T0 + 1, finished=T0 + 2)
    a = A.fleet_activity(conn, T0 + 100, "1h", allowed=lambda j: j == "ours")
    assert sum(a["outcomes"]["failed"]) == 1
    t = A.timeline(conn, T0, T0 + 100, T0 + 100, allowed=lambda j: j == "ours")
    assert [b["job"] for b in t["bars"]] == ["ours"]


def test_the_timeline_holds_runs_that_overlap_the_window_by_node(conn):
    add(conn, "before", T0 - 100, "succeeded", node="a", started=T0 - 100, finished=T0 - 50)
    add(conn, "across", T0 - 100, "succeeded", node="a", started=T0 - 100, finished=T0 + 10)
    add(conn, "inside", T0 + 20, "failed", node="b", started=T0 + 20, finished=T0 + 30)
    add(conn, "after", T0 + 500, "succeeded", node="b", started=T0 + 500, finished=T0 + 501)
    add(conn, "live", T0 + 50, "running", node="c", started=T0 + 50)
    add(conn, "queued", T0 + 50, "pending", node=None)
    t = A.timeline(conn, T0, T0 + 300, now=T0 + 200)
    assert t["nodes"] == ["a", "b", "c"]
    by_job = {b["job"]: b for b in t["bars"]}
    assert set(by_job) == {"across", "inside", "live"}
    assert by_job["live"]["end"] == T0 + 200 and by_job["live"]["running"]
    assert by_job["inside"]["state"] == "failed" and by_job["inside"]["node"] == "b"


def test_a_crowded_timeline_keeps_the_longest_runs_and_says_how_many_it_cut(conn):
    for i in range(30):
        add(conn, f"j{i}", T0, "succeeded", started=T0, finished=T0 + 1 + i)
    t = A.timeline(conn, T0, T0 + 100, T0 + 100, limit=10)
    assert t["cut"] == 20 and len(t["bars"]) == 10
    assert min(b["end"] - b["start"] for b in t["bars"]) == 21


def test_the_calendar_counts_each_fire_time_once_by_its_last_attempt_in_local_days(conn):
    berlin_midnight = int(datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone(
        datetime.timedelta(hours=1))).timestamp())
    add(conn, "j", berlin_midnight + 60, "failed", finished=berlin_midnight + 61)
    add(conn, "j", berlin_midnight + 60, "succeeded", finished=berlin_midnight + 99,
        attempt=2, kind="retry")
    add(conn, "j", berlin_midnight - 60, "failed", finished=berlin_midnight)  # the day before
    add(conn, "j", berlin_midnight + 3600, "running", started=berlin_midnight + 3600)
    add(conn, "j", berlin_midnight + 7200, "skipped", node=None, finished=berlin_midnight + 7200)
    add(conn, "other", berlin_midnight + 60, "failed", finished=berlin_midnight + 61)
    cal = A.job_calendar(conn, "j", "Europe/Berlin", datetime.date(2026, 12, 5), days=7)
    assert [d["day"] for d in cal][-2:] == ["2026-12-04", "2026-12-05"]
    assert cal[-1]["counts"] == {"succeeded": 1, "running": 1, "skipped": 1}
    assert cal[-2]["counts"] == {"failed": 1}
    assert all(d["counts"] == {} for d in cal[:-2])


def test_every_query_of_the_pictures_seeks_through_an_index(conn):
    """At a million records a full scan is seconds: each statement the
    pictures run (captured as they run) must read an index range, never
    the whole runs table."""
    seen: list[tuple[str, object]] = []

    def trace(cursor, sql, bindings):
        if "EXPLAIN" not in sql:
            seen.append((sql, bindings))
        return True
    add(conn, "j", T0, "succeeded", started=T0 + 1, finished=T0 + 2)
    conn.exec_trace = trace
    try:
        A.fleet_activity(conn, T0 + 100, "1d", allowed=lambda j: True)
        A.timeline(conn, T0 - 86400 * 30, T0 - 86400 * 29, now=T0 + 100)
        A.job_calendar(conn, "j", "UTC", datetime.date(2026, 12, 5), days=7)
    finally:
        conn.exec_trace = None
    assert len(seen) >= 5
    for sql, bindings in seen:
        plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, bindings))
        assert "SCAN runs" not in plan, (sql, plan)
        assert "runs_ended" in plan or "runs_active" in plan or "runs_key" in plan, (sql, plan)


def test_a_past_window_reads_only_runs_that_ended_within_a_day_of_it(conn):
    """Review: a timeline of a window long ago read every record since."""
    add(conn, "old", T0 - 900, "succeeded", started=T0 - 900, finished=T0 - 800)
    add(conn, "spans", T0 - 900, "succeeded", started=T0 - 950, finished=T0 + 3600)
    add(conn, "much-later", T0 + 86400 * 5, "succeeded", started=T0 + 86400 * 5,
        finished=T0 + 86400 * 5 + 1)
    t = A.timeline(conn, T0 - 1000, T0 - 500, now=T0 + 86400 * 10)
    assert {b["job"] for b in t["bars"]} == {"old", "spans"}


def test_the_percentiles_are_nearest_rank():
    """Review: round() rounds half to even: p50 of two values was the second."""
    assert A._pct([1.0, 2.0], 50) == 1.0
    assert A._pct([float(i) for i in range(1, 101)], 99) == 99.0
    assert A._pct([float(i) for i in range(1, 101)], 100) == 100.0
    assert A._pct([7.0], 99) == 7.0


def test_a_run_that_ended_before_it_started_counts_once_not_negative(conn):
    """Review: a lost run's end is the leader's clock, its start its node's."""
    add(conn, "skew", T0 + 300, "lost", node="a", started=T0 + 300, finished=T0 + 170)
    a = A.fleet_activity(conn, T0 + 3599, "1h")
    assert min(a["running"]["a"]) == 0 and a["running"]["a"][5] == 1


def test_a_filtered_picture_runs_while_another_statement_of_the_connection_is_open(conn):
    """Review: registering the filter function again while a statement of
    the same connection was active raised BusyError."""
    add(conn, "ours", T0, "failed", started=T0 + 1, finished=T0 + 2)
    open_cursor = conn.execute("SELECT run_id FROM runs")
    next(open_cursor)
    for _ in range(2):
        a = A.fleet_activity(conn, T0 + 100, "1h", allowed=lambda j: j == "ours")
        assert sum(a["outcomes"]["failed"]) == 1
    open_cursor.close()

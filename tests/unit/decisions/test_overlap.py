"""The overlap policy (cronrd.decisions.overlap): one function for the gate
and for manual runs; ``hold`` and ``release`` for concurrency: queue."""

from __future__ import annotations

from cronrd.decisions.overlap import (Ahead, Decision, Queued, Release, Running, decide, hold,
                                       release)


def test_nothing_running_is_never_an_overlap():
    for policy in ("forbid", "replace", "allow"):
        assert decide(policy, []) == Decision()


def test_forbid_skips_a_scheduled_run_naming_what_runs():
    d = decide("forbid", [Running(3), Running(4, "b")], run_id=9)
    assert d.skip == ("overlap: run 3, 4 on b still running at the fire time "
                      "(concurrency: forbid)") and d.replace == ()


def test_a_manual_run_is_decided_once_when_committed_not_again_at_its_gate():
    assert decide("forbid", [Running(3)], manual=True) == Decision()


def test_replace_cancels_what_runs_with_the_reason():
    d = decide("replace", [Running(3), Running(4, "b")], run_id=9)
    assert d.skip is None and d.replace == (Running(3), Running(4, "b"))
    assert d.reason == "replaced by run 9 (concurrency: replace)"
    assert decide("replace", [Running(3)]).reason == \
        "replaced by a newer fire (concurrency: replace)"


def test_allow_lets_everything_run():
    assert decide("allow", [Running(3)]) == Decision()


# -- concurrency: queue ---------------------------------------------------------------
T = 1_800_000_000  # 2027-01-15T08:00:00Z


def test_queue_at_the_gate_never_drops_a_run():
    # The state machine holds queued runs; what runs at the gate was started
    # under another policy before the job changed to queue.
    assert decide("queue", [Running(3)], run_id=9) == Decision()


def test_hold_starts_a_run_with_nothing_ahead():
    assert hold(None, 0, 100) == Decision()


def test_hold_waits_naming_the_run_ahead_and_its_state():
    d = hold(Ahead(12, "running", T + 3), 0, 100)
    assert d.skip is None and d.wait == (
        "waiting for run 12 (started 2027-01-15T08:00:03Z) to end: concurrency: queue")
    assert hold(Ahead(13, "waiting", T + 4), 1, 100).wait == (
        "waiting for run 13 (waiting too, fire time 2027-01-15T08:00:04Z) to end: "
        "concurrency: queue")
    assert hold(Ahead(14, "assigned", T + 5.5), 0, 100).wait == (
        "waiting for run 14 (assigned, due 2027-01-15T08:00:05.500Z) to end: "
        "concurrency: queue")


def test_hold_skips_when_the_queue_is_full():
    d = hold(Ahead(12, "running", T), 3, 3)
    assert d.wait is None and d.skip == (
        "queue full: 3 runs already waiting (max_queued 3, concurrency: queue)")
    assert hold(Ahead(12, "running", T), 2, 3).wait is not None


def test_release_starts_the_oldest_first():
    out = release([Queued(5, T + 1), Queued(6, T + 2)], T + 10, 86400.0)
    assert out == Release(go=5)


def test_release_skips_runs_that_waited_past_the_catchup_window():
    out = release([Queued(5, T), Queued(6, T + 50), Queued(7, T + 70)], T + 100, 60.0)
    assert out.go == 6 and out.skip == (
        (5, "waited in the queue longer than catchup_window 1m (due 2027-01-15T08:00:00Z, "
            "concurrency: queue)"),)
    # All of them too old: none goes.
    out = release([Queued(5, T), Queued(6, T + 1)], T + 100, 60.0)
    assert out.go is None and [rid for rid, _ in out.skip] == [5, 6]
    assert release([Queued(5, T)], T + 10**6, None) == Release(go=5)  # no window


def test_release_while_the_job_may_not_start_skips_the_whole_queue():
    out = release([Queued(5, T), Queued(6, T + 1)], T + 2, 86400.0, stop="paused: x")
    assert out.go is None and out.skip == (
        (5, "paused: x (it was waiting in the queue)"),
        (6, "paused: x (it was waiting in the queue)"))

"""The overlap policy (cronrd.decisions.overlap): one function for the gate
and for manual runs."""

from __future__ import annotations

from cronrd.decisions.overlap import Decision, Running, decide


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

"""The dependency gate: each trigger_rule, skip propagation, generations."""

from __future__ import annotations

import pytest

from cronrd.decisions.dependencies import (FIRE, SKIP, UPSTREAM_FAILED, WAIT, Outcome, Parent,
                                           decide)

T = 1_800_000_000  # 2027-01-15T08:00:00Z


def p(job, state=None, run_id=1, fire=T, fresh=None):
    return Parent(job, None if state is None else Outcome(run_id, fire, state),
                  None if fresh is None else Outcome(fresh, fire - 3600, "succeeded"))


@pytest.mark.parametrize("rule, a, b, action, reason", [
    ("all_succeeded", "succeeded", "succeeded", FIRE, ""),
    ("all_succeeded", "succeeded", "failed", UPSTREAM_FAILED, "upstream_failed:b@"),
    ("all_succeeded", "succeeded", "timed_out", UPSTREAM_FAILED, "upstream_failed:b@"),
    ("all_succeeded", "cancelled", "succeeded", UPSTREAM_FAILED, "upstream_failed:a@"),
    # a skipped parent does not satisfy all_succeeded: the child is skipped too
    ("all_succeeded", "succeeded", "skipped", SKIP, "upstream_skipped:b@"),
    ("all_succeeded", "skipped", "failed", UPSTREAM_FAILED, "upstream_failed:b@"),
    ("all_succeeded", "succeeded", None, WAIT, "upstream_not_ready:b"),
    # none_failed: skipped counts as not failed, even all of them
    ("none_failed", "succeeded", "skipped", FIRE, ""),
    ("none_failed", "skipped", "skipped", FIRE, ""),
    ("none_failed", "lost", "skipped", UPSTREAM_FAILED, "upstream_failed:a@"),
    ("none_failed", None, "succeeded", WAIT, "upstream_not_ready:a"),
    # all_finished: whatever happened
    ("all_finished", "failed", "skipped", FIRE, ""),
    ("all_finished", "failed", None, WAIT, "upstream_not_ready:b"),
    # any_succeeded fires on the first success, without waiting for the others
    ("any_succeeded", "succeeded", None, FIRE, ""),
    ("any_succeeded", "failed", None, WAIT, "upstream_not_ready:b"),
    ("any_succeeded", "failed", "skipped", UPSTREAM_FAILED, "upstream_failed:a@"),
    ("any_succeeded", "skipped", "skipped", SKIP, "upstream_skipped:a@"),
    # any_failed fires on the first failure; all fine means skipped
    ("any_failed", None, "failed", FIRE, ""),
    ("any_failed", "succeeded", None, WAIT, "upstream_not_ready:b"),
    ("any_failed", "succeeded", "skipped", SKIP, "upstream_not_failed"),
])
def test_rules(rule, a, b, action, reason):
    gate = decide(rule, [p("a", a, 1), p("b", b, 2)])
    assert gate.action == action
    assert gate.reason.startswith(reason)
    if reason.endswith("@"):
        assert gate.reason.endswith("2027-01-15T08:00:00Z")


def test_no_new_outcome_no_generation():
    """An @after child consumed every parent's newest outcome: nothing new,
    nothing fires (not even when all its parents are fresh within windows)."""
    assert decide("all_succeeded", [p("a"), p("b")]).action == WAIT
    assert decide("all_finished", [p("a", fresh=5)]).action == WAIT
    # a scheduled child's own fire time is the trigger: fresh is enough
    assert decide("all_succeeded", [p("a", fresh=5)], need_new=False).action == FIRE


def test_within_satisfies_without_a_new_run_and_is_in_the_lineage():
    gate = decide("all_succeeded", [p("extract", "succeeded", 10, fire=T + 3600),
                                    p("fx", None, fresh=7)])
    assert gate.action == FIRE
    assert [(j, o.run_id) for j, o in gate.consume] == [("extract", 10)]
    assert [(j, o.run_id) for j, o in gate.lineage] == [("extract", 10), ("fx", 7)]
    assert gate.fire_time == T + 3600  # the newest of the parents' fire times
    # a fresh success wins over a newer failure of the same parent
    gate = decide("all_succeeded", [p("extract", "succeeded", 10),
                                    p("fx", "failed", 11, fresh=7)])
    assert gate.action == FIRE and ("fx", Outcome(11, T, "failed")) in gate.consume


def test_waiting_consumes_nothing():
    gate = decide("all_succeeded", [p("a", "succeeded", 3), p("b")])
    assert gate.action == WAIT and gate.reason == "upstream_not_ready:b"
    assert gate.consume == ()


def test_worst_of_a_fire_times_per_node_outcomes():
    from cronrd.decisions.dependencies import worst
    ok, skip = Outcome(1, 10, "succeeded"), Outcome(2, 10, "skipped")
    lost, failed = Outcome(3, 10, "lost"), Outcome(4, 10, "failed")
    assert worst([ok]) == ok
    assert worst([ok, skip]) == skip
    assert worst([failed, ok, skip, lost]) == lost     # a failure; the first by run id
    assert worst([Outcome(5, 10, "succeeded"), ok]) == ok

"""The leader's housekeeping decisions (cronrd.decisions.duties) on a fake clock."""

from __future__ import annotations

from cronrd.decisions.duties import learner_to_promote, nodes_lost, voter_target

T = 5000.0


def _lost(now, **kw):
    args = dict(me="a", active_runs={"a": 2, "b": 1, "c": 3, None: 4},
                members=("a", "b", "c"), answered_at={"b": T, "c": T}, lead_since=T - 100,
                node_timeout=10.0, proposed_at={})
    args.update(kw)
    return [(x.node, x.runs) for x in nodes_lost(now, **args)]


def test_a_member_is_lost_after_node_timeout_without_an_answer():
    assert _lost(T + 9.9) == []
    assert _lost(T + 10.0) == [("b", 1), ("c", 3)]
    assert _lost(T + 10.0, answered_at={"b": T + 5, "c": T}) == [("c", 3)]


def test_a_new_leader_gives_every_node_a_whole_node_timeout():
    assert _lost(T + 10.0, answered_at={}, lead_since=T + 1) == []
    assert _lost(T + 11.0, answered_at={}, lead_since=T + 1) == [("b", 1), ("c", 3)]


def test_a_node_that_is_no_longer_a_member_is_lost_at_once_and_says_why():
    out = nodes_lost(T, "a", {"gone": 1}, ("a", "b"), {"gone": T}, T, 10.0, {})
    assert [(x.node, x.reason) for x in out] == [("gone", "node gone is no longer a member")]


def test_a_node_declared_recently_is_not_declared_again():
    assert _lost(T + 20, proposed_at={"b": T + 15}) == [("c", 3)]
    assert _lost(T + 25, proposed_at={"b": T + 15}) == [("b", 1), ("c", 3)]


def test_the_leader_itself_and_nodes_without_runs_are_never_lost():
    assert _lost(T + 100, active_runs={"a": 5, "b": 0}) == []


def test_voters_stay_odd_and_at_most_five():
    assert [voter_target(n) for n in range(1, 9)] == [1, 1, 3, 3, 5, 5, 5, 5]


def test_the_first_healthy_caught_up_learner_is_promoted_while_below_target():
    match = {"d": 100, "e": 990, "f": 1000}
    assert learner_to_promote(4, 3, ["d", "e", "f"], ["d", "e", "f"], match, 1000) is None
    assert learner_to_promote(5, 3, ["d", "e", "f"], ["d", "e", "f"], match, 1000) == "e"
    assert learner_to_promote(5, 3, ["d", "e", "f"], ["d", "f"], match, 1000) == "f"
    assert learner_to_promote(5, 3, ["d"], ["d"], match, 1000) is None  # 900 behind

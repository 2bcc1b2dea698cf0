"""Where a fire runs: the leader's placement choice (runtime/leader/placement.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from cronrd.jobspec import JobSpec, RunOn
from cronrd.decisions.placement import Choice, NodeView
from cronrd.runtime.leader.placement import Placement
from cronrd.state import commands as C
from tests.unit.state.test_state import T0, Log


def job(mode="any", values=(), name="j") -> JobSpec:
    return JobSpec(name=name, schedule="* * * * * *", command="true",
                   run_on=RunOn(mode=mode, values=tuple(values)))


def up(node, *tags) -> NodeView:
    return NodeView(node, True, "up", frozenset(tags))


def down(node, *tags, why="no contact for 4.2s") -> NodeView:
    return NodeView(node, False, "up", frozenset(tags), why)


def draining(node, *tags) -> NodeView:
    return NodeView(node, True, "draining", frozenset(tags), "draining (stopping)")


def joining(node, *tags) -> NodeView:
    return NodeView(node, True, "joining", frozenset(tags), "still joining")


def unknown(node, *tags) -> NodeView:
    """An initial member that answers but has not announced itself yet."""
    return NodeView(node, True, "unknown", frozenset(tags), "")


class World:
    """A replicated state with runs on nodes, and the members placement sees."""

    def __init__(self, views):
        self.log = Log()
        self.log.put("busy")
        self.views = list(views)
        self.placement = Placement(self.log.sm.conn, lambda: list(self.views))
        self._t = T0

    def load(self, node, runs):
        """Give ``node`` ``runs`` assigned runs (committed, as the leader sees them)."""
        for _ in range(runs):
            self._t += 1
            self.log.fire(self._t, "busy", node=node)


def nodes_of(choices: list[Choice]) -> list[str]:
    return [c.node for c in choices]


# -- any -----------------------------------------------------------------------------------
def test_any_picks_the_least_loaded_node_and_counts_what_it_placed():
    w = World([up("a"), up("b"), up("c")])
    w.load("a", 2)
    w.load("c", 1)
    w.placement.begin()
    (first,) = w.placement.choose(job(), T0 + 100)
    assert first == Choice("b", "", None)
    # Within one batch the choices are counted: b (now 1) ties with c (1).
    picks = [w.placement.choose(job(), T0 + 100 + i)[0].node for i in range(1, 3)]
    assert sorted(picks) == ["b", "c"]  # everyone at 2 now
    # The next batch counts afresh from the committed state (nothing new committed).
    w.placement.begin()
    assert w.placement.choose(job(), T0 + 200)[0].node == "b"


def test_equal_nodes_share_a_batch_of_fires_evenly():
    w = World([up("a"), up("b"), up("c")])
    w.placement.begin()
    counts = Counter(w.placement.choose(job(), T0 + i)[0].node for i in range(100))
    assert set(counts) == {"a", "b", "c"}
    assert sorted(counts.values()) == [33, 33, 34]


def test_ties_rotate_by_fire_time_across_batches():
    # Nothing committed between batches: every batch starts from equal loads,
    # and the per-(job, fire time) rotation spreads the first pick.
    w = World([up("a"), up("b"), up("c")])
    counts = Counter()
    for i in range(300):
        w.placement.begin()
        counts[w.placement.choose(job(), T0 + i)[0].node] += 1
    assert set(counts) == {"a", "b", "c"} and min(counts.values()) >= 60
    # Deterministic: the same (job, fire time) makes the same choice.
    w.placement.begin()
    once = w.placement.choose(job(), T0 + 7)
    w.placement.begin()
    assert w.placement.choose(job(), T0 + 7) == once


@pytest.mark.parametrize("bad, why", [
    (down("b"), "b: no contact for 4.2s"),
    (draining("b"), "b: draining (stopping)"),
    (joining("b"), "b: still joining"),
])
def test_unhealthy_draining_and_joining_nodes_are_never_chosen(bad, why):
    w = World([up("a"), bad])
    w.load("a", 5)  # a is busier, yet the only choice
    w.placement.begin()
    assert {w.placement.choose(job(), T0 + i)[0].node for i in range(20)} == {"a"}
    # Alone, it is a skip that says why.
    w.views = [bad]
    w.placement.begin()  # members are looked at once per batch
    (skip,) = w.placement.choose(job(), T0 + 50)
    assert skip.node == "" and skip.target == ""
    assert skip.skip == f"no eligible node is up ({why})"


def test_no_node_up_names_every_member_and_its_reason():
    w = World([down("a", why="never reached"), draining("b"), joining("c")])
    (skip,) = w.placement.choose(job(), T0)
    assert skip.node == ""
    assert skip.skip == ("no eligible node is up (a: never reached; b: draining (stopping); "
                         "c: still joining)")


def test_an_initial_member_that_answers_takes_runs_before_it_announces_itself():
    w = World([unknown("a"), draining("b")])
    assert w.placement.choose(job(), T0) == [Choice("a", "", None)]
    assert w.placement.eligible(job()) == ["a"]


# -- run_on: node ids / tags ----------------------------------------------------------------
def test_run_on_nodes_chooses_only_among_the_listed_members():
    w = World([up("a"), up("b"), up("c")])
    w.load("c", 3)
    w.placement.begin()
    spec = job("nodes", ["c", "zz"])
    assert {w.placement.choose(spec, T0 + i)[0].node for i in range(10)} == {"c"}
    spec = job("nodes", ["a", "b"])
    assert {w.placement.choose(spec, T0 + i)[0].node for i in range(10)} == {"a", "b"}


def test_run_on_nodes_that_are_not_members_or_not_up_is_a_skip_saying_why():
    w = World([up("a"), down("b")])
    (skip,) = w.placement.choose(job("nodes", ["x", "y"]), T0)
    assert skip == Choice("", "", "no eligible node: run_on x, y names no member of the "
                                  "cluster")
    (skip,) = w.placement.choose(job("nodes", ["b"]), T0)
    assert skip.node == "" and "b: no contact for 4.2s" in skip.skip


def test_run_on_tags_requires_every_tag():
    w = World([up("a", "ssd"), up("b", "ssd", "eu"), up("c", "eu", "gpu")])
    assert {w.placement.choose(job("tags", ["ssd", "eu"]), T0 + i)[0].node
            for i in range(10)} == {"b"}
    assert {w.placement.choose(job("tags", ["eu"]), T0 + i)[0].node
            for i in range(20)} == {"b", "c"}
    (skip,) = w.placement.choose(job("tags", ["ssd", "gpu"]), T0)
    assert skip == Choice("", "", "no eligible node: no member has tags ssd, gpu")
    # A tagged node that is down is not chosen; the reason names it.
    w.views = [up("a", "ssd"), draining("b", "ssd", "eu")]
    w.placement.begin()  # members are looked at once per batch
    (skip,) = w.placement.choose(job("tags", ["eu"]), T0)
    assert skip.node == "" and "b: draining (stopping)" in skip.skip


# -- run_on: all -----------------------------------------------------------------------------
def test_run_on_all_is_one_choice_per_member_keyed_by_node():
    w = World([up("a"), down("b"), draining("c"), up("d"), joining("e")])
    w.load("a", 4)  # load does not matter: everyone runs it
    choices = w.placement.choose(job("all"), T0)
    assert [c.target for c in choices] == ["a", "b", "c", "d", "e"]
    assert choices[0] == Choice("a", "a", None)
    assert choices[3] == Choice("d", "d", None)
    assert choices[1] == Choice("", "b", "node b cannot run it: no contact for 4.2s")
    assert choices[2] == Choice("", "c", "node c cannot run it: draining (stopping)")
    assert choices[4] == Choice("", "e", "node e cannot run it: still joining")


# -- eligible (retries of lost runs) -------------------------------------------------------------
def test_eligible_lists_the_members_that_may_take_a_run_now():
    w = World([up("a", "ssd"), up("b"), down("c", "ssd"), draining("d", "ssd"),
               joining("e", "ssd")])
    assert w.placement.eligible(job()) == ["a", "b"]
    assert w.placement.eligible(job("all")) == ["a", "b"]
    assert w.placement.eligible(job("nodes", ["b", "c", "x"])) == ["b"]
    assert w.placement.eligible(job("tags", ["ssd"])) == ["a"]
    assert w.placement.eligible(job("tags", ["ssd", "eu"])) == []


def test_pick_counts_towards_the_batch_and_begin_forgets_it():
    w = World([up("a"), up("b")])
    w.placement.begin()
    assert w.placement.pick(["a", "b"], "k") in ("a", "b")
    # Two more picks: the second node is now less loaded and gets the next one.
    first = w.placement.pick(["a", "b"], "k")
    second = w.placement.pick(["a", "b"], "k")
    assert first != second
    w.log.apply(C.ManualRun(job="busy", node="a", at=T0))  # committed load on a
    w.placement.begin()
    assert w.placement.pick(["a", "b"], "k") == "b"


def test_a_job_in_a_node_scoped_pool_goes_to_a_node_with_a_free_slot():
    log = Log()
    log.apply(C.SetPools(pools=[["gpu", 1, "node"]], at=T0))
    log.put("g", pool="gpu", concurrency="allow")
    spec = JobSpec(name="g", schedule="* * * * * *", command="true", pool="gpu")
    placement = Placement(log.sm.conn, lambda: [up("n1"), up("n2"), up("n3")])
    first = placement.choose(spec, T0 + 1)[0].node
    log.fire(T0 + 1, "g", node=first)
    for t in range(2, 8):
        placement.begin()
        assert placement.choose(spec, T0 + t)[0].node != first
    second = next(n for n in ("n1", "n2", "n3") if n != first)
    log.fire(T0 + 2, "g", node=second)
    third = ({"n1", "n2", "n3"} - {first, second}).pop()
    assert placement.with_room(spec, ["n1", "n2", "n3"]) == [third]
    log.fire(T0 + 3, "g", node=third)
    # every node full: any of them (apply has the run wait for a slot)
    assert placement.with_room(spec, ["n1", "n2", "n3"]) == ["n1", "n2", "n3"]
    assert placement.with_room(JobSpec(name="x", schedule="* * * * * *", command="true"),
                               ["n1"]) == ["n1"]


def test_a_node_with_a_slow_disk_gets_new_runs_last():
    """Issue 29, point 6: runs go to nodes whose disks keep up; a slow-disk
    node still gets them when nobody else can."""
    slow = NodeView("b", True, "up", frozenset(), slow_disk="its disk is slow (400ms)")
    w = World([up("a"), slow, up("c")])
    picked = Counter(w.placement.choose(job(), T0 + i)[0].node for i in range(40))
    assert picked["b"] == 0 and picked["a"] and picked["c"]
    w = World([slow])
    assert w.placement.choose(job(), T0)[0].node == "b"
    # a suspect is avoided before a slow disk is
    suspect = NodeView("a", True, "up", frozenset(), suspect=True)
    w = World([suspect, slow])
    assert w.placement.choose(job(), T0)[0].node == "b"

"""The leader's side of claims (runtime/leader/leadership.py): nodes that missed a
claim are suspects, and placement puts others first."""

from __future__ import annotations

import asyncio
import time
import types

from cronrd.runtime.leader.leadership import Leadership
from cronrd.decisions.placement import NodeView
from cronrd.state import commands as C
from cronrd.state import queries as Q
from tests.unit.state.test_state import T0
from tests.unit.state.test_state_cluster import Cluster


class Clock:
    at = T0 + 10

    def now(self) -> float:
        return self.at

    def monotonic(self) -> float:
        return time.monotonic()


class LeaderLog:
    is_leader = True

    def __init__(self, c: Cluster):
        self.c = c

    async def propose_as_leader(self, cmd):
        return self.c.apply(cmd)


class Members:
    claims = True
    changes = None

    def node_views(self):
        return [NodeView(n, True, "up", frozenset()) for n in ("a", "b")]

    def member_ids(self):
        return ["a", "b"]

    behind: dict = {}

    def clock_fence(self):
        return None

    def placement_hold(self):
        return None

    def behind_leader(self):
        return self.behind

    responding: set = set()

    def responsive(self):
        return self.responding


def test_a_per_node_run_goes_to_its_node_even_while_that_node_is_a_suspect():
    """A run_on: all run belongs to its node: suspicion (a missed claim of
    another run) puts other nodes first, but there is no other node for it;
    it must not wait, pending, until the suspicion passes."""
    c = Cluster()
    c.put_on("a", run_on={"mode": "all", "values": []})
    rid = c.fire(T0 + 1, node="a", target="a")["run_id"]
    run = c.run(rid)
    # a's claim was not committed in time: it hands the run back, not started.
    c.apply(C.RunFinished(run_id=rid, token=run.token, node="a", state="lost",
                          exit_code=None, signal=None, started_at=None,
                          finished_at=T0 + 3, log_path=None, not_started=True))
    (retry,) = Q.pending_runs(c.sm.conn)
    assert retry.target == "a"
    lead = Leadership(types.SimpleNamespace(node_id="b"), LeaderLog(c), c.sm.conn, Clock(),
                      Members())
    lead.suspects["a"] = time.monotonic()  # a missed another run's claim just now
    asyncio.run(lead._place_pending())
    assert (c.run(retry.run_id).state, c.run(retry.run_id).node) == ("assigned", "a")


def test_an_unclaimed_run_moves_after_the_grace_and_a_node_behind_gets_as_much_longer():
    """Found in review: a node 0.3 s behind the leader (within
    max_clock_offset) asks for its claims 0.3 s later by the leader's clock;
    with a fixed grace it would lose every run it is given."""
    c = Cluster()
    c.put_on("a")
    ra = c.fire(T0 + 20, node="a")["run_id"]
    rb = c.fire(T0 + 21, node="b", due_at=T0 + 20, at=T0 + 19.3)["run_id"]
    members = Members()
    members.behind = {"b": 0.3}
    clock = Clock()
    lead = Leadership(types.SimpleNamespace(node_id="a"), LeaderLog(c), c.sm.conn, clock,
                      members)
    clock.at = T0 + 20 + 0.24
    asyncio.run(lead._move_unclaimed())
    assert (c.run(ra).node, c.run(rb).node) == ("a", "b")   # within the grace
    clock.at = T0 + 20 + 0.26
    asyncio.run(lead._move_unclaimed())
    assert c.run(ra).node == "b" and c.run(ra).moved_from == "a"
    assert c.run(rb).node == "b"                             # 0.3 s more for b
    assert "a" in lead.suspects and "b" not in lead.suspects
    clock.at = T0 + 20 + 0.56
    asyncio.run(lead._move_unclaimed())
    assert c.run(rb).node == "a" and c.run(rb).moved_from == "b"


def test_a_node_that_answers_the_leader_is_slow_not_gone_its_runs_wait_longer():
    """Found measuring 150 fires/s on 2 cores: claims committed 0.5 s late,
    the leader moved a thousand runs of live nodes at once, and the moves'
    own work collapsed the cluster. A node that answers heartbeats keeps
    its runs STUCK_AFTER longer."""
    from cronrd.decisions import claims as K
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 20, node="a")["run_id"]
    members = Members()
    members.responding = {"a", "b"}
    clock = Clock()
    lead = Leadership(types.SimpleNamespace(node_id="b"), LeaderLog(c), c.sm.conn, clock,
                      members)
    clock.at = T0 + 20 + K.CLAIM_GRACE + 1.0
    asyncio.run(lead._move_unclaimed())
    assert c.run(rid).node == "a" and lead.suspects == {}
    clock.at = T0 + 20 + K.CLAIM_GRACE + K.STUCK_AFTER
    asyncio.run(lead._move_unclaimed())
    assert c.run(rid).node == "b"

"""The leader's side of claims (runtime/leadership.py): nodes that missed a
claim are suspects, and placement puts others first."""

from __future__ import annotations

import asyncio
import time
import types

from cronrd.runtime.leadership import Leadership
from cronrd.runtime.placement import NodeView
from cronrd.state import commands as C
from cronrd.state import queries as Q
from tests.unit.state.test_state import T0
from tests.unit.state.test_state_cluster import Cluster


class Clock:
    def now(self) -> float:
        return T0 + 10

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

    def clock_fence(self):
        return None


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

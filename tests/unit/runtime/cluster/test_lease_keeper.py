"""This node's lease in a cluster (runtime/cluster/lease_keeper.py) on a fake clock
and a fake Raft node. The rule itself: unit/decisions/test_lease.py; the
lease against real faults: integration/test_cluster.py."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.errors import NotLeader
from cronrd.raft.types import ConfState
from cronrd.runtime.cluster.lease_keeper import LeaseKeeper

NODE_TIMEOUT, ELECTION = 10.0, 0.5  # a lease of 10 - 2 * 0.5 - 1 = 8 s


class Clock:
    def __init__(self):
        self.t = 1000.0

    def now(self):
        return self.t

    def monotonic(self):
        return self.t


class FakeRaft:
    conf = ConfState(("a", "b", "c", "d", "e"))


class FakeNode:
    def __init__(self, leader="b", me="a"):
        self.raft = FakeRaft()
        self.leader = leader
        self.me = me
        self.barriers = 0
        self.answer = "ok"  # ok | refuse | hang

    @property
    def is_leader(self):
        return self.leader == self.me

    async def read_barrier(self):
        self.barriers += 1
        if self.answer == "refuse":
            raise NotLeader(None)
        if self.answer == "hang":
            await asyncio.sleep(3600)
        return 1


def keeper(**kw):
    clock = Clock()
    return LeaseKeeper("a", FakeNode(**kw), clock, NODE_TIMEOUT, ELECTION), clock


def test_a_follower_holds_its_lease_for_one_lease_after_a_round_trip():
    k, clock = keeper()
    assert k.length == 8.0
    assert not k.fresh()  # no round trip yet
    k.round_trip(clock.t)
    clock.t += 7.9
    assert k.fresh()
    k.round_trip(clock.t - 100)  # a late answer to an older request does not move it back
    assert k.fresh()
    clock.t += 0.2
    assert not k.fresh()


def test_the_leader_holds_it_while_a_quorum_answers():
    k, clock = keeper(leader="a")
    k.started_leading()
    clock.t += 9
    assert not k.fresh()  # its election is a lease ago, nobody answered since
    k.answered("b")
    assert not k.fresh()  # itself and b: two of five
    k.answered("c")
    assert k.fresh()
    clock.t += 8
    assert not k.fresh()


def test_a_peer_is_healthy_while_it_answers_within_an_election_timeout_or_a_second():
    k, clock = keeper(leader="a")
    assert k.ack_age("a") == 0.0 and k.healthy("a")
    assert k.ack_age("b") is None and not k.healthy("b")
    k.answered("b")
    clock.t += 0.9
    assert k.ack_age("b") == pytest.approx(0.9) and k.healthy("b")
    clock.t += 0.1
    assert not k.healthy("b")


def run_renewal(k, seconds):
    async def main():
        task = asyncio.create_task(k.renew())
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_a_follower_renews_through_the_leader_and_the_lease_counts_from_the_request():
    k, clock = keeper()
    run_renewal(k, 0.05)
    assert k.node.barriers == 1 and k.leader_contact == clock.t and k.fresh()


@pytest.mark.parametrize("answer", ["refuse", "hang"])
def test_a_failed_renewal_leaves_the_lease_as_it_was(answer):
    k, clock = keeper()
    k.node.answer = answer
    k.election_timeout = 0.01  # give up on an unanswered request in 0.02 s
    run_renewal(k, 0.1)
    assert k.node.barriers >= 1 and k.leader_contact == 0.0 and not k.fresh()


@pytest.mark.parametrize("leader", ["a", ""])
def test_the_leader_and_a_node_without_a_leader_renew_nothing(leader):
    k, _ = keeper(leader=leader)
    run_renewal(k, 0.05)
    assert k.node.barriers == 0


def test_a_leader_handing_over_keeps_its_lease_from_its_last_quorum_round_trip():
    """A leader that hands leadership over (its disk is slow) is a follower
    with no round trip of its own yet: it fenced the runs it had claimed for
    the next second (fault suite, slow-fsync-leader, 2.4 s late). Its last
    quorum round trip as the leader counts instead, and only that long."""
    k, clock = keeper(leader="a")
    k.started_leading()
    clock.t += 5
    for peer in ("b", "c"):
        k.answered(peer)         # a quorum of five (a, b, c) at t = 1005
    assert k.fresh()
    k.node.leader = "b"          # handed over
    clock.t += 1
    assert k.fresh()             # 1 s after its quorum round trip
    clock.t += 6.9
    assert k.fresh()             # within the lease (8 s) of t = 1005
    clock.t += 0.2
    assert not k.fresh()         # and no longer


def test_a_leader_without_a_recent_quorum_gains_nothing_by_stepping_down():
    k, clock = keeper(leader="a")
    k.started_leading()
    k.answered("b")
    k.answered("c")
    clock.t += 9                 # its quorum answered 9 s ago: beyond the lease
    assert not k.fresh()
    k.node.leader = "b"
    assert not k.fresh()

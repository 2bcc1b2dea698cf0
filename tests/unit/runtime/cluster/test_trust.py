"""Who may speak on the peer port (runtime/cluster/trust.py): the decisions on a
real state database and a fake Raft node, fake peers and a fake clock. The
same rules against real daemons: security/test_membership_trust.py."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import types

import pytest

from cronrd.config import ClusterConfig
from cronrd.errors import PermissionDenied, Refused, RequestError
from cronrd.raft.types import ConfChangeType, ConfState
from cronrd.runtime.cluster.trust import JOIN_TOKEN_TTL, VOUCH_INTERVAL, PeerTrust
from cronrd.runtime.storage import open_db
from cronrd.state import commands as C
from cronrd.state.machine import StateMachine
from cronrd.runtime.tasks import Changes

T0 = 1_800_000_000.0


class Clock:
    def __init__(self):
        self.t = T0

    def now(self):
        return self.t

    def monotonic(self):
        return self.t


class FakeRaft:
    def __init__(self, voters=("a", "b", "c"), learners=()):
        self.conf = ConfState(tuple(voters), tuple(learners))
        self.applied = 7
        self.log = types.SimpleNamespace(applied=7)
        self.vouched: list[tuple[str, bool]] = []
        self.vouched_upto: list[int | None] = []

    def knows_member(self, node, voter=False):
        if node in self.conf.voters or (node, True) in self.vouched:
            return True
        return not voter and (node in self.conf.learners or (node, False) in self.vouched)

    def vouch(self, node, voter=False, upto=None):
        self.vouched.append((node, voter))
        self.vouched_upto.append(upto)


class FakeNode:
    def __init__(self, raft, leader=True):
        self.raft = raft
        self.is_leader = leader
        self.leader = "a" if leader else "b"
        self.changed: list[tuple[ConfChangeType, str]] = []
        self.changes = Changes()

    async def change_membership(self, kind, node):
        self.changed.append((kind, node))
        return 1


class FakeLog:
    def __init__(self):
        self.proposed: list[C.Command] = []

    async def propose_as_leader(self, cmd):
        self.proposed.append(cmd)


class FakeRPC:
    """Peers' answers to ``is_member``: a dict, or an exception to raise."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls: list[tuple[str, str, dict]] = []

    async def call(self, peer, method, args, timeout=5.0):
        self.calls.append((peer, method, args))
        answer = self.answers.get(peer, ConnectionError("down"))
        if isinstance(answer, BaseException):
            raise answer
        return answer


class World:
    def __init__(self, tmp_path, *, node_id="a", voters=("a", "b", "c"), learners=(),
                 leader=True, initial=("a", "b", "c"), answers=None):
        self.machine = StateMachine(open_db(str(tmp_path / "state.db")))
        self.clock = Clock()
        self.raft = FakeRaft(voters, learners)
        self.node = FakeNode(self.raft, leader)
        self.log = FakeLog()
        self.rpc = FakeRPC(answers)
        self.serials: dict[str, str] = {}
        self.refreshed = 0
        cc = ClusterConfig(listen=("127.0.0.1", 7001), insecure=True,
                           initial_members={n: ("127.0.0.1", 7001 + i)
                                            for i, n in enumerate(initial)})
        self.trust = PeerTrust(node_id, cc, self.clock, self.machine.conn, self.node, self.log,
                               self.rpc, self.serials, self.refresh)
        self.index = 0

    def refresh(self):
        self.refreshed += 1

    def apply(self, cmd):
        self.index += 1
        with self.machine.conn:
            self.machine.apply(self.index, cmd)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_members_may_speak_and_strangers_may_not(tmp_path):
    w = World(tmp_path, learners=("d",))
    for member in "bcd":
        assert w.trust.authorize(member, ask=False) is None
    why = w.trust.authorize("e", {"serial": "ab"}, ask=False)
    assert "not a member" in why and "applied index 7" in why and "cluster add" in why
    assert w.rpc.calls == []  # ask=False: nobody asked


def test_a_denied_id_or_serial_is_refused_even_for_a_member(tmp_path):
    w = World(tmp_path)
    w.apply(C.Deny(kind="node", value="b", reason="removed", at=T0))
    w.apply(C.Deny(kind="serial", value="c0ffee", reason="rotated", at=T0))
    assert "was removed from the cluster (removed)" in w.trust.authorize("b", ask=False)
    assert "serial c0ffee" in w.trust.authorize("c", {"serial": "c0ffee"}, ask=False)
    w.serials["c"] = "c0ffee"  # the serial it connected with before
    assert "rotated" in w.trust.authorize("c", ask=False)
    assert w.trust.authorize("c", {"serial": "beef"}, ask=False) is None  # a new certificate


def test_a_joining_node_hears_the_members_it_was_told_of(tmp_path):
    (tmp_path / "1").mkdir()
    outside = World(tmp_path / "1", node_id="d", voters=(), initial=("a", "b"))
    assert outside.trust.authorize("b", ask=False) is None
    assert "not a member" in outside.trust.authorize("x", ask=False)
    # once inside the configuration, initial_members alone are not enough
    inside = World(tmp_path, voters=("a",), initial=("a", "b"))
    assert "not a member" in inside.trust.authorize("b", ask=False)


def test_a_node_whose_addition_is_in_progress_may_speak(tmp_path):
    w = World(tmp_path)
    w.apply(C.NodeInfo(node="d", state="joining", addr="127.0.0.1:9", tags=(), at=T0))
    assert w.trust.authorize("d", ask=False) is None
    w.apply(C.NodeInfo(node="e", state="up", addr="127.0.0.1:9", tags=(), at=T0))
    assert "not a member" in w.trust.authorize("e", ask=False)


def test_a_join_token_admits_its_node_once_on_the_leader(tmp_path):
    w = World(tmp_path)
    w.apply(C.JoinToken(node="d", token_hash=hashlib.sha256(b"tok").hexdigest(),
                        addr="127.0.0.9:1", at=T0))

    async def main():
        assert "must present it" in w.trust.authorize("d", {}, ask=False)
        assert "the token it gave is wrong" in w.trust.authorize("d", {"token": "x"})
        assert w.trust.authorize("d", {"token": "tok"}) is None
        assert w.trust.authorize("d", {"token": "tok"}) is None  # again while admitting
        await settle()
    run(main())
    assert [(type(c).__name__, c.node) for c in w.log.proposed] == [
        ("NodeInfo", "d"), ("JoinToken", "d")]
    joining, spent = w.log.proposed
    assert joining.state == "joining" and joining.addr == "127.0.0.9:1"
    assert spent.token_hash == ""  # spent: one use
    assert w.node.changed == [(ConfChangeType.ADD_LEARNER, "d")]
    assert w.refreshed == 3   # joining (it may be asked), then a learner
    assert w.rpc.calls == []  # a token holder is not vouched for


def test_a_joiner_whose_cronrd_cannot_apply_the_cluster_version_is_not_admitted(tmp_path,
                                                                                caplog):
    """cluster/versions.py says no: no learner, no token spent; the node
    stays a joining one until it runs a newer cronrd."""
    w = World(tmp_path)
    asked = []

    async def too_old(node):
        asked.append(node)
        raise Refused(f"node {node} runs cronrd 0.2.0 or older, which applies cluster "
                      "versions up to 1; the cluster is at version 2: upgrade ...")
    w.trust.check_joiner = too_old
    w.apply(C.JoinToken(node="d", token_hash=hashlib.sha256(b"tok").hexdigest(),
                        addr="127.0.0.9:1", at=T0))

    async def main():
        assert w.trust.authorize("d", {"token": "tok"}) is None
        await settle()
    with caplog.at_level(logging.ERROR, logger="cronrd.cluster"):
        run(main())
    assert asked == ["d"]
    # It stays a joining node (heard, not added), its token not spent.
    assert [(type(c).__name__, c.node) for c in w.log.proposed] == [("NodeInfo", "d")]
    assert w.node.changed == []
    assert "event=join_refused node=d error=\"node d runs cronrd 0.2.0 or older" in caplog.text
    # The leader's duty for a joining record asks again; once the node runs
    # a newer cronrd, it is added and its token spent.
    w.apply(w.log.proposed[0])
    run(w.trust.resume_join("d"))
    assert asked == ["d", "d"] and w.node.changed == []
    assert caplog.text.count("event=join_refused") == 1   # said once a minute

    async def fine(node):
        asked.append(node)
    w.trust.check_joiner = fine
    run(w.trust.resume_join("d"))
    assert w.node.changed == [(ConfChangeType.ADD_LEARNER, "d")]
    spent = w.log.proposed[-1]
    assert isinstance(spent, C.JoinToken) and spent.token_hash == ""


def test_a_join_token_expires_and_a_follower_admits_nobody(tmp_path):
    w = World(tmp_path, leader=False)
    w.apply(C.JoinToken(node="d", token_hash=hashlib.sha256(b"tok").hexdigest(),
                        addr="127.0.0.9:1", at=T0))

    async def main():
        assert w.trust.authorize("d", {"token": "tok"}) is None  # it may speak...
        await settle()
    run(main())
    assert w.log.proposed == [] and w.node.changed == []  # ...the leader admits it
    w.clock.t += JOIN_TOKEN_TTL + 1
    why = w.trust.authorize("d", {"token": "tok"}, ask=False)
    assert "expired" in why and "24 hours" in why


def test_an_unknown_node_is_vouched_for_by_one_voter(tmp_path):
    w = World(tmp_path, answers={"b": {"member": True, "voter": False},
                                 "c": {"member": False, "voter": False}})

    async def main():
        assert "not a member" in w.trust.authorize("d")
        await settle()
    run(main())
    assert sorted(p for p, m, a in w.rpc.calls if m == "is_member" and a == {"node": "d"}) \
        == ["b", "c"]
    assert w.raft.vouched == [("d", False)]
    assert w.raft.vouched_upto == [None]   # b (an older version) did not say how far it is


def test_a_vouch_carries_the_newest_applied_index_of_those_who_vouched(tmp_path):
    w = World(tmp_path, answers={"b": {"member": True, "voter": False, "applied": 40},
                                 "c": {"member": True, "voter": False, "applied": 55}})

    async def main():
        w.trust.ask_vouch("d")
        await settle()
    run(main())
    assert w.raft.vouched == [("d", False)] and w.raft.vouched_upto == [55]


def test_a_voter_vouches_for_a_voter_and_silence_vouches_for_nobody(tmp_path):
    w = World(tmp_path, answers={"c": {"member": True, "voter": True}})
    (tmp_path / "2").mkdir()
    w2 = World(tmp_path / "2", answers={"b": RequestError("no"), "c": {"member": False}})

    async def main():
        w.trust.ask_vouch("d")
        w2.trust.ask_vouch("d")
        await settle()
    run(main())
    assert w.raft.vouched == [("d", True)]
    assert w2.raft.vouched == []


def test_vouching_asks_about_one_node_at_most_every_interval(tmp_path):
    w = World(tmp_path, answers={"b": {"member": False}, "c": {"member": False}})

    async def main():
        w.trust.ask_vouch("d")
        w.trust.ask_vouch("d")
        await settle()
        assert len(w.rpc.calls) == 2  # b and c, once
        w.clock.t += VOUCH_INTERVAL
        w.trust.ask_vouch("d")
        await settle()
        assert len(w.rpc.calls) == 4
        await w.trust.close()
        w.clock.t += VOUCH_INTERVAL
        w.trust.ask_vouch("d")  # stopping: nobody asked
        await settle()
        assert len(w.rpc.calls) == 4
    run(main())


def test_a_joining_node_asks_the_members_it_was_told_of(tmp_path):
    w = World(tmp_path, node_id="d", voters=(), initial=("a", "b"),
              answers={"a": {"member": True}})

    async def main():
        w.trust.ask_vouch("e")
        await settle()
    run(main())
    assert sorted(p for p, _, _ in w.rpc.calls) == ["a", "b"]
    assert w.raft.vouched == [("e", False)]


def test_the_leader_resumes_a_join_unless_it_is_under_way(tmp_path):
    w = World(tmp_path, learners=("e",))
    run(w.trust.resume_join("d"))
    run(w.trust.resume_join("e"))  # in the log already
    assert w.node.changed == [(ConfChangeType.ADD_LEARNER, "d")] and w.refreshed == 1


def test_only_members_ask_and_only_voters_change_the_membership(tmp_path):
    w = World(tmp_path, learners=("d",))
    with pytest.raises(PermissionDenied, match="only members may make peer requests"):
        run(w.trust.rpc_is_member("x", {"node": "b"}))
    with pytest.raises(RequestError, match="needs a node id"):
        run(w.trust.rpc_is_member("b", {"node": 5}))
    assert run(w.trust.rpc_is_member("d", {"node": "b"})) == {"member": True, "voter": True,
                                                               "applied": 7}
    assert run(w.trust.rpc_is_member("b", {"node": "d"})) == {"member": True, "voter": False,
                                                               "applied": 7}
    assert run(w.trust.rpc_is_member("b", {"node": "x"})) == {"member": False, "voter": False,
                                                               "applied": 7}
    w.trust.require_member("d")
    w.trust.require_voter("b")
    with pytest.raises(PermissionDenied, match="not a voter"):
        w.trust.require_voter("d")

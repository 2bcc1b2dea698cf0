"""The `cronrd cluster` requests only the leader carries out
(runtime/cluster/admin.py), on a fake Raft node, log and peers. Against real
daemons: integration/test_cluster.py, security/test_membership_trust.py."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from cronrd.config import ClusterConfig
from cronrd.errors import (NotLeader, PermissionDenied, ProposalDropped, RequestError,
                           UsageError)
from cronrd.raft.types import ConfChangeType, ConfState
from cronrd.runtime.cluster import admin as cluster_admin
from cronrd.runtime.cluster.admin import ClusterAdmin, hex_serial
from cronrd.runtime.peers.rpc import PeerError
from cronrd.runtime.tasks import Changes

T0 = 1_800_000_000.0


class Clock:
    def now(self):
        return T0

    def monotonic(self):
        return T0


class Progress:
    def __init__(self, match):
        self.match = match


class FakeRaft:
    def __init__(self, voters, learners=(), matches=None):
        self.conf = ConfState(tuple(voters), tuple(learners))
        self.prs = {n: Progress(m) for n, m in (matches or {}).items()}


class FakeNode:
    """Leads as "a" unless told otherwise; a transfer succeeds when
    ``transfers`` is set (the target leads at the next change)."""

    def __init__(self, raft, leader="a", me="a", transfers=True):
        self.raft = raft
        self.me = me
        self.leader = leader
        self.transfers = transfers
        self.changed: list[tuple[ConfChangeType, str]] = []
        self.transferred: list[str] = []
        self.changes = Changes()

    @property
    def is_leader(self):
        return self.leader == self.me

    async def change_membership(self, kind, node):
        self.changed.append((kind, node))
        return 1

    def transfer_leadership(self, to):
        self.transferred.append(to)
        if self.transfers:
            asyncio.get_running_loop().call_soon(self._moved, to)

    def _moved(self, to):
        self.leader = to
        self.changes.notify()


class FakeLog:
    def __init__(self):
        self.proposed = []

    async def propose_as_leader(self, cmd):
        self.proposed.append(cmd)


class FakeRPC:
    def __init__(self, answer=None):
        self.answer = answer if answer is not None else {"ok": True}
        self.calls: list[tuple[str, str, dict, float]] = []

    async def call(self, peer, method, args, timeout=5.0):
        self.calls.append((peer, method, args, timeout))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def admin(*, voters=("a", "b", "c"), learners=(), leader="a", insecure=True,
          insecure_network=False, healthy=("b", "c"), matches=None, transfers=True,
          answer=None, workers=()):
    node = FakeNode(FakeRaft(voters, learners, matches), leader=leader, transfers=transfers)
    log, rpc = FakeLog(), FakeRPC(answer)
    refreshed = []

    def require_voter(frm):
        if frm not in node.raft.conf.voters:
            raise PermissionDenied(f"{frm} is not a voter")
    cc = ClusterConfig(listen=("127.0.0.1", 7001), insecure=insecure,
                       insecure_network=insecure_network)
    a = ClusterAdmin("a", cc, Clock(), node, log, rpc, {"b": "beef"}, require_voter,
                     lambda n: n in healthy, lambda: refreshed.append(1),
                     is_worker=lambda n: n in workers)
    a.fakes = node, log, rpc, refreshed
    return a


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_follower_sends_the_request_to_the_leader():
    a = admin(leader="b", answer={"removed": "c"})
    assert run(a.request("cluster_remove", {"node": "c"})) == {"removed": "c"}
    _, log, rpc, _ = a.fakes
    assert rpc.calls == [("b", "cluster_remove", {"node": "c", "_method": "cluster_remove"},
                          30.0)]
    assert log.proposed == []


def test_a_follower_without_a_leader_or_with_a_refusal_says_so():
    with pytest.raises(NotLeader):
        run(admin(leader="").request("cluster_add", {"node": "d"}))
    refused = admin(leader="b", answer=PeerError("node d is already a member",
                                                 kind="RequestError"))
    with pytest.raises(RequestError, match="already a member"):  # the leader's kind of error
        run(refused.request("cluster_add", {"node": "d"}))


def test_the_peer_request_is_taken_from_voters_only_and_only_by_the_leader():
    a = admin(learners=("d",))
    with pytest.raises(PermissionDenied):
        run(a.serve("d", {"_method": "cluster_remove", "node": "c"}))
    with pytest.raises(RequestError, match="unknown membership request 'reload'"):
        run(a.serve("b", {"_method": "reload"}))
    with pytest.raises(RequestError, match="unknown membership request None"):
        run(a.serve("b", {"node": "c"}))
    with pytest.raises(NotLeader):
        run(admin(leader="c").serve("b", {"_method": "cluster_remove", "node": "c"}))
    assert run(a.serve("b", {"_method": "cluster_remove", "node": "c"})) == {"removed": "c"}


@pytest.mark.parametrize("args, match", [
    ({"node": "bad id", "address": "127.0.0.1:7"}, "node id"),
    ({"node": "d", "address": "nowhere"}, "invalid address 'nowhere'"),
    ({"node": "d", "address": "10.0.0.4:7000"}, "only on loopback"),
    ({"node": "b", "address": "127.0.0.1:7"}, "already a member"),
])
def test_add_refuses_what_it_cannot_add(args, match):
    a = admin()
    with pytest.raises((UsageError, RequestError), match=match):
        run(a.request("cluster_add", args))
    _, log, _, _ = a.fakes
    assert log.proposed == []


def test_add_makes_a_learner_with_its_joining_record():
    a = admin(insecure_network=True)
    out = run(a.request("cluster_add", {"node": "d", "address": "10.0.0.4:7000"}))
    assert out["role"] == "learner" and out["address"] == "10.0.0.4:7000"
    node, log, _, refreshed = a.fakes
    lift, joining = log.proposed
    assert (lift.op, lift.kind, lift.value, lift.lift) == ("deny", "node", "d", True)
    assert (joining.op, joining.node, joining.state, joining.addr) == (
        "node_info", "d", "joining", "10.0.0.4:7000")
    assert node.changed == [(ConfChangeType.ADD_LEARNER, "d")] and len(refreshed) == 2


def test_add_with_a_token_expects_the_node_and_changes_no_membership():
    a = admin()
    out = run(a.request("cluster_add", {"node": "d", "address": "127.0.0.1:7004",
                                        "token": True}))
    node, log, _, _ = a.fakes
    assert out["role"] == "expected" and out["token"] in out["hint"]
    lift, expect = log.proposed
    assert lift.op == "deny" and lift.lift
    assert expect.op == "join_token" and expect.node == "d"
    assert expect.token_hash == hashlib.sha256(out["token"].encode()).hexdigest()
    assert node.changed == []


def test_remove_takes_the_member_out_and_denies_its_serial():
    a = admin(learners=("d",))
    assert run(a.request("cluster_remove", {"node": "b"})) == {"removed": "b"}
    node, log, _, refreshed = a.fakes
    assert node.changed == [(ConfChangeType.REMOVE, "b")]
    (gone,) = log.proposed
    assert (gone.op, gone.node, gone.serial) == ("remove_node", "b", "beef")
    assert refreshed
    with pytest.raises(RequestError, match="not a member"):
        run(a.request("cluster_remove", {"node": "x"}))
    with pytest.raises(RequestError, match="only voter"):
        run(admin(voters=("b",), leader="a").request("cluster_remove", {"node": "b"}))


def test_removing_a_worker_changes_no_membership_and_denies_its_name():
    a = admin(workers=("w1",))
    assert run(a.request("cluster_remove", {"node": "w1"})) == {"removed": "w1",
                                                               "worker": True}
    node, log, _, refreshed = a.fakes
    assert node.changed == []
    (gone,) = log.proposed
    assert (gone.op, gone.node, gone.deny) == ("remove_node", "w1", True) and refreshed
    with pytest.raises(RequestError, match="not a member or a worker"):
        run(a.request("cluster_remove", {"node": "w2"}))


def test_the_leader_removing_itself_hands_over_first_and_asks_the_new_leader():
    a = admin(matches={"b": 5, "c": 9}, answer={"removed": "a"})
    assert run(a.request("cluster_remove", {"node": "a"})) == {"removed": "a"}
    node, log, rpc, _ = a.fakes
    assert node.transferred == ["c"] and node.changed == [] and log.proposed == []
    assert rpc.calls == [("c", "cluster_remove", {"_method": "cluster_remove", "node": "a"},
                          30.0)]


@pytest.mark.parametrize("raw, serial", [
    ("0A:BC", "abc"), ("0x00ff", "ff"), (" DEADBEEF ", "deadbeef"), (7, "7")])
def test_a_serial_is_read_as_the_transport_records_it(raw, serial):
    assert hex_serial(raw) == serial


@pytest.mark.parametrize("raw", ["", None, "zz", "0x", "12:zz", "-1; DROP"])
def test_a_serial_that_is_not_hex_is_refused(raw):
    with pytest.raises(UsageError, match="invalid certificate serial"):
        hex_serial(raw)


def test_revoke_cert_denies_the_serial_everywhere():
    a = admin()
    assert run(a.request("cluster_revoke_cert", {"serial": "0A:BC"})) == {"revoked": "abc"}
    _, log, _, refreshed = a.fakes
    (deny,) = log.proposed
    assert (deny.kind, deny.value, deny.reason) == ("serial", "abc", "revoked by the operator")
    assert refreshed
    with pytest.raises(UsageError):
        run(a.request("cluster_revoke_cert", {"serial": "zz"}))
    assert len(log.proposed) == 1


def test_leadership_goes_to_the_healthiest_most_caught_up_voter():
    a = admin(voters=("a", "b", "c", "d", "e"), healthy=("b", "c", "e"),
              matches={"b": 5, "c": 9, "d": 50, "e": 9})
    assert run(a.request("cluster_transfer_leader", {"node": None})) == {"leader": "c"}
    assert a.fakes[0].transferred == ["c"]  # d is further but silent; c and e tie: c by name


def test_a_transfer_names_a_voter_or_this_node_and_gives_up_in_time(monkeypatch):
    a = admin(learners=("d",))
    assert run(a.request("cluster_transfer_leader", {"node": "a"})) == {"leader": "a"}
    with pytest.raises(RequestError, match="not a voter"):
        run(a.request("cluster_transfer_leader", {"node": "d"}))
    with pytest.raises(RequestError, match="no other voter"):
        run(admin(voters=("a",)).request("cluster_transfer_leader", {"node": None}))
    monkeypatch.setattr(cluster_admin, "TRANSFER_TIMEOUT", 0.05)
    with pytest.raises(ProposalDropped, match="did not move to b"):
        run(admin(transfers=False).request("cluster_transfer_leader", {"node": "b"}))


def test_stopping_leader_hands_over_only_to_a_healthy_voter():
    quiet = admin(healthy=())
    run(quiet.transfer_before_stop())
    assert quiet.fakes[0].transferred == []
    follower = admin(leader="b")
    run(follower.transfer_before_stop())
    assert follower.fakes[0].transferred == []
    ok = admin(matches={"b": 1, "c": 2})
    run(ok.transfer_before_stop())
    assert ok.fakes[0].transferred == ["c"] and ok.fakes[0].leader == "c"


def test_a_failed_handover_before_stopping_is_logged_not_raised(monkeypatch, caplog):
    monkeypatch.setattr(cluster_admin, "TRANSFER_TIMEOUT", 0.05)
    a = admin(transfers=False)
    run(a.transfer_before_stop())
    assert "leadership_transfer_failed" in caplog.text

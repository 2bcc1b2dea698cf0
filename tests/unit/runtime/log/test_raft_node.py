"""The Raft node driver with real storage and transport, in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile

import pytest

from cronrd.errors import NotLeader, ProposalDropped
from cronrd.raft.types import ConfChangeType, ConfState
from cronrd.runtime.log.raft_node import RaftNode
from cronrd.runtime.log.raft_storage import RaftStorage
from cronrd.runtime.peers.transport import Transport
from raft_cluster import free_ports


class Counter:
    """A trivial state machine: the sum of applied integers."""

    def __init__(self):
        self.total = 0
        self.applied_index = 0

    def apply(self, index, data):
        self.total += int(data)
        self.applied_index = index
        return self.total

    def snapshot(self):
        return str(self.total).encode()

    def restore(self, data, index):
        self.total = int(data)
        self.applied_index = index


class Net:
    def __init__(self, ids, tmp):
        self.ids = list(ids)
        self.tmp = tmp
        self.ports = dict(zip(self.ids, free_ports(len(self.ids))))
        self.nodes: dict[str, RaftNode] = {}
        self.transports: dict[str, Transport] = {}

    async def start(self, node_id, voters=None, snapshot_every=10000, snapshot_bytes=32 << 20):
        peers = {i: ("127.0.0.1", p) for i, p in self.ports.items() if i != node_id}
        box = {}
        t = Transport(node_id, ("127.0.0.1", self.ports[node_id]), peers,
                      lambda m: box["n"].step(m), tls=None, insecure=True)
        n = RaftNode(node_id, ConfState(tuple(voters or self.ids)),
                     RaftStorage(f"{self.tmp}/{node_id}.db"), t, Counter(),
                     tick_interval=0.02, proposal_timeout=3.0,
                     rng=random.Random(hash(node_id) & 0xffff),
                     snapshot_every=snapshot_every, snapshot_bytes=snapshot_bytes)
        box["n"] = n
        await t.start()
        await n.start()
        self.nodes[node_id], self.transports[node_id] = n, t
        return n

    async def stop(self, node_id):
        await self.nodes.pop(node_id).stop()
        await self.transports.pop(node_id).close()

    async def leader(self, timeout=10.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for n in self.nodes.values():
                if n.is_leader:
                    return n
            await asyncio.sleep(0.01)
        raise AssertionError("no leader elected")

    async def close(self):
        for i in list(self.nodes):
            await self.stop(i)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def with_net(ids: str, body, start: str | None = None, **node_kw) -> None:
    """Start nodes ``start`` (default: all of ``ids``) in a temporary
    directory, run ``await body(net)``, and always shut every node down."""
    async def main():
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            net = Net(ids, tmp)
            try:
                for i in (start if start is not None else ids):
                    await net.start(i, **node_kw)
                await body(net)
            finally:
                await net.close()
    run(main())


async def until(pred, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_propose_read_and_not_leader():
    async def body(net):
        leader = await net.leader()
        index, total = await leader.propose(b"5")
        assert total == 5 and index >= 2
        index2, total = await leader.propose(b"7")
        assert (index2, total) == (index + 1, 12)
        follower = next(n for n in net.nodes.values() if not n.is_leader)
        with pytest.raises(NotLeader) as exc:
            await follower.propose(b"1")
        assert exc.value.leader == leader.id
        # Linearizable read on a follower: after the barrier it has the write.
        await follower.read_barrier()
        assert follower.sm.total == 12
        results = await asyncio.gather(*(leader.propose(b"1") for _ in range(50)))
        assert sorted(r[1] for r in results) == list(range(13, 63))
    with_net("abc", body)


def test_leader_transfer_and_failover_and_restart_from_disk():
    async def body(net):
        leader = await net.leader()
        await leader.propose(b"1")
        target = next(i for i in "abc" if i != leader.id)
        leader.transfer_leadership(target)
        await until(lambda: net.nodes[target].is_leader)
        await net.nodes[target].propose(b"2")
        # Stop the leader: the other two elect a new one and keep going.
        await net.stop(target)
        new = await net.leader()
        assert new.id != target
        assert (await new.propose(b"3"))[1] == 6
        # The stopped node restarts from its own log and catches up.
        back = await net.start(target)
        await until(lambda: back.sm.total == 6)
    with_net("abc", body)


def test_proposal_on_an_isolated_leader_never_hangs():
    async def body(net):
        leader = await net.leader()
        for other in [i for i in "abc" if i != leader.id]:
            await net.stop(other)
        # The entry can never commit: the proposal fails in bounded time
        # (check-quorum makes the leader step down, or the timeout hits).
        with pytest.raises((ProposalDropped, NotLeader)):
            await leader.propose(b"1")
    with_net("abc", body)


def test_membership_add_learner_promote_remove_and_snapshot_catch_up():
    async def body(net):
        leader = await net.leader()
        for _ in range(60):  # enough to compact the log into snapshots
            await leader.propose(b"1")
        assert leader.raft.log.snap_index > 0
        d = await net.start("d", voters="abc", snapshot_every=20)
        await leader.change_membership(ConfChangeType.ADD_LEARNER, "d")
        await until(lambda: d.sm.total == 60)  # caught up via InstallSnapshot
        assert d.role == "learner"
        await leader.change_membership(ConfChangeType.PROMOTE, "d")
        await until(lambda: "d" in d.raft.conf.voters)
        leader = await net.leader()
        await leader.change_membership(ConfChangeType.REMOVE,
                                       next(i for i in "abc" if i != leader.id))
        assert len(leader.raft.conf.voters) == 3
        assert (await leader.propose(b"1"))[1] == 61
    with_net("abcd", body, start="abc", voters="abc", snapshot_every=20)


def test_a_log_of_few_but_large_entries_is_compacted_by_its_bytes():
    """100,000 jobs load in a few hundred entries of tens of MB: far from
    snapshot_every entries, the log (in memory until compacted) must be
    snapshotted by its size too."""
    async def body(net):
        leader = await net.leader()
        big = b"1" + b" " * 10_000
        for _ in range(2):
            await leader.propose(big)
        assert leader.raft.log.snap_index == 0  # 20 KB: below snapshot_bytes
        for _ in range(3):
            await leader.propose(big)
        await until(lambda: leader.raft.log.snap_index >= 3)
        assert leader.sm.total == 5
        await until(lambda: all(n.raft.log.snap_index >= 3 for n in net.nodes.values()))
    with_net("abc", body, snapshot_every=10_000, snapshot_bytes=25_000)


def test_a_read_asked_of_a_leader_that_dies_fails_when_the_leader_changes():
    """A read forwarded to a leader that never answers (it died) used to
    wait for proposal_timeout: a node starting meanwhile was not ready for
    11 s, though it had become the leader itself (fault suite, seed
    524498205, skew+kill-leader). It fails as soon as the leader changes."""
    async def body(net):
        # Under load (CI) the leadership may move between finding the leader
        # and asking the read: the read then ends at once (answered by the
        # new leader, or dropped), and is never seen pending. That is not
        # the case under test, so set it up again (CI run, stop 46).
        for _ in range(5):
            old = await net.leader()
            reader = next(n for i, n in net.nodes.items() if i != old.id)
            step = old.step
            old.step = lambda m: None  # deaf: the read it is asked never gets an answer
            read = asyncio.ensure_future(reader.read_barrier())
            await until(lambda: reader.reads or read.done())
            if not read.done() and reader._read_asked.get(next(iter(reader.reads))) == old.id:
                break
            old.step = step
            with contextlib.suppress(ProposalDropped):
                await read
        else:
            pytest.fail("the leadership never held still long enough to ask a read of it")
        await net.stop(old.id)
        with pytest.raises(ProposalDropped, match="the leader changed"):
            await read
        new = await net.leader()
        assert new.id != old.id
        await reader.read_barrier()  # asked again: answered
    with_net("abc", body)

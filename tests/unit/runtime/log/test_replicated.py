"""The Raft state machine adapter (raft_log.ReplicatedState): batches, undecodable
entries, snapshots; and what a member added with `cronrd cluster add` starts from."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random

import apsw
import pytest

from cronrd.errors import StateError
from cronrd.raft.types import ConfChangeType, ConfState
from cronrd.runtime.log.replicated import ReplicatedState
from cronrd.runtime.log.raft_node import RaftNode
from cronrd.runtime.log.raft_storage import RaftStorage
from cronrd.runtime.log.snapshot_data import FileData
from cronrd.runtime.storage import open_db
from cronrd.runtime.peers.transport import Transport
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state import versions as V
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from raft_cluster import free_ports
from tests.unit.state.test_state import T0, spec


def put(name="j", node="a", at=T0, **over) -> C.PutJob:
    s = spec(name=name, **over)
    digest = hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()
    return C.PutJob(name=name, spec=s, digest=digest, source=f"/etc/{node}/{name}.yaml",
                    at=at, node=node)


def fire(t, name="j", node="a") -> C.Fire:
    return C.Fire(job=name, fire_time=t, kind="scheduled", node=node, due_at=t, at=t - 0.5)


def state(tmp_path, name: str) -> ReplicatedState:
    conn = open_db(str(tmp_path / f"{name}.db"))  # like the daemon's state.db (WAL)
    return ReplicatedState(StateMachine(conn), str(tmp_path))


def entries(*cmds, start=1) -> list[tuple[int, bytes]]:
    return [(start + i, c if isinstance(c, bytes) else c.encode()) for i, c in enumerate(cmds)]


# -- apply_batch ------------------------------------------------------------------------------
def test_a_batch_is_one_transaction_with_a_result_per_index(tmp_path):
    rs = state(tmp_path, "s")
    commits = []
    rs.conn.setcommithook(lambda: commits.append(1) or False)
    results = rs.apply_batch(entries(
        put(), fire(T0 + 1), fire(T0 + 1),                     # the second is refused
        C.NodeInfo(node="a", state="up", addr="h:1", tags=("x",), at=T0),
        C.CancelRun(run_id=99, reason="no", at=T0)))           # refused: no such run
    assert commits == [1]  # one commit for the whole batch
    assert set(results) == {1, 2, 3, 4, 5}
    assert results[1]["changed"] is True and results[1]["created"] is True
    assert results[2] == {"run_id": 1, "state": "assigned"}
    assert isinstance(results[3], Refused) and "already handled" in str(results[3])
    assert results[4] == {"changed": True}
    assert isinstance(results[5], Refused) and "no run with id 99" in str(results[5])
    assert rs.applied_index == 5
    assert [r.run_id for r in Q.list_runs(rs.conn, "j")] == [1]
    assert [n["node"] for n in Q.nodes(rs.conn)] == ["a"]
    # apply() is a batch of one.
    assert rs.apply(6, fire(T0 + 2).encode()) == {"run_id": 2, "state": "assigned"}
    assert rs.applied_index == 6


def test_a_refused_command_changes_nothing_but_the_index_and_the_digest(tmp_path):
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    a.apply_batch(entries(put(), fire(T0 + 1)))
    b.apply_batch(entries(put(), fire(T0 + 1)))
    before = a.machine.full_digest()
    res = a.apply_batch(entries(fire(T0 + 1), start=3))
    assert isinstance(res[3], Refused)
    b.apply(3, fire(T0 + 1).encode())
    assert a.applied_index == b.applied_index == 3
    assert a.machine.state_digest == b.machine.state_digest
    # Only the applied index differs from before (full_digest covers it).
    with a.conn:
        a.machine._set_meta("applied_index", 2)
    assert a.machine.full_digest() == before


def test_effects_are_delivered_after_the_commit_in_order(tmp_path):
    rs = state(tmp_path, "s")
    seen = []
    other = apsw.Connection(str(tmp_path / "s.db"))  # another reader of the same file

    def listener(effects):
        # Delivered outside the transaction, and what they describe is committed.
        assert not rs.conn.in_transaction
        committed = dict(other.execute("SELECT key, value FROM meta"))
        seen.append(([e.kind for e in effects], int(committed["applied_index"])))

    rs.listeners.append(listener)
    rs.apply_batch(entries(put(), fire(T0 + 1), fire(T0 + 1),
                           C.CancelRun(run_id=1, reason="stop", at=T0 + 1)))
    assert seen == [(["jobs_changed", "assign", "run_done"], 4)]
    # A batch without effects calls nobody.
    rs.apply_batch(entries(C.NodeInfo(node="a", state="up", addr="h:1", tags=(), at=T0),
                           start=5))
    assert len(seen) == 1
    other.close()


def test_effects_of_a_refused_command_are_not_delivered(tmp_path):
    rs = state(tmp_path, "s")
    got = []
    rs.listeners.append(got.extend)
    rs.apply_batch(entries(put(), fire(T0 + 1)))
    got.clear()
    # The second manual run of a forbid job is refused while the first runs.
    run = Q.get_run(rs.conn, 1)
    rs.apply_batch(entries(
        C.RunStarted(run_id=1, token=run.token, node="a", pid=5, started_at=T0 + 1,
                     log_path="/l"),
        C.ManualRun(job="j", node="a", at=T0 + 2), start=3))
    assert got == []
    assert Q.count_active(rs.conn) == {"running": 1}


def test_a_failing_listener_is_logged_and_the_others_still_get_the_effects(tmp_path, caplog):
    rs = state(tmp_path, "s")
    got = []

    def broken(effects):
        raise RuntimeError("listener bug")
    rs.listeners += [broken, got.extend]
    with caplog.at_level(logging.ERROR, logger="cronrd.cluster"):
        rs.apply_batch(entries(put()))
    assert [e.kind for e in got] == ["jobs_changed"]
    assert "effect_listener_failed" in caplog.text and rs.applied_index == 1


def test_an_undecodable_entry_advances_index_and_digest_alike_on_every_node(tmp_path, caplog):
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    batch = entries(put(), b"\x00garbage", b'{"op":"fire"}', fire(T0 + 1))
    with caplog.at_level(logging.ERROR, logger="cronrd.cluster"):
        res_a = a.apply_batch(batch)
    # The other node gets the same entries in different batches.
    res_b = {}
    for one in batch:
        res_b.update(b.apply_batch([one]))
    for res in (res_a, res_b):
        assert isinstance(res[2], StateError) and isinstance(res[3], StateError)
        assert res[4] == {"run_id": 1, "state": "assigned"}
    assert a.applied_index == b.applied_index == 4
    assert a.machine.state_digest == b.machine.state_digest
    assert a.machine.full_digest() == b.machine.full_digest()
    assert "undecodable_entry index=2" in caplog.text
    # It counts in the digest: a node that saw a different undecodable entry differs.
    c = state(tmp_path, "c")
    c.apply_batch(entries(put(), b"\x00other", b'{"op":"fire"}', fire(T0 + 1)))
    assert c.applied_index == 4 and c.machine.state_digest != a.machine.state_digest


def test_a_decodable_command_that_apply_cannot_handle_does_not_stop_the_node(tmp_path):
    """A command that decodes but whose fields have the wrong type (a buggy
    or newer peer: `propose` accepts whatever C.decode accepts) makes apply
    raise TypeError. Raised out of apply_batch, it stops the Raft node, and
    on every node alike, again after each restart: one entry takes the
    whole cluster down for good. It must be refused like an undecodable one."""
    a, b = state(tmp_path, "a"), state(tmp_path, "b")
    bad = json.dumps({"op": "fire", "job": "j", "fire_time": "soon", "kind": "scheduled",
                      "node": "a", "due_at": 1.0, "at": 1.0}).encode()
    C.decode(bad)  # accepted by the decoder
    batch = entries(put(), bad, fire(T0 + 1))
    res = a.apply_batch(batch)
    assert isinstance(res[2], Exception)
    assert res[3] == {"run_id": 1, "state": "assigned"}
    b.apply_batch(batch)
    assert a.applied_index == b.applied_index == 3
    assert a.machine.state_digest == b.machine.state_digest


# -- snapshots ------------------------------------------------------------------------------------
def busy_state(rs: ReplicatedState) -> None:
    rs.apply_batch(entries(
        put(), put(node="b"), put("k", node="a", concurrency="replace"),
        C.NodeInfo(node="a", state="up", addr="h:1", tags=("ssd",), at=T0),
        fire(T0 + 1), fire(T0 + 2, node="b"), fire(T0 + 1, "k"),
        C.RecordGap(job="k", first=T0 + 2, last=T0 + 50, count=49, reason="outage",
                    at=T0 + 51),
        C.NodeLost(node="b", at=T0 + 60, reason="gone"),
        b"undecodable"))


def test_snapshot_then_restore_gives_the_same_state_and_a_restored_effect(tmp_path):
    src = state(tmp_path, "src")
    busy_state(src)
    data = src.snapshot()
    dst = state(tmp_path, "dst")
    got = []
    dst.listeners.append(got.append)
    dst.restore(data, src.applied_index)
    assert dst.applied_index == src.applied_index == 10
    assert dst.machine.full_digest() == src.machine.full_digest()
    assert dst.machine.state_digest == src.machine.state_digest
    assert [[e.kind for e in effects] for effects in got] == [["restored"]]
    # Both go on alike from there.
    more = entries(fire(T0 + 3), C.ManualRun(job="k", node="a", at=T0 + 70), start=11)
    assert src.apply_batch(more) == dst.apply_batch(more)
    assert dst.machine.full_digest() == src.machine.full_digest()
    # No scratch files left behind.
    assert sorted(p.name for p in tmp_path.iterdir() if "snapshot" in p.name) == []


def test_restore_replaces_a_state_that_had_diverged(tmp_path):
    src, dst = state(tmp_path, "src"), state(tmp_path, "dst")
    busy_state(src)
    dst.apply_batch(entries(put("other"), *[fire(T0 + i, "other") for i in range(1, 30)]))
    dst.restore(src.snapshot(), src.applied_index)
    assert dst.machine.full_digest() == src.machine.full_digest()
    assert [j["name"] for j in Q.jobs(dst.conn)] == ["j", "k"]
    # The restored database is still the daemon's file (reopened, it is the same).
    path = str(tmp_path / "dst.db")
    again = StateMachine(open_db(path))
    assert again.full_digest() == src.machine.full_digest()


def test_a_snapshot_names_its_version_and_a_newer_one_is_refused_before_it_replaces_anything(
        tmp_path):
    src, dst = state(tmp_path, "src"), state(tmp_path, "dst")
    busy_state(src)
    src.apply_batch(entries(C.SetClusterVersion(version=2, members={}, at=T0), start=11))
    # A snapshot carries its version (and which cronrd wrote it) in its meta.
    dst.restore(src.snapshot(), src.applied_index)
    assert V.recorded(dst.conn) == 2 and dst.machine.full_digest() == src.machine.full_digest()
    # One of a cluster version this code does not apply: refused, and why.
    mine = dst.machine.full_digest()
    with src.conn:
        src.conn.execute("UPDATE meta SET value=? WHERE key='cluster_version'",
                         (V.APPLY_VERSION + 1,))
        src.conn.execute("UPDATE meta SET value='9.0.0' WHERE key='written_by'")
    with pytest.raises(V.NewerLog) as err:
        dst.restore(src.snapshot(), src.applied_index)
    assert (f"the snapshot at index {src.applied_index} from the leader is at cluster version "
            f"{V.APPLY_VERSION + 1} (written by cronrd 9.0.0)") in str(err.value)
    assert "upgrade cronrd on this node" in str(err.value)
    assert dst.machine.full_digest() == mine  # its own state is as it was
    assert sorted(p.name for p in tmp_path.iterdir() if "snapshot" in p.name) == []


# -- a member added by `cluster add` ------------------------------------------------------------
class Net:
    """RaftNodes over real loopback transports, each over a ReplicatedState."""

    def __init__(self, ids, tmp):
        self.tmp = tmp
        self.ports = dict(zip(ids, free_ports(len(ids))))
        self.nodes: dict[str, RaftNode] = {}
        self.transports: dict[str, Transport] = {}

    async def start(self, node_id, voters):
        peers = {i: ("127.0.0.1", p) for i, p in self.ports.items() if i != node_id}
        box = {}
        t = Transport(node_id, ("127.0.0.1", self.ports[node_id]), peers,
                      lambda m: box["n"].step(m), tls=None, insecure=True)
        sm = ReplicatedState(StateMachine(apsw.Connection(":memory:")), self.tmp)
        n = RaftNode(node_id, ConfState(tuple(voters)), RaftStorage(f"{self.tmp}/{node_id}.raft"),
                     t, sm, tick_interval=0.02, election_tick=10, proposal_timeout=5.0,
                     rng=random.Random(hash(node_id) & 0xffff), snapshot_every=100000)
        box["n"] = n
        await t.start()
        await n.start()
        self.nodes[node_id], self.transports[node_id] = n, t
        return n

    async def leader(self, timeout=10.0):
        await until(lambda: any(n.is_leader for n in self.nodes.values()), timeout)
        return next(n for n in self.nodes.values() if n.is_leader)

    async def close(self):
        for i in list(self.nodes):
            await self.nodes.pop(i).stop()
            await self.transports.pop(i).close()


async def until(pred, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def with_net(body):
    async def main(tmp):
        net = Net("abcd", tmp)
        try:
            for i in "abc":
                await net.start(i, voters="abc")
            await body(net)
        finally:
            await net.close()

    def runner(tmp_path):
        asyncio.run(asyncio.wait_for(main(str(tmp_path)), 60))
    return runner


async def cluster_add(leader: RaftNode, node: str) -> None:
    """What ClusterAdmin.add (runtime/cluster/admin.py) does with the Raft node."""
    await leader.change_membership(ConfChangeType.ADD_LEARNER, node)
    leader.snapshot_now()


async def some_history(leader: RaftNode) -> None:
    for cmd in (put(), C.NodeInfo(node="a", state="up", addr="h:1", tags=(), at=T0),
                fire(T0 + 1), fire(T0 + 2)):
        await leader.propose(cmd.encode())


def test_a_joining_node_starts_from_the_snapshot_with_the_membership(tmp_path):
    async def body(net):
        leader = await net.leader()
        await some_history(leader)
        await cluster_add(leader, "d")
        d = await net.start("d", voters=())  # cluster.join: true
        await until(lambda: d.sm.applied_index == leader.sm.applied_index)
        assert d.raft.conf == ConfState(("a", "b", "c"), ("d",))
        assert d.sm.machine.full_digest() == leader.sm.machine.full_digest()
    with_net(body)(tmp_path)


def test_a_joining_node_gets_the_membership_after_a_leader_change(tmp_path):
    """`cluster add` snapshots on the leader that ran it, because the log
    does not hold the bootstrap membership. If leadership moves before the
    new node has caught up (it may not even be started yet), the new leader
    has no snapshot and replays its log from index 1: the new node never
    learns the bootstrap voters. Promoted later, it sees itself as the only
    voter and elects itself: two leaders, diverging states."""
    async def body(net):
        leader = await net.leader()
        await some_history(leader)
        await cluster_add(leader, "d")
        other = next(i for i in "abc" if i != leader.id)
        await until(lambda: net.nodes[other].raft.conf.learners == ("d",))
        leader.transfer_leadership(other)
        await until(lambda: net.nodes[other].is_leader)
        new = net.nodes[other]
        await new.propose(fire(T0 + 3).encode())
        d = await net.start("d", voters=())
        await until(lambda: d.sm.applied_index == new.sm.applied_index)
        assert d.sm.machine.full_digest() == new.sm.machine.full_digest()
        assert d.raft.conf == ConfState(("a", "b", "c"), ("d",))
    with_net(body)(tmp_path)


# -- periodic snapshots, off the event loop -------------------------------------------------------
def test_a_periodic_snapshot_is_copied_off_the_event_loop_and_restores_the_state(tmp_path):
    """Every snapshot_every entries the node snapshots its state. The copy
    (and its fsync) runs in a worker thread while entries go on being
    applied; the snapshot is at the index the copy began at, and that
    state plus the log after it is the node's state."""
    import threading

    async def main():
        port = free_ports(1)[0]
        box = {}
        t = Transport("a", ("127.0.0.1", port), {}, lambda m: box["n"].step(m), tls=None,
                      insecure=True)
        rs = state(tmp_path, "a-state")
        copied_in = []
        job = rs.snapshot_job

        def spying_job():
            copy = job()

            def spy(path):
                copied_in.append(threading.get_ident())
                return copy(path)
            return spy
        rs.snapshot_job = spying_job
        storage = RaftStorage(str(tmp_path / "a.raft"))
        n = RaftNode("a", ConfState(("a",)), storage, t, rs, tick_interval=0.02,
                     proposal_timeout=5.0, rng=random.Random(1), snapshot_every=15)
        box["n"] = n
        await t.start()
        await n.start()
        try:
            await until(lambda: n.is_leader)
            await n.propose(put().encode())
            for i in range(1, 40):
                await n.propose(fire(T0 + i).encode())
            await until(lambda: storage.snapshot_index() > 0)
            loaded = storage.load_snapshot()
            index = loaded.meta.index
            rest = storage.entries(index + 1, storage.last_index() + 1)
            final = rs.machine.full_digest(), rs.applied_index
        finally:
            await n.stop()
            await t.close()
            storage.close()
        return copied_in, loaded, rest, final

    copied_in, loaded, rest, (digest, applied) = asyncio.run(asyncio.wait_for(main(), 60))
    assert copied_in and threading.main_thread().ident not in copied_in
    assert os.path.exists(f"{tmp_path}/a.raft.snapshot-{loaded.meta.index}")
    assert loaded.meta.conf == ConfState(("a",))
    # The snapshot, then the entries after it, give the node's state.
    dst = state(tmp_path, "replay")
    dst.restore(loaded.data, loaded.meta.index)
    dst.apply_batch([(e.index, e.data) for e in rest if e.type.name == "NORMAL"])
    assert (dst.machine.full_digest(), dst.applied_index) == (digest, applied)


async def _one_node(tmp_path, rs, storage, snapshot_every):
    box = {}
    t = Transport("a", ("127.0.0.1", free_ports(1)[0]), {}, lambda m: box["n"].step(m),
                  tls=None, insecure=True)
    n = box["n"] = RaftNode("a", ConfState(("a",)), storage, t, rs, tick_interval=0.02,
                            proposal_timeout=5.0, rng=random.Random(1),
                            snapshot_every=snapshot_every)
    await t.start()
    await n.start()
    await until(lambda: n.is_leader)
    return n, t


def test_a_failing_snapshot_copy_leaves_no_file_and_waits_before_trying_again(tmp_path):
    """Found in review: a copy failing (a full disk) was tried again at the
    very next Ready, and each try left a whole copy of the state behind as
    a .tmp file: 46 entries, 19 copies, 19 files."""
    from cronrd.errors import StorageError
    attempts = []

    async def main():
        rs = state(tmp_path, "a-state")
        storage = RaftStorage(str(tmp_path / "a.raft"))

        def failing_seal(tmp, index, data):
            attempts.append(index)
            raise StorageError("cannot write the snapshot file: [Errno 28] No space left")
        storage.seal_snapshot_file = failing_seal
        n, t = await _one_node(tmp_path, rs, storage, 15)
        try:
            await n.propose(put().encode())
            for i in range(1, 45):
                await n.propose(fire(T0 + i).encode())
                await asyncio.sleep(0.005)
            await until(lambda: n._snapshotting is None)
        finally:
            await n.stop()
            await t.close()
            storage.close()
        return sorted(f for f in os.listdir(tmp_path) if ".snapshot-" in f)
    left = asyncio.run(asyncio.wait_for(main(), 60))
    assert left == []
    assert 1 <= len(attempts) <= 3 and all(b - a >= 15 for a, b in zip(attempts, attempts[1:]))


def test_a_copy_overtaken_by_a_snapshot_on_the_loop_is_dropped_with_its_file(tmp_path):
    """A member joins (snapshot_now, on the loop) while a periodic copy is
    still being made: the copy, now older than the stored snapshot, is
    dropped, and so is its file; the one snapshot_now made is kept (a file
    too: a state is never held whole in memory)."""
    import threading
    release = threading.Event()

    async def main():
        rs = state(tmp_path, "a-state")
        job = rs.snapshot_job

        def held_job():
            copy = job()

            def held(path):
                # Only the periodic copy, on its thread, is held: snapshot_now
                # copies on the loop, and holding it would stall the loop
                # (and this test) for the whole wait.
                if threading.current_thread() is not threading.main_thread():
                    release.wait(20)
                return copy(path)
            return held
        rs.snapshot_job = held_job
        storage = RaftStorage(str(tmp_path / "a.raft"))
        n, t = await _one_node(tmp_path, rs, storage, 15)
        try:
            await n.propose(put().encode())
            for i in range(1, 20):
                await n.propose(fire(T0 + i).encode())
            await until(lambda: n._snapshotting is not None)
            n.snapshot_now()                 # at the applied index, ahead of the copy
            stored = storage.snapshot_index()
            release.set()
            await until(lambda: n._snapshotting is None)
            return stored, storage.snapshot_index(), sorted(
                f for f in os.listdir(tmp_path) if ".snapshot-" in f)
        finally:
            release.set()
            await n.stop()
            await t.close()
            storage.close()
    stored, after, files = asyncio.run(asyncio.wait_for(main(), 60))
    assert after == stored >= 15 and files == [f"a.raft.snapshot-{stored}"]


def test_a_joining_node_receives_the_snapshot_into_a_file_and_keeps_it_there(tmp_path):
    """The snapshot a new member receives goes to a file as its chunks come
    (never whole in memory), is stored as that file, and is what the node
    restores from when it starts again."""
    async def body(net):
        leader = await net.leader()
        await some_history(leader)
        await cluster_add(leader, "d")
        d = await net.start("d", voters=())
        await until(lambda: d.sm.applied_index == leader.sm.applied_index)
        index = d.storage.snapshot_index()
        files = sorted(f for f in os.listdir(net.tmp) if f.startswith("d.raft.snapshot-"))
        assert index > 0 and files == [f"d.raft.snapshot-{index}"]
        assert isinstance(d.raft.snapshot.data, FileData)
        digest = d.sm.machine.full_digest()
        await net.nodes.pop("d").stop()
        await net.transports.pop("d").close()
        d.storage.close()
        again = RaftStorage(f"{net.tmp}/d.raft")
        snap = again.load_snapshot()
        assert isinstance(snap.data, FileData) and snap.meta.index == index
        fresh = ReplicatedState(StateMachine(apsw.Connection(":memory:")), net.tmp)
        fresh.restore(snap.data, index)
        assert fresh.machine.full_digest() == digest
        again.close()
    with_net(body)(tmp_path)


def test_the_nets_ports_are_never_a_connections_source_port():
    """A port picked by binding to 0 is ephemeral: a, b and c dialling d before
    it listened were once given d's port as a source port, and d could not
    listen ("Address already in use", CI)."""
    from raft_cluster import ephemeral_low
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(p < ephemeral_low() for p in ports)

"""The Raft storage contract (``cronrd.raft.storage``), run against every
storage that keeps it: the node's real storage (``RaftStorage``), the
simulated disk of the Raft simulation (``raft_sim.Disk``) and, for the write
rules, the core's in-memory log (``RaftLog``). Then the interleaving of
issue 36 (seed 17227417148149), driven by hand through the core into the
real storage and the simulated disk, crash point by crash point."""

from __future__ import annotations

import random

import pytest

import raft_sim
from cronrd.errors import StorageError
from cronrd.raft.core import Raft, RaftConfig
from cronrd.raft.log import RaftLog
from cronrd.raft.storage import append_refusal, keeps_suffix, snapshot_refusal
from cronrd.raft.types import (ConfState, Entry, HardState, Message, MsgType, Snapshot,
                               SnapshotMeta)
from cronrd.runtime.log.raft_storage import RaftStorage

CONF = ConfState(("n1", "n2", "n3"))


def ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, data=f"{i}/{term}".encode()) for i in range(lo, hi + 1)]


def snap(index: int, term: int) -> Snapshot:
    return Snapshot(SnapshotMeta(index, term, CONF), f"state@{index}".encode())


# -- the rules as functions --------------------------------------------------------------


def test_the_rules_name_what_is_wrong():
    assert append_refusal(ents(4, 5), 0, 3) is None
    assert append_refusal(ents(2, 3), 0, 3) is None           # a conflict truncation
    assert append_refusal([], 9, 3) is None
    assert "hole after 3" in append_refusal(ents(5, 5), 0, 3)
    assert "covered by the snapshot at 4" in append_refusal(ents(4, 5), 4, 6)
    assert "not contiguous: 4 is followed by 6" in append_refusal(ents(4, 4) + ents(6, 6), 0, 3)
    assert snapshot_refusal(5, 5) is None and snapshot_refusal(6, 5) is None
    assert "older" in snapshot_refusal(4, 5)
    assert keeps_suffix(2, 2) and not keeps_suffix(1, 2) and not keeps_suffix(None, 2)


# -- one set of cases, every storage ------------------------------------------------------


class Real:
    refused = StorageError

    def __init__(self, tmp_path):
        self.s = RaftStorage(str(tmp_path / "raft.db"), fsync=False)

    def write(self, entries):
        self.s.save(None, entries)

    def store_snapshot(self, sn):
        self.s.save_snapshot(sn)

    def state(self):
        st = self.s.load()
        return (st.snapshot_meta.index if st.snapshot_meta else 0,
                [(e.index, e.term) for e in st.entries])


class Sim:
    refused = raft_sim.Violation

    def __init__(self, tmp_path):
        self.d = raft_sim.Disk()

    def write(self, entries):
        self.d.save_entries(entries)

    def store_snapshot(self, sn):
        self.d.save_snapshot(sn)

    def state(self):
        return self.d.snap_index(), [(e.index, e.term) for e in self.d.entries]


class Memory:
    """The core's in-memory log keeps the write rules (it has no store of
    snapshots of its own: the core restores or compacts it)."""
    refused = StorageError

    def __init__(self, tmp_path):
        self.log = RaftLog()

    def write(self, entries):
        self.log.append(entries)

    def store_snapshot(self, sn):
        pytest.skip("the in-memory log restores or compacts; it stores no snapshot")

    def state(self):
        return self.log.snap_index, [(e.index, e.term) for e in self.log.entries]


@pytest.fixture(params=[Real, Sim, Memory], ids=["real", "sim", "memory"])
def store(request, tmp_path):
    return request.param(tmp_path)


def test_appends_and_a_conflict_truncation(store):
    store.write(ents(1, 5))
    store.write(ents(4, 6, term=2))
    assert store.state() == (0, [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)])


@pytest.mark.parametrize("bad", [ents(5, 6), ents(4, 4) + ents(6, 6), list(reversed(ents(2, 3)))],
                         ids=["hole", "gap inside", "descending"])
def test_a_non_contiguous_write_is_refused_and_writes_nothing(store, bad):
    store.write(ents(1, 3))
    with pytest.raises(store.refused):
        store.write(bad)
    assert store.state() == (0, [(1, 1), (2, 1), (3, 1)])
    store.write(ents(4, 4))            # the storage goes on working
    assert store.state()[1][-1] == (4, 1)


def test_entries_a_snapshot_covers_are_refused(store):
    store.write(ents(1, 6))
    store.store_snapshot(snap(4, 1))
    assert store.state() == (4, [(5, 1), (6, 1)])
    for bad in (ents(4, 5), ents(2, 2)):
        with pytest.raises(store.refused):
            store.write(bad)
    assert store.state() == (4, [(5, 1), (6, 1)])
    store.write(ents(5, 5, term=2))   # right after the snapshot: fine
    assert store.state() == (4, [(5, 2)])


def test_an_older_snapshot_is_refused(store):
    store.write(ents(1, 6))
    store.store_snapshot(snap(4, 1))
    with pytest.raises(store.refused):
        store.store_snapshot(snap(3, 1))
    assert store.state() == (4, [(5, 1), (6, 1)])


@pytest.mark.parametrize("at, term, kept", [
    (4, 1, [(5, 1), (6, 1)]),      # the stored entry at 4 has the snapshot's term: kept
    (4, 2, []),                     # another history: all of it goes
    (9, 1, []),                     # beyond the log
])
def test_a_snapshot_keeps_only_a_suffix_that_continues_it(store, at, term, kept):
    store.write(ents(1, 6))
    store.store_snapshot(snap(at, term))
    assert store.state() == (at, kept)


def test_a_snapshot_at_the_stored_index_keeps_the_entries(store):
    store.write(ents(1, 6))
    store.store_snapshot(snap(4, 1))
    store.store_snapshot(snap(4, 1))
    assert store.state() == (4, [(5, 1), (6, 1)])


# -- issue 36: the interleaving of seed 17227417148149, by hand -------------------------------


def _app(index: int, log_term: int, entries: list[Entry], commit: int) -> Message:
    return Message(MsgType.APP, to="n3", frm="n2", term=1, index=index, log_term=log_term,
                   entries=tuple(entries), commit=commit)


def _follower_with_two_readies(storage: RaftStorage):
    """A follower whose disk is slow: it takes a Ready (entry 10) to disk, and
    while that write is under way the leader's snapshot at 12 (the leader
    compacted past 10) and then the append of entry 13 arrive. Returns the
    core, the Ready in flight and the next one (the snapshot and entry 13)."""
    storage.save(HardState(1, "n2", 0), ents(1, 9))
    st = storage.load()
    r = Raft(RaftConfig("n3", pre_vote=False), random.Random(3), conf=CONF,
             hard_state=st.hard_state, entries=st.entries)
    r.step(_app(9, 1, ents(10, 10), 9))
    first = r.ready()
    assert [e.index for e in first.entries] == [10]
    r.step(Message(MsgType.SNAP, to="n3", frm="n2", term=1, snapshot_meta=snap(12, 1).meta,
                   data=snap(12, 1).data, done=True))
    r.step(_app(12, 1, ents(13, 13), 12))
    storage.save(first.hard_state, first.entries)   # the slow write ends
    r.advance(first)
    second = r.ready()
    assert second.snapshot is not None and second.snapshot.meta.index == 12
    assert [e.index for e in second.entries] == [13]
    return r, first, second


@pytest.mark.parametrize("cut", ["nothing", "snapshot", "all"])
def test_a_crash_anywhere_in_the_snapshot_ready_leaves_a_log_the_node_restarts_from(tmp_path, cut):
    """The real storage writes the snapshot in one transaction, then the
    entries and the hard state in another: a crash keeps nothing, the
    snapshot, or all of it, and the node restarts from each."""
    storage = RaftStorage(str(tmp_path / "raft.db"), fsync=False)
    _, _, second = _follower_with_two_readies(storage)
    if cut in ("snapshot", "all"):
        storage.save_snapshot(second.snapshot)
    if cut == "all":
        storage.save(second.hard_state, second.entries)
    storage.close()
    again = RaftStorage(str(tmp_path / "raft.db"), fsync=False)
    st = again.load()
    want = {"nothing": (0, 10), "snapshot": (12, 12), "all": (12, 13)}[cut]
    assert (st.snapshot_meta.index if st.snapshot_meta else 0,
            st.entries[-1].index if st.entries else st.snapshot_meta.index) == want
    r = Raft(RaftConfig("n3"), random.Random(3), conf=CONF, hard_state=st.hard_state,
             entries=st.entries, snapshot=again.load_snapshot())
    assert r.last_index == want[1] and r.commit <= r.last_index
    again.close()


def test_the_entries_after_a_snapshot_never_reach_a_disk_without_it(tmp_path):
    """The cut the simulation once made: entry 13 without the snapshot before
    it. The real storage refuses it and writes nothing; the simulated disk's
    torn write keeps no entry of a Ready whose snapshot it did not keep."""
    storage = RaftStorage(str(tmp_path / "raft.db"), fsync=False)
    _, first, second = _follower_with_two_readies(storage)
    with pytest.raises(StorageError, match="hole after 10"):
        storage.save(second.hard_state, second.entries)
    assert [e.index for e in storage.load().entries] == list(range(1, 11))
    storage.close()

    sim = raft_sim.Sim(0)
    node = sim.nodes["n1"]
    node.disk = raft_sim.Disk(HardState(1, "n2", 0), ents(1, 10))
    sim.torn_write(node, second, keep_snapshot=False, keep=1)
    assert not node.alive
    assert (node.disk.snap_index(), node.disk.last_index()) == (0, 10)
    node.disk = raft_sim.Disk(HardState(1, "n2", 0), ents(1, 10))
    node.alive = True
    sim.torn_write(node, second, keep_snapshot=True, keep=1)
    assert (node.disk.snap_index(), node.disk.last_index()) == (12, 13)
    assert node.disk.hard_state == HardState(1, "n2", 0)   # never the hard state

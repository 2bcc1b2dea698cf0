"""Tests of the durable Raft log storage (cronrd.runtime.log.raft_storage)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
import pytest

from cronrd.errors import StorageError
from cronrd.raft.types import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta
from cronrd.runtime.log.raft_storage import LoadedState, RaftStorage
from cronrd.runtime.log.snapshot_data import FileData

ROOT = str(Path(__file__).resolve().parents[4])
SUPPORT = os.path.join(ROOT, "tests", "support")
WRITER = os.path.join(SUPPORT, "raft_storage_writer.py")
sys.path.insert(0, SUPPORT)
from raft_storage_writer import BIG, entry_data, snapshot_data  # noqa: E402


def ents(lo: int, hi: int, term: int = 1) -> list[Entry]:
    """Entries lo..hi inclusive."""
    return [Entry(term, i, EntryType.NORMAL, entry_data(i, term)) for i in range(lo, hi + 1)]


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "raft.db")


@pytest.fixture
def store(db):
    s = RaftStorage(db)
    yield s
    s.close()


def raw(db: str, sql: str, args=()) -> None:
    conn = apsw.Connection(db)
    with conn:
        conn.execute(sql, args)
    conn.close()


def assert_load_refuses(db: str, match: str, hard_state=None, entries=None,
                        damage: tuple[str, ...] = ()) -> None:
    """Write a log, damage it with raw SQL, and expect load() to refuse it."""
    s = RaftStorage(db)
    s.save(hard_state, entries if entries is not None else ents(1, 10))
    s.close()
    for sql in damage:
        raw(db, sql)
    s = RaftStorage(db)
    with pytest.raises(StorageError, match=match):
        s.load()
    s.close()


def snap(index: int, term: int, data: bytes = b"state") -> Snapshot:
    return Snapshot(SnapshotMeta(index, term, ConfState(("a", "b"), ("c",))), data)


# -- basics ------------------------------------------------------------------


def test_empty_log(store):
    st = store.load()
    assert st == LoadedState(HardState(), None, [])
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert store.load_snapshot() is None
    assert store.entries(1, 1) == []


def test_round_trip_and_reopen(db):
    s = RaftStorage(db)
    hs = HardState(term=3, vote="n2", commit=2)
    batch = ents(1, 3, term=2) + [Entry(3, 4, EntryType.NOOP, b""),
                                  Entry(3, 5, EntryType.CONF, b"0:n4")]
    s.save(hs, batch)
    assert s.entries(2, 6) == batch[1:]
    s.close()
    with pytest.raises(StorageError, match="closed"):
        s.load()
    s = RaftStorage(db)
    loaded = s.load()
    assert loaded.hard_state == hs
    assert loaded.snapshot_meta is None
    assert loaded.entries == batch
    assert loaded.entries[4].type is EntryType.CONF
    assert (s.first_index(), s.last_index()) == (1, 5)
    s.close()


def test_hard_state_round_trip(db):
    s = RaftStorage(db)
    s.save(HardState(1, "", 0), [])
    s.save(HardState(7, "nödé-ü", 0), ents(1, 2))
    s.save(HardState(7, "nödé-ü", 2), [])          # hard state only: entries untouched
    s.close()
    s = RaftStorage(db)
    st = s.load()
    assert st.hard_state == HardState(7, "nödé-ü", 2)
    assert [e.index for e in st.entries] == [1, 2]
    s.close()


def test_save_nothing_is_a_no_op(store):
    store.save(None, [])
    assert store.load() == LoadedState(HardState(), None, [])


def test_fsync_off(db):
    s = RaftStorage(db, fsync=False)
    s.save(HardState(1, "a", 0), ents(1, 100))
    s.close()
    s = RaftStorage(db)
    assert len(s.load().entries) == 100
    s.close()


# -- truncation, contiguity --------------------------------------------------


def test_truncation_on_conflict(db):
    s = RaftStorage(db)
    s.save(None, ents(1, 10, term=1))
    s.save(HardState(2, "x", 5), ents(6, 8, term=2))
    expect = ents(1, 5, term=1) + ents(6, 8, term=2)
    assert s.load().entries == expect
    assert s.last_index() == 8
    with pytest.raises(StorageError):
        s.entries(1, 10)                              # 9..10 are gone
    s.close()
    s = RaftStorage(db)
    assert s.load().entries == expect
    s.save(None, ents(9, 9, term=3))                  # append right after the new end
    assert s.entries(8, 10) == ents(8, 8, term=2) + ents(9, 9, term=3)
    s.save(None, ents(1, 2, term=4))                  # replace everything
    assert s.load().entries == ents(1, 2, term=4)
    s.close()


def test_contiguity_errors(store):
    store.save(HardState(1, "a", 0), ents(1, 3))
    with pytest.raises(StorageError, match="entry 5.*ends at 3"):
        store.save(HardState(9, "b", 3), ents(5, 6))
    gappy = ents(4, 5) + ents(7, 7)
    with pytest.raises(StorageError, match="not contiguous"):
        store.save(None, gappy)
    with pytest.raises(StorageError, match="not contiguous"):
        store.save(None, list(reversed(ents(2, 3))))
    # A refused save writes nothing, not even its hard state.
    st = store.load()
    assert st.hard_state == HardState(1, "a", 0)
    assert st.entries == ents(1, 3)
    store.save(None, ents(4, 4))
    assert store.last_index() == 4


def test_entries_range(store):
    store.save(None, ents(1, 20))
    assert store.entries(5, 9) == ents(5, 8)
    assert store.entries(20, 21) == ents(20, 20)
    assert store.entries(7, 7) == []
    with pytest.raises(StorageError, match="ends at 20"):
        store.entries(19, 22)
    with pytest.raises(StorageError, match="compacted"):
        store.entries(0, 3)


# -- snapshots and compaction ----------------------------------------------


def test_snapshot_round_trip(db):
    s = RaftStorage(db)
    s.save(HardState(2, "a", 8), ents(1, 10))
    big = os.urandom(300_000)
    s.save_snapshot(snap(6, 1, big))
    assert (s.first_index(), s.last_index()) == (7, 10)
    assert s.load_snapshot() == snap(6, 1, big)
    st = s.load()
    assert st.snapshot_meta == snap(6, 1).meta
    assert st.entries == ents(7, 10)
    with pytest.raises(StorageError, match="compacted"):
        s.entries(6, 8)
    with pytest.raises(StorageError, match="snapshot"):
        s.save(None, ents(5, 7, term=2))              # would rewrite what the snapshot covers
    with pytest.raises(StorageError, match="older"):
        s.save_snapshot(snap(3, 1))
    s.close()
    s = RaftStorage(db)
    st = s.load()
    assert st.snapshot_meta.conf == ConfState(("a", "b"), ("c",))
    assert st.entries == ents(7, 10)
    assert (s.first_index(), s.last_index()) == (7, 10)
    assert s.load_snapshot().data == big
    s.close()


def _file_snapshot(s: RaftStorage, index: int, term: int, data: bytes) -> str:
    tmp = s.snapshot_file(index) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    path, checksum = s.seal_snapshot_file(tmp, index, data)
    s.save_snapshot(snap(index, term, data), file=path, data_checksum=checksum)
    return path


def test_a_snapshot_in_a_file_of_its_own_round_trips_and_replaces_the_previous(db):
    """A snapshot copied off the event loop lives in its own file; the row
    names it. Replaced by the next snapshot (in a file or in the row), the
    old file goes."""
    s = RaftStorage(db)
    s.save(HardState(2, "a", 12), ents(1, 12))
    first = _file_snapshot(s, 4, 1, b"state-at-4")
    assert os.path.exists(first) and not os.path.exists(first + ".tmp")
    assert s.load_snapshot() == snap(4, 1, b"state-at-4")
    second = _file_snapshot(s, 8, 1, b"state-at-8")
    assert not os.path.exists(first) and os.path.exists(second)
    assert (s.first_index(), s.last_index()) == (9, 12)
    s.close()
    s = RaftStorage(db)
    assert s.load().snapshot_meta == snap(8, 1).meta
    assert s.load_snapshot().data == b"state-at-8"
    s.save_snapshot(snap(10, 1, b"inline"))   # e.g. one received from the leader
    assert not os.path.exists(second) and s.load_snapshot().data == b"inline"
    s.close()


def test_a_snapshot_file_is_read_when_needed_not_held_in_memory(db):
    """A 100,000-job state is ~120 MB: loaded, the snapshot answers its
    length and the chunks a follower needs from the file; replaced by the
    next snapshot meanwhile, what was loaded still reads as it was."""
    s = RaftStorage(db)
    s.save(HardState(2, "a", 12), ents(1, 12))
    data = bytes(range(256)) * 5000
    _file_snapshot(s, 4, 1, data)
    loaded = s.load_snapshot().data
    assert isinstance(loaded, FileData) and not isinstance(loaded, bytes)
    assert len(loaded) == len(data)
    assert loaded[1000:1000 + 4096] == data[1000:1000 + 4096]
    assert loaded[len(data) - 10:len(data) + 99] == data[-10:]
    assert loaded[len(data):] == b"" and bytes(loaded) == data
    _file_snapshot(s, 8, 1, b"state-at-8")
    assert loaded[:256] == data[:256]  # its file is gone from the directory, not from us
    s.close()


def test_a_damaged_or_missing_snapshot_file_is_refused_with_what_to_do(db):
    s = RaftStorage(db)
    s.save(None, ents(1, 5))
    path = _file_snapshot(s, 3, 1, b"state-at-3")
    s.close()
    with open(path, "r+b") as f:
        f.write(b"X")
    s = RaftStorage(db)
    with pytest.raises(StorageError, match="damaged.*restore this node"):
        s.load_snapshot()
    os.unlink(path)
    with pytest.raises(StorageError, match="cannot be read.*restore this node"):
        s.load_snapshot()
    s.close()


def test_snapshot_files_no_row_names_are_removed_at_open(db):
    """A daemon that died after writing a copy but before storing its row
    leaves a file (or a .tmp) no row names: removed at the next open."""
    s = RaftStorage(db)
    s.save(None, ents(1, 6))
    kept = _file_snapshot(s, 4, 1, b"kept")
    s.close()
    strays = [s.snapshot_file(5), s.snapshot_file(6) + ".tmp", s.snapshot_file(6) + ".tmp-journal"]
    for p in strays:
        with open(p, "wb") as f:
            f.write(b"stray")
    s = RaftStorage(db)
    assert [os.path.exists(p) for p in strays] == [False, False, False]
    assert os.path.exists(kept) and s.load_snapshot().data == b"kept"
    s.close()


def test_a_version_1_log_is_upgraded_in_place(db):
    """Version 1 had no file column: it is added, and the snapshot it holds
    in its row still loads."""
    conn = apsw.Connection(db)
    with conn:
        conn.execute("""CREATE TABLE raft_snapshot (id INTEGER PRIMARY KEY CHECK (id = 1),
            idx INTEGER NOT NULL, term INTEGER NOT NULL, voters TEXT NOT NULL,
            learners TEXT NOT NULL, data BLOB NOT NULL, data_checksum BLOB NOT NULL,
            checksum BLOB NOT NULL)""")
        conn.execute("PRAGMA user_version=1")
    conn.close()
    s = RaftStorage(db)
    s.save(None, ents(1, 5))
    s.save_snapshot(snap(3, 1, b"in-the-row"))
    s.close()
    s = RaftStorage(db)
    assert s.load_snapshot().data == b"in-the-row"
    s.close()
    conn = apsw.Connection(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == 2
    conn.close()


def test_snapshot_past_the_log(store):
    """A follower installing a leader's snapshot beyond its log drops the whole log."""
    store.save(None, ents(1, 5))
    store.save_snapshot(snap(50, 4))
    assert (store.first_index(), store.last_index()) == (51, 50)
    assert store.load().entries == []
    with pytest.raises(StorageError, match="ends at 50"):
        store.save(None, ents(52, 52))
    store.save(None, ents(51, 52, term=4))
    assert store.load().entries == ents(51, 52, term=4)


def test_compact(store):
    store.save(None, ents(1, 10))
    with pytest.raises(StorageError, match="snapshot"):
        store.compact(3)
    assert len(store.load().entries) == 10
    store.save_snapshot(snap(4, 1))
    store.compact(4)                                  # covered: allowed (nothing left to drop)
    store.compact(2)
    with pytest.raises(StorageError, match="snapshot"):
        store.compact(5)
    st = store.load()
    assert st.entries == ents(5, 10)
    assert (store.first_index(), store.last_index()) == (5, 10)


# -- damage detection -------------------------------------------------------


def flip_byte(db: str, index: int, offset: int = 17) -> None:
    conn = apsw.Connection(db)
    data = bytearray(conn.execute("SELECT data FROM raft_entry WHERE idx = ?", (index,)).fetchall()[0][0])
    data[offset % len(data)] ^= 0x01
    with conn:
        conn.execute("UPDATE raft_entry SET data = ? WHERE idx = ?", (bytes(data), index))
    conn.close()


def test_flipped_byte_detected(db):
    s = RaftStorage(db)
    s.save(HardState(1, "a", 0), ents(1, 2000))
    s.close()
    flip_byte(db, 1234)
    s = RaftStorage(db)
    with pytest.raises(StorageError) as err:
        s.load()
    msg = str(err.value)
    assert "raft log entry 1234 " in msg and db in msg and "checksum mismatch" in msg
    assert "restore this node from a peer" in msg
    assert s.entries(1, 1234) == ents(1, 1233)         # entries before it are still readable
    with pytest.raises(StorageError, match="entry 1234 "):
        s.entries(1230, 1240)
    s.close()


@pytest.mark.parametrize("sql, args", [
    ("UPDATE raft_entry SET term = 2 WHERE idx = ?", (7,)),
    ("UPDATE raft_entry SET type = 2 WHERE idx = ?", (7,)),
    ("UPDATE raft_entry SET data = substr(data, 1, 10) WHERE idx = ?", (7,)),   # torn
    ("UPDATE raft_entry SET checksum = x'0000000000000000' WHERE idx = ?", (7,)),
    ("UPDATE raft_entry SET data = 'text' WHERE idx = ?", (7,)),
    ("UPDATE raft_entry SET idx = 1007 WHERE idx = ?", (7,)),                    # moved
])
def test_damaged_fields_detected(db, sql, args):
    assert_load_refuses(db, r"raft log entry (7|1007) .*damaged",
                        damage=(sql.replace("?", str(args[0])),))


def test_missing_entry_detected(db):
    assert_load_refuses(db, "raft log entry 4 .*missing",
                        damage=("DELETE FROM raft_entry WHERE idx = 4",))


def test_swapped_entries_detected(db):
    assert_load_refuses(db, "raft log entry 3 .*checksum", damage=(
        "UPDATE raft_entry SET idx = -1 WHERE idx = 3",
        "UPDATE raft_entry SET idx = 3 WHERE idx = 4",
        "UPDATE raft_entry SET idx = 4 WHERE idx = -1"))


def test_damaged_hard_state_detected(db):
    assert_load_refuses(db, "hard state .*damaged", hard_state=HardState(5, "n1", 3),
                        entries=ents(1, 3),
                        damage=("UPDATE raft_hard_state SET vote = 'n2'",))


def test_damaged_snapshot_detected(db):
    s = RaftStorage(db)
    s.save(None, ents(1, 5))
    s.save_snapshot(snap(3, 1, b"x" * 1000))
    s.close()
    raw(db, "UPDATE raft_snapshot SET data = x'00' || substr(data, 2)")
    s = RaftStorage(db)
    s.load()                                          # meta is intact
    with pytest.raises(StorageError, match="snapshot .*damaged"):
        s.load_snapshot()
    s.close()
    raw(db, "UPDATE raft_snapshot SET term = 9")
    s = RaftStorage(db)
    with pytest.raises(StorageError, match="snapshot .*damaged"):
        s.load()
    s.close()


def test_not_a_database(db):
    with open(db, "wb") as f:
        f.write(b"this is not a database" * 500)
    with pytest.raises(StorageError, match=db):
        RaftStorage(db)


# -- one fsync per save -----------------------------------------------------


def test_one_fsync_per_save(tmp_path):
    """Count real xSync calls with a pass-through VFS (in a child: it becomes the default VFS)."""
    script = textwrap.dedent(f"""
        import sys, apsw
        sys.path[:0] = [{ROOT!r}, {SUPPORT!r}]
        syncs = []
        class File(apsw.VFSFile):
            def __init__(self, vfs, name, flags):
                self.name = name.filename() if hasattr(name, "filename") else str(name)
                super().__init__("unix", name, flags)
            def xSync(self, flags):
                syncs.append(self.name)
                return super().xSync(flags)
        class VFS(apsw.VFS):
            def __init__(self):
                super().__init__("counting", "unix", makedefault=True)
            def xOpen(self, name, flags):
                return File(self, name, flags)
        vfs = VFS()
        from cronrd.raft.types import HardState
        from cronrd.runtime.log.raft_storage import RaftStorage
        from tests.unit.runtime.log.test_raft_storage import ents
        s = RaftStorage({str(tmp_path / "c.db")!r})
        s.save(HardState(1, "a", 0), ents(1, 1))
        counts = []
        for lo in range(2, 2 + 64 * 10, 64):
            del syncs[:]
            s.save(HardState(1, "a", lo - 1), ents(lo, lo + 63))
            counts.append(len(syncs))
        del syncs[:]
        s.save(HardState(2, "b", 0), [])
        counts.append(len(syncs))
        s.close()
        print(counts)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str([1] * 11)


# -- crash safety -----------------------------------------------------------


class Model:
    """What the log must hold, from the writer's reports."""

    def __init__(self):
        self.terms: dict[int, int] = {}
        self.snap = (0, 0)
        self.hs = HardState()

    def copy(self) -> "Model":
        m = Model()
        m.terms, m.snap, m.hs = dict(self.terms), self.snap, self.hs
        return m

    def last(self) -> int:
        return max(self.terms, default=self.snap[0])

    def apply(self, op: tuple) -> None:
        if op[0] == "B":
            _, first, count, term, vote, commit = op
            for i in [i for i in self.terms if i >= first] if count else []:
                del self.terms[i]
            for i in range(first, first + count):
                self.terms[i] = term
            self.hs = HardState(term, vote, commit)
        else:
            _, index, term = op
            self.terms = {i: t for i, t in self.terms.items() if i > index}
            self.snap = (index, term)

    def state(self) -> tuple:
        return self.hs, self.snap, self.terms


def observed(db: str) -> tuple:
    s = RaftStorage(db)
    try:
        st = s.load()
        meta = st.snapshot_meta
        snap_ = (meta.index, meta.term) if meta else (0, 0)
        if meta:
            assert s.load_snapshot().data == snapshot_data(meta.index, meta.term)
        idx = [e.index for e in st.entries]
        assert idx == list(range(snap_[0] + 1, snap_[0] + 1 + len(idx))), "not contiguous"
        for e in st.entries:
            assert e.data == entry_data(e.index, e.term), f"wrong data at {e.index}"
            assert e.type == (EntryType.NORMAL if e.index % 5 else EntryType.NOOP)
        assert (s.first_index(), s.last_index()) == (snap_[0] + 1, idx[-1] if idx else snap_[0])
        return st.hard_state, snap_, {e.index: e.term for e in st.entries}
    finally:
        s.close()


def run_round(db: str, model: Model, seed: int, mode: str) -> tuple[Model, bool]:
    """Run the writer until the kill point chosen by ``mode``; return the new
    model and whether a pending (unreported) operation was found committed."""
    rng = random.Random(seed)
    kill_after_saves = rng.randint(1, 50)
    args = [sys.executable, WRITER, db, str(seed)]
    if mode == "mid":
        args.append("1")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    pending = None
    saves = 0
    killed = False

    def handle(line: str) -> bool:
        """Process one report; True = kill now."""
        nonlocal pending, saves
        f = line.split()
        if f[0] == "R":
            assert (int(f[1]), int(f[2]), int(f[3])) == (model.snap[0], model.last(), model.hs.term)
        elif f[0] == "B":
            pending = ("B", int(f[1]), int(f[2]), int(f[3]), f[4], int(f[5]))
            return (mode == "big" and pending[2] == BIG)
        elif f[0] == "P":
            pending = ("P", int(f[1]), int(f[2]))
            return mode == "snap"
        elif f[0] in ("S", "Q"):
            model.apply(pending)
            pending = None
            saves += 1
            if f[0] == "S":
                assert int(f[1]) == model.last()
            return mode == "lines" and saves >= kill_after_saves
        elif f[0] == "MID":
            return True
        return False

    try:
        for line in proc.stdout:
            if handle(line):
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
        # Whatever the writer printed before it died also happened: read it all.
        for line in proc.stdout:
            handle(line)
    finally:
        if not killed:
            proc.kill()
        proc.wait(timeout=30)
        stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert killed, f"writer ended before its kill point: {stderr}"
    assert proc.returncode == -signal.SIGKILL, stderr

    got = observed(db)
    if got == model.state():
        return model, False
    assert pending is not None, f"log differs from every save the writer reported (mode {mode})"
    after = model.copy()
    after.apply(pending)
    assert got == after.state(), f"log is neither before nor after the interrupted {pending[:3]}"
    return after, True


def test_crash_safety_sigkill(tmp_path):
    """SIGKILL the writer at points chosen by counting its reports, reopen,
    check; the same database is reused round after round (recovery, then more
    appends on top of it)."""
    db = str(tmp_path / "crash.db")
    model = Model()
    modes = ["lines", "big", "lines", "mid", "snap", "lines", "big", "mid", "lines", "snap",
             "big", "lines"]
    outcome = []
    for seed, mode in enumerate(modes, start=1):
        model, committed = run_round(db, model, seed, mode)
        outcome.append((mode, committed))
        if mode == "mid":   # killed inside the transaction: deterministically not committed
            assert not committed
    assert model.last() > 0
    print(outcome)


def test_received_snapshot_replaces_a_divergent_log(tmp_path):
    """A snapshot whose last entry is not in our log replaces the whole log:
    entries after it belonged to another history and must not survive."""
    from cronrd.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
    from cronrd.runtime.log.raft_storage import RaftStorage
    st = RaftStorage(str(tmp_path / "r.db"), fsync=False)
    st.save(HardState(1, "a", 0), [Entry(1, i, data=b"x") for i in range(1, 11)])
    st.save_snapshot(Snapshot(SnapshotMeta(5, 2, ConfState(("a",))), b"s"))
    assert st.load().entries == []          # term 2 at 5 differs from ours (1)
    st.save(None, [Entry(2, 6, data=b"y")])
    st.close()
    again = RaftStorage(str(tmp_path / "r.db"), fsync=False).load()
    assert [(e.index, e.term) for e in again.entries] == [(6, 2)]


def test_local_snapshot_keeps_the_suffix(tmp_path):
    from cronrd.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
    from cronrd.runtime.log.raft_storage import RaftStorage
    st = RaftStorage(str(tmp_path / "r.db"), fsync=False)
    st.save(HardState(1, "a", 0), [Entry(1, i, data=b"x") for i in range(1, 11)])
    st.save_snapshot(Snapshot(SnapshotMeta(5, 1, ConfState(("a",))), b"s"))
    assert [e.index for e in st.load().entries] == list(range(6, 11))

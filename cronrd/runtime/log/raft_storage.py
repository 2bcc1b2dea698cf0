"""Durable, checksummed storage of the Raft log, hard state and snapshot.

One apsw (SQLite) database file per node, in WAL mode. Every ``save`` is one
transaction and therefore one fsync of the WAL (``synchronous=FULL``), however
many entries it carries: the caller batches (group commit).

Every record carries a checksum over a canonical encoding of its fields
(blake2b, 8 bytes), verified on every read, so a torn or flipped record is
detected and reported instead of being applied. The entry checksum covers the
index too, so a record that lands under the wrong index is also detected.

A snapshot's data is stored in the row (one received from the leader, or
taken on the event loop when a member joins) or, when the daemon copied its
state off the event loop, in a file of its own beside the database
(``<raft.db>.snapshot-<index>``, written and fsynced by the worker thread;
the row then names the file and carries its checksum). Writing a large
blob into the database would hold the event loop for its whole length.

The rules every write keeps are the Raft storage contract
(``cronrd.raft.storage``); ``load`` verifies what they guarantee:

* stored entries are exactly ``snapshot_index + 1 .. last_index``, contiguous;
* no entry at or below the snapshot index is stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from dataclasses import dataclass
from typing import Any, cast

import apsw

from ...errors import StorageError
from ...raft.storage import append_refusal, keeps_suffix, snapshot_refusal
from ...raft.types import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta
from ..storage import open_db, transaction
from .snapshot_data import FileData, hash_data

SCHEMA_VERSION = 2   # 2: raft_snapshot.file (snapshot data in a file of its own)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS raft_entry (
    idx      INTEGER PRIMARY KEY,
    term     INTEGER NOT NULL,
    type     INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    checksum BLOB    NOT NULL
);
CREATE TABLE IF NOT EXISTS raft_hard_state (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    term     INTEGER NOT NULL,
    vote     TEXT    NOT NULL,
    commit_  INTEGER NOT NULL,
    checksum BLOB    NOT NULL
);
CREATE TABLE IF NOT EXISTS raft_snapshot (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    idx           INTEGER NOT NULL,
    term          INTEGER NOT NULL,
    voters        TEXT    NOT NULL,
    learners      TEXT    NOT NULL,
    data          BLOB    NOT NULL,
    data_checksum BLOB    NOT NULL,
    checksum      BLOB    NOT NULL,
    file          TEXT
);
"""
SNAPSHOT_FILE = ".snapshot-"   # <raft.db>.snapshot-<index>

_RESTORE = "the node stops rather than apply it: restore this node from a peer (see cronrd(8))"

_ENTRY_HEAD = struct.Struct(">QQBQ")   # term, index, type, len(data)


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p)
    return h.digest()


def _data_digest(data: bytes | FileData) -> bytes:
    """The checksum of a snapshot's data (bytes, or a FileData read a chunk
    at a time)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"snapdata1")
    hash_data(h, data)
    return h.digest()


def entry_checksum(term: int, index: int, type_: int, data: bytes) -> bytes:
    """Checksum over the canonical encoding term|index|type|len|data."""
    return _digest(_ENTRY_HEAD.pack(term, index, type_, len(data)), data)


def _hard_state_checksum(term: int, vote: str, commit: int) -> bytes:
    v = vote.encode()
    return _digest(b"hs1", struct.pack(">QQQ", term, commit, len(v)), v)


def _conf_json(names: tuple[str, ...]) -> str:
    return json.dumps(list(names), separators=(",", ":"))


def _snapshot_checksum(index: int, term: int, voters: str, learners: str,
                       data_checksum: bytes) -> bytes:
    v, lr = voters.encode(), learners.encode()
    return _digest(b"snap1", struct.pack(">QQQQ", index, term, len(v), len(lr)), v, lr,
                   data_checksum)


@dataclass(frozen=True)
class LoadedState:
    hard_state: HardState
    snapshot_meta: SnapshotMeta | None
    entries: list[Entry]   # every stored entry after the snapshot index, ascending, contiguous


class RaftStorage:
    """The Raft log, hard state and latest snapshot of one node."""

    _snap_index: int   # the stored snapshot's index and term (0, 0: none)
    _snap_term: int
    _last: int         # the last stored entry's index (the snapshot's when none)

    def __init__(self, path: str, *, fsync: bool = True):
        self.path = path
        self.fsync = fsync
        self._lock = threading.RLock()
        self._conn: apsw.Connection | None = open_db(path)
        try:
            self._conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
            version = self._conn.execute("PRAGMA user_version").fetchall()[0][0]
            if version not in (0, 1, SCHEMA_VERSION):  # 1 is upgraded below
                raise StorageError(
                    f"raft log {path} has schema version {version}, this cronrd knows "
                    f"version {SCHEMA_VERSION}; run the cronrd version that wrote it")
            with self._conn:
                self._conn.execute(_SCHEMA)
                columns = [r[1] for r in self._conn.execute("PRAGMA table_info(raft_snapshot)")]
                if "file" not in columns:  # written by version 1
                    self._conn.execute("ALTER TABLE raft_snapshot ADD COLUMN file TEXT")
                self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._refresh_bounds()
            self._remove_stale_files(at_open=True)
        except apsw.Error as exc:
            self._conn.close()
            self._conn = None
            raise self._db_error("open", exc) from exc
        except StorageError:
            self._conn.close()
            self._conn = None
            raise

    # -- helpers ---------------------------------------------------------

    def _db_error(self, what: str, exc: Exception) -> StorageError:
        return StorageError(
            f"raft log {self.path}: cannot {what}: {exc}; check the disk and the file "
            f"(if the file is damaged, {_RESTORE})")

    def _db(self) -> apsw.Connection:
        if self._conn is None:
            raise StorageError(f"raft log {self.path} is closed")
        return self._conn

    def _damaged(self, index: int, why: str) -> StorageError:
        return StorageError(f"raft log entry {index} in {self.path} is damaged ({why}); {_RESTORE}")

    def _refresh_bounds(self) -> None:
        db = self._db()
        rows: list[tuple[Any, ...]] = db.execute(
            "SELECT idx, term FROM raft_snapshot WHERE id = 1").fetchall()
        self._snap_index, self._snap_term = (rows[0][0], rows[0][1]) if rows else (0, 0)
        last = cast(int | None, db.execute("SELECT max(idx) FROM raft_entry").fetchall()[0][0])
        self._last = last if last is not None else self._snap_index

    def _try_refresh_bounds(self) -> None:
        try:
            self._refresh_bounds()
        except apsw.Error:
            pass

    def _verify_entry(self, row: tuple[Any, ...]) -> Entry:
        idx, term, type_, data, checksum = row
        if (not isinstance(term, int) or not isinstance(type_, int)
                or not isinstance(data, bytes) or not isinstance(checksum, bytes)):
            raise self._damaged(idx, "field of the wrong type")
        if term < 0 or not 0 <= type_ < 256 or entry_checksum(term, idx, type_, data) != checksum:
            raise self._damaged(idx, "checksum mismatch")
        try:
            etype = EntryType(type_)
        except ValueError:
            raise self._damaged(idx, f"unknown entry type {type_}") from None
        return Entry(term=term, index=idx, type=etype, data=data)

    def _read_entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries [lo, hi), verified; a gap raises naming the missing index."""
        out: list[Entry] = []
        expect = lo
        for row in self._db().execute(
                "SELECT idx, term, type, data, checksum FROM raft_entry "
                "WHERE idx >= ? AND idx < ? ORDER BY idx", (lo, hi)):
            if row[0] != expect:
                raise self._damaged(expect, "missing: the log has a gap")
            out.append(self._verify_entry(row))
            expect += 1
        if expect != hi:
            raise self._damaged(expect, "missing: the log ends early")
        return out

    def _read_hard_state(self) -> HardState:
        rows = self._db().execute(
            "SELECT term, vote, commit_, checksum FROM raft_hard_state WHERE id = 1").fetchall()
        if not rows:
            return HardState()
        term, vote, commit, checksum = rows[0]
        if (not isinstance(term, int) or not isinstance(vote, str) or not isinstance(commit, int)
                or not isinstance(checksum, bytes) or term < 0 or commit < 0
                or _hard_state_checksum(term, vote, commit) != checksum):
            raise StorageError(
                f"raft hard state (term, vote, commit) in {self.path} is damaged "
                f"(checksum mismatch); {_RESTORE}")
        return HardState(term=term, vote=vote, commit=commit)

    def snapshot_file(self, index: int) -> str:
        """Where a snapshot at ``index`` taken off the event loop is kept."""
        return f"{self.path}{SNAPSHOT_FILE}{index}"

    def seal_snapshot_file(self, tmp: str, index: int, data: bytes | FileData
                           ) -> tuple[str, bytes]:
        """Make ``tmp`` (a snapshot's data, ``data``, just written there) the
        durable snapshot file for ``index``: fsync, atomic rename, fsync of
        the directory. Returns (path, data checksum) for ``save_snapshot``.
        Touches no database, so a worker thread may call it while the event
        loop goes on appending entries."""
        path = self.snapshot_file(index)
        try:
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, path)
            if self.fsync:
                dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            raise StorageError(f"raft log {self.path}: cannot write the snapshot file {path}: "
                               f"{exc}; check the disk (space, permissions)") from exc
        return path, _data_digest(data)

    def _remove_stale_files(self, keep: str | None = None, at_open: bool = False) -> None:
        """Snapshot files no row names (a replaced snapshot, or one whose row
        was never committed: the daemon died in between)."""
        if at_open:
            rows: list[tuple[Any, ...]] = self._db().execute(
                "SELECT file FROM raft_snapshot WHERE id = 1").fetchall()
            keep = rows[0][0] if rows else None
        folder, base = os.path.split(os.path.abspath(self.path))
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            if not name.startswith(base + SNAPSHOT_FILE) or name == keep:
                continue
            if ".tmp" in name and not at_open:
                continue  # a copy being written now (worker thread)
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass

    def _read_snapshot(self, with_data: bool
                       ) -> tuple[SnapshotMeta, bytes | FileData | None] | None:
        rows: list[tuple[Any, ...]] = self._db().execute(
            "SELECT idx, term, voters, learners, data_checksum, checksum"
            + (", data, file" if with_data else "") + " FROM raft_snapshot WHERE id = 1").fetchall()
        if not rows:
            return None
        idx, term, voters, learners, data_checksum, checksum = rows[0][:6]
        bad = StorageError(
            f"raft snapshot in {self.path} is damaged (checksum mismatch); {_RESTORE}")
        try:
            if (not isinstance(data_checksum, bytes) or not isinstance(checksum, bytes)
                    or _snapshot_checksum(idx, term, voters, learners, data_checksum) != checksum):
                raise bad
            conf = ConfState(voters=tuple(json.loads(voters)), learners=tuple(json.loads(learners)))
        except (TypeError, ValueError, struct.error):
            raise bad from None
        data: bytes | FileData | None = None
        if with_data:
            data, name = rows[0][6], rows[0][7]
            if name is not None:
                # Read when needed (sending it, restoring from it), not held:
                # a whole state in memory for as long as it is the latest.
                path = os.path.join(os.path.dirname(os.path.abspath(self.path)), str(name))
                try:
                    data = FileData(path)
                    ok = _data_digest(data) == data_checksum
                except OSError as exc:
                    raise StorageError(f"raft snapshot file {path} cannot be read ({exc}); "
                                       f"{_RESTORE}") from exc
                if not ok:
                    raise bad
            elif not isinstance(data, bytes) or _data_digest(data) != data_checksum:
                raise bad
        return SnapshotMeta(index=idx, term=term, conf=conf), data

    # -- API ---------------------------------------------------------------

    def load(self) -> LoadedState:
        """Everything stored, verified: checksums, contiguity, no gaps."""
        with self._lock:
            try:
                with self._db():   # one read transaction: a consistent view
                    hs = self._read_hard_state()
                    snap = self._read_snapshot(with_data=False)
                    meta = snap[0] if snap else None
                    snap_index = meta.index if meta else 0
                    below = cast(int | None, self._db().execute(
                        "SELECT max(idx) FROM raft_entry WHERE idx <= ?",
                        (snap_index,)).fetchall()[0][0])
                    if below is not None:
                        raise self._damaged(
                            below, f"stored at or below the snapshot index {snap_index}")
                    last = cast(int | None, self._db().execute(
                        "SELECT max(idx) FROM raft_entry").fetchall()[0][0])
                    entries = self._read_entries(snap_index + 1, (last or snap_index) + 1)
            except apsw.Error as exc:
                raise self._db_error("read", exc) from exc
            self._snap_index = snap_index
            self._snap_term = meta.term if meta else 0
            self._last = entries[-1].index if entries else snap_index
            return LoadedState(hard_state=hs, snapshot_meta=meta, entries=entries)

    def save(self, hard_state: HardState | None, entries: list[Entry]) -> None:
        """Persist a hard state and/or entries in one transaction (one fsync).

        Stored entries with index >= entries[0].index are replaced (conflict
        truncation). The entries must be ascending and contiguous, start after
        the snapshot and at most one past the last stored entry.
        """
        if hard_state is None and not entries:
            return
        with self._lock:
            db = self._db()
            rows: list[tuple[int, int, int, bytes, bytes]] = []
            if entries:
                refusal = append_refusal(entries, self._snap_index, self._last)
                if refusal is not None:
                    raise StorageError(
                        f"raft log {self.path}: cannot write entries: {refusal}; the log "
                        f"ends at {self._last} (this is a bug in the caller; nothing was "
                        "written)")
                first = entries[0].index
                for e in entries:
                    t = int(e.type)
                    rows.append((e.index, e.term, t, e.data, entry_checksum(e.term, e.index, t, e.data)))
            try:
                with transaction(db):
                    if rows:
                        if first <= self._last:
                            db.execute("DELETE FROM raft_entry WHERE idx >= ?", (first,))
                        db.executemany(
                            "INSERT INTO raft_entry (idx, term, type, data, checksum) "
                            "VALUES (?, ?, ?, ?, ?)", rows)
                    if hard_state is not None:
                        hs = hard_state
                        db.execute(
                            "INSERT OR REPLACE INTO raft_hard_state (id, term, vote, commit_, checksum) "
                            "VALUES (1, ?, ?, ?, ?)",
                            (hs.term, hs.vote, hs.commit, _hard_state_checksum(hs.term, hs.vote, hs.commit)))
            except apsw.Error as exc:
                self._try_refresh_bounds()
                raise self._db_error("save entries", exc) from exc
            if rows:
                self._last = rows[-1][0]

    def save_snapshot(self, snapshot: Snapshot, file: str | None = None,
                      data_checksum: bytes | None = None) -> None:
        """Store a snapshot (replacing the previous one) and drop the entries it covers.

        With ``file`` (and its ``data_checksum``, from ``seal_snapshot_file``)
        the row names the file instead of holding the data.

        Entries after the snapshot are kept only if the stored entry at the
        snapshot's index has the snapshot's term (log matching then makes the
        rest consistent with it); otherwise the whole log is replaced, so a
        crash before the next append cannot resurrect a divergent suffix.
        """
        meta = snapshot.meta
        voters, learners = _conf_json(meta.conf.voters), _conf_json(meta.conf.learners)
        if file is None:
            data_checksum, blob, name = _data_digest(snapshot.data), bytes(snapshot.data), None
        else:
            assert data_checksum is not None  # given with the file (seal_snapshot_file's)
            blob, name = b"", os.path.basename(file)
        checksum = _snapshot_checksum(meta.index, meta.term, voters, learners, data_checksum)
        with self._lock:
            db = self._db()
            refusal = snapshot_refusal(meta.index, self._snap_index)
            if refusal is not None:
                raise StorageError(f"raft log {self.path}: cannot store the snapshot: {refusal} "
                                   "(this is a bug in the caller; nothing was written)")
            try:
                with transaction(db):
                    db.execute(
                        "INSERT OR REPLACE INTO raft_snapshot (id, idx, term, voters, learners, data, "
                        "data_checksum, checksum, file) VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (meta.index, meta.term, voters, learners, blob, data_checksum, checksum,
                         name))
                    same: list[tuple[Any, ...]] = db.execute(
                        "SELECT term FROM raft_entry WHERE idx = ?", (meta.index,)).fetchall()
                    stored = (self._snap_term if meta.index == self._snap_index
                              else same[0][0] if same else None)
                    if keeps_suffix(stored, meta.term):
                        db.execute("DELETE FROM raft_entry WHERE idx <= ?", (meta.index,))
                    else:
                        db.execute("DELETE FROM raft_entry")
                    last = cast(int | None, db.execute(
                        "SELECT max(idx) FROM raft_entry").fetchall()[0][0])
            except apsw.Error as exc:
                self._try_refresh_bounds()
                raise self._db_error("save the snapshot", exc) from exc
            self._snap_index, self._snap_term = meta.index, meta.term
            self._last = last if last is not None else meta.index
            self._remove_stale_files(keep=name)

    def load_snapshot(self) -> Snapshot | None:
        with self._lock:
            try:
                snap = self._read_snapshot(with_data=True)
            except apsw.Error as exc:
                raise self._db_error("read the snapshot", exc) from exc
        if snap is None:
            return None
        # (with its data: bytes, or a FileData standing for them, read when needed)
        return Snapshot(meta=snap[0], data=cast(bytes, snap[1]))

    def compact(self, index: int) -> None:
        """Delete entries <= index; a snapshot at >= index must be stored."""
        with self._lock:
            if index > self._snap_index:
                raise StorageError(
                    f"raft log {self.path}: cannot compact through {index}: the stored snapshot "
                    f"is at {self._snap_index}; save a snapshot at or after {index} first")
            try:
                with transaction(self._db()) as db:
                    db.execute("DELETE FROM raft_entry WHERE idx <= ?", (index,))
            except apsw.Error as exc:
                raise self._db_error("compact", exc) from exc

    def first_index(self) -> int:
        return self._snap_index + 1

    def last_index(self) -> int:
        return self._last

    def snapshot_index(self) -> int:
        return self._snap_index

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries [lo, hi), verified."""
        with self._lock:
            if lo >= hi:
                return []
            if lo <= self._snap_index:
                raise StorageError(
                    f"raft log {self.path}: entry {lo} is compacted (covered by the snapshot "
                    f"at {self._snap_index}); send the snapshot instead")
            if hi > self._last + 1:
                raise StorageError(
                    f"raft log {self.path}: entries up to {hi - 1} requested, the log ends at {self._last}")
            try:
                with self._db():  # (apsw's stub says its __exit__ may swallow: it never does)
                    out = self._read_entries(lo, hi)
            except apsw.Error as exc:
                raise self._db_error("read entries", exc) from exc
            return out

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

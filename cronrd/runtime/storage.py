"""Opening the node's SQLite databases (apsw) with durable settings."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import logging
import os
import threading
import traceback

import apsw

from ..errors import StorageError

log = logging.getLogger("cronrd.storage")

CHECKPOINT_PAGES = 1000  # pages of WAL that make a checkpoint due (SQLite's default)
CHECKPOINT_EVERY = 30.0  # s: a smaller WAL is checkpointed this often


def open_db(path: str) -> apsw.Connection:
    """Open (creating) a database in WAL mode with full fsync on commit."""
    try:
        conn = apsw.Connection(path)
        conn.setbusytimeout(5000)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        # Touch the schema so a corrupt or non-database file fails here.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except apsw.Error as exc:
        raise StorageError(
            f"cannot open state database {path}: {exc}; check the file and the "
            "data_dir permissions (move a damaged file aside to start fresh)") from exc
    return conn


CHECK_THREADS = "CRONRD_CHECK_THREADS"   # set (tests): guard_thread on the state's connection


def guard_thread(conn: apsw.Connection, name: str) -> None:
    """Log ``event=conn_off_thread`` (once per thread and call site, with
    the stack) when a statement runs on ``conn`` from a thread other than
    the calling one. apsw refuses a connection to a second thread only
    when both use it at the same moment, and the refusal lands on
    whichever came second, often the critical loop's apply, which stops
    the daemon; this finds the stray use every time, not by luck. A check
    for the tests (``CRONRD_CHECK_THREADS``): a Python call per statement."""
    owner = threading.get_ident()
    seen: set[tuple[str, tuple]] = set()

    def check(_cursor, _sql, _bindings) -> bool:
        if threading.get_ident() != owner:
            stack = traceback.extract_stack()[:-1]
            key = (threading.current_thread().name,
                   tuple((f.filename, f.lineno) for f in stack[-6:]))
            if key not in seen:
                seen.add(key)
                log.error("event=conn_off_thread db=%s thread=%s stack=\"%s\" hint=\"a bug: this "
                          "connection belongs to another thread\"", name, key[0],
                          " < ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}"
                                     for f in reversed(stack[-12:])))
        return True
    conn.setexectrace(check)


@contextlib.contextmanager
def transaction(conn: apsw.Connection):
    """One write transaction, committed (rolled back on an error) through
    ``execute``. Use it instead of ``with conn:`` wherever the commit may
    wait for the disk off the event loop: apsw's context manager commits
    while holding the GIL, so a storage thread's one-second fsync held
    every other thread, the event loop's included, for that second
    (measured with the fault suite's slow-fsync library), while
    ``execute("COMMIT")`` releases it as every SQLite call does. Not
    nestable (``with conn:`` is)."""
    conn.execute("BEGIN")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if not conn.getautocommit():   # still open: the body or the commit failed
            conn.execute("ROLLBACK")
        raise


def open_readonly(path: str) -> apsw.Connection:
    """A read-only connection to a database the daemon holds open in WAL
    mode (its readers see whole committed batches, never one half applied)."""
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    conn.setbusytimeout(5000)
    return conn


class DataDirLock:
    """An exclusive lock on data_dir so two daemons never share one state."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, "lock")
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(
                f"another cronrd daemon is using {os.path.dirname(self.path)} "
                f"(lock {self.path} is held); stop it first or use another data_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class WalCheckpointer:
    """Checkpoints of a database's write-ahead log, on a thread of their own.

    SQLite checkpoints a WAL from inside the commit that finds it over 1,000
    pages: two fsyncs (the log, then the database) on whatever thread
    committed, which for the replicated state is the event loop applying
    entries; on a disk with one-second fsyncs that held the loop two seconds
    every few megabytes. The owner hands its connection over (``disown``):
    its commits no longer checkpoint, they only count the WAL's pages (a WAL
    hook, on the committing thread, cheap), and once the WAL holds ``pages``
    (SQLite's own threshold) ``run`` makes a PASSIVE checkpoint (it never
    waits for readers or writers) on a connection and thread of this class's
    own; and every ``every`` seconds whatever the WAL holds. Not every
    second: a reader that begins while a checkpoint syncs the database may
    have to wait for it (seen as 200 ms stalls of apply on a disk with
    200 ms fsyncs), so checkpoints are as rare as SQLite's own."""

    def __init__(self, path: str, every: float = CHECKPOINT_EVERY, pages: int = CHECKPOINT_PAGES):
        self.path = path
        self.every = every
        self.pages = pages
        self._conn: apsw.Connection | None = None
        self._disk = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="wal-checkpoint")
        self.checkpoints = 0
        self._failed = False
        self._wal_pages = 0      # in the WAL after the owner's last commit
        self._due: asyncio.Event | None = None

    def disown(self, conn: apsw.Connection) -> None:
        """``conn``'s commits no longer checkpoint; they tell this class how
        big the WAL is (call it on the thread that commits on ``conn``)."""
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.setwalhook(self._committed)

    def _committed(self, conn, dbname: str, pages: int) -> int:
        self._wal_pages = pages
        if pages >= self.pages and self._due is not None:
            self._due.set()
        return apsw.SQLITE_OK

    def checkpoint(self) -> tuple[int, int]:
        """One PASSIVE checkpoint (blocking: call it off the loop); the WAL's
        frames and how many of them are now in the database."""
        if self._conn is None:
            self._conn = apsw.Connection(self.path)
            self._conn.setbusytimeout(1000)
            self._conn.execute("PRAGMA synchronous=NORMAL")
        frames = self._conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        self.checkpoints += 1
        return frames

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = asyncio.Event()
        while True:
            try:
                async with asyncio.timeout(self.every):
                    await self._due.wait()
            except TimeoutError:
                if not self._wal_pages:
                    continue
            self._due.clear()
            self._wal_pages = 0
            try:
                await loop.run_in_executor(self._disk, self.checkpoint)
                if self._failed:
                    self._failed = False
                    log.info("event=wal_checkpoint_ok path=%s", self.path)
            except apsw.Error as exc:
                if not self._failed:   # once, not every second
                    self._failed = True
                    log.warning("event=wal_checkpoint_failed path=%s error=\"%s\" hint=\"the "
                                "write-ahead log grows until a checkpoint succeeds; check the "
                                "disk of the data_dir\"", self.path, exc)

    def close(self) -> None:
        self._disk.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

"""Opening the node's SQLite databases (apsw) with durable settings."""

from __future__ import annotations

import fcntl
import os

import apsw

from ..errors import StorageError


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

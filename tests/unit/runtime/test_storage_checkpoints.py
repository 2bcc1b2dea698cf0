"""WAL checkpoints of the replicated state off the event loop
(cronrd/runtime/storage.py: WalCheckpointer)."""

from __future__ import annotations

import asyncio
import os

from cronrd.runtime.storage import WalCheckpointer, open_db
from tests.unit.runtime.log.test_raft_node import until


def wal_bytes(path: str) -> int:
    try:
        return os.path.getsize(path + "-wal")
    except FileNotFoundError:
        return 0


def test_a_disowned_connection_never_checkpoints_and_the_checkpointer_does(tmp_path):
    path = str(tmp_path / "state.db")
    conn = open_db(path)
    conn.execute("PRAGMA synchronous=NORMAL")
    cp = WalCheckpointer(path)
    cp.disown(conn)
    conn.execute("CREATE TABLE t(x BLOB)")
    try:
        # Well past the 1,000 pages at which SQLite would checkpoint from
        # the commit itself (pages of 4 KiB).
        for _ in range(300):
            with conn:
                conn.execute("INSERT INTO t VALUES(?)", (b"x" * 16384,))
        assert wal_bytes(path) > 1000 * 4096    # nothing checkpointed by the commits
        frames, done = cp.checkpoint()
        assert frames > 1000 and done == frames
        # A reader in the middle of a transaction does not make it wait.
        reader = open_db(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM t").fetchall()
        with conn:
            conn.execute("INSERT INTO t VALUES(?)", (b"y",))
        frames, done = cp.checkpoint()
        assert done <= frames
        reader.execute("COMMIT")
        reader.close()
    finally:
        cp.close()
        conn.close()


def test_a_checkpoint_runs_on_its_thread_once_the_wal_is_big_not_before(tmp_path):
    path = str(tmp_path / "state.db")
    conn = open_db(path)
    cp = WalCheckpointer(path, every=3600, pages=50)
    cp.disown(conn)
    with conn:
        conn.execute("CREATE TABLE t(x BLOB)")

    async def main():
        task = asyncio.get_running_loop().create_task(cp.run())
        try:
            with conn:
                conn.execute("INSERT INTO t VALUES(?)", (b"x" * 1000,))
            await asyncio.sleep(0.3)
            assert cp.checkpoints == 0            # a small WAL waits for its time
            for _ in range(20):                   # ~60 pages
                with conn:
                    conn.execute("INSERT INTO t VALUES(?)", (b"x" * 12000,))
            await until(lambda: cp.checkpoints >= 1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())
    cp.close()
    conn.close()


def test_a_checkpoint_that_fails_is_said_once(tmp_path, caplog):
    path = str(tmp_path / "state.db")
    conn = open_db(path)
    cp = WalCheckpointer(path, every=0.01)
    cp.disown(conn)

    async def main():
        task = asyncio.get_running_loop().create_task(cp.run())
        for i in range(3):
            with conn:
                conn.execute(f"CREATE TABLE t{i}(x)")
            await until(lambda: cp.checkpoints > i)
        # A database gone from under it: logged once, not at every try.
        cp._conn.close()
        cp._conn = None
        cp.path = str(tmp_path / "missing" / "state.db")
        for i in range(3, 8):
            with conn:
                conn.execute(f"CREATE TABLE t{i}(x)")
            await asyncio.sleep(0.03)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cp.close()

    asyncio.run(main())
    conn.close()
    failed = [r for r in caplog.records if "wal_checkpoint_failed" in r.getMessage()]
    assert len(failed) == 1

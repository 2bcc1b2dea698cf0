"""WAL checkpoints of the replicated state off the event loop
(cronrd/runtime/storage.py: WalCheckpointer)."""

from __future__ import annotations

import asyncio
import os

from cronrd.runtime.storage import WalCheckpointer, open_db


def wal_bytes(path: str) -> int:
    try:
        return os.path.getsize(path + "-wal")
    except FileNotFoundError:
        return 0


def test_a_disowned_connection_never_checkpoints_and_the_checkpointer_does(tmp_path):
    path = str(tmp_path / "state.db")
    conn = open_db(path)
    conn.execute("PRAGMA synchronous=NORMAL")
    WalCheckpointer.disown(conn)
    conn.execute("CREATE TABLE t(x BLOB)")
    cp = WalCheckpointer(path, every=0.01)
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


def test_run_checkpoints_on_its_thread_and_says_once_when_it_cannot(tmp_path, caplog):
    path = str(tmp_path / "state.db")
    conn = open_db(path)
    WalCheckpointer.disown(conn)
    with conn:
        conn.execute("CREATE TABLE t(x)")

    async def main():
        cp = WalCheckpointer(path, every=0.01)
        task = asyncio.get_running_loop().create_task(cp.run())
        deadline = asyncio.get_running_loop().time() + 10
        while cp.checkpoints < 3:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        # A database that is gone from under it: logged once, not per second.
        cp._conn.close()
        cp._conn = None
        cp.path = str(tmp_path / "missing" / "state.db")
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cp.close()

    asyncio.run(main())
    conn.close()
    failed = [r for r in caplog.records if "wal_checkpoint_failed" in r.getMessage()]
    assert len(failed) == 1

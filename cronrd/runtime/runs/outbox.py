"""The durable local outbox: run results written to this node's disk first.

In a cluster a result travels to the leader before it is committed, and the
leader may be away for a while. So every start and finish report is first
written here (``data_dir/local.db``, not part of the replicated state), then
proposed until the cluster has committed or refused it, then deleted. After
a crash or restart the daemon proposes whatever is still here (guarantee 4:
no result is lost). The reports of one loop turn are one small transaction
(one fsync) before they are proposed; deletions of committed reports are
batched per loop turn too. Both run on the outbox's own storage thread, one
after the other, so a slow disk delays reports but never the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from ...state import commands as C
from ..storage import open_db, transaction

log = logging.getLogger("cronrd.outbox")

SCHEMA = "CREATE TABLE IF NOT EXISTS outbox(id INTEGER PRIMARY KEY, cmd BLOB NOT NULL)"


class Outbox:
    def __init__(self, path: str):
        self.conn = open_db(path)
        with self.conn:
            self.conn.execute(SCHEMA)
        self._done: list[int] = []
        self._flush_scheduled = False
        # Every write runs here, in the order it was asked for (a delete can
        # never overtake the insert of the same report).
        self._disk = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                           thread_name_prefix="outbox")

    def add(self, cmd: C.Command) -> int:
        """Write ``cmd`` durably now; returns its id for ``done``."""
        with transaction(self.conn):
            self.conn.execute("INSERT INTO outbox(cmd) VALUES(?)", (cmd.encode(),))
            return self.conn.last_insert_rowid()

    def add_many(self, cmds: list[C.Command]) -> list[int]:
        """Write ``cmds`` durably in one transaction (one fsync); their ids."""
        items = []
        with transaction(self.conn):
            for cmd in cmds:
                self.conn.execute("INSERT INTO outbox(cmd) VALUES(?)", (cmd.encode(),))
                items.append(self.conn.last_insert_rowid())
        return items

    async def write(self, cmds: list[C.Command]) -> list[int]:
        """``add_many`` on the storage thread: the loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._disk, self.add_many, cmds)

    def done(self, item: int) -> None:
        """Forget a committed report (batched: deleting late costs a re-proposal
        after a crash at most, which the state recognises as a duplicate)."""
        self._done.append(item)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        done, self._done = self._done, []
        try:
            self._disk.submit(self._delete, done)
        except RuntimeError:    # closed meanwhile: close() deleted what it had
            pass

    def _delete(self, done: list[int]) -> None:
        try:
            with transaction(self.conn):
                self.conn.executemany("DELETE FROM outbox WHERE id=?", [(i,) for i in done])
        except Exception as exc:
            log.warning("event=outbox_cleanup_failed error=\"%s\"", exc)

    def pending(self) -> list[tuple[int, C.Command]]:
        items = []
        for item, data in self.conn.execute("SELECT id, cmd FROM outbox ORDER BY id"):
            try:
                items.append((item, C.decode(data)))
            except Exception as exc:
                log.error("event=outbox_unreadable id=%d error=\"%s\"", item, exc)
                self.done(item)
        return items

    def close(self) -> None:
        self._disk.shutdown(wait=True)   # the writes asked for are done first
        if self._done:
            self._flush_scheduled = False
            done, self._done = self._done, []
            self._delete(done)
        self.conn.close()

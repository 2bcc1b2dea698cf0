"""The two ``Log`` implementations, opened in-process in a temporary
directory: the one-host direct log, and a one-voter Raft log (a RaftNode
over RaftStorage and the state database, no peers)."""

from __future__ import annotations

import asyncio
import os
import random
from contextlib import asynccontextmanager

from cronrd.raft.types import ConfState
from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.log.replicated import RaftLog, ReplicatedState
from cronrd.runtime.log.raft_node import RaftNode
from cronrd.runtime.log.raft_storage import RaftStorage
from cronrd.runtime.storage import open_db
from cronrd.state.machine import StateMachine

KINDS = ("local", "raft1")


class NoPeers:
    """A transport for a node without peers: there is nobody to send to."""

    def send(self, msg) -> None:
        raise AssertionError(f"a one-voter node sent {msg.type.name} to {msg.to}")


@asynccontextmanager
async def open_log(kind: str, directory: str, *, tick: float = 0.01):
    """Yield ``(log, machine)``; the log leads when it is yielded."""
    conn = open_db(os.path.join(directory, "state.db"))
    machine = StateMachine(conn)
    if kind == "local":
        try:
            yield LocalLog(machine), machine
        finally:
            conn.close()
        return
    # As in a cluster: Raft's log is the durable record, the state need not
    # fsync each batch.
    conn.execute("PRAGMA synchronous=NORMAL")
    state = ReplicatedState(machine, directory)
    storage = RaftStorage(os.path.join(directory, "raft.db"))
    node = RaftNode("a", ConfState(("a",)), storage, NoPeers(), state, tick_interval=tick,
                    election_tick=3, proposal_timeout=5.0, rng=random.Random(1),
                    snapshot_every=1 << 30)
    await node.start()
    try:
        deadline = asyncio.get_running_loop().time() + 5.0
        while not node.is_leader:
            assert asyncio.get_running_loop().time() < deadline, "no leader within 5s"
            await asyncio.sleep(0.005)
        yield RaftLog(node, state), machine
    finally:
        await node.stop()
        storage.close()
        conn.close()

"""Edge cases of the Raft node driver found in review: no hang after stop, a
state machine that persists its applied index can restart, bounded fast path."""

from __future__ import annotations

import asyncio
import random

import pytest

from cronrd.errors import ProposalDropped
from cronrd.raft.core import Raft, RaftConfig
from cronrd.raft.types import ConfState, Entry, HardState
from cronrd.runtime.peers.transport import Transport
from cronrd.raft.types import Message, MsgType
from tests.unit.runtime.log.test_raft_node import run, with_net


def test_restart_with_applied_ahead_of_the_durable_commit():
    # The commit index is not fsynced on its own: a state machine that keeps its
    # applied index may be ahead of it after a crash. That must not stop Raft.
    entries = [Entry(1, i) for i in range(1, 7)]
    r = Raft(RaftConfig("a"), random.Random(1), conf=ConfState(("a", "b", "c")),
             hard_state=HardState(1, "a", 0), entries=entries, applied=6)
    assert r.commit == 6 and r.applied == 6
    with pytest.raises(Exception, match="beyond the last log index"):
        Raft(RaftConfig("a"), random.Random(1), conf=ConfState(("a",)),
             hard_state=HardState(1, "a", 0), entries=entries, applied=9)


def test_propose_after_stop_fails_at_once():
    async def body(net):
        node = await net.leader()
        assert (await node.propose(b"1"))[1] == 1
        await node.stop()
        with pytest.raises(ProposalDropped, match="stopped"):
            await asyncio.wait_for(node.propose(b"1"), 2)
    with_net("a", body)


def test_direct_write_path_respects_the_byte_budget():
    async def main():
        got = []
        a = Transport("a", ("127.0.0.1", 0), {}, got.append, tls=None, insecure=True,
                      queue_limit=4, queue_bytes_limit=1 << 20)
        b = Transport("b", ("127.0.0.1", 0), {}, got.append, tls=None, insecure=True)
        await a.start()
        await b.start()
        try:
            a.set_peers({"b": ("127.0.0.1", b.port)})
            deadline = asyncio.get_running_loop().time() + 10
            while not a.reachable("b"):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            big = Message(MsgType.APP, to="b", frm="a", term=1,
                          entries=(Entry(1, 1, data=b"x" * (512 << 10)),))
            accepted = sum(a.send(big) for _ in range(64))
            # One loop turn: the direct path takes ~1 MiB, the queue 4 frames.
            assert accepted <= 8, accepted
        finally:
            await a.close()
            await b.close()
    run(main())

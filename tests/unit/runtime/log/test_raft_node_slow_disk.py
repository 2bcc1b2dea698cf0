"""A slow disk under the Raft node driver: its writes run on a storage
thread, so a write that takes seconds holds neither the event loop nor the
leader's heartbeats (issue 29, point 6)."""

from __future__ import annotations

import asyncio
import threading

from tests.unit.runtime.log.test_raft_node import until, with_net


def hold_writes(storage) -> threading.Event:
    """Make ``storage.save`` wait until the returned event is set (a disk
    whose fsync does not come back); at most 20 s, so a test cannot hang."""
    gate = threading.Event()
    save = storage.save

    def held(hs, entries):
        gate.wait(20)
        save(hs, entries)
    storage.save = held
    return gate


class LoopGaps:
    """The longest time the event loop went without running a 10 ms timer."""

    def __init__(self):
        self.longest = 0.0
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self):
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            self.longest = max(self.longest, now - last)
            last = now

    def stop(self):
        self._task.cancel()


def test_a_leader_whose_write_hangs_keeps_leading_and_its_loop_runs():
    async def body(net):
        leader = await net.leader()
        assert (await leader.propose(b"1"))[1] == 1
        term = leader.raft.term
        followers = [n for n in net.nodes.values() if n is not leader]
        gate = hold_writes(leader.storage)
        gaps = LoopGaps()
        try:
            pending = leader.submit(b"2")
            # The followers have the entry, commit it and apply it while the
            # leader's own write of it is still under way (it is on a
            # majority's disks: theirs).
            await until(lambda: all(f.sm.total == 3 for f in followers), timeout=15)
            assert not pending.done()      # the leader applies only after its own write
            # Several election timeouts (10 ticks of 20 ms, randomized up to
            # twice that) pass with the write still held: heartbeats went on.
            await asyncio.sleep(1.0)
            assert not pending.done()
            assert leader.is_leader and leader.raft.term == term
            assert all(f.leader == leader.id and f.raft.term == term for f in followers)
            assert gaps.longest < 0.5, f"the event loop stalled {gaps.longest:.3f}s"
        finally:
            gate.set()
            gaps.stop()
        assert (await asyncio.wait_for(pending, 10))[1] == 3
        assert leader.disk_writes[-1][1] >= 1.0   # the held write was timed on its thread
    with_net("abc", body)


def test_a_follower_whose_write_hangs_holds_nothing_else():
    async def body(net):
        leader = await net.leader()
        assert (await leader.propose(b"1"))[1] == 1
        slow, fast = [n for n in net.nodes.values() if n is not leader]
        gate = hold_writes(slow.storage)
        gaps = LoopGaps()
        try:
            # Commits go on with the leader and the other follower.
            for i in range(5):
                await asyncio.wait_for(leader.propose(b"1"), 10)
            await until(lambda: fast.sm.total == 6)
            await asyncio.sleep(0.5)
            assert slow.sm.total < 6           # it applies only what it has written
            assert slow.leader == leader.id    # and it did not campaign meanwhile
            assert gaps.longest < 0.5, f"the event loop stalled {gaps.longest:.3f}s"
        finally:
            gate.set()
            gaps.stop()
        await until(lambda: slow.sm.total == 6)
    with_net("abc", body)


def test_a_leader_hands_over_while_its_write_hangs():
    async def body(net):
        leader = await net.leader()
        assert (await leader.propose(b"1"))[1] == 1
        target = next(n for n in net.nodes.values() if n is not leader)
        gate = hold_writes(leader.storage)
        try:
            pending = leader.submit(b"2")
            await until(lambda: leader.write_began is not None)
            leader.transfer_leadership(target.id)
            # The go-ahead to the target does not wait for the leader's disk.
            await until(lambda: target.is_leader, timeout=5)
            assert leader.write_began is not None and not pending.done()
        finally:
            gate.set()
        # The old leader's write ends; the entry was committed by the others.
        await until(lambda: all(n.sm.total == 3 for n in net.nodes.values()))
    with_net("abc", body)

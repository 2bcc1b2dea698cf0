"""The Raft node driver: runs the pure core on the asyncio loop with real
ticks, durable storage and the peer transport.

One loop turns the core's Ready values into actions, in the order the core
demands: persist (one fsync for everything that arrived since the last
Ready: group commit), send, apply, advance.

Persisting runs on a storage thread of its own, never on the event loop: a
disk whose fsyncs take a second slows this node's commits, but its ticks,
fire gates, claims and clock watch go on meanwhile, and a leader keeps
sending heartbeats and appends while its own write is under way
(``_pump``), so its followers do not start an election over its disk.

``propose(data)`` resolves with ``(index, result)`` once the entry is
applied here, or fails with ``NotLeader`` / ``ProposalDropped``; it never
hangs: a proposal whose outcome is unknown after ``proposal_timeout`` fails
with ProposalDropped saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import NotLeader, ProposalDropped
from ...raft.core import LEADER, Raft, RaftConfig
from ..clock import monotonic
from ...raft.types import (ConfChange, ConfChangeType, ConfState, EntryType, HardState, Message,
                          MsgType, Ready)
from .raft_storage import RaftStorage
from .snapshot_data import FileData, FileSink
from ..tasks import Changes

log = logging.getLogger("cronrd.raft")

EARLY = frozenset({MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP})
# ... and, while its write is under way, the go-ahead to the node it hands
# leadership to (that node has every entry the leader has: it said so).
EARLY_LEADER = EARLY | {MsgType.TIMEOUT_NOW}
# What a follower may answer while its own write is under way: a heartbeat
# response acknowledges no entry and no vote (etcd sends it at once too).
EARLY_REPLIES = frozenset({MsgType.HEARTBEAT_RESP})


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> Any: ...
    # Optional: ``apply_batch([(index, data), ...]) -> {index: result}``.
    def snapshot(self) -> bytes: ...
    def restore(self, data: bytes, index: int) -> None: ...
    @property
    def applied_index(self) -> int: ...


@dataclass
class _Pending:
    index: int
    term: int
    future: asyncio.Future
    deadline: float


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class RaftNode:
    def __init__(self, node_id: str, bootstrap: ConfState, storage: RaftStorage, transport,
                 sm: StateMachine, *, tick_interval: float = 0.05, election_tick: int = 10,
                 snapshot_every: int = 10000, snapshot_bytes: int = 32 << 20,
                 proposal_timeout: float = 10.0,
                 rng: random.Random | None = None, max_inflight: int = 256,
                 max_msg_bytes: int = 1 << 20):
        self.id = node_id
        self.storage = storage
        self.transport = transport
        self.sm = sm
        self.tick_interval = tick_interval
        self.snapshot_every = snapshot_every
        # Or after this many bytes of entries: the log is in memory until a
        # snapshot compacts it, and 100,000 jobs load in a few hundred
        # entries of tens of MB (bench/scale.py), far from snapshot_every.
        self.snapshot_bytes = snapshot_bytes
        self._log_bytes = 0  # of the entries applied since the last snapshot
        self._recv_seq = 0
        self.proposal_timeout = proposal_timeout
        state = storage.load()
        snap = storage.load_snapshot()
        if snap is not None and sm.applied_index < snap.meta.index:
            sm.restore(snap.data, snap.meta.index)
        cfg = RaftConfig(node_id, election_tick=election_tick, max_inflight=max_inflight,
                         max_msg_bytes=max_msg_bytes,
                         snapshot_sink=self._snapshot_sink
                         if getattr(sm, "restores_from_files", False) else None)
        self.raft = Raft(cfg, rng or random.Random(int.from_bytes(os.urandom(8), "big")),
                         conf=bootstrap, hard_state=state.hard_state, entries=state.entries,
                         snapshot=snap, applied=sm.applied_index)
        self._synced_vote = (state.hard_state.term, state.hard_state.vote)
        self._unsynced_hs: HardState | None = None
        self.pending: dict[int, _Pending] = {}
        self.conf_waiters: dict[int, _Pending] = {}
        self.reads: dict[bytes, asyncio.Future] = {}
        self._read_asked: dict[bytes, str] = {}  # read context -> the leader it was asked of
        self.read_points: list[tuple[int, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._stopped = False
        self._read_seq = 0
        self._ticks = 0
        self.leader_changes = 0
        # The log writes (fsynced appends) of late: (monotonic end, seconds),
        # for the slow-disk watch (decisions/disk.py).
        self.disk_writes: deque[tuple[float, float]] = deque(maxlen=256)
        # The log's writes run here, one at a time, in order (see _persist).
        self._disk = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"raft-storage-{node_id}")
        self._persisting = False   # a Ready's write is under way on the storage thread
        self.write_began: float | None = None   # ... since then (monotonic), for the disk watch
        self._snapshot_wanted = False
        self._snapshotting: asyncio.Task | None = None  # a snapshot off the loop
        # ... copied, to be stored: index, conf, data (bytes or a FileData), file, its
        # checksum, seconds the copy took
        self._snapshot_copied: tuple[int, ConfState, Any, str, bytes, float] | None = None
        self._snapshot_retry_at = 0   # after a failed copy: the applied index to try again at
        # Notified when the leader, this node's role or the membership changes.
        self.changes = Changes()

    # -- views --------------------------------------------------------------------
    @property
    def role(self) -> str:
        return self.raft.public_role

    @property
    def leader(self) -> str:
        return self.raft.lead

    @property
    def is_leader(self) -> bool:
        return self.raft.role == LEADER

    def status(self) -> dict:
        r = self.raft
        return {"id": self.id, "role": r.public_role, "leader": r.lead, "term": r.term,
                "commit_index": r.commit, "applied_index": r.applied,
                "last_index": r.last_index, "voters": list(r.conf.voters),
                "learners": list(r.conf.learners)}

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        self._ticker = loop.call_later(self.tick_interval, self._tick)

    async def stop(self) -> None:
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self._snapshotting is not None:  # its thread finishes; its result is dropped
            await asyncio.gather(self._snapshotting, return_exceptions=True)
        if self._snapshot_copied is not None:
            _unlink(self._snapshot_copied[3])
            self._snapshot_copied = None
        self._disk.shutdown(wait=True)   # a write under way ends before storage closes
        self._fail_all(ProposalDropped("the node is stopping"))

    async def wait_stopped(self) -> None:
        """Return when the node has stopped (``stop``); raise the error it
        stopped on, if one did."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def _tick(self) -> None:
        if self._stopped:
            return
        self.raft.tick()
        self._ticks += 1
        if self._ticks % 10 == 0 and (self.pending or self.conf_waiters):
            self._expire(asyncio.get_running_loop().time())
        if self._persisting:
            self._pump()
        self._wake.set()
        self._ticker = asyncio.get_running_loop().call_later(self.tick_interval, self._tick)

    def step(self, msg: Message) -> None:
        """Feed a message from the transport."""
        if self._stopped:
            return
        if msg.type == MsgType.APP and msg.index == 0 and not self.raft.conf.voters \
                and self.raft.log.snap_index == 0:
            # A joining node knows no membership yet, and the log from index 1
            # does not carry the bootstrap one: it must start from a snapshot
            # (leaders compact after adding a learner, see _handle).
            return
        try:
            self.raft.step(msg)
        except Exception:  # a bad message must not kill the node
            log.exception("event=step_failed type=%s from=%s", msg.type.name, msg.frm)
            return
        if self._persisting:
            self._pump()
        self._wake.set()

    def peer_closed(self, peer: str) -> None:
        """The transport's connection from ``peer`` closed: if it is the
        leader, it has probably died (Raft.leader_gone)."""
        if not self._stopped and peer and peer == self.raft.lead and not self.is_leader:
            log.info("event=leader_connection_closed leader=%s", peer)
            self.raft.leader_gone()
            self._wake.set()

    # -- requests ----------------------------------------------------------------------
    async def propose(self, data: bytes) -> tuple[int, Any]:
        return await self.submit(data)

    def submit(self, data: bytes) -> asyncio.Future:
        """``propose`` without a coroutine: a future for ``(index, result)``, in
        the shape the daemon's log interface uses (no task per proposal)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._stopped:
            fut.set_exception(ProposalDropped("the node is stopped"))
        elif not self.is_leader:
            fut.set_exception(NotLeader(self.leader or None))
        else:
            before = self.raft.last_index
            self.raft.propose(data, context=b"")
            if self.raft.last_index == before:
                fut.set_exception(ProposalDropped(
                    "the leader refused the proposal (leadership is being transferred); "
                    "retry shortly"))
            else:
                self._register(self.pending, fut)
                if self._persisting:
                    self._pump()   # replicate it while this node's own write goes on
        return fut

    async def _wait_index(self, table: dict[int, _Pending]) -> tuple[int, Any]:
        fut = asyncio.get_running_loop().create_future()
        self._register(table, fut)
        return await fut

    def _register(self, table: dict[int, _Pending], fut: asyncio.Future) -> None:
        """Wait for the entry just appended at the last index."""
        index, term = self.raft.last_index, self.raft.term
        old = table.get(index)
        if old is not None and not old.future.done():
            # This leader's log now holds another entry at that index, so by
            # leader completeness the old one was never committed.
            old.future.set_exception(ProposalDropped(
                f"entry {index} of term {old.term} was replaced after a leader change; "
                "it was not applied"))
        table[index] = _Pending(index, term, fut,
                                asyncio.get_running_loop().time() + self.proposal_timeout)
        self._wake.set()

    def _expire(self, now: float) -> None:
        """Fail proposals that waited longer than proposal_timeout (checked
        once per tick rather than with a timer per proposal)."""
        for table in (self.pending, self.conf_waiters):
            for index in [i for i, p in table.items() if p.deadline <= now]:
                p = table.pop(index)
                if not p.future.done():
                    p.future.set_exception(ProposalDropped(
                        f"entry {index} was not applied within {self.proposal_timeout:g}s; "
                        "its outcome is unknown (it may still commit)"))

    async def change_membership(self, kind: ConfChangeType, node: str) -> int:
        if self._stopped:
            raise ProposalDropped("the node is stopped")
        if not self.is_leader:
            raise NotLeader(self.leader or None)
        before = self.raft.last_index
        self.raft.propose_conf_change(ConfChange(kind, node), context=b"conf")
        if self.raft.last_index == before:
            reason = "refused"
            for ctx, why in self.raft.dropped:
                if ctx == b"conf":
                    reason = why
            raise ProposalDropped(f"membership change refused: {reason}")
        index, _ = await self._wait_index(self.conf_waiters)
        return index

    def transfer_leadership(self, to: str) -> None:
        if not self.is_leader:
            raise NotLeader(self.leader or None)
        self.raft.transfer_leadership(to)
        self._wake.set()

    async def read_barrier(self) -> int:
        """Linearizable read point: returns once the state reflects every write
        committed before the call (ReadIndex)."""
        self._read_seq += 1
        ctx = f"{self.id}:{self._read_seq}".encode()
        fut = asyncio.get_running_loop().create_future()
        self.reads[ctx] = fut
        self._read_asked[ctx] = self.raft.lead
        self.raft.read_index(ctx)
        self._wake.set()
        try:
            async with asyncio.timeout(self.proposal_timeout):  # (wait_for can lose a cancel)
                return await fut
        except TimeoutError:
            raise ProposalDropped("read index not confirmed in time (no leader?)") from None
        finally:
            self.reads.pop(ctx, None)
            self._read_asked.pop(ctx, None)

    def _drop_reads_of_old_leaders(self) -> None:
        """The leader changed: a read asked of another leader and not yet
        confirmed will never be (that leader is gone, or no longer leads,
        and a new one knows nothing of it). It fails now, so its caller asks
        again at once, rather than at proposal_timeout: a node that started
        while the leader died waited 11 s to be ready, and leading meanwhile
        started no run (fault suite, skew+kill-leader)."""
        lead = self.raft.lead
        confirmed = {id(fut) for _, fut in self.read_points}
        for ctx, asked in list(self._read_asked.items()):
            fut = self.reads.get(ctx)
            if asked != lead and fut is not None and not fut.done() \
                    and id(fut) not in confirmed:
                fut.set_exception(ProposalDropped(
                    f"the leader changed ({asked or '-'} to {lead or '-'}) before the read "
                    "was confirmed; ask again"))

    # -- the Ready loop --------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            await self._wake.wait()
            # Let everything already runnable (proposals, messages read in the
            # same turn) reach the core first, so that one Ready and one fsync
            # cover all of it.
            await asyncio.sleep(0)
            self._wake.clear()
            while self.raft.has_ready() and not self._stopped:
                rd = self.raft.ready()
                try:
                    await self._handle(rd, loop)
                except Exception:
                    log.exception("event=ready_failed: stopping the node")
                    self._stopped = True
                    self._fail_all(ProposalDropped("the node stopped after a storage error"))
                    raise
                if rd.committed:
                    # A Ready applies at most max_committed_bytes: the loop's
                    # other work (peers' requests, ticks) runs between two,
                    # not after a whole burst of 100,000 jobs.
                    await asyncio.sleep(0)
            if self._snapshot_copied is not None and not self._stopped:
                try:
                    self._finish_snapshot()
                except Exception:
                    log.exception("event=snapshot_store_failed: stopping the node")
                    self._stopped = True
                    self._fail_all(ProposalDropped("the node stopped after a storage error"))
                    raise

    async def _handle(self, rd: Ready, loop) -> None:
        # A leader's appends and heartbeats acknowledge nothing of its own, so
        # they go out before its fsync: the leader writes its disk in parallel
        # with replication (Raft thesis 10.2.1). Everything else (votes,
        # append responses) waits until what it acknowledges is durable.
        later = rd.messages
        if self.raft.role == LEADER and rd.messages:
            later = []
            for msg in rd.messages:
                if msg.type in EARLY:
                    self.transport.send(msg)
                else:
                    later.append(msg)
            flush = getattr(self.transport, "flush", None)
            if flush is not None:
                flush()  # onto the wire now, not after the fsync below
        # Whatever arrives while this Ready is written rides the next Ready's
        # single write (group commit).
        if rd.snapshot is not None:
            self._save_received(rd.snapshot)
        hs = rd.hard_state or self._unsynced_hs
        if hs is not None and (hs.term, hs.vote) == self._synced_vote and not rd.entries:
            # Only the commit index moved: it need not be durable (a restarted
            # node learns it again from the leader, and Raft takes the state
            # machine's applied index as committed), so no fsync for it; the
            # next save carries it.
            self._unsynced_hs = hs
        elif rd.entries or hs is not None:
            await self._persist(hs, rd.entries)
            self._unsynced_hs = None
            if hs is not None:
                self._synced_vote = (hs.term, hs.vote)
        for msg in later:
            self.transport.send(msg)
        if rd.soft_state is not None:
            self.leader_changes += 1
            log.info("event=raft_state role=%s leader=%s term=%d", rd.soft_state.role,
                     rd.soft_state.leader or "-", self.raft.term)
            self._drop_reads_of_old_leaders()
            self.changes.notify()
        if rd.snapshot is not None:
            self.sm.restore(rd.snapshot.data, rd.snapshot.meta.index)
            self._log_bytes = 0
            self._covered(rd.snapshot.meta.index)
            self.changes.notify()  # the snapshot carries a membership
        if any(e.type == EntryType.CONF and e.data and
               ConfChange.decode(e.data).type == ConfChangeType.ADD_LEARNER
               for e in rd.committed):
            # Whoever leads later must bring the new member up from a
            # snapshot (it carries the membership; the log alone does not).
            self._snapshot_wanted = True
        if rd.committed:
            applied = self.sm.applied_index
            batch = [(e.index, e.data) for e in rd.committed
                     if e.type == EntryType.NORMAL and e.index > applied]
            self._log_bytes += sum(len(data) for _, data in batch)
            apply_batch = getattr(self.sm, "apply_batch", None)
            if apply_batch is not None:
                # One state transaction (and one commit) for the whole batch.
                results = apply_batch(batch) if batch else {}
            else:
                results = {index: self.sm.apply(index, data) for index, data in batch}
            self._resolve(self.pending, rd.committed, results)
            self._resolve(self.conf_waiters, rd.committed, {})
        for ctx, reason in rd.dropped:
            log.debug("event=proposal_dropped reason=\"%s\"", reason)
            fut = self.reads.get(ctx)
            if fut is not None and not fut.done():
                fut.set_exception(ProposalDropped(reason))
        for rs in rd.read_states:
            fut = self.reads.get(rs.context)
            if fut is not None and not fut.done():
                self.read_points.append((rs.index, fut))
        self.raft.advance(rd)
        if any(e.type == EntryType.CONF for e in rd.committed):
            self.changes.notify()  # the membership changed
        self._release_reads()
        self._maybe_snapshot(loop)

    async def _persist(self, hs, entries) -> None:
        """Write a hard state and entries durably on the storage thread; the
        loop goes on meanwhile (ticks, peers' messages, everything else of
        the daemon). The core is stepped and ticked between its Ready and
        ``advance``, as etcd's is: what it produces meanwhile waits for the
        next Ready, except what ``_pump`` may send at once."""
        def write():
            began = monotonic()
            self.storage.save(hs, entries)
            return began, monotonic()
        self._persisting = True
        self.write_began = monotonic()
        try:
            began, end = await asyncio.get_running_loop().run_in_executor(self._disk, write)
        finally:
            self._persisting = False
            self.write_began = None
        self.disk_writes.append((end, end - began))

    def _pump(self) -> None:
        """While a write is under way: a leader sends its heartbeats, appends,
        snapshot chunks and leadership hand-over at once (they acknowledge nothing of its own; its
        term is on disk since before it asked for votes, Raft thesis 10.2.1),
        and a follower its heartbeat responses. Everything else (votes,
        append responses, anything of a node whose term is not on disk yet)
        waits for the Ready after the write."""
        r = self.raft
        if not r.msgs or r.term != self._synced_vote[0]:
            return
        early = EARLY_LEADER if r.role == LEADER else EARLY_REPLIES
        now = [m for m in r.msgs if m.type in early]
        if not now:
            return
        r.msgs = [m for m in r.msgs if m.type not in early]
        for msg in now:
            self.transport.send(msg)
        flush = getattr(self.transport, "flush", None)
        if flush is not None:
            flush()

    def _resolve(self, table: dict[int, _Pending], committed: list, results: dict) -> None:
        """Answer every waiter whose index this batch of applied entries reaches."""
        if not table:
            return
        last = committed[-1].index
        terms = {e.index: e.term for e in committed}
        for idx in [i for i in table if i <= last]:
            p = table.pop(idx)
            if p.future.done():
                continue
            if terms.get(idx) == p.term:
                p.future.set_result((idx, results.get(idx)))
            elif idx in terms:
                p.future.set_exception(ProposalDropped(
                    f"entry {idx} of term {p.term} was replaced after a leader change; "
                    "it was not applied"))
            else:
                p.future.set_exception(ProposalDropped(
                    f"entry {idx}: outcome unknown (applied through a snapshot or before "
                    "this batch); check the state before retrying"))

    def _covered(self, index: int) -> None:
        """A snapshot up to ``index`` was installed: waiters at or below it may or
        may not be in it; say so rather than guess."""
        for table in (self.pending, self.conf_waiters):
            for idx in [i for i in table if i <= index]:
                p = table.pop(idx)
                if not p.future.done():
                    p.future.set_exception(ProposalDropped(
                        f"entry {idx}: outcome unknown (the node installed a snapshot "
                        f"up to {index}); check the state before retrying"))

    def _release_reads(self) -> None:
        applied = self.raft.applied
        keep = []
        for index, fut in self.read_points:
            if fut.done():
                continue
            if index <= applied:
                fut.set_result(index)
            else:
                keep.append((index, fut))
        self.read_points = keep

    def _maybe_snapshot(self, loop) -> None:
        if self._snapshot_wanted:
            self._snapshot_wanted = False
            self.snapshot_now()
            return
        applied = self.raft.applied
        if (applied - self.raft.log.snap_index < self.snapshot_every
                and self._log_bytes < self.snapshot_bytes) or \
                self._snapshotting is not None or applied < self._snapshot_retry_at:
            return
        self._log_bytes = 0
        job = getattr(self.sm, "snapshot_job", None)
        try:
            copy = job() if job is not None else None  # fixes the state as applied now
        except Exception as exc:
            self._snapshot_failed(applied, exc)
            return
        if copy is None:
            self.snapshot_now()
        else:
            self._snapshotting = loop.create_task(
                self._snapshot_off_loop(copy, applied, self.raft.conf))

    def _snapshot_failed(self, index: int, exc: Exception) -> None:
        """A copy that failed (a full disk?) is tried again after
        snapshot_every more entries, not at every Ready."""
        self._snapshotting = None
        self._snapshot_retry_at = self.raft.applied + self.snapshot_every
        log.warning("event=snapshot_failed index=%d error=\"%s\" hint=\"tried again after "
                    "%d more entries; check the disk of the data_dir\"", index, exc,
                    self.snapshot_every)

    async def _snapshot_off_loop(self, copy, index: int, conf: ConfState) -> None:
        """The periodic snapshot, without holding the event loop: the state
        was fixed at ``index`` (``copy`` holds it; ``conf`` is the membership
        at it) by the caller, on the loop; here a worker thread copies it
        into the snapshot file and fsyncs it; back on the loop
        (``_finish_snapshot``, in the Ready loop, so a storage error stops
        the node as any other) only the small row that names the file is
        written and the log compacted. Copying a 30 MB state and storing it
        as a blob held the loop for ~317 ms (bench/snapshot_stall.py)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        tmp = self.storage.snapshot_file(index) + ".tmp"

        def work():
            try:
                data = copy(tmp)
                return (data, *self.storage.seal_snapshot_file(tmp, index, data))
            except BaseException:
                _unlink(tmp)   # a failed copy leaves no file behind
                raise
        try:
            data, path, checksum = await loop.run_in_executor(None, work)
        except asyncio.CancelledError:
            self._snapshotting = None
            raise
        except Exception as exc:
            self._snapshot_failed(index, exc)
            return
        self._snapshot_copied = (index, conf, data, path, checksum, loop.time() - started)
        self._wake.set()

    def _finish_snapshot(self) -> None:
        assert self._snapshot_copied is not None  # the Ready loop calls it for a copy done
        index, conf, data, path, checksum, copy_s = self._snapshot_copied
        self._snapshot_copied = None
        self._snapshotting = None
        if hasattr(data, "path"):
            data.path = path
        if index <= self.raft.log.snap_index or not os.path.exists(path):
            _unlink(path)  # overtaken (a snapshot installed or taken since): dropped
            return
        loop = asyncio.get_running_loop()
        on_loop = loop.time()
        snap = self.raft.compact(index, data, conf)
        self.storage.save_snapshot(snap, file=path, data_checksum=checksum)
        self.storage.compact(index)
        log.info("event=snapshot index=%d bytes=%d copy_s=%.3f on_loop_s=%.3f", index,
                 len(data), copy_s, loop.time() - on_loop)

    def _snapshot_sink(self) -> FileSink:
        """Where a snapshot from the leader is received: a file beside the
        log (removed at the next open if the daemon dies meanwhile)."""
        self._recv_seq += 1
        return FileSink(self.storage.snapshot_file(0) + f"recv-{os.getpid()}-"
                        f"{self._recv_seq}.tmp")

    def _save_received(self, snap) -> None:
        """Store a snapshot received from the leader: a file received (moved
        into place, its checksum read a chunk at a time) or bytes."""
        data = snap.data
        if isinstance(data, FileData):
            path, checksum = self.storage.seal_snapshot_file(data.path, snap.meta.index, data)
            data.path = path
            self.storage.save_snapshot(snap, file=path, data_checksum=checksum)
        else:
            self.storage.save_snapshot(snap)

    def snapshot_now(self) -> None:
        """Snapshot the state at the applied index and compact the log.

        Also used when a node joins: the log does not hold the bootstrap
        membership (it is configuration, not an entry), so a new member must
        start from a snapshot, which carries the membership. A state in a
        file is copied into the snapshot file (not into memory: the snapshot
        is sent from the file)."""
        applied = self.raft.applied
        if applied <= self.raft.log.snap_index:
            return
        self._log_bytes = 0
        job = getattr(self.sm, "snapshot_job", None)
        copy = job() if job is not None else None
        if copy is None:
            snap = self.raft.compact(applied, self.sm.snapshot())
            self.storage.save_snapshot(snap)
        else:
            tmp = self.storage.snapshot_file(applied) + ".now.tmp"
            try:
                data = copy(tmp)
                path, checksum = self.storage.seal_snapshot_file(tmp, applied, data)
            except BaseException:
                _unlink(tmp)
                raise
            data.path = path
            snap = self.raft.compact(applied, data)
            self.storage.save_snapshot(snap, file=path, data_checksum=checksum)
        self.storage.compact(applied)

    def _fail_all(self, exc: Exception) -> None:
        for table in (self.pending, self.conf_waiters):
            for p in table.values():
                if not p.future.done():
                    p.future.set_exception(exc)
            table.clear()
        for fut in self.reads.values():
            if not fut.done():
                fut.set_exception(exc)

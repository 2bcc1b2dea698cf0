"""The log of a cluster: the daemon's ``Log`` (base.py) on Raft.

* ``ReplicatedState`` is the Raft state machine: it applies each batch of
  committed entries with ``state.apply.apply_batch`` (one SQLite transaction
  on every node) and hands the effects to the subscribers. Snapshots are
  copies of the database.
* ``RaftLog`` proposes: on the leader into Raft; on any other node the
  proposal is forwarded to the leader (``forward``: the peer request) and
  the result comes back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from typing import Any, Awaitable, Callable

import apsw

from ...errors import (CronrdError, NotLeader, PermissionDenied, ProposalDropped, RequestError,
                      StateError, UsageError)
from ...state import commands as C
from ...state import versions as V
from ...state.apply import apply_batch
from ...state.effects import Effect, StateRestored
from ...errors import Conflict, Refused
from ...state.machine import StateMachine, check_readable
from .base import EffectListener, result_of
from ..peers.rpc import PeerError, PeerUnavailable
from .raft_node import RaftNode
from .snapshot_data import FileData, write_data
from ..tasks import Changes

log = logging.getLogger("cronrd.cluster")

FORWARD_TIMEOUT = 5.0    # a forwarded proposal without an answer: outcome unknown
PROPOSE_DEADLINE = 10.0  # how long a proposal waits for a leader to exist
ERRORS = {"Refused": Refused, "Conflict": Conflict, "StateError": StateError, "UsageError": UsageError,
          "RequestError": RequestError, "ProposalDropped": ProposalDropped,
          "PermissionDenied": PermissionDenied}

# forward(leader, encoded command) -> the leader's result (raises PeerError,
# PeerUnavailable)
Forward = Callable[[str, bytes], Awaitable[Any]]


def local_error(exc: PeerError, default: type = RequestError) -> CronrdError:
    """A peer's error, as the same kind of error here (a refusal stays a
    refusal, so callers treat forwarded and local proposals alike)."""
    return ERRORS.get(exc.kind, default)(str(exc))


class ReplicatedState:
    """The Raft state machine over the daemon's SQLite state."""

    def __init__(self, machine: StateMachine, scratch_dir: str):
        self.machine = machine
        self.conn = machine.conn
        self.scratch_dir = scratch_dir
        self.listeners: list[EffectListener] = []

    @property
    def applied_index(self) -> int:
        return self.machine.applied_index

    def apply(self, index: int, data: bytes) -> Any:
        return self.apply_batch([(index, data)])[index]

    def apply_batch(self, entries: list[tuple[int, bytes]]) -> dict[int, Any]:
        """Apply committed entries in one transaction (state/apply.py). A
        refused command's result is its exception; a failed commit raises
        and stops the node."""
        results, effects = apply_batch(self.machine, entries)
        if effects:
            self._deliver(effects)
        return results

    def _deliver(self, effects: list[Effect]) -> None:
        for listener in self.listeners:
            try:
                listener(effects)
            except Exception:
                log.exception("event=effect_listener_failed")

    def snapshot(self) -> bytes:
        return self.conn.serialize("main")

    def snapshot_job(self) -> Callable[[str], FileData] | None:
        """Fix the state as applied now and return the copy to make of it.

        On the event loop this only opens a read transaction on a connection
        of its own (WAL mode: it goes on seeing this state while entries are
        applied). The returned function copies that state into a new
        database file at the path it is given and returns it (FileData: read
        when sent, not held in memory); it runs
        in a worker thread (SQLite's backup releases the GIL), so a copy of a
        large state does not hold the loop (``RaftNode`` says more). None
        for a state in memory (tests): there is no file to read it from."""
        if not self.conn.filename:
            return None
        reader = apsw.Connection(self.conn.filename, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except apsw.Error:
            reader.close()
            raise

        def copy(path: str) -> FileData:
            try:
                dest = apsw.Connection(path)
                try:
                    with dest.backup("main", reader, "main") as backup:
                        backup.step(-1)
                finally:
                    dest.close()
                return FileData(path)
            finally:
                reader.close()
        return copy

    restores_from_files = True  # RaftNode may hand restore a received file (FileData)

    def restore(self, data: bytes | FileData, index: int) -> None:
        """Replace the whole state with a snapshot from the leader (bytes, or
        a snapshot file: copied a chunk at a time)."""
        fd, path = tempfile.mkstemp(prefix="snapshot-", suffix=".db", dir=self.scratch_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                write_data(f, data)
            src = apsw.Connection(path)
            try:
                # Before it replaces anything: a snapshot only a newer cronrd
                # applies leaves this node's state as it was, and says why.
                check_readable(src, f"the snapshot at index {index} from the leader")
                with self.conn.backup("main", src, "main") as backup:
                    backup.step(-1)
            finally:
                src.close()
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(path + suffix)
                except FileNotFoundError:
                    pass
        # A snapshot file written before an upgrade has the older schema.
        self.machine.migrate()
        log.info("event=snapshot_installed index=%d applied_index=%d", index,
                 self.machine.applied_index)
        self._deliver([StateRestored()])


async def _no_forwarding(leader: str, data: bytes) -> Any:
    raise NotLeader(leader)


class RaftLog:
    """``propose(cmd) -> Future`` on Raft, from any node."""

    def __init__(self, node: RaftNode, state: ReplicatedState,
                 forward: Forward = _no_forwarding):
        self.node = node
        self.state = state
        self.forward = forward
        self.stopping = False
        self._inflight: set[asyncio.Future] = set()

    @property
    def is_leader(self) -> bool:
        return self.node.is_leader

    @property
    def leader(self) -> str:
        """The leader this node knows of ("" while there is none)."""
        return self.node.leader or ""

    @property
    def changes(self) -> Changes:
        """Notified when the leader, this node's role or the membership changes."""
        return self.node.changes

    def subscribe(self, listener: EffectListener) -> None:
        self.state.listeners.append(listener)

    async def read_barrier(self) -> int:
        return await self.node.read_barrier()

    def propose(self, cmd: C.Command) -> asyncio.Future:
        task = asyncio.get_running_loop().create_task(self._propose(cmd))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    def gate(self, cmd: C.Command) -> None:
        """Refuse a command the recorded cluster version does not allow yet
        (state/versions.py): it must not reach the log while some member
        cannot apply it. (Apply refuses it too: this says so sooner.)"""
        if type(cmd).since > V.BASE or type(cmd).added:
            V.check_proposable(cmd, V.recorded(self.state.conn))

    async def _propose(self, cmd: C.Command) -> Any:
        self.gate(cmd)
        node = self.node
        data = cmd.encode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROPOSE_DEADLINE
        delay = 0.02
        while True:
            leader = node.leader
            if node.is_leader:
                try:
                    _, result = await node.submit(data)
                except NotLeader:
                    pass
                except ProposalDropped as exc:
                    if "transferred" not in str(exc):
                        raise
                else:
                    return result_of(result)
            elif leader and leader != node.id:
                try:
                    return await self.forward(leader, data)
                except PeerError as exc:
                    if exc.kind != "NotLeader":
                        raise local_error(exc, StateError) from None
                except PeerUnavailable as exc:
                    raise ProposalDropped(f"forwarded to the leader {leader}: {exc}; its "
                                          "outcome is unknown: check `cronrd runs` before "
                                          "trying again") from None
            if self.stopping or loop.time() >= deadline:
                raise NotLeader(node.leader or None)
            # No leader yet, a leader change, or a transfer in progress:
            # nothing was appended, so asking again is safe.
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    def propose_as_leader(self, cmd: C.Command) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        out = loop.create_future()
        try:
            self.gate(cmd)
        except CronrdError as exc:
            out.set_exception(exc)
            return out
        inner = self.node.submit(cmd.encode())

        def done(f: asyncio.Future) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
            elif (exc := f.exception()) is not None:
                out.set_exception(exc)
            else:
                result = f.result()[1]
                if isinstance(result, BaseException):
                    out.set_exception(result)
                else:
                    out.set_result(result)
        inner.add_done_callback(done)
        return out

    async def drain(self) -> None:
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=PROPOSE_DEADLINE)

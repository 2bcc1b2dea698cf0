"""The log of one host: the direct log.

On a single host a proposal is committed as soon as it is durable, so this
log applies each batch of proposals (everything proposed in one turn of the
event loop) with ``state.apply.apply_batch`` in one SQLite transaction, one
fsync for the whole batch, and resolves every proposal with its result.
It implements the whole ``Log`` protocol (base.py) and passes the same
contract tests as the Raft log (tests/unit/runtime/test_log_contract.py).

Why not a one-voter Raft node (measured by bench/onehost_log.py, figures
in bench/README.md: this log commits 1.6 to 2 times as many proposals per
second at two thirds of the median latency, 0.58 ms against 0.88 ms): the
Raft node costs a second durable write per batch (its own log, then the
state), a tick timer that wakes an idle host 50-60 times a second, a copy of
the whole database at each snapshot, and a peer port to configure; for
nothing a single host can use. What a one-voter
Raft node would have given for free, growing into a cluster without losing
history, ``cronrd cluster init`` gives instead: it turns this log's
data_dir into the first member of a cluster (a Raft snapshot of the state).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...errors import StorageError
from ...state.apply import apply_batch
from ...state.commands import Command
from ...state.effects import Effect
from ...state.machine import StateMachine
from .base import EffectListener

log = logging.getLogger("cronrd.log")


class LocalLog:
    def __init__(self, machine: StateMachine):
        self.machine = machine
        self._queue: list[tuple[Command, asyncio.Future]] = []
        self._flush_scheduled = False
        self._listeners: list[EffectListener] = []

    @property
    def is_leader(self) -> bool:
        return True  # the only member

    def subscribe(self, listener: EffectListener) -> None:
        self._listeners.append(listener)

    def propose(self, cmd: Command) -> asyncio.Future:
        """Queue ``cmd``; the future resolves with apply's result or error."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.append((cmd, fut))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return fut

    def propose_as_leader(self, cmd: Command) -> asyncio.Future:
        """The one node is always the leader: the same as ``propose``."""
        return self.propose(cmd)

    async def read_barrier(self) -> int:
        """Every committed write is applied here already."""
        return self.machine.applied_index

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._queue = self._queue, []
        first = self.machine.applied_index + 1
        try:
            results, effects = apply_batch(
                self.machine, [(first + i, cmd) for i, (cmd, _) in enumerate(batch)])
        except Exception as exc:  # the batch did not commit: nothing applied
            log.error("event=commit_failed error=%r batch=%d", exc, len(batch))
            err = StorageError(f"the state database did not commit ({exc}); the "
                               "proposal is retried by its proposer")
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        for i, (_, fut) in enumerate(batch):
            if fut.done():
                continue
            result: Any = results[first + i]
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)
        if effects:
            self._deliver(effects)

    def _deliver(self, effects: list[Effect]) -> None:
        for listener in self._listeners:
            try:
                listener(effects)
            except Exception:
                log.exception("event=effect_listener_failed")

    async def drain(self) -> None:
        """Wait until every queued proposal has been applied (or refused)."""
        while self._queue:
            await asyncio.wait([fut for _, fut in self._queue])

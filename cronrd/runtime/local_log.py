"""The log of a one-member cluster.

On a single host a proposal is committed as soon as it is durable, so the
"log" applies each batch of proposals to the state machine in one SQLite
transaction (one fsync for the whole batch) and resolves every proposal with
its result. The cluster puts Raft in place of this class behind the same
``propose`` seam: callers never learn which one they talk to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..errors import CronrdError, StorageError
from ..state.commands import Command
from ..state.machine import Effect, StateMachine

log = logging.getLogger("cronrd.log")

EffectListener = Callable[[list[Effect]], None]


class LocalLog:
    def __init__(self, machine: StateMachine):
        self.machine = machine
        self._queue: list[tuple[Command, asyncio.Future]] = []
        self._flush_scheduled = False
        self._listeners: list[EffectListener] = []
        self.is_leader = True

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

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch, self._queue = self._queue, []
        outcomes: list[tuple[asyncio.Future, Any, BaseException | None]] = []
        effects: list[Effect] = []
        machine = self.machine
        try:
            with machine.conn:
                index = machine.applied_index
                for cmd, fut in batch:
                    index += 1
                    try:
                        result, eff = machine.apply(index, cmd)
                    except CronrdError as exc:
                        outcomes.append((fut, None, exc))
                    else:
                        outcomes.append((fut, result, None))
                        effects.extend(eff)
        except Exception as exc:  # the batch did not commit: nothing applied
            log.error("event=commit_failed error=%r batch=%d", exc, len(batch))
            err = StorageError(f"the state database did not commit ({exc}); the "
                               "proposal is retried by its proposer")
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        for fut, result, exc in outcomes:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
        if effects:
            for listener in self._listeners:
                try:
                    listener(effects)
                except Exception:
                    log.exception("event=effect_listener_failed")

    async def drain(self) -> None:
        """Wait until every queued proposal has been applied."""
        while self._queue or self._flush_scheduled:
            await asyncio.sleep(0)

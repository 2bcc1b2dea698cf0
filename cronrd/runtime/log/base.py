"""The ``Log``: the one seam through which the daemon changes the state.

Two implementations, the same contract (tests/unit/runtime/test_log_contract.py):

* ``LocalLog`` (log/local.py): one host, the direct log. A batch of
  proposals is committed by applying it in one SQLite transaction.
* ``RaftLog`` (log/replicated.py): a cluster. The leader orders proposals in
  Raft, a majority commits them, every node applies them; other nodes
  forward their proposals to the leader.

Both apply committed batches with ``state.apply.apply_batch``, so a batch
means the same on one host as in a cluster: one transaction, each command
refused alone. The daemon, the scheduler, the executor and the watcher are
written once against this protocol and never learn which one they hold.

Why one host is not a one-voter Raft node: see log/local.py.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Protocol

from ...state.commands import Command
from ...state.effects import Effect

EffectListener = Callable[[list[Effect]], None]


class Log(Protocol):
    @property
    def is_leader(self) -> bool:
        """Does this node lead now (its proposals need no forwarding, and it
        may make the leader's decisions)? One host always does."""

    def propose(self, cmd: Command) -> asyncio.Future:
        """Commit ``cmd`` from any node. The future resolves with apply's
        result, or fails with the error apply refused it with (``Refused``,
        another ``CronrdError``), or with ``NotLeader`` / ``ProposalDropped``
        / ``StorageError`` when it was not committed (safe to propose again
        only after checking the state: its outcome may be unknown)."""

    def propose_as_leader(self, cmd: Command) -> asyncio.Future:
        """Like ``propose``, but only while this node leads, never forwarded:
        a decision made from this leader's view must not reach the next
        leader after this one was deposed. Fails with ``NotLeader`` otherwise."""

    def subscribe(self, listener: EffectListener) -> None:
        """Call ``listener`` with the effects of each committed batch, in
        commit order, after the batch is durable (and with a ``restored``
        effect when a snapshot replaced the state)."""

    async def read_barrier(self) -> int:
        """Return once this node's state holds every write committed before
        the call (ReadIndex through the leader); returns that index."""

    async def drain(self) -> None:
        """Wait (bounded) for the proposals made here to be settled."""


def result_of(value: Any) -> Any:
    """A committed entry's result: apply's value, or raise the exception
    that refused it."""
    if isinstance(value, BaseException):
        raise value
    return value

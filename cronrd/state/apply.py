"""Applying a batch of committed commands: the one function every log uses.

The one-host log and the Raft state machine both hand their committed
batches here, so a batch means the same thing on one host as in a cluster:

* the whole batch is one SQLite transaction (one commit, one fsync);
* each command is refused alone: a refusal (``CronrdError``), an entry that
  does not decode, or a command ``apply`` cannot handle (a wrong field type
  from a buggy or newer proposer) is that index's result, as an exception;
  it still advances the applied index and the digest, alike on every node,
  and the other commands of the batch apply;
* an entry only a newer cronrd applies (a command kind or field this code
  does not know, a cluster version above its own: state/versions.py)
  fails the batch the same way: this node must not go on by older rules;
* only the database failing (``apsw.Error``, but for a constraint or type
  the command's values break: ``COMMAND_ERRORS``) fails the batch: it raises,
  nothing of the batch is committed, and the caller decides (the one-host
  log fails the batch's proposals, a Raft node stops rather than diverge).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

import apsw

from ..errors import CronrdError, StateError
from .. import __version__
from . import commands as C
from . import versions as V
from .effects import Effect
from ..errors import Refused
from .machine import StateMachine

log = logging.getLogger("cronrd.state")

# SQLite errors a command's own values cause (the same on every node), as
# against the disk's: those refuse the command, these fail the batch.
COMMAND_ERRORS = (apsw.ConstraintError, apsw.MismatchError, apsw.TooBigError)


def apply_batch(machine: StateMachine, entries: Iterable[tuple[int, C.Command | bytes]]
                ) -> tuple[dict[int, Any], list[Effect]]:
    """Apply ``(index, command or its encoding)`` pairs in one transaction.

    Returns each index's result (or the exception that refused it) and the
    effects of the commands that applied, in order. Effects are facts about
    a committed state: deliver them only after this returns."""
    results: dict[int, Any] = {}
    effects: list[Effect] = []
    with machine.conn:
        for index, entry in entries:
            if isinstance(entry, (bytes, bytearray)):
                try:
                    cmd = C.decode(entry)
                except C.UnknownCommand as exc:
                    # A newer cronrd proposed it: the members that know it
                    # apply it; skipping it here would diverge from them.
                    raise V.NewerLog(
                        f"log entry {index} is {exc}; this cronrd {__version__} applies "
                        f"cluster versions up to {V.APPLY_VERSION}: "
                        f"{V.upgrade_hint(V.APPLY_VERSION + 1)}; this node stops applying "
                        "here rather than skip it") from None
                except StateError as exc:
                    log.error("event=undecodable_entry index=%d error=\"%s\"", index, exc)
                    machine.skip_undecodable(index, bytes(entry))
                    results[index] = Refused(str(exc))
                    continue
                raw = bytes(entry)
            else:
                cmd, raw = entry, None
            try:
                result, eff = machine.apply(index, cmd, raw)
            except V.NewerLog:
                raise  # not a refusal: the batch fails and this node stops applying
            except CronrdError as exc:
                results[index] = exc
            except apsw.Error as exc:
                if not isinstance(exc, COMMAND_ERRORS):
                    raise  # this node's disk, not the command: the batch fails
                # A constraint the command's values break (a NaN time binds
                # as NULL): the command's doing, alike on every node.
                log.error("event=command_failed index=%d op=%s error=%r", index, cmd.op, exc)
                results[index] = Refused(f"command {cmd.op} at index {index} could not be "
                                         f"applied: {exc}; run the same cronrd version on "
                                         "every node")
            except Exception as exc:
                # apply has advanced the index and the digest (and rolled the
                # command back): refused alike on every node, never fatal.
                log.error("event=command_failed index=%d op=%s error=%r", index, cmd.op, exc)
                results[index] = Refused(f"command {cmd.op} at index {index} could not be "
                                         f"applied: {exc}; run the same cronrd version on "
                                         "every node")
            else:
                results[index] = result
                effects.extend(eff)
    return results, effects

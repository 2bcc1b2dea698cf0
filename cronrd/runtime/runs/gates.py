"""Gates: the runs due at one time wait behind one pipe, opened at that time.

A run's supervisor is asked for ahead of its fire time; its shell blocks
reading the gate's pipe. At the fire time the executor decides which of the
gate's runs go (``release``), and the gate writes one token per run that goes
and closes: the ones that read nothing exit unrun. A gate waits, at most
``READY_WAIT`` after its due time, for runs whose supervisor has not said
they are ready yet.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..clock import Clock

log = logging.getLogger("cronrd.executor")


class _Life(Protocol):
    @property
    def at_gate_ready(self) -> bool: ...


class Waiter(Protocol):
    """What a gate knows of a run waiting at it (active.ActiveRun is one):
    its life (ready to pass?) and its gate."""
    @property
    def life(self) -> _Life: ...

    @property
    def gate(self) -> "Gate | None": ...

READY_WAIT = 2.0  # longest a gate waits for a run prepared at or before its time to be ready
CLAIM_WAIT = 10.0  # ... and for the claims of runs that are ready (a cluster short of CPU
                   # commits them late; the leader moves them if this node stops answering)


@dataclass
class Gate:
    due: float
    rfd: int
    wfd: int
    runs: list = field(default_factory=list)
    handle: asyncio.TimerHandle | None = None
    claim_handle: asyncio.TimerHandle | None = None
    claiming: bool = False           # its runs' claims were asked for (or need none)
    waiting: bool = False            # due, but a run is not ready yet
    ready_by: float = 0.0            # wall time after which it opens for whoever is ready
    closed: bool = False             # its pipe is closed: its numbers may be another's now

    def open(self, go: int) -> None:
        """Let ``go`` of the runs waiting here through, and close: the rest exit."""
        if self.closed:
            # Never write to (or close) numbers that may belong to another
            # pipe or a socket by now.
            log.error("event=gate_opened_twice due=%.3f hint=\"a bug: the gate was "
                      "released before; nothing written\"", self.due)
            return
        try:
            # Two bytes per run: a run killed a moment ago cannot starve another.
            os.write(self.wfd, b"\n" * (2 * go))
        except OSError as exc:
            log.error("event=gate_write_failed error=%s", exc)
        self.close()

    def close(self) -> None:
        """Without a byte: every run waiting here exits unrun. Once."""
        if self.closed:
            return
        self.closed = True
        if self.handle is not None:
            self.handle.cancel()
        if self.claim_handle is not None:
            self.claim_handle.cancel()
        os.close(self.wfd)
        os.close(self.rfd)


def _settled(act: Waiter) -> bool:
    """Ready to pass (with its claim decided, in a cluster), or not going to
    (stopped, or over)."""
    return act.life.at_gate_ready


class Gates:
    def __init__(self, clock: Clock, release: Callable[[Gate], None],
                 claim: Callable[[Gate], None] | None = None,
                 lead: Callable[[], float] = lambda: 0.0,
                 fence: Callable[[], str | None] = lambda: None):
        """``release(gate)``: at the gate's time, decide and ``gate.open``.
        ``claim(gate)``: ``lead()`` seconds before it (in a cluster), ask for
        the claims of its runs; a gate made later asks at once. ``fence()``:
        why this node may not start runs now (its clock off, no lease), or
        None."""
        self.clock = clock
        self.release = release
        self.claim = claim
        self.lead = lead
        self.fence = fence
        self.by_due: dict[float, Gate] = {}

    def __bool__(self) -> bool:
        return bool(self.by_due)

    def times(self) -> list[float]:
        """When the pending gates are due (wall clock)."""
        return list(self.by_due)

    def at(self, due: float) -> Gate:
        """The gate of ``due`` (made at the first run due then)."""
        gate = self.by_due.get(due)
        if gate is None:
            rfd, wfd = os.pipe2(os.O_CLOEXEC)
            gate = Gate(due, rfd, wfd, claiming=self.claim is None)
            now = self.clock.now()
            loop = asyncio.get_running_loop()
            gate.handle = loop.call_later(max(0.0, due - now), self._due, gate)
            if self.claim is not None:
                gate.claim_handle = loop.call_later(max(0.0, due - self.lead() - now),
                                                    self._claim, gate)
            self.by_due[due] = gate
        # Each run gets READY_WAIT from the later of its due time and now to say
        # it is ready: a run prepared late (a catch-up) is not failed at once.
        gate.ready_by = max(gate.ready_by, max(due, self.clock.now()) + READY_WAIT)
        return gate

    def _claim(self, gate: Gate) -> None:
        """Its claim time: ask for the claims of the runs waiting here (a
        run that arrives after this asks for its own, Executor.prepare)."""
        gate.claim_handle = None
        gate.claiming = True
        if self.claim is not None:
            self.claim(gate)

    def _due(self, gate: Gate) -> None:
        early = gate.due - self.clock.now()
        loop = asyncio.get_running_loop()
        fenced = self.fence() is not None
        if early > 0.0005 and not fenced:
            # Timers may fire a hair early, and a wall clock stepped back
            # within max_clock_offset is still this node's clock: re-armed.
            # A node that may not start runs now is not waited for: its
            # runs are released at once (Executor._release: lost, started
            # elsewhere). A node whose clock stepped 30 s back kept its
            # claimed runs at their gates 30 s by its clock before saying
            # they were lost: they ran 30 s late.
            gate.handle = loop.call_later(early, self._due, gate)
            return
        if gate.claim_handle is not None:  # its claim timer has not run yet: claim first
            gate.claim_handle.cancel()
            self._claim(gate)
        elif self.claim is not None and any(a.life.claim == "none" and not a.life.over
                                            and a.life.stop_state is None for a in gate.runs):
            self.claim(gate)  # held back at the claim time (fenced then): ask again now
        if self.by_due.get(gate.due) is not gate:
            return  # a claim decided at once settled it, and it was released meanwhile
        now = self.clock.now()
        left = gate.ready_by - now
        waiting = [a for a in gate.runs if not _settled(a)]
        if waiting and all(a.life.ready for a in waiting):
            left = max(left, gate.due + CLAIM_WAIT - now)  # only claims outstanding
        if left > 0 and waiting and not fenced:
            # A run's supervisor has not said spawned (or, switching to the
            # job's user, ready) yet, or its claim is not decided: opened
            # when they are, or at ready_by.
            gate.waiting = True
            gate.handle = loop.call_later(left, self._due, gate)
            return
        assert gate.handle is not None  # the timer that is due (at() or the wait above)
        gate.handle.cancel()
        self.by_due.pop(gate.due, None)
        self.release(gate)

    def settled(self, act: Waiter) -> None:
        """A run of a gate that waits for its runs got ready (or ended)."""
        gate = act.gate
        if gate is not None and gate.waiting and gate.due in self.by_due:
            if all(_settled(a) for a in gate.runs):
                gate.waiting = False
                self._due(gate)

    def close_all(self) -> None:
        """The daemon stops: the waiting shells exit unrun; their runs stay
        assigned and start when the daemon is back."""
        for gate in list(self.by_due.values()):
            gate.close()
        self.by_due.clear()

"""A run's life on its node, written down: phases, events, and what to do.

The replicated run states (run_states.py) say what the cluster agreed; this
table says what one node does with a run it was given, from the moment its
supervisor is asked for until the result is handed to the log:

    spawning --spawned--> waiting --gate_open(go)--> started --exited--> done
        \\                  \\--gate_open(no)/stop: kill at gate--> (exits) done
         \\--spawn_failed--> done                       \\--stop: terminate

In a cluster a run passes its gate only with its claim won: the node asks
the log "I start this run now" (ClaimRuns) just before the fire time, and
the leader moves a run nobody claimed in time to another node
(ReplaceRuns); the log's order decides, so no two nodes start one run. A
claim lost (the run was moved, or ended) stops the waiting run at once,
unreported: the cluster settled it. On one host nobody else could start it:
its claim is won from the start.

    claim: none --claim_asked--> asking --claim_decided(won)--> won
                                       \\--claim_decided(lost)--> lost (stop: final)

``step(life, event)`` is pure: it returns the next ``Life`` and the actions
the executor performs (signal, report, forget). The executor holds no
other flags about a run; everything it knows is a ``Life``.
"""

from __future__ import annotations

import enum
import os
import signal as _signal
from dataclasses import dataclass, replace
from typing import Any


class Phase(str, enum.Enum):
    SPAWNING = "spawning"   # supervisor asked for; the job's pid not known yet
    WAITING = "waiting"     # the job's shell waits at its gate: nothing ran
    STARTED = "started"     # passed its gate: the job's command runs
    DONE = "done"           # its end is reported (or deliberately not)


# Which phase may follow which: transitions as data.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.SPAWNING: frozenset({Phase.WAITING, Phase.DONE}),
    Phase.WAITING: frozenset({Phase.STARTED, Phase.DONE}),
    Phase.STARTED: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}

# States we may decide for a run ourselves (the rest come from its exit).
STOP_STATES = frozenset({"timed_out", "cancelled", "lost", "skipped", "failed", "final"})


@dataclass(frozen=True)
class Life:
    phase: Phase = Phase.SPAWNING
    switch: bool = False             # runs as another user: READY handshake first
    pid: int = 0                     # the job's process and process group
    ready: bool = False              # spawned (and, switching user, prepared)
    started_at: float | None = None
    stop_state: str | None = None    # what we decided, if we stopped it
    stop_reason: str | None = None
    claim: str = "none"              # none | asking | won | lost (see the module doc)

    @property
    def at_gate_ready(self) -> bool:
        """May its gate open for it (or has it stopped waiting)? Ready, with
        its claim decided; or stopped; or over."""
        return (self.over or self.stop_state is not None
                or (self.ready and self.claim in ("won", "lost")))

    @property
    def started(self) -> bool:
        return self.phase is Phase.STARTED or self.started_at is not None

    @property
    def over(self) -> bool:
        return self.phase is Phase.DONE

    @property
    def holds_slot(self) -> bool:
        """Counts against max_running: a process of the run exists or will,
        and it has not been told to go away unrun."""
        return not self.over and (self.started or self.stop_state is None)


# -- events -------------------------------------------------------------------------
@dataclass(frozen=True)
class Spawned:
    pid: int


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class SpawnFailed:
    error: str


@dataclass(frozen=True)
class ClaimAsked:
    pass


@dataclass(frozen=True)
class ClaimDecided:
    won: bool
    reason: str | None = None   # why it was lost


@dataclass(frozen=True)
class GateOpen:
    """At the fire time: ``go`` (state None), or why it must not start."""
    at: float
    state: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Stop:
    state: str
    reason: str


@dataclass(frozen=True)
class Exited:
    """The job ended with raw wait ``status`` (None: unknown, its supervisor is
    gone without a word)."""
    status: int | None
    written: int
    at: float
    accepting: bool = True     # False while the daemon stops


# -- actions ------------------------------------------------------------------------
@dataclass(frozen=True)
class KillWaiting:
    """SIGKILL the shell at its gate: nothing of the job ran."""
    pid: int


@dataclass(frozen=True)
class Terminate:
    """SIGTERM the job's tree now, SIGKILL what is left after kill_grace."""
    pid: int


@dataclass(frozen=True)
class DropLog:
    """The run never started and wrote nothing: remove its empty log."""


@dataclass(frozen=True)
class Report:
    state: str
    reason: str | None
    exit_code: int | None = None
    signal: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    not_started: bool = False
    early: bool = False        # reason: what the run wrote before its gate (executor reads it)
    log_kept: bool = True
    status: int | None = None  # with early: how its waiting shell ended


@dataclass(frozen=True)
class Defer:
    """Never started, and the daemon is stopping: it stays assigned and starts
    when the daemon is back. Nothing to report."""


Event = Spawned | Ready | SpawnFailed | ClaimAsked | ClaimDecided | GateOpen | Stop | Exited
Action = KillWaiting | Terminate | DropLog | Report | Defer


class IllegalTransition(Exception):
    pass


def _to(life: Life, phase: Phase, **kw: Any) -> Life:
    if phase is not life.phase and phase not in TRANSITIONS[life.phase]:
        raise IllegalTransition(f"{life.phase.value} -> {phase.value}")
    return replace(life, phase=phase, **kw)


def step(life: Life, event: Event) -> tuple[Life, list[Action]]:
    """The next life of a run and what to do, for one event."""
    if life.over:
        return life, []  # late news about a run already settled
    if isinstance(event, Spawned):
        if life.phase is not Phase.SPAWNING or event.pid <= 1:
            return life, []
        life = _to(life, Phase.WAITING, pid=event.pid, ready=not life.switch)
        # Stopped before we knew whom to stop.
        return life, [KillWaiting(life.pid)] if life.stop_state is not None else []
    if isinstance(event, Ready):
        return replace(life, ready=True), []
    if isinstance(event, SpawnFailed):
        if life.phase is not Phase.SPAWNING:
            return life, []
        return _to(life, Phase.DONE), [Report("failed", f"cannot start the run: {event.error}",
                                              exit_code=127, finished_at=None)]
    if isinstance(event, ClaimAsked):
        return (replace(life, claim="asking"), []) if life.claim == "none" else (life, [])
    if isinstance(event, ClaimDecided):
        if life.claim not in ("none", "asking"):
            return life, []  # decided already: a retried claim's answer
        if event.won:
            return replace(life, claim="won"), []
        life = replace(life, claim="lost")
        if life.started:  # cannot happen: it passed its gate only with the claim won
            raise IllegalTransition("a started run lost its claim")
        return _stop(life, "final", event.reason or "claimed by no one: moved")
    if isinstance(event, GateOpen):
        if life.phase is Phase.STARTED or life.stop_state is not None:
            return life, []
        if event.state is None:
            if life.phase is not Phase.WAITING:
                raise IllegalTransition("a run without a process cannot pass its gate")
            if life.claim != "won":
                raise IllegalTransition("a run passes its gate only with its claim won")
            return _to(life, Phase.STARTED, started_at=event.at), []
        return _stop(life, event.state, event.reason or event.state)
    if isinstance(event, Stop):
        return _stop(life, event.state, event.reason)
    if isinstance(event, Exited):
        return _exited(life, event)
    raise TypeError(f"not a run event: {event!r}")


def _stop(life: Life, state: str, reason: str) -> tuple[Life, list[Action]]:
    if state not in STOP_STATES:
        raise ValueError(f"not a state a node decides: {state}")
    if life.stop_state is None:
        life = replace(life, stop_state=state, stop_reason=reason)
    if life.phase is Phase.STARTED:
        return life, [Terminate(life.pid)]
    if life.phase is Phase.WAITING:
        return life, [KillWaiting(life.pid)]
    return life, []  # spawning: killed when its pid arrives


def _exited(life: Life, ev: Exited) -> tuple[Life, list[Action]]:
    done = _to(life, Phase.DONE)
    if not life.started:
        acts: list[Action] = [] if ev.written else [DropLog()]
        state = life.stop_state
        if state == "final":  # settled by the cluster already (cancelled, removed)
            return done, acts
        if state is not None:
            return done, acts + [Report(state, life.stop_reason, finished_at=ev.at,
                                        not_started=state == "lost",
                                        log_kept=bool(ev.written))]
        if not ev.accepting:
            return done, acts + [Defer()]
        return done, acts + [Report("failed", None, finished_at=ev.at, early=True,
                                    log_kept=bool(ev.written), status=ev.status)]
    code = sig = None
    if ev.status is not None:
        rc = exit_code(ev.status)
        code, sig = (rc, None) if rc >= 0 else (None, -rc)
    if life.stop_state is not None:
        state, reason = life.stop_state, life.stop_reason
    elif ev.status is None:
        state, reason = "lost", "the run's result is unknown"
    elif code == 0:
        state, reason = "succeeded", None
    elif code is not None:
        state, reason = "failed", f"exit code {code}"
    else:
        assert sig is not None  # a status and no exit code: a signal killed it
        state, reason = "failed", f"killed by signal {signal_name(sig)}"

    return done, [Report(state, reason, exit_code=code, signal=sig,
                         started_at=life.started_at, finished_at=ev.at)]


def exit_code(status: int) -> int:
    """A raw wait status as Popen.returncode spells it: the exit code, or
    minus the number of the signal that killed the process."""
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:
        return -1


def signal_name(num: int) -> str:
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"

"""A run this node is starting or running, as the executor holds it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...jobspec import JobSpec
from ...state import run_life as L
from ...state.run import Run

if TYPE_CHECKING:
    from .gates import Gate


@dataclass
class ActiveRun:
    """Its life (run_life.Life, the only state the executor keeps about it)
    and the handles that go with it."""
    run: Run
    spec: JobSpec | None
    key: str                         # the spawn's name: its record file and datagrams
    log_path: str
    kill_grace: float
    life: L.Life
    user: str = ""
    sup_fd: int | None = None        # pidfd of the run's supervisor
    sup_pid: int = 0
    gate: "Gate | None" = None
    tree: list = field(default_factory=list)
    timers: list = field(default_factory=list)
    hard_kill: asyncio.TimerHandle | None = None

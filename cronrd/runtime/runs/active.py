"""A run this node is starting or running, as the executor holds it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...jobspec import JobSpec
from ...state import run_life as L
from ...model.run import Run

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
    slot: bool = False               # counted in InFlight.slots (holds a max_running slot)
    secret: str = ""                 # sha256 of its CRONRD_RUN_TOKEN (for RunStarted)
    executor: str = "local"          # what runs its command (executors.py)


class InFlight:
    """The runs this node holds: by run id, by spawn key and by job, with the
    runs that hold a max_running slot counted as their lives change. Nothing
    on a run's path walks every run in flight: at 3,000 in flight a walk per
    start cost ~7 ms of CPU per run (bench/scale.py --runs)."""

    def __init__(self) -> None:
        self.by_id: dict[int, ActiveRun] = {}
        self.by_key: dict[str, ActiveRun] = {}
        self.by_job: dict[str, dict[int, ActiveRun]] = {}
        self.slots = 0                        # runs holding a slot
        self.job_slots: dict[str, int] = {}   # the same, per job

    def add(self, act: ActiveRun) -> None:
        self.by_id[act.run.run_id] = act
        self.by_key[act.key] = act
        self.by_job.setdefault(act.run.job, {})[act.run.run_id] = act
        self.recount(act)

    def remove(self, act: ActiveRun) -> None:
        if self.by_id.get(act.run.run_id) is act:
            del self.by_id[act.run.run_id]
        if self.by_key.get(act.key) is act:
            del self.by_key[act.key]
        same = self.by_job.get(act.run.job)
        if same is not None and same.get(act.run.run_id) is act:
            del same[act.run.run_id]
            if not same:
                del self.by_job[act.run.job]
        self._count(act, False)

    def recount(self, act: ActiveRun) -> None:
        """Call after ``act.life`` changed."""
        self._count(act, self.by_id.get(act.run.run_id) is act and act.life.holds_slot)

    def _count(self, act: ActiveRun, holds: bool) -> None:
        if act.slot == holds:
            return
        act.slot = holds
        step = 1 if holds else -1
        self.slots += step
        left = self.job_slots.get(act.run.job, 0) + step
        if left:
            self.job_slots[act.run.job] = left
        else:
            self.job_slots.pop(act.run.job, None)

    def of_job(self, job: str) -> list[ActiveRun]:
        return list(self.by_job.get(job, {}).values())

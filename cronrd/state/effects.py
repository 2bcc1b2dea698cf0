"""What applying a batch changed that the node must act on: an ``Effect``
per change, one frozen type per kind, handed to the listeners after the
batch commits (state/machine.py collects them; the executor, the
scheduler, the leadership and the faces listen). ``kind`` names the type
in logs and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..model.run import Run


@dataclass(frozen=True)
class Effect:
    kind: ClassVar[str] = ""
    run: Run | None = None
    job: str | None = None


@dataclass(frozen=True)
class RunAssigned(Effect):
    """A run was assigned to its node (``run.node``): that node prepares it."""
    kind: ClassVar[str] = "assign"


@dataclass(frozen=True)
class RunPending(Effect):
    """A run waits for the leader to place it."""
    kind: ClassVar[str] = "pending"


@dataclass(frozen=True)
class CancelRequested(Effect):
    """A run is to be stopped where it runs."""
    kind: ClassVar[str] = "cancel"


@dataclass(frozen=True)
class RunDone(Effect):
    """A run ended (any final state)."""
    kind: ClassVar[str] = "run_done"


@dataclass(frozen=True)
class RunStuck(Effect):
    """A run was ended timed_out (heartbeat_timeout): its node stops it."""
    kind: ClassVar[str] = "stuck"


@dataclass(frozen=True)
class RunMoved(Effect):
    """A run was moved to another node (not claimed in time): it must not
    start where it waited."""
    kind: ClassVar[str] = "moved"


@dataclass(frozen=True)
class JobsChanged(Effect):
    """Job definitions changed (``job``: the one, or None: any)."""
    kind: ClassVar[str] = "jobs_changed"


@dataclass(frozen=True)
class PlansChanged(Effect):
    """A planned run (`run-now --at`) was added, cancelled or started: the
    leader looks again at the soonest (runtime/leader/planned.py)."""
    kind: ClassVar[str] = "plans_changed"


@dataclass(frozen=True)
class CalendarsChanged(Effect):
    """The calendars in force changed: triggers of jobs with a calendar
    are made again (runtime/leader/scheduler.py)."""
    kind: ClassVar[str] = "calendars_changed"


@dataclass(frozen=True)
class JobSourceMoved(Effect):
    """The definition of a job in force now comes from another file or node."""
    kind: ClassVar[str] = "job_source_moved"


@dataclass(frozen=True)
class StateRestored(Effect):
    """A snapshot replaced the whole state."""
    kind: ClassVar[str] = "restored"


BY_KIND: dict[str, type[Effect]] = {cls.kind: cls for cls in (
    RunAssigned, RunPending, CancelRequested, RunDone, RunStuck, RunMoved, JobsChanged,
    JobSourceMoved, StateRestored)}

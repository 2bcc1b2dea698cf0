"""What applying a batch changed that the node must act on: an ``Effect``
per change (a run assigned here, cancelled, done, stuck; jobs changed; a
job's source moved; a state restored), handed to the listeners after the
batch commits (state/machine.py collects them; the executor, the scheduler
and the faces listen)."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.run import Run


@dataclass(frozen=True)
class Effect:
    kind: str  # assign | pending | cancel | run_done | stuck | jobs_changed | job_source_moved | restored
    run: Run | None = None
    job: str | None = None

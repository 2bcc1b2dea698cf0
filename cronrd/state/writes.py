"""The seam between the state machine and the modules that carry out parts
of its apply (alerts.py, dependencies.py, downstream.py): the run and job
writes they borrow from it, as a protocol. They are handed the machine
itself (it is one), but depend on this alone, so that none of them imports
machine.py, and the machine imports all of them without a circle.

The names keep the machine's: these are its own helpers, used inside one
apply, with the machine's connection and transaction. Making them a public
module of functions over the connection is the next step (issue 30)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import apsw

from ..decisions import overlap
from ..model.run import Run

if TYPE_CHECKING:
    from ..jobspec import JobSpec
    from .effects import Effect


class MachineWrites(Protocol):
    """What alerts, dependencies and downstream use of the state machine."""

    conn: apsw.Connection

    def _get_run(self, run_id: int) -> Run: ...

    def _insert_run(self, index: int, *, job: str, origin: str, kind: str,
                    fire_time: int, attempt: int, state: str, node: str | None,
                    due_at: float | None, at: float, reason: str | None = None,
                    target: str = "") -> Run: ...

    def _enqueue(self, index: int, *, job: str, origin: str, kind: str, fire_time: int,
                 due_at: float, at: float, reason: str, target: str,
                 attempt: int = 1) -> Run: ...

    def _job(self, name: str) -> dict[str, Any] | None: ...

    def _job_spec(self, name: str) -> JobSpec | None: ...

    def _queue_hold(self, job: str, target: str, fire_time: int, spec: JobSpec | None = None,
                    bounded: bool = True) -> overlap.Decision | None: ...

    def _admit(self, index: int, job: dict[str, Any], at: float,
               effects: list[Effect]) -> str | None: ...

    def _pool_gate(self, run: Run) -> Run: ...

    def _maintenance_reason(self) -> str | None: ...

"""What the areas of apply share: the canonical JSON of a value and of a
job definition, the limits commands are held to, and (for the type
checker) the state machine each area is a part of."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from ..model.run import Run
    from .effects import Effect
    from .writes import MachineWrites

PRUNE_BATCH = 50_000  # run records one Prune deletes by count at most
CLAIM_TTL = 60.0      # seconds another node's claim on a job file's digest holds


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))

def canon_text(spec: dict[str, Any]) -> str:
    """A job definition's stored text: the JSON its digest is the sha256 of
    (``JobSpec.canonical``)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


if TYPE_CHECKING:
    class ApplyBase(MachineWrites):
        """The base of each area of apply (JobsApply, RunsApply, NodesApply,
        AccessApply, WorkflowsApply), for the type checker only: the
        StateMachine they make up together. It has the connection, the
        helpers alerts, dependencies and downstream borrow (MachineWrites:
        an area hands them ``self``), and these, which one area borrows
        from another. Each is defined in its area; the type checker holds
        the definition to the signature here."""

        node_id: str

        def _need_job(self, name: str) -> dict[str, Any]: ...

        def _insert_run(self, index: int, *, job: str, origin: str, kind: str,
                        fire_time: int, attempt: int, state: str, node: str | None,
                        due_at: float | None, at: float, reason: str | None = None,
                        target: str = "") -> Run: ...

        def _watch_fire(self, index: int, cmd: Any, spec: Any) -> dict[str, Any]: ...

        def _forget_specs(self, name: str, digests: Iterable[str]) -> None: ...

        def _reconcile(self, name: str, at: float, effects: list[Effect]) -> tuple[bool, bool]: ...

        def _stop_reason(self, job: dict[str, Any]) -> str | None: ...

        def _finish(self, run: Run, state: str, at: float, *, reason: str | None = None,
                    exit_code: int | None = None, signal: int | None = None,
                    log_path: str | None = None, effects: list[Effect], index: int | None = None,
                    not_started: bool = False, release: bool = True) -> int | None: ...

        def _queue_dissolve(self, job: str, at: float, policy: str,
                            effects: list[Effect]) -> None: ...

        def _pool_after(self, run: Run, at: float, effects: list[Effect]) -> None: ...

        def _deny(self, kind: str, value: str, reason: str, at: float) -> None: ...
else:
    # At run time the areas are plain classes: StateMachine's MRO is theirs alone.
    ApplyBase = object

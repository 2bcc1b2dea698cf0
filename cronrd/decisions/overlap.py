"""The overlap policy (a job's ``concurrency``), in one place.

Decided for a run about to start, against the runs of the same job that are
running then: the executor asks at the fire time (at the gate), and the state
machine asks when a manual run is committed. Pure: the caller says what is
running and acts on the answer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Running:
    run_id: int
    node: str | None = None   # None: on this node


@dataclass(frozen=True)
class Decision:
    skip: str | None = None                 # why the new run does not start
    replace: tuple[Running, ...] = ()       # runs to cancel first
    reason: str = ""                        # the reason recorded on them


def _ids(running: list[Running]) -> str:
    return ", ".join(str(r.run_id) if r.node is None else f"{r.run_id} on {r.node}"
                     for r in running)


def decide(policy: str, running: list[Running], run_id: int | None = None,
           manual: bool = False) -> Decision:
    """``forbid``: the new run is skipped while another runs (a manual run
    too, when it is committed; once committed it is not skipped again at its
    gate: ``manual``). ``replace``: the running ones are cancelled for it.
    ``allow``: nothing to do."""
    if not running:
        return Decision()
    if policy == "forbid":
        if manual:
            return Decision()
        return Decision(skip=f"overlap: run {_ids(running)} still running at the fire time "
                             "(concurrency: forbid)")
    if policy == "replace":
        by = f"run {run_id}" if run_id is not None else "a newer fire"
        return Decision(replace=tuple(running),
                        reason=f"replaced by {by} (concurrency: replace)")
    return Decision()

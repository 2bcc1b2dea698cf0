"""A worker's ``StateView`` (runtime/runs/view.py): what the executor asks
of the state, answered from the assignments the leader sent.

A worker holds no replicated state. Each ``assigned`` message carries the
run, its job's definition in force, its inputs, a retry's checkpoint, and
the runs of its job running elsewhere; the leader's later messages (cancel,
done, moved) change or drop it. A run the view does not hold is not this
worker's: the executor's "still mine?" at the gate says no, and it does not
start.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any, Sequence

from ...errors import CronrdError
from ...jobspec import JobSpec
from ...model.run import Run
from ...state import checkpoints as CK
from ...state.queries import decode_spec


@dataclass
class Assignment:
    run: Run
    inputs: tuple[dict[str, str], str | None, int | None]
    checkpoint: dict[str, str]
    elsewhere: list[tuple[int, str]]


def run_of(row: Any) -> Run:
    """A run as the leader sent it (``Run.row()``); CronrdError if it is not one."""
    try:
        run = Run.from_row(tuple(row))
        if not isinstance(run.run_id, int) or not isinstance(run.job, str):
            raise TypeError("run_id and job")
        return run
    except (TypeError, ValueError) as exc:
        raise CronrdError(f"the leader sent a run this worker cannot read ({exc}); run the "
                          "same cronrd version on the servers and the workers") from None


class WorkerView:
    def __init__(self, node_id: str):
        self.node_id = node_id
        self.runs: dict[int, Assignment] = {}
        self.specs: dict[str, tuple[str, JobSpec]] = {}   # job -> (definition text, spec)

    # -- what the leader says ----------------------------------------------------------
    def assigned(self, msg: dict[str, Any]) -> tuple[Run, bool]:
        """Hold an assignment; (its run, whether its job's definition changed)."""
        run = run_of(msg.get("run"))
        if run.node != self.node_id:
            raise CronrdError(f"the leader sent run {run.run_id} of node {run.node} to worker "
                              f"{self.node_id}")
        # (a hello's runs come without: their definitions come once, replace_all)
        changed = ("spec" in msg
                   and self.assigned_spec(run.job, [msg.get("spec"), msg.get("source")]))
        inputs = msg.get("inputs")
        params, key, rerun = inputs if isinstance(inputs, list) and len(inputs) == 3 \
            else ({}, None, None)
        ck = msg.get("checkpoint")
        elsewhere = msg.get("elsewhere")
        self.runs[run.run_id] = Assignment(
            run, (dict(params or {}), key, rerun),
            {str(k): str(v) for k, v in ck.items()} if isinstance(ck, dict) else {},
            [(int(r), str(n)) for r, n in elsewhere] if isinstance(elsewhere, list) else [])
        return run, changed

    def changed(self, row: Any, kind: str) -> Run:
        """A cancel, end or move of a run: the view follows it."""
        run = run_of(row)
        if kind in ("run_done", "moved"):
            self.runs.pop(run.run_id, None)
        elif run.run_id in self.runs:
            held = self.runs[run.run_id]
            self.runs[run.run_id] = replace(held, run=run)
        return run

    def claimed(self, elsewhere: Any) -> None:
        """The leader's answer to a claim: the runs of each won run's job
        running elsewhere just now (fresher than at its assignment)."""
        if not isinstance(elsewhere, dict):
            return
        for key, found in elsewhere.items():
            held = self.runs.get(int(key)) if str(key).isdigit() else None
            if held is not None and isinstance(found, list):
                held.elsewhere = [(int(r), str(n)) for r, n in found]

    def replace_all(self, msgs: list[dict[str, Any]], specs: Any = None) -> set[str]:
        """The leader's whole list of this worker's runs, and their jobs'
        definitions (at each hello); the jobs whose definition held changed."""
        changed = set()
        for job, pair in specs.items() if isinstance(specs, dict) else ():
            if self.assigned_spec(str(job), pair):
                changed.add(str(job))
        self.runs.clear()
        for msg in msgs:
            self.assigned(msg)
        return changed

    def assigned_spec(self, job: str, pair: Any) -> bool:
        """Hold ``job``'s definition ([text, source], or nulls: none);
        whether it changed."""
        text, source = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        held = self.specs.get(job)
        if not isinstance(text, str):
            return self.specs.pop(job, None) is not None
        if held is None or held[0] != text:
            self.specs[job] = (text, decode_spec(text, str(source or "")))
            return held is not None
        return False

    # -- what the executor asks (runs/view.StateView) ------------------------------------
    def job_spec(self, name: str) -> JobSpec | None:
        held = self.specs.get(name)
        return held[1] if held is not None else None

    def runs_for_node(self, node: str, states: tuple[str, ...]) -> list[Run]:
        return sorted((a.run for a in self.runs.values()
                       if a.run.node == node and a.run.state.value in states),
                      key=lambda r: r.run_id)

    def run_assignments(self, run_ids: list[int]) -> dict[int, tuple[str, str | None,
                                                                     int | None]]:
        out = {}
        for rid in run_ids:
            held = self.runs.get(rid)
            if held is not None:
                r = held.run
                out[rid] = (r.state.value, r.node, r.token)
        return out

    def refused_source(self, node: str, accept: Sequence[str] | None,
                       job: str) -> str | None:
        return None   # the leader decided before it assigned the run

    def inputs(self, run: Run) -> tuple[dict[str, str], str | None, int | None]:
        held = self.runs.get(run.run_id)
        return held.inputs if held is not None else ({}, None, None)

    def attempt_env(self, run: Run, socket: str) -> tuple[dict[str, str], str]:
        """The attempt's token and a retry's checkpoint. No CRONRD_SOCKET: a
        worker has no control socket (a job's checkpoints and heartbeats need
        a member: docs/workers.md)."""
        token = secrets.token_hex(32)
        held = self.runs.get(run.run_id)
        env = {"CRONRD_RUN_TOKEN": token, **(held.checkpoint if held is not None else {})}
        return env, CK.token_hash(token)

    def running_elsewhere(self, run: Run, node: str) -> list[tuple[int, str]]:
        held = self.runs.get(run.run_id)
        return list(held.elsewhere) if held is not None else []

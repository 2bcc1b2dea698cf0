"""What the executor asks of the state, as one narrow seam.

On a member the answers are queries of the replicated state
(``ReplicatedView``). A worker agent holds no replicated state: its answers
come with the assignments the leader sends (runtime/worker/view.py). The
executor, its gates, claims, reports and restart know only this seam, so
the same code runs runs on both.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from ...jobspec import JobSpec
from ...model.run import Run
from ...state import queries as Q
from ...state import run_params as RP
from .launch import attempt_env
from .starting import refused_source


class StateView(Protocol):
    def job_spec(self, name: str) -> JobSpec | None: ...
    def runs_for_node(self, node: str, states: tuple[str, ...]) -> list[Run]: ...
    def run_assignments(self, run_ids: list[int]) -> dict[int, tuple[str, str | None,
                                                                  int | None]]: ...
    def refused_source(self, node: str, accept: Sequence[str] | None,
                       job: str) -> str | None: ...
    def inputs(self, run: Run) -> tuple[dict[str, str], str | None, int | None]: ...
    def attempt_env(self, run: Run, socket: str) -> tuple[dict[str, str], str]: ...
    def running_elsewhere(self, run: Run, node: str) -> list[tuple[int, str]]: ...


class ReplicatedView:
    """A member's view: the replicated state on ``conn``."""

    def __init__(self, conn):
        self.conn = conn

    def job_spec(self, name: str) -> JobSpec | None:
        return Q.job_spec(self.conn, name)

    def runs_for_node(self, node: str, states: tuple[str, ...]) -> list[Run]:
        return Q.runs_for_node(self.conn, node, states)

    def run_assignments(self, run_ids: list[int]) -> dict[int, tuple[str, str | None,
                                                                     int | None]]:
        return Q.run_assignments(self.conn, run_ids)

    def refused_source(self, node: str, accept: Sequence[str] | None,
                       job: str) -> str | None:
        return refused_source(self.conn, node, accept, job)

    def inputs(self, run: Run) -> tuple[dict[str, str], str | None, int | None]:
        return RP.inputs(self.conn, run)

    def attempt_env(self, run: Run, socket: str) -> tuple[dict[str, str], str]:
        return attempt_env(self.conn, run, socket)

    def running_elsewhere(self, run: Run, node: str) -> list[tuple[int, str]]:
        return Q.running_elsewhere(self.conn, run, node)

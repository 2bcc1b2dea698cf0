"""The typed requests of the control socket and the HTTP API, one frozen
dataclass per operation (``OP``: its name on the socket).

Each is parsed at the edge (``typed.parse``) and handed to its handler in
``runtime/control`` as it is: a handler reads attributes, never a dict. The
HTTP API builds the same values from its paths, queries and bodies, and its
OpenAPI document takes their schemas from here.

Here the jobs and runs; the workflows (backfills, reruns, alerts, the dead
letter, pools, the audit, notifications) in workflows.py, the daemon and
the cluster (status, explain, logs, membership, tokens, checkpoints) in
admin.py. Every command of the control socket has its type: the control
table is built from ``REQUESTS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from ..model import run_states
from . import admin, workflows
from .typed import Consistent, Doc, MaxLen, Names, Range, Time

# The kinds of run a listing filters on (model/run.py's ``kind``).
RUN_KINDS = ("scheduled", "catchup", "manual", "retry", "backfill", "rerun", "upstream")
MAX_RUNS = 100_000     # runs in one `runs` answer
MAX_PAGE = 5_000       # jobs in one page of `jobs`
MAX_NEXT = 100         # next fire times `job` shows
MAX_PATTERN = 200      # characters of a job name pattern

@dataclass(frozen=True)
class ListJobs:
    """The jobs by name, a page at a time (``limit``, ``after``), or streamed
    (``stream``), or all of them up to 10,000 (neither)."""
    OP: ClassVar[str] = "jobs"
    limit: Annotated[int | None, Range(1, MAX_PAGE, "limit must be {lo} to {hi}"),
                     Doc("page size")] = None
    after: Annotated[str | None, Doc("the last name of the page before")] = None
    match: Annotated[str | None, MaxLen(MAX_PATTERN),
                     Doc("only job names matching this shell pattern")] = None
    stream: Annotated[bool, Doc("every job, a page per message")] = False
    consistent: Consistent = False


@dataclass(frozen=True)
class ShowJob:
    """One job as `cronrd show` prints it: its listing, definition, why it
    is paused, its file's problems, next fire times, last and active runs."""
    OP: ClassVar[str] = "job"
    name: Annotated[str, Doc("the job")]
    next: Annotated[int, Range(0, MAX_NEXT, "next must be {lo} to {hi}"),
                    Doc("how many next fire times to show")] = 5
    consistent: Consistent = False


@dataclass(frozen=True)
class ListRuns:
    """The newest runs matching the filters, each with its job's time zone,
    and the recorded gaps of skipped fire times when skipped runs are asked
    for."""
    OP: ClassVar[str] = "runs"
    job: Annotated[str | None, Doc("only this job's runs")] = None
    state: Annotated[list[str] | None, Names(run_states.ALL),
                     Doc("states (e.g. failed,lost)")] = None
    kind: Annotated[list[str] | None, Names(RUN_KINDS), Doc("kinds of run")] = None
    node: Annotated[str | None, Doc("only runs placed on this node")] = None
    since: Annotated[float | None, Time(), Doc("fire times from this time on")] = None
    until: Annotated[float | None, Time(), Doc("fire times before this time")] = None
    before: Annotated[int | None, Doc("only run ids below this (the next page)")] = None
    limit: Annotated[int, Range(1, MAX_RUNS, "limit must be between {lo} and {hi}"),
                     Doc("how many runs")] = 50
    consistent: Consistent = False


@dataclass(frozen=True)
class ShowRun:
    """One run: its attempt, parameters, heartbeat and the parent runs it
    consumed."""
    OP: ClassVar[str] = "run"
    run_id: Annotated[int, Doc("the run")]
    consistent: Consistent = False


@dataclass(frozen=True)
class Graph:
    """The dependency graph: every job's, or one job's ancestors and
    descendants."""
    OP: ClassVar[str] = "graph"
    job: Annotated[str | None, Doc("only this job's ancestors and descendants")] = None
    consistent: Consistent = False


@dataclass(frozen=True)
class RunNow:
    """Run a job now (a manual run), with parameters and an idempotency
    key; ``wait``: follow the run and its retries to their end."""
    OP: ClassVar[str] = "run_now"
    job: Annotated[str, Doc("the job")]
    params: Annotated[dict[str, str], Doc("values of the job's params, by name")] = \
        field(default_factory=dict)
    key: Annotated[str, Doc("an idempotency key: a second run-now with it gives the "
                            "first run")] = ""
    wait: Annotated[bool, Doc("stream the run's attempts until it ends")] = False
    at: Annotated[str, MaxLen(100, "--at is longer than {n} characters"),
                  Doc("run it later, at this time: ISO 8601 (without an offset: in the "
                      "job's time zone) or +DURATION; the run is planned (replicated, "
                      "listed by `next`, removed by `cancel --plan ID`)")] = ""


@dataclass(frozen=True)
class CancelRun:
    """Cancel one run (``run_id``), every active run of ``job``, or a
    planned run (``plan``) before it starts."""
    OP: ClassVar[str] = "cancel"
    run_id: Annotated[int | None, Doc("the run")] = None
    job: Annotated[str | None, Doc("every active run of this job")] = None
    plan: Annotated[int | None, Doc("a planned run (`run-now --at`), by its plan id")] = None


NOTE = 1_000  # characters of a pause note


@dataclass(frozen=True)
class PauseJob:
    """Pause one job, or every job (``all``)."""
    OP: ClassVar[str] = "pause"
    job: Annotated[str | None, Doc("the job")] = None
    all: Annotated[bool, Doc("every job")] = False
    note: Annotated[str, MaxLen(NOTE, "the note is longer than {n} characters; say it shorter"),
                    Doc("why, shown with the job")] = ""


@dataclass(frozen=True)
class ResumeJob(PauseJob):
    """Resume one job, or every job (``all``)."""
    OP: ClassVar[str] = "resume"


PING_KINDS = ("start", "success", "fail")


@dataclass(frozen=True)
class Ping:
    """A watch's ping (`cronrd ping NAME`): its job started, succeeded or
    failed (with its exit code)."""
    OP: ClassVar[str] = "ping"
    job: Annotated[str, Doc("the watch")]
    what: Annotated[str, MaxLen(16), Doc("start, success (the default) or fail")] = "success"
    exit_code: Annotated[int | None, Range(0, 255, "an exit code is {lo} to {hi}"),
                         Doc("the job's exit code (not 0: a failure)")] = None


# Every typed operation by its name on the socket: these, and those of the
# resources with modules of their own.
TYPES: tuple[type[Any], ...] = (
    ListJobs, ShowJob, ListRuns, ShowRun, Graph, RunNow, CancelRun, PauseJob, ResumeJob, Ping)
REQUESTS: dict[str, type[Any]] = {
    cls.OP: cls for cls in (*TYPES, *workflows.TYPES, *admin.TYPES)}

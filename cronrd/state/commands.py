"""Commands: the only way the replicated state changes.

Each command is a frozen dataclass that carries everything ``apply`` needs:
times, node ids and decisions made by the proposer travel inside the
command, so applying the same sequence of commands on any node gives the
same state. Commands are encoded as compact JSON for the log.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import StateError


@dataclass(frozen=True)
class Command:
    op: ClassVar[str] = ""
    # The cluster version (state/versions.py) a command of this kind needs:
    # it is proposed, and applied, only once the log records that version.
    since: ClassVar[int] = 1
    # Fields added after the kind: name -> the version that added it. While
    # such a field has its default it is left out of the encoding, so the
    # nodes of an older version still decode the command.
    added: ClassVar[dict[str, int]] = {}

    def encode(self) -> bytes:
        # Fields hold JSON values only (no nested dataclasses): a shallow
        # dict, not dataclasses.asdict's deep copy of a 1,000-job SyncJobs.
        body = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in self.added or not at_default(self, f)}
        body["op"] = self.op
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def at_default(cmd: Command, f: dataclasses.Field[Any]) -> bool:
    """Does ``cmd``'s field ``f`` hold its default (a default_factory's too)?"""
    if f.default_factory is not dataclasses.MISSING:
        return bool(getattr(cmd, f.name) == f.default_factory())
    return bool(f.default is not dataclasses.MISSING and getattr(cmd, f.name) == f.default)


class UnknownCommand(StateError):
    """An entry of a command kind, or with a field, that this cronrd does not
    know: a newer cronrd proposed it (state/versions.py)."""


@dataclass(frozen=True)
class PutJob(Command):
    """Create or update one node's definition of a job (its job file).

    Every node proposes the jobs of its own jobs_dir (``node``); the job's
    effective definition is the one all its source nodes agree on.
    """

    op: ClassVar[str] = "put_job"
    name: str
    spec: dict[str, Any]
    digest: str
    source: str
    at: float
    node: str = ""


@dataclass(frozen=True)
class RemoveJob(Command):
    """Forget ``node``'s file of a job; the job itself goes when no node has
    a file for it any more. Its run history stays."""

    op: ClassVar[str] = "remove_job"
    name: str
    at: float
    node: str = ""


@dataclass(frozen=True)
class SyncJobs(Command):
    """A node's job files in bulk (the watcher's command): ``puts`` are
    ``[name, digest, source, definition]`` with the definition's canonical
    JSON text, or null when the state holds that digest already (another
    node's identical file); ``removes`` the names its files no longer
    define; ``files`` ``[path, digest, jobs]`` the files whose jobs this
    command completes (digest null: forget the file), so that an unchanged
    file is not parsed again.

    A file another node has recorded with the same digest (same bytes, same
    reader) is not parsed: ``copies`` ``[path, digest, from node, its path,
    jobs]`` take that node's definitions of its jobs as this node's. Before
    parsing a big change a node ``claims`` the files' digests; another node
    with the same bytes waits for its records instead of parsing them too,
    until ``release`` (the last command of its look) or CLAIM_TTL."""

    op: ClassVar[str] = "sync_jobs"
    node: str
    at: float
    puts: list[Any] = field(default_factory=list)
    removes: list[Any] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)
    copies: list[Any] = field(default_factory=list)
    claims: list[Any] = field(default_factory=list)
    release: bool = False


@dataclass(frozen=True)
class SetPaused(Command):
    """Pause or resume job ``name``, or with ``name`` "" every job (a
    maintenance pause, kept apart from the jobs' own pauses: resuming it
    leaves a job paused on its own paused). ``note`` and ``by`` (who asked)
    are shown by `cronrd show` and `status`."""

    op: ClassVar[str] = "set_paused"
    name: str
    paused: bool
    at: float
    note: str = ""
    by: str = ""


@dataclass(frozen=True)
class Fire(Command):
    """Handle one scheduled fire time of a job: run it, or record a skip.

    ``skip_reason`` set by the proposer (catch-up policy) records a skipped
    run; otherwise ``apply`` decides from the state (paused, overlap policy).
    The fire must lie after the job's cursor; the cursor moves to it.
    """

    op: ClassVar[str] = "fire"
    job: str
    fire_time: int
    kind: str  # scheduled | catchup
    node: str
    due_at: float
    at: float
    skip_reason: str | None = None
    target: str = ""    # the node key of a per-node run (run_on: all)
    boot: bool = False  # an @reboot fire: keyed by boot time, no cursor


@dataclass(frozen=True)
class RecordGap(Command):
    """Account for many missed fire times at once (a long outage)."""

    op: ClassVar[str] = "record_gap"
    job: str
    first: int
    last: int
    count: int
    reason: str
    at: float


@dataclass(frozen=True)
class ManualRun(Command):
    """`cronrd run-now`: ``params`` are the `--param` values (checked
    against the job's params: by the node that took the request, as
    canonical text); ``key`` the `--key`: a key already used for the job
    returns that run and makes none."""

    op: ClassVar[str] = "manual_run"
    job: str
    node: str
    at: float
    # Without params and key, the bytes of the releases before them.
    added: ClassVar[dict[str, int]] = {"params": 1, "key": 1, "plan_id": 2}
    params: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    # The planned run (PlanRun) this starts: proposed by the leader alone,
    # ``at`` is the planned time; a plan cancelled meanwhile is refused.
    plan_id: int = 0


@dataclass(frozen=True)
class RunStarted(Command):
    op: ClassVar[str] = "run_started"
    run_id: int
    token: int
    node: str
    pid: int
    started_at: float
    log_path: str
    # sha256 hex of the attempt's secret token (CRONRD_RUN_TOKEN; see
    # state/checkpoints.py); "" for none.
    secret: str = ""
    # Without a secret, the bytes of the releases before it.
    added: ClassVar[dict[str, int]] = {"secret": 1}


@dataclass(frozen=True)
class RunFinished(Command):
    op: ClassVar[str] = "run_finished"
    run_id: int
    token: int
    node: str
    state: str  # succeeded | failed | timed_out | cancelled | lost
    exit_code: int | None
    signal: int | None
    started_at: float | None
    finished_at: float
    log_path: str | None
    reason: str | None = None
    pid: int | None = None
    # The node vouches that nothing of the run started (fenced at its gate):
    # a lost run that never ran is always given another attempt.
    not_started: bool = False


@dataclass(frozen=True)
class CancelRun(Command):
    op: ClassVar[str] = "cancel_run"
    run_id: int
    reason: str
    at: float


@dataclass(frozen=True)
class Prune(Command):
    """Delete finished run records older than ``before`` and, with ``keep``,
    beyond the newest ``keep`` of each job (retention), at most
    ``PRUNE_BATCH`` records by count at once (the result says ``more``)."""

    op: ClassVar[str] = "prune"
    before: float
    at: float
    keep: int = 0


@dataclass(frozen=True)
class NodeInfo(Command):
    """A node announces itself: its state (up | draining), address and tags."""

    op: ClassVar[str] = "node_info"
    node: str
    state: str
    addr: str
    tags: tuple[str, ...]
    at: float

    def __post_init__(self) -> None:
        # JSON decodes a tuple as a list: normalise so equality survives the log.
        object.__setattr__(self, "tags", tuple(self.tags))


@dataclass(frozen=True)
class WorkerInfo(Command):
    """The leader registers a worker agent that said hello on its worker
    port (runtime/cluster/worker_hub.py): its name (its certificate's),
    tags, capacity and version. Proposed by the leader alone."""

    op: ClassVar[str] = "worker_info"
    since: ClassVar[int] = 2
    node: str
    tags: tuple[str, ...]
    capacity: int
    version: str
    at: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(self.tags))


@dataclass(frozen=True)
class NodeLost(Command):
    """The leader declares a node's assigned and running runs lost."""

    op: ClassVar[str] = "node_lost"
    node: str
    at: float
    reason: str


@dataclass(frozen=True)
class RemoveNode(Command):
    """Take a node out of the cluster: its runs are lost, its job files
    forgotten, its id (and ``serial``, the certificate it used, if the leader
    knew it) denied on the peer port."""

    op: ClassVar[str] = "remove_node"
    node: str
    at: float
    serial: str = ""
    deny: bool = True   # False: forget a node that never became a member


@dataclass(frozen=True)
class Deny(Command):
    """Refuse (or, with ``lift``, admit again) a node id or a certificate
    serial on every node's peer port."""

    op: ClassVar[str] = "deny"
    kind: str      # node | serial
    value: str
    reason: str
    at: float
    lift: bool = False


@dataclass(frozen=True)
class JoinToken(Command):
    """Expect ``node`` to join with the token whose sha256 is ``token_hash``
    (`cluster add --token`); an empty hash withdraws it (used, or cancelled)."""

    op: ClassVar[str] = "join_token"
    node: str
    token_hash: str
    addr: str
    at: float


@dataclass(frozen=True)
class CreateToken(Command):
    """An HTTP API token (state/tokens.py): ``token_hash`` is the sha256 hex of
    the secret, which is never in the log. ``jobs``: a glob of the job names
    it may act on ("" every job); ``expires_at`` None: never. Made on ``node``."""

    op: ClassVar[str] = "create_token"
    node: str
    name: str
    token_hash: str
    role: str
    jobs: str
    expires_at: float | None
    at: float


@dataclass(frozen=True)
class RevokeToken(Command):
    """Revoke the API token ``name`` (asked on ``node``)."""

    op: ClassVar[str] = "revoke_token"
    node: str
    name: str
    at: float


@dataclass(frozen=True)
class StartSession(Command):
    """A browser logged in to the web UI with token ``name`` (state/tokens.py):
    ``session_hash`` is the sha256 hex of the session's secret, which only the
    browser's cookie holds; ``token_hash`` binds it to the token as it is now
    (a token revoked, or made again under its name, ends it). Made on ``node``."""

    op: ClassVar[str] = "start_session"
    since: ClassVar[int] = 2
    node: str
    name: str
    token_hash: str
    session_hash: str
    expires_at: float
    at: float


@dataclass(frozen=True)
class EndSession(Command):
    """The browser whose session this is logged out (asked on ``node``)."""

    op: ClassVar[str] = "end_session"
    since: ClassVar[int] = 2
    node: str
    session_hash: str
    at: float


@dataclass(frozen=True)
class AssignRun(Command):
    """The leader places a pending run on a node."""

    op: ClassVar[str] = "assign_run"
    run_id: int
    node: str
    at: float


@dataclass(frozen=True)
class ClaimRuns(Command):
    """A node claims runs assigned to it: "I start these now". It starts a
    run only once its claim is committed, and the leader moves only runs
    nobody claimed (ReplaceRuns), so the log's order decides who starts a
    run, and no two nodes do. ``claims``: ``[run_id, token]`` pairs (one
    entry for every run of a gate)."""

    op: ClassVar[str] = "claim_runs"
    node: str
    claims: list[Any]
    at: float


@dataclass(frozen=True)
class ReplaceRuns(Command):
    """The leader moves runs their node did not claim in time (dead, cut off,
    paused, overloaded) to other nodes. ``moves``: ``[run_id, token, node]``;
    a run claimed meanwhile (or moved, or ended) stays as it is."""

    op: ClassVar[str] = "replace_runs"
    moves: list[Any]
    at: float
    reason: str


@dataclass(frozen=True)
class Audit(Command):
    """Record who asked a node for a change over its control socket, and
    whether it was allowed (the caller as the kernel reported it)."""

    op: ClassVar[str] = "audit"
    node: str        # the node whose control socket took the request
    uid: int
    user: str        # the uid's name on that node ('' if it has none)
    pid: int
    command: str     # the request, e.g. "pause", "cluster_add"
    target: str      # the job, run id or node it was about ('' if none)
    allowed: bool
    at: float
    detail: str = ""  # why it was refused


@dataclass(frozen=True)
class CreateBackfill(Command):
    """Start a backfill of ``job`` over ``fire_times`` (the proposer took
    them from the job's trigger between ``from_time`` and ``to_time``);
    ``apply`` decides each one from the records it finds (state/backfill.py)."""

    op: ClassVar[str] = "create_backfill"
    job: str
    fire_times: list[Any]
    from_time: int
    to_time: int
    reprocess: str
    parallel: int
    order: str
    at: float
    note: str = ""
    who: str = ""
    downstream: bool = False  # each released fire time's downstream records follow it


@dataclass(frozen=True)
class BackfillStep(Command):
    """The leader's duty for one backfill: account for its runs that ended
    and release its next fire times, as many as its limit allows *now*
    (apply counts: two leaders proposing at once cannot exceed it)."""

    op: ClassVar[str] = "backfill_step"
    backfill: int
    at: float


@dataclass(frozen=True)
class SetBackfillState(Command):
    """Pause, resume or cancel a backfill (`cronrd backfill pause|resume|cancel`)."""

    op: ClassVar[str] = "set_backfill_state"
    backfill: int
    state: str  # paused | running | cancelled
    at: float
    who: str = ""


@dataclass(frozen=True)
class Rerun(Command):
    """A new attempt of the record of ``job`` at ``fire_time`` (`cronrd rerun`)."""

    op: ClassVar[str] = "rerun"
    job: str
    fire_time: int
    at: float
    who: str = ""
    downstream: bool = False  # then the records that consumed it (state/downstream.py)


@dataclass(frozen=True)
class UpstreamTimeout(Command):
    """The leader: a scheduled child's wait for its parents
    (wait_for_upstream) is over. ``apply`` looks at the gate once more: the
    run starts if it opened meanwhile, else it is recorded skipped or failed
    (on_upstream_failure) with the reason."""

    op: ClassVar[str] = "upstream_timeout"
    run_id: int
    at: float


@dataclass(frozen=True)
class DeliveryResult(Command):
    """The leader: attempts to deliver events to notifiers (state/deliveries.py),
    each [event_id, notifier, attempt, ok, final, error], and the events now
    delivered (every recipient settled)."""

    op: ClassVar[str] = "delivery_result"
    at: float
    leader: str
    attempts: list[Any] = field(default_factory=list)
    done: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class RaiseAlerts(Command):
    """The leader: SLA misses it found (decisions/sla.py), each
    [job, fire_time, kind, detail]; apply opens those not open already."""

    op: ClassVar[str] = "raise_alerts"
    alerts: list[Any]
    at: float


@dataclass(frozen=True)
class AckAlert(Command):
    """`cronrd alerts ack ID --note`."""

    op: ClassVar[str] = "ack_alert"
    alert_id: int
    at: float
    note: str = ""
    who: str = ""


@dataclass(frozen=True)
class DeadLetterAction(Command):
    """`cronrd dead-letter requeue|discard RUN`."""

    op: ClassVar[str] = "dead_letter_action"
    run_id: int
    action: str  # requeue | discard
    at: float
    note: str = ""
    who: str = ""


@dataclass(frozen=True)
class SetPools(Command):
    """The leader: the pools of its daemon config, ``[[name, slots, scope],
    ...]``, are the ones in force (state/pools.py). Runs that wait for a
    pool whose slots grew or that went are released."""

    op: ClassVar[str] = "set_pools"
    pools: list[Any]
    at: float


@dataclass(frozen=True)
class SaveCheckpoint(Command):
    """`cronrd checkpoint save` from inside a run (state/checkpoints.py):
    ``token_hash`` is the sha256 of the token the job presented to ``node``
    (the node it runs on); apply keeps ``value`` as its record's checkpoint
    only if the token is the attempt's and the attempt is its record's
    newest and running (fencing)."""

    op: ClassVar[str] = "save_checkpoint"
    run_id: int
    token_hash: str
    value: str
    node: str
    at: float


@dataclass(frozen=True)
class StartDeadline(Command):
    """The leader: a run not started yet is past its job's start_deadline;
    ``apply`` checks it again and records it skipped (reason start_deadline)."""

    op: ClassVar[str] = "start_deadline"
    run_id: int
    at: float


@dataclass(frozen=True)
class Heartbeat(Command):
    """`cronrd heartbeat` from inside a run: fenced like SaveCheckpoint."""

    op: ClassVar[str] = "heartbeat"
    run_id: int
    token_hash: str
    node: str
    at: float
    progress: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class HeartbeatTimeout(Command):
    """The leader: a running run of a job with heartbeat_timeout has been
    silent for longer (apply checks it again); it ends timed_out, and is
    retried per the job's retries."""

    op: ClassVar[str] = "heartbeat_timeout"
    run_id: int
    at: float


@dataclass(frozen=True)
class DrainNode(Command):
    """An admin drains (or undrains) ``node`` (state/node_drains.py);
    ``origin``: the node the request was made on, ``by``: who."""

    op: ClassVar[str] = "drain_node"
    origin: str
    node: str
    drained: bool
    note: str
    by: str
    at: float


@dataclass(frozen=True)
class SetClusterVersion(Command):
    """The leader raises the cluster version (state/versions.py) to
    ``version``, once every member said it applies it; ``members``: each
    member's cronrd release as it said (for the record). Proposed while the
    log is still at the older version, so it needs none itself; a node that
    cannot apply ``version`` stops there (it must not go on by older rules)."""

    op: ClassVar[str] = "set_cluster_version"
    version: int
    members: dict[str, str]
    at: float


@dataclass(frozen=True)
class PlanRun(Command):
    """`cronrd run-now JOB --at TIME`: a one-off run of ``job`` at ``due``
    (state/planned.py), with `--param` values and a `--key`; ``by``: who
    asked, ``at``: when. The leader starts it at ``due`` (a ManualRun with
    its ``plan_id``); until then `cronrd cancel --plan` removes it."""

    op: ClassVar[str] = "plan_run"
    since: ClassVar[int] = 2
    job: str
    due: float
    by: str
    at: float
    params: dict[str, Any] = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True)
class CancelPlan(Command):
    """Remove planned run ``plan_id`` before it starts."""

    op: ClassVar[str] = "cancel_plan"
    since: ClassVar[int] = 2
    plan_id: int
    by: str
    at: float


@dataclass(frozen=True)
class SetCalendars(Command):
    """The leader: the calendars of its daemon config, resolved to days
    (``{name: Calendar.to_dict()}``: schedule/calendars.py), are the ones in
    force (state/calendars.py); every node reads the same days."""

    op: ClassVar[str] = "set_calendars"
    since: ClassVar[int] = 2
    calendars: dict[str, Any]
    at: float


@dataclass(frozen=True)
class Ping(Command):
    """A watch's ping (`cronrd ping NAME`, POST /api/v1/pings/NAME):
    ``what`` start | success | fail (``exit_code`` with fail); ``node``:
    the member that took it; ``by``: who sent it (state/watches.py)."""

    op: ClassVar[str] = "ping"
    since: ClassVar[int] = 2
    job: str
    what: str
    node: str
    by: str
    at: float
    exit_code: int | None = None


@dataclass(frozen=True)
class WatchMissed(Command):
    """The leader: the watch's run got no end ping within its grace."""

    op: ClassVar[str] = "watch_missed"
    since: ClassVar[int] = 2
    run_id: int
    at: float


COMMANDS: dict[str, type[Command]] = {
    c.op: c
    for c in (PutJob, RemoveJob, SyncJobs, SetPaused, Fire, RecordGap, ManualRun,
              RunStarted, RunFinished, CancelRun, Prune, NodeInfo, NodeLost, RemoveNode,
              AssignRun, ClaimRuns, ReplaceRuns, Deny, JoinToken, Audit,
              CreateBackfill, BackfillStep, SetBackfillState, Rerun, UpstreamTimeout,
              DeliveryResult, RaiseAlerts, AckAlert, DeadLetterAction, SetPools,
              StartDeadline, SaveCheckpoint, Heartbeat, HeartbeatTimeout, CreateToken,
              RevokeToken, DrainNode, SetClusterVersion, StartSession, EndSession,
              WorkerInfo, PlanRun, CancelPlan, SetCalendars, Ping, WatchMissed)
}


def _check_added() -> None:
    """A field in ``added`` must have a default (what "as before" means), and
    a command must not encode itself around ``added`` (it would drop or send
    a field the gate does not know of): said when the module loads."""
    for cls in COMMANDS.values():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if "encode" in vars(cls):
            raise TypeError(f"{cls.__name__} encodes itself: use Command.added instead")
        for name in cls.added:
            f = fields.get(name)
            if f is None or (f.default is dataclasses.MISSING
                             and f.default_factory is dataclasses.MISSING):
                raise TypeError(f"{cls.__name__}.added names {name!r}, which is not a field "
                                "with a default")


_check_added()

_FIELDS = {op: frozenset(f.name for f in dataclasses.fields(cls)) for op, cls in COMMANDS.items()}


def decode(data: bytes | str) -> Command:
    """Decode a command from the log. Raises StateError on garbage."""
    try:
        body: dict[str, Any] = json.loads(data)
        if not isinstance(body, dict):
            raise TypeError("a command is a JSON object")
        op = body.pop("op")
        cls = COMMANDS.get(op) if isinstance(op, str) else None
        if cls is None:
            if isinstance(op, str):
                raise UnknownCommand(f"a command of kind {op[:64]!r}, which this cronrd does "
                                     "not know (a newer cronrd made it)")
            raise TypeError(f"no command kind (op) among {sorted(body)[:16]}")
        unknown = set(body) - _FIELDS[op]
        if unknown:
            raise UnknownCommand(
                f"a {op} command with field(s) {', '.join(sorted(unknown)[:8])[:200]}, which "
                "this cronrd does not know (a newer cronrd made it)")
        return cls(**body)
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"undecodable command in the log: {exc}") from exc

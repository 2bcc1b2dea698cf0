"""The typed requests of the daemon and the cluster: status, explain,
reload, logs, membership and drains, API tokens and checkpoints (see
requests.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from ..state.checkpoints import MAX_MESSAGE
from .typed import Consistent, Doc, MaxLen, Range

MAX_TOKEN_JOBS = 200   # characters of an API token's glob of job names


# -- the daemon ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Status:
    """This node: its role in the cluster, the leader, jobs and runs in
    numbers, its problems, pools, paths and versions."""
    OP: ClassVar[str] = "status"
    consistent: Consistent = False


@dataclass(frozen=True)
class Explain:
    """The decision trail of one fire time of a job: at ``at``, at its next
    fire time (``next``) or, with neither, at its latest one; the steps
    (schedule, pauses, catch-up, overlap, parents, pools, placement, the
    records) and a verdict."""
    OP: ClassVar[str] = "explain"
    job: Annotated[str, Doc("the job")]
    # Kept as given: ``local`` decides how a text is read (explain/subject.py).
    at: Annotated[Any, Doc("the fire time: ISO 8601 (UTC unless it has an offset; with "
                           "local, the wall clock of the job's zone) or Unix seconds")] = None
    next: Annotated[bool, Doc("its next fire time: what would happen to it now")] = False
    local: Annotated[bool, Doc("at is the wall clock of the job's time zone")] = False
    consistent: Consistent = False


@dataclass(frozen=True)
class Reload:
    """Read the job files again now (as on a change the watcher sees)."""
    OP: ClassVar[str] = "reload"


@dataclass(frozen=True)
class ShowLogs:
    """A job's run output, a message per piece (``{"run"}``, the output,
    ``{"end"}`` per run): its latest run that started, one run, or the runs
    that started since a time; ``follow``: until the run ends, and without
    ``run_id`` the job's next runs too."""
    OP: ClassVar[str] = "logs"
    job: Annotated[str, Doc("the job")]
    run_id: Annotated[int | None, Doc("this run of the job")] = None
    since: Annotated[float | None, Doc("the runs that started at or after this time "
                                       "(Unix seconds)")] = None
    lines: Annotated[int | None, Range(0, None, "lines must be >= {lo}"),
                     Doc("the last lines of the first run's output only")] = None
    follow: Annotated[bool, Doc("follow the output as it is written")] = False


# -- the cluster ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DrainNode:
    """Drain (``drained``) or undrain a node: no new runs are placed there;
    its running runs finish."""
    OP: ClassVar[str] = "node_drain"
    node: Annotated[str, Doc("the node")]
    drained: Annotated[bool, Doc("true: drain it; false: undo a drain")] = True
    note: Annotated[str, Doc("why, shown with the node")] = ""


@dataclass(frozen=True)
class ClusterMembers:
    """The cluster's members: address, role, reachability, the leader."""
    OP: ClassVar[str] = "cluster_members"


@dataclass(frozen=True)
class AddMember:
    """Expect a new node at an address (``token``: and make it a one-time
    join token)."""
    OP: ClassVar[str] = "cluster_add"
    node: Annotated[str, Doc("the new node's id")]
    address: Annotated[str, Doc("its peer address (host:port)")]
    token: Annotated[bool, Doc("make a one-time join token")] = False


@dataclass(frozen=True)
class RemoveMember:
    """Remove a node from the cluster."""
    OP: ClassVar[str] = "cluster_remove"
    node: Annotated[str, Doc("the node")]


@dataclass(frozen=True)
class RevokeCert:
    """Revoke a node certificate on every node."""
    OP: ClassVar[str] = "cluster_revoke_cert"
    serial: Annotated[str, Doc("the certificate's serial number")]
    reason: Annotated[str, Doc("why, kept with the revocation")] = "revoked by the operator"


@dataclass(frozen=True)
class TransferLeader:
    """Hand the leadership to another node (``node``, else one the leader
    picks)."""
    OP: ClassVar[str] = "cluster_transfer_leader"
    node: Annotated[str | None, Doc("the node to lead")] = None


# -- API tokens ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CreateToken:
    """Make an HTTP API token; the answer holds its secret, once."""
    OP: ClassVar[str] = "token_create"
    name: Annotated[str, Doc("the token's name: letters, digits, '_', '.' and '-', starting "
                             "with a letter or digit")]
    role: Annotated[str, Doc("viewer, operator, admin or ping")]
    jobs: Annotated[str, MaxLen(MAX_TOKEN_JOBS, "--jobs must be a glob of job names of at "
                                                "most {n} characters"),
                    Doc("only the jobs matching this glob (\"\": every job)")] = ""
    expires: Annotated[float | None, Doc("seconds until it expires, at most 10 years "
                                         "(none: it does not)")] = None


@dataclass(frozen=True)
class ListTokens:
    """The HTTP API tokens (never their secrets)."""
    OP: ClassVar[str] = "token_list"


@dataclass(frozen=True)
class RevokeToken:
    """Revoke an HTTP API token."""
    OP: ClassVar[str] = "token_revoke"
    name: Annotated[str, Doc("the token")]


# -- from inside a run: checkpoints and heartbeats -----------------------------------------
@dataclass(frozen=True)
class _Attempt:
    """A request a job makes from inside a run, with its run's token."""
    run_id: Annotated[int, Doc("the run (CRONRD_RUN_ID)")]
    token: Annotated[str, Doc("the attempt's token (CRONRD_RUN_TOKEN)")]


@dataclass(frozen=True)
class SaveCheckpoint(_Attempt):
    """Save the checkpoint of the run's fire time (text, or base64 of UTF-8
    text in ``value_b64``)."""
    OP: ClassVar[str] = "checkpoint_save"
    value: Annotated[str | None, Doc("the value (text)")] = None
    value_b64: Annotated[str | None, Doc("the value, base64 of UTF-8 text (instead of "
                                         "value)")] = None


@dataclass(frozen=True)
class GetCheckpoint(_Attempt):
    """The last checkpoint of the run's fire time, and the attempt that
    saved it."""
    OP: ClassVar[str] = "checkpoint_get"


@dataclass(frozen=True)
class Heartbeat(_Attempt):
    """The run is alive: with how far it is and what it is doing."""
    OP: ClassVar[str] = "heartbeat"
    progress: Annotated[float | None, Range(0, 1, "progress must be a number from {lo} to "
                                                  "{hi}"),
                        Doc("how far the run is, 0 to 1")] = None
    message: Annotated[str | None, MaxLen(MAX_MESSAGE, "the heartbeat message is longer than "
                                                       "{n} characters; say it shorter"),
                       Doc("what it is doing (shown by runs and show)")] = None


TYPES: tuple[type[Any], ...] = (
    Status, Explain, Reload, ShowLogs, DrainNode, ClusterMembers, AddMember, RemoveMember,
    RevokeCert, TransferLeader, CreateToken, ListTokens, RevokeToken, SaveCheckpoint,
    GetCheckpoint, Heartbeat)

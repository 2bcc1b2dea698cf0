"""What a member may ask the leader to commit on its behalf.

A follower forwards some proposals to the leader (the ``propose`` peer
request): its own job files, its runs' reports, its own announcements, and
the operator's requests made on it (run-now, pause, cancel). Everything
else is decided by the leader alone (fires, placement, node loss, removal,
pruning) and is never accepted from a peer. Every node id inside a
forwarded command must be the sender's own: a member speaks only for
itself. Pure: no I/O; the caller knows the authenticated sender.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

import yaml

from ..errors import PermissionDenied, RequestError
from ..jobspec import JOB_KEYS, JobSpec
from ..jobspec.parse import parse_job_node
from . import commands as C

# Commands a member may forward, and the field that must name the sender
# ("" = no node field). A Fire is forwarded only for @reboot (each node
# proposes the fires of its own boot).
FORWARDABLE: dict[str, str] = {
    C.PutJob.op: "node",
    C.RemoveJob.op: "node",
    C.SyncJobs.op: "node",
    C.RunStarted.op: "node",
    C.RunFinished.op: "node",
    C.ClaimRuns.op: "node",
    C.NodeInfo.op: "node",
    C.ManualRun.op: "node",
    C.Fire.op: "node",
    C.SetPaused.op: "",
    C.CancelRun.op: "",
    # an operator's backfill, its pause/resume/cancel and a rerun, asked on
    # a follower (like pause and cancel: no node field; apply checks them)
    C.CreateBackfill.op: "",
    C.SetBackfillState.op: "",
    C.Rerun.op: "",
    # an operator's ack of an alert and dead-letter requeue/discard
    C.AckAlert.op: "",
    C.DeadLetterAction.op: "",
    C.Audit.op: "node",
    # an admin's API token made or revoked on a follower (root on its socket)
    C.CreateToken.op: "node",
    C.RevokeToken.op: "node",
    # a web UI login and logout on a follower (apply checks the token)
    C.StartSession.op: "node",
    C.EndSession.op: "node",
    # an admin's drain or undrain of a node, asked on a follower
    C.DrainNode.op: "origin",
    # from inside a run on the sender (state/checkpoints.py: apply checks
    # the token and that the run is the sender's)
    C.SaveCheckpoint.op: "node",
    C.Heartbeat.op: "node",
    # an operator's `run-now --at` and its cancel, asked on a follower
    C.PlanRun.op: "",
    C.CancelPlan.op: "",
    # a watch's ping taken by a follower (its socket or its API)
    C.Ping.op: "node",
}


def check_forwarded(cmd: C.Command, sender: str,
                    known: Callable[[str, str], bool] = lambda name, digest: False) -> C.Command:
    """The command, if ``sender`` may forward it; PermissionDenied otherwise.
    ``known(name, digest)``: the state holds that job definition (checked when it
    came in), so a SyncJobs put of it needs no second check."""
    field = FORWARDABLE.get(cmd.op)
    if field is None:
        raise PermissionDenied(f"{cmd.op} is decided by the leader alone; node {sender} may "
                               "not propose it (run the same cronrd version on every node)")
    if field:
        node = getattr(cmd, field)
        if isinstance(cmd, C.ManualRun) and cmd.plan_id:
            raise PermissionDenied(f"a planned run's start is the leader's alone; node "
                                   f"{sender} may not propose it")
        if isinstance(cmd, C.ManualRun) and node == "":
            pass  # the leader places it
        elif node != sender:
            raise PermissionDenied(f"{cmd.op} names node {node!r} but comes from {sender}: "
                                   "a member speaks only for itself")
    if isinstance(cmd, C.Fire) and not (cmd.boot and cmd.target == sender):
        raise PermissionDenied(f"a scheduled fire is decided by the leader alone; {sender} may "
                               "forward only the @reboot fires of its own boot")
    if isinstance(cmd, C.NodeInfo) and cmd.state not in ("up", "draining"):
        raise PermissionDenied(f"node {sender} may announce itself up or draining, not "
                               f"{cmd.state!r}")
    if isinstance(cmd, C.PutJob):
        checked = revalidate_spec(cmd.spec, cmd.source or f"<job from {sender}>")
        if checked.name != cmd.name or checked.digest() != cmd.digest:
            raise RequestError(f"job {cmd.name!r} from {sender}: its name or digest does not "
                               "match its definition")
        # What is committed is the validated definition, in canonical form,
        # never the sender's spelling of it (an int for retries, say).
        return dataclasses.replace(cmd, spec=checked.to_dict())
    if isinstance(cmd, C.SyncJobs):
        return dataclasses.replace(cmd, puts=_checked_puts(cmd.puts, sender, known))
    return cmd


def _checked_puts(puts: object, sender: str,
                  known: Callable[[str, str], bool]) -> list[list[str | None]]:
    """A SyncJobs command's puts with every definition sent along checked by
    the job-file validators and in canonical form (a definition the state
    holds already is not sent on: its digest names it)."""
    if not isinstance(puts, list):
        raise RequestError(f"sync_jobs from {sender}: puts must be a list")
    out: list[list[str | None]] = []
    for put in puts:
        if not (isinstance(put, list) and len(put) == 4 and all(
                isinstance(v, str) for v in put[:3]) and (put[3] is None or isinstance(put[3], str))):
            raise RequestError(f"sync_jobs from {sender}: each put is [name, digest, source, "
                               "definition or null]")
        name, digest, source, text = put
        if text is not None and known(name, digest):
            text = None
        if text is not None:
            try:
                spec = json.loads(text)
            except ValueError:
                raise RequestError(f"job {name!r} from {sender}: its definition is not "
                                   "JSON") from None
            checked = revalidate_spec(spec, source or f"<job from {sender}>")
            if checked.name != name or checked.canonical() != (text, digest):
                raise RequestError(f"job {name!r} from {sender}: its name or digest does not "
                                   "match its definition, or the definition is not in "
                                   "canonical form")
        out.append([name, digest, source, text])
    return out


def _file_form(key: str, value: Any) -> Any:
    """One value of ``JobSpec.to_dict()`` as a job file writes it."""
    if key == "env":
        pairs = value.items() if isinstance(value, dict) else value
        return {str(k): v for k, v in pairs}
    if key == "run_on" and isinstance(value, dict):
        mode, values = value.get("mode", "any"), list(value.get("values") or ())
        return mode if mode in ("any", "all") else (
            {"tags": values} if mode == "tags" else values)
    if key == "umask" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:04o}"  # a job file's umask is octal text
    return value


class _Representer(yaml.representer.SafeRepresenter):  # type: ignore[misc]  # PyYAML: no type stubs installed
    def __init__(self) -> None:
        super().__init__(sort_keys=False)
        self.represented_objects: dict[int, Any] = {}
        self.object_keeper: list[Any] = []
        self.alias_key: int | None = None


    def ignore_aliases(self, data: Any) -> bool:
        return True  # a job file written out has no aliases


def _mark(node: Any, mark: Any) -> None:
    node.start_mark = node.end_mark = mark
    if isinstance(node.value, list):
        for item in node.value:
            if isinstance(item, tuple):
                _mark(item[0], mark)
                _mark(item[1], mark)
            else:
                _mark(item, mark)


def revalidate_spec(spec: dict[str, Any], source: str) -> JobSpec:

    """Check a job definition that arrived from another node with the
    validators of job files (the same as ``cronrd validate``): the definition
    is turned into the YAML nodes a job file of it would have, and checked as
    one. RequestError if it is refused."""
    if not isinstance(spec, dict):
        raise RequestError(f"job definition from {source} is not a mapping")
    unknown = sorted(set(spec) - set(JOB_KEYS))
    if unknown:
        raise RequestError(f"job definition from {source} has unknown keys {unknown}; run the "
                           "same cronrd version on every node")
    body = {k: _file_form(k, v) for k, v in spec.items() if v is not None}
    try:
        # The node tree a job file with this definition composes to (what
        # yaml.safe_dump would write, without writing and reading it back:
        # a follower's 100,000 jobs are checked on the leader's event loop).
        node = _Representer().represent_data(body)
    except yaml.YAMLError as exc:
        raise RequestError(f"job definition from {source} cannot be written as YAML: "
                           f"{exc}") from None
    _mark(node, yaml.Mark(source, 0, 0, 0, None, None))
    job, problems = parse_job_node(node, source)
    if problems or job is None:
        first = problems[0].message if problems else "no job in it"
        raise RequestError(f"job definition from {source} is refused by the job-file "
                           f"validators: {first}")
    if job.to_dict() != JobSpec.from_dict(spec).to_dict():
        raise RequestError(f"job definition from {source} does not survive validation "
                           "unchanged; run the same cronrd version on every node")
    return job

"""The control socket's commands (control/server.py serves them): one method per
command, and who may call it (control/access.py).

``Handlers`` is given what the commands need, explicitly: the state (its
connection and machine), the log to propose to, the members, and the
public side of the executor, the watcher and the leadership. The daemon
(daemon.py) only wires it up.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from typing import TYPE_CHECKING, Any, Callable

from ...config import Config
from ...errors import CronrdError, RequestError
from ...jobspec import JobSpec
from ...state import calendars as CAL
from ...state import commands as C
from ...state.tokens import job_allowed
from ...model import run_states
from ...state import queries as Q
from ...model.run import Run
from ...ops import typed
from ...ops.requests import REQUESTS
from ...state.effects import Effect, RunDone
from ...state.machine import StateMachine
from .access import ADMIN, JOB, READ, TOKEN, Caller, check_admin, check_job
from .checkpoints import CheckpointRequests
from ..clock import Clock
from .server import Handler
from ..leader.leadership import Leadership
from ..log.base import Log
from ..cluster.members import Members
from ..runs.executor import Executor
from ..leader.scheduler import Triggers
from .tokens import TokenRequests
from ..jobfiles.watcher import Watcher
from .jobs import JobRequests
from .runs import RunRequests
from .logs import LogRequests
from .workflows import WorkflowRequests
from .membership import MembershipRequests

if TYPE_CHECKING:
    import apsw

log = logging.getLogger("cronrd.daemon")

# Refused control requests: the first few per uid and minute are replicated
# to the audit table, every one is counted in the daemon's log.
REFUSALS_AUDITED = 10
# The requests audited as allowed within the handler call of this task
# (_outcome_audited): a refusal that comes after is audited too.
_ALLOWED: contextvars.ContextVar[list | None] = contextvars.ContextVar("cronrd_allowed",
                                                                      default=None)
REFUSAL_WINDOW = 60.0
# The CLI spelling of control requests, for messages and the audit table.
CLI_NAMES = {"run_now": "run-now", "cluster_add": "cluster add",
             "cluster_revoke_cert": "cluster revoke-cert",
             "cluster_remove": "cluster remove",
             "cluster_transfer_leader": "cluster transfer-leader",
             "backfill_state": "backfill pause|resume|cancel",
             "notify_test": "notify test",
             "alert_ack": "alerts ack", "dead_letter_action": "dead-letter requeue|discard",
             "token_create": "token create", "token_list": "token list",
             "token_revoke": "token revoke"}
RUN_STATES = run_states.ALL


class Handlers(JobRequests, RunRequests, LogRequests, WorkflowRequests, MembershipRequests):
    """The control commands of one daemon."""

    def __init__(self, config: Config, clock: Clock, conn: apsw.Connection,
                 machine: StateMachine, log: Log, members: Members, executor: Executor,
                 watcher: Watcher, leadership: Leadership, *, started_at: float,
                 is_ready: Callable[[], bool]):
        self.config = config
        self.clock = clock
        self.conn = conn
        self.machine = machine
        self.log = log
        self.members = members
        self.executor = executor
        self.watcher = watcher
        self.leadership = leadership
        self.started_at = started_at
        self.is_ready = is_ready  # job files loaded and the scheduler running
        self.waiters: dict[int, list[asyncio.Future]] = {}  # run id -> `run-now --wait`
        self._refusals: dict = {}  # uid (a token: its caller name) -> (window start, count)
        # a follower's next fire times (the calendars are read again for each listing)
        self._triggers = Triggers(config.timezone, lambda: CAL.in_force(conn))
        self.checkpoints = CheckpointRequests(self)
        self.tokens = TokenRequests(config, clock, conn, log)
        self.http_url: Callable[[], str | None] = lambda: None  # the daemon's, once it serves
        self.http_problem: Callable[[], str | None] = lambda: None  # why it cannot serve
        # the faces' process: {"pid", "starts"} (None: the faces run in a thread)
        self.faces_info: Callable[[], dict | None] = lambda: None

    def on_effects(self, effects: list[Effect]) -> None:
        """Wake whoever waits for a run that is done (`run-now --wait`)."""
        for eff in effects:
            if isinstance(eff, RunDone) and eff.run is not None:
                for fut in self.waiters.pop(eff.run.run_id, []):
                    if not fut.done():
                        fut.set_result(eff.run)

    @staticmethod
    def _on_the_side(fut: asyncio.Future) -> None:
        """A proposal nobody waits for (the log owns it): log its failure."""
        def done(f):
            if not f.cancelled() and f.exception() is not None:
                log.warning("event=proposal_failed error=\"%s\"", f.exception())
        fut.add_done_callback(done)

    async def _wait_run(self, run_id: int) -> Run:
        run = Q.get_run(self.conn, run_id)
        if run is not None and run.state not in run_states.ACTIVE:
            return run
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run_id, []).append(fut)
        return await fut

    # -- control handlers ------------------------------------------------------------------
    # Who may call what (control/access.py): READ anyone who reaches the socket, JOB
    # root, the daemon's uid or the job's own user (the handler checks, it
    # knows the job), ADMIN root and the daemon's uid only.
    def table(self) -> dict[str, Handler]:
        """Every command, guarded by its access level."""
        table = {
            "status": (READ, self.h_status), "jobs": (READ, self.h_jobs),
            "job": (READ, self.h_job), "runs": (READ, self.h_runs),
            "run": (READ, self.h_run), "audit": (READ, self.h_audit),
            "graph": (READ, self.h_graph),
            "cluster_members": (READ, self.h_cluster_members),
            "explain": (READ, self.h_explain),
            "logs": (JOB, self.h_logs), "run_now": (JOB, self.h_run_now),
            "pause": (JOB, self.h_pause), "resume": (JOB, self.h_resume),
            "cancel": (JOB, self.h_cancel),
            "backfill": (JOB, self.h_backfill), "backfills": (READ, self.h_backfills),
            "backfill_state": (JOB, self.h_backfill_state), "rerun": (JOB, self.h_rerun),
            "pools": (READ, self.h_pools),
            "alerts": (READ, self.h_alerts), "alert_ack": (JOB, self.h_alert_ack),
            "dead_letter": (READ, self.h_dead_letter),
            "dead_letter_action": (JOB, self.h_dead_letter_action),
            "reload": (ADMIN, self.h_reload), "cluster_add": (ADMIN, self.h_cluster_add),
            "cluster_remove": (ADMIN, self.h_cluster_remove),
            "cluster_revoke_cert": (ADMIN, self.h_cluster_revoke_cert),
            "cluster_transfer_leader": (ADMIN, self.h_cluster_transfer_leader),
            "checkpoint_save": (TOKEN, self.checkpoints.save),
            "checkpoint_get": (TOKEN, self.checkpoints.get),
            "heartbeat": (TOKEN, self.checkpoints.heartbeat),
            # notifications (control/notifications.py): reading the attempts; a test
            # send runs the config's notifier (a command: as the daemon's user)
            "notifications": (READ, self.h_notifications),
            "notify_test": (ADMIN, self.h_notify_test),
            # HTTP API tokens (control/tokens.py): root only, each change audited
            "token_create": (ADMIN, self.tokens.create),
            "token_list": (ADMIN, self.tokens.list),
            "token_revoke": (ADMIN, self.tokens.revoke),
            # an admin drains a node (the HTTP API; state/node_drains.py): the
            # handler checks (as ADMIN) and audits, and records who drained it
            "node_drain": (JOB, self.h_node_drain),
            # a watch's ping: whoever may reach the socket (its group) may say a
            # job that runs elsewhere ran (state/apply_watches.py); the handler
            # takes the caller, for the record
            "ping": (JOB, self.h_ping)}
        return {name: self._guard(name, access, fn) for name, (access, fn) in table.items()}

    def _guard(self, name: str, access: str, fn):
        # Every command has its typed request (ops/requests.py): parsed here,
        # at the edge, so the handler takes the value and never sees the
        # socket's dict. (A command without one fails here, when the table
        # is built: at start, and in every test that makes Handlers.)
        return self._typed(REQUESTS[name], access, fn)

    def _admin(self, request: type[Any], fn):
        """An ADMIN command: root and the daemon's uid (and an admin token).
        The caller is checked first (a refused caller learns nothing of its
        arguments; the refusal is audited), then the arguments are parsed,
        and only a well-formed change is audited as allowed before it is
        made. The target (for the message and the audit) is the args' "node"
        or "name"."""
        name = request.OP

        async def admin(args: dict, caller: Caller):
            target = next((args[k] for k in ("node", "name")
                           if isinstance(args, dict) and isinstance(args.get(k), str)), "")
            what = f"cronrd {CLI_NAMES.get(name, name)}" + (f" {target}" if target else "")
            await self._authorize(caller, name, target, what, lambda: check_admin(caller, what),
                                  change=False)
            req = typed.parse(request, args)
            await self._audit(caller, name, target, True)
            return await fn(req)
        return admin

    def _typed(self, request: type[Any], access: str, fn):
        if access == READ:
            async def read(args: dict, caller: Caller):
                return await fn(typed.parse(request, args))
            return read
        if access in (JOB, TOKEN):  # the handler checks the job's user, or the token
            async def job(args: dict, caller: Caller):
                return await fn(typed.parse(request, args), caller)
            return job
        if access != ADMIN:  # pragma: no cover - a table entry this does not serve
            raise TypeError(f"typed {access} requests are not served ({request.__name__})")
        return self._admin(request, fn)

    async def _authorize(self, caller: Caller, command: str, target: str, what: str,
                         check, *, change: bool) -> None:
        """Run ``check``; audit a refusal, and a change before it is made (a
        change is made only once its audit record is committed)."""
        try:
            check()
        except CronrdError as exc:
            await self._audit(caller, command, target, False, str(exc))
            raise
        if change:
            await self._audit(caller, command, target, True)

    async def _audit(self, caller: Caller, command: str, target: str, allowed: bool,
                     detail: str = "") -> None:
        rec = C.Audit(node=self.config.node_id, uid=caller.uid, user=caller.name,
                      pid=caller.pid, command=command, target=target, allowed=allowed,
                      at=self.clock.now(), detail=detail)
        if allowed:
            log.info("event=control_audit allowed=true uid=%d user=%s pid=%d command=%s "
                     "target=%s", caller.uid, caller.name, caller.pid, command, target)
            await self.log.propose(rec)
            slot = _ALLOWED.get()
            if slot is not None:
                slot.append((caller, command, target))
            return
        # A refusal is answered at once; its record is replicated on the side,
        # for the first few of each uid per minute (a refusal loop must not
        # flood the replicated log or the daemon's).
        now = self.clock.monotonic()
        who = caller.uid if caller.token is None else caller.name  # tokens: uid -1 each
        start, n = self._refusals.get(who, (now, 0))
        if now - start >= REFUSAL_WINDOW:
            if n > REFUSALS_AUDITED:
                log.warning("event=control_refused_unrecorded uid=%d user=%s count=%d "
                            "window_s=%g", caller.uid, caller.name, n - REFUSALS_AUDITED,
                            REFUSAL_WINDOW)
            start, n = now, 0
        self._refusals[who] = (start, n + 1)
        if n < REFUSALS_AUDITED:
            log.warning("event=control_refused uid=%d user=%s pid=%d command=%s target=%s "
                        "reason=\"%s\"", caller.uid, caller.name, caller.pid, command,
                        target, detail)
            self._on_the_side(self.log.propose(rec))

    async def _authorize_job(self, caller: Caller, command: str, target: str, job: str,
                             *, change: bool) -> None:
        spec = self._job_spec(job)
        what = f"cronrd {CLI_NAMES.get(command, command)} {target}"
        await self._authorize(caller, command, target, what,
                              lambda: check_job(caller, what, spec, job), change=change)

    async def _authorize_downstream(self, caller: Caller, command: str, job: str) -> None:
        """``--downstream`` runs again the jobs that depend on ``job``
        (transitively): the caller must be allowed to act on each of them."""
        if caller.privileged:
            return
        todo, seen = [job], {job}
        while todo:
            for (child,) in self.conn.execute("SELECT child FROM job_deps WHERE parent=?",
                                              (todo.pop(),)):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        for child in sorted(seen - {job}):
            what = f"cronrd {command} {job} --downstream (it reruns {child})"
            await self._authorize(caller, command, job, what, functools.partial(
                check_job, caller, what, self._job_spec(child), child), change=False)

    def _job_spec(self, name: str) -> JobSpec | None:
        """A job's effective spec; None for a job that is gone (root's, then)."""
        return Q.job_spec(self.conn, name)

    async def _job_for(self, caller: Caller, command: str, name: str, *,
                       change: bool = True) -> dict:
        """The job ``name`` acted on by ``caller``. A token limited to jobs
        that do not cover ``name`` is refused (403, audited) before the job
        is looked up: whether it exists is none of its business."""
        glob = (caller.token or {}).get("jobs") or ""
        if glob and not job_allowed(glob, name):
            await self._authorize_job(caller, command, name, name, change=change)
        return self._job_or_error(name)

    def _job_or_error(self, name: str) -> dict:
        for job in Q.jobs(self.conn, name=name):
            return job
        raise RequestError(f"no job named {name!r}; `cronrd jobs` lists the known jobs "
                           f"(job files live in {self.config.jobs_dir})")

    async def _barrier(self, consistent: bool) -> None:
        """A read's ``consistent``: wait until this node has applied every
        write the cluster committed before the request (ReadIndex through the
        leader)."""
        if consistent:
            await self.log.read_barrier()


def _outcome_audited(fn):
    """A handler whose request was audited as allowed and then refused (a
    check after the authorization, or apply) has its refusal audited too:
    the log says what the cluster decided, not only what the caller was
    allowed to ask (issue 32 point 7)."""
    @functools.wraps(fn)
    async def handler(self, *args, **kw):
        slot: list = []
        token = _ALLOWED.set(slot)
        try:
            return await fn(self, *args, **kw)
        except CronrdError as exc:
            if slot:
                caller, command, target = slot[-1]
                await self._audit(caller, command, target, False,
                                  f"refused after it was allowed: {exc}")
            raise
        finally:
            _ALLOWED.reset(token)
    return handler


for _name, _fn in list(vars(Handlers).items()):
    if _name.startswith("h_") and asyncio.iscoroutinefunction(_fn):
        setattr(Handlers, _name, _outcome_audited(_fn))
for _base in Handlers.__mro__[1:]:
    for _name, _fn in list(vars(_base).items()):
        if _name.startswith("h_") and asyncio.iscoroutinefunction(_fn) \
                and _name not in vars(Handlers):
            setattr(Handlers, _name, _outcome_audited(_fn))

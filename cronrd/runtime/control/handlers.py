"""The control socket's commands (control/server.py serves them): one method per
command, and who may call it (control/access.py).

``Handlers`` is given what the commands need, explicitly: the state (its
connection and machine), the log to propose to, the members, and the
public side of the executor, the watcher and the leadership. The daemon
(daemon.py) only wires it up.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import functools
import json
import logging
import os
from typing import Callable

import apsw

from ... import __version__
from ...config import Config
from ...errors import CronrdError, PermissionDenied, RequestError, UsageError
from ...jobspec import JobSpec
from ...jobspec.params import check_run_params
from ...schedule import iso_utc
from ...state import commands as C
from ...model import run_states
from ...state import run_params
from ...state import queries as Q
from ...model.run import Run
from ...state.effects import Effect
from ...state.machine import StateMachine
from ..leader import backfills as B
from . import notifications as NH
from ...decisions import backfill as BD
from ...state import backfill as BF
from ...state import alerts as AL
from ...state import downstream as DS
from .access import ADMIN, JOB, READ, TOKEN, Caller, check_admin, check_job
from .checkpoints import CheckpointRequests
from ..clock import Clock
from .server import Handler, Stream, arg
from ..leader.leadership import Leadership
from .reads import job_details, job_view, pools_brief, pools_view, runs_listing
from ..log.base import Log
from ..cluster.members import Members
from ..runs.executor import Executor
from ..runs import output as O
from ..runs.logs import read_run_log, run_log_path
from ..leader.scheduler import Triggers
from .tokens import TokenRequests
from ..jobfiles.watcher import Watcher

log = logging.getLogger("cronrd.daemon")

LOG_CHUNK = 256 * 1024  # bytes per read of a run's log (local or from another node)
FOLLOW_INTERVAL = 0.2   # seconds between looks at a followed log file (`logs --follow`)
# Refused control requests: the first few per uid and minute are replicated
# to the audit table, every one is counted in the daemon's log.
REFUSALS_AUDITED = 10
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


UNPAGED_JOBS = 10_000   # jobs in one unpaged `jobs` answer
MAX_PAGE = 5_000        # jobs in one page
STREAM_PAGE = 1_000     # jobs in one message of a streamed listing


class Handlers:
    """The control commands of one daemon."""

    def __init__(self, config: Config, clock: Clock, conn, machine: StateMachine, log: Log,
                 members: Members, executor: Executor, watcher: Watcher,
                 leadership: Leadership, *, started_at: float,
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
        self._triggers = Triggers(config.timezone)  # a follower's next fire times
        self.checkpoints = CheckpointRequests(self)
        self.tokens = TokenRequests(config, clock, conn, log)
        self.http_url: Callable[[], str | None] = lambda: None  # the daemon's, once it serves

    def on_effects(self, effects: list[Effect]) -> None:
        """Wake whoever waits for a run that is done (`run-now --wait`)."""
        for eff in effects:
            if eff.kind == "run_done" and eff.run is not None:
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
            "node_drain": (JOB, self.h_node_drain)}
        return {name: self._guard(name, access, fn) for name, (access, fn) in table.items()}

    def _guard(self, name: str, access: str, fn):
        if access == READ:
            async def read(args: dict, caller: Caller):
                return await fn(args)
            return read
        if access in (JOB, TOKEN):  # the handler checks the job's user, or the token
            return fn

        async def admin(args: dict, caller: Caller):
            target = next((args[k] for k in ("node", "name") if isinstance(args.get(k), str)),
                          "")
            what = f"cronrd {CLI_NAMES.get(name, name)}" + (f" {target}" if target else "")
            await self._authorize(caller, name, target, what, lambda: check_admin(caller, what),
                                  change=True)
            return await fn(args)
        return admin

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

    def _job_or_error(self, name: str) -> dict:
        for job in Q.jobs(self.conn, name=name):
            return job
        raise RequestError(f"no job named {name!r}; `cronrd jobs` lists the known jobs "
                           f"(job files live in {self.config.jobs_dir})")

    async def _consistent(self, args: dict) -> None:
        """``--consistent``: wait until this node has applied every write the
        cluster committed before the request (ReadIndex through the leader)."""
        if arg(args, "consistent", bool, False):
            await self.log.read_barrier()

    async def h_status(self, args: dict) -> dict:
        await self._consistent(args)
        active = Q.count_active(self.conn)
        jobs, paused = Q.count_jobs(self.conn)
        return {
            "node_id": self.config.node_id, **self.members.status(),
            "ready": self.is_ready(),
            "version": __version__, "pid": os.getpid(),
            "started_at": iso_utc(round(self.started_at, 3)),
            "uptime_s": round(self.clock.now() - self.started_at, 3),
            "jobs": jobs, "paused": paused,
            "running": active.get("running", 0),
            "assigned": active.get("assigned", 0), "pending": active.get("pending", 0),
            "running_here": self.executor.running_here(),
            "conflicts": Q.conflicts(self.conn),
            "maintenance": Q.pause_note(self.conn, ""),
            "applied_index": self.machine.applied_index,
            "state_digest": self.machine.state_digest,
            "problems": [str(p) for p in self.watcher.problems],
            "pools": pools_brief(self.conn),
            "socket": self.config.socket, "data_dir": self.config.data_dir,
            "log_dir": self.config.log_dir, "jobs_dir": self.config.jobs_dir,
            "timezone": self.config.timezone,
            "http": self.http_url(),
        }

    def _job_view(self, job: dict, last: Run | None) -> dict:
        return job_view(job, last, self.config.timezone, self._next_fire)

    def _broken_files(self) -> dict[str, str]:
        """This node's job files with problems: path -> the first problem.
        Their jobs keep running their last good version."""
        broken: dict[str, str] = {}
        for p in self.watcher.problems:
            broken.setdefault(p.path, str(p))
        return broken

    def _broken_jobs(self) -> dict[str, str]:
        """Job name -> the problem of its file here (few: only broken files)."""
        broken = self._broken_files()
        return {name: broken[source] for name, source in Q.jobs_of_sources(
            self.conn, list(broken))}

    def _page_views(self, rows: list[dict]) -> list[dict]:
        last = Q.last_runs(self.conn, [j["name"] for j in rows])
        broken = self._broken_files()
        views = []
        for j in rows:
            view = self._job_view(j, last.get(j["name"]))
            # its file here is broken: it keeps running its last good version
            view["file_problem"] = broken.get(j["source"])
            views.append(view)
        return views

    async def _stream_jobs(self, match: str | None):
        """`jobs --json`: the same fields as a page's views, as JSON text that
        SQLite builds (queries.job_view_texts), next_fire and last_run added."""
        count = 0
        broken = self._broken_jobs()
        pages = _Pages(self.conn, self.config.timezone, match)
        try:
            async for rows in pages:
                count += len(rows)
                last = Q.last_runs(self.conn, [r[0] for r in rows])
                texts = []
                for name, text, schedule, timezone, enabled, paused, cursor in rows:
                    run = last.get(name)
                    nxt = self._next_fire({"name": name, "paused": paused, "cursor": cursor},
                                          {"enabled": enabled, "schedule": schedule,
                                           "timezone": timezone})
                    texts.append(f'{text[:-1]},"next_fire":{json.dumps(iso_utc(nxt))},'
                                 f'"file_problem":{json.dumps(broken.get(name))},'
                                 f'"last_run":{json.dumps(run.view()) if run else "null"}}}')
                yield {"data": ",\n".join(texts)}
        finally:
            pages.close()
        yield {"result": {"jobs": count}}

    def _next_fire(self, job: dict, d: dict) -> int | None:
        sched = self.leadership.scheduler
        if sched is not None and job["name"] in sched.entries:
            return sched.next_fire(job["name"])
        # a follower works it out from the replicated cursor
        if job["paused"] or not d["enabled"]:
            return None
        try:
            trig = self._triggers.get(d["schedule"], d["timezone"])
            return self._triggers.next_after(trig, max(job["cursor"], int(self.clock.now())))
        except CronrdError:
            return None

    async def h_jobs(self, args: dict):
        """The jobs by name. Paged (``limit``, and ``after``: the last name of
        the page before; the answer is ``{"jobs": [...], "next": name or
        null}``), optionally only the names matching ``match`` (shell
        pattern). ``stream``: every job as JSON text, a page per ``data``
        message (jobs separated by ",\\n"; `jobs --json` writes them as they
        come), then ``{"jobs": count}``. Without ``limit`` or ``stream``: the
        list of every job, up to UNPAGED_JOBS (more is refused: page)."""
        await self._consistent(args)
        after = arg(args, "after", str, None)
        limit = arg(args, "limit", int, None)
        match = arg(args, "match", str, None)
        if arg(args, "stream", bool, False):
            return Stream(self._stream_jobs(match))
        if limit is None:
            rows = Q.jobs(self.conn, glob=match, limit=UNPAGED_JOBS + 1, as_dicts=True)
            if len(rows) > UNPAGED_JOBS:
                raise UsageError(f"more than {UNPAGED_JOBS} jobs: ask for pages (limit, after), "
                                 "as `cronrd jobs` does")
            return self._page_views(rows)
        if not 1 <= limit <= MAX_PAGE:
            raise UsageError(f"limit must be 1 to {MAX_PAGE}")
        rows = Q.jobs(self.conn, after=after, glob=match, limit=limit, as_dicts=True)
        return {"jobs": self._page_views(rows),
                "next": rows[-1]["name"] if len(rows) == limit else None}

    async def h_job(self, args: dict) -> dict:
        """One job as `cronrd show` prints it: the listing's fields, the
        definition, why it is paused, the problems of its file here (it runs
        its last good version), its next fire times, last and active runs."""
        await self._consistent(args)
        job = self._job_or_error(arg(args, "name", str, required=True))
        view = self._job_view(job, Q.last_run(self.conn, job["name"]))
        view["spec"] = job["spec"].to_dict()
        count = arg(args, "next", int, 5)
        if not 0 <= count <= 100:
            raise UsageError("next must be 0 to 100")
        view.update(job_details(self.conn, job, view, self.clock.now(), count,
                                [str(p) for p in self.watcher.problems
                                 if p.path == job["source"]]))
        return view

    async def h_runs(self, args: dict) -> dict:
        await self._consistent(args)
        return runs_listing(self.conn, args, self.config.timezone, Q.applied_index(self.conn))

    async def h_run(self, args: dict) -> dict:
        await self._consistent(args)
        run_id = arg(args, "run_id", int, required=True)
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent runs")
        from ...state.dependencies import lineage
        view = run_params.add_to_views(self.conn, [run.view()])[0]
        from ...state.checkpoints import views as heartbeat_views
        heartbeat_views(self.conn, [view])
        consumed = lineage(self.conn, run_id)
        if consumed:
            view["lineage"] = consumed  # the parent runs it consumed
        return view

    async def h_explain(self, args: dict) -> dict:
        """`cronrd explain JOB [--at T | --next]`: the decision trail of one
        fire time (control/explain.py). The members' health is the leader's view; a
        follower gives them as last announced in the state."""
        await self._consistent(args)
        from .explain import FOLLOWER_NODES, explain, nodes_from_state
        if self.log.is_leader:
            nodes, note = self.members.node_views(), ""
        else:
            nodes, note = nodes_from_state(self.conn), FOLLOWER_NODES
        return explain(self.conn, args, now=self.clock.now(), default_tz=self.config.timezone,
                       nodes=nodes, nodes_note=note)

    async def h_graph(self, args: dict) -> dict:
        await self._consistent(args)
        from .reads import dependency_graph
        return dependency_graph(self.conn, arg(args, "job", str, None))

    def _find_log_run(self, job: str, run_id: int | None) -> Run:
        """--run ID, or the job's latest run that has started (a retry still
        waiting for its time has nothing to show)."""
        if run_id is not None:
            run = Q.get_run(self.conn, run_id)
            if run is None or run.job != job:
                raise RequestError(f"job {job!r} has no run {run_id}; `cronrd runs {job}` "
                                   "lists its runs")
            return run
        for run in Q.list_runs(self.conn, job, None, 200):
            if run.started_at is not None or run.log_path:
                return run
        self._job_or_error(job)
        raise RequestError(f"job {job!r} has no run that started yet; `cronrd run-now {job}` "
                           "starts one")

    def _started_runs(self, job: str, after_id: int, since: float | None,
                      newest: int = 1000) -> list[Run]:
        """The job's runs after run ``after_id`` that started (at or after
        ``since``), oldest first, among its ``newest`` runs."""
        runs = [r for r in Q.list_runs(self.conn, job, None, newest)
                if r.run_id > after_id and (r.started_at is not None or r.log_path)
                and (since is None or (r.started_at or 0) >= since)]
        return sorted(runs, key=lambda r: r.run_id)

    async def h_logs(self, args: dict, caller: Caller):
        job = arg(args, "job", str, required=True)
        run_id = arg(args, "run_id", int)
        since = arg(args, "since", (int, float))
        lines = arg(args, "lines", int)
        if lines is not None and lines < 0:
            raise RequestError(f"lines {lines} must be >= 0")
        follow = bool(arg(args, "follow", bool, False))
        if since is None:
            try:
                first = [self._find_log_run(job, run_id)]
            except RequestError:
                if not follow or run_id is not None:
                    raise
                self._job_or_error(job)  # an unknown job stays an error
                first = []  # -f: wait for the job's first run
        else:
            self._job_or_error(job)
            first = self._started_runs(job, 0, since)
        # Reading a run's output is for root, the daemon's uid and the job's user.
        await self._authorize_job(caller, "logs", job, job, change=False)
        # --follow follows --run ID to its end; otherwise the job's next
        # runs too, until the caller goes away.
        return Stream(self._stream_logs(job, first, follow, follow and run_id is None, since,
                                        lines))

    async def _stream_logs(self, job: str, runs: list[Run], follow: bool, follow_next: bool,
                           since: float | None, lines: int | None):
        """Each run: {"run": view}, its output ({"data", "stream", "time"}),
        {"end": view}; then, with ``follow_next``, the job's next runs as
        they start; else {"result": the last run's view}."""
        last = runs[-1] if runs else None
        queue = list(runs)
        while True:
            while queue:
                run = queue.pop(0)
                last = run
                async for msg in self._stream_log(run, follow, lines):
                    yield msg
                lines = None  # -n: the first run's last lines, then everything
            if not follow_next:
                yield {"result": last.view() if last else None}
                return
            await asyncio.sleep(FOLLOW_INTERVAL)
            queue = self._started_runs(job, last.run_id if last else 0, since, newest=100)

    def read_log_chunk(self, run_id: int, offset: int) -> dict:
        return read_log_chunk(self.config, self.conn, run_id, offset)

    async def log_chunk(self, run: Run, offset: int) -> dict:
        """A chunk of ``run``'s log from output position ``offset``, read on
        the node that ran it: this one, or asked over the peer port (`logs`
        and the HTTP log stream on any node)."""
        node = run.node
        if node in (None, self.config.node_id):
            return self.read_log_chunk(run.run_id, offset)
        try:
            return await self.members.call(node, "read_log", {"run_id": run.run_id,
                                                              "offset": offset})
        except CronrdError as exc:
            raise RequestError(
                f"run {run.run_id} ran on node {node}, whose log could not be read: "
                f"{exc}; the file is {run.log_path or 'in its log_dir'} on "
                f"that host") from None

    async def _stream_log(self, run: Run, follow: bool, lines: int | None = None):
        run_id = run.run_id
        offset = 0
        decoders: dict[str, codecs.IncrementalDecoder] = {}
        yield {"run": run.view()}
        held: list[dict] | None = [] if lines is not None else None  # -n: until caught up
        while True:
            run = Q.get_run(self.conn, run_id) or run
            active = run.state in run_states.ACTIVE
            while run.started_at is not None or run.log_path:
                chunk = await self.log_chunk(run, offset)
                offset = chunk["offset"]
                for msg in chunk_messages(chunk, decoders):
                    if held is not None:
                        held.append(msg)
                    else:
                        yield msg
                if not chunk["more"]:
                    break
            if held is not None:
                for msg in last_lines(held + (flush_messages(decoders)
                                              if not (follow and active) else []), lines):
                    yield msg
                held = None
            if not follow or not active:
                for msg in flush_messages(decoders):
                    yield msg
                yield {"end": run.view()}
                return
            await asyncio.sleep(FOLLOW_INTERVAL)  # a file has no "grew" event: look again

    async def h_run_now(self, args: dict, caller: Caller):
        name = arg(args, "job", str, required=True)
        job = self._job_or_error(name)
        await self._authorize_job(caller, "run_now", name, name, change=True)
        wait = bool(arg(args, "wait", bool, False))
        params, key = run_now_inputs(name, job["spec"], args)
        # The leader places it (node ""), honouring run_on.
        res = await self.log.propose(C.ManualRun(job=name, node="", at=self.clock.now(),
                                                 params=params, key=key))
        run_id = res["run_id"]
        if not wait:
            return {"run_id": run_id, "state": res["state"],
                    **({"existing": True} if res.get("existing") else {}),
                    **({"reason": res["reason"]} if res.get("reason") else {})}
        return Stream(self._follow_attempts(run_id))

    async def _follow_attempts(self, run_id: int):
        """Wait for the run and any retries; yield each attempt's end."""
        while True:
            run = await self._wait_run(run_id)
            yield {"event": run.view()}
            nxt = Q.next_attempt(self.conn, run)
            if nxt is None:
                yield {"result": run.view()}
                return
            run_id = nxt

    async def _set_paused(self, args: dict, caller: Caller, paused: bool) -> dict:
        command = "pause" if paused else "resume"
        note = arg(args, "note", str, "")
        if len(note) > 1000:
            raise UsageError("the note is longer than 1000 characters; say it shorter")
        if arg(args, "all", bool, False):
            # Every job: for root and the daemon's uid.
            what = f"cronrd {command} --all"
            await self._authorize(caller, command, "--all", what,
                                  lambda: check_admin(caller, what), change=True)
            return await self.log.propose(C.SetPaused(
                name="", paused=paused, at=self.clock.now(), note=note,
                by=caller.describe()))
        name = arg(args, "job", str, required=True)
        self._job_or_error(name)
        await self._authorize_job(caller, command, name, name, change=True)
        return await self.log.propose(C.SetPaused(name=name, paused=paused,
                                                  at=self.clock.now(), note=note,
                                                  by=caller.describe()))

    async def h_pause(self, args: dict, caller: Caller) -> dict:
        return await self._set_paused(args, caller, True)

    async def h_resume(self, args: dict, caller: Caller) -> dict:
        return await self._set_paused(args, caller, False)

    async def h_cancel(self, args: dict, caller: Caller) -> dict:
        """Cancel run ``run_id``, or every active run of ``job``. A run
        stops with its job's kill_grace; a cancelled run is not retried."""
        job = arg(args, "job", str)
        if job is not None:
            self._job_or_error(job)
            await self._authorize_job(caller, "cancel", job, job, change=True)
            runs = Q.active_runs_of(self.conn, job)
        else:
            run_id = arg(args, "run_id", int, required=True)
            run = Q.get_run(self.conn, run_id)
            if run is None:
                raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent "
                                   "runs")
            await self._authorize_job(caller, "cancel", str(run_id), run.job, change=True)
            if run.state not in run_states.ACTIVE:
                raise RequestError(f"run {run_id} of job {run.job!r} is already "
                                   f"{run.state}; there is nothing to cancel")
            runs = [run]
        reason = f"cancelled by {caller.describe()} (`cronrd cancel`)"
        out = []
        for run in runs:
            try:
                await self.log.propose(C.CancelRun(run_id=run.run_id, reason=reason,
                                                   at=self.clock.now()))
            except CronrdError:
                if len(runs) == 1:
                    raise
                continue  # it ended meanwhile
            out.append((Q.get_run(self.conn, run.run_id) or run).view())
        if job is not None:
            return {"job": job, "runs": out}
        return out[0]

    # -- backfill and rerun (runtime/leader/backfills.py, state/backfill.py) -----------------
    async def h_backfill(self, args: dict, caller: Caller) -> dict:
        """Plan (``dry_run``) or start a backfill of ``job`` from ``from`` to ``to``.

        Bounded before it runs: who may, ``force`` (admins only) and, for a
        create, "one open backfill per job" are checked before any fire time
        is generated; then at most one fire time more than the request may
        take is generated (B.plan), and a dry run answers the first and last
        BD.DRY_RUN_LINES of them with counts. A create's refusal is audited
        as refused, its go-ahead as allowed (before it is proposed)."""
        name = arg(args, "job", str, required=True)
        self._job_or_error(name)
        first = arg(args, "from", int, required=True)
        last = arg(args, "to", int, required=True)
        reprocess = arg(args, "reprocess", str, "missing")
        order = arg(args, "order", str, "oldest")
        parallel = arg(args, "parallel", int, 1)
        note = arg(args, "note", str, "")
        dry_run = bool(arg(args, "dry_run", bool, False))
        force = bool(arg(args, "force", bool, False))
        downstream = bool(arg(args, "downstream", bool, False))
        if reprocess not in BD.REPROCESS or order not in BD.ORDERS:
            raise UsageError(f"--reprocess is one of {', '.join(BD.REPROCESS)}, --order one "
                             f"of {', '.join(BD.ORDERS)}")
        if not 1 <= parallel <= 1000:
            raise UsageError("--parallel must be from 1 to 1000")
        if len(note) > 1000:
            raise UsageError("the note is longer than 1000 characters; say it shorter")
        await self._authorize_job(caller, "backfill", name, name, change=False)
        if downstream:
            await self._authorize_downstream(caller, "backfill", name)
        if force:  # up to BD.HARD_MAX_FIRES fire times planned: for an admin only
            what = f"cronrd backfill {name} --force"

            def check_force():
                try:
                    check_admin(caller, what)
                except PermissionDenied as exc:
                    raise PermissionDenied(f"{exc}; without --force a backfill takes up to "
                                           f"{BD.MAX_FIRES} fire times") from None
            await self._authorize(caller, "backfill", name, what, check_force, change=False)
        spec = self._job_spec(name)
        try:
            BF.check_job(spec, name, RequestError)
            other = None if dry_run else BF.open_backfill(self.conn, name)
            if other is not None:
                raise RequestError(
                    f"job {name!r} has backfill {other} still open; one backfill per job at "
                    f"a time: wait for it to end (`cronrd backfills {other}`) or cancel it "
                    f"(`cronrd backfill cancel {other}`), then ask again")
            times, lines = B.plan(self.conn, spec, self.config.timezone, first, last,
                                  reprocess, order, force)
        except RequestError as exc:
            if not dry_run:  # a create's outcome is audited, refusals too
                await self._audit(caller, "backfill", name, False, str(exc))
            raise
        out = {"job": name, "total": len(times),
               "limit": BD.limit(parallel, spec.concurrency),
               "concurrency": spec.concurrency, "counts": BD.counts(lines)}
        if dry_run:
            shown, omitted = BD.excerpt(lines)
            out["lines"] = [[iso_utc(t), d.line() + (_downstream_note(self.conn, name, t, d)
                                                     if downstream else "")]
                            for t, d in shown]
            out["omitted"] = omitted
            if omitted:  # the fire times left out lie between lines[:n] and lines[n:]
                out["omitted_after"] = BD.DRY_RUN_LINES
            return out
        await self._audit(caller, "backfill", name, True)
        res = await self.log.propose(C.CreateBackfill(
            job=name, fire_times=times, from_time=first, to_time=last, reprocess=reprocess,
            parallel=parallel, order=order, at=self.clock.now(), note=note,
            who=caller.describe(), downstream=downstream))
        return {**out, **res, "lines": []}

    async def h_backfills(self, args: dict) -> dict:
        await self._consistent(args)
        bid = arg(args, "id", int)
        limit = arg(args, "limit", int, 50)
        rows = BF.listing(self.conn, bid, limit)
        if bid is not None and not rows:
            raise RequestError(f"no backfill with id {bid}; `cronrd backfills` lists them")
        out = {"backfills": rows}
        if bid is not None and arg(args, "items", bool, False):
            out["items"] = [[iso_utc(t), st, note, rid, outcome]
                            for t, st, note, rid, outcome in BF.items(self.conn, bid)]
        return out

    async def h_pools(self, args: dict) -> dict:
        """The pools in force, their slots in use and runs waiting (state/pools.py)."""
        await self._consistent(args)
        return pools_view(self.conn, self.config)

    async def h_backfill_state(self, args: dict, caller: Caller) -> dict:
        bid = arg(args, "id", int, required=True)
        state = arg(args, "state", str, required=True)
        if state not in ("paused", "running", "cancelled"):
            raise UsageError("state is paused, running or cancelled")
        rows = BF.listing(self.conn, bid, 1)
        if not rows:
            raise RequestError(f"no backfill with id {bid}; `cronrd backfills` lists them")
        await self._authorize_job(caller, "backfill_state", str(bid), rows[0]["job"],
                                  change=True)
        return await self.log.propose(C.SetBackfillState(backfill=bid, state=state,
                                                         at=self.clock.now(),
                                                         who=caller.describe()))

    async def h_rerun(self, args: dict, caller: Caller) -> dict:
        """A new attempt of the record of ``job`` at fire time ``at``."""
        name = arg(args, "job", str, required=True)
        self._job_or_error(name)
        at = arg(args, "at", int, required=True)
        await self._authorize_job(caller, "rerun", name, name, change=True)
        downstream = bool(arg(args, "downstream", bool, False))
        if downstream:
            await self._authorize_downstream(caller, "rerun", name)
        spec = self._job_spec(name)
        BF.check_job(spec, name, RequestError)
        t = B.rerun_time(self.conn, spec, self.config.timezone, at)
        if arg(args, "dry_run", bool, False):
            try:
                order, _edges = DS.closure(self.conn, name, t)
            except DS.TooMany as exc:
                raise RequestError(f"{exc}; rerun without --downstream, then the children "
                                   "one by one") from None
            return {"job": name, "fire_time": iso_utc(t), "dry_run": True,
                    "downstream": [[j, iso_utc(ft)] for j, ft in order]
                    if downstream else []}
        res = await self.log.propose(C.Rerun(job=name, fire_time=t, at=self.clock.now(),
                                             who=caller.describe(), downstream=downstream))
        if "downstream" in res:
            res = {**res, "downstream": [[j, iso_utc(ft)] for j, ft in res["downstream"]]}
        return {**res, "job": name, "fire_time": iso_utc(t)}

    # -- alerts and the dead letter (state/alerts.py, runtime/leader/sla_watch.py) ------------
    async def h_alerts(self, args: dict) -> dict:
        await self._consistent(args)
        limit = arg(args, "limit", int, 100)
        if not 1 <= limit <= 100000:
            raise UsageError("limit must be between 1 and 100000")
        rows = AL.alerts(self.conn, include_closed=bool(arg(args, "all", bool, False)),
                         job=arg(args, "job", str), limit=limit)
        for r in rows:
            r["fire_time"] = iso_utc(r["fire_time"])
        return {"alerts": rows}

    async def h_alert_ack(self, args: dict, caller: Caller) -> dict:
        alert_id = arg(args, "id", int, required=True)
        note = arg(args, "note", str, "")
        if len(note) > 1000:
            raise UsageError("the note is longer than 1000 characters; say it shorter")
        row = next(iter(self.conn.execute("SELECT job FROM alerts WHERE alert_id=?",
                                          (alert_id,))), None)
        if row is None:
            raise RequestError(f"no alert with id {alert_id}; `cronrd alerts --all` lists "
                               "them")
        await self._authorize_job(caller, "alert_ack", str(alert_id), row[0], change=True)
        return await self.log.propose(C.AckAlert(alert_id=alert_id, note=note,
                                                 at=self.clock.now(), who=caller.describe()))

    async def h_dead_letter(self, args: dict) -> dict:
        await self._consistent(args)
        limit = arg(args, "limit", int, 100)
        if not 1 <= limit <= 100000:
            raise UsageError("limit must be between 1 and 100000")
        rows = AL.dead_letters(self.conn, include_closed=bool(arg(args, "all", bool, False)),
                               limit=limit)
        for r in rows:
            r["fire_time"] = iso_utc(r["fire_time"])
            run = Q.get_run(self.conn, r["run_id"])
            r["run"] = run.view() if run is not None else None
        return {"dead_letter": rows}

    async def h_dead_letter_action(self, args: dict, caller: Caller) -> dict:
        run_id = arg(args, "run_id", int, required=True)
        action = arg(args, "action", str, required=True)
        note = arg(args, "note", str, "")
        if action not in ("requeue", "discard"):
            raise UsageError("action is requeue or discard")
        if len(note) > 1000:
            raise UsageError("the note is longer than 1000 characters; say it shorter")
        row = next(iter(self.conn.execute("SELECT job FROM dead_letter WHERE run_id=?",
                                          (run_id,))), None)
        if row is None:
            raise RequestError(f"run {run_id} is not in the dead letter; `cronrd dead-letter "
                               "list` lists what is")
        await self._authorize_job(caller, "dead_letter_action", str(run_id), row[0],
                                  change=True)
        return await self.log.propose(C.DeadLetterAction(
            run_id=run_id, action=action, note=note, at=self.clock.now(),
            who=caller.describe()))

    async def h_audit(self, args: dict) -> dict:
        await self._consistent(args)
        limit = arg(args, "limit", int, 50)
        before = arg(args, "before", int)
        if not 1 <= limit <= 100000:
            raise UsageError("limit must be between 1 and 100000")
        return {"records": Q.audit(self.conn, limit, before),
                "applied_index": Q.applied_index(self.conn)}

    async def h_notifications(self, args: dict) -> dict:
        await self._consistent(args)
        return NH.notifications(self.conn, self.config, args)

    async def h_notify_test(self, args: dict) -> dict:
        return await NH.notify_test(self.config, self.clock, args)

    async def h_reload(self, args: dict) -> dict:
        return await self.watcher.reload()

    async def h_node_drain(self, args: dict, caller: Caller) -> dict:
        """Drain (``drained``) or undrain ``node``: no new runs are placed
        there; its running runs finish. Root, the daemon's uid, an admin token."""
        node = arg(args, "node", str, required=True)
        drained = bool(arg(args, "drained", bool, True))
        command = "node_drain" if drained else "node_undrain"
        verb = "drain" if drained else "undrain"
        what = (f"POST /api/v1/nodes/{node}/{verb}" if caller.token is not None
                else f"cronrd cluster {verb} {node}")
        await self._authorize(caller, command, node, what, lambda: check_admin(caller, what),
                              change=False)
        self.members.members()  # one host: "runs without a cluster", nothing to drain to
        await self._audit(caller, command, node, True)
        return await self.log.propose(C.DrainNode(
            origin=self.config.node_id, node=node, drained=drained,
            note=arg(args, "note", str, ""), by=caller.describe(), at=self.clock.now()))

    async def h_cluster_members(self, args: dict) -> dict:
        return self.members.members()

    async def h_cluster_add(self, args: dict) -> dict:
        return await self.members.admin("cluster_add", {
            "node": arg(args, "node", str, required=True),
            "address": arg(args, "address", str, required=True),
            "token": bool(arg(args, "token", bool, False))})

    async def h_cluster_revoke_cert(self, args: dict) -> dict:
        return await self.members.admin("cluster_revoke_cert", {
            "serial": arg(args, "serial", str, required=True),
            "reason": arg(args, "reason", str, "revoked by the operator")})

    async def h_cluster_remove(self, args: dict) -> dict:
        return await self.members.admin("cluster_remove", {
            "node": arg(args, "node", str, required=True)})

    async def h_cluster_transfer_leader(self, args: dict) -> dict:
        return await self.members.admin("cluster_transfer_leader", {
            "node": arg(args, "node", str)})


def read_log_chunk(config: Config, conn, run_id: int, offset: int) -> dict:
    """Up to LOG_CHUNK bytes of a run's log on this node, from ``offset``
    (also served to other nodes: ``cronrd logs`` on any node).

    The file is the one this node's log_dir holds for the run; the
    log_path in the run's record is never opened (whoever can commit a
    record could name any file)."""
    run = Q.get_run(conn, run_id)
    if run is None:
        raise RequestError(f"no run with id {run_id} on node {config.node_id}")
    if not isinstance(offset, int) or offset < 0:
        raise RequestError(f"offset {offset!r} of run {run_id}'s log must be a whole "
                           "number >= 0")
    path = run_log_path(config.log_dir, run)
    parts, more = [], False
    try:
        parts, offset, more = read_run_log(config.log_dir, run, offset, LOG_CHUNK,
                                           running=run.state in run_states.ACTIVE)
    except FileNotFoundError:
        # No log: a run that never started has none. One the record says
        # had a log (and that is over) lost it to log retention.
        if run.log_path and run.state not in run_states.ACTIVE:
            raise RequestError(f"log file {path} of run {run_id} is gone from node "
                               f"{config.node_id} (removed by log "
                               "retention?)") from None
    except CronrdError as exc:
        raise RequestError(f"cannot read the log of run {run_id} on node "
                           f"{config.node_id}: {exc}") from None
    except OSError as exc:
        raise RequestError(f"cannot read log file {path} of run {run_id} on node "
                           f"{config.node_id}: {exc.strerror}") from None
    # "data" alone is what older nodes read; "parts" says which bytes came
    # from which stream when (output.py). "offset" is the output position.
    return {"data": base64.b64encode(b"".join(p.data for p in parts)).decode(),
            "parts": [[p.stream, p.time, len(p.data)] for p in parts],
            "offset": offset, "more": more}


def chunk_messages(chunk: dict, decoders: dict) -> list[dict]:
    """A read_log chunk as `logs` messages ({"data", "stream", "time"}),
    text decoded per stream (``decoders`` carries partial characters over)."""
    data = base64.b64decode(chunk["data"])
    # A node without an index (an older one) sends the bytes alone.
    parts = chunk.get("parts") or ([[O.ALL, None, len(data)]] if data else [])
    out, at = [], 0
    for stream, when, length in parts:
        name = O.STREAM_NAMES.get(stream, "output")
        dec = decoders.setdefault(name, codecs.getincrementaldecoder("utf-8")("replace"))
        text = dec.decode(data[at:at + length])
        at += length
        if text:
            out.append({"data": text, "stream": name, "time": when})
    return out


def flush_messages(decoders: dict) -> list[dict]:
    """What the decoders still hold (a run's output ended mid-character)."""
    out = []
    for name, dec in decoders.items():
        tail = dec.decode(b"", final=True)
        if tail:
            out.append({"data": tail, "stream": name, "time": None})
    return out


def last_lines(msgs: list[dict], n: int) -> list[dict]:
    """The messages holding the last ``n`` lines, the first one cut at its
    line's start."""
    if n == 0:
        return []
    text = "".join(m["data"] for m in msgs)
    cut = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(n):
        cut = text.rfind("\n", 0, cut)
        if cut < 0:
            return msgs
    start, at, out = cut + 1, 0, []
    for msg in msgs:
        end = at + len(msg["data"])
        if end > start:
            out.append({**msg, "data": msg["data"][max(0, start - at):]})
        at = end
    return out


class _Pages:
    """The pages of a streamed listing (``queries.job_view_texts``), each
    read by a worker thread on a read-only connection of its own while the
    loop sends the one before: SQLite builds the JSON without the
    interpreter lock, so reading and sending overlap. A state in memory
    (tests) is read on the loop."""

    def __init__(self, conn, tz: str, match: str | None):
        self.tz, self.match = tz, match
        self.reader = None
        if conn.filename:
            try:
                self.reader = apsw.Connection(conn.filename, flags=apsw.SQLITE_OPEN_READONLY)
                self.reader.setbusytimeout(5000)
            except apsw.Error:
                self.reader = None
        self.conn = self.reader or conn
        self.next: asyncio.Future | None = None

    def _read(self, after: str | None) -> list:
        return Q.job_view_texts(self.conn, self.tz, after=after, glob=self.match,
                                limit=STREAM_PAGE)

    def _ask(self, after: str | None) -> None:
        if self.reader is None:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(self._read(after))
        else:
            fut = asyncio.get_running_loop().run_in_executor(None, self._read, after)
        self.next = fut

    def __aiter__(self):
        self._ask(None)
        return self

    async def __anext__(self) -> list:
        if self.next is None:
            raise StopAsyncIteration
        rows = await self.next
        self.next = None
        if len(rows) == STREAM_PAGE:
            self._ask(rows[-1][0])  # the next page while this one is sent
        elif not rows:
            raise StopAsyncIteration
        await asyncio.sleep(0)  # the loop's other work between pages
        return rows

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is None:
            return
        if self.next is not None and not self.next.done():
            self.next.add_done_callback(lambda _f: reader.close())  # after its last read
        else:
            reader.close()


def run_now_inputs(job: str, spec, args: dict) -> tuple[dict[str, str], str]:
    """`run-now --param NAME=VALUE --key KEY`: the values checked against the
    job's params: (canonical text) and the key; UsageError naming what is
    wrong and what is allowed."""
    given = arg(args, "params", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
        raise UsageError("argument 'params' must map parameter names to strings")
    key = arg(args, "key", str, "")
    if key:
        problem = run_params.key_problem(key)
        if problem:
            raise UsageError(f"--key {key!r}: {problem}")
    return check_run_params(job, spec.params, given), key


def _downstream_note(conn, job: str, t: int, d) -> str:
    """What a backfill's --downstream adds to a fire time (its dry run)."""
    if d.action == "skip" or getattr(d, "attempt", 1) <= 1:
        return ""
    try:
        order, _ = DS.closure(conn, job, t)
    except DS.TooMany as exc:
        return f"; downstream: {exc}"
    if not order:
        return ""
    names = ", ".join(f"{j}@{iso_utc(ft)}" for j, ft in order[:5])
    more = f" and {len(order) - 5} more" if len(order) > 5 else ""
    return f"; then downstream: {names}{more}"

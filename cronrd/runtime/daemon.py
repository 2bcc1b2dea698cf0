"""The daemon: wires storage, log, scheduler, executor, watcher and the
control socket onto one asyncio loop; handles signals and systemd."""

from __future__ import annotations

import asyncio
import base64
import codecs
import logging
import os
import resource
import signal
import sys

import psutil

from .. import __version__
from ..config import Config, check_directories
from ..errors import CronrdError, RequestError, UsageError
from ..schedule import iso_utc, make_trigger, parse_schedule
from ..state import commands as C
from ..state import run_states
from ..state import queries as Q
from ..state.machine import Effect, Refused, StateMachine
from .clock import Clock
from .access import ADMIN, JOB, READ, Caller, check_admin, check_job
from .control import ControlServer, Stream, arg
from .leadership import Leadership
from .members import open_members
from .runs.executor import Executor
from .runs.logs import read_run_log, run_log_path
from .runs.outbox import Outbox
from .scheduler import local_node, reboot_fires
from .sdnotify import Notifier
from .storage import DataDirLock, open_db
from .watcher import Watcher

log = logging.getLogger("cronrd.daemon")

HOUSEKEEPING_INTERVAL = 600.0
LOG_CHUNK = 256 * 1024  # bytes per read of a run's log (local or from another node)
# Refused control requests: the first few per uid and minute are replicated
# to the audit table, every one is counted in the daemon's log.
REFUSALS_AUDITED = 10
REFUSAL_WINDOW = 60.0
# The CLI spelling of control requests, for messages and the audit table.
CLI_NAMES = {"run_now": "run-now", "cluster_add": "cluster add",
             "cluster_revoke_cert": "cluster revoke-cert",
             "cluster_remove": "cluster remove",
             "cluster_transfer_leader": "cluster transfer-leader"}
RUN_STATES = run_states.ALL


class JournalFormatter(logging.Formatter):
    """``<prio>message`` for journald (it adds its own timestamps)."""

    PRIO = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
            logging.CRITICAL: 2}

    def format(self, record):
        return f"<{self.PRIO.get(record.levelno, 6)}>{super().format(record)}"


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(JournalFormatter("%(name)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("cronrd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class Daemon:
    def __init__(self, config: Config, clock: Clock | None = None):
        self.config = config
        self.clock = clock or Clock()
        self.started_at = self.clock.now()
        self.notifier = Notifier()
        self.stop_event: asyncio.Event | None = None
        self.waiters: dict[int, list[asyncio.Future]] = {}
        self.tasks: list[asyncio.Task] = []
        self.ready = False  # true once job files are loaded and the scheduler runs
        self.announced = "up"
        self.exit_code = 0
        self._refusals: dict[int, tuple[float, int]] = {}  # uid -> (window start, count)

    # -- lifecycle -----------------------------------------------------------------
    def _prepare_dirs(self) -> None:
        cfg = self.config
        old = os.umask(0o022)  # parents made on the way are not writable by others either
        try:
            os.makedirs(cfg.data_dir, mode=0o700, exist_ok=True)
            os.makedirs(cfg.log_dir, mode=0o750, exist_ok=True)
            os.makedirs(os.path.dirname(cfg.socket) or ".", mode=0o755, exist_ok=True)
        finally:
            os.umask(old)
        check_directories(cfg)  # as root: none of them may be changed by another user

    def _raise_nofile(self) -> int:
        """Raise the soft open-file limit to the hard one (each run holds a few
        descriptors, each client one); return the soft limit found, which
        jobs get back."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            except (ValueError, OSError) as exc:
                log.warning("event=nofile_limit_not_raised soft=%d hard=%d error=\"%s\"",
                            soft, hard, exc)
                return soft
        log.info("event=nofile_limit soft=%d hard=%d was=%d max_running=%d", hard, hard, soft,
                 self.config.max_running)
        return soft

    async def run(self) -> int:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        job_nofile = self._raise_nofile()
        self._prepare_dirs()
        self.lock = DataDirLock(cfg.data_dir)
        self.lock.acquire()
        self.conn = open_db(cfg.state_db)
        self.machine = StateMachine(self.conn, node_id=cfg.node_id)
        # One host or a cluster: the members and their log (members.py).
        self.members = open_members(cfg, self.machine, self.clock)
        self.members.read_log = self._read_log_chunk
        self.log = self.members.log
        self.outbox = Outbox(cfg.local_db)
        self.executor = Executor(cfg, self.log, self.conn, self.clock,
                                 lease=self.members.lease_fresh, outbox=self.outbox,
                                 others_can_run=lambda: len(self.members.member_ids()) > 1)
        self.executor.job_nofile = job_nofile
        self.leadership = Leadership(cfg, self.log, self.conn, self.clock, self.members)
        self.log.subscribe(self._on_effects)
        self.watcher = Watcher(cfg.jobs_dir, self.log, self.conn, self.clock,
                               interval=cfg.watch_interval, node=cfg.node_id)
        self.control = ControlServer(cfg.socket, self._handlers(), cfg.socket_group)
        await self.control.start()
        for sig, fn in ((signal.SIGTERM, self.request_stop), (signal.SIGINT, self.request_stop),
                        (signal.SIGHUP, self.watcher.kick)):
            loop.add_signal_handler(sig, fn)
        log.info("event=starting version=%s node=%s pid=%d socket=%s data_dir=%s log_dir=%s "
                 "jobs_dir=%s timezone=%s", __version__, cfg.node_id, os.getpid(), cfg.socket,
                 cfg.data_dir, cfg.log_dir, cfg.jobs_dir, cfg.timezone)
        await self.members.start()
        # Caught up with the cluster before acting on the state.
        await self.members.wait_caught_up()
        if self.stop_event.is_set():  # SIGTERM while waiting for the cluster
            await self._shutdown()
            return self.exit_code
        # Job files first: runs left from before the restart are settled
        # against the current definitions (a fixed or deleted file counts).
        await self.watcher.reload()
        replayed = self.executor.replay_outbox()
        settled = await self.executor.reconcile()
        if settled["lost"] or settled["resumed"] or replayed:
            log.info("event=reconciled lost=%d resumed=%d outbox=%d", settled["lost"],
                     settled["resumed"], replayed)
        if self._first_start_since_boot():
            now = self.clock.now()
            fires = reboot_fires(self.conn, self._node_view(), int(psutil.boot_time()), now)
            results = await asyncio.gather(*(self.log.propose(f) for f in fires),
                                           return_exceptions=True)
            for res in results:
                if isinstance(res, Exception) and not isinstance(res, Refused):
                    log.error("event=reboot_fire_failed error=\"%s\"", res)
            self._mark_boot_seen()  # the @reboot fires are committed: this boot is seen
        await self._announce("up")
        self.leadership.start()  # runs the scheduler whenever this node leads
        self.tasks += [loop.create_task(self._watch_removal()),
                       loop.create_task(self._keep_announced()),
                       loop.create_task(self.watcher.run()),
                       loop.create_task(self._housekeeping())]
        if self.notifier.watchdog_interval:
            self.tasks.append(loop.create_task(self._watchdog()))
        jobs = len(Q.jobs(self.conn))
        self.ready = True
        self.notifier.ready(f"{jobs} jobs")
        log.info("event=ready jobs=%d applied_index=%d", jobs, self.machine.applied_index)
        if sys.stderr.isatty():
            conf = f" --config {cfg.path}" if cfg.path else ""
            # The command as it was typed here (e.g. .venv/bin/cronrd), so that
            # the hint works without an activated virtualenv.
            prog = sys.argv[0] if os.path.basename(sys.argv[0]) == "cronrd" else \
                f"{sys.executable} -m cronrd"
            print(f"\ncronrd node {cfg.node_id} is running {jobs} jobs from {cfg.jobs_dir}\n"
                  f"  socket  {cfg.socket}\n  state   {cfg.data_dir}\n  logs    {cfg.log_dir}\n"
                  f"In another terminal: {prog}{conf} status | jobs | runs | logs JOB\n"
                  "Stop with Ctrl-C.\n", file=sys.stderr, flush=True)
        await self.stop_event.wait()
        await self._shutdown()
        return self.exit_code

    # -- @reboot: once per host boot, as Debian's cron does it ----------------------
    @staticmethod
    def _boot_id() -> str:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                return f.read().strip()
        except OSError:
            return str(int(psutil.boot_time()))

    def _boot_marker(self) -> str:
        return os.path.join(self.config.data_dir, "last_boot_id")

    def _first_start_since_boot(self) -> bool:
        try:
            with open(self._boot_marker()) as f:
                return f.read().strip() != self._boot_id()
        except FileNotFoundError:
            return True

    def _mark_boot_seen(self) -> None:
        tmp = self._boot_marker() + ".tmp"
        with open(tmp, "w") as f:
            f.write(self._boot_id() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._boot_marker())

    def _node_view(self):
        return local_node(self.config)

    def _own_record(self) -> dict:
        for row in Q.nodes(self.conn):
            if row["node"] == self.config.node_id:
                return row
        return {}

    async def _announce(self, state: str) -> None:
        """Tell the cluster this node takes runs (up) or is stopping (draining)."""
        self.announced = state
        addr = self._own_record().get("addr") or self.members.address()
        try:
            await asyncio.wait_for(self.log.propose(C.NodeInfo(
                node=self.config.node_id, state=state, addr=addr, tags=self.members.tags(),
                at=self.clock.now())), 5.0)
        except (CronrdError, asyncio.TimeoutError) as exc:
            log.warning("event=announce_failed state=%s error=\"%s\" retry=true", state, exc)

    async def _keep_announced(self) -> None:
        """The replicated record of this node says what it wants (an announce
        lost in a leader change is made again)."""
        while True:
            await asyncio.sleep(1.0)
            row = self._own_record()
            if row.get("state") != self.announced or \
                    sorted(row.get("tags") or ()) != sorted(self.members.tags()):
                await self._announce(self.announced)

    async def _watch_removal(self) -> None:
        removed = asyncio.ensure_future(self.members.removed.wait())
        fatal = asyncio.ensure_future(self.members.fatal.wait())
        try:
            await asyncio.wait([removed, fatal], return_when=asyncio.FIRST_COMPLETED)
        finally:
            removed.cancel()
            fatal.cancel()
        if self.members.fatal.is_set():
            self.exit_code = 1
        self.request_stop()

    def request_stop(self) -> None:
        if self.stop_event is not None:
            self.stop_event.set()
        if getattr(self, "members", None) is not None:  # not before run() made them
            self.members.give_up_waiting = True  # SIGTERM while waiting for a quorum

    async def _shutdown(self) -> None:
        cfg = self.config
        log.info("event=stopping mode=%s grace_s=%g", cfg.shutdown_mode, cfg.shutdown_grace)
        self.notifier.stopping()
        if self.ready and len(self.members.member_ids()) > 1 and \
                not self.members.removed.is_set() and not self.members.fatal.is_set():
            await self._hand_over()  # to the other members, if there are any
        await self.leadership.stop()
        self.watcher.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.executor.shutdown(cfg.shutdown_mode, cfg.shutdown_grace)
        await self.log.drain()
        await self.members.stop()
        self.outbox.close()
        await self.control.close()
        self.conn.close()
        self.lock.release()
        log.info("event=stopped")

    async def _hand_over(self) -> None:
        """A graceful stop in a cluster: no new runs come here (draining), the
        leader hands over before it goes, and runs already committed to this
        node for the next moments start here on time rather than being
        declared lost later."""
        await self._announce("draining")
        await self.members.transfer_before_stop()
        deadline = self.clock.monotonic() + 3.0
        while self.clock.monotonic() < deadline:
            now = self.clock.now()
            due_soon = any(now < (r["due_at"] or 0) <= now + 2.0 for r in Q.runs_for_node(
                self.conn, self.config.node_id, ("assigned",)))
            if not due_soon and not self.executor.gates_pending():
                break
            await asyncio.sleep(0.05)

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                active = self.executor.logs_in_use()
                removed = await loop.run_in_executor(None, self.executor.prune_logs, active)
                now = self.clock.now()
                res = {}
                if self.log.is_leader:  # history is pruned once, for every node
                    res = await self.log.propose_as_leader(C.Prune(
                        before=now - self.config.history_retention, at=now))
                if removed or res.get("runs_deleted"):
                    log.info("event=pruned logs=%d runs=%d", removed, res.get("runs_deleted", 0))
            except Exception as exc:  # never let housekeeping die for good
                log.warning("event=housekeeping_failed error=\"%s\"", exc)
            await asyncio.sleep(HOUSEKEEPING_INTERVAL)

    async def _watchdog(self) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(self.notifier.watchdog_interval / 2)

    # -- effects -----------------------------------------------------------------------
    def _on_effects(self, effects: list[Effect]) -> None:
        for listener in (self.executor.on_effects, self.leadership.on_effects):
            try:
                listener(effects)
            except Exception:
                log.exception("event=effect_listener_failed")
        for eff in effects:
            if eff.kind == "run_done" and eff.run is not None:
                for fut in self.waiters.pop(eff.run["run_id"], []):
                    if not fut.done():
                        fut.set_result(eff.run)

    def _spawn(self, fut) -> None:
        def done(f):
            if not f.cancelled() and f.exception() is not None:
                log.warning("event=proposal_failed error=\"%s\"", f.exception())
        fut.add_done_callback(done)

    async def _wait_run(self, run_id: int) -> dict:
        run = Q.get_run(self.conn, run_id)
        if run is not None and run["state"] not in run_states.ACTIVE:
            return run
        fut = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run_id, []).append(fut)
        return await fut

    # -- control handlers ------------------------------------------------------------------
    # Who may call what (access.py): READ anyone who reaches the socket, JOB
    # root, the daemon's uid or the job's own user (the handler checks, it
    # knows the job), ADMIN root and the daemon's uid only.
    def _handlers(self) -> dict:
        table = {
            "status": (READ, self.h_status), "jobs": (READ, self.h_jobs),
            "job": (READ, self.h_job), "runs": (READ, self.h_runs),
            "run": (READ, self.h_run), "audit": (READ, self.h_audit),
            "cluster_members": (READ, self.h_cluster_members),
            "logs": (JOB, self.h_logs), "run_now": (JOB, self.h_run_now),
            "pause": (JOB, self.h_pause), "resume": (JOB, self.h_resume),
            "cancel": (JOB, self.h_cancel),
            "reload": (ADMIN, self.h_reload), "cluster_add": (ADMIN, self.h_cluster_add),
            "cluster_remove": (ADMIN, self.h_cluster_remove),
            "cluster_revoke_cert": (ADMIN, self.h_cluster_revoke_cert),
            "cluster_transfer_leader": (ADMIN, self.h_cluster_transfer_leader)}
        return {name: self._guard(name, access, fn) for name, (access, fn) in table.items()}

    def _guard(self, name: str, access: str, fn):
        if access == READ:
            async def read(args: dict, caller: Caller):
                return await fn(args)
            return read
        if access == JOB:
            return fn

        async def admin(args: dict, caller: Caller):
            target = args.get("node") if isinstance(args.get("node"), str) else ""
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
        start, n = self._refusals.get(caller.uid, (now, 0))
        if now - start >= REFUSAL_WINDOW:
            if n > REFUSALS_AUDITED:
                log.warning("event=control_refused_unrecorded uid=%d user=%s count=%d "
                            "window_s=%g", caller.uid, caller.name, n - REFUSALS_AUDITED,
                            REFUSAL_WINDOW)
            start, n = now, 0
        self._refusals[caller.uid] = (start, n + 1)
        if n < REFUSALS_AUDITED:
            log.warning("event=control_refused uid=%d user=%s pid=%d command=%s target=%s "
                        "reason=\"%s\"", caller.uid, caller.name, caller.pid, command,
                        target, detail)
            self._spawn(self.log.propose(rec))

    async def _authorize_job(self, caller: Caller, command: str, target: str, job: str,
                             *, change: bool) -> None:
        spec = self._job_spec(job)
        what = f"cronrd {CLI_NAMES.get(command, command)} {target}"
        await self._authorize(caller, command, target, what,
                              lambda: check_job(caller, what, spec), change=change)

    def _job_spec(self, name: str) -> dict:
        """A job's effective spec; {} for a job that is gone (root's, then)."""
        for job in Q.jobs(self.conn):
            if job["name"] == name:
                return job["spec"]
        return {}

    def _job_or_error(self, name: str) -> dict:
        for job in Q.jobs(self.conn):
            if job["name"] == name:
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
        jobs = Q.jobs(self.conn)
        return {
            "node_id": self.config.node_id, **self.members.status(),
            "ready": self.ready,
            "version": __version__, "pid": os.getpid(),
            "started_at": iso_utc(round(self.started_at, 3)),
            "uptime_s": round(self.clock.now() - self.started_at, 3),
            "jobs": len(jobs), "paused": sum(1 for j in jobs if j["paused"]),
            "running": active.get("running", 0),
            "assigned": active.get("assigned", 0), "pending": active.get("pending", 0),
            "running_here": self.executor.running_here(),
            "conflicts": [j["conflict"] for j in jobs if j.get("conflict")],
            "applied_index": self.machine.applied_index,
            "state_digest": self.machine.state_digest,
            "problems": [str(p) for p in self.watcher.problems],
            "socket": self.config.socket, "data_dir": self.config.data_dir,
            "log_dir": self.config.log_dir, "jobs_dir": self.config.jobs_dir,
            "timezone": self.config.timezone,
        }

    def _job_view(self, job: dict, last: dict | None) -> dict:
        spec = job["spec"]
        return {
            "name": job["name"], "schedule": spec["schedule"],
            "timezone": spec.get("timezone") or self.config.timezone,
            "command": spec["command"], "enabled": spec.get("enabled", True),
            "paused": job["paused"], "description": spec.get("description", ""),
            "source": job["source"], "next_fire": iso_utc(self._next_fire(job)),
            "conflict": job.get("conflict"), "sources": job.get("sources", []),
            "last_fire": iso_utc(job["cursor"]) if job["cursor"] else None,
            "last_run": Q.run_view(last) if last else None,
            "concurrency": spec.get("concurrency"), "catchup": spec.get("catchup"),
            "run_on": spec.get("run_on"), "digest": job["digest"],
        }

    def _next_fire(self, job: dict) -> int | None:
        sched = self.leadership.scheduler
        if sched is not None and job["name"] in sched.entries:
            return sched.next_fire(job["name"])
        spec = job["spec"]  # a follower works it out from the replicated cursor
        if job["paused"] or not spec.get("enabled", True):
            return None
        try:
            trig = make_trigger(parse_schedule(spec["schedule"]),
                                spec.get("timezone") or self.config.timezone)
            return trig.next_after(max(job["cursor"], int(self.clock.now())))
        except CronrdError:
            return None

    async def h_jobs(self, args: dict) -> list:
        await self._consistent(args)
        return [self._job_view(j, Q.last_run(self.conn, j["name"])) for j in Q.jobs(self.conn)]

    async def h_job(self, args: dict) -> dict:
        await self._consistent(args)
        job = self._job_or_error(arg(args, "name", str, required=True))
        view = self._job_view(job, Q.last_run(self.conn, job["name"]))
        view["spec"] = job["spec"]
        return view

    async def h_runs(self, args: dict) -> dict:
        await self._consistent(args)
        job = arg(args, "job", str)
        state = arg(args, "state", str)
        limit = arg(args, "limit", int, 50)
        if state is not None and state not in RUN_STATES:
            raise UsageError(f"unknown state {state!r}; use one of {', '.join(RUN_STATES)}")
        if not 1 <= limit <= 100000:
            raise UsageError("limit must be between 1 and 100000")
        runs = [Q.run_view(r) for r in Q.list_runs(self.conn, job, state, limit)]
        gaps = Q.list_gaps(self.conn, job, limit) if state in (None, "skipped") else []
        return {"runs": runs, "gaps": gaps, "applied_index": self.machine.applied_index}

    async def h_run(self, args: dict) -> dict:
        await self._consistent(args)
        run_id = arg(args, "run_id", int, required=True)
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent runs")
        return Q.run_view(run)

    def _find_log_run(self, job: str, run_id: int | None) -> dict:
        if run_id is not None:
            run = Q.get_run(self.conn, run_id)
            if run is None or run["job"] != job:
                raise RequestError(f"job {job!r} has no run {run_id}; `cronrd runs {job}` "
                                   "lists its runs")
            return run
        for run in Q.list_runs(self.conn, job, None, 200):
            if run["log_path"] or run["state"] in run_states.ACTIVE:
                return run
        self._job_or_error(job)
        raise RequestError(f"job {job!r} has no run with a log yet; `cronrd run-now {job}` "
                           "starts one")

    async def h_logs(self, args: dict, caller: Caller):
        job = arg(args, "job", str, required=True)
        run = self._find_log_run(job, arg(args, "run_id", int))
        # Reading a run's output is for root, the daemon's uid and the job's user.
        await self._authorize_job(caller, "logs", job, job, change=False)
        follow = bool(arg(args, "follow", bool, False))
        return Stream(self._stream_log(run, follow))

    def _read_log_chunk(self, run_id: int, offset: int) -> dict:
        """Up to LOG_CHUNK bytes of a run's log on this node, from ``offset``
        (also served to other nodes: ``cronrd logs`` on any node).

        The file is the one this node's log_dir holds for the run; the
        log_path in the run's record is never opened (whoever can commit a
        record could name any file)."""
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id} on node {self.config.node_id}")
        if not isinstance(offset, int) or offset < 0:
            raise RequestError(f"offset {offset!r} of run {run_id}'s log must be a whole "
                               "number >= 0")
        path = run_log_path(self.config.log_dir, run)
        data = b""
        try:
            data = read_run_log(self.config.log_dir, run, offset, LOG_CHUNK)
        except FileNotFoundError:
            # No log: a run that never started has none. One the record says
            # had a log (and that is over) lost it to log retention.
            if run["log_path"] and run["state"] not in run_states.ACTIVE:
                raise RequestError(f"log file {path} of run {run_id} is gone from node "
                                   f"{self.config.node_id} (removed by log "
                                   "retention?)") from None
        except CronrdError as exc:
            raise RequestError(f"cannot read the log of run {run_id} on node "
                               f"{self.config.node_id}: {exc}") from None
        except OSError as exc:
            raise RequestError(f"cannot read log file {path} of run {run_id} on node "
                               f"{self.config.node_id}: {exc.strerror}") from None
        return {"data": base64.b64encode(data).decode(), "offset": offset + len(data),
                "more": len(data) == LOG_CHUNK}

    async def _stream_log(self, run: dict, follow: bool):
        run_id = run["run_id"]
        offset = 0
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        me = self.config.node_id
        while True:
            run = Q.get_run(self.conn, run_id) or run
            active = run["state"] in run_states.ACTIVE
            node = run["node"]
            while True:
                if node in (None, me):
                    chunk = self._read_log_chunk(run_id, offset)
                else:
                    try:
                        chunk = await self.members.call(node, "read_log", {
                            "run_id": run_id, "offset": offset})
                    except CronrdError as exc:
                        raise RequestError(
                            f"run {run_id} ran on node {node}, whose log could not be read: "
                            f"{exc}; the file is {run['log_path'] or 'in its log_dir'} on "
                            f"that host") from None
                data = base64.b64decode(chunk["data"])
                offset = chunk["offset"]
                if data:
                    yield {"data": decoder.decode(data)}
                if not chunk["more"]:
                    break
            if not follow or not active:
                tail = decoder.decode(b"", final=True)
                if tail:
                    yield {"data": tail}
                yield {"result": Q.run_view(run)}
                return
            await asyncio.sleep(0.2)

    async def h_run_now(self, args: dict, caller: Caller):
        name = arg(args, "job", str, required=True)
        self._job_or_error(name)
        await self._authorize_job(caller, "run_now", name, name, change=True)
        wait = bool(arg(args, "wait", bool, False))
        # The leader places it (node ""), honouring run_on.
        res = await self.log.propose(C.ManualRun(job=name, node="", at=self.clock.now()))
        run_id = res["run_id"]
        if not wait:
            return {"run_id": run_id, "state": res["state"]}
        return Stream(self._follow_attempts(run_id))

    async def _follow_attempts(self, run_id: int):
        """Wait for the run and any retries; yield each attempt's end."""
        while True:
            run = await self._wait_run(run_id)
            yield {"event": Q.run_view(run)}
            nxt = Q.next_attempt(self.conn, run)
            if nxt is None:
                yield {"result": Q.run_view(run)}
                return
            run_id = nxt

    async def _set_paused(self, args: dict, caller: Caller, paused: bool) -> dict:
        name = arg(args, "job", str, required=True)
        self._job_or_error(name)
        await self._authorize_job(caller, "pause" if paused else "resume", name, name,
                                  change=True)
        return await self.log.propose(C.SetPaused(name=name, paused=paused,
                                                  at=self.clock.now()))

    async def h_pause(self, args: dict, caller: Caller) -> dict:
        return await self._set_paused(args, caller, True)

    async def h_resume(self, args: dict, caller: Caller) -> dict:
        return await self._set_paused(args, caller, False)

    async def h_cancel(self, args: dict, caller: Caller) -> dict:
        run_id = arg(args, "run_id", int, required=True)
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent runs")
        await self._authorize_job(caller, "cancel", str(run_id), run["job"], change=True)
        if run["state"] not in run_states.ACTIVE:
            raise RequestError(f"run {run_id} of job {run['job']!r} is already "
                               f"{run['state']}; there is nothing to cancel")
        await self.log.propose(C.CancelRun(
            run_id=run_id, reason=f"cancelled by {caller.describe()} (`cronrd cancel`)",
            at=self.clock.now()))
        return Q.run_view(Q.get_run(self.conn, run_id) or run)

    async def h_audit(self, args: dict) -> dict:
        await self._consistent(args)
        limit = arg(args, "limit", int, 50)
        before = arg(args, "before", int)
        if not 1 <= limit <= 100000:
            raise UsageError("limit must be between 1 and 100000")
        return {"records": Q.audit(self.conn, limit, before),
                "applied_index": self.machine.applied_index}

    async def h_reload(self, args: dict) -> dict:
        return await self.watcher.reload()

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


def run_daemon(config: Config) -> int:
    setup_logging(config.log_level)
    daemon = Daemon(config)
    try:
        return asyncio.run(daemon.run())
    except CronrdError as exc:
        log.error("event=fatal error=\"%s\"", exc)
        return 1

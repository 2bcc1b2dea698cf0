"""The daemon: wires storage, the members and their log, the executor, the
leadership, the watcher, the control socket and the HTTP server onto one asyncio loop, and
owns its life cycle: signals, systemd, start-up order and shutdown order.

Its long-lived work runs as named services (tasks.py): a service that fails
is logged with its name and either restarted with a bounded back-off (the
watcher, housekeeping, the announcement, the HTTP server) or stops the daemon with exit code
1 so that systemd restarts it (the members' upkeep, the leadership, the
watchdog). Shutdown cancels and awaits every one of them. The control
commands live in control/handlers.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import faulthandler
import logging
import os
import resource
import signal
import sys
from typing import TYPE_CHECKING, Any, cast

import psutil

from .. import __version__
from ..config import Config, check_directories
from ..errors import CronrdError
from ..state import commands as C
from ..state import queries as Q
from ..state.versions import EXIT_NEWER, NewerLog
from ..state import tokens
from ..state.effects import Effect
from ..errors import Refused
from ..state.machine import StateMachine
from .clock import Clock
from .control.server import ControlServer
from .faces import CoreBridge, CoreOnly, CoreReads, FacesThread
from .faces_host import FacesHost
from .control.handlers import Handlers
from .control.logs import read_log_chunk
from .heap import Heap
from .runs.executors import offered_tags
from .leader.leadership import Leadership
from .log.base import Log
from .logfmt import setup_logging
from .loop_watch import LoopWatch
from .cluster.members import Members, open_members
from .runs import restart
from .runs.executor import Executor
from .runs.outbox import Outbox
from .runs.supervisor import boot_id
from .cluster.members import local_node
from .leader.scheduler import reboot_fires
from .sdnotify import Notifier
from .storage import CHECK_THREADS, DataDirLock, guard_thread, open_db, open_readonly
from .tasks import Changes, Services, first_of
from .jobfiles.watcher import Watcher

if TYPE_CHECKING:
    from .http.server import HttpServer

log = logging.getLogger("cronrd.daemon")

HOUSEKEEPING_INTERVAL = 600.0
ANNOUNCE_INTERVAL = 1.0   # seconds between checks that this node's record says what it wants
HAND_OVER_PATIENCE = 3.0  # seconds a stopping node waits for its runs due in the next moments
DUE_SOON = 2.0            # ... that is, due within this many seconds
FACES_ENV = "CRONRD_FACES"  # "thread": the faces in a thread of the daemon (faces.py), not a process
SETTLE_JOBS = 5.0         # seconds the first look at the job files waits for a leader to take them


class Daemon:
    def __init__(self, config: Config, clock: Clock | None = None):
        self.config = config
        self.clock = clock or Clock()
        self.started_at = self.clock.now()
        self.notifier = Notifier()
        self.stop_event: asyncio.Event | None = None
        self.services: Services | None = None
        self.applied = Changes()  # notified after each committed batch
        self.ready = False  # true once job files are loaded and the scheduler runs
        self.announced = "up"
        self.exit_code = 0

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
        try:
            return await self._run()
        except BaseException:
            host = getattr(self, "faces_host", None)
            if host is not None:
                host.kill()   # (a process that dies with this one, but this one may go on)
            raise

    async def _run(self) -> int:
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        job_nofile = self._raise_nofile()
        self._prepare_dirs()
        self.lock = DataDirLock(cfg.data_dir)
        self.lock.acquire()
        self.conn = open_db(cfg.state_db)
        # The faces' process loads its code while this one sets up (faces_host.py).
        self.faces_host: FacesHost | None = None
        if os.environ.get(FACES_ENV, "process") != "thread":
            self.faces_host = FacesHost(cfg, started_at=self.started_at)
            self.faces_host.launch()
        if os.environ.get(CHECK_THREADS):
            guard_thread(self.conn, "state")
        self.machine = StateMachine(self.conn, node_id=cfg.node_id)
        # One host or a cluster: the members and their log (cluster/members.py).
        # The critical loop's stall detector: it runs first and stops last,
        # and the clock watch asks it before it reads a round trip as an offset.
        self.loop_watch = LoopWatch()
        self.members = open_members(cfg, self.machine, self.clock,
                                    stalled=self.loop_watch.stalled_within)
        self.members.read_log = self._read_log_chunk
        self.log = self.members.log
        self.outbox = Outbox(cfg.local_db)
        self.executor = Executor(cfg, self.log, self.conn, self.clock,
                                 fence=self.members.start_fence, outbox=self.outbox,
                                 others_can_run=lambda: len(self.members.member_ids()) > 1,
                                 claims=self.members.claims)
        self.executor.job_nofile = job_nofile
        self.executor.setup_cgroups()
        self.leadership = Leadership(cfg, self.log, self.conn, self.clock, self.members)
        self.watcher = Watcher(cfg.jobs_dir, self.log, self.conn, self.clock,
                               interval=cfg.watch_interval, node=cfg.node_id,
                               hold=lambda: (self.members.clock_fence() if self.log.is_leader
                                             else None),
                               pools={p.name: p.slots for p in cfg.pools},
                               calendars={c.name for c in cfg.calendars})
        self.handlers = Handlers(cfg, self.clock, self.conn, self.machine, self.log,
                                 self.members, self.executor, self.watcher, self.leadership,
                                 started_at=self.started_at, is_ready=lambda: self.ready)
        self.log.subscribe(self._on_effects)
        # The faces (control socket, HTTP) serve in a process of their own
        # (faces_host.py, faces_child.py); what a request asks of the daemon
        # runs here, on the critical loop.
        self.faces: FacesThread | None = None
        self.http: "HttpServer | None" = None
        self.faces_conn = open_readonly(cfg.state_db)  # peers' log reads (_read_log_chunk)
        self._chunk_reader = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="cronrd-log-reads")
        if self.faces_host is None:
            await self._open_faces_thread(loop)
        else:
            host = self.faces_host
            host.attach(self.handlers, is_ready=lambda: self.ready,
                        blocking={"members_status": self.members.status,
                                  "node_views": self.members.node_views,
                                  "metrics_view": self._metrics_view,
                                  "problems": lambda: tuple(self.watcher.problems),
                                  "next_fires": self.leadership.next_fires})
            self.handlers.http_url = lambda: host.http_url
            self.handlers.http_problem = lambda: host.http_problem
            self.handlers.faces_info = lambda: {
                "pid": host.proc.pid if host.proc is not None else None, "starts": host.starts}
            await host.start()
        for sig, fn in ((signal.SIGTERM, self.request_stop), (signal.SIGINT, self.request_stop),
                        (signal.SIGHUP, self.watcher.kick), (signal.SIGUSR2, dump_tasks)):
            loop.add_signal_handler(sig, fn)
        log.info("event=starting version=%s node=%s pid=%d socket=%s data_dir=%s log_dir=%s "
                 "jobs_dir=%s timezone=%s", __version__, cfg.node_id, os.getpid(), cfg.socket,
                 cfg.data_dir, cfg.log_dir, cfg.jobs_dir, cfg.timezone)
        async with Services("daemon", self._service_failed) as self.services:
            self.services.start("loop_watch", self.loop_watch.run, restart=True)
            await self.members.start()
            self.services.start("members", self.members.run)
            self.services.start("removal", self._watch_removal)
            http, faces = self.http, self.faces
            if http is not None and faces is not None:  # /healthz and /readyz answer
                self.services.start("http", lambda: faces.run(http.run()),  # while it catches up
                                    restart=True)
            if self.faces_host is not None:
                self.services.start("faces", self.faces_host.run, restart=True)
            # Caught up with the cluster before acting on the state.
            await self.members.wait_caught_up()
            if not self.stop_event.is_set():  # else SIGTERM while waiting for the cluster
                await self._start()
                await self.stop_event.wait()
            await self._shutdown()
        self.services = None
        log.info("event=stopped")
        return self.exit_code

    async def _open_faces_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        """CRONRD_FACES=thread: the faces on a loop of their own in a thread
        of this process (faces.py), as before 0.3.0; what a request asks of
        the daemon runs on the critical loop through the bridge."""
        cfg = self.config
        self.faces = faces = FacesThread()
        faces_loop = faces.start()
        bridge = CoreBridge(loop)
        faces_conn = open_readonly(cfg.state_db)   # used on the faces' loop only
        self._faces_thread_conn = faces_conn
        across = CoreReads(self.handlers, bridge, faces_conn, faces_loop)
        # The same commands over the faces' connection: the reads of
        # faces.FACES_READS run there, wholly off the critical loop.
        # (They serve FACES_READS only: the log and members across the bridge
        # and the CoreOnly stand-ins are given for the daemon's own.)
        faces_handlers = Handlers(cfg, self.clock, faces_conn,
                                  cast(StateMachine, CoreOnly("machine")),
                                  cast(Log, across.log), cast(Members, across.members),
                                  cast(Executor, CoreOnly("executor")), self.watcher,
                                  self.leadership, started_at=self.started_at,
                                  is_ready=lambda: self.ready)
        across = CoreReads(self.handlers, bridge, faces_conn, faces_loop,
                           local=faces_handlers)
        self.control = ControlServer(cfg.socket, across.table(), cfg.socket_group)
        if cfg.http.listen is not None:
            from .http.server import HttpServer  # aiohttp only when it serves
            from .http.metrics import Metrics
            self.http = http = HttpServer(cfg.http, is_ready=lambda: self.ready,
                                   status=lambda: bridge.blocking(self.members.status),
                                   metrics=Metrics(lambda: open_readonly(cfg.state_db),
                                                   lambda: bridge.blocking(self._metrics_view),
                                                   job_histograms=cfg.http.job_histograms),
                                   find_token=lambda secret: tokens.by_secret(faces_conn, secret),
                                   find_session=lambda secret, now: tokens.by_session(faces_conn, secret, now),
                                   list_tokens=lambda: tokens.listing(faces_conn),
                                   now=self.clock.now, reads=across)
            self.handlers.http_url = lambda: http.url
            self.handlers.http_problem = lambda: http.problem
        await faces.run(self.control.start())

    async def _start(self) -> None:
        """Settle what the last start left, then start the services."""
        cfg = self.config
        # Job files first: runs left from before the restart are settled
        # against the current definitions (a fixed or deleted file counts).
        await self.watcher.settle(SETTLE_JOBS)
        replayed = self.executor.replay_outbox()
        settled = await restart.reconcile(self.executor)
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
        services = self.services
        assert services is not None  # _start runs inside run()'s services
        services.start("leadership", self.leadership.run)  # the scheduler, while it leads
        services.start("announce", self._keep_announced, restart=True)
        services.start("watcher", self.watcher.run, restart=True)
        services.start("housekeeping", self._housekeeping, restart=True)
        services.start("heap", Heap(self.clock, self.executor.gates.times).run)
        if self.notifier.watchdog_interval:
            services.start("watchdog", self._watchdog)
        jobs = Q.count_jobs(self.conn)[0]
        self.ready = True
        if self.faces_host is not None:
            self.faces_host.push_state()   # /readyz says so before any later answer
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

    # -- @reboot: once per host boot, as Debian's cron does it ----------------------
    @staticmethod
    def _boot_id() -> str:
        """The kernel's boot id, as the run supervisors record it (or, where
        the kernel has none, the boot time)."""
        bid = boot_id()
        return bid if bid != "unknown" else str(int(psutil.boot_time()))

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

    def node_tags(self) -> tuple[str, ...]:
        """This node's tags as the cluster sees them: its configured ones,
        and ``executor:NAME`` for each executor it offers beyond local."""
        return tuple(self.members.tags()) + offered_tags()

    async def _announce(self, state: str) -> None:
        """Tell the cluster this node takes runs (up) or is stopping (draining)."""
        self.announced = state
        addr = self._own_record().get("addr") or self.members.address()
        try:
            async with asyncio.timeout(5.0):
                await self.log.propose(C.NodeInfo(
                    node=self.config.node_id, state=state, addr=addr, tags=self.node_tags(),
                    at=self.clock.now()))
        except (CronrdError, TimeoutError) as exc:
            log.warning("event=announce_failed state=%s error=\"%s\" retry=true", state, exc)

    async def _keep_announced(self) -> None:
        """The replicated record of this node says what it wants (an announce
        lost in a leader change is made again): a check every second."""
        while True:
            await asyncio.sleep(ANNOUNCE_INTERVAL)
            row = self._own_record()
            if row.get("state") != self.announced or \
                    sorted(row.get("tags") or ()) != sorted(self.node_tags()):
                await self._announce(self.announced)

    async def _watch_removal(self) -> None:
        await first_of(self.members.removed.wait(), self.members.fatal.wait())
        if self.members.fatal.is_set():
            self.exit_code = self.members.fatal_code
        self.request_stop()

    def _service_failed(self, name: str, exc: BaseException) -> None:
        """A service the daemon cannot do without failed (tasks.py logged it):
        stop, and exit non-zero so that systemd starts a fresh daemon."""
        log.error("event=stopping_after_failure service=%s error=%r hint=\"exiting with code 1 "
                  "so that systemd restarts cronrd\"", name, exc)
        self.exit_code = 1
        self.request_stop()

    def request_stop(self) -> None:
        if self.stop_event is not None:
            self.stop_event.set()
        if getattr(self, "members", None) is not None:  # not before run() made them
            self.members.give_up_waiting = True  # SIGTERM while waiting for a quorum

    async def _shutdown(self) -> None:
        """In order: hand over (the services still run), stop the services
        that act, let the executor finish, settle the log, and stop the
        members' upkeep last."""
        cfg = self.config
        assert self.services is not None  # _shutdown runs inside run()'s services
        log.info("event=stopping mode=%s grace_s=%g", cfg.shutdown_mode, cfg.shutdown_grace)
        self.notifier.stopping()
        if self.ready and len(self.members.member_ids()) > 1 and \
                not self.members.removed.is_set() and not self.members.fatal.is_set():
            await self._hand_over()  # to the other members, if there are any
        await self.services.stop("leadership")
        self.watcher.stop()
        await self.services.stop("watcher", "announce", "housekeeping", "watchdog", "removal",
                                 "http")
        await restart.shutdown(self.executor, cfg.shutdown_mode, cfg.shutdown_grace)
        await self.log.drain()
        await self.services.stop("members")
        await self.members.stop()
        self.outbox.close()
        if self.faces_host is not None:
            await self.faces_host.stop()
        if self.faces is not None:
            await self.faces.run(self.control.close())
            await self.faces.stop()
            self._faces_thread_conn.close()
        if self.http is not None:
            self.http.metrics.close()
        self._chunk_reader.shutdown(wait=True)
        self.faces_conn.close()
        self.conn.close()
        self.lock.release()

    async def _hand_over(self) -> None:
        """A graceful stop in a cluster: no new runs come here (draining), the
        leader hands over before it goes, and runs already committed to this
        node for the next moments start here on time rather than being
        declared lost later. Checked again at each committed batch (a run
        started, a gate decided) and when the next of those runs falls due."""
        await self._announce("draining")
        await self.members.transfer_before_stop()
        deadline = self.clock.monotonic() + HAND_OVER_PATIENCE
        while (left := deadline - self.clock.monotonic()) > 0:
            now = self.clock.now()
            due = [r.due_at or 0 for r in Q.runs_for_node(self.conn, self.config.node_id,
                                                             ("assigned",))
                   if now < (r.due_at or 0) <= now + DUE_SOON]
            if not due and not self.executor.gates_pending():
                break
            await self.applied.wait(min([left, *(d - now + 0.05 for d in due)]))

    async def _housekeeping(self) -> None:
        """Log retention and history pruning, every HOUSEKEEPING_INTERVAL (a
        timer). A pass that fails for a known reason is logged and the next
        one tries again; anything else fails the service (restarted)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                active = self.executor.logs_in_use()
                removed = await loop.run_in_executor(None, self.executor.prune_logs, active)
                now = self.clock.now()
                res = {}
                if self.log.is_leader:  # history is pruned once, for every node
                    res = await self.log.propose_as_leader(C.Prune(
                        before=now - self.config.history_retention, at=now,
                        keep=self.config.history_max_runs_per_job))
                    deleted = res.get("runs_deleted", 0)
                    while res.get("more") and self.log.is_leader:  # in bounded steps
                        await asyncio.sleep(0.1)
                        res = await self.log.propose_as_leader(C.Prune(
                            before=now - self.config.history_retention, at=self.clock.now(),
                            keep=self.config.history_max_runs_per_job))
                        deleted += res.get("runs_deleted", 0)
                    res = {"runs_deleted": deleted}
                if removed or res.get("runs_deleted"):
                    log.info("event=pruned logs=%d runs=%d", removed, res.get("runs_deleted", 0))
            except (CronrdError, OSError) as exc:
                log.warning("event=housekeeping_failed error=\"%s\"", exc)
            await asyncio.sleep(HOUSEKEEPING_INTERVAL)

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval
        assert interval is not None  # started only when systemd asks for one
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval / 2)

    # -- effects -----------------------------------------------------------------------
    def _on_effects(self, effects: list[Effect]) -> None:
        for listener in (self.executor.on_effects, self.leadership.on_effects,
                         self.handlers.on_effects, self.members.on_effects):
            try:
                listener(effects)
            except Exception:
                log.exception("event=effect_listener_failed")
        self.applied.notify()

    def _metrics_view(self) -> dict:
        """This node's live Raft view for /metrics (http/metrics.py)."""
        from .http.metrics import live_view
        node = getattr(self.members, "node", None)  # a cluster's Raft node
        sched = self.leadership.scheduler if self.log.is_leader else None
        fires = {} if sched is None else {  # a dict walk: ~10 ms for 100,000 jobs
            name: sched.next_fire(name) for name in sched.entries}
        return live_view(self.config.node_id,
                         {**self.members.status(),
                          "leader_changes": getattr(node, "leader_changes", 0)},
                         self.machine.applied_index, self.log.is_leader,
                         {name: t for name, t in fires.items() if t is not None},
                         loop_stalls=self.loop_watch.histogram(), pid=os.getpid())

    async def _read_log_chunk(self, run_id: int, offset: int) -> dict:
        """A chunk of a run's log on this node, for a peer (`cronrd logs` on
        another node): read in a thread of its own, over a read-only
        connection, as this node's own `logs` is read by its faces; a big
        file or a slow disk holds no Raft message, claim or gate."""
        return await asyncio.get_running_loop().run_in_executor(
            self._chunk_reader, read_log_chunk, self.config, self.faces_conn, run_id, offset)


def dump_tasks() -> None:
    """``kill -USR2 PID``: every task of the event loop, with the chain of
    awaits it is suspended in, to the log: what a daemon whose threads are
    idle (USR1) waits for (a term that never ends, a request that never
    returns)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"  {task.get_name()}: {awaiting(task.get_coro())}" for task in tasks]
    log.warning("event=tasks count=%d\n%s", len(tasks), "\n".join(lines))


def awaiting(coro: Any) -> str:
    """Where a suspended coroutine waits: outermost first, ``a > b > c``."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts: list[str] = []
    while coro is not None and len(parts) < 30:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        path = frame.f_code.co_filename
        path = ("cronrd/" + os.path.relpath(path, here) if path.startswith(here)
                else os.path.basename(path))
        parts.append(f"{path}:{frame.f_lineno}:{frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " > ".join(parts) or "-"


def run_daemon(config: Config) -> int:
    setup_logging(config.log_level)
    # `kill -USR1 PID` writes every thread's stack to stderr (the journal):
    # where a daemon that does not answer, or does not stop, is stuck.
    daemon = Daemon(config)

    def to_faces(signum: int, frame: Any) -> None:
        host = getattr(daemon, "faces_host", None)  # (the faces' process dumps its own)
        if host is not None and host.proc is not None and host.proc.poll() is None:
            os.kill(host.proc.pid, signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, to_faces)   # after the dump below (chained)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)
    try:
        return asyncio.run(daemon.run())
    except NewerLog as exc:   # its state or log needs a newer cronrd: restarts cannot help
        log.error("event=version_refused error=\"%s\"", exc)
        return EXIT_NEWER
    except CronrdError as exc:
        log.error("event=fatal error=\"%s\"", exc)
        return 1

"""History with the daemon down: the read commands answered from the state
database on disk, opened read-only.

When nothing listens on the control socket and no daemon holds the
data_dir's lock, `cronrd status | jobs | show | runs | logs | audit | explain`
read the node's own copy of the replicated state (the same queries the
daemon runs, control/reads.py and control/explain.py) and say on stderr that they do:
"daemon not running; state as of T". Changes (run-now, pause, cancel, ...) still need the daemon.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import TYPE_CHECKING, Any, Callable

from .config import Config, start_hint
from .errors import DaemonUnavailable, RequestError
from .runtime.clock import now as wall_now
from .schedule import iso_utc

if TYPE_CHECKING:
    from .client import Client

# Commands answered here; every other one needs the daemon.
READS = ("status", "jobs", "job", "runs", "run", "logs", "audit", "explain", "graph",
         "notifications", "pools")


def daemon_holds(data_dir: str) -> bool | None:
    """Does a daemon hold data_dir's lock (True), not (False), or is that
    unknown here (None: no lock file, or it cannot be opened)?"""
    path = os.path.join(data_dir, "lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


class Offline:
    """The read commands of the control socket, answered from the state
    database (``call`` has the signature of ``Client.call``)."""

    def __init__(self, config: Config, why: str):
        self.config = config
        path = config.state_db
        if not os.path.exists(path):
            raise DaemonUnavailable(
                f"{why}; and there is no state database at {path} to read instead (the "
                "daemon has never run with this config?): start it with `systemctl start "
                "cronrd` or `cronrd daemon --config FILE`")
        import apsw
        try:
            self.conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
            self.conn.setbusytimeout(2000)
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except apsw.Error as exc:
            hint = ("run it as root (or the daemon's user) to read the history"
                    if isinstance(exc, (apsw.CantOpenError, apsw.PermissionsError))
                    or not os.access(path, os.R_OK) else "check the file")
            raise DaemonUnavailable(f"{why}; the state database {path} cannot be read "
                                    f"either ({exc}): {hint}") from None
        mtimes = [os.stat(p).st_mtime for p in (path, path + "-wal") if os.path.exists(p)]
        self.as_of = iso_utc(round(max(mtimes)))
        self.notice = (f"daemon not running; state as of {self.as_of} from {path} "
                       f"(read-only: changes need the daemon: {start_hint(config.path)})")

    # -- the Client interface ---------------------------------------------------------------
    def call(self, cmd: str, args: dict | None = None,
             on_message: Callable[[dict], None] | None = None) -> Any:
        handler = getattr(self, "h_" + cmd, None)
        if cmd not in READS or handler is None:
            raise DaemonUnavailable(f"`{cmd}` needs the daemon, which is not running")
        return handler(dict(args or {}), on_message)

    # -- reads -------------------------------------------------------------------------------
    def _next_fire(self, job: dict, d: dict) -> int | None:
        from .errors import CronrdError
        from .runtime.leader.scheduler import Triggers
        if job["paused"] or not d["enabled"]:
            return None
        if not hasattr(self, "_triggers"):
            self._triggers = Triggers(self.config.timezone)
        try:
            trig = self._triggers.get(d["schedule"], d["timezone"])
            return self._triggers.next_after(trig, max(job["cursor"] or 0, int(wall_now())))
        except CronrdError:
            return None

    def _meta(self, key: str):
        for (value,) in self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)):
            return value
        return None

    def _pause_note(self, name: str):
        from .state import queries as Q
        import apsw
        try:
            return Q.pause_note(self.conn, name)
        except apsw.SQLError:   # a database from before pauses were kept
            return None

    def _views(self, rows: list[dict]) -> list[dict]:
        from .runtime.control.reads import job_view
        from .state import queries as Q
        last = Q.last_runs(self.conn, [j["name"] for j in rows])
        return [job_view(j, last.get(j["name"]), self.config.timezone, self._next_fire)
                for j in rows]

    def h_status(self, args: dict, on_message) -> dict:
        from .ops import admin as A
        from .ops import typed
        from . import __version__
        from .state import queries as Q
        from .state import versions as V
        typed.parse(A.Status, args)  # the arguments the daemon takes (none used here)
        active = Q.count_active(self.conn)
        jobs, paused = Q.count_jobs(self.conn)
        return {
            "node_id": self.config.node_id, "role": "daemon not running",
            "leader": None, "offline": True, "state_as_of": self.as_of,
            "jobs": jobs, "paused": paused, "running": active.get("running", 0),
            "assigned": active.get("assigned", 0), "pending": active.get("pending", 0),
            "conflicts": Q.conflicts(self.conn),
            "maintenance": self._pause_note(""),
            "pools": self._pools_brief(),
            "applied_index": int(self._meta("applied_index") or 0),
            "state_digest": self._meta("chain"),
            "socket": self.config.socket, "data_dir": self.config.data_dir,
            "log_dir": self.config.log_dir, "jobs_dir": self.config.jobs_dir,
            # what this state recorded, and what this cronrd applies
            "versions": {"cluster_version": V.recorded(self.conn), "applies": V.APPLY_VERSION,
                         "release": __version__, "members": {}, "mixed": False,
                         "behind": []},
        }

    def h_jobs(self, args: dict, on_message) -> Any:
        from .ops import requests as R
        from .ops import typed
        from .state import queries as Q
        req = typed.parse(R.ListJobs, args)
        match = req.match
        if req.stream:
            after, count = None, 0
            while True:
                rows = Q.jobs(self.conn, after=after, glob=match, limit=1000, as_dicts=True)
                if not rows:
                    break
                count += len(rows)
                if on_message is not None:
                    on_message({"data": ",\n".join(json.dumps(v, sort_keys=True)
                                                   for v in self._views(rows))})
                after = rows[-1]["name"]
            return {"jobs": count}
        limit = req.limit or 1000
        rows = Q.jobs(self.conn, after=req.after, glob=match, limit=limit, as_dicts=True)
        return {"jobs": self._views(rows),
                "next": rows[-1]["name"] if len(rows) == limit else None}

    def h_job(self, args: dict, on_message) -> dict:
        from .ops import requests as R
        from .ops import typed
        from .jobspec.as_written import effective
        from .runtime.control.reads import as_written, job_details
        from .state import queries as Q
        req = typed.parse(R.ShowJob, args)  # as the daemon: a name is required
        name = req.name
        found = Q.jobs(self.conn, name=name)
        if not found:
            raise RequestError(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
        job = found[0]
        view = self._views([dict(job, spec=job["spec"].to_dict())])[0]
        view["spec"] = job["spec"].to_dict()
        details = job_details(self.conn, job, view, wall_now(), req.next, [])
        details["written"] = as_written(view, self.config.node_id, self.config.jobs_dir)
        details["effective"] = [list(e) for e in effective(job["spec"])]
        details["pause"] = self._pause_note(name) if job["paused"] else None
        details["maintenance"] = self._pause_note("")
        view.update(details)
        return view

    def h_runs(self, args: dict, on_message) -> dict:
        from .ops import requests as R
        from .ops import typed
        from .runtime.control.reads import runs_listing
        return runs_listing(self.conn, typed.parse(R.ListRuns, args), self.config.timezone,
                            int(self._meta("applied_index") or 0))

    def h_run(self, args: dict, on_message) -> dict:
        from .ops import requests as R
        from .ops import typed
        from .state import queries as Q
        run_id = typed.parse(R.ShowRun, args).run_id
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent runs")
        return run.view()

    def h_explain(self, args: dict, on_message) -> dict:
        """The trail with the members as last announced (no health known)."""
        from .explain.explain import OFFLINE_NODES, explain, nodes_from_state
        from .ops import admin as A
        from .ops import typed
        return explain(self.conn, typed.parse(A.Explain, args), now=wall_now(),
                       default_tz=self.config.timezone,
                       nodes=nodes_from_state(self.conn), nodes_note=OFFLINE_NODES)

    def _pools_brief(self) -> list:
        import apsw
        from .runtime.control.reads import pools_brief
        try:
            return pools_brief(self.conn)
        except apsw.SQLError:   # a database from before pools
            return []

    def h_pools(self, args: dict, on_message) -> dict:
        from .ops import typed
        from .ops import workflows as W
        from .runtime.control.reads import pools_view
        typed.parse(W.Pools, args)
        return pools_view(self.conn, self.config)

    def h_graph(self, args: dict, on_message) -> dict:
        from .ops import requests as R
        from .ops import typed
        from .runtime.control.reads import dependency_graph
        return dependency_graph(self.conn, typed.parse(R.Graph, args).job)

    def h_audit(self, args: dict, on_message) -> dict:
        from .ops import typed
        from .ops import workflows as W
        from .state import queries as Q
        req = typed.parse(W.Audit, args)
        return {"records": Q.audit(self.conn, req.limit, req.before),
                "applied_index": int(self._meta("applied_index") or 0)}

    def h_notifications(self, args: dict, on_message) -> dict:
        from .ops import typed
        from .ops import workflows as W
        from .runtime.control.notifications import notifications
        return notifications(self.conn, self.config, typed.parse(W.Notifications, args))

    def h_logs(self, args: dict, on_message) -> dict | None:
        """The runs' log files on this node (the daemon is not there to ask
        another node for one), as the daemon's `logs` sends them
        (control/handlers.py): {"run"}, the output, {"end"} per run. Nothing to
        follow with the daemon down."""
        from .ops import admin as A
        from .ops import typed
        from .runtime.control.logs import (chunk_messages, flush_messages, last_lines,
                                              read_log_chunk)
        from .state import queries as Q
        req = typed.parse(A.ShowLogs, args)
        job, run_id, since, lines = req.job, req.run_id, req.since, req.lines

        def started(r) -> bool:
            return r.started_at is not None or bool(r.log_path)
        if run_id is not None:
            run = Q.get_run(self.conn, run_id)
            if run is None or run.job != job:
                raise RequestError(f"job {job!r} has no run {run_id}; `cronrd runs {job}` "
                                   "lists its runs")
            runs = [run]
        else:
            recent = Q.list_runs(self.conn, job, None, 1000 if since is not None else 200)
            if since is not None:
                runs = sorted((r for r in recent if started(r) and (r.started_at or 0) >= since),
                              key=lambda r: r.run_id)
            else:
                runs = [r for r in recent if started(r)][:1]
            if not recent or (since is None and not runs):
                from .runtime.control.reads import need_job_or_history
                need_job_or_history(self.conn, job)
                if since is None:
                    raise RequestError(f"job {job!r} has no run that started yet")
        emit = on_message or (lambda msg: None)
        for i, run in enumerate(runs):
            if run.node not in (None, self.config.node_id):
                raise RequestError(f"run {run.run_id} ran on node {run.node}; with the daemon "
                                   f"down only this node's logs can be read: run `cronrd logs "
                                   f"{job} --run {run.run_id}` on {run.node}")
            emit({"run": run.view()})
            body: list[dict] = []
            decoders: dict = {}
            offset = 0
            while started(run):
                chunk = read_log_chunk(self.config, self.conn, run.run_id, offset)
                offset = chunk["offset"]
                body += chunk_messages(chunk, decoders)
                if not chunk["more"]:
                    break
            body += flush_messages(decoders)
            for msg in (last_lines(body, lines) if lines is not None and i == 0 else body):
                emit(msg)
            emit({"end": run.view()})
        return runs[-1].view() if runs else None


class ReadClient:
    """A control-socket client whose read commands fall back to the state
    database when no daemon is running (``notice`` is told once)."""

    def __init__(self, client: Client, config_loader: Callable[[], Config | None],
                 notice: Callable[[str], None]) -> None:
        self.client = client
        self.config_loader = config_loader
        self.notice = notice
        self.offline: Offline | None = None

    def call(self, cmd: str, args: dict | None = None,
             on_message: Callable[[dict], None] | None = None) -> Any:
        from .errors import DaemonNotRunning
        if self.offline is None:
            try:
                return self.client.call(cmd, args, on_message)
            except DaemonNotRunning as exc:
                if cmd not in READS:
                    raise
                self.offline = self._open(exc)
                self.notice(self.offline.notice)
        if args and args.get("follow"):
            raise DaemonUnavailable("the daemon is not running: there is nothing to follow "
                                    "(without -f the log is read from disk)")
        return self.offline.call(cmd, args, on_message)

    def _open(self, exc: Exception) -> Offline:
        config = self.config_loader()
        if config is None:
            raise exc
        held = daemon_holds(config.data_dir)
        if held:
            raise DaemonUnavailable(
                f"{exc}; but a daemon holds {config.data_dir}: it listens on another socket "
                "than the one asked (check --socket and the config's socket)") from None
        return Offline(config, str(exc).split(";")[0])

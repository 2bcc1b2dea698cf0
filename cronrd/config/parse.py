"""The top-level keys of the config -> ``Config`` (the ``cluster:`` section: :mod:`.cluster`)."""

from __future__ import annotations

import difflib
import os
import socket as _socket

from cronrd.errors import ScheduleError
from cronrd.schedule import host_timezone, parse_duration, resolve_timezone

from .cluster import parse_cluster
from .worker import parse_worker
from .hooks import parse_hooks
from .http import parse_http
from .calendars import parse_calendars
from .pools import parse_pools
from .directories import creation_problems, jobs_dir_problems, ownership_problems
from .notifiers import parse_notifications
from .model import DEFAULT_MAX_RUNNING, KNOWN_KEYS, Config
from .problems import ConfigProblems


def parse_config(raw: object, path: str = "<config>") -> Config:
    """Validate a config given as values (what YAML gives for the file at ``path``).

    Every problem found is in the one ConfigError raised, one line each
    (``path: message``: values carry no positions; :func:`load_config` reads
    a file and adds line and column)."""
    report = ConfigProblems(path)
    config = check_config(raw, path, report)
    report.raise_if_any()
    assert config is not None  # None only with a problem: raised above
    return config


def check_config(raw: object, path: str, report: ConfigProblems, *, daemon_files: bool = False,
                 jobs_dir_exists: bool = False) -> Config | None:
    """The Config, or None once a problem has gone to ``report``.

    ``daemon_files``: also report the directories the daemon could not create
    or, as root, may not trust (what would stop its start); ``jobs_dir_exists``:
    also a jobs_dir that is not a directory (the daemon starts, runs nothing)."""
    before = len(report.problems)
    if not isinstance(raw, dict):
        report.add((), "the config must be a mapping of keys such as node_id, data_dir")
        return None
    for key in raw:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            report.add((key,), f"unknown key {key!r}{hint}", at_key=True)
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()

    def text(key: str, default: str | None) -> str | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            report.add((key,), f"{key} must be a non-empty string")
            return default
        return value

    def directory(key: str, default: str) -> str:
        value = text(key, default)
        if value is None:
            report.add((key,), f"{key} must be a non-empty string (got an empty value); "
                               f"remove the key to use the default {default}")
            value = default
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))

    def duration(key: tuple[str, ...], value: object, default: str) -> float:
        try:
            return parse_duration(value)
        except ScheduleError as exc:
            report.add(key, f"{'.'.join(key)}: {exc.message}")
            return parse_duration(default)

    node_id = text("node_id", None) or _socket.gethostname().split(".")[0]
    data_dir = directory("data_dir", "/var/lib/cronrd")
    jobs_dir = directory("jobs_dir", "/etc/cronrd.d")
    log_dir = directory("log_dir", "/var/log/cronrd")
    sock = directory("socket", "/run/cronrd/cronrd.sock")
    tz = text("timezone", None) or host_timezone()
    try:
        resolve_timezone(tz)
    except ScheduleError as exc:
        report.add(("timezone",), f"timezone: {exc.message}")
    retention = raw.get("log_retention") or {}
    if not isinstance(retention, dict):
        report.add(("log_retention",), "log_retention must be a mapping {max_age, "
                                       "max_files_per_job}")
        retention = {}
    for key in retention:
        if key not in ("max_age", "max_files_per_job"):
            report.add(("log_retention", key), f"unknown log_retention key {key!r}; use max_age "
                                               "or max_files_per_job", at_key=True)
    max_age = duration(("log_retention", "max_age"), retention.get("max_age", "30d"), "30d")
    max_files = retention.get("max_files_per_job", 500)
    if not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 1:
        report.add(("log_retention", "max_files_per_job"),
                   "log_retention.max_files_per_job must be a positive integer")
    history = duration(("history_retention",), raw.get("history_retention", "30d"), "30d")
    keep_runs = raw.get("history_max_runs_per_job", 10_000)
    if not isinstance(keep_runs, int) or isinstance(keep_runs, bool) or keep_runs < 1:
        report.add(("history_max_runs_per_job",),
                   f"history_max_runs_per_job must be a positive whole number, the run records "
                   f"kept per job (got {keep_runs!r}); the default is 10000")
    shutdown = raw.get("shutdown") or {}
    if not isinstance(shutdown, dict):
        report.add(("shutdown",), "shutdown must be a mapping "
                   "{mode: detach|wait|stop, grace: DURATION}")
        shutdown = {}
    for key in shutdown:
        if key not in ("mode", "grace"):
            report.add(("shutdown", key), f"unknown shutdown key {key!r}; known keys: mode, grace",
                       at_key=True)
    mode = shutdown.get("mode", "detach")
    if mode not in ("detach", "wait", "stop"):
        report.add(("shutdown", "mode"),
                   f"shutdown.mode must be 'detach', 'wait' or 'stop' (got {mode!r})")
    grace = duration(("shutdown", "grace"), shutdown.get("grace", "30s"), "30s")
    watch = duration(("watch_interval",), raw.get("watch_interval", "1s"), "1s")
    max_running = raw.get("max_running", DEFAULT_MAX_RUNNING)
    if not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1:
        report.add(("max_running",), f"max_running must be a positive whole number, the most "
                                     f"runs this node runs at once (got {max_running!r}); the "
                                     f"default is {DEFAULT_MAX_RUNNING}")
    accept = raw.get("accept_jobs_from")
    if accept is not None:
        if isinstance(accept, str):
            accept = [accept]
        if not isinstance(accept, list) or not accept or not all(
                isinstance(a, str) and a.strip() for a in accept):
            report.add(("accept_jobs_from",), "accept_jobs_from must be a list of node ids (self "
                                              f"for this node), e.g. [self] (got {accept!r}); "
                                              "leave it out to run the jobs every member defines")
            accept = None
        else:
            accept = tuple(sorted({node_id if a.strip() == "self" else a.strip()
                                   for a in accept}))
    level = raw.get("log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        report.add(("log_level",), f"log_level must be debug, info, warning or error (got "
                                   f"{level!r})")
    socket_group = text("socket_group", None)
    cluster = None
    if raw.get("cluster") is not None:
        cluster = parse_cluster(raw["cluster"], path, base, node_id, report,
                                load_tls=daemon_files)
    worker = None
    if raw.get("worker") is not None:
        if cluster is not None:
            report.add(("worker",), "a config has either cluster: (a member, `cronrd daemon`) "
                                    "or worker: (a worker agent, `cronrd worker`), not both; "
                                    "use one file for each")
        else:
            worker = parse_worker(raw["worker"], base, report, load_tls=daemon_files)
    pools = parse_pools(raw.get("pools"), report)
    calendars = parse_calendars(raw.get("calendars"), base, report)
    notifications = parse_notifications(raw, base, report, daemon_files=daemon_files)
    http = parse_http(raw.get("http"), base, report, load_tls=daemon_files)
    hooks = parse_hooks(raw.get("hooks"), base, report, load_secrets=daemon_files)
    paths = {"data_dir": data_dir, "log_dir": log_dir, "jobs_dir": jobs_dir, "socket": sock}
    found = []
    if daemon_files:
        found += creation_problems(paths) + ownership_problems(paths)
    if jobs_dir_exists:
        found += jobs_dir_problems(paths)
    for key, message in found:
        report.add((key,), message)
    if len(report.problems) > before:
        return None
    return Config(node_id=node_id, data_dir=data_dir, jobs_dir=jobs_dir, socket=sock,
                  log_dir=log_dir, timezone=tz, socket_group=socket_group,
                  log_max_age=max_age, log_max_files_per_job=max_files,
                  history_retention=history, history_max_runs_per_job=keep_runs,
                  shutdown_mode=mode, shutdown_grace=grace,
                  log_level=level, watch_interval=min(max(watch, 0.1), 60.0), path=path,
                  max_running=max_running, accept_jobs_from=accept, cluster=cluster,
                  worker=worker,
                  notifications=notifications, pools=pools, http=http, hooks=hooks,
                  calendars=calendars)

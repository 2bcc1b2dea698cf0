"""The top-level keys of the config -> ``Config`` (the ``cluster:`` section: :mod:`.cluster`)."""

from __future__ import annotations

import difflib
import os
import socket as _socket

from cronrd.errors import ScheduleError
from cronrd.schedule import host_timezone, parse_duration, resolve_timezone

from .cluster import parse_cluster
from .model import DEFAULT_MAX_RUNNING, KNOWN_KEYS, Config
from .problems import _err


def parse_config(raw: object, path: str = "<config>") -> Config:
    if not isinstance(raw, dict):
        raise _err(path, "the config must be a mapping of keys such as node_id, data_dir")
    for key in raw:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise _err(path, f"unknown key {key!r}{hint}")
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()

    def text(key: str, default: str | None) -> str | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise _err(path, f"{key} must be a non-empty string")
        return value

    def directory(key: str, default: str) -> str:
        value = text(key, default)
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))

    node_id = text("node_id", None) or _socket.gethostname().split(".")[0]
    data_dir = directory("data_dir", "/var/lib/cronrd")
    jobs_dir = directory("jobs_dir", "/etc/cronrd.d")
    log_dir = directory("log_dir", "/var/log/cronrd")
    sock = directory("socket", "/run/cronrd/cronrd.sock")
    tz = text("timezone", None) or host_timezone()
    try:
        resolve_timezone(tz)
        retention = raw.get("log_retention") or {}
        if not isinstance(retention, dict):
            raise _err(path, "log_retention must be a mapping {max_age, max_files_per_job}")
        for key in retention:
            if key not in ("max_age", "max_files_per_job"):
                raise _err(path, f"unknown log_retention key {key!r}; use max_age or "
                                 "max_files_per_job")
        max_age = parse_duration(retention.get("max_age", "30d"))
        max_files = retention.get("max_files_per_job", 500)
        if not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 1:
            raise _err(path, "log_retention.max_files_per_job must be a positive integer")
        history = parse_duration(raw.get("history_retention", "30d"))
        shutdown = raw.get("shutdown") or {}
        if not isinstance(shutdown, dict):
            raise _err(path, "shutdown must be a mapping {mode: wait|stop, grace: DURATION}")
        mode = shutdown.get("mode", "wait")
        if mode not in ("wait", "stop"):
            raise _err(path, f"shutdown.mode must be 'wait' or 'stop' (got {mode!r})")
        grace = parse_duration(shutdown.get("grace", "30s"))
        watch = parse_duration(raw.get("watch_interval", "1s"))
    except ScheduleError as exc:
        raise _err(path, exc.message) from None
    max_running = raw.get("max_running", DEFAULT_MAX_RUNNING)
    if not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1:
        raise _err(path, f"max_running must be a positive whole number, the most runs this "
                         f"node runs at once (got {max_running!r}); the default is "
                         f"{DEFAULT_MAX_RUNNING}")
    accept = raw.get("accept_jobs_from")
    if accept is not None:
        if isinstance(accept, str):
            accept = [accept]
        if not isinstance(accept, list) or not accept or not all(
                isinstance(a, str) and a.strip() for a in accept):
            raise _err(path, "accept_jobs_from must be a list of node ids (self for this node), "
                             f"e.g. [self] (got {accept!r}); leave it out to run the jobs "
                             "every member defines")
        accept = tuple(sorted({node_id if a.strip() == "self" else a.strip() for a in accept}))
    level = raw.get("log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        raise _err(path, f"log_level must be debug, info, warning or error (got {level!r})")
    cluster = None
    if raw.get("cluster") is not None:
        cluster = parse_cluster(raw["cluster"], path, base, node_id)
    return Config(node_id=node_id, data_dir=data_dir, jobs_dir=jobs_dir, socket=sock,
                  log_dir=log_dir, timezone=tz, socket_group=text("socket_group", None),
                  log_max_age=max_age, log_max_files_per_job=max_files,
                  history_retention=history, shutdown_mode=mode, shutdown_grace=grace,
                  log_level=level, watch_interval=min(max(watch, 0.1), 60.0), path=path,
                  max_running=max_running, accept_jobs_from=accept, cluster=cluster)

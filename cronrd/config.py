"""Daemon configuration: YAML file -> frozen Config, validated at the edge."""

from __future__ import annotations

import difflib
import os
import socket as _socket
from dataclasses import dataclass

import yaml

from .errors import ConfigError, ScheduleError
from .schedule import host_timezone, parse_duration, parse_size, resolve_timezone

DEFAULT_CONFIG_PATH = "/etc/cronrd/cronrd.yaml"

KNOWN_KEYS = ("node_id", "data_dir", "jobs_dir", "socket", "socket_group", "timezone",
              "log_dir", "log_retention", "history_retention", "shutdown", "log_level",
              "watch_interval", "cluster")


@dataclass(frozen=True)
class Config:
    node_id: str
    data_dir: str
    jobs_dir: str
    socket: str
    log_dir: str
    timezone: str
    socket_group: str | None = None
    log_max_age: float = 30 * 86400.0       # delete run logs older than this
    log_max_files_per_job: int = 500        # and keep at most this many per job
    history_retention: float = 30 * 86400.0  # run records kept in the state
    shutdown_mode: str = "wait"             # wait | stop
    shutdown_grace: float = 30.0
    log_level: str = "info"
    watch_interval: float = 1.0
    path: str = ""

    @property
    def state_db(self) -> str:
        return os.path.join(self.data_dir, "state.db")


def config_path(explicit: str | None) -> str:
    return explicit or os.environ.get("CRONRD_CONFIG") or DEFAULT_CONFIG_PATH


def _err(path: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {msg}")


def load_config(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} not found; pass --config FILE, set CRONRD_CONFIG, or "
            f"create {DEFAULT_CONFIG_PATH} (see `man cronrd`)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    return parse_config(raw, path)


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
    level = raw.get("log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        raise _err(path, f"log_level must be debug, info, warning or error (got {level!r})")
    if raw.get("cluster") is not None:
        raise _err(path, "the cluster: section is not supported by this version yet; "
                         "remove it to run a one-node cluster")
    return Config(node_id=node_id, data_dir=data_dir, jobs_dir=jobs_dir, socket=sock,
                  log_dir=log_dir, timezone=tz, socket_group=text("socket_group", None),
                  log_max_age=max_age, log_max_files_per_job=max_files,
                  history_retention=history, shutdown_mode=mode, shutdown_grace=grace,
                  log_level=level, watch_interval=min(max(watch, 0.1), 60.0), path=path)

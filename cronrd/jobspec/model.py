"""The job model: ``JobSpec`` and its parts with their defaults, and the
results of reading job files (``Problem``, ``FileResult``, ``DirResult``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..schedule.calendars import CalendarRule
from .notify import NotifyRoute, routes_from_data

DEFAULT_JOBS_DIR = "/etc/cronrd.d"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RULE = (
    "letters, digits, '_', '.' and '-', starting with a letter or digit, "
    "at most 100 characters"
)


RETRY_ON = ("failure", "timeout")   # what retries.retry_on may name


@dataclass(frozen=True)
class RetryPolicy:
    """``retries:``. ``retry_on``: the kinds of failure retried (a
    non-zero exit or a signal, a timeout); ``not_on_exit_codes``: exit
    codes never retried (the command said retrying is pointless). A lost
    run is retried by ``on_node_loss``, not by these (decisions/exit_rules.py)."""
    max: int = 0
    delay: float = 10.0
    backoff: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.0
    retry_on: tuple[str, ...] = RETRY_ON
    not_on_exit_codes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The keys added later appear only when set (the digest of a job
        that does not use them stays what older versions compute)."""
        d: dict[str, Any] = {"max": self.max, "delay": self.delay, "backoff": self.backoff,
                             "max_delay": self.max_delay, "jitter": self.jitter}
        if self.retry_on != RETRY_ON:
            d["retry_on"] = list(self.retry_on)
        if self.not_on_exit_codes:
            d["not_on_exit_codes"] = list(self.not_on_exit_codes)
        return d

    @classmethod
    def from_dict(cls, r: Any) -> "RetryPolicy":
        if isinstance(r, RetryPolicy):
            return r
        if isinstance(r, int):
            return cls(max=r)
        kw: dict[str, Any] = {f.name: r[f.name] for f in dataclasses.fields(cls) if f.name in r}
        for f in ("delay", "backoff", "max_delay", "jitter"):
            if f in kw:
                kw[f] = float(kw[f])
        if "retry_on" in kw:
            kw["retry_on"] = tuple(str(k) for k in kw["retry_on"])
        if "not_on_exit_codes" in kw:
            kw["not_on_exit_codes"] = tuple(int(c) for c in kw["not_on_exit_codes"])
        return cls(**kw)


@dataclass(frozen=True)
class WatchSpec:
    """What makes a job a watch (jobspec/watch.py): no command; a ping is
    expected for each fire time within ``grace`` seconds of it."""
    grace: float = 3600.0

    def to_dict(self) -> dict[str, Any]:
        return {"grace": self.grace}


@dataclass(frozen=True)
class Sla:
    """What a job promises (``sla:``); the leader alerts on each miss
    (decisions/sla.py). Durations in seconds; ``finish_by`` is HH:MM in the
    job's zone. None: not promised."""
    start_within: float | None = None
    finish_within: float | None = None
    finish_by: str | None = None
    max_runtime: float | None = None
    stale_after: float | None = None
    failure_tolerance: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sla":
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            v = d.get(f.name)
            if v is None:
                continue
            kw[f.name] = (str(v) if f.name == "finish_by" else int(v)
                          if f.name == "failure_tolerance" else float(v))
        return cls(**kw)


@dataclass(frozen=True)
class RunOn:
    mode: str = "any"  # any | all | nodes | tags
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    """``limits:``: what one run may use (None: no limit). Enforced with a
    cgroup v2 where the host delegates one to cronrd, else with rlimits."""
    memory: int | None = None        # bytes
    cpu: float | None = None         # percent of one CPU (cgroup only)
    tasks: int | None = None         # processes and threads
    open_files: int | None = None    # descriptors per process

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


EXECUTOR_TYPES = ("local", "container")
CONTAINER_PULL = ("never", "missing")
CONTAINER_NETWORKS = ("none", "host")


@dataclass(frozen=True)
class ExecutorSpec:
    """``executor:``: what runs a run's command on its node
    (runtime/runs/executors.py). ``local`` (the default): the command,
    forked under the run's supervisor. ``container``: the command inside a
    container of ``image`` made by podman, under the same supervisor."""
    type: str = "local"
    image: str | None = None
    pull: str = "never"               # never | missing
    volumes: tuple[str, ...] = ()     # HOST:CONTAINER[:ro], as podman's --volume
    network: str = "none"             # none | host

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type}
        if self.type == "container":
            d.update({"image": self.image, "pull": self.pull, "network": self.network})
            if self.volumes:
                d["volumes"] = list(self.volumes)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "ExecutorSpec":
        if isinstance(d, ExecutorSpec):
            return d
        if isinstance(d, str):
            return cls(type=d)
        return cls(type=str(d.get("type", "local")), image=d.get("image"),
                   pull=str(d.get("pull", "never")),
                   volumes=tuple(str(v) for v in d.get("volumes") or ()),
                   network=str(d.get("network", "none")))


PARAM_TYPES = ("string", "int", "float", "bool", "enum")


@dataclass(frozen=True)
class Param:
    """One of ``params:``: a value a run gets as ``CRONRD_PARAM_<NAME>``
    (the name upper-cased), given with `run-now --param` or its default."""
    name: str
    type: str = "string"                  # string | int | float | bool | enum
    default: str | int | float | bool | None = None
    values: tuple[str, ...] = ()          # enum
    required: bool = False                # `run-now` must give it
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type}
        if self.default is not None:
            d["default"] = self.default
        if self.values:
            d["values"] = list(self.values)
        if self.required:
            d["required"] = True
        if self.description:
            d["description"] = self.description
        return d

    @classmethod
    def from_dict(cls, name: str, d: dict[str, Any]) -> "Param":
        default = d.get("default")
        if d.get("type") == "float" and default is not None:
            default = float(default)
        return cls(name=name, type=d.get("type", "string"), default=default,
                   values=tuple(d.get("values", ())), required=bool(d.get("required")),
                   description=d.get("description", ""))


@dataclass(frozen=True)
class Dependency:
    """One parent of ``depends_on``: job ``job``; with ``within`` (seconds) a
    success of it that ended at most that long ago satisfies it (it need not
    be new). ``line``/``col``: where the file names the parent (for
    ``cronrd validate``; not part of the definition)."""
    job: str
    within: float | None = None
    line: int = field(default=0, compare=False)
    col: int = field(default=0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job} if self.within is None else \
            {"job": self.job, "within": self.within}


TRIGGER_RULES = ("all_succeeded", "none_failed", "all_finished", "any_succeeded", "any_failed")


@dataclass(frozen=True)
class JobSpec:
    name: str
    schedule: str
    command: str | tuple[str, ...]
    timezone: str | None = None
    user: str | None = None
    group: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # sorted pairs
    working_dir: str | None = None
    timeout: float | None = None
    kill_grace: float = 10.0
    concurrency: str = "forbid"
    retries: RetryPolicy = RetryPolicy()
    # The exit codes a run succeeds with (sorted; (): just 0).
    success_exit_codes: tuple[int, ...] = ()
    catchup: str = "latest"
    catchup_window: float = 86400.0
    jitter: float = 0.0
    run_on: RunOn = RunOn()
    on_node_loss: str = "retry"
    enabled: bool = True
    description: str = ""
    max_log_bytes: int = 10485760
    max_running: int | None = None  # concurrent runs of this job on one node (None: no cap)
    max_queued: int | None = None   # waiting runs under concurrency: queue (None: 100)
    # Process controls (None: inherit; see the run's launch).
    shell: str | None = None        # runs a string command (None: /bin/sh)
    nice: int | None = None
    ioclass: str | None = None      # none | realtime | best-effort | idle
    ioprio: int | None = None       # 0..7
    umask: int | None = None
    env_file: str | None = None     # absolute path; "-/path": optional
    limits: Limits | None = None
    # Dependencies (cronrd/decisions/dependencies.py); the other three are
    # set only with depends_on.
    depends_on: tuple[Dependency, ...] = ()
    trigger_rule: str = "all_succeeded"
    on_upstream_failure: str = "skip"     # skip | fail
    wait_for_upstream: float = 0.0        # seconds a scheduled child waits at its fire time
    params: tuple[Param, ...] = ()  # sorted by name
    # Pools and priorities (cronrd/state/pools.py): the pool of the daemon
    # config whose slots its runs take, how many each takes (None: 1), its
    # priority among the pool's waiting runs (None: 0; higher first), and
    # how long after its due time a run that could not start is skipped.
    pool: str | None = None
    pool_slots: int | None = None
    priority: int | None = None
    start_deadline: float | None = None
    # A backfill run's priority (None: after every on-time run of the pool).
    backfill_priority: int | None = None
    # Who hears of its events (jobspec/notify.py); None: the cluster default
    # (the daemon config's notify), (): nobody.
    notify: tuple[NotifyRoute, ...] | None = None
    # Reliability policies: SLA alerts, and what a run that failed its last
    # retry becomes (none | dead_letter).
    sla: Sla | None = None
    on_final_failure: str = "none"
    # A running attempt silent this long (no `cronrd heartbeat` or
    # checkpoint since its start or its last one) is ended timed_out.
    heartbeat_timeout: float | None = None
    # The webhooks (the daemon config's hooks:) whose calls start the job
    # (POST /api/v1/hooks/NAME), sorted.
    triggers: tuple[str, ...] = ()
    # What runs the command (ExecutorSpec); None: local, today's fork.
    executor: ExecutorSpec | None = None
    # Which days its fire times may fall on (schedule/calendars.py); None: any.
    calendar: CalendarRule | None = None
    # A watch (jobspec/watch.py): no command, pings expected; None: a job.
    watch: WatchSpec | None = None
    source: str = ""  # file path it came from
    line: int = 0  # 1-based line of the job's mapping

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe canonical dict of the definition (no source/line).

        Keys added later (max_running, the process controls) appear only
        when set, so the digest of a job that does not use them stays what
        older versions compute."""
        d: dict[str, Any] = {
            "name": self.name,
            "schedule": self.schedule,
            "command": self.command if isinstance(self.command, str) else list(self.command),
            "timezone": self.timezone,
            "user": self.user,
            "group": self.group,
            "env": [[k, v] for k, v in self.env],
            "working_dir": self.working_dir,
            "timeout": self.timeout,
            "kill_grace": self.kill_grace,
            "concurrency": self.concurrency,
            "retries": self.retries.to_dict(),
            "catchup": self.catchup,
            "catchup_window": self.catchup_window,
            "jitter": self.jitter,
            "run_on": {"mode": self.run_on.mode, "values": list(self.run_on.values)},
            "on_node_loss": self.on_node_loss,
            "enabled": self.enabled,
            "description": self.description,
            "max_log_bytes": self.max_log_bytes,
        }
        if self.success_exit_codes:
            d["success_exit_codes"] = list(self.success_exit_codes)
        if self.max_running is not None:
            d["max_running"] = self.max_running
        if self.max_queued is not None:
            d["max_queued"] = self.max_queued
        for key in _CONTROL_KEYS:
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.limits is not None:
            d["limits"] = self.limits.to_dict()
        if self.depends_on:
            d["depends_on"] = [dep.to_dict() for dep in self.depends_on]
            d["trigger_rule"] = self.trigger_rule
            d["on_upstream_failure"] = self.on_upstream_failure
            if self.wait_for_upstream:  # (an @after job has none)
                d["wait_for_upstream"] = self.wait_for_upstream
        if self.params:
            d["params"] = {p.name: p.to_dict() for p in self.params}
        for key in _POOL_KEYS:
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.notify is not None:
            d["notify"] = [r.to_dict() for r in self.notify]
        if self.sla is not None:
            d["sla"] = self.sla.to_dict()
        if self.on_final_failure != "none":
            d["on_final_failure"] = self.on_final_failure
        if self.heartbeat_timeout is not None:
            d["heartbeat_timeout"] = self.heartbeat_timeout
        if self.triggers:
            d["triggers"] = list(self.triggers)
        if self.executor is not None and self.executor.type != "local":
            d["executor"] = self.executor.to_dict()
        if self.calendar is not None:
            d["calendar"] = self.calendar.to_dict()
        if self.watch is not None:
            d["watch"] = self.watch.to_dict()
        return d

    @property
    def success_codes(self) -> frozenset[int]:
        """The exit codes a run of the job succeeds with."""
        return frozenset(self.success_exit_codes or (0,))

    @property
    def executor_type(self) -> str:
        return self.executor.type if self.executor is not None else "local"

    @property
    def slots_needed(self) -> int:
        """The pool slots one run of the job takes (1 unless pool_slots says)."""
        return self.pool_slots or 1

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "", line: int = 0) -> "JobSpec":
        """Rebuild from ``to_dict()`` output (trusted: no validation).

        Missing keys take their defaults and unknown keys are ignored, so a
        node can read definitions written by a newer or older version.
        ``env`` may be a list of pairs (as ``to_dict`` writes it) or a dict.
        """
        kwargs: dict[str, Any] = {}
        names = {f.name for f in dataclasses.fields(cls)} - {"source", "line"}
        for key in names & d.keys():
            kwargs[key] = d[key]
        cmd = kwargs.get("command")
        if cmd is not None and not isinstance(cmd, str):
            kwargs["command"] = tuple(cmd)
        if "env" in kwargs:
            env = kwargs["env"] or ()
            pairs = env.items() if isinstance(env, dict) else env
            kwargs["env"] = tuple(sorted((str(k), str(v)) for k, v in pairs))
        if "retries" in kwargs:
            kwargs["retries"] = RetryPolicy.from_dict(kwargs["retries"])
        if "success_exit_codes" in kwargs:
            kwargs["success_exit_codes"] = tuple(int(c) for c in kwargs["success_exit_codes"] or ())
        if "run_on" in kwargs:
            ro = kwargs["run_on"]
            if not isinstance(ro, RunOn):
                kwargs["run_on"] = RunOn(mode=ro.get("mode", RunOn.mode), values=tuple(ro.get("values", RunOn.values)))
        if kwargs.get("limits") is not None and not isinstance(kwargs["limits"], Limits):
            lim = kwargs["limits"]
            names = {f.name for f in dataclasses.fields(Limits)}
            kw = {k: v for k, v in lim.items() if k in names}
            if kw.get("cpu") is not None:
                kw["cpu"] = float(kw["cpu"])
            kwargs["limits"] = Limits(**kw)
        if "depends_on" in kwargs:
            kwargs["depends_on"] = tuple(
                dep if isinstance(dep, Dependency) else Dependency(
                    job=str(dep["job"]), within=None if dep.get("within") is None
                    else float(dep["within"])) for dep in kwargs["depends_on"])
        if kwargs.get("params"):
            ps = kwargs["params"]
            if isinstance(ps, dict):
                kwargs["params"] = tuple(Param.from_dict(n, ps[n]) for n in sorted(ps))
        elif "params" in kwargs:
            kwargs["params"] = ()
        if "notify" in kwargs:
            kwargs["notify"] = routes_from_data(kwargs["notify"])
        if kwargs.get("sla") is not None and not isinstance(kwargs["sla"], Sla):
            kwargs["sla"] = Sla.from_dict(kwargs["sla"])
        for f in ("kill_grace", "catchup_window", "jitter", "wait_for_upstream"):
            if f in kwargs:
                kwargs[f] = float(kwargs[f])
        if "triggers" in kwargs:
            kwargs["triggers"] = tuple(str(t) for t in kwargs["triggers"] or ())
        if kwargs.get("executor") is not None:
            kwargs["executor"] = ExecutorSpec.from_dict(kwargs["executor"])
        if kwargs.get("calendar") is not None:
            kwargs["calendar"] = CalendarRule.from_dict(kwargs["calendar"])
        if kwargs.get("watch") is not None and not isinstance(kwargs["watch"], WatchSpec):
            kwargs["watch"] = WatchSpec(grace=float(kwargs["watch"].get("grace",
                                                                        WatchSpec.grace)))
        for f in ("timeout", "heartbeat_timeout", "start_deadline"):
            if kwargs.get(f) is not None:
                kwargs[f] = float(kwargs[f])
        return cls(source=source, line=line, **kwargs)

    def canonical(self) -> tuple[str, str]:
        """(text, digest): the canonical JSON of ``to_dict()`` (what the
        state stores, once per definition) and its sha256 hex."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)
        return text, hashlib.sha256(text.encode("utf-8")).hexdigest()

    def digest(self) -> str:
        """sha256 hex of the canonical JSON of ``to_dict()``."""
        return self.canonical()[1]


_POOL_KEYS = ("pool", "pool_slots", "priority", "start_deadline", "backfill_priority")
_CONTROL_KEYS = ("shell", "nice", "ioclass", "ioprio", "umask", "env_file")


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        """``FILE:LINE:COL: message``; ``FILE:LINE: message`` without a column,
        ``FILE: message`` for a problem of the whole file (line 0)."""
        if not self.line:
            return f"{self.path}: {self.message}"
        if not self.col:
            return f"{self.path}:{self.line}: {self.message}"
        return f"{self.path}:{self.line}:{self.col}: {self.message}"


@dataclass(frozen=True)
class FileResult:
    path: str
    jobs: tuple[JobSpec, ...]
    problems: tuple[Problem, ...]  # a file with problems may still yield its valid jobs

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class DirResult:
    files: tuple[FileResult, ...]  # sorted by path

    @property
    def jobs(self) -> dict[str, JobSpec]:
        """Valid jobs by name; the first definition of a name wins."""
        out: dict[str, JobSpec] = {}
        for f in self.files:
            for job in f.jobs:
                out.setdefault(job.name, job)
        return out

    @property
    def problems(self) -> list[Problem]:
        return [p for f in self.files for p in f.problems]

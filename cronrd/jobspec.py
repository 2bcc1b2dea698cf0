"""Job files -> frozen ``JobSpec`` values; every problem carries FILE:LINE:COL.

Job files live in one directory (``/etc/cronrd.d`` by default). Each
``*.yaml`` / ``*.yml`` file holds either one job (a mapping; the job is named
after the file stem unless ``name:`` says otherwise) or ``jobs:``, a list of
job mappings that each carry a ``name:``.

The YAML is composed into a node tree with ``yaml.SafeLoader`` and walked by
hand, so every key and value keeps its position and every problem can point
at it. Reading is bounded (``bounded_yaml``): a file over 1 MiB, nesting
deeper than 64 levels, more than 1,000 aliases or a tree that expands past
1,000,000 values is refused as a problem of that file, and any exception
while loading one file is a problem of that file too. Problems are collected, not raised: a file with one bad job still
yields its good jobs, and ``cronrd validate`` can show every mistake at once.

Conventions:

* Positions in ``Problem`` are 1-based; line 0 / column 0 means "the whole
  file" (permissions, missing directory).
* ``null`` is accepted only where it is a meaningful value: ``timeout``
  (no timeout), ``timezone`` (the daemon's zone), ``user``, ``group`` and
  ``working_dir`` (inherit from the daemon). Elsewhere it is an error that
  says to remove the key to get the default.
* YAML 1.1 booleans (``no``, ``off``, ``yes``...) where a word is expected are
  type errors that name the expected values.
* A ``jobs:`` file may carry extra top-level keys starting with ``x-``; they
  are ignored and exist to hold ``&anchors`` for ``<<:`` merge keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import pwd
import re
import stat
from dataclasses import dataclass
from typing import Any, Callable

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cronrd import bounded_yaml
from cronrd.errors import ScheduleError
from cronrd.schedule import parse_duration, parse_schedule, parse_size, resolve_timezone

__all__ = [
    "RetryPolicy",
    "RunOn",
    "JobSpec",
    "Problem",
    "FileResult",
    "DirResult",
    "NAME_RE",
    "ENV_KEY_RE",
    "DEFAULT_JOBS_DIR",
    "MAX_FILE_BYTES",
    "JOB_KEYS",
    "is_job_file_name",
    "parse_job_text",
    "load_job_file",
    "check_file_permissions",
    "load_jobs_dir",
]

DEFAULT_JOBS_DIR = "/etc/cronrd.d"
MAX_FILE_BYTES = bounded_yaml.MAX_FILE_BYTES  # a bigger job file is refused
MAX_PROBLEMS_PER_FILE = 100  # more are summed up in one last problem
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_RULE = (
    "letters, digits, '_', '.' and '-', starting with a letter or digit, "
    "at most 100 characters"
)


# --------------------------------------------------------------------------
# Data types
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    max: int = 0
    delay: float = 10.0
    backoff: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.0


@dataclass(frozen=True)
class RunOn:
    mode: str = "any"  # any | all | nodes | tags
    values: tuple[str, ...] = ()


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
    catchup: str = "latest"
    catchup_window: float = 86400.0
    jitter: float = 0.0
    run_on: RunOn = RunOn()
    on_node_loss: str = "retry"
    enabled: bool = True
    description: str = ""
    max_log_bytes: int = 10485760
    max_running: int | None = None  # concurrent runs of this job on one node (None: no cap)
    source: str = ""  # file path it came from
    line: int = 0  # 1-based line of the job's mapping

    def to_dict(self) -> dict:
        """JSON-safe canonical dict of the definition (no source/line).

        Keys added later (max_running) appear only when set, so the digest
        of a job that does not use them stays what older versions compute."""
        d = {
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
            "retries": dataclasses.asdict(self.retries),
            "catchup": self.catchup,
            "catchup_window": self.catchup_window,
            "jitter": self.jitter,
            "run_on": {"mode": self.run_on.mode, "values": list(self.run_on.values)},
            "on_node_loss": self.on_node_loss,
            "enabled": self.enabled,
            "description": self.description,
            "max_log_bytes": self.max_log_bytes,
        }
        if self.max_running is not None:
            d["max_running"] = self.max_running
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "", line: int = 0) -> "JobSpec":
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
            r = kwargs["retries"]
            if isinstance(r, RetryPolicy):
                pass
            elif isinstance(r, int):
                kwargs["retries"] = RetryPolicy(max=r)
            else:
                kw = {f.name: r[f.name] for f in dataclasses.fields(RetryPolicy) if f.name in r}
                for f in ("delay", "backoff", "max_delay", "jitter"):
                    if f in kw:
                        kw[f] = float(kw[f])
                kwargs["retries"] = RetryPolicy(**kw)
        if "run_on" in kwargs:
            ro = kwargs["run_on"]
            if not isinstance(ro, RunOn):
                kwargs["run_on"] = RunOn(mode=ro.get("mode", "any"), values=tuple(ro.get("values", ())))
        for f in ("kill_grace", "catchup_window", "jitter"):
            if f in kwargs:
                kwargs[f] = float(kwargs[f])
        if kwargs.get("timeout") is not None:
            kwargs["timeout"] = float(kwargs["timeout"])
        return cls(source=source, line=line, **kwargs)

    def digest(self) -> str:
        """sha256 hex of the canonical JSON of ``to_dict()``."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
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


# --------------------------------------------------------------------------
# Node helpers
# --------------------------------------------------------------------------

_T = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = _T + "str", _T + "int", _T + "float", _T + "bool", _T + "null"
TIMESTAMP, MERGE = _T + "timestamp", _T + "merge"

_CONSTRUCTOR = SafeConstructor()
_SCALAR_BUILDERS: dict[str, Callable[[ScalarNode], Any]] = {
    STR: lambda n: n.value,
    NULL: lambda n: None,
    BOOL: _CONSTRUCTOR.construct_yaml_bool,
    INT: _CONSTRUCTOR.construct_yaml_int,
    FLOAT: _CONSTRUCTOR.construct_yaml_float,
    TIMESTAMP: lambda n: n.value,
}

_INVALID = object()  # a value that failed validation (the problem is recorded)


def _is(node: Node, tag: str) -> bool:
    return isinstance(node, ScalarNode) and node.tag == tag


def _is_str(node: Node) -> bool:
    return _is(node, STR)


def _is_number(node: Node) -> bool:
    return _is(node, INT) or _is(node, FLOAT)


def _value(node: ScalarNode) -> Any:
    return _SCALAR_BUILDERS[node.tag](node)


def _got(node: Node) -> str:
    """Describe what the operator wrote, for '(got ...)' in messages."""
    if isinstance(node, MappingNode):
        return "got a mapping"
    if isinstance(node, SequenceNode):
        return "got a list"
    tag = node.tag
    if tag == STR:
        return f"got {node.value!r}"
    if tag == BOOL:
        word = "true" if _value(node) else "false"
        if node.value.lower() == word:
            return f"got the boolean {word}"
        return f"got {node.value}, which YAML reads as the boolean {word}"
    if tag == NULL:
        return "got an empty value (null)"
    if tag in (INT, FLOAT):
        return f"got the number {node.value}"
    if tag == TIMESTAMP:
        return f"got {node.value}, which YAML reads as a date"
    return f"got a value tagged {tag}"


def _pos(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _Ctx:
    """Collects problems for one file."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []

    def at(self, line: int, col: int, message: str) -> None:
        self.problems.append(Problem(self.path, line, col, message))

    def err(self, node: Node, message: str) -> None:
        self.at(*_pos(node), message)


def _items(ctx: _Ctx, node: MappingNode) -> dict[str, tuple[Node, Node]]:
    """Ordered ``key -> (key_node, value_node)``; reports duplicate and
    non-string keys. Supports ``<<:`` merge keys (own keys win, then earlier
    merged mappings win over later ones)."""
    own: dict[str, tuple[Node, Node]] = {}
    merged: dict[str, tuple[Node, Node]] = {}
    for knode, vnode in node.value:
        if _is(knode, MERGE):
            sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
            for src in sources:
                if not isinstance(src, MappingNode):
                    ctx.err(src, "a merge key (<<) takes an alias of a mapping or a list of them "
                                 f"({_got(src)})")
                    continue
                for k, pair in _items(ctx, src).items():
                    merged.setdefault(k, pair)
            continue
        if not _is_str(knode):
            hint = ""
            if _is(knode, BOOL):
                hint = f"; quote it: \"{knode.value}\""
            ctx.err(knode, f"keys must be strings ({_got(knode)}){hint}")
            continue
        key = knode.value
        if key in own:
            first_line = own[key][0].start_mark.line + 1
            ctx.err(knode, f"duplicate key {key!r} (first given at line {first_line}); remove one of them")
            continue
        own[key] = (knode, vnode)
    out = dict(merged)
    out.update(own)
    return out


# --------------------------------------------------------------------------
# Field validators: (ctx, key, node) -> value or _INVALID
# --------------------------------------------------------------------------

_NULL_OK = {"timeout", "timezone", "user", "group", "working_dir"}


def _null_error(ctx: _Ctx, key: str, node: Node, expected: str) -> object:
    ctx.err(node, f"{key} must be {expected} (got an empty value (null)); "
                  f"remove the key to use the default")
    return _INVALID


def _v_string(ctx: _Ctx, key: str, node: Node, expected: str = "a string") -> Any:
    if _is(node, NULL):
        if key in _NULL_OK:
            return None
        return _null_error(ctx, key, node, expected)
    if not _is_str(node):
        hint = "; quote it" if isinstance(node, ScalarNode) else ""
        ctx.err(node, f"{key} must be {expected} ({_got(node)}){hint}")
        return _INVALID
    return node.value


def _v_choice(choices: tuple[str, ...]) -> Callable[[_Ctx, str, Node], Any]:
    def check(ctx: _Ctx, key: str, node: Node) -> Any:
        expected = "one of " + ", ".join(choices)
        if _is(node, NULL):
            return _null_error(ctx, key, node, expected)
        if not _is_str(node) or node.value not in choices:
            got = _got(node)
            if _is_str(node):
                close = difflib.get_close_matches(node.value, choices, n=1)
                if close:
                    got += f"; did you mean {close[0]!r}?"
            ctx.err(node, f"{key} must be {expected} ({got})")
            return _INVALID
        return node.value

    return check


def _sched_msg(e: ScheduleError) -> str:
    return e.message if hasattr(e, "message") else str(e)


MAX_DURATION = 10 * 365 * 86400.0   # durations beyond this overflow date arithmetic
MAX_RETRIES = 10000


def _v_duration(*, positive: bool = False) -> Callable[[_Ctx, str, Node], Any]:
    def check(ctx: _Ctx, key: str, node: Node) -> Any:
        expected = "a duration such as 30s, 5m or 1h30m"
        if _is(node, NULL):
            if key in _NULL_OK:
                return None
            return _null_error(ctx, key, node, expected)
        if not (_is_str(node) or _is_number(node)):
            ctx.err(node, f"{key} must be {expected} ({_got(node)})")
            return _INVALID
        raw = _value(node)
        try:
            seconds = float(parse_duration(raw))
        except ScheduleError as e:
            ctx.err(node, f"{key}: {_sched_msg(e)}")
            return _INVALID
        if positive and seconds <= 0:
            extra = "; use timeout: null for no timeout" if key == "timeout" else ""
            ctx.err(node, f"{key} must be greater than 0 (got {node.value}){extra}")
            return _INVALID
        if seconds < 0:
            ctx.err(node, f"{key} must not be negative (got {node.value})")
            return _INVALID
        if seconds > MAX_DURATION:
            ctx.err(node, f"{key} must be at most 10 years ({MAX_DURATION:.0f}s) (got "
                          f"{node.value}); use a shorter duration")
            return _INVALID
        return seconds

    return check


def _v_name(ctx: _Ctx, key: str, node: Node) -> Any:
    name = _v_string(ctx, key, node)
    if name is _INVALID:
        return name
    if not NAME_RE.fullmatch(name):
        ctx.err(node, f"invalid job name {name!r}: use {_NAME_RULE}")
        return _INVALID
    return name


def _v_schedule(ctx: _Ctx, key: str, node: Node) -> Any:
    expr = _v_string(ctx, key, node, 'a string such as "*/5 * * * *" or "@daily"')
    if expr is _INVALID:
        return expr
    if not expr.strip():
        ctx.err(node, 'schedule must not be empty; write e.g. schedule: "0 3 * * *"')
        return _INVALID
    try:
        parse_schedule(expr)
    except ScheduleError as e:
        line, col = _pos(node)
        if e.column is not None and "\n" not in expr and node.style in (None, '"', "'"):
            col += e.column + (1 if node.style in ('"', "'") else 0)
        ctx.at(line, col, f"invalid schedule {expr!r}: {_sched_msg(e)}")
        return _INVALID
    return expr.strip()


def _v_timezone(ctx: _Ctx, key: str, node: Node) -> Any:
    name = _v_string(ctx, key, node, "an IANA time zone name such as Europe/Berlin")
    if name is _INVALID or name is None:
        return name
    try:
        resolve_timezone(name)
    except ScheduleError as e:
        ctx.err(node, _sched_msg(e))
        return _INVALID
    return name


def _v_command(ctx: _Ctx, key: str, node: Node) -> Any:
    expected = "a non-empty string (run with /bin/sh -c) or a non-empty list of strings (argv)"
    if isinstance(node, SequenceNode):
        if not node.value:
            ctx.err(node, f"command must be {expected} (got an empty list)")
            return _INVALID
        argv: list[str] = []
        bad = False
        for i, item in enumerate(node.value):
            if not _is_str(item):
                hint = "; quote it" if isinstance(item, ScalarNode) else ""
                ctx.err(item, f"command[{i}] must be a string ({_got(item)}){hint}")
                bad = True
            else:
                argv.append(item.value)
        if bad:
            return _INVALID
        if not argv[0]:
            ctx.err(node.value[0], "command[0] (the program to run) must not be empty")
            return _INVALID
        return tuple(argv)
    if _is_str(node):
        if not node.value.strip():
            ctx.err(node, f"command must be {expected} (got an empty string)")
            return _INVALID
        return node.value
    hint = "; quote it" if isinstance(node, ScalarNode) and not _is(node, NULL) else ""
    ctx.err(node, f"command must be {expected} ({_got(node)}){hint}")
    return _INVALID


def _v_principal(ctx: _Ctx, key: str, node: Node) -> Any:
    if _is(node, INT):
        n = _value(node)
        if n < 0:
            ctx.err(node, f"{key} must be a name or a numeric id >= 0 (got {node.value})")
            return _INVALID
        return str(n)
    value = _v_string(ctx, key, node, f"a {key} name or numeric id")
    if value is _INVALID or value is None:
        return value
    if not value or any(c.isspace() for c in value) or ":" in value:
        ctx.err(node, f"{key} must be a {key} name or numeric id without spaces or ':' (got {value!r})")
        return _INVALID
    return value


def _v_env(ctx: _Ctx, key: str, node: Node) -> Any:
    if not isinstance(node, MappingNode):
        ctx.err(node, f"env must be a mapping of NAME: \"value\" ({_got(node)})")
        return _INVALID
    pairs: list[tuple[str, str]] = []
    bad = False
    for name, (knode, vnode) in _items(ctx, node).items():
        if not ENV_KEY_RE.fullmatch(name):
            ctx.err(knode, f"invalid environment variable name {name!r}: use letters, digits "
                           "and '_', not starting with a digit")
            bad = True
            continue
        if name.startswith("CRONRD_"):
            ctx.err(knode, f"environment variable {name!r} is reserved: cronrd sets CRONRD_* "
                           "variables itself; choose another name")
            bad = True
            continue
        if not _is_str(vnode):
            if isinstance(vnode, ScalarNode) and not _is(vnode, NULL):
                ctx.err(vnode, f"env value for {name!r} must be a string ({_got(vnode)}); "
                               f"quote it: {name}: \"{vnode.value}\"")
            else:
                ctx.err(vnode, f"env value for {name!r} must be a string ({_got(vnode)}); "
                               f"write {name}: \"\" for an empty value")
            bad = True
            continue
        pairs.append((name, vnode.value))
    if bad:
        return _INVALID
    return tuple(sorted(pairs))


def _v_working_dir(ctx: _Ctx, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node, "an absolute path")
    if value is _INVALID or value is None:
        return value
    if not value.startswith("/"):
        ctx.err(node, f"working_dir must be an absolute path starting with / (got {value!r}); "
                      "~ and $VARIABLES are not expanded")
        return _INVALID
    return value


def _v_int(ctx: _Ctx, key: str, node: Node, minimum: int) -> Any:
    if not _is(node, INT):
        ctx.err(node, f"{key} must be a whole number >= {minimum} ({_got(node)})")
        return _INVALID
    n = _value(node)
    if n < minimum:
        ctx.err(node, f"{key} must be a whole number >= {minimum} (got {node.value})")
        return _INVALID
    return n


_RETRY_KEYS = ("max", "delay", "backoff", "max_delay", "jitter")


def _v_retries(ctx: _Ctx, key: str, node: Node) -> Any:
    if _is(node, INT):
        n = _v_int(ctx, "retries", node, 0)
        if n is not _INVALID and n > MAX_RETRIES:
            ctx.err(node, f"retries must be at most {MAX_RETRIES} (got {n})")
            n = _INVALID
        return _INVALID if n is _INVALID else RetryPolicy(max=n)
    if not isinstance(node, MappingNode):
        ctx.err(node, "retries must be a count (a whole number >= 0) or a mapping with keys "
                      f"{', '.join(_RETRY_KEYS)} ({_got(node)})")
        return _INVALID
    kw: dict[str, Any] = {}
    bad = False
    duration = _v_duration()
    for name, (knode, vnode) in _items(ctx, node).items():
        full = f"retries.{name}"
        if name == "max":
            v = _v_int(ctx, full, vnode, 0)
            if v is not _INVALID and v > MAX_RETRIES:
                ctx.err(vnode, f"{full} must be at most {MAX_RETRIES} (got {v})")
                v = _INVALID
        elif name in ("delay", "max_delay", "jitter"):
            v = duration(ctx, full, vnode)
        elif name == "backoff":
            if not _is_number(vnode):
                ctx.err(vnode, f"{full} must be a number >= 1, the factor each delay is multiplied by "
                               f"({_got(vnode)})")
                v = _INVALID
            elif float(_value(vnode)) < 1:
                ctx.err(vnode, f"{full} must be a number >= 1 (got {vnode.value}); "
                               "use 1 for a constant delay")
                v = _INVALID
            else:
                v = float(_value(vnode))
        else:
            _unknown_key(ctx, knode, name, _RETRY_KEYS, where="in retries")
            v = _INVALID
        if v is _INVALID:
            bad = True
        else:
            kw[name] = v
    return _INVALID if bad else RetryPolicy(**kw)


def _v_run_on(ctx: _Ctx, key: str, node: Node) -> Any:
    expected = ("any, all, a node id, a list of node ids, or a mapping {tags: [...]}")
    if _is_str(node):
        if node.value in ("any", "all"):
            return RunOn(mode=node.value)
        if not node.value.strip():
            ctx.err(node, f"run_on must be {expected} (got an empty string)")
            return _INVALID
        return RunOn(mode="nodes", values=(node.value,))
    if isinstance(node, SequenceNode):
        return _id_list(ctx, "run_on", node, "nodes", "node id")
    if isinstance(node, MappingNode):
        items = _items(ctx, node)
        bad = False
        for name, (knode, _v) in items.items():
            if name != "tags":
                _unknown_key(ctx, knode, name, ("tags",), where="in run_on")
                bad = True
        if "tags" not in items:
            if not bad:
                ctx.err(node, "run_on mapping needs tags: [TAG, ...]")
            return _INVALID
        tags_node = items["tags"][1]
        if not isinstance(tags_node, SequenceNode):
            ctx.err(tags_node, f"run_on.tags must be a non-empty list of tag strings ({_got(tags_node)})")
            return _INVALID
        result = _id_list(ctx, "run_on.tags", tags_node, "tags", "tag")
        return _INVALID if bad else result
    ctx.err(node, f"run_on must be {expected} ({_got(node)})")
    return _INVALID


def _id_list(ctx: _Ctx, key: str, node: SequenceNode, mode: str, what: str) -> Any:
    if not node.value:
        ctx.err(node, f"{key} must not be an empty list; list at least one {what}"
                      + (" or write run_on: any" if mode == "nodes" else ""))
        return _INVALID
    values: list[str] = []
    bad = False
    for item in node.value:
        if not _is_str(item) or not item.value.strip():
            hint = "; quote it" if isinstance(item, ScalarNode) and not _is_str(item) else ""
            ctx.err(item, f"each entry of {key} must be a non-empty {what} string ({_got(item)}){hint}")
            bad = True
        elif mode == "nodes" and item.value in ("any", "all"):
            ctx.err(item, f"{item.value!r} is a run_on mode, not a node id; write run_on: {item.value}")
            bad = True
        elif item.value in values:
            ctx.err(item, f"{what} {item.value!r} is listed twice in {key}")
            bad = True
        else:
            values.append(item.value)
    return _INVALID if bad else RunOn(mode=mode, values=tuple(sorted(values)))


def _v_description(ctx: _Ctx, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node)
    return value.strip() if isinstance(value, str) else value  # block scalars end in "\n"


def _v_bool(ctx: _Ctx, key: str, node: Node) -> Any:
    if not _is(node, BOOL):
        ctx.err(node, f"{key} must be true or false ({_got(node)})")
        return _INVALID
    return _value(node)


def _v_max_running(ctx: _Ctx, key: str, node: Node) -> Any:
    return _v_int(ctx, key, node, 1)


def _v_max_log_bytes(ctx: _Ctx, key: str, node: Node) -> Any:
    expected = "a size such as 10MiB, 512KiB or a number of bytes"
    if _is(node, NULL):
        return _null_error(ctx, key, node, expected)
    if not (_is_str(node) or _is(node, INT)):
        ctx.err(node, f"{key} must be {expected} ({_got(node)})")
        return _INVALID
    try:
        size = int(parse_size(_value(node)))
    except ScheduleError as e:
        ctx.err(node, f"{key}: {_sched_msg(e)}")
        return _INVALID
    if size < 1024:
        ctx.err(node, f"{key} must be at least 1024 bytes (1KiB) (got {node.value})")
        return _INVALID
    if size > 1 << 40:
        ctx.err(node, f"{key} must be at most 1TiB (got {node.value})")
        return _INVALID
    return size


_VALIDATORS: dict[str, Callable[[_Ctx, str, Node], Any]] = {
    "name": _v_name,
    "description": _v_description,
    "schedule": _v_schedule,
    "timezone": _v_timezone,
    "command": _v_command,
    "user": _v_principal,
    "group": _v_principal,
    "env": _v_env,
    "working_dir": _v_working_dir,
    "timeout": _v_duration(positive=True),
    "kill_grace": _v_duration(),
    "concurrency": _v_choice(("allow", "forbid", "replace")),
    "retries": _v_retries,
    "catchup": _v_choice(("none", "latest", "all")),
    "catchup_window": _v_duration(),
    "jitter": _v_duration(),
    "run_on": _v_run_on,
    "on_node_loss": _v_choice(("retry", "fail")),
    "enabled": _v_bool,
    "max_log_bytes": _v_max_log_bytes,
    "max_running": _v_max_running,
}
JOB_KEYS: tuple[str, ...] = tuple(_VALIDATORS)
_REQUIRED = {
    "schedule": 'schedule: "0 3 * * *"',
    "command": "command: /usr/local/bin/backup.sh",
}


def _unknown_key(ctx: _Ctx, knode: Node, key: str, valid: tuple[str, ...], where: str = "") -> str | None:
    """Report an unknown key; return the suggested key, if any."""
    where = f" {where}" if where else ""
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        ctx.err(knode, f"unknown key {key!r}{where} (did you mean {close[0]!r}?)")
        return close[0]
    ctx.err(knode, f"unknown key {key!r}{where}; valid keys are: {', '.join(valid)}")
    return None


# --------------------------------------------------------------------------
# Jobs and files
# --------------------------------------------------------------------------


def _has_nul(node: Node) -> bool:
    if isinstance(node, ScalarNode):
        return "\0" in node.value
    if isinstance(node, SequenceNode):
        return any(_has_nul(n) for n in node.value)
    if isinstance(node, MappingNode):
        return any(_has_nul(k) or _has_nul(v) for k, v in node.value)
    return False


def _parse_job(ctx: _Ctx, node: MappingNode, default_name: str | None,
               ) -> tuple[JobSpec | None, str | None, tuple[int, int]]:
    """Validate one job mapping.

    Returns (spec or None, name if the name itself is valid, position of the
    name for duplicate reports)."""
    before = len(ctx.problems)
    items = _items(ctx, node)
    values: dict[str, Any] = {}
    suggested: set[str | None] = set()
    for key, (knode, vnode) in items.items():
        validator = _VALIDATORS.get(key)
        if validator is None:
            if key == "jobs":
                ctx.err(knode, "jobs: belongs at the top level of a file, not inside a job")
            else:
                suggested.add(_unknown_key(ctx, knode, key, JOB_KEYS))
            continue
        if _has_nul(vnode):
            ctx.err(vnode, f"{key} contains a NUL character (\\0), which no command, "
                           "environment variable or path can hold; remove it")
            values[key] = _INVALID
            continue
        values[key] = validator(ctx, key, vnode)

    name_pos = _pos(items["name"][1]) if "name" in items else _pos(node)
    name = values.get("name")
    if "name" not in items:
        if default_name is None:
            ctx.err(node, "this job has no name; add name: (required for every job in a jobs: list)")
        elif not NAME_RE.fullmatch(default_name):
            ctx.err(node, f"the job name {default_name!r} comes from the file name and is not valid "
                          f"({_NAME_RULE}); rename the file or add name:")
        else:
            name = default_name
    if name is _INVALID:
        name = None

    for key, example in _REQUIRED.items():
        if key not in items and key not in suggested:  # a typo of it was reported already
            ctx.err(node, f"missing required key {key!r} (for example {example})")

    if len(ctx.problems) > before:
        return None, name, name_pos
    kwargs = {k: v for k, v in values.items() if k != "name" and v is not None}
    # keys whose value is None mean "unset" and match the defaults
    spec = JobSpec(name=name, source=ctx.path, line=node.start_mark.line + 1, **kwargs)
    return spec, name, name_pos


def _yaml_error(ctx: _Ctx, text: str, e: yaml.YAMLError) -> None:
    if isinstance(e, yaml.MarkedYAMLError):
        problem = e.problem or e.context or "syntax error"
        mark = e.problem_mark or e.context_mark
        hint = ""
        if e.context == "while scanning an alias" and e.context_mark is not None:
            mark = e.context_mark
            problem = "a value starting with * is read as an alias"
            hint = '; quote it, e.g. schedule: "*/5 * * * *"'
        elif problem.startswith("found undefined alias"):
            hint = '; if you meant a value starting with *, quote it, e.g. schedule: "*/5 * * * *"'
        elif "that cannot start any token" in problem and mark is not None:
            ch = text[mark.index] if mark.index < len(text) else ""
            if ch in "@`":
                problem = f"a value cannot start with {ch} unless it is quoted"
                hint = '; quote it, e.g. schedule: "@daily"' if ch == "@" else "; quote it"
        elif e.context and e.context_mark is not None and e.problem_mark is not None:
            cm = e.context_mark
            hint = f" ({e.context} at line {cm.line + 1}, column {cm.column + 1})"
        if mark is None:
            ctx.at(1, 1, f"invalid YAML: {problem}{hint}")
        else:
            ctx.at(mark.line + 1, mark.column + 1, f"invalid YAML: {problem}{hint}")
        return
    position = getattr(e, "position", None)
    if isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        col = position - (text.rfind("\n", 0, position) + 1) + 1
        reason = getattr(e, "reason", None) or str(e)
        ctx.at(line, col, f"invalid YAML: {reason}")
    else:
        ctx.at(1, 1, f"invalid YAML: {e}")


def _file_stem(path: str) -> str:
    base = os.path.basename(path)
    for ext in (".yaml", ".yml"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return os.path.splitext(base)[0]


def _limit_error(ctx: _Ctx, e: bounded_yaml.YAMLLimitError) -> None:
    mark = e.problem_mark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    ctx.at(line, col, f"refusing job file: {e.problem}")


def _parse_text(text: str, path: str) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """parse_job_text plus the position of each valid job's name."""
    ctx = _Ctx(path)
    try:
        # libyaml's event parser when PyYAML has it (several times faster; same
        # node tree and marks), composed with bounds on nesting, aliases and
        # expanded size (bounded_yaml); a file it rejects is parsed again by
        # the pure-Python parser so that the error message is always the same.
        root = bounded_yaml.compose(text)
    except yaml.YAMLError:
        try:
            root = bounded_yaml.compose(text, fast=False)
        except bounded_yaml.YAMLLimitError as e:
            _limit_error(ctx, e)
            return FileResult(path, (), tuple(ctx.problems)), {}
        except yaml.YAMLError as e:
            _yaml_error(ctx, text, e)
            return FileResult(path, (), tuple(ctx.problems)), {}

    jobs: list[JobSpec] = []
    name_pos: dict[str, tuple[int, int]] = {}
    seen: dict[str, int] = {}  # name -> line of the first definition

    def add(node: MappingNode, default_name: str | None) -> None:
        spec, name, pos = _parse_job(ctx, node, default_name)
        if name is not None:
            if name in seen:
                ctx.at(*pos, f"duplicate job name {name!r}: already defined at {path}:{seen[name]}; "
                             "rename one of them")
                return
            seen[name] = node.start_mark.line + 1
        if spec is not None:
            jobs.append(spec)
            name_pos[spec.name] = pos

    shape = "a job file holds one job (a mapping with schedule:, command:, ...) or jobs: followed by a list of jobs"
    if root is None:
        ctx.at(1, 1, f"the file is empty; {shape}")
    elif not isinstance(root, MappingNode):
        hint = "; put the list under jobs:" if isinstance(root, SequenceNode) else ""
        ctx.err(root, f"{shape} ({_got(root)}){hint}")
    else:
        top = _items(ctx, root)
        if "jobs" in top:
            for key, (knode, _v) in top.items():
                if key != "jobs" and not key.startswith("x-"):
                    ctx.err(knode, f"unknown top-level key {key!r} next to jobs:; a file with jobs: holds "
                                   f"only the list, so move {key!r} into each job (keys starting with x- "
                                   "are ignored and can hold &anchors)")
            list_node = top["jobs"][1]
            if not isinstance(list_node, SequenceNode):
                ctx.err(list_node, f"jobs must be a list of job mappings ({_got(list_node)})")
            else:
                for i, item in enumerate(list_node.value, 1):
                    if not isinstance(item, MappingNode):
                        ctx.err(item, f"job #{i} under jobs: must be a mapping with name:, schedule:, "
                                      f"command: ... ({_got(item)})")
                        continue
                    add(item, None)
        else:
            add(root, _file_stem(path))

    problems = tuple(sorted(dict.fromkeys(ctx.problems), key=lambda p: (p.line, p.col)))
    if len(problems) > MAX_PROBLEMS_PER_FILE:  # one file cannot flood the logs
        last = problems[MAX_PROBLEMS_PER_FILE - 1]
        problems = problems[:MAX_PROBLEMS_PER_FILE] + (Problem(
            path, last.line, last.col, f"... and {len(problems) - MAX_PROBLEMS_PER_FILE} more "
                                       "problems after this one; fix these first"),)
    return FileResult(path, tuple(jobs), problems), name_pos


def parse_job_text(text: str, path: str) -> FileResult:
    """Parse and validate the text of one job file (no file system access)."""
    return _parse_text(text, path)[0]


# --------------------------------------------------------------------------
# Files on disk
# --------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _uid_desc(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _refusal(st: os.stat_result, subject: str, fix_path: str, allowed: set[int] | None) -> str | None:
    """Why a file with this stat may not be used, or None.

    ``allowed=None`` checks only that it is a regular file (no owner/mode)."""
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        return f"{subject} is not a regular file (it is {kind}); job files must be regular files"
    if allowed is None:
        return None
    reasons: list[str] = []
    fixes: list[str] = []
    if st.st_uid not in allowed:
        want = " or ".join(_uid_desc(u) for u in sorted(allowed))
        reasons.append(f"owned by {_uid_desc(st.st_uid)}, not by {want}")
        owner = 0 if 0 in allowed else min(allowed)
        fixes.append(f"chown {'root' if owner == 0 else owner} {fix_path}")
    writable = [who for bit, who in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
    if writable:
        reasons.append(f"writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})")
        fixes.append(f"chmod go-w {fix_path}")
    if not reasons:
        return None
    return f"{subject} is {' and '.join(reasons)}; run: {' && '.join(fixes)}"


def _default_uids(allowed_uids: set[int] | None) -> set[int]:
    return {0, os.geteuid()} if allowed_uids is None else set(allowed_uids)


def check_file_permissions(path: str, allowed_uids: set[int] | None) -> Problem | None:
    """Refuse job files the way cron refuses crontabs.

    A file is refused when it is not a regular file, is writable by group or
    others (mode & 0o022), or is owned by a uid outside ``allowed_uids``
    (default: root and the effective uid of this process). A symlink is
    refused when the link itself has a foreign owner or its target fails the
    same checks. Returns a Problem at line 0, column 0, or None if allowed.
    """
    allowed = _default_uids(allowed_uids)

    def refuse(msg: str) -> Problem:
        return Problem(path, 0, 0, f"refusing job file: {msg}")

    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return refuse("it does not exist")
    except OSError as e:
        return refuse(f"cannot inspect it: {e.strerror}")
    if not stat.S_ISLNK(lst.st_mode):
        msg = _refusal(lst, "it", path, allowed)
        return refuse(msg) if msg else None
    if lst.st_uid not in allowed:
        return refuse(f"it is a symlink owned by {_uid_desc(lst.st_uid)}; "
                      f"run: chown -h root {path}")
    target = os.path.realpath(path)
    try:
        st = os.stat(path)
    except OSError:
        return refuse(f"it is a symlink to {os.readlink(path)!r}, which does not exist")
    msg = _refusal(st, f"its symlink target {target}", target, allowed)
    return refuse(msg) if msg else None


def _read_checked(path: str, allowed: set[int] | None) -> tuple[str | None, Problem | None]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return None, Problem(path, 0, 0, f"cannot read job file: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        # the file may have been swapped since check_file_permissions: check what was opened
        msg = _refusal(os.fstat(f.fileno()), "it", path, allowed)
        if msg:
            return None, Problem(path, 0, 0, f"refusing job file: {msg}")
        try:
            data = bounded_yaml.read_bounded(f.fileno(), MAX_FILE_BYTES)
        except bounded_yaml.FileTooLarge as e:
            return None, Problem(path, 0, 0, f"refusing job file: it is larger than "
                                             f"{MAX_FILE_BYTES} bytes (1 MiB; it has at least "
                                             f"{e.size}); split its jobs into several files")
        except OSError as e:
            return None, Problem(path, 0, 0, f"cannot read job file: {e.strerror}")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return None, Problem(path, line, col, f"job file is not valid UTF-8 (byte 0x{data[e.start]:02x}); "
                                              "save it as UTF-8")


def _load_file(path: str, allowed: set[int] | None) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """``allowed=None``: skip the owner and mode checks (still regular files only)."""
    if allowed is None:
        try:
            msg = _refusal(os.stat(path), "it", path, None)
            problem = Problem(path, 0, 0, f"refusing job file: {msg}") if msg else None
        except OSError as e:
            problem = Problem(path, 0, 0, f"cannot read job file: {e.strerror}")
    else:
        problem = check_file_permissions(path, allowed)
    if problem is not None:
        return FileResult(path, (), (problem,)), {}
    text, problem = _read_checked(path, allowed)
    if problem is not None:
        return FileResult(path, (), (problem,)), {}
    return _parse_text(text, path)


def _load_file_guarded(path: str, allowed: set[int] | None,
                       ) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """``_load_file``, where any exception becomes a problem of this one file.

    The bounds make deep recursion and huge trees impossible; this is the
    backstop that keeps one file from stopping the watcher or the daemon's
    start whatever it holds."""
    try:
        return _load_file(path, allowed)
    except Exception as e:  # RecursionError, MemoryError, a bug: one file's problem
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return FileResult(path, (), (Problem(
            path, 0, 0, f"cannot load job file ({what}); the file is skipped and the jobs it "
                        "defined keep their last good version: simplify or fix the file, "
                        "and report this to the cronrd developers with the file"),)), {}


def load_job_file(path: str, *, allowed_uids: set[int] | None = None,
                  check_permissions: bool = True) -> FileResult:
    """Check permissions, then read and parse one job file.

    ``check_permissions=False`` skips the owner and mode checks (for
    ``cronrd validate`` on files not installed yet); non-regular files are
    still refused. Never raises: every failure is a problem of the file."""
    return _load_file_guarded(path, _default_uids(allowed_uids) if check_permissions else None)[0]


def is_job_file_name(name: str) -> bool:
    """True for names the directory loader reads: ``*.yaml``/``*.yml`` that
    are not hidden (editor backups ``*~``, ``*.swp``, ``*.dpkg-*`` do not end
    in .yaml and are skipped too)."""
    return (
        not name.startswith(".")
        and name.endswith((".yaml", ".yml"))
        and ".dpkg-" not in name
    )


def load_jobs_dir(path: str, *, allowed_uids: set[int] | None = None,
                  check_permissions: bool = True) -> DirResult:
    """Load every job file in a directory (sorted by name).

    A job name defined twice (in one file or across files) is reported on
    the later definition, which is dropped. A missing or unreadable
    directory is one Problem at line 0, not an exception.
    ``check_permissions=False``: as for :func:`load_job_file`.
    """
    allowed = _default_uids(allowed_uids) if check_permissions else None
    try:
        names = sorted(e.name for e in os.scandir(path) if is_job_file_name(e.name))
    except FileNotFoundError:
        return DirResult((FileResult(path, (), (Problem(
            path, 0, 0, f"job directory {path} does not exist; create it with: "
                        f"install -d -m 0755 {path}"),)),))
    except NotADirectoryError:
        return DirResult((FileResult(path, (), (Problem(
            path, 0, 0, f"{path} is not a directory; point cronrd at the directory that holds "
                        "the *.yaml job files"),)),))
    except OSError as e:
        return DirResult((FileResult(path, (), (Problem(
            path, 0, 0, f"cannot read job directory {path}: {e.strerror}"),)),))

    files: list[FileResult] = []
    first: dict[str, JobSpec] = {}
    for name in names:
        full = os.path.join(path, name)
        result, positions = _load_file_guarded(full, allowed)
        kept: list[JobSpec] = []
        extra: list[Problem] = []
        for job in result.jobs:
            prev = first.get(job.name)
            if prev is not None:
                line, col = positions.get(job.name, (job.line, 1))
                extra.append(Problem(full, line, col,
                                     f"duplicate job name {job.name!r}: already defined at "
                                     f"{prev.source}:{prev.line}; rename one of them"))
                continue
            first[job.name] = job
            kept.append(job)
        if extra:
            problems = tuple(sorted(result.problems + tuple(extra), key=lambda p: (p.line, p.col)))
            result = FileResult(result.path, tuple(kept), problems)
        files.append(result)
    return DirResult(tuple(files))

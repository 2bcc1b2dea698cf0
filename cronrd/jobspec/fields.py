"""Validators of the keys of one job: ``(ctx, key, node) -> value or _INVALID``.

``null`` is accepted only where it is a meaningful value (``_NULL_OK``);
elsewhere it is an error that says to remove the key to get the default.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cronrd.errors import ScheduleError
from cronrd.schedule import parse_duration, parse_schedule, parse_size, resolve_timezone

from .model import (_NAME_RULE, CONTAINER_NETWORKS, CONTAINER_PULL, ENV_KEY_RE,
                    EXECUTOR_TYPES, NAME_RE, TRIGGER_RULES, Dependency, ExecutorSpec, Limits,
                    RetryPolicy, RunOn, Sla)
from .exit_codes import INVALID as _EC_INVALID, parse_codes, parse_retry_on
from .calendar_field import INVALID as CAL_INVALID, v_calendar
from .notify_field import v_notify
from .params import parse_params
from .nodes import (BOOL, INT, NULL, FileProblems, _got, _is, _is_number, _is_str, _unknown_key,
                    _value, mapping_items, node_pos)

# A job's concurrency policies and the most max_queued may say: the
# vocabulary of decisions/overlap.py, defined here with the fields that take them.
CONCURRENCY_POLICIES = ("allow", "forbid", "replace", "queue")
MAX_QUEUED_LIMIT = 10_000

_INVALID = object()  # a value that failed validation (the problem is recorded)


_NULL_OK = {"timeout", "timezone", "user", "group", "working_dir"}


def _null_error(ctx: FileProblems, key: str, node: Node, expected: str) -> object:
    ctx.err(node, f"{key} must be {expected} (got an empty value (null)); "
                  f"remove the key to use the default")
    return _INVALID


def _v_string(ctx: FileProblems, key: str, node: Node, expected: str = "a string") -> Any:
    if _is(node, NULL):
        if key in _NULL_OK:
            return None
        return _null_error(ctx, key, node, expected)
    if not _is_str(node):
        hint = "; quote it" if isinstance(node, ScalarNode) else ""
        ctx.err(node, f"{key} must be {expected} ({_got(node)}){hint}")
        return _INVALID
    return node.value


def _v_choice(choices: tuple[str, ...]) -> Callable[[FileProblems, str, Node], Any]:
    def check(ctx: FileProblems, key: str, node: Node) -> Any:
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


def _v_duration(*, positive: bool = False) -> Callable[[FileProblems, str, Node], Any]:
    def check(ctx: FileProblems, key: str, node: Node) -> Any:
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


def _v_name(ctx: FileProblems, key: str, node: Node) -> Any:
    name = _v_string(ctx, key, node)
    if name is _INVALID:
        return name
    if not NAME_RE.fullmatch(name):
        ctx.err(node, f"invalid job name {name!r}: use {_NAME_RULE}")
        return _INVALID
    return name


def _v_schedule(ctx: FileProblems, key: str, node: Node) -> Any:
    expr = _v_string(ctx, key, node, 'a string such as "*/5 * * * *" or "@daily"')
    if expr is _INVALID:
        return expr
    if not expr.strip():
        ctx.err(node, 'schedule must not be empty; write e.g. schedule: "0 3 * * *"')
        return _INVALID
    try:
        parse_schedule(expr)
    except ScheduleError as e:
        line, col = node_pos(node)
        if e.column is not None and "\n" not in expr and node.style in (None, '"', "'"):
            col += e.column + (1 if node.style in ('"', "'") else 0)
        ctx.at(line, col, f"invalid schedule {expr!r}: {_sched_msg(e)}")
        return _INVALID
    return expr.strip()


def _v_timezone(ctx: FileProblems, key: str, node: Node) -> Any:
    name = _v_string(ctx, key, node, "an IANA time zone name such as Europe/Berlin")
    if name is _INVALID or name is None:
        return name
    try:
        resolve_timezone(name)
    except ScheduleError as e:
        ctx.err(node, _sched_msg(e))
        return _INVALID
    return name


def _v_command(ctx: FileProblems, key: str, node: Node) -> Any:
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


def _v_principal(ctx: FileProblems, key: str, node: Node) -> Any:
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


def _v_env(ctx: FileProblems, key: str, node: Node) -> Any:
    if not isinstance(node, MappingNode):
        ctx.err(node, f"env must be a mapping of NAME: \"value\" ({_got(node)})")
        return _INVALID
    pairs: list[tuple[str, str]] = []
    bad = False
    for name, (knode, vnode) in mapping_items(ctx, node).items():
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


def _v_working_dir(ctx: FileProblems, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node, "an absolute path")
    if value is _INVALID or value is None:
        return value
    if not value.startswith("/"):
        ctx.err(node, f"working_dir must be an absolute path starting with / (got {value!r}); "
                      "~ and $VARIABLES are not expanded")
        return _INVALID
    return value


def _v_int(ctx: FileProblems, key: str, node: Node, minimum: int) -> Any:
    if not _is(node, INT):
        ctx.err(node, f"{key} must be a whole number >= {minimum} ({_got(node)})")
        return _INVALID
    n = _value(node)
    if n < minimum:
        ctx.err(node, f"{key} must be a whole number >= {minimum} (got {node.value})")
        return _INVALID
    return n


def _sub_fields(ctx: FileProblems, node: MappingNode, field: str, keys: tuple[str, ...],
                check: Callable[[str, str, Node], Any], make: Callable[..., Any]) -> Any:
    """A mapping field whose keys each have their own check: ``check(name,
    "field.name", value node)`` gives the value, _INVALID (it reported why),
    or None for a key it does not know (reported here). ``make(**values)``
    once every key is valid."""
    kw: dict[str, Any] = {}
    bad = False
    for name, (knode, vnode) in mapping_items(ctx, node).items():
        v = check(name, f"{field}.{name}", vnode)
        if v is None:
            _unknown_key(ctx, knode, name, keys, where=f"in {field}")
            v = _INVALID
        if v is _INVALID:
            bad = True
        else:
            kw[name] = v
    return _INVALID if bad else make(**kw)


_RETRY_KEYS = ("max", "delay", "backoff", "max_delay", "jitter", "retry_on", "not_on_exit_codes")


def _v_retries(ctx: FileProblems, key: str, node: Node) -> Any:
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
    duration = _v_duration()

    def check(name: str, full: str, vnode: Node) -> Any:
        if name == "max":
            v = _v_int(ctx, full, vnode, 0)
            if v is not _INVALID and v > MAX_RETRIES:
                ctx.err(vnode, f"{full} must be at most {MAX_RETRIES} (got {v})")
                v = _INVALID
            return v
        if name in ("delay", "max_delay", "jitter"):
            return duration(ctx, full, vnode)
        if name == "backoff":
            if not _is_number(vnode):
                ctx.err(vnode, f"{full} must be a number >= 1, the factor each delay is multiplied by "
                               f"({_got(vnode)})")
                return _INVALID
            if float(_value(vnode)) < 1:
                ctx.err(vnode, f"{full} must be a number >= 1 (got {vnode.value}); "
                               "use 1 for a constant delay")
                return _INVALID
            return float(_value(vnode))
        if name == "retry_on":
            v = parse_retry_on(ctx, full, vnode)
            return _INVALID if v is _EC_INVALID else v
        if name == "not_on_exit_codes":
            v = parse_codes(ctx, full, vnode)
            return _INVALID if v is _EC_INVALID else v
        return None
    return _sub_fields(ctx, node, "retries", _RETRY_KEYS, check, RetryPolicy)


def _v_success_exit_codes(ctx: FileProblems, key: str, node: Node) -> Any:
    v = parse_codes(ctx, key, node)
    return _INVALID if v is _EC_INVALID else v


_SLA_KEYS = ("start_within", "finish_within", "finish_by", "max_runtime", "stale_after",
             "failure_tolerance")
_HHMM = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")


def _v_sla(ctx: FileProblems, key: str, node: Node) -> Any:
    if not isinstance(node, MappingNode) or not node.value:
        ctx.err(node, "sla must be a mapping with one or more of " + ", ".join(_SLA_KEYS)
                + f", e.g. sla: {{start_within: 5m, finish_by: \"06:00\"}} ({_got(node)})")
        return _INVALID
    duration = _v_duration(positive=True)

    def check(name: str, full: str, vnode: Node) -> Any:
        if name == "finish_by":
            text = str(_value(vnode)) if _is_str(vnode) else None
            if text is None or not _HHMM.match(text):
                ctx.err(vnode, f'{full} must be a time of day HH:MM in the job\'s zone, '
                               f'quoted: finish_by: "06:00" ({_got(vnode)})')
                return _INVALID
            hh, mm = text.split(":")
            return f"{int(hh):02d}:{mm}"
        if name == "failure_tolerance":
            return _v_int(ctx, full, vnode, 1)
        if name in _SLA_KEYS:
            return duration(ctx, full, vnode)
        return None
    return _sub_fields(ctx, node, "sla", _SLA_KEYS, check, Sla)


def _v_run_on(ctx: FileProblems, key: str, node: Node) -> Any:
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
        items = mapping_items(ctx, node)
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


def _id_list(ctx: FileProblems, key: str, node: SequenceNode, mode: str, what: str) -> Any:
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


def _v_description(ctx: FileProblems, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node)
    return value.strip() if isinstance(value, str) else value  # block scalars end in "\n"


def _v_bool(ctx: FileProblems, key: str, node: Node) -> Any:
    if not _is(node, BOOL):
        ctx.err(node, f"{key} must be true or false ({_got(node)})")
        return _INVALID
    return _value(node)


def _v_max_running(ctx: FileProblems, key: str, node: Node) -> Any:
    return _v_int(ctx, key, node, 1)


def _v_max_queued(ctx: FileProblems, key: str, node: Node) -> Any:
    n = _v_int(ctx, key, node, 1)
    if n is not _INVALID and n > MAX_QUEUED_LIMIT:
        ctx.err(node, f"{key} must be at most {MAX_QUEUED_LIMIT} (got {n}): a longer queue "
                      "never drains; run the job more often or for less time")
        return _INVALID
    return n


def _v_max_log_bytes(ctx: FileProblems, key: str, node: Node) -> Any:
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


# -- process controls ---------------------------------------------------------------
IOCLASSES = ("none", "realtime", "best-effort", "idle")
MIN_MEMORY = 1 << 20          # below this not even a shell starts
MIN_OPEN_FILES = 16           # a shell, its pipes and a command's few files
MAX_OPEN_FILES = 1 << 20      # the kernel's default fs.nr_open
MAX_TASKS = 1 << 22           # the kernel's pid_max ceiling
_LIMIT_KEYS = ("memory", "cpu", "tasks", "open_files")
_UMASK_RE = re.compile(r"(?:0o)?([0-7]{1,4})")


def _v_shell(ctx: FileProblems, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node, "the absolute path of a shell such as /bin/bash")
    if value is _INVALID:
        return value
    if not value.startswith("/") or any(c.isspace() for c in value):
        ctx.err(node, f"shell must be the absolute path of a shell such as /bin/bash, without "
                      f"spaces or arguments (got {value!r}); it runs a string command as "
                      "SHELL -c COMMAND")
        return _INVALID
    return value


def _v_nice(ctx: FileProblems, key: str, node: Node) -> Any:
    if not _is(node, INT) or not -20 <= _value(node) <= 19:
        got = _got(node) if not _is(node, INT) else f"got {node.value}"
        ctx.err(node, f"nice must be a whole number from -20 (most favoured) to 19 (least) "
                      f"({got})")
        return _INVALID
    return _value(node)


def _v_ioprio(ctx: FileProblems, key: str, node: Node) -> Any:
    if not _is(node, INT) or not 0 <= _value(node) <= 7:
        got = _got(node) if not _is(node, INT) else f"got {node.value}"
        ctx.err(node, f"ioprio must be a whole number from 0 (highest) to 7 (lowest) ({got})")
        return _INVALID
    return _value(node)


def _v_umask(ctx: FileProblems, key: str, node: Node) -> Any:
    # The text is read as octal, as the umask command reads it: 0027, "027"
    # and 27 are the same mask (YAML's own reading of a leading 0 is ignored).
    m = (_UMASK_RE.fullmatch(node.value)
         if _is_str(node) or _is(node, INT) else None)
    if m is None or int(m.group(1), 8) > 0o777:
        ctx.err(node, f"umask must be an octal mask from 0000 to 0777 such as \"0027\" "
                      f"({_got(node)})")
        return _INVALID
    return int(m.group(1), 8)


def _v_env_file(ctx: FileProblems, key: str, node: Node) -> Any:
    value = _v_string(ctx, key, node, "an absolute path")
    if value is _INVALID:
        return value
    if not value.removeprefix("-").startswith("/"):
        ctx.err(node, f"env_file must be an absolute path starting with / (or -/ for a file "
                      f"that may be missing) (got {value!r})")
        return _INVALID
    return value


def _v_limits(ctx: FileProblems, key: str, node: Node) -> Any:
    if not isinstance(node, MappingNode) or not node.value:
        ctx.err(node, "limits must be a mapping with one or more of memory, cpu, tasks, "
                      f"open_files, e.g. limits: {{memory: 512MiB, cpu: 50%}} ({_got(node)})")
        return _INVALID

    def check(name: str, full: str, vnode: Node) -> Any:
        if name == "memory":
            return _v_size(ctx, full, vnode, MIN_MEMORY, 1 << 50)
        if name == "cpu":
            return _v_percent(ctx, full, vnode)
        if name in ("tasks", "open_files"):
            top = MAX_TASKS if name == "tasks" else MAX_OPEN_FILES
            v = _v_int(ctx, full, vnode, 1 if name == "tasks" else MIN_OPEN_FILES)
            if v is not _INVALID and v > top:
                ctx.err(vnode, f"{full} must be at most {top} (got {v})")
                v = _INVALID
            return v
        return None
    return _sub_fields(ctx, node, "limits", _LIMIT_KEYS, check, Limits)


def _v_size(ctx: FileProblems, key: str, node: Node, low: int, high: int) -> Any:
    expected = "a size such as 512MiB, 2GiB or a number of bytes"
    if not (_is_str(node) or _is(node, INT)):
        ctx.err(node, f"{key} must be {expected} ({_got(node)})")
        return _INVALID
    try:
        size = int(parse_size(_value(node)))
    except ScheduleError as e:
        ctx.err(node, f"{key}: {_sched_msg(e)}")
        return _INVALID
    if not low <= size <= high:
        ctx.err(node, f"{key} must be from 1MiB to 1PiB (got {node.value})")
        return _INVALID
    return size


def _v_percent(ctx: FileProblems, key: str, node: Node) -> Any:
    expected = "a percentage of one CPU such as 50% (200% is two CPUs)"
    raw = node.value if _is_str(node) else None
    if raw is not None and raw.strip().endswith("%"):
        try:
            pct = float(raw.strip()[:-1])
        except ValueError:
            pct = None
    elif _is_number(node):
        pct = float(_value(node))
    else:
        pct = None
    if pct is None or not 0 < pct <= 100000 or pct != pct:
        ctx.err(node, f"{key} must be {expected} ({_got(node)})")
        return _INVALID
    return pct


def _v_params(ctx: FileProblems, key: str, node: Node) -> Any:
    params = parse_params(ctx, node)
    return _INVALID if params is None else params


# -- dependencies -------------------------------------------------------------------
MAX_PARENTS = 100
_DEP_KEYS = ("job", "within")


def _v_depends_on(ctx: FileProblems, key: str, node: Node) -> Any:
    expected = ("a list of parents, each - job: NAME (optionally with within: DURATION), "
                "e.g. depends_on: [{job: extract}]")
    if not isinstance(node, SequenceNode) or not node.value:
        got = "got an empty list" if isinstance(node, SequenceNode) else _got(node)
        ctx.err(node, f"depends_on must be {expected} ({got})")
        return _INVALID
    if len(node.value) > MAX_PARENTS:
        ctx.err(node, f"depends_on lists {len(node.value)} parents; at most {MAX_PARENTS} "
                      "are allowed")
        return _INVALID
    deps: list[Dependency] = []
    seen: dict[str, int] = {}
    bad = False
    within = _v_duration(positive=True)
    for i, item in enumerate(node.value):
        where = f"depends_on[{i}]"
        if _is_str(item):  # shorthand: - extract
            name_node, within_value = item, None
        elif isinstance(item, MappingNode):
            items = mapping_items(ctx, item)
            typo = False
            for name, (knode, _v) in items.items():
                if name not in _DEP_KEYS:
                    typo = _unknown_key(ctx, knode, name, _DEP_KEYS, where=f"in {where}") \
                        == "job" or typo
                    bad = True
            if "job" not in items:
                if typo:  # the typo's report says it
                    continue
                ctx.err(item, f"{where} needs job: NAME (the parent job's name)")
                bad = True
                continue
            name_node = items["job"][1]
            within_value = None
            if "within" in items:
                within_value = within(ctx, f"{where}.within", items["within"][1])
                if within_value is _INVALID:
                    bad = True
                    continue
        else:
            ctx.err(item, f"{where} must be a mapping such as {{job: extract}} or a job name "
                          f"({_got(item)})")
            bad = True
            continue
        name = _v_name(ctx, f"{where}.job", name_node)
        if name is _INVALID:
            bad = True
            continue
        if name in seen:
            ctx.err(name_node, f"{where}: job {name!r} is listed twice in depends_on (first "
                               f"at line {seen[name]}); remove one of them")
            bad = True
            continue
        line, col = node_pos(name_node)
        seen[name] = line
        deps.append(Dependency(job=name, within=within_value, line=line, col=col))
    return _INVALID if bad else tuple(deps)


# -- pools and priorities ---------------------------------------------------------------
MAX_PRIORITY = 1000


def _v_pool(ctx: FileProblems, key: str, node: Node) -> Any:
    """A pool name; with the daemon config's pools known (``ctx.pools``),
    one of them."""
    if not _is_str(node) or not NAME_RE.fullmatch(node.value):
        ctx.err(node, f"pool must be the name of a pool of the daemon config's pools: "
                      f"({_got(node)})")
        return _INVALID
    pools = getattr(ctx, "pools", None)
    if pools is not None and node.value not in pools:
        near = difflib.get_close_matches(node.value, sorted(pools), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        known = ", ".join(sorted(pools)) or "none"
        ctx.err(node, f"unknown pool {node.value!r} (the daemon config defines: {known}); "
                      f"{hint}add it under pools: in the daemon config or fix the name")
        return _INVALID
    return node.value


def _v_pool_slots(ctx: FileProblems, key: str, node: Node) -> Any:
    return _v_int(ctx, key, node, 1)


def _v_priority(ctx: FileProblems, key: str, node: Node) -> Any:
    if not _is(node, INT) or not -MAX_PRIORITY <= _value(node) <= MAX_PRIORITY:
        ctx.err(node, f"{key} must be a whole number from -{MAX_PRIORITY} to "
                      f"{MAX_PRIORITY}; higher runs first ({_got(node)})")
        return _INVALID
    return _value(node)


def _v_triggers(ctx: FileProblems, key: str, node: Node) -> Any:
    """triggers: [HOOK, ...]: the webhooks (daemon config hooks:) that start the job."""
    if not isinstance(node, SequenceNode) or not node.value:
        ctx.err(node, f"{key} must be a non-empty list of hook names, e.g. triggers: [deploy]"
                      f" (the daemon config's hooks:) ({_got(node)})")
        return _INVALID
    names: list[str] = []
    bad = False
    for item in node.value:
        if not _is_str(item) or not NAME_RE.fullmatch(item.value):
            ctx.err(item, f"each entry of {key} must be a hook name ({_NAME_RULE}) "
                          f"({_got(item)})")
            bad = True
        elif item.value in names:
            ctx.err(item, f"hook {item.value!r} is listed twice in {key}; remove one")
            bad = True
        else:
            names.append(item.value)
    return _INVALID if bad else tuple(sorted(names))


_EXECUTOR_KEYS = ("type", "image", "pull", "volumes", "network")
# An image reference podman takes: [registry/]name[:tag][@digest], no spaces
# or leading dash (it is one argument of podman run, never an option).
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
# A volume: HOST:CONTAINER[:OPTIONS], both absolute paths.
_VOLUME_RE = re.compile(r"^(/[^:,\x00]*):(/[^:,\x00]*)(?::(ro|rw))?$")


def _v_executor(ctx: FileProblems, key: str, node: Node) -> Any:
    """executor: local | {type: local} | {type: container, image: IMAGE,
    pull: never|missing, volumes: [HOST:CONTAINER[:ro]], network: none|host}."""
    example = ("e.g. executor: {type: container, image: localhost/tools:1, "
               "network: none}")
    if _is_str(node):
        if node.value == "container":
            ctx.err(node, f"executor: container needs its image: {example}")
            return _INVALID
        if node.value not in EXECUTOR_TYPES:
            ctx.err(node, f"executor must be one of {', '.join(EXECUTOR_TYPES)} (got "
                          f"{node.value!r}); {example}")
            return _INVALID
        return ExecutorSpec(type=node.value)
    if not isinstance(node, MappingNode) or not node.value:
        ctx.err(node, f"executor must be local or a mapping with type: and its keys; "
                      f"{example} ({_got(node)})")
        return _INVALID

    def check(name: str, full: str, vnode: Node) -> Any:
        if name == "type":
            return _v_choice(EXECUTOR_TYPES)(ctx, full, vnode)
        if name == "image":
            v = _v_string(ctx, full, vnode, "an image name")
            if v is not _INVALID and not _IMAGE_RE.fullmatch(v):
                ctx.err(vnode, f"{full} must be an image reference such as "
                               f"localhost/tools:1 or debian:bookworm (got {v!r})")
                return _INVALID
            return v
        if name == "pull":
            return _v_choice(CONTAINER_PULL)(ctx, full, vnode)
        if name == "network":
            return _v_choice(CONTAINER_NETWORKS)(ctx, full, vnode)
        if name == "volumes":
            if not isinstance(vnode, SequenceNode):
                ctx.err(vnode, f"{full} must be a list of HOST:CONTAINER[:ro] ({_got(vnode)})")
                return _INVALID
            out = []
            for item in vnode.value:
                if not _is_str(item) or not _VOLUME_RE.fullmatch(item.value) or \
                        "/../" in item.value + "/":
                    ctx.err(item, f"each of {full} must be HOST:CONTAINER or "
                                  "HOST:CONTAINER:ro, both absolute paths, e.g. "
                                  f"/srv/data:/data:ro ({_got(item)})")
                    return _INVALID
                if item.value.split(":", 1)[0].rstrip("/") == "":
                    ctx.err(item, f"{full}: {item.value!r} mounts the whole host file "
                                  "system into the container; mount only the directories "
                                  "it needs")
                    return _INVALID
                out.append(item.value)
            return tuple(out)
        return None
    spec = _sub_fields(ctx, node, "executor", _EXECUTOR_KEYS, check,
                       lambda **kw: kw)
    if spec is _INVALID:
        return _INVALID
    kind = spec.get("type")
    if kind is None:
        ctx.err(node, f"executor needs type: ({' or '.join(EXECUTOR_TYPES)}); {example}")
        return _INVALID
    if kind == "local":
        extra = sorted(set(spec) - {"type"})
        if extra:
            ctx.err(node, f"executor: local takes no {', '.join(extra)}: those are a "
                          "container's; use type: container")
            return _INVALID
        return ExecutorSpec(type="local")
    if not spec.get("image"):
        ctx.err(node, f"executor: container needs image:; {example}")
        return _INVALID
    return ExecutorSpec(**spec)


_VALIDATORS: dict[str, Callable[[FileProblems, str, Node], Any]] = {
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
    "concurrency": _v_choice(CONCURRENCY_POLICIES),
    "retries": _v_retries,
    "catchup": _v_choice(("none", "latest", "all")),
    "catchup_window": _v_duration(),
    "jitter": _v_duration(),
    "run_on": _v_run_on,
    "on_node_loss": _v_choice(("retry", "fail")),
    "enabled": _v_bool,
    "max_log_bytes": _v_max_log_bytes,
    "max_running": _v_max_running,
    "max_queued": _v_max_queued,
    "shell": _v_shell,
    "nice": _v_nice,
    "ioclass": _v_choice(IOCLASSES),
    "ioprio": _v_ioprio,
    "umask": _v_umask,
    "env_file": _v_env_file,
    "limits": _v_limits,
    "params": _v_params,
    "depends_on": _v_depends_on,
    "trigger_rule": _v_choice(TRIGGER_RULES),
    "on_upstream_failure": _v_choice(("skip", "fail")),
    "wait_for_upstream": _v_duration(),
    "pool": _v_pool,
    "pool_slots": _v_pool_slots,
    "priority": _v_priority,
    "start_deadline": _v_duration(positive=True),
    "backfill_priority": _v_priority,
    "notify": lambda ctx, key, node: _INVALID if (r := v_notify(ctx, key, node)) is None else r,
    "sla": _v_sla,
    "on_final_failure": _v_choice(("none", "dead_letter")),
    "heartbeat_timeout": _v_duration(positive=True),
    "triggers": _v_triggers,
    "executor": _v_executor,
    "success_exit_codes": _v_success_exit_codes,
    "calendar": lambda ctx, key, node: _INVALID if (r := v_calendar(ctx, key, node))
    is CAL_INVALID else r,
}
# Keys that mean something only next to depends_on.
DEPENDENCY_KEYS = ("trigger_rule", "on_upstream_failure", "wait_for_upstream")
JOB_KEYS: tuple[str, ...] = tuple(_VALIDATORS)
_REQUIRED = {
    "schedule": 'schedule: "0 3 * * *"',
    "command": "command: /usr/local/bin/backup.sh",
}

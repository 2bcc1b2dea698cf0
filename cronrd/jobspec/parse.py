"""One job file's text -> its valid jobs and every problem (no file system access)."""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cronrd import bounded_yaml

from .fields import _INVALID, _REQUIRED, _VALIDATORS, DEPENDENCY_KEYS, JOB_KEYS
from .model import _NAME_RULE, NAME_RE, FileResult, JobSpec, Problem
from .nodes import FileProblems, _got, _unknown_key, _yaml_error, mapping_items, node_pos

MAX_PROBLEMS_PER_FILE = 100  # more are summed up in one last problem


def _has_nul(node: Node) -> bool:
    if isinstance(node, ScalarNode):
        return "\0" in node.value
    if isinstance(node, SequenceNode):
        return any(_has_nul(n) for n in node.value)
    if isinstance(node, MappingNode):
        return any(_has_nul(k) or _has_nul(v) for k, v in node.value)
    return False


def _parse_job(ctx: FileProblems, node: MappingNode, default_name: str | None,
               ) -> tuple[JobSpec | None, str | None, tuple[int, int]]:
    """Validate one job mapping.

    Returns (spec or None, name if the name itself is valid, position of the
    name for duplicate reports)."""
    before = len(ctx.problems)
    items = mapping_items(ctx, node)
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

    if values.get("ioclass") in ("idle", "none") and values.get("ioprio") not in (None, _INVALID):
        ctx.err(items["ioprio"][1], f"ioprio does not apply to ioclass {values['ioclass']} "
                                    "(only realtime and best-effort have levels); remove it")
    _check_dependency_keys(ctx, items, values)
    _check_container_keys(ctx, items, values)
    _check_pool_keys(ctx, items, values)
    if values.get("max_queued", _INVALID) is not _INVALID \
            and values.get("concurrency", "forbid") not in ("queue", _INVALID):
        ctx.err(items["max_queued"][0], "max_queued applies only to concurrency: queue (this "
                                        f"job has concurrency: {values.get('concurrency', 'forbid')}"
                                        "); remove it or set concurrency: queue")
    name_pos = node_pos(items["name"][1]) if "name" in items else node_pos(node)
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
    assert name is not None  # else a problem was recorded: returned above
    kwargs = {k: v for k, v in values.items() if k != "name" and v is not None}
    # keys whose value is None mean "unset" and match the defaults
    spec = JobSpec(name=name, source=ctx.path, line=node.start_mark.line + 1, **kwargs)
    return spec, name, name_pos



def _check_pool_keys(ctx: FileProblems, items: dict[str, tuple[Node, Node]], values: dict[str, Any]) -> None:
    """pool_slots needs a pool, and at most the pool's slots (when the
    daemon config's pools are known: ``ctx.pools``, name -> slots)."""
    if "pool_slots" not in items or values.get("pool_slots") is _INVALID:
        return
    if "pool" not in items:
        ctx.err(items["pool_slots"][0], "pool_slots applies only to a job with pool: add "
                                        "pool: NAME or remove it")
        return
    pools = getattr(ctx, "pools", None)
    pool = values.get("pool")
    if pools is not None and pool in pools and values["pool_slots"] > pools[pool]:
        ctx.err(items["pool_slots"][1], f"pool_slots is {values['pool_slots']} but pool "
                                        f"{pool!r} has only {pools[pool]} slots: a run could "
                                        "never start; lower pool_slots or raise the pool's "
                                        "slots in the daemon config")


# Variables a job's env: may not give a container job: its podman client runs
# as the daemon's user with the job's environment (passed on into the
# container by name), and these would change what that root process does.
_PODMAN_ENV = re.compile(r"^(LD_|CONTAINERS?_|PODMAN_|BUILDAH_|REGISTRY_AUTH_FILE$|TMPDIR$|"
                         r"XDG_|HOME$|PATH$|DBUS_|SSL_CERT_|STORAGE_)")


def _check_container_keys(ctx: FileProblems, items: dict[str, tuple[Node, Node]],
                          values: dict[str, Any]) -> None:
    """What a container job cannot take: variables that would reach the
    podman client itself, an env_file podman would read by its own rules,
    and heartbeats (the container cannot reach the daemon's socket)."""
    ex = values.get("executor")
    if ex is None or ex is _INVALID or getattr(ex, "type", "local") != "container":
        return
    env = values.get("env")
    pairs = () if env is None or env is _INVALID else env.items() if isinstance(env, dict) \
        else env
    for key, _value in pairs:
        if _PODMAN_ENV.match(key):
            ctx.err(items["env"][1], f"env {key} would reach podman itself (its client runs "
                                     "as the daemon's user with the job's environment) in a "
                                     "container job; set it inside the image, or under "
                                     "another name")
    if "env_file" in items:
        ctx.err(items["env_file"][0], "env_file is not read for a container job (podman "
                                      "would read it by its own rules, as the daemon's "
                                      "user); list the variables under env:, or bake them "
                                      "into the image")
    if "heartbeat_timeout" in items:
        ctx.err(items["heartbeat_timeout"][0], "heartbeat_timeout needs `cronrd heartbeat` "
                                               "from the job, which cannot reach the "
                                               "daemon's socket from inside a container; "
                                               "use timeout: instead")


def _check_dependency_keys(ctx: FileProblems, items: dict[str, tuple[Node, Node]], values: dict[str, Any]) -> None:
    """What depends_on and schedule: "@after" need of each other."""
    after = isinstance(values.get("schedule"), str) and \
        values["schedule"].split()[0].lower() == "@after"
    if "depends_on" not in items:
        for key in DEPENDENCY_KEYS:
            if key in items and values.get(key) is not _INVALID:
                ctx.err(items[key][0], f"{key} applies only to a job with depends_on; add "
                                       "depends_on: [{job: PARENT}] or remove it")
        if after:
            ctx.err(items["schedule"][1], 'schedule "@after" runs the job after its parents: '
                                          "add depends_on: [{job: PARENT}]")
    elif after and getattr(values.get("run_on"), "mode", None) == "all":
        ctx.err(items["run_on"][1], 'run_on: all makes one run per node at each fire time; an '
                                    '"@after" job runs once per generation of its parents: '
                                    "use run_on: any, node ids or tags")
    elif after and "wait_for_upstream" in items:
        ctx.err(items["wait_for_upstream"][0], 'wait_for_upstream applies to a job with a '
                                               'schedule of its own; an "@after" job has no '
                                               "fire time to wait from: remove it")


def _file_stem(path: str) -> str:
    base = os.path.basename(path)
    for ext in (".yaml", ".yml"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return os.path.splitext(base)[0]


def _limit_error(ctx: FileProblems, e: bounded_yaml.YAMLLimitError) -> None:
    mark = e.problem_mark
    line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    ctx.at(line, col, f"refusing job file: {e.problem}")


def _parse_text(text: str, path: str, pools: Mapping[str, int] | None = None
                ) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """parse_job_text plus the position of each valid job's name."""
    ctx = FileProblems(path)
    ctx.pools = None if pools is None else dict(pools)
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

    def add(node: MappingNode, default_name: str | None, watch: bool = False) -> None:
        from .watch import parse_watch
        spec, name, pos = (parse_watch if watch else _parse_job)(ctx, node, default_name)
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
        top = mapping_items(ctx, root)
        if "jobs" in top or "watches" in top:
            lists = [k for k in ("jobs", "watches") if k in top]
            for key, (knode, _v) in top.items():
                if key not in ("jobs", "watches") and not key.startswith("x-"):
                    ctx.err(knode, f"unknown top-level key {key!r} next to {lists[0]}:; a file "
                                   f"with {' and '.join(k + ':' for k in lists)} holds only the "
                                   f"list, so move {key!r} into each entry (keys starting with "
                                   "x- are ignored and can hold &anchors)")
            for kind in lists:
                list_node = top[kind][1]
                what = "job" if kind == "jobs" else "watch"
                if not isinstance(list_node, SequenceNode):
                    ctx.err(list_node, f"{kind} must be a list of {what} mappings "
                                       f"({_got(list_node)})")
                    continue
                for i, item in enumerate(list_node.value, 1):
                    if not isinstance(item, MappingNode):
                        ctx.err(item, f"{what} #{i} under {kind}: must be a mapping with name:, "
                                      f"schedule:, {'command: ' if what == 'job' else 'grace: '}"
                                      f"... ({_got(item)})")
                        continue
                    add(item, None, watch=kind == "watches")
        elif "watch" in top:
            for key, (knode, _v) in top.items():
                if key != "watch" and not key.startswith("x-"):
                    ctx.err(knode, f"unknown top-level key {key!r} next to watch:; move it into "
                                   "the watch")
            node = top["watch"][1]
            if not isinstance(node, MappingNode):
                ctx.err(node, f"watch must be a mapping with schedule:, grace: ... "
                              f"({_got(node)})")
            else:
                add(node, _file_stem(path), watch=True)
        else:
            add(root, _file_stem(path))

    problems = tuple(sorted(dict.fromkeys(ctx.problems), key=lambda p: (p.line, p.col)))
    if len(problems) > MAX_PROBLEMS_PER_FILE:  # one file cannot flood the logs
        last = problems[MAX_PROBLEMS_PER_FILE - 1]
        problems = problems[:MAX_PROBLEMS_PER_FILE] + (Problem(
            path, last.line, last.col, f"... and {len(problems) - MAX_PROBLEMS_PER_FILE} more "
                                       "problems after this one; fix these first"),)
    return FileResult(path, tuple(jobs), problems), name_pos


def parse_job_node(node: Node, path: str) -> tuple[JobSpec | None, list[Problem]]:
    """Validate one job's mapping node (a definition from another node, turned
    into nodes): the job, or None, and the problems."""
    ctx = FileProblems(path)
    if not isinstance(node, MappingNode):
        ctx.err(node, f"a job is a mapping ({_got(node)})")
        return None, ctx.problems
    spec, _name, _pos = _parse_job(ctx, node, None)
    return (spec if not ctx.problems else None), ctx.problems


def parse_job_text(text: str, path: str, pools: Mapping[str, int] | None = None
                   ) -> FileResult:
    """Parse and validate the text of one job file (no file system access).
    ``pools``: the daemon config's pools (name -> slots) that ``pool:`` may
    name (None: any name is taken)."""
    return _parse_text(text, path, pools)[0]

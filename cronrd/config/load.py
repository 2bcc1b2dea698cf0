"""Finding and reading the config file (bounded, like the job files)."""

from __future__ import annotations

import os

import yaml

from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, SequenceNode

from cronrd.bounded_yaml import MAX_FILE_BYTES, FileTooLarge, YAMLLimitError, compose, read_bounded
from cronrd.errors import ConfigError
from cronrd.jobspec.nodes import mapping_items, node_pos

from .model import DEFAULT_CONFIG_PATH, Config
from .parse import check_config
from .problems import ConfigProblems, KeyPath


def config_path(explicit: str | None) -> str:
    return explicit or os.environ.get("CRONRD_CONFIG") or DEFAULT_CONFIG_PATH


def start_hint(path: str | None) -> str:
    """How to start the daemon of the config at ``path``: systemd's unit for
    the packaged config, else the command with that file (the quick start's
    node is no systemd service)."""
    if not path or os.path.abspath(path) == DEFAULT_CONFIG_PATH:
        return "`systemctl start cronrd`"
    return f"`cronrd daemon --config {path}`"


def load_config(path: str, *, daemon_files: bool = False,
                jobs_dir_exists: bool = False) -> Config:
    """Read, parse and validate the config file; every failure is a ConfigError.

    Reading is bounded like the job files' (``bounded_yaml``): at most 1 MiB,
    64 levels of nesting, no alias bomb. A file that cannot be read or is not
    YAML is one problem; otherwise every problem of the config is reported,
    each with the line and column of its key or value (FILE:LINE:COL).
    ``daemon_files`` and ``jobs_dir_exists`` add the checks of the file system
    (see :func:`check_config`): the daemon's start and ``cronrd check-config``."""
    report = ConfigProblems(path)
    try:
        with open(path, "rb") as f:
            data = read_bounded(f.fileno(), MAX_FILE_BYTES)
        text = data.decode("utf-8-sig")
        root = compose(text, fast=False)  # a few lines: the pure parser's messages
        raw = _values(root, (), report, SafeConstructor()) if root is not None else None
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} not found; pass --config FILE, set CRONRD_CONFIG, or "
            f"create {DEFAULT_CONFIG_PATH} (see `man cronrd`)") from None
    except FileTooLarge as exc:
        raise ConfigError(f"{path}: refusing the config file: it is larger than "
                          f"{exc.limit} bytes (1 MiB); a cronrd config is a few lines, "
                          "check that --config names the right file") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: the config file is not valid UTF-8 (byte "
                          f"0x{data[exc.start]:02x}); save it as UTF-8") from None
    except YAMLLimitError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: refusing the config file: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    config = check_config(raw or {}, path, report, daemon_files=daemon_files,
                          jobs_dir_exists=jobs_dir_exists)
    report.raise_if_any()
    assert config is not None  # None only with a problem: raised above
    return config


_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _values(node: Node, key: KeyPath, report: ConfigProblems, constructor: SafeConstructor):
    """The values ``yaml.safe_load`` gives for ``node``, recording in ``report.where``
    where each key and value is. As in job files (``mapping_items``), a duplicate
    key, a key that is not a string and a bad ``<<:`` merge are problems (the key
    is left out), and merge keys work."""
    if isinstance(node, MappingNode) and node.tag == _MAP:
        out = {}
        # notify: [{to: X, on: [...]}]: "on" is a word there, not YAML 1.1's true
        words = ("on",) if key[:1] == ("notify",) and len(key) == 2 else ()
        for name, (knode, vnode) in mapping_items(report, node, words).items():
            report.where[key + (name,)] = (node_pos(knode), node_pos(vnode))
            out[name] = _values(vnode, key + (name,), report, constructor)
        return out
    if isinstance(node, SequenceNode) and node.tag == _SEQ:
        items = []
        for i, item in enumerate(node.value):
            report.where[key + (i,)] = (node_pos(item), node_pos(item))
            items.append(_values(item, key + (i,), report, constructor))
        return items
    try:
        return constructor.construct_object(node, deep=True)  # scalars, and other tags
    except ValueError as exc:   # e.g. 2026-02-30: YAML reads a date and finds none
        line, col = node_pos(node)
        report.at(line, col, f"{node.value!r} cannot be read: {exc}; quote it to mean text, "
                             "or write a date that exists")
        return node.value


def daemon_config_jobs_dir(path: str) -> str | None:
    """If the YAML file at ``path`` is a daemon config rather than a job file,
    the jobs_dir it names (absolute, as the daemon resolves it; the default
    when it names none); None for anything else, including unreadable files.

    A config is a mapping with at least one key only a config has (node_id,
    data_dir, cluster ...) and none only a job has (schedule, command, jobs
    ...): a config with a misspelt key is still one; a job file is never one."""
    from cronrd.jobspec import DEFAULT_JOBS_DIR, JOB_KEYS
    from .model import KNOWN_KEYS
    try:
        with open(path, "rb") as f:
            data = read_bounded(f.fileno(), MAX_FILE_BYTES)
        root = compose(data.decode("utf-8-sig"))
    except (OSError, FileTooLarge, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(root, MappingNode):
        return None
    keys = {k.value: v for k, v in root.value if isinstance(k, yaml.ScalarNode)}
    config_only, job_only = set(KNOWN_KEYS) - set(JOB_KEYS), set(JOB_KEYS) - set(KNOWN_KEYS)
    if not keys.keys() & config_only or keys.keys() & (job_only | {"jobs"}):
        return None
    value = keys.get("jobs_dir")
    jobs_dir = value.value if isinstance(value, yaml.ScalarNode) and value.value else None
    base = os.path.dirname(os.path.abspath(path))
    return os.path.normpath(os.path.join(base, os.path.expanduser(jobs_dir or
                                                                 DEFAULT_JOBS_DIR)))

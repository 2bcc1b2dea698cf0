"""A job as its operator wrote it, beside what cronrd makes of it (pure but
for reading the file).

``written_lines`` reads the job's file on this host and returns the lines
that define the job, numbered as in the file: the whole file for a file of
one job, the job's item for a file with ``jobs:``. ``effective`` lists every
key of the definition in force with its value and whether that value is the
default (the file did not set it, or set it to what cronrd would use).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from typing import Any

import yaml

from ..bounded_yaml import compose, read_bounded
from ..schedule.durations import human_duration
from .exit_codes import codes_text
from .model import JobSpec
from .parse import parse_job_text


def written(path: str, name: str) -> tuple[int, list[tuple[int, str]]] | None:
    """The job ``name`` in the file ``path`` as written: (the line its
    mapping starts at, its numbered lines); None when the file cannot be
    read here or defines no such job now (it changed since)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = read_bounded(fd).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    line = next((j.line for j in parse_job_text(text, path).jobs if j.name == name), None)
    if not line:
        return None
    lines = written_lines(text, line)
    return None if lines is None else (line, lines)


def written_lines(text: str, line: int) -> list[tuple[int, str]] | None:
    """The numbered lines of ``text`` (a job file) that define the job whose
    mapping starts at ``line`` (1-based); None when the text is not YAML or
    holds no job there."""
    try:
        root = compose(text)
    except (yaml.YAMLError, ValueError):
        return None
    lines = text.splitlines()
    if not isinstance(root, yaml.MappingNode):
        return None
    first, end = root.start_mark.line, root.end_mark.line
    for key, value in root.value:
        if key.value == "jobs" and isinstance(value, yaml.SequenceNode):
            item = next((n for n in value.value if n.start_mark.line + 1 == line), None)
            if item is None:
                return None
            first, end = item.start_mark.line, item.end_mark.line
            if end == first:   # a flow mapping on one line
                end += 1
            break
    else:
        first = 0   # the whole file: comments above the keys belong to the job too
    end = max(end, first + 1)
    # Blank lines after the job are not its; nor, in a list, a comment that
    # introduces the next item.
    while end > first + 1 and (not lines[end - 1].strip() or (
            first > 0 and lines[end - 1].lstrip().startswith("#"))):
        end -= 1
    return [(n + 1, lines[n]) for n in range(first, min(end, len(lines)))]


# Keys whose values are seconds: shown as durations (30m, not 1800.0).
_DURATIONS = {"timeout", "kill_grace", "catchup_window", "jitter", "start_deadline",
              "heartbeat_timeout"}


def effective(spec: JobSpec) -> list[tuple[str, str, bool]]:
    """(key, its value as text, whether it is the default) of every key of
    the definition in force, in its canonical order (JobSpec.to_dict): what
    the file set and what cronrd fills in."""
    own = spec.to_dict()
    defaults = JobSpec(name=spec.name, schedule=spec.schedule, command=spec.command).to_dict()
    for f in dataclasses.fields(JobSpec):   # keys to_dict gives only when set
        if f.name not in own and f.name not in ("source", "line"):
            own[f.name] = defaults.get(f.name)
    return [(key, _text(key, value), key not in ("name", "schedule", "command")
             and defaults.get(key) == value) for key, value in own.items()]


def _text(key: str, value: Any) -> str:
    if value is None:
        return {"executor": "local", "success_exit_codes": "0"}.get(key, "-")
    if key == "success_exit_codes" and isinstance(value, list):
        return codes_text(value)
    if key in _DURATIONS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return human_duration(value)
    if key == "retries" and isinstance(value, dict):
        text = (f"max {value['max']}, delay {human_duration(value['delay'])}, backoff "
                f"{value['backoff']:g}, max_delay {human_duration(value['max_delay'])}, "
                f"jitter {human_duration(value['jitter'])}")
        if "retry_on" in value:
            text += f", retry_on {'/'.join(value['retry_on'])}"
        if value.get("not_on_exit_codes"):
            text += f", not_on_exit_codes {codes_text(value['not_on_exit_codes'])}"
        return text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(", ", ": "))

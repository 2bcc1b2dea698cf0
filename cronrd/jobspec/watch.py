"""Watches: a dead man's switch for jobs cronrd does not run (a legacy cron
host, a Kubernetes CronJob). A watch has a schedule like a job but no
command: at each fire time cronrd waits for a ping (`cronrd ping NAME`,
or ``POST /api/v1/pings/NAME`` with the watch's own token) and records
the fire time failed when none comes within ``grace`` (state/watches.py).

A job file holds watches under ``watches:`` (a list, beside or instead of
``jobs:``), or one watch under ``watch:``::

    watches:
      - name: legacy-backup
        schedule: "30 2 * * *"
        timezone: Europe/Berlin
        grace: 1h          # the ping may come this long after the fire time
"""

from __future__ import annotations

from typing import Any

from yaml.nodes import MappingNode

from .fields import _INVALID, _VALIDATORS, _v_duration
from .model import _NAME_RULE, NAME_RE, JobSpec, WatchSpec
from .nodes import FileProblems, _unknown_key, mapping_items, node_pos

WATCH_KEYS = ("name", "description", "schedule", "timezone", "grace", "enabled", "notify",
              "sla", "calendar", "user")   # user: who may ping it on this host's socket
_EXAMPLE = 'watches: [{name: legacy-backup, schedule: "30 2 * * *", grace: 1h}]'


def parse_watch(ctx: FileProblems, node: MappingNode, default_name: str | None
                ) -> tuple[JobSpec | None, str | None, tuple[int, int]]:
    """One watch mapping: (spec or None, its name if valid, where its name is)."""
    before = len(ctx.problems)
    items = mapping_items(ctx, node)
    values: dict[str, Any] = {}
    for key, (knode, vnode) in items.items():
        if key not in WATCH_KEYS:
            hint = (f"; a watch runs nothing: {key} belongs to a job (jobs:)"
                    if key in _VALIDATORS else "")
            if hint:
                ctx.err(knode, f"unknown key {key!r} in a watch (valid keys are: "
                               f"{', '.join(WATCH_KEYS)}){hint}")
            else:
                _unknown_key(ctx, knode, key, WATCH_KEYS, where="in a watch")
            continue
        if key == "grace":
            values[key] = _v_duration(positive=True)(ctx, key, vnode)
        else:
            values[key] = _VALIDATORS[key](ctx, key, vnode)
    name = values.pop("name", None)
    if "name" not in items:
        if default_name is None or not NAME_RE.fullmatch(default_name):
            ctx.err(node, "this watch has no name; add name: (" + _NAME_RULE + ")")
        else:
            name = default_name
    if name is _INVALID:
        name = None
    if "schedule" not in items:
        ctx.err(node, 'a watch needs schedule: (when its pings are expected), e.g. '
                      'schedule: "30 2 * * *"')
    elif isinstance(values.get("schedule"), str) and \
            values["schedule"].lstrip().lower().startswith(("@reboot", "@after")):
        ctx.err(items["schedule"][1], "a watch needs a schedule with fire times (a cron "
                                      "expression, @daily, @every D, @at T): a ping is "
                                      "expected at each")
    name_pos = node_pos(items["name"][1]) if "name" in items else node_pos(node)
    if len(ctx.problems) > before or name is None:
        return None, name, name_pos
    grace = values.pop("grace", None)
    kwargs = {k: v for k, v in values.items() if v is not None}
    spec = JobSpec(name=name, command="", watch=WatchSpec(grace=grace or WatchSpec.grace),
                   source=ctx.path, line=node.start_mark.line + 1, **kwargs)
    return spec, name, name_pos

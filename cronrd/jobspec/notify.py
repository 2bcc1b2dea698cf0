"""``notify:``: who hears of which events of a job (a job file's key, and the
daemon config's cluster-wide default of the same shape).

    notify:
      - to: oncall                          # a notifier of the daemon config
        on: [failed, recovered, launch_failed, sla_miss]
      - chat                                # short for {to: chat} (DEFAULT_ON)

A job without ``notify`` uses the daemon config's ``notify`` (the cluster
default); ``notify: []`` turns notifications off for the job. ``sla_miss``
stands for every ``sla_<kind>`` event. Which notifiers exist is the daemon's
business: a name no config defines is reported when an event is delivered
(and by ``cronrd notify test``), not here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

# Every event kind (cronrd/state/events.py KINDS: a unit test keeps them equal)
# plus the sla_miss shorthand.
SLA_KINDS = ("sla_start_within", "sla_finish_within", "sla_finish_by", "sla_max_runtime",
             "sla_stale_after", "sla_failure_tolerance")
EVENT_KINDS = ("failed", "retrying", "skipped", "launch_failed", "recovered",
               "dead_lettered") + SLA_KINDS
ON_KINDS = EVENT_KINDS + ("sla_miss",)
# What a route without ``on`` hears: failures and recoveries, not every run.
DEFAULT_ON = ("failed", "launch_failed", "recovered", "dead_lettered", "sla_miss")
NOTIFIER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_ROUTES = 16
ROUTE_KEYS = ("to", "on")


@dataclass(frozen=True)
class NotifyRoute:
    """Send the events of kinds ``on`` to notifier ``to``."""
    to: str
    on: tuple[str, ...] = DEFAULT_ON

    def wants(self, kind: str) -> bool:
        return kind in self.on or (kind.startswith("sla_") and "sla_miss" in self.on)

    def to_dict(self) -> dict[str, Any]:
        return {"to": self.to, "on": list(self.on)}

    @classmethod
    def from_dict(cls, d: Any) -> "NotifyRoute":
        if isinstance(d, NotifyRoute):
            return d
        return cls(to=str(d["to"]), on=tuple(d.get("on", DEFAULT_ON)))


def routes_from_data(value: Any) -> tuple[NotifyRoute, ...] | None:
    """``to_dict`` output back (trusted): None stays None (the default)."""
    if value is None:
        return None
    return tuple(NotifyRoute.from_dict(r) for r in value)


# -- checking plain values (the daemon config) -----------------------------------------
def check_routes(value: Any, key: str) -> tuple[tuple[NotifyRoute, ...] | None,
                                                 list[tuple[tuple[Any, ...], str]]]:
    """``value`` (what YAML gave for ``key``) -> (routes or None, problems as
    (key path below ``key``, message))."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    if value is None:
        return (), []
    if isinstance(value, (str, dict)):
        value = [value]
    if not isinstance(value, list):
        return None, [((), f"{key} must be a list of notifier names or {{to: NAME, on: "
                           f"[EVENT, ...]}} mappings (got {type(value).__name__})")]
    if len(value) > MAX_ROUTES:
        return None, [((), f"{key} lists {len(value)} routes; at most {MAX_ROUTES}")]
    routes: list[NotifyRoute] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {"to": item}
        if not isinstance(item, dict):
            problems.append(((i,), f"{key}[{i}] must be a notifier name or a mapping "
                                   f"{{to: NAME, on: [EVENT, ...]}}"))
            continue
        for k in item:
            if k not in ROUTE_KEYS:
                near = difflib.get_close_matches(str(k), ROUTE_KEYS, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                problems.append(((i, k), f"unknown key {key}[{i}].{k}{hint}; known keys: "
                                         "to, on"))
        to = item.get("to")
        if not isinstance(to, str) or not NOTIFIER_NAME_RE.fullmatch(to):
            problems.append(((i, "to"), f"{key}[{i}].to must name a notifier of the daemon "
                                        f"config's notifiers (got {to!r})"))
            continue
        on = item.get("on", list(DEFAULT_ON))
        if isinstance(on, str):
            on = [on]
        if not isinstance(on, list) or not on:
            problems.append(((i, "on"), f"{key}[{i}].on must be a non-empty list of events: "
                                        f"{', '.join(ON_KINDS)}"))
            continue
        bad = [k for k in on if k not in ON_KINDS]
        for k in bad:
            problems.append(((i, "on"), f"{key}[{i}].on: unknown event {k!r}{_near(k)}; "
                                        f"events: {', '.join(ON_KINDS)}"))
        if not bad:
            routes.append(NotifyRoute(to=to, on=tuple(dict.fromkeys(on))))
    return (None if problems else tuple(routes)), problems


def _near(kind: Any) -> str:
    near = difflib.get_close_matches(str(kind), ON_KINDS, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""

"""A job's ``calendar:`` key: ``{skip: [NAMES], only: [NAMES], shift:
none|next|previous, business_day: N}`` (schedule/calendars.py says what it
does). The names are the daemon config's calendars (``calendars:``, plus
the built-in ``weekdays`` and ``weekends``); the daemon checks them against
its config when it loads the file (runtime/jobfiles/watcher.py)."""

from __future__ import annotations

from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cronrd.schedule.calendars import MAX_BUSINESS_DAY, SHIFTS, CalendarRule

from .model import NAME_RE
from .nodes import INT, FileProblems, _got, _is, _unknown_key, _value, mapping_items, node_pos

KEYS = ("skip", "only", "shift", "business_day")
INVALID = object()
_EXAMPLE = "calendar: {skip: [de-holidays], only: [weekdays], shift: next}"


def v_calendar(ctx: FileProblems, key: str, node: Node) -> Any:
    if not isinstance(node, MappingNode) or not node.value:
        ctx.err(node, f"calendar must be a mapping with skip, only, shift or business_day, "
                      f"e.g. {_EXAMPLE} ({_got(node)})")
        return INVALID
    kw: dict[str, Any] = {}
    bad = False
    for name, (knode, vnode) in mapping_items(ctx, node).items():
        if name in ("skip", "only"):
            got = _names(ctx, f"calendar.{name}", vnode)
            if got is INVALID:
                bad = True
            else:
                kw[name] = got
        elif name == "shift":
            if not isinstance(vnode, ScalarNode) or vnode.value not in SHIFTS:
                ctx.err(vnode, f"calendar.shift must be one of {', '.join(SHIFTS)}: where a "
                               "fire time on a day the calendar does not allow goes (none: "
                               f"recorded skipped) ({_got(vnode)})")
                bad = True
            else:
                kw["shift"] = vnode.value
        elif name == "business_day":
            n = _value(vnode) if _is(vnode, INT) else None
            if n is None or n == 0 or abs(n) > MAX_BUSINESS_DAY:
                ctx.err(vnode, f"calendar.business_day must be a whole number 1 to "
                               f"{MAX_BUSINESS_DAY} (the n-th allowed day of the month) or -1 "
                               f"to -{MAX_BUSINESS_DAY} (counted from its end: -1 is the last) "
                               f"({_got(vnode)})")
                bad = True
            else:
                kw["business_day"] = n
        else:
            _unknown_key(ctx, knode, name, KEYS, where="in calendar")
            bad = True
    if bad:
        return INVALID
    if not kw.get("skip") and not kw.get("only"):
        ctx.err(node, f"calendar needs skip: or only: (the calendars that decide), e.g. "
                      f"{_EXAMPLE}")
        return INVALID
    if kw.get("business_day") is not None and kw.get("shift", "none") != "none":
        ctx.err(node, "calendar: business_day picks a day of the month, and shift moves a "
                      "fire time off a day: use one of them")
        return INVALID
    line, _ = node_pos(node)
    return CalendarRule(**kw, names_line=line)


def _names(ctx: FileProblems, key: str, node: Node) -> Any:
    items = node.value if isinstance(node, SequenceNode) else [node] \
        if isinstance(node, ScalarNode) else None
    if not items:
        ctx.err(node, f"{key} must list calendar names (the daemon config's calendars:), "
                      f"e.g. {key}: [de-holidays] ({_got(node)})")
        return INVALID
    out: list[str] = []
    for item in items:
        if not isinstance(item, ScalarNode) or not NAME_RE.fullmatch(str(item.value)):
            ctx.err(item, f"each entry of {key} must be a calendar name ({_got(item)})")
            return INVALID
        if item.value not in out:
            out.append(item.value)
    return tuple(out)

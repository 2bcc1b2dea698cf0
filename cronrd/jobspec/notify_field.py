"""The job file's ``notify`` key, read from YAML nodes (FILE:LINE:COL
problems); the values and their meaning: :mod:`.notify`."""

from __future__ import annotations

from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .nodes import FileProblems, _got, _is_str, _unknown_key, mapping_items
from .notify import DEFAULT_ON, MAX_ROUTES, NOTIFIER_NAME_RE, ON_KINDS, ROUTE_KEYS, NotifyRoute, _near

_INVALID = None  # what v_notify returns for a value with problems (they are in ctx)


def v_notify(ctx: FileProblems, key: str, node: Node) -> Any:
    """The job file's ``notify``: a list of notifier names or {to, on} mappings
    (None when it has problems: they are in ``ctx``)."""
    if _is_str(node) or isinstance(node, MappingNode):
        items = [node]
    elif isinstance(node, SequenceNode):
        items = list(node.value)
    else:
        ctx.err(node, f"notify must be a list of notifier names or {{to: NAME, on: "
                      f"[EVENT, ...]}} mappings ({_got(node)}); notify: [] turns "
                      "notifications off for this job")
        return _INVALID
    if len(items) > MAX_ROUTES:
        ctx.err(node, f"notify lists {len(items)} routes; at most {MAX_ROUTES}")
        return _INVALID
    routes: list[NotifyRoute] = []
    bad = False
    for item in items:
        route = _route(ctx, item)
        if route is _INVALID:
            bad = True
        elif any(r.to == route.to for r in routes):
            ctx.err(item, f"notifier {route.to!r} is listed twice in notify; list its "
                          "events once, in one on: [...]")
            bad = True
        else:
            routes.append(route)
    return _INVALID if bad else tuple(routes)


def _route(ctx: FileProblems, node: Node) -> Any:
    if _is_str(node):
        return _INVALID if _name(ctx, node) is _INVALID else NotifyRoute(to=node.value)
    if not isinstance(node, MappingNode):
        ctx.err(node, f"each entry of notify must be a notifier name or a mapping "
                      f"{{to: NAME, on: [EVENT, ...]}} ({_got(node)})")
        return _INVALID
    items = mapping_items(ctx, node, word_keys=("on",))
    bad = False
    for name, (knode, _v) in items.items():
        if name not in ROUTE_KEYS:
            _unknown_key(ctx, knode, name, ROUTE_KEYS, where="in notify")
            bad = True
    if "to" not in items:
        ctx.err(node, "a notify entry needs to: NOTIFIER (a name from the daemon config's "
                      "notifiers)")
        return _INVALID
    to = _name(ctx, items["to"][1])
    on: Any = DEFAULT_ON
    if "on" in items:
        on = _on(ctx, items["on"][1])
    if bad or to is _INVALID or on is _INVALID:
        return _INVALID
    return NotifyRoute(to=to, on=on)


def _name(ctx: FileProblems, node: Node) -> Any:
    if not _is_str(node) or not NOTIFIER_NAME_RE.fullmatch(node.value):
        hint = "; quote it" if isinstance(node, ScalarNode) and not _is_str(node) else ""
        ctx.err(node, f"notify: a notifier name is letters, digits, '_', '.' and '-' "
                      f"(a name from the daemon config's notifiers) ({_got(node)}){hint}")
        return _INVALID
    return node.value


def _on(ctx: FileProblems, node: Node) -> Any:
    items = [node] if _is_str(node) else node.value if isinstance(node, SequenceNode) else None
    if not items:
        ctx.err(node, f"notify on must be a non-empty list of events: {', '.join(ON_KINDS)} "
                      f"({_got(node)})")
        return _INVALID
    out: list[str] = []
    bad = False
    for item in items:
        if not _is_str(item) or item.value not in ON_KINDS:
            got = item.value if isinstance(item, ScalarNode) else _got(item)
            ctx.err(item, f"notify on: unknown event {got!r}{_near(got)}; events: "
                          f"{', '.join(ON_KINDS)}")
            bad = True
        elif item.value not in out:
            out.append(item.value)
    return _INVALID if bad else tuple(out)

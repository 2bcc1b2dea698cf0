"""Reading a composed YAML node tree: tags, scalar values, positions, what the
operator wrote (for messages), keys of a mapping (duplicates, ``<<:`` merges),
unknown keys with a suggestion, and YAML syntax errors -- each problem recorded
with its line and column in a collector for one file."""

from __future__ import annotations

import difflib
from typing import Any, Callable

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .model import Problem

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


def node_pos(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


class FileProblems:
    """Collects problems for one file."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []
        self.pools: dict[str, int] | None = None  # the daemon config's (name -> slots), when known

    def at(self, line: int, col: int, message: str) -> None:
        self.problems.append(Problem(self.path, line, col, message))

    def err(self, node: Node, message: str) -> None:
        self.at(*node_pos(node), message)


def mapping_items(ctx: FileProblems, node: MappingNode, word_keys: tuple[str, ...] = ()
                  ) -> dict[str, tuple[Node, Node]]:
    """Ordered ``key -> (key_node, value_node)``; reports duplicate and
    non-string keys. Supports ``<<:`` merge keys (own keys win, then earlier
    merged mappings win over later ones). ``word_keys``: plain keys YAML 1.1
    reads as booleans that are meant as words here (``on`` of notify)."""
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
                for k, pair in mapping_items(ctx, src).items():
                    merged.setdefault(k, pair)
            continue
        if word_keys and _is(knode, BOOL) and knode.value in word_keys:
            pass  # a word after all (the key's text)
        elif not _is_str(knode):
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



def _unknown_key(ctx: FileProblems, knode: Node, key: str, valid: tuple[str, ...], where: str = "") -> str | None:
    """Report an unknown key; return the suggested key, if any."""
    where = f" {where}" if where else ""
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        ctx.err(knode, f"unknown key {key!r}{where} (did you mean {close[0]!r}?)")
        return close[0]
    ctx.err(knode, f"unknown key {key!r}{where}; valid keys are: {', '.join(valid)}")
    return None


def _yaml_error(ctx: FileProblems, text: str, e: yaml.YAMLError) -> None:
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

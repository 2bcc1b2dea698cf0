"""Exit-code fields of a job: ``success_exit_codes`` and the retry rules'
``retries.retry_on`` / ``retries.not_on_exit_codes`` (their meaning is in
decisions/exit_rules.py).

A list of exit codes takes numbers and ranges: ``[0, 3]``,
``[2, 64-78]`` (YAML reads ``64-78`` as the text it is). Each is 0..255,
what a process can exit with."""

from __future__ import annotations

import re
from typing import Any, Iterable

from yaml.nodes import Node, ScalarNode, SequenceNode

from .model import RETRY_ON
from .nodes import INT, FileProblems, _got, _is, _value

_RANGE = re.compile(r"^\s*(\d{1,3})\s*-\s*(\d{1,3})\s*$")
INVALID = object()


def parse_codes(ctx: FileProblems, key: str, node: Node) -> Any:
    """A non-empty list of exit codes and ranges -> sorted tuple, or INVALID
    (each problem reported at its item)."""
    example = f"{key}: [0, 3] or [2, 64-78]"
    if not isinstance(node, SequenceNode) or not node.value:
        ctx.err(node, f"{key} must be a non-empty list of exit codes (0-255) or ranges, "
                      f"e.g. {example} ({_got(node)})")
        return INVALID
    codes: set[int] = set()
    bad = False
    for item in node.value:
        got = _item(item)
        if got is None:
            ctx.err(item, f"each entry of {key} must be an exit code 0-255 or a range A-B "
                          f"with A <= B, e.g. {example} ({_got(item)})")
            bad = True
            continue
        codes.update(got)
    return INVALID if bad else tuple(sorted(codes))


def _item(item: Node) -> range | None:
    if _is(item, INT):
        n = _value(item)
        return range(n, n + 1) if 0 <= n <= 255 else None
    if isinstance(item, ScalarNode) and isinstance(item.value, str):
        m = _RANGE.match(item.value)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if 0 <= lo <= hi <= 255:
                return range(lo, hi + 1)
    return None


def parse_retry_on(ctx: FileProblems, key: str, node: Node) -> Any:
    """retries.retry_on: a non-empty list of failure kinds."""
    kinds = ", ".join(RETRY_ON)
    if not isinstance(node, SequenceNode) or not node.value:
        ctx.err(node, f"{key} must be a non-empty list of {kinds}, e.g. {key}: [timeout] "
                      f"({_got(node)}); to retry nothing, set retries.max: 0")
        return INVALID
    out: list[str] = []
    for item in node.value:
        if not isinstance(item, ScalarNode) or item.value not in RETRY_ON:
            ctx.err(item, f"each entry of {key} must be one of {kinds} ({_got(item)}); "
                          "a lost run is retried by on_node_loss")
            return INVALID
        if item.value not in out:
            out.append(item.value)
    return tuple(k for k in RETRY_ON if k in out)


def codes_text(codes: Iterable[int]) -> str:
    """``0, 3, 64-78``: a sorted code list with its runs as ranges."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(codes)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(_run_text(run))
        run = [c]
    if run:
        out.append(_run_text(run))
    return ", ".join(out)


def _run_text(run: list[int]) -> str:
    if len(run) == 1:
        return str(run[0])
    if len(run) == 2:
        return f"{run[0]}, {run[1]}"
    return f"{run[0]}-{run[-1]}"

"""How config problems are reported: every problem at once, each naming its key
and, when the config came from a file, the line and column of that key.

:class:`ConfigProblems` is the job files' problem collector
(:class:`cronrd.jobspec.nodes.FileProblems`) with a way to report a problem by
key path (``("cluster", "listen")``) instead of by YAML node: the config is
checked as Python values, and ``where`` maps each key path to the positions of
its key and its value in the file. :meth:`ConfigProblems.raise_if_any` raises
one :class:`ConfigError` whose message has one line per problem,
``FILE:LINE:COL: message`` (``FILE: message`` where no position is known:
a config given as values, or a key that is missing).
"""

from __future__ import annotations

import difflib
from typing import Mapping

from cronrd.errors import ConfigError
from cronrd.jobspec.model import Problem
from cronrd.jobspec.nodes import FileProblems

KeyPath = tuple  # ("cluster", "initial_members", "b"): keys (and list indexes) from the top
Position = tuple[int, int]  # 1-based line and column


class ConfigProblems(FileProblems):
    """The problems found in one config (``path``); ``where`` maps a key path
    to the positions of its key and of its value (empty: no positions)."""

    def __init__(self, path: str, where: Mapping[KeyPath, tuple[Position, Position]] | None = None):
        super().__init__(path)
        self.where = dict(where or {})

    def add(self, key: KeyPath, message: str, *, at_key: bool = False) -> None:
        """A problem with the value of ``key`` (or with the key itself: ``at_key``).

        A key that is not in the file (a required one is missing) is reported
        at the nearest enclosing key that is."""
        key = tuple(key)
        line = col = 0
        for n in range(len(key), 0, -1):
            found = self.where.get(key[:n])
            if found is not None:
                line, col = found[0] if at_key or n < len(key) else found[1]
                break
        self.at(line, col, message)

    def unknown(self, parent: KeyPath, key: object, known: tuple[str, ...]) -> str | None:
        """Report an unknown key inside ``parent`` (named in full, with a suggestion);
        return the suggested key, if any."""
        near = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        dotted = ".".join(str(k) for k in tuple(parent) + (key,))
        self.add(tuple(parent) + (key,), f"unknown key {dotted}{hint}; known keys: "
                 f"{', '.join(known)}", at_key=True)
        return near[0] if near else None

    def sorted(self) -> tuple[Problem, ...]:
        """The problems without repeats, by position (those without one first, in the
        order they were found)."""
        return tuple(sorted(dict.fromkeys(self.problems), key=lambda p: (p.line, p.col)))

    def raise_if_any(self) -> None:
        problems = self.sorted()
        if problems:
            raise ConfigError("\n".join(format_problem(p) for p in problems), problems)


def format_problem(p: Problem) -> str:
    """``FILE:LINE:COL: message``, or ``FILE: message`` without a position."""
    return str(p)

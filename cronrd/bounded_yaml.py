"""YAML composition with bounds: no alias bomb, no deep nesting, no huge file.

cronrd runs as root and reads YAML written by operators (job files, the
daemon config). PyYAML composes aliases as shared nodes, but everything that
walks the tree afterwards visits an aliased node once per reference, so nine
levels of ten aliases ("billion laughs") cost a billion steps; and its
composer recurses once per nesting level, so 100,000 nested ``[`` raise
``RecursionError``. The loaders here compose the node tree themselves and
refuse, before anything walks it:

* more than ``MAX_DEPTH`` levels of nesting;
* more than ``MAX_ALIASES`` aliases (``*name``) in one document;
* a document whose tree, with every alias expanded, has more than
  ``MAX_NODES`` nodes (the size a walk of it costs);
* an alias inside the node it names (a recursive structure).

Each refusal is a :class:`YAMLLimitError` (a ``yaml.MarkedYAMLError``) whose
``problem_mark`` is where the limit was crossed and whose ``problem`` says
what to do. ``MAX_FILE_BYTES`` is the size callers allow a file to have
before they parse it (:func:`read_bounded`).

libyaml's event parser is used when PyYAML has it (same events and marks as
the pure-Python one, several times faster); composition is always ours.
"""

from __future__ import annotations

import os
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.resolver import Resolver

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_ALIASES", "MAX_NODES", "YAMLLimitError",
           "BoundedSafeLoader", "FAST_LOADER", "compose", "safe_load", "read_bounded",
           "FileTooLarge"]

MAX_FILE_BYTES = 1 << 20   # 1 MiB
MAX_DEPTH = 64             # mappings and lists nested in each other
MAX_ALIASES = 1000         # *name references in one document
MAX_NODES = 1_000_000      # nodes in the tree with every alias expanded


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document crosses one of the bounds; ``problem`` says which and what to do."""


class FileTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} bytes, more than the limit of {limit} bytes")
        self.size, self.limit = size, limit


class _BoundedComposer(Composer):
    """``Composer`` that counts depth, aliases and expanded size while composing."""

    max_depth = MAX_DEPTH
    max_aliases = MAX_ALIASES
    max_nodes = MAX_NODES

    def compose_document(self):
        self._depth = 0
        self._aliases = 0
        self._open: set[str] = set()      # anchors whose node is still being composed
        self._weight: dict[int, int] = {}  # id(node) -> nodes in its expanded tree
        try:
            return super().compose_document()
        finally:
            self._weight = {}

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > self.max_aliases:
                raise YAMLLimitError(
                    None, None,
                    f"more than {self.max_aliases} aliases (*name) in one document; this "
                    "is how a YAML alias bomb (\"billion laughs\") starts, so the document is "
                    "refused: write the values out or split the file", event.start_mark)
            if event.anchor in self._open:
                raise YAMLLimitError(
                    None, None,
                    f"alias *{event.anchor} refers to the node that contains it (a recursive "
                    "structure, which has no end); refer to a node that is complete",
                    event.start_mark)
            return super().compose_node(parent, index)  # the shared node, weighed already
        event = self.peek_event()
        if self._depth >= self.max_depth:
            raise YAMLLimitError(
                None, None,
                f"nested more than {self.max_depth} levels deep; no cronrd file needs that "
                "many, flatten the structure", event.start_mark)
        anchor = event.anchor
        if anchor is not None:
            self._open.add(anchor)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor)
        self._weigh(node)
        return node

    def _weigh(self, node: Node) -> None:
        weight = 1
        if isinstance(node, SequenceNode):
            weight += sum(self._weight[id(child)] for child in node.value)
        elif isinstance(node, MappingNode):
            weight += sum(self._weight[id(k)] + self._weight[id(v)] for k, v in node.value)
        if weight > self.max_nodes:
            raise YAMLLimitError(
                None, None,
                f"this value expands to more than {self.max_nodes} values once its aliases "
                "(*name) are expanded (a YAML alias bomb, or a file far bigger than any "
                "cronrd file); write the values out or split the file", node.start_mark)
        self._weight[id(node)] = weight


class BoundedSafeLoader(_BoundedComposer, yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds (pure-Python parser)."""


if hasattr(yaml, "CSafeLoader"):
    from yaml.cyaml import CParser

    class _BoundedCSafeLoader(_BoundedComposer, CParser, SafeConstructor, Resolver):
        """libyaml's parser for the events; our composer; the safe constructor."""

        def __init__(self, stream):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    FAST_LOADER: type = _BoundedCSafeLoader

    def _plain(text: str) -> bool:
        """True when the document has no alias and nests at most MAX_DEPTH
        levels: then the bounds cannot be crossed (its tree is no bigger
        than its text) and libyaml may compose it natively, which is twice
        as fast as composing in Python. One pass over libyaml's events."""
        from yaml.events import (AliasEvent as Alias, MappingEndEvent, MappingStartEvent,
                                 ScalarEvent, SequenceEndEvent, SequenceStartEvent,
                                 StreamEndEvent)
        opening, closing = (MappingStartEvent, SequenceStartEvent), (MappingEndEvent,
                                                                     SequenceEndEvent)
        parser = CParser(text)
        try:
            depth = 0
            get = parser.get_event
            while True:
                kind = type(get())
                if kind is ScalarEvent:
                    continue
                if kind in opening:
                    depth += 1
                    if depth > MAX_DEPTH:
                        return False
                elif kind in closing:
                    depth -= 1
                elif kind is Alias:
                    return False
                elif kind is StreamEndEvent:
                    return True
        except yaml.YAMLError:
            return False  # the bounded composer reports it
        finally:
            parser.dispose()
else:  # pragma: no cover - PyYAML without libyaml
    FAST_LOADER = BoundedSafeLoader

    def _plain(text: str) -> bool:
        return False


def compose(text: str, *, fast: bool = True) -> Node | None:
    """The node tree of a single-document string, or None if it is empty.

    Raises :class:`YAMLLimitError` past a bound, ``yaml.YAMLError`` on bad YAML."""
    if fast and _plain(text):
        loader = yaml.CSafeLoader(text)
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()
    loader = (FAST_LOADER if fast else BoundedSafeLoader)(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def safe_load(text: str, *, fast: bool = True) -> Any:
    """``yaml.safe_load`` with the bounds (Python values; aliases stay shared)."""
    loader = (FAST_LOADER if fast else BoundedSafeLoader)(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_bounded(fd: int, limit: int = MAX_FILE_BYTES) -> bytes:
    """Read an open regular file, at most ``limit`` bytes; :class:`FileTooLarge` past it.

    The size is checked before reading and again while reading (a file that
    grows meanwhile is not read past the limit)."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise FileTooLarge(size, limit)
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(1 << 16, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise FileTooLarge(total, limit)
    return b"".join(chunks)

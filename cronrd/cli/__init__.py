"""The cronrd command line: parse, ask the daemon, print. Exit 1 on errors,
2 on usage errors.

One module per group of commands (``base``: what they share and the
top-level group, whose table names each command's module; a command's
module is loaded when it runs). ``main`` is the entry point."""

from __future__ import annotations

from .base import DEFAULT_CONFIG_PATH, main

__all__ = ["main", "DEFAULT_CONFIG_PATH"]

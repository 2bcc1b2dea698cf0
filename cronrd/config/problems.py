"""How config problems are reported: a ``ConfigError`` naming the file."""

from __future__ import annotations

import difflib

from cronrd.errors import ConfigError


def _err(path: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {msg}")



def _unknown(path: str, where: str, key: object, known: tuple[str, ...]) -> ConfigError:
    near = difflib.get_close_matches(str(key), known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return _err(path, f"unknown key {where}.{key}{hint}; known keys: {', '.join(known)}")

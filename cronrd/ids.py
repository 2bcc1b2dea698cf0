"""Node ids: one rule, one message.

A node id goes into certificates (CN and a DNS subjectAltName), host-name
like places and file names, so it is what a DNS label allows: letters,
digits, '.', '_' and '-', at most 63 characters, starting and ending with a
letter or digit.
"""

from __future__ import annotations

import re

NODE_ID_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
RULE = ("use letters, digits, '.', '_' and '-' (at most 63 characters, starting and "
        "ending with a letter or digit)")


def is_node_id(value: object) -> bool:
    return isinstance(value, str) and NODE_ID_RE.match(value) is not None


def node_id_problem(value: object, what: str = "node id") -> str | None:
    """Why ``value`` is not a valid node id (a sentence), or None."""
    if is_node_id(value):
        return None
    return f"{value!r} is not a valid {what}: {RULE}"

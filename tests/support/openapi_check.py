"""Check an HTTP answer against the OpenAPI document that describes it: its
status is one the operation lists, and a JSON body matches the schema the
document gives for that status (components resolved in the document)."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator


def operation(doc: dict, method: str, path: str) -> tuple[str, dict]:
    """The document's template and operation for a concrete ``path``."""
    for template, ops in doc["paths"].items():
        pattern = "^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return template, ops[method.lower()]
    raise AssertionError(f"the document has no operation {method} {path}")


def mismatch(doc: dict, method: str, path: str, status: int, content_type: str,
             body: bytes) -> str | None:
    """What in this answer the document does not say (None: it matches)."""
    template, op = operation(doc, method, path)
    responses = op["responses"]
    described = responses.get(str(status)) or responses.get("default")
    if described is None:
        return (f"{method} {template} answered {status}, which the document does not list "
                f"(it lists {sorted(responses)})")
    ctype = content_type.split(";")[0].strip()
    content = described.get("content") or {}
    if ctype not in content and not (ctype == "application/problem+json"
                                     and "application/json" in content):
        if content:
            return (f"{method} {template} {status} answered {ctype}; the document says "
                    f"{sorted(content)}")
        return None
    schema = (content.get(ctype) or content.get("application/json") or {}).get("schema")
    if schema is None or "json" not in ctype:
        return None
    try:
        value: Any = json.loads(body)
    except ValueError:
        return f"{method} {template} {status}: the body is not JSON: {body[:200]!r}"
    root = {**schema, "components": doc["components"]}
    errors = sorted(Draft202012Validator(root).iter_errors(value), key=lambda e: e.path)
    if errors:
        e = errors[0]
        return (f"{method} {template} {status}: at {'/'.join(map(str, e.absolute_path))}: "
                f"{e.message[:300]}")
    return None

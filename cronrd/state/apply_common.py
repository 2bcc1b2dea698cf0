"""What the areas of apply share: the canonical JSON of a value and of a
job definition, and the limits commands are held to."""

from __future__ import annotations

import json
from typing import Any

PRUNE_BATCH = 50_000  # run records one Prune deletes by count at most
CLAIM_TTL = 60.0      # seconds another node's claim on a job file's digest holds


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))

def canon_text(spec: dict) -> str:
    """A job definition's stored text: the JSON its digest is the sha256 of
    (``JobSpec.canonical``)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

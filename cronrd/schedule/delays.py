"""Deterministic delays: per-fire jitter and retry back-off (pure; the same on every node)."""

from __future__ import annotations

import hashlib
import math


def _unit_hash(text: str) -> float:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def jitter_for(job: str, fire_time: float, max_jitter: float) -> float:
    """Deterministic delay in ``[0, max_jitter)`` for one fire of one job (same on every node)."""
    if not max_jitter or max_jitter <= 0:
        return 0.0
    if isinstance(fire_time, float) and fire_time.is_integer():
        fire_time = int(fire_time)
    return _unit_hash(f"{job}\0{fire_time}") * max_jitter


def retry_delay(
    attempt: int, delay: float, backoff: float, max_delay: float | None, jitter: float, key: str
) -> float:
    """Delay before ``attempt`` (2 = first retry): ``delay * backoff**(attempt-2)`` capped at
    ``max_delay`` (None: no cap), plus a deterministic jitter in ``[0, jitter)`` from sha256(key)."""
    exponent = max(attempt - 2, 0)
    try:
        base = delay * (backoff**exponent)
    except OverflowError:
        base = math.inf
    if max_delay is not None:
        base = min(base, max_delay)
    if jitter and jitter > 0:
        base += _unit_hash(key) * jitter
    return float(base)

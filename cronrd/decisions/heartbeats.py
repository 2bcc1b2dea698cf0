"""heartbeat_timeout (pure): which running runs have been silent too long.

A run of a job with ``heartbeat_timeout`` is stuck when nothing was heard
of it (a heartbeat or a checkpoint, else its start) for that long. The
leader proposes ``HeartbeatTimeout`` for each; apply checks again.
"""

from __future__ import annotations

from typing import Iterable


def stuck(now: float, running: Iterable[tuple[int, float, float]],
          proposed: dict[int, float], retry_after: float) -> list[int]:
    """Run ids of ``running`` (``(run_id, heartbeat_timeout, last heard)``)
    silent for their timeout at ``now``, except those proposed within
    ``retry_after`` seconds (``proposed``: run id -> when)."""
    return [rid for rid, timeout, last in running
            if now - last >= timeout and now - proposed.get(rid, float("-inf")) >= retry_after]

"""heartbeat_timeout (pure): which running runs have been silent too long.

A run of a job with ``heartbeat_timeout`` is stuck when nothing was heard
of it (a heartbeat or a checkpoint, else its start) for that long. The
leader proposes ``HeartbeatTimeout`` for each; apply checks again.
"""

from __future__ import annotations

from typing import Iterable


def stuck(now: float, running: Iterable[tuple[int, float, float]],
          proposed: dict[int, float], retry_after: float,
          leading_since: float = float("-inf")) -> list[int]:
    """Run ids of ``running`` (``(run_id, heartbeat_timeout, last heard)``)
    silent for their timeout at ``now``, except those proposed within
    ``retry_after`` seconds (``proposed``: run id -> when).

    Silence is counted from ``leading_since`` at the earliest (when this
    leader began to hear heartbeats): a heartbeat sent while the cluster had
    no leader could not be heard, so a healthy run is not ended for the
    leaderless spell; it has its whole timeout under the new leader."""
    return [rid for rid, timeout, last in running
            if now - max(last, leading_since) >= timeout
            and now - proposed.get(rid, float("-inf")) >= retry_after]

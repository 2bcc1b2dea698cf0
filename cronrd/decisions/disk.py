"""Is this node's disk too slow to lead, or to be given runs? (pure)

Every Raft append is fsynced before it is acknowledged, and the daemon's
loop waits for it. A disk that takes hundreds of milliseconds per fsync (a
failing drive, a saturated volume, a noisy neighbour) makes a leader late
for every fire time of the cluster and a follower late for its own. So the
node times its log writes; when the typical one of the last ``WINDOW``
seconds is slower than ``SLOW``, it hands leadership over (as a leader with
a bad clock does), does not campaign, and tells the leader, which places no
new run on it until it is fast again.

Nothing here reads a clock: times come in as arguments.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Mapping

SLOW = 0.1          # s: a typical log write slower than this is a slow disk
WINDOW = 10.0       # s of writes looked at
MIN_WRITES = 3      # writes it takes to judge (one slow fsync is not a slow disk)
FRESH = 5.0         # s a member's report of its disk stands on the leader
STALLED = 0.5       # s: a log write under way this long is a slow disk at once


def slow_write(writes: Iterable[tuple[float, float]], now: float, slow: float = SLOW,
               window: float = WINDOW, least: int = MIN_WRITES) -> float | None:
    """The median duration (s) of the log writes of the last ``window``
    seconds (``writes``: (monotonic end, seconds)) when it is over ``slow``
    and there were at least ``least`` of them; else None."""
    recent = [d for at, d in writes if now - at <= window]
    if len(recent) < least:
        return None
    typical = statistics.median(recent)
    return typical if typical > slow else None


def slow_disk(writes: Iterable[tuple[float, float]], under_way: float | None,
              now: float) -> float | None:
    """How slow this node's disk is (s), or None when it is not: the
    typical recent write (``slow_write``), or, sooner, the write under way
    (begun at ``under_way``, monotonic) once it has taken ``STALLED``. A
    leader that cannot finish a write for half a second holds every commit
    of the cluster: waiting for three slow writes to agree cost the fire
    times of those seconds (a 1 s fsync: up to 3.9 s late); handing over
    costs one election among nodes whose disks answer."""
    typical = slow_write(writes, now)
    if under_way is not None and now - under_way >= STALLED:
        return max(typical or 0.0, now - under_way)
    return typical


def disk_bar(node: str, slow_disks: Mapping[str, float]) -> str | None:
    """Why the leader must not place a run on ``node`` for its disk, or None
    (``slow_disks``: node -> its typical log write, s, as last reported)."""
    typical = slow_disks.get(node)
    if typical is None:
        return None
    return (f"its disk is slow (a log write takes {typical * 1000:.0f}ms; over "
            f"{SLOW * 1000:.0f}ms)")

"""Python's cyclic garbage collector, kept out of the fire times' way.

A full collection walks every object the daemon holds (~70,000 with 2,000
jobs: 60 ms on a busy 2-core host), and the interpreter triggers one by
allocation counts, at any moment: a gate due then opens that much late
(bench/fire_precision.py showed it every few seconds). So:

- every ``FREEZE_EVERY`` seconds what lives then is frozen (``gc.freeze``):
  the long-lived heap (modules, jobs, schedules) leaves the collections,
  which then walk only what was made since;
- every ``FULL_EVERY`` seconds the heap is unfrozen and fully collected
  once, to free cycles that were frozen while still in use; it starts at a
  quiet moment, when no gate is due within ``QUIET`` seconds.

Refcounting is untouched: frozen objects are freed as soon as nothing
refers to them; freezing only delays freeing reference *cycles*.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Callable, Iterable

from .clock import Clock

log = logging.getLogger("cronrd.daemon")

FIRST_FREEZE = 5.0     # seconds after the daemon is ready (its schedules are built)
FREEZE_EVERY = 60.0
FULL_EVERY = 3600.0
QUIET = 0.5            # a full collection starts only this long before the next gate
AFTER_GATE = 0.05      # ... or this long after a gate's due time


def quiet_start(now: float, due: Iterable[float], quiet: float = QUIET) -> float:
    """The first moment at or after ``now`` when no gate of ``due`` (their
    due times, wall clock) falls within the next ``quiet`` seconds."""
    t = now
    for d in sorted(due):
        if d + AFTER_GATE <= t:
            continue  # opening now (or waiting for a late run): not in the way
        if d - t >= quiet:
            break
        t = d + AFTER_GATE
    return t


class Heap:
    def __init__(self, clock: Clock, gates_due: Callable[[], Iterable[float]]):
        self.clock = clock
        self.gates_due = gates_due
        self.freezes = 0
        self.full_collections = 0

    def freeze(self) -> None:
        gc.collect(0)  # the youngest garbage is not frozen with the rest
        gc.freeze()
        self.freezes += 1

    async def full_collection(self) -> int:
        """Unfreeze and collect everything, at a quiet moment; freeze again."""
        while True:
            now = self.clock.now()
            start = quiet_start(now, self.gates_due())
            if start <= now:
                break
            await asyncio.sleep(start - now)
        gc.unfreeze()
        found = gc.collect()
        self.freeze()
        self.full_collections += 1
        return found

    async def run(self) -> None:
        await asyncio.sleep(FIRST_FREEZE)
        self.freeze()
        last_full = self.clock.monotonic()
        while True:
            await asyncio.sleep(FREEZE_EVERY)
            if self.clock.monotonic() - last_full >= FULL_EVERY:
                found = await self.full_collection()
                last_full = self.clock.monotonic()
                log.debug("event=heap_collected cycles=%d frozen=%d", found,
                          gc.get_freeze_count())
            else:
                self.freeze()

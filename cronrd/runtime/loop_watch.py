"""The critical loop's stall detector.

Raft ticks, the clock watch, leases, claims, fire gates and run reports all
run on the daemon's event loop; anything that holds it holds every one of
them, and the rest of the cluster reads a held loop as a dead node or a bad
clock. So a stall is an event of its own, told apart from both:

* a beat task on the loop notes the monotonic time every ``BEAT`` seconds;
* a thread of its own looks every ``BEAT`` seconds; once the last beat is
  older than ``threshold``, the loop is being held *now*, and the thread
  takes the loop thread's stack (``sys._current_frames``) while it is held:
  that stack names what holds it, which the stack after the stall cannot;
* when the loop beats again, the stall is reported once: the log line
  ``event=loop_stalled ms=... where=FILE:LINE:FUNCTION stack="..."`` (the
  innermost frame of cronrd's own code, then the stack), and an observation
  in ``cronrd_loop_stall_seconds`` (a histogram on ``/metrics``).

``stalled_within(t0, t1)`` tells the clock watch whether a measurement window
overlapped a stall (its round trip then says nothing about clocks), and
``stalls`` keeps the recent ones.

The thread never touches the loop or its objects: it reads two floats and
writes the captured stack under a lock.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
from collections import deque
from typing import Callable

from .clock import monotonic as clock_monotonic

log = logging.getLogger("cronrd.loop")

BEAT = 0.02            # s between beats, and between the thread's looks
THRESHOLD = 0.1        # s: a beat later than this is a stall
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
KEEP = 64              # recent stalls kept (for stalled_within)
STACK_FRAMES = 12      # frames of the held stack in the log line
OWN_CODE = "/cronrd/"  # a frame of cronrd's own code (not asyncio's, not a library's)


class LoopWatch:
    def __init__(self, threshold: float = THRESHOLD, beat: float = BEAT,
                 monotonic: Callable[[], float] = clock_monotonic):
        self.threshold = threshold
        self.beat = beat
        self.monotonic = monotonic
        self._last = monotonic()
        self._loop_thread: int | None = None
        self._lock = threading.Lock()
        self._held_stack: list[traceback.FrameSummary] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the histogram: counts per bucket (cumulative when rendered), sum, count
        self.bucket_counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0
        self.stalls: deque[tuple[float, float]] = deque(maxlen=KEEP)  # (start, end), monotonic

    # -- the loop's side -----------------------------------------------------------------
    async def run(self) -> None:
        """Beat until cancelled (a service of the daemon), watched by the thread."""
        self._loop_thread = threading.get_ident()
        self._last = self.monotonic()
        self._start_thread()
        try:
            while True:
                await asyncio.sleep(self.beat)
                now = self.monotonic()
                gap = now - self._last
                self._last = now
                if gap - self.beat > self.threshold:
                    self._report(now - gap, now, gap - self.beat)
                elif self._held_stack is not None:
                    with self._lock:  # taken at the edge of a lateness under the threshold
                        self._held_stack = None
        finally:
            self._stop.set()

    def _report(self, start: float, end: float, stalled: float) -> None:
        with self._lock:
            stack, self._held_stack = self._held_stack, None
        self.stalls.append((start, end))
        self.count += 1
        self.sum += stalled
        for i, bound in enumerate(BUCKETS):
            if stalled <= bound:
                self.bucket_counts[i] += 1
                break
        else:
            self.bucket_counts[-1] += 1
        where, text = describe(stack)
        log.warning("event=loop_stalled ms=%.0f where=%s stack=\"%s\" hint=\"the event loop "
                    "that keeps fire times on time was held; the stack is what held it\"",
                    stalled * 1000, where, text)

    def stalled_within(self, t0: float, t1: float) -> bool:
        """Did a stall overlap [t0, t1] (monotonic), or is one going on now?"""
        if self._held():
            return True
        return any(start <= t1 and end >= t0 for start, end in self.stalls)

    def histogram(self) -> tuple[list[tuple[float, int]], float, int]:
        """(upper bound, cumulative count) per bucket (+Inf last), sum, count."""
        out, total = [], 0
        for bound, n in zip((*BUCKETS, float("inf")), self.bucket_counts):
            total += n
            out.append((bound, total))
        return out, self.sum, self.count

    # -- the thread's side ---------------------------------------------------------------
    def _start_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="cronrd-loop-watch",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.beat):
            if not self._held():
                continue
            with self._lock:
                if self._held_stack is not None:
                    continue  # this stall's stack is taken (the first look names it)
            ident = self._loop_thread
            frame = (sys._current_frames().get(ident)  # noqa: SLF001
                     if ident is not None else None)
            if frame is None:
                continue
            # No source lines (no file reads): the capture must be quick, it
            # races the end of the stall.
            stack = traceback.StackSummary.extract(traceback.walk_stack(frame),
                                                   lookup_lines=False)
            stack.reverse()
            with self._lock:
                # only if the loop is still held: a stack taken after it beat
                # again would name whatever runs next
                if self._held():
                    self._held_stack = stack

    def _held(self) -> bool:
        """Is the loop late for its beat by more than the threshold now?"""
        return self.monotonic() - self._last - self.beat > self.threshold

    def stop(self) -> None:
        self._stop.set()


def describe(stack: list[traceback.FrameSummary] | None) -> tuple[str, str]:
    """(where, stack text) of a held stack: where is the innermost frame of
    cronrd's own code ("-" when the stall ended before the thread looked)."""
    if not stack:
        return "-", ""
    own = [f for f in stack if OWN_CODE in f.filename.replace("\\", "/")
           and not f.filename.endswith("loop_watch.py")]
    inner = own[-1] if own else stack[-1]
    where = f"{_short(inner.filename)}:{inner.lineno}:{inner.name}"
    text = " < ".join(f"{_short(f.filename)}:{f.lineno}:{f.name}"
                      for f in reversed(stack[-STACK_FRAMES:]))
    return where, text


def _short(path: str) -> str:
    path = path.replace("\\", "/")
    i = path.rfind(OWN_CODE)
    return path[i + 1:] if i >= 0 else path.rsplit("/", 1)[-1]

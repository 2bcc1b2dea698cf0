"""Virtual time for unit tests of the runtime (issue 30, point 7).

``run_virtual(coro)`` runs ``coro`` as ``asyncio.run`` does, on an event
loop whose clock is virtual: when nothing is ready to run and no I/O is
waiting, the loop jumps its clock to the next timer instead of sleeping
(trio's autojump clock does the same). ``asyncio.sleep(1.5)`` then takes
no real time, and a test that waits for a retry, a deadline or a gate
waits for nothing but the work in between.

``LoopClock`` is the runtime's Clock (now, monotonic) on that loop's time,
from a fixed wall-clock start, for the objects under test.

Only for tests whose waits are all timers of the loop: real I/O still
works (sockets, pipes and the wake-ups of threads are polled first, and a
loop with no timer at all waits for them as usual), but a thread that
works for real time while the loop has a timer pending sees the loop jump
past it.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Coroutine

GRACE = 0.001  # s of real time an idle loop waits for I/O before it jumps


class _JumpingSelector:
    """The loop's selector, polled without blocking; a wait that only a
    timer would end advances the virtual clock instead."""

    def __init__(self, inner: selectors.BaseSelector, loop: "VirtualLoop"):
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None):
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer: only I/O (or a thread) can wake the loop
            return self._inner.select(None)
        # A moment of real time for I/O the kernel is still carrying (a
        # loopback connect, a pipe write of another process), then the jump.
        ready = self._inner.select(min(timeout, GRACE))
        if ready:
            return ready
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0):
        super().__init__()
        self._virtual = start
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[assignment]

    def time(self) -> float:
        return self._virtual

    def advance(self, seconds: float) -> None:
        self._virtual += max(0.0, seconds)


class LoopClock:
    """now() and monotonic() on the running virtual loop's clock."""

    def __init__(self, wall_start: float):
        self.wall_start = wall_start

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def now(self) -> float:
        return self.wall_start + self.monotonic()


def run_virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(coro)`` on a VirtualLoop."""
    with asyncio.Runner(loop_factory=VirtualLoop) as runner:
        return runner.run(coro)

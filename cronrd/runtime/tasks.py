"""Who owns a task, and what happens when it fails.

* ``Services``: an object's long-lived tasks (the daemon's watcher,
  housekeeping, leadership, ...), each with a name, in one
  ``asyncio.TaskGroup``. A service that fails is logged loudly with its name
  and then either restarted by its owner after a bounded, growing back-off
  (``restart=True``; each restart is logged) or reported to ``on_failure``
  (the daemon stops and exits non-zero, so that systemd restarts it).
  Nothing restarts itself silently, and ``close()`` cancels and awaits them
  all.
* ``TaskSet``: short tasks a server starts for one request or message
  (vouching for a peer, admitting a joiner); it tracks them, logs a failure,
  and cancels and awaits what is left on ``close()``.
* ``Changes``: a wake-up for everyone waiting on "something changed" (a
  leader change, a membership change), for waiting on a condition without
  polling it.

Why not a bare TaskGroup: the first failing child of a TaskGroup cancels
all the others at once. The daemon's shutdown is ordered (announce draining
and hand leadership over while the other services still run, then stop
them, then the executor), and a failed service must lead to that same
shutdown, not skip it. So each service runs inside a guard that catches its
failure and tells the owner; the TaskGroup underneath still guarantees that
no service outlives the ``async with`` block.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from ..errors import CronrdError

log = logging.getLogger("cronrd.tasks")

T = TypeVar("T")

Factory = Callable[[], Coroutine[Any, Any, Any]]

RESTART_MIN = 0.5     # seconds before restarting a failed service the first time
RESTART_MAX = 60.0    # the back-off doubles up to this
HEALTHY_AFTER = 60.0  # a service that ran this long before failing starts again at RESTART_MIN


class ServiceDown(CronrdError):
    """A service cannot run for now for a reason outside the daemon (its
    port held by another program): the service logged it once, with what to
    do; ``Services`` starts it again with back-off, without a traceback."""


class Services:
    """Named long-lived tasks with one owner; use as ``async with``."""

    def __init__(self, owner: str, on_failure: Callable[[str, BaseException], None], *,
                 restart_min: float = RESTART_MIN, restart_max: float = RESTART_MAX):
        self.owner = owner
        self.on_failure = on_failure
        self.restart_min = restart_min
        self.restart_max = restart_max
        self.restarts: dict[str, int] = {}
        self._group: asyncio.TaskGroup | None = None
        self._tasks: dict[str, asyncio.Task] = {}

    async def __aenter__(self) -> "Services":
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> bool | None:
        await _cancel(list(self._tasks.values()), self.owner)
        try:
            assert self._group is not None  # __aenter__ made it
            await self._group.__aexit__(*exc_info)  # (returns None: never swallows)
            return None
        finally:
            self._tasks.clear()
            self._group = None

    def start(self, name: str, factory: Factory, *, restart: bool = False) -> None:
        """Run ``factory()`` as the service ``name``. On failure: restart it
        with back-off (``restart``), else tell ``on_failure``. A service
        that returns is done (a stop it was asked for)."""
        if self._group is None:
            raise RuntimeError(f"{self.owner}: start {name} inside `async with`")
        if name in self._tasks and not self._tasks[name].done():
            raise RuntimeError(f"{self.owner}: service {name} is already running")
        self._tasks[name] = self._group.create_task(self._guard(name, factory, restart),
                                                    name=f"{self.owner}:{name}")

    def running(self) -> list[str]:
        return sorted(n for n, t in self._tasks.items() if not t.done())

    async def stop(self, *names: str) -> None:
        """Cancel these services and wait until they have ended."""
        await _cancel([t for t in (self._tasks.pop(n, None) for n in names) if t is not None],
                      self.owner)

    async def _guard(self, name: str, factory: Factory, restart: bool) -> None:
        loop = asyncio.get_running_loop()
        delay = self.restart_min
        while True:
            started = loop.time()
            quiet = False
            try:
                await factory()
                return
            except ServiceDown as exc:
                if not restart:
                    self.on_failure(name, exc)
                    return
                quiet = True
                self.restarts[name] = self.restarts.get(name, 0) + 1
                log.debug("event=service_down owner=%s service=%s error=\"%s\" restart_in_s=%g",
                          self.owner, name, exc, delay)
            except Exception as exc:
                if not restart:
                    log.error("event=service_failed owner=%s service=%s error=%r action=stop",
                              self.owner, name, exc, exc_info=exc)
                    self.on_failure(name, exc)
                    return
                if loop.time() - started >= HEALTHY_AFTER:
                    delay = self.restart_min
                self.restarts[name] = self.restarts.get(name, 0) + 1
                log.error("event=service_failed owner=%s service=%s error=%r action=restart "
                          "restart_in_s=%g restarts=%d", self.owner, name, exc, delay,
                          self.restarts[name], exc_info=exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.restart_max)
            (log.debug if quiet else log.warning)(
                "event=service_restarted owner=%s service=%s restarts=%d", self.owner, name,
                self.restarts[name])


class TaskSet:
    """Short tasks a server starts per request or message; ``close()``
    cancels and awaits what is left."""

    def __init__(self, owner: str):
        self.owner = owner
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task | None:
        if self.closed:
            coro.close()
            return None
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("event=task_failed owner=%s task=%s error=%r", self.owner,
                      task.get_name(), exc, exc_info=exc)

    async def close(self) -> None:
        self.closed = True
        await _cancel(list(self._tasks), self.owner)


class Changes:
    """``await changes.wait()`` returns at the next ``notify()``; every
    waiter wakes. For waiting on a condition: check it, then wait."""

    def __init__(self) -> None:
        self._fut: asyncio.Future | None = None

    def notify(self) -> None:
        fut, self._fut = self._fut, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def wait(self, timeout: float | None = None) -> bool:
        """True when woken, False when ``timeout`` passed first."""
        if self._fut is None or self._fut.done():
            self._fut = asyncio.get_running_loop().create_future()
        # asyncio.wait: one waiter giving up (timeout, cancelled) must not
        # cancel the others' wake-up, nor swallow its own cancellation
        # (asyncio.wait_for can, in 3.11).
        done, _ = await asyncio.wait([self._fut], timeout=timeout)
        return bool(done)

    async def until(self, condition: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``condition()`` holds (checked at each change); False if
        ``timeout`` passed first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not condition():
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            await self.wait(left)
        return True


CANCEL_PATIENCE = 2.0  # seconds before a cancelled task that has not ended is cancelled again


async def _cancel(tasks: list[asyncio.Task], owner: str) -> None:
    """Cancel ``tasks`` and wait until every one has ended. A task can
    swallow a cancellation (asyncio.wait_for in 3.11 loses one that races
    with its result): such a task is cancelled again, and said so."""
    pending = [t for t in tasks if not t.done()]
    while pending:
        for task in pending:
            task.cancel()
        _, left = await asyncio.wait(pending, timeout=CANCEL_PATIENCE)
        pending = list(left)
        for task in pending:
            log.warning("event=task_cancel_repeated owner=%s task=%s", owner, task.get_name())
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the guards log failures themselves


async def first_of(*aws: Awaitable) -> None:
    """Wait until the first of ``aws`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_within(aw: Awaitable[T], seconds: float) -> T:
    """``asyncio.wait_for(aw, seconds)`` without its Python 3.11 flaw: a
    cancel that arrives just as ``aw`` finishes is lost there (wait_for
    returns ``aw``'s result and the task goes on as if never cancelled).
    A leader's backfill duty that lost its cancel so kept the leader's term
    from ending, and the node, elected again, never led (fault suite, seed
    211695542). Raises TimeoutError after ``seconds``."""
    async with asyncio.timeout(seconds):
        return await aw

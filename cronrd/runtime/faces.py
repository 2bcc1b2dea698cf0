"""The faces' loop: the control socket and the HTTP server on an event loop
of their own, in a thread of their own.

The daemon's main loop is the critical path: Raft ticks and messages, the
clock watch, leases, claims, fire gates and run reports (DESIGN.md, "The
critical path"). Everything that serves a client runs here instead:
accepting and reading connections (slow ones included), parsing requests
and HTTP, TLS, authenticating tokens, checking hook signatures, rendering
pages and metrics, and encoding answers. A flood of connections, a slow
body or a big answer costs this loop, never the critical one.

What a request asks of the daemon reaches the critical loop only through
``CoreBridge``: a handler's coroutine is run there (``run``), and its answer
(or its error) comes back here; a stream's items are pulled one at a time.
Reads the faces make themselves (tokens, pages, the event feed) go to a
read-only SQLite connection of this thread (``conn``): WAL lets it read
while the critical loop applies, and it sees whole committed batches.

Since 0.3.0 the daemon runs these same pieces in a process of its own
(faces_host.py, faces_child.py): there ``CoreBridge`` has one loop (the
faces'), and what crosses to the daemon is a request over a socket pair.
Two loops in one process, as here, share Python's interpreter lock: a busy
faces' loop delayed the critical loop by a switch interval at a time, and a
faces' thread descheduled while it held the lock held the critical loop too
(bench/README.md, hostile_load.py). This layout stays for
``CRONRD_FACES=thread``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, AsyncIterator, Callable, Coroutine, cast

from .control.server import Handler, Stream

log = logging.getLogger("cronrd.faces")

CALL_TIMEOUT = 30.0    # s a blocking call to the critical loop waits (its loop stalled?)
STOP_TIMEOUT = 10.0


class CoreBridge:
    """Runs work on the critical loop for the faces' loop."""

    def __init__(self, core: asyncio.AbstractEventLoop):
        self.core = core

    def on_core(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.core
        except RuntimeError:
            return False

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await ``coro`` on the critical loop; its result or error here. A
        cancelled wait cancels it there too."""
        if self.on_core():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.core))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the plain function ``fn`` on the critical loop."""
        async def go():
            return fn(*args)
        return await self.run(go())

    def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn`` on the critical loop and wait for it in this thread
        (for the few plain callbacks a library calls without awaiting:
        readiness, the metrics' live view). Bounded by CALL_TIMEOUT."""
        if self.on_core():
            return fn(*args)

        async def go():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(go(), self.core).result(CALL_TIMEOUT)

    async def iterate(self, it: AsyncIterator[dict]) -> AsyncIterator[dict]:
        """The items of an async iterator that lives on the critical loop."""
        try:
            while True:
                try:
                    # (an async generator's or an ``async def __anext__``'s: a coroutine)
                    item = await self.run(cast(Coroutine[Any, Any, dict], it.__anext__()))
                except StopAsyncIteration:
                    return
                yield item
        finally:
            close = getattr(it, "aclose", None)
            if close is not None:
                try:
                    await asyncio.shield(self.run(close()))
                except (Exception, asyncio.CancelledError):  # it was ending anyway
                    pass

    def handler(self, fn: Handler) -> Handler:
        """A control handler, run on the critical loop, its streams pulled
        across."""
        async def across(args: dict, caller) -> Any:
            result = await self.run(fn(args, caller))
            if isinstance(result, Stream):
                return Stream(self.iterate(result.it))
            return result
        return across

    def listener(self, faces: asyncio.AbstractEventLoop,
                 fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """A listener the critical loop calls that runs ``fn`` on the faces'
        loop (never waited for: the critical loop goes on at once)."""
        def hop(value: Any) -> None:
            try:
                faces.call_soon_threadsafe(fn, value)
            except RuntimeError:  # the faces' loop is closed: shutting down
                pass
        return hop


class FacesThread:
    """The faces' event loop, in a thread of its own."""

    def __init__(self, name: str = "cronrd-faces"):
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> asyncio.AbstractEventLoop:
        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            asyncio.set_event_loop(loop)
            self._ready.set()
            try:
                loop.run_forever()
            finally:
                try:
                    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                    for task in pending:
                        task.cancel()
                    if pending:
                        loop.run_until_complete(asyncio.wait(pending, timeout=STOP_TIMEOUT))
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()
        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        self._ready.wait()
        assert self.loop is not None
        return self.loop

    async def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await, from the critical loop, ``coro`` run on the faces' loop."""
        assert self.loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def stop(self) -> None:
        """Stop the loop (its tasks cancelled) and wait for the thread."""
        if self.loop is None or self._thread is None:
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            pass
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join,
                                                         STOP_TIMEOUT + 5)


# The control commands served wholly on the faces' loop: they read the state
# through the faces' connection and, of the daemon's objects, only values read
# whole (the applied index, the watcher's list of problems, which it replaces,
# the scheduler's next fire of a job, a dict lookup); --consistent's read
# barrier, an audit record and a proposal go across. A backfill is here for
# its planning (up to 10,000 fire times without --force; it proposes across).
# Everything else (a status of the members, an explain that looks at the
# members' views, a run-now that waits for its run, a cancel) runs on the
# critical loop.
FACES_READS = frozenset({"jobs", "job", "runs", "run", "audit", "graph", "backfills", "pools",
                         "alerts", "dead_letter", "notifications", "backfill", "explain",
                         "logs"})


def control_table(core: dict[str, Handler], faces: dict[str, Handler],
                  bridge: CoreBridge) -> dict[str, Handler]:
    """The control socket's commands: FACES_READS from ``faces`` (the
    handlers over the faces' connection), the rest across to ``core``."""
    return {name: faces[name] if name in FACES_READS else bridge.handler(fn)
            for name, fn in core.items()}


class _LogAcross:
    """The Log as the faces see it: proposals and read barriers on the
    critical loop, effects delivered on the faces' loop."""

    def __init__(self, log_, bridge: CoreBridge, faces: asyncio.AbstractEventLoop):
        self._log = log_
        self._bridge = bridge
        self._faces = faces

    @property
    def leader(self) -> str | None:
        return getattr(self._log, "leader", None)

    @property
    def is_leader(self) -> bool:
        return self._log.is_leader

    def propose(self, cmd) -> asyncio.Future:
        """A future on the faces' loop (as the Log's is on its own: callers
        await it or watch it with add_done_callback)."""
        async def go():
            return await self._log.propose(cmd)
        return asyncio.ensure_future(self._bridge.run(go()))

    async def read_barrier(self) -> int:
        return await self._bridge.run(self._log.read_barrier())

    def subscribe(self, listener: Callable[[Any], None]) -> None:
        self._bridge.blocking(self._log.subscribe, self._bridge.listener(self._faces, listener))


class _MembersAcross:
    def __init__(self, members, bridge: CoreBridge):
        self._members = members
        self._bridge = bridge

    async def call(self, node: str, method: str, args: dict, timeout: float = 5.0) -> Any:
        return await self._bridge.run(self._members.call(node, method, args, timeout))

    def status(self) -> dict:
        return self._bridge.blocking(self._members.status)

    def node_views(self) -> list:
        """The leader's view of the members (explain), taken on the critical loop."""
        return self._bridge.blocking(self._members.node_views)


class CoreOnly:
    """Stands in, on the faces' side, for an object of the critical loop
    that reads or writes the state through the critical loop's SQLite
    connection (the state machine, the executor). apsw refuses one
    connection to two threads at once, and the refusal lands wherever the
    other thread was: the critical loop's apply failed with "Connection is
    busy in another thread" and the daemon stopped. So any use from here is
    a bug, said at once and here."""

    def __init__(self, what: str):
        self._what = what

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"{self._what}.{name} belongs to the critical loop (its SQLite connection is that "
            "loop's): read through the faces' own connection, or run it across the bridge")


class CoreReads:
    """The daemon's Handlers as the HTTP face sees them from its own loop:
    every ``h_*`` handler (and ``_audit``, ``log_chunk``) runs on the
    critical loop, except FACES_READS (and LOCAL), which run here over the
    faces' own handlers (``local``); ``conn`` is the faces' own read-only
    connection; config, clock and start time are shared values that do not
    change."""

    ACROSS = frozenset({"_audit", "log_chunk"})
    # ... of which these run here when the faces have handlers of their own:
    # a run's log is read from its file here, or asked of its node (the
    # request crosses to the critical loop only to be sent).
    LOCAL = frozenset({"log_chunk"})

    def __init__(self, handlers, bridge: CoreBridge, conn, faces: asyncio.AbstractEventLoop,
                 local=None):
        self._h = handlers
        self._local = local     # the same handlers over ``conn``: FACES_READS run here
        self._bridge = bridge
        self.conn = conn
        self.config = handlers.config
        self.clock = handlers.clock
        self.started_at = handlers.started_at
        self.log = _LogAcross(handlers.log, bridge, faces)
        self.members = _MembersAcross(handlers.members, bridge)

    def __getattr__(self, name: str) -> Any:
        if not (name.startswith("h_") or name in self.ACROSS):
            raise AttributeError(f"{name!r} is not served to the faces (faces.CoreReads)")
        if self._local is not None and (name[2:] in FACES_READS or name in self.LOCAL):
            return getattr(self._local, name)
        fn = getattr(self._h, name)

        async def across(*args: Any, **kw: Any) -> Any:
            result = await self._bridge.run(fn(*args, **kw))
            if isinstance(result, Stream):
                return Stream(self._bridge.iterate(result.it))
            return result
        return across

    def table(self) -> dict[str, Handler]:
        local = self._local.table() if self._local is not None else {}
        return control_table(self._h.table(), local, self._bridge) if local else {
            name: self._bridge.handler(fn) for name, fn in self._h.table().items()}

    def read_log_chunk(self, run_id: int, offset: int) -> dict:
        from .control.logs import read_log_chunk
        return read_log_chunk(self.config, self.conn, run_id, offset)

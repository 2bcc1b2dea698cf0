"""The faces' process: the control socket and the HTTP server, apart from
the daemon's critical loop (``python -m cronrd.runtime.faces_child FD
SYNC_FD``, ``cronrd __faces FD SYNC_FD`` in the frozen binary; the daemon
starts it, faces_host.py says why).

It serves exactly what the faces' thread served (faces.py): the reads of
faces.FACES_READS over a read-only connection of its own, everything else
asked of the daemon. Here "the daemon" is ``Remote``: the same names as the
daemon's Handlers, log and members, each a request over the wire
(faces_wire.py), so faces.CoreReads, the control server and the HTTP face
run unchanged, with the bridge on this one loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import itertools
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any, Callable, cast

from ..errors import CronrdError
from ..state import tokens
from . import faces_wire as W
from . import clock
from .clock import Clock
from .control.handlers import Handlers
from .control.server import ControlServer, SocketInUse, Stream
from .faces import CoreBridge, CoreOnly, CoreReads
# (loaded before the daemon sends its config: while it sets itself up)
from .http.metrics import Metrics
from .http.server import HttpServer
from .logfmt import setup_logging
from .storage import open_readonly
from .tasks import Services, wait_within

log = logging.getLogger("cronrd.faces")

FACES_NICE = 5           # below the daemon's critical loop (the kernel runs it first)
CALL_TIMEOUT = 30.0      # s a blocking call waits for the daemon
HTTP_PATIENCE = 10.0     # s the start waits for the HTTP server's first try to listen
SOCKET_PATIENCE = 3.0    # s a control socket still held is waited for (see _start_control)
PR_SET_PDEATHSIG = 1


class Channel:
    """This end of the wire: calls to the daemon, and what it pushes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 sync: socket.socket, state: dict):
        self.reader = reader
        self.writer = writer
        self.sync = sync
        self.sync.settimeout(CALL_TIMEOUT)
        self.sync_lock = threading.Lock()
        self.state = state
        self.pending: dict[int, asyncio.Future] = {}
        self.listeners: list[Callable[[list], None]] = []
        self._ids = itertools.count(1)

    def send(self, msg: tuple) -> None:
        if not self.writer.is_closing():
            self.writer.write(W.dumps(msg))

    async def call(self, op: str, *args: Any) -> Any:
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        try:
            self.send(("call", rid, op, args))
            kind, value = await fut
        except asyncio.CancelledError:
            if rid in self.pending:
                self.send(("cancel", rid))
            raise
        finally:
            self.pending.pop(rid, None)
        if kind == "err":
            raise W.unpack_error(value)
        if kind == "stream":
            return Stream(self._pull(value))
        return value

    async def _pull(self, sid: int):
        done = False
        try:
            while True:
                kind, item = await self.call("next", sid)
                if kind == "end":
                    done = True
                    return
                yield item
        finally:
            if not done:
                asyncio.get_running_loop().create_task(self._close(sid))

    async def _close(self, sid: int) -> None:
        try:
            await self.call("close", sid)
        except Exception:
            pass

    def blocking(self, op: str, *args: Any) -> Any:
        """A call answered at once by the daemon (its members' status, the
        metrics' live view...), from code that does not await."""
        with self.sync_lock:
            rid = next(self._ids)
            try:
                self.sync.sendall(W.dumps((rid, op, args)))
                while True:
                    got, kind, value = W.recv_frame(self.sync)
                    if got == rid:
                        break  # (else the late answer of a call that timed out)
            except socket.timeout:
                raise CronrdError(f"the daemon did not answer {op} within {CALL_TIMEOUT:g}s "
                                  "(its critical loop is held: see event=loop_stalled)") from None
            except (OSError, EOFError) as exc:
                raise CronrdError(f"the daemon is gone ({exc})") from None
        if kind == "err":
            raise W.unpack_error(value)
        return value

    async def run(self) -> None:
        """Until the daemon says stop or goes away."""
        try:
            while True:
                msg = await W.read_frame(self.reader, narrow=False)
                kind = msg[0]
                if kind == "reply":
                    fut = self.pending.get(msg[1])
                    if fut is not None and not fut.done():
                        fut.set_result((msg[2], msg[3]))
                elif kind == "state":
                    self.state = msg[1]
                elif kind == "effects":
                    for listener in list(self.listeners):
                        try:
                            listener(msg[1])
                        except Exception:
                            log.exception("event=effect_listener_failed")
                elif kind == "stop":
                    return
        except (EOFError, ConnectionError):
            log.info("event=faces_orphaned hint=\"the daemon went away: the faces stop\"")
        finally:
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(CronrdError("the daemon is stopping"))


class RemoteLog:
    def __init__(self, chan: Channel):
        self._chan = chan

    @property
    def leader(self) -> str | None:
        return self._chan.state.get("leader")

    @property
    def is_leader(self) -> bool:
        return bool(self._chan.state.get("is_leader"))

    async def propose(self, cmd) -> Any:
        return await self._chan.call("propose", cmd)

    async def read_barrier(self) -> int:
        return await self._chan.call("read_barrier")

    def subscribe(self, listener: Callable[[list], None]) -> None:
        self._chan.listeners.append(listener)
        self._chan.send(("subscribe",))


class RemoteMembers:
    def __init__(self, chan: Channel):
        self._chan = chan

    async def call(self, node: str, method: str, args: dict, timeout: float = 5.0) -> Any:
        return await self._chan.call("member_call", node, method, args, timeout)

    def status(self) -> dict:
        return self._chan.blocking("members_status")

    def node_views(self) -> list:
        return self._chan.blocking("node_views")


class RemoteWatcher:
    def __init__(self, chan: Channel):
        self._chan = chan

    @property
    def problems(self) -> tuple:
        return self._chan.blocking("problems")


class RemoteLeadership:
    scheduler = None  # the daemon's: asked through next_fires

    def __init__(self, chan: Channel):
        self._chan = chan

    def next_fires(self, names: list[str]) -> dict[str, int | None]:
        if not self._chan.state.get("is_leader"):
            return {}  # only a leader's scheduler has any
        return self._chan.blocking("next_fires", list(names))


class Remote:
    """The daemon's Handlers as the faces' process sees them: each ``h_*``
    (and ``_audit``, ``log_chunk``) and each control command a request."""

    def __init__(self, chan: Channel, config, started_at: float, commands: list[str]):
        self._chan = chan
        self.config = config
        self.clock = Clock()
        self.started_at = started_at
        self.log = RemoteLog(chan)
        self.members = RemoteMembers(chan)
        self.watcher = RemoteWatcher(chan)
        self.leadership = RemoteLeadership(chan)
        self._commands = commands

    def is_ready(self) -> bool:
        return bool(self._chan.state.get("ready"))

    def table(self) -> dict[str, Any]:
        def command(name: str):
            async def across(args: dict, caller) -> Any:
                return await self._chan.call("table", name, args, caller)
            return across
        return {name: command(name) for name in self._commands}

    def __getattr__(self, name: str) -> Any:
        if not (name.startswith("h_") or name in ("_audit", "log_chunk")):
            raise AttributeError(name)

        async def across(*args: Any, **kw: Any) -> Any:
            return await self._chan.call("h", name, args, kw)
        return across


async def serve(fd: int, sync_fd: int) -> int:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd),
                                                        limit=W.MAX_FRAME)
    try:
        kind, init = await W.read_frame(reader, narrow=False)
    except EOFError:  # the daemon stopped before it was set up
        return 0
    assert kind == "init", kind
    cfg = init["config"]
    setup_logging(cfg.log_level)
    chan = Channel(reader, writer, socket.socket(fileno=sync_fd), init["state"])
    remote = Remote(chan, cfg, init["started_at"], init["commands"])
    conn = open_readonly(cfg.state_db)
    bridge = CoreBridge(loop)  # the "core" is this loop: Remote does the crossing
    plain = CoreReads(remote, bridge, conn, loop)
    handlers = Handlers(cfg, remote.clock, conn, cast(Any, CoreOnly("machine")),
                        cast(Any, plain.log), cast(Any, plain.members),
                        cast(Any, CoreOnly("executor")), cast(Any, remote.watcher),
                        cast(Any, remote.leadership), started_at=remote.started_at,
                        is_ready=remote.is_ready)
    handlers.http_url = lambda: None
    handlers.http_problem = lambda: None
    across = CoreReads(remote, bridge, conn, loop, local=handlers)
    control = ControlServer(cfg.socket, across.table(), cfg.socket_group)
    try:
        await _start_control(control)
    except BaseException as exc:
        chan.send(("failed", W.pack_error(exc)))
        await writer.drain()
        return 1
    http = None
    first_try = asyncio.Event()   # the HTTP server listens, or failed to, once

    def on_url(url: str | None) -> None:
        chan.send(("http_url", url, http.problem if http is not None else None))
        first_try.set()
    if cfg.http.listen is None:
        first_try.set()
    else:
        def status() -> dict:
            return {"role": chan.state.get("role"), "leader": chan.state.get("status_leader")}
        http = HttpServer(cfg.http, is_ready=remote.is_ready, status=status,
                          metrics=Metrics(lambda: open_readonly(cfg.state_db),
                                          lambda: chan.blocking("metrics_view"),
                                          job_histograms=cfg.http.job_histograms),
                          find_token=lambda secret: tokens.by_secret(conn, secret),
                          find_session=lambda secret, now: tokens.by_session(conn, secret, now),
                          list_tokens=lambda: tokens.listing(conn),
                          now=remote.clock.now, reads=across, on_url=on_url)
        handlers.http_url = lambda: http.url if http is not None else None
        handlers.http_problem = lambda: http.problem if http is not None else None

    def failed(name: str, exc: BaseException) -> None:
        log.error("event=faces_service_failed service=%s error=\"%s\"", name, exc)
    try:
        async with Services("faces", failed) as services:
            if http is not None:
                services.start("http", http.run, restart=True)
            # the daemon's `status` names the URL from the start (or none: the
            # port is taken, tried again; the jobs do not wait for it)
            try:
                await wait_within(first_try.wait(), HTTP_PATIENCE)
            except TimeoutError:
                pass
            chan.send(("started",))
            log.info("event=faces_serving pid=%d socket=%s", os.getpid(), cfg.socket)
            await chan.run()
    finally:
        await control.close()
        if http is not None:
            http.metrics.close()
        conn.close()
    return 0


async def _start_control(control: ControlServer) -> None:
    """Serve the control socket. A process still holding it may be the
    faces of this daemon's last life, killed with it and not gone yet (the
    daemon holds the data directory's lock: no other daemon of this state
    runs); it is given SOCKET_PATIENCE before the socket counts as another
    daemon's."""
    deadline = clock.monotonic() + SOCKET_PATIENCE
    while True:
        try:
            return await control.start()
        except SocketInUse:
            if clock.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.1)


def _die_with_parent() -> None:
    """The kernel ends this process when the daemon's ends (a daemon killed
    by SIGKILL cannot tell it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv):
        print("usage: cronrd __faces FD SYNC_FD (the daemon starts this; it is not a command)",
              file=sys.stderr)
        return 2
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the daemon ended before the kernel was asked
        return 1
    # Ctrl-C in a terminal reaches the whole process group: the daemon stops
    # and then tells its faces (it serves `status` while it hands over).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        os.nice(FACES_NICE)
    except OSError:
        pass
    return asyncio.run(serve(int(argv[0]), int(argv[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The daemon's end of its faces' process (faces_child.py).

The faces (the control socket and the HTTP server: accepting, parsing,
TLS, tokens, hook signatures, pages, listings, explain, metrics renders,
backfill planning) run in a process of their own. In a thread of the
daemon they shared Python's interpreter lock with the critical loop: a
saturated faces' thread, or one descheduled while it held the lock, held
Raft, claims and gates too (bench/README.md, hostile_load.py). A process
has its own interpreter and its own share of the CPU, which it takes at a
lower priority (faces_child.FACES_NICE): under load the kernel runs the critical loop
first.

What the faces ask of the daemon crosses a socket pair as values
(faces_wire.py), served here on the critical loop, each request a task of
its own:

* ``table``: a control command not among faces.FACES_READS, with the
  caller the faces read from the socket's credentials or a token;
* ``h``: a handler the HTTP face calls (``h_*``, ``_audit``, ``log_chunk``);
* ``propose``, ``read_barrier``, ``member_call``;
* ``next`` / ``close`` of a stream a command answered with;
* the blocking ones, on a second socket (the faces call them from code that
  does not await): the members' status and views, the metrics' live view,
  the watcher's problems and the scheduler's next fire times.

This end pushes the faces what they read live: the leader and readiness
(``state``, when it changes) and, once they subscribe, each applied batch's
effects that the event feed reads (RunDone, StateRestored). The faces read
the state itself through their own read-only connection.

The faces' process is restarted if it dies (jobs keep running meanwhile;
``event=faces_died``) and dies with the daemon (PR_SET_PDEATHSIG, and the
end of the socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..errors import CronrdError
from ..state import commands as C
from ..state.effects import RunDone, StateRestored
from . import faces_wire as W
from .control.server import Stream

if TYPE_CHECKING:
    from .control.handlers import Handlers

log = logging.getLogger("cronrd.faces")

START_TIMEOUT = 60.0     # s for the faces' process to serve its control socket
STOP_TIMEOUT = 10.0      # s it has to close its servers once asked
STATE_INTERVAL = 0.25    # s between looks at the leader and readiness
MAX_INFLIGHT = 512       # requests of the faces served at once (then it waits)
MAX_BUFFERED = 64 * 1024 * 1024   # bytes queued for a faces' process that reads nothing
RESTART_DELAYS = (0.5, 1.0, 2.0, 5.0, 10.0)
# the effects the faces' event feed looks at (http/stream.py EventFeed)
FED_EFFECTS = (RunDone, StateRestored)
# handler attributes the ``h`` request may name besides h_*
H_EXTRA = frozenset({"_audit", "log_chunk"})
# What the faces propose themselves (everything else they ask of a handler
# here): a refused request's audit record (http/hooks.py), a backfill they
# planned (faces.FACES_READS), the runs a signed hook starts. A faces'
# process taken over cannot forge a run's end, a member or a token.
FACES_MAY_PROPOSE = (C.Audit, C.CreateBackfill, C.ManualRun, C.StartSession, C.EndSession)


def faces_argv(fd: int, sync_fd: int) -> list[str]:
    if getattr(sys, "frozen", False):  # the self-contained binary (packaging/)
        return [sys.executable, "__faces", str(fd), str(sync_fd)]
    return [sys.executable, "-m", "cronrd.runtime.faces_child", str(fd), str(sync_fd)]


class FacesFailed(CronrdError):
    """The faces' process could not start serving."""


class FacesHost:
    """Starts the faces' process and serves it on the critical loop."""

    def __init__(self, config, *, started_at: float):
        self.config = config
        self.started_at = started_at
        self.proc: subprocess.Popen | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.streams: dict[int, Any] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        self.subscribed = False
        self.sent_state: dict | None = None
        self.http_url: str | None = None
        self.http_problem: str | None = None   # why its HTTP server cannot listen
        self.stopping = False
        self.starts = 0
        self._ids = itertools.count(1)
        self._ended: asyncio.Event | None = None
        self._readers: list[asyncio.Task] = []
        self._wires: tuple[socket.socket, socket.socket] | None = None
        self._started: asyncio.Future | None = None  # made by each start

    def attach(self, handlers: "Handlers", *, is_ready: Callable[[], bool],
               blocking: dict[str, Callable[..., Any]]) -> None:
        """What the faces serve: ``handlers``' commands, and ``blocking``
        (name -> plain function: the faces' blocking calls)."""
        self.handlers = handlers
        self.log = handlers.log
        self.members = handlers.members
        self.is_ready = is_ready
        self.blocking = blocking
        self.table = handlers.table()
        self.log.subscribe(self._on_effects)

    # -- life --------------------------------------------------------------------------
    def launch(self) -> None:
        """Start the faces' process (it loads its code meanwhile: the daemon
        calls this before its own longer setup, then ``start``)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sync_ours, sync_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                faces_argv(theirs.fileno(), sync_theirs.fileno()),
                pass_fds=(theirs.fileno(), sync_theirs.fileno()), stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
            sync_theirs.close()
        self.starts += 1
        self._wires = (ours, sync_ours)

    async def start(self) -> None:
        """Give the launched faces' process what it serves and wait until it
        serves its control socket; FacesFailed says why it could not."""
        loop = asyncio.get_running_loop()
        if self._wires is None:
            self.launch()
        assert self._wires is not None and self.proc is not None
        ours, sync_ours = self._wires
        self._wires = None
        self.subscribed = False
        self.sent_state = None
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=W.MAX_FRAME)
        sync_reader, sync_writer = await asyncio.open_unix_connection(sock=sync_ours,
                                                                      limit=W.MAX_FRAME)
        self.writer = writer
        self._ended = asyncio.Event()
        try:
            writer.write(W.dumps(("init", {"config": self.config, "started_at": self.started_at,
                                           "commands": sorted(self.table),
                                           "state": self._state(), "pid": os.getpid()})))
        except Exception as exc:  # a config that cannot cross: a bug, said at once
            self.kill()
            raise FacesFailed(f"the faces' process could not be given the config: {exc}") \
                from None
        self._started = loop.create_future()
        self._readers = [loop.create_task(self._read(reader), name="faces-read"),
                         loop.create_task(self._serve_blocking(sync_reader, sync_writer),
                                          name="faces-blocking")]
        try:
            async with asyncio.timeout(START_TIMEOUT):
                # (requests it serves meanwhile are answered: the control
                # socket may serve before HTTP has tried to listen)
                await asyncio.wait([self._started], return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            pass
        started = self._started
        if not started.done() or started.exception() is not None:
            error = (started.exception() if started.done() else
                     FacesFailed(f"the faces' process (control socket, HTTP) did not start "
                                 f"within {START_TIMEOUT:g}s"))
            self.kill()
            await self._drop()
            if isinstance(error, CronrdError):
                raise error
            raise FacesFailed(f"the faces' process (control socket, HTTP) did not start: "
                              f"{error}; its error is in the log above")
        log.info("event=faces_started pid=%d", self.proc.pid)
        self._readers.append(loop.create_task(self._watch_state(), name="faces-state"))

    async def run(self) -> None:
        """The daemon's service: restart the faces' process whenever it dies."""
        delays = iter(RESTART_DELAYS)
        while True:
            assert self._ended is not None
            await self._ended.wait()
            code = await asyncio.get_running_loop().run_in_executor(None, self._reap)
            await self._drop()
            if self.stopping:
                return
            delay = next(delays, RESTART_DELAYS[-1])
            log.error("event=faces_died code=%s restart_in_s=%g hint=\"jobs keep running; "
                      "the control socket and HTTP answer again once they restart\"",
                      code, delay)
            await asyncio.sleep(delay)
            try:
                await self.start()
                delays = iter(RESTART_DELAYS)
            except CronrdError as exc:
                log.error("event=faces_restart_failed error=\"%s\"", exc)
                self._ended.set()

    async def stop(self) -> None:
        """Ask the faces to close their servers and wait for the process."""
        self.stopping = True
        if self.proc is None:
            return
        self._send(("stop",))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.proc.wait, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("event=faces_kill reason=\"did not stop in %gs\"", STOP_TIMEOUT)
            self.kill()
        await self._drop()

    def _reap(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(5)
        except subprocess.TimeoutExpired:  # its wire is gone but it lingers
            self.kill()
            return proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    async def _drop(self) -> None:
        """Forget a faces' process: its requests, streams and wire."""
        current = asyncio.current_task()
        tasks = [t for t in (*self.tasks.values(), *self._readers) if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        self.tasks.clear()
        self._readers = []
        for it in self.streams.values():
            close = getattr(it, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    pass
        self.streams.clear()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.http_url = None
        self.http_problem = None

    # -- pushing -----------------------------------------------------------------------
    def _send(self, msg: tuple) -> None:
        writer = self.writer
        if writer is None or writer.is_closing():
            return
        try:
            frame = W.dumps(msg)
        except Exception as exc:  # an answer that cannot cross: the request gets the error
            if msg[0] == "reply":
                frame = W.dumps(("reply", msg[1], "err", W.pack_error(CronrdError(
                    f"the answer could not be sent to the faces: {exc}"))))
            else:
                log.error("event=faces_send_failed kind=%s error=\"%s\"", msg[0], exc)
                return
        if writer.transport.get_write_buffer_size() > MAX_BUFFERED:
            log.error("event=faces_stuck buffered=%d hint=\"the faces' process reads nothing: "
                      "it is restarted\"", writer.transport.get_write_buffer_size())
            self.kill()
            return
        writer.write(frame)

    def _state(self) -> dict:
        """What the faces read live (cheap: asked every STATE_INTERVAL)."""
        me = self.config.node_id if self.config is not None else None
        role = getattr(self.members, "role", None)  # a cluster's; one host always leads
        leader = getattr(self.log, "leader", me) or None
        return {"ready": bool(self.is_ready()), "leader": leader,
                "is_leader": bool(self.log.is_leader),
                "role": role() if callable(role) else "leader", "status_leader": leader}

    def push_state(self) -> None:
        """Tell the faces the leader and readiness if they changed (also
        called by the daemon the moment it is ready: a `status` that says
        ready is then never answered before /readyz says so too)."""
        state = self._state()
        if state != self.sent_state:
            self.sent_state = state
            self._send(("state", state))

    async def _watch_state(self) -> None:
        while True:
            self.push_state()
            await asyncio.sleep(STATE_INTERVAL)

    def _on_effects(self, effects: list) -> None:
        if self.writer is None:
            return
        self.push_state()   # a leader change goes before the batch that shows it
        if self.subscribed:
            self._send(("effects", [e for e in effects if isinstance(e, FED_EFFECTS)]))

    # -- serving -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _reading(self):
        """A wire's end: the faces gone is quiet; a frame not ours kills them
        (they are started again)."""
        try:
            yield
        except (EOFError, ConnectionError):
            pass
        except W.WireError as exc:
            log.error("event=faces_wire_broken error=\"%s\"", exc)
            self.kill()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        inflight = asyncio.Semaphore(MAX_INFLIGHT)
        try:
            with self._reading():
                await self._read_frames(reader, inflight)
        finally:
            if self._started is not None and not self._started.done():
                self._started.set_exception(FacesFailed(
                    "the faces' process ended before it served"))
            if self._ended is not None:
                self._ended.set()

    async def _read_frames(self, reader: asyncio.StreamReader,
                           inflight: asyncio.Semaphore) -> None:
        while True:
            await inflight.acquire()
            try:
                msg = await W.read_frame(reader, narrow=True)
            except BaseException:
                inflight.release()
                raise
            kind = msg[0]
            if kind == "call":
                _, rid, op, args = msg
                task = asyncio.get_running_loop().create_task(self._serve(rid, op, args))
                self.tasks[rid] = task

                def done(_: asyncio.Task, rid: int = rid) -> None:
                    self.tasks.pop(rid, None)
                    inflight.release()
                task.add_done_callback(done)
                continue
            inflight.release()
            self._note(kind, msg[1:])

    def _note(self, kind: str, rest) -> None:
        """A message of the faces that asks for no answer."""
        if kind == "cancel":
            given_up = self.tasks.get(rest[0])
            if given_up is not None:
                given_up.cancel()
        elif kind == "subscribe":
            self.subscribed = True
        elif kind == "http_url":
            self.http_url = rest[0]
            self.http_problem = rest[1] if len(rest) > 1 else None
        elif kind in ("started", "failed"):
            if self._started is not None and not self._started.done():
                if kind == "started":
                    self._started.set_result(None)
                else:
                    self._started.set_exception(W.unpack_error(rest[0]))
        else:
            raise W.WireError(f"unknown message {kind!r}")

    async def _serve(self, rid: int, op: str, args: tuple) -> None:
        try:
            result = await self._do(op, args)
        except asyncio.CancelledError:
            return  # the faces gave it up (their client went away), or the daemon stops
        except Exception as exc:
            self._send(("reply", rid, "err", W.pack_error(exc)))
            return
        if isinstance(result, Stream):
            sid = next(self._ids)
            self.streams[sid] = result.it
            self._send(("reply", rid, "stream", sid))
        else:
            self._send(("reply", rid, "ok", result))

    async def _do(self, op: str, args: tuple) -> Any:
        if op == "table":
            name, cmd_args, caller = args
            fn = self.table.get(name)
            if fn is None:
                raise CronrdError(f"unknown command {name!r}")
            return await fn(cmd_args, caller)
        if op == "h":
            name, pos, kw = args
            if not (isinstance(name, str) and (name.startswith("h_") or name in H_EXTRA)):
                raise CronrdError(f"{name!r} is not served to the faces")
            return await getattr(self.handlers, name)(*pos, **kw)
        if op == "propose":
            if not isinstance(args[0], FACES_MAY_PROPOSE):
                raise CronrdError(f"the faces may not propose {type(args[0]).__name__}: "
                                  "they ask a handler of the daemon for that")
            return await self.log.propose(args[0])
        if op == "read_barrier":
            return await self.log.read_barrier()
        if op == "member_call":
            node, method, call_args, timeout = args
            return await self.members.call(node, method, call_args, timeout)
        if op == "next":
            it = self.streams.get(args[0])
            if it is None:
                raise CronrdError("that stream is over")
            try:
                return ("item", await it.__anext__())
            except StopAsyncIteration:
                self.streams.pop(args[0], None)
                return ("end", None)
        if op == "close":
            it = self.streams.pop(args[0], None)
            close = getattr(it, "aclose", None)
            if close is not None:
                await close()
            return None
        if op in self.blocking:
            return self.blocking[op](*args)
        raise CronrdError(f"unknown request {op!r} of the faces")

    async def _serve_blocking(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        """The faces' blocking calls, one at a time, each answered at once."""
        try:
            with self._reading():
                await self._answer_blocking(reader, writer)
        finally:
            writer.close()

    async def _answer_blocking(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        while True:
            rid, op, args = await W.read_frame(reader, narrow=True)
            fn = self.blocking.get(op)
            try:
                if fn is None:
                    raise CronrdError(f"unknown blocking request {op!r} of the faces")
                reply = (rid, "ok", fn(*args))
            except Exception as exc:
                reply = (rid, "err", W.pack_error(exc))
            try:
                frame = W.dumps(reply)
            except Exception as exc:
                frame = W.dumps((rid, "err", W.pack_error(CronrdError(str(exc)))))
            writer.write(frame)


"""The control socket: newline-delimited JSON requests from the CLI.

A request is one line ``{"cmd": NAME, "args": {...}}`` of at most
``MAX_REQUEST`` bytes, which must arrive within ``REQUEST_TIMEOUT`` seconds.
A reply is one line ``{"ok": true, "result": ...}`` or ``{"ok": false,
"error": MESSAGE, "code": 1|2}``; streaming commands (logs --follow, run-now
--wait) first send ``{"data": TEXT}`` or ``{"event": ...}`` lines.
Malformed, oversized, slow or unknown requests get an error reply; nothing a
client sends can stop the daemon.

Every connection is bounded: the server accepts connections itself, reads
the caller's credentials from the kernel (``SO_PEERCRED``, see control/access.py) and
holds at most ``MAX_CLIENTS`` at a time (an unprivileged uid at most half of
them; ``PRIVILEGED_RESERVE`` more for root and the daemon's uid, so that
`cronrd status` as root answers whoever fills the rest). A connection over
the cap gets a one-line error and is closed. A request is read into a buffer
of at most ``MAX_REQUEST`` bytes. When the process runs out of file
descriptors, accepting backs off instead of spinning, and every kind of
refusal is logged as one summary line per ``SUMMARY_INTERVAL``.
"""

from __future__ import annotations

import asyncio
import errno
import grp
import json
import logging
import os
import socket
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Coroutine, Protocol

from ...errors import CronrdError, RequestError, UsageError
from .access import Caller
from ..tasks import wait_within

if TYPE_CHECKING:
    import apsw

    from ...config import Config
    from ...jobspec import JobSpec
    from ...model.run import Run
    from ...state.machine import StateMachine
    from ..clock import Clock
    from ..cluster.members import Members
    from ..jobfiles.watcher import Watcher
    from ..leader.leadership import Leadership
    from ..leader.scheduler import Triggers
    from ..log.base import Log
    from ..runs.executor import Executor

log = logging.getLogger("cronrd.control")

MAX_REQUEST = 128 * 1024      # bytes in one request line, newline included (a 64 KiB
                              # checkpoint, base64)
MAX_CLIENTS = 64              # connections at once (an unprivileged uid: half of them)
PRIVILEGED_RESERVE = 8        # more connections only root and the daemon's uid get
REQUEST_TIMEOUT = 10.0        # seconds for a request line to arrive
WRITE_TIMEOUT = 30.0          # seconds for a client to take one reply line
SUMMARY_INTERVAL = 10.0       # at most one log line per interval per kind of refusal
BACKLOG = 128
# accept() failing for lack of resources: back off, the connection waits in the backlog.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

# (coroutines: faces.CoreBridge runs them on the critical loop, run_coroutine_threadsafe)
Handler = Callable[[dict, Caller], Coroutine[Any, Any, Any]]


class SocketInUse(CronrdError):
    """The control socket's path is served by another process."""


class Stream:
    """Marks a handler result as an async iterator of intermediate messages."""

    def __init__(self, it: AsyncIterator[dict]):
        self.it = it


class HandlersHost(Protocol):
    """What the parts of the control commands (control/jobs.py, runs.py,
    logs.py, workflows.py, membership.py, and checkpoints.py's requests) use
    of ``handlers.Handlers``, which they are part of: its state, log and
    members, the daemon's parts it is given, and its guard. For the type
    checker only: at run time the parts' base is ``object`` and Handlers
    itself is the host."""

    config: Config
    clock: Clock
    conn: apsw.Connection
    machine: StateMachine
    log: Log
    members: Members
    executor: Executor
    watcher: Watcher
    leadership: Leadership
    started_at: float
    is_ready: Callable[[], bool]
    http_url: Callable[[], str | None]
    http_problem: Callable[[], str | None]
    faces_info: Callable[[], dict | None]
    _triggers: Triggers

    async def _authorize(self, caller: Caller, command: str, target: str, what: str,
                         check: Callable[[], object], *, change: bool) -> None: ...

    async def _audit(self, caller: Caller, command: str, target: str, allowed: bool,
                     detail: str = "") -> None: ...

    async def _authorize_job(self, caller: Caller, command: str, target: str, job: str,
                             *, change: bool) -> None: ...

    async def _authorize_downstream(self, caller: Caller, command: str, job: str) -> None: ...

    def _job_spec(self, name: str) -> JobSpec | None: ...

    def _job_or_error(self, name: str) -> dict[str, Any]: ...

    async def _job_for(self, caller: Caller, command: str, name: str, *,
                       change: bool = True) -> dict[str, Any]: ...

    async def _barrier(self, consistent: bool) -> None: ...

    async def _wait_run(self, run_id: int) -> Run: ...


def socket_in_use(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
            return True
        except OSError:
            return False


class Summary:
    """One log line for the first event, then at most one per ``interval``
    with the number of events since the previous line."""

    def __init__(self, emit: Callable[[int], None], interval: float = SUMMARY_INTERVAL):
        self.emit = emit
        self.interval = interval
        self.count = 0
        self.handle: asyncio.TimerHandle | None = None

    def note(self) -> None:
        if self.handle is None:
            self.emit(1)
            self.handle = asyncio.get_running_loop().call_later(self.interval, self._flush)
        else:
            self.count += 1

    def _flush(self) -> None:
        n, self.count = self.count, 0
        self.handle = None
        if n:
            self.emit(n)
            self.handle = asyncio.get_running_loop().call_later(self.interval, self._flush)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.count:
            self.emit(self.count)
            self.count = 0


class RequestTooLarge(Exception):
    pass


class ClientGone(Exception):
    """The client closed its end or did not take a reply in time."""


class LineReader:
    """Reads request lines from a socket into a buffer of at most ``limit`` bytes."""

    def __init__(self, sock: socket.socket, limit: int):
        self.sock = sock
        self.limit = limit
        self.buf = bytearray()

    async def readline(self, timeout: float) -> bytes:
        """The next line (with its newline); b"" at end of input. Raises
        RequestTooLarge or asyncio.TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end + 1])
                del self.buf[:end + 1]
                return line
            if len(self.buf) >= self.limit:
                raise RequestTooLarge()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise asyncio.TimeoutError()
            data = await wait_within(
                loop.sock_recv(self.sock, self.limit - len(self.buf)), remaining)
            if not data:
                return b""
            self.buf += data


class ControlServer:
    def __init__(self, path: str, handlers: dict[str, Handler], group: str | None = None, *,
                 max_clients: int = MAX_CLIENTS, privileged_reserve: int = PRIVILEGED_RESERVE,
                 request_timeout: float = REQUEST_TIMEOUT, max_request: int = MAX_REQUEST,
                 write_timeout: float = WRITE_TIMEOUT,
                 summary_interval: float = SUMMARY_INTERVAL):
        self.path = path
        self.handlers = handlers
        self.group = group
        self.max_clients = max_clients
        self.per_uid = max(1, max_clients // 2)
        self.privileged_reserve = privileged_reserve
        self.request_timeout = request_timeout
        self.max_request = max_request
        self.write_timeout = write_timeout
        self.summary_interval = summary_interval
        self.sock: socket.socket | None = None
        self.accepting: asyncio.Task | None = None
        self.clients: dict[asyncio.Task, Caller] = {}
        self.by_uid: dict[int, int] = {}
        self.summaries: dict[str, Summary] = {}

    async def start(self) -> None:
        if len(os.fsencode(self.path)) > 107:
            raise CronrdError(f"socket path {self.path} is longer than the 107 bytes a Unix "
                              "socket address can hold; set a shorter socket: in the config")
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        if os.path.exists(self.path):
            if socket_in_use(self.path):
                raise SocketInUse(f"another daemon is listening on {self.path}; stop it or "
                                  "set another socket: in the config")
            os.unlink(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o117)  # never world-accessible, not even for a moment
        try:
            sock.bind(self.path)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        sock.listen(BACKLOG)
        sock.setblocking(False)
        self.sock = sock
        if os.geteuid() == 0:
            gid = 0
            if self.group:
                try:
                    gid = grp.getgrnam(self.group).gr_gid
                except KeyError:
                    log.error("event=socket_group_unknown group=%s", self.group)
            os.chown(self.path, 0, gid)
            os.chmod(self.path, 0o660)
        else:
            os.chmod(self.path, 0o600)
        self.accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def close(self) -> None:
        tasks = [t for t in (self.accepting, *self.clients) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for summary in self.summaries.values():
            summary.close()
        if self.sock is not None:
            self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # -- accepting ------------------------------------------------------------------
    def _summary(self, kind: str, emit: Callable[[int], None]) -> Summary:
        if kind not in self.summaries:
            self.summaries[kind] = Summary(emit, self.summary_interval)
        return self.summaries[kind]

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.sock is not None  # start() made it
        backoff = 0.0
        while True:
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError as exc:
                # Out of descriptors (or memory): the connection stays in the
                # backlog; wait for some to be freed instead of spinning.
                backoff = min(1.0, max(0.05, backoff * 2))

                def warn(n: int, e: OSError = exc) -> None:
                    log.warning(
                        "event=control_accept_failed error=\"%s\" count=%d "
                        "interval_s=%g clients=%d hint=\"raise LimitNOFILE= or "
                        "find what holds the descriptors\"", e.strerror or e, n,
                        self.summary_interval, len(self.clients))
                code = errno.errorcode.get(exc.errno) if exc.errno is not None else None
                self._summary("accept_" + (code or "error"), warn).note()
                await asyncio.sleep(backoff)
                continue
            backoff = 0.0
            try:
                self._admit(conn)
            except Exception:
                conn.close()
                log.exception("event=control_admit_failed")

    def _admit(self, conn: socket.socket) -> None:
        try:
            caller = Caller.from_socket(conn)
        except OSError:
            conn.close()
            return
        total = len(self.clients)
        if caller.privileged:
            full = total >= self.max_clients + self.privileged_reserve
        else:
            full = total >= self.max_clients or self.by_uid.get(caller.uid, 0) >= self.per_uid
        if full:
            self._refuse(conn, caller)
            return
        task = asyncio.get_running_loop().create_task(self._client(conn, caller))
        self.clients[task] = caller
        self.by_uid[caller.uid] = self.by_uid.get(caller.uid, 0) + 1
        task.add_done_callback(self._client_done)

    def _client_done(self, task: asyncio.Task) -> None:
        caller = self.clients.pop(task, None)
        if caller is not None:
            left = self.by_uid.get(caller.uid, 1) - 1
            if left:
                self.by_uid[caller.uid] = left
            else:
                self.by_uid.pop(caller.uid, None)

    def _refuse(self, conn: socket.socket, caller: Caller) -> None:
        mine = self.by_uid.get(caller.uid, 0)
        msg = (f"too many connections to the control socket ({len(self.clients)} open, "
               f"{mine} of them from {caller.describe()}; at most {self.max_clients}, "
               f"{self.per_uid} per user); close idle clients and try again")
        try:
            conn.send(json.dumps({"ok": False, "code": 1, "error": msg}).encode() + b"\n")
        except OSError:
            pass
        conn.close()
        self._summary("cap", lambda n: log.warning(
            "event=control_connections_refused reason=cap count=%d interval_s=%g clients=%d "
            "max_clients=%d last_uid=%d last_pid=%d", n, self.summary_interval,
            len(self.clients), self.max_clients, caller.uid, caller.pid)).note()

    # -- one client ------------------------------------------------------------------
    async def _client(self, conn: socket.socket, caller: Caller) -> None:
        reader = LineReader(conn, self.max_request)
        try:
            while True:
                try:
                    line = await reader.readline(self.request_timeout)
                except RequestTooLarge:
                    await self._send(conn, {"ok": False, "code": 2, "error":
                                            f"request larger than {self.max_request} bytes; "
                                            "send one JSON object per line"})
                    self._summary("too_large", lambda n: log.warning(
                        "event=control_request_refused reason=too_large count=%d "
                        "interval_s=%g max_bytes=%d last_uid=%d last_pid=%d", n,
                        self.summary_interval, self.max_request, caller.uid,
                        caller.pid)).note()
                    return
                except asyncio.TimeoutError:
                    if reader.buf:  # half a request: say why it is dropped
                        await self._send(conn, {"ok": False, "code": 2, "error":
                                                f"no complete request line within "
                                                f"{self.request_timeout:g}s; closing"})
                    self._summary("timeout", lambda n: log.info(
                        "event=control_idle_closed count=%d interval_s=%g timeout_s=%g "
                        "last_uid=%d last_pid=%d", n, self.summary_interval,
                        self.request_timeout, caller.uid, caller.pid)).note()
                    return
                if not line:
                    return
                await self._handle(line, conn, caller)
        except (ClientGone, OSError, asyncio.CancelledError):
            pass  # the client went away, or did not take its reply
        except Exception:
            log.exception("event=control_client_failed uid=%d pid=%d", caller.uid, caller.pid)
        finally:
            conn.close()

    async def _send(self, conn: socket.socket, msg: dict) -> None:
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        try:
            await wait_within(asyncio.get_running_loop().sock_sendall(conn, data),
                                   self.write_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ClientGone() from exc

    async def _handle(self, line: bytes, conn: socket.socket, caller: Caller) -> None:
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise UsageError("a request is a JSON object with a string 'cmd'")
            args = req.get("args", {})
            if not isinstance(args, dict):
                raise UsageError("'args' must be a JSON object")
            handler = self.handlers.get(req["cmd"])
            if handler is None:
                raise UsageError(f"unknown command {req['cmd']!r}; known: "
                                 f"{', '.join(sorted(self.handlers))}")
            result = await handler(args, caller)
            if isinstance(result, Stream):
                final = None
                async for msg in result.it:
                    if "result" in msg:
                        final = msg["result"]
                    else:
                        await self._send(conn, msg)
                result = final
            await self._send(conn, {"ok": True, "result": result})
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            await self._send(conn, {"ok": False, "code": 2,
                                    "error": f"malformed request: {exc}"})
        except UsageError as exc:
            await self._send(conn, {"ok": False, "code": 2, "error": str(exc)})
        except (TypeError, KeyError) as exc:
            await self._send(conn, {"ok": False, "code": 2,
                                    "error": f"bad request arguments: {exc}"})
        except CronrdError as exc:
            await self._send(conn, {"ok": False, "code": 1, "error": str(exc)})
        except (ClientGone, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug must cost one request, not the daemon
            log.exception("event=control_request_failed")
            await self._send(conn, {"ok": False, "code": 1, "error":
                                    f"internal error handling the request ({exc!r}); "
                                    "see the daemon log"})


__all__ = ["ControlServer", "Stream", "RequestError", "MAX_REQUEST", "Caller"]

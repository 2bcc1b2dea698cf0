"""The daemon's side of the run supervisors (see supervisor.py).

``Spawner`` owns the fork server and the notify socket. ``spawn`` queues one
request (with the run's gate, log and environment descriptors); the fork
server answers with the supervisor's pid and a pidfd of it (``on_spawned``);
the supervisor then connects to the notify socket and reports ``spawned`` /
``ready`` / ``exited``, one JSON line each (``on_event``). A connection counts
only if its peer runs as the daemon's user (SO_PEERCRED), and a line only if
it names a spawn key the daemon made (a random nonce per spawn), so a job
cannot fake another run's end.

Nothing here blocks the event loop: requests wait in a queue until the fork
server's socket has room (a SEQPACKET queue holds only a few messages, and
the fork server in turn waits for the daemon to read its answers).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import secrets
import socket
import stat
import struct
import subprocess
import sys
from typing import Callable

from ...errors import CronrdError
from .supervisor import MAX_REQUEST

log = logging.getLogger("cronrd.executor")

NOTIFY_NAME = "notify"
MAX_DATAGRAM = 4096
MAX_LINE = 4096           # one line of news from a supervisor
MAX_CONNECTIONS = 4096    # supervisors talking at once (max_running is far lower)
ACCEPT_RETRY = 1.0        # after EMFILE, seconds before accepting again
_CREDS = struct.Struct("iII")  # struct ucred: pid, uid, gid


def forkserver_argv(fd: int) -> list[str]:
    if getattr(sys, "frozen", False):  # the self-contained binary (packaging/)
        return [sys.executable, "__forkserver", str(fd)]
    return [sys.executable, "-m", "cronrd.runtime.runs.supervisor", str(fd)]


def new_key(run_id: int) -> str:
    return f"{run_id}.{secrets.token_hex(6)}"


class Spawner:
    def __init__(self, runs_dir: str,
                 on_spawned: Callable[[str, int | None, int | None, str | None], None],
                 on_event: Callable[[str, dict], None]):
        self.runs_dir = runs_dir
        self.notify_path = os.path.join(runs_dir, NOTIFY_NAME)
        self.on_spawned = on_spawned
        self.on_event = on_event
        self.uid = os.geteuid()
        self.pending: set[str] = set()   # requests sent, not answered yet
        self._queue: collections.deque = collections.deque()  # (key, data, fds) not sent yet
        self._conns: dict[int, tuple[socket.socket, bytearray]] = {}
        self.restarts = 0
        self._notify: socket.socket | None = None
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._proc_fd: int | None = None
        self._closing = False

    # -- life ---------------------------------------------------------------
    def prepare_dir(self) -> None:
        os.makedirs(self.runs_dir, mode=0o700, exist_ok=True)
        st = os.stat(self.runs_dir, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != self.uid or st.st_mode & 0o022:
            raise CronrdError(
                f"run records directory {self.runs_dir} must be a directory owned by uid "
                f"{self.uid} and not writable by group or others; fix it with chown/chmod "
                "(or remove it: the daemon creates it)")
        if len(os.fsencode(self.notify_path)) > 107:
            raise CronrdError(
                f"data_dir {os.path.dirname(self.runs_dir)} is too long a path for the run "
                f"supervisors' socket {self.notify_path} (Unix socket paths are limited to "
                "107 bytes); choose a shorter data_dir")

    def start_listening(self) -> None:
        """Bind the notify socket. Supervisors may connect (and their news
        waits) until ``start`` reads them."""
        self.prepare_dir()
        try:
            os.unlink(self.notify_path)  # a previous daemon's (we hold the data_dir lock)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o077)
        try:
            sock.bind(self.notify_path)
        finally:
            os.umask(old)
        sock.listen(1024)
        sock.setblocking(False)
        self._notify = sock

    def start(self) -> None:
        if self._notify is None:
            self.start_listening()
        loop = asyncio.get_running_loop()
        assert self._notify is not None  # start_listening() made it
        loop.add_reader(self._notify.fileno(), self._accept)
        self._ensure_server()

    def _ensure_server(self) -> None:
        if self._sock is not None:
            return
        try:
            self._start_server()
        except OSError as exc:
            raise CronrdError(f"cannot start cronrd's fork server "
                              f"({' '.join(forkserver_argv(0)[:-1])}): {exc.strerror or exc}; "
                              "is the installation complete?") from None

    def _start_server(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                forkserver_argv(child.fileno()), pass_fds=[child.fileno()], close_fds=True,
                stdin=subprocess.DEVNULL)
        finally:
            child.close()
        parent.setblocking(False)
        self._sock = parent
        loop = asyncio.get_running_loop()
        loop.add_reader(parent.fileno(), self._read_replies)
        self._proc_fd = os.pidfd_open(self._proc.pid)
        loop.add_reader(self._proc_fd, self._server_ended)
        log.debug("event=forkserver_started pid=%d", self._proc.pid)

    def _stop_server(self) -> None:
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            loop.remove_reader(self._sock.fileno())
            loop.remove_writer(self._sock.fileno())
            self._sock.close()  # the fork server ends on EOF
            self._sock = None
        if self._proc_fd is not None:
            loop.remove_reader(self._proc_fd)
            os.close(self._proc_fd)
            self._proc_fd = None

    def _server_ended(self) -> None:
        rc = self._proc.wait() if self._proc is not None else None
        self._stop_server()
        if self._closing:
            return
        self.restarts += 1
        # Requests it took but never answered: if it forked a supervisor, the
        # run's "spawned" datagram still arrives and the executor kills it.
        lost, self.pending = self.pending, set()
        lost |= {key for key, _, _ in self._queue}
        for _, _, fds in self._queue:
            for fd in fds:
                os.close(fd)
        self._queue.clear()
        log.error("event=forkserver_died returncode=%s unanswered=%d action=restart "
                  "reason=\"the process that starts run supervisors ended; started again\"",
                  rc, len(lost))
        for key in lost:
            self.on_spawned(key, None, None, "the process that starts runs (cronrd's fork "
                            "server) ended before starting it")
        try:
            self._start_server()
        except OSError as exc:  # the next spawn tries again, and fails its run if need be
            log.error("event=forkserver_start_failed error=\"%s\"", exc)

    def close(self) -> None:
        self._closing = True
        self._stop_server()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for _, _, fds in self._queue:
            for fd in fds:
                os.close(fd)
        self._queue.clear()
        for conn, _ in list(self._conns.values()):
            self._drop(conn)
        if self._notify is not None:
            asyncio.get_running_loop().remove_reader(self._notify.fileno())
            self._notify.close()
            self._notify = None
            try:
                os.unlink(self.notify_path)
            except FileNotFoundError:
                pass

    # -- spawning -------------------------------------------------------------
    def spawn(self, req: dict, fds: list[int]) -> None:
        """Ask for a supervisor for ``req`` (its ``key`` names the spawn).
        The descriptors are duplicated: close yours. Never blocks; the answer
        comes to ``on_spawned``."""
        req = dict(req, notify=self.notify_path)
        data = json.dumps(req, separators=(",", ":")).encode()
        if len(data) > MAX_REQUEST:
            raise CronrdError(f"the run's command and environment take {len(data)} bytes, "
                              f"over the {MAX_REQUEST} cronrd can hand to a run; shorten them")
        self._ensure_server()
        try:
            dups = [os.dup(fd) for fd in fds]
        except OSError as exc:
            raise CronrdError(f"cannot hand the run to cronrd's fork server: "
                              f"{exc.strerror}") from None
        self._queue.append((req["key"], data, dups))
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue and self._sock is not None:
            key, data, fds = self._queue[0]
            try:
                socket.send_fds(self._sock, [data], fds)
            except (BlockingIOError, InterruptedError):
                # Full: sent when the fork server has read some.
                loop.add_writer(self._sock.fileno(), self._writable)
                return
            except (BrokenPipeError, ConnectionResetError) as exc:
                # The fork server is gone: _server_ended follows and fails
                # what is queued.
                log.warning("event=forkserver_send_failed error=\"%s\"", exc)
                return
            except OSError as exc:  # this request (EMSGSIZE...), not the server
                self._queue.popleft()
                for fd in fds:
                    os.close(fd)
                self._call(self.on_spawned, key, None, None,
                           f"cannot hand the run to cronrd's fork server: "
                           f"{exc.strerror or exc}")
                continue
            self._queue.popleft()
            for fd in fds:
                os.close(fd)
            self.pending.add(key)

    def _writable(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().remove_writer(self._sock.fileno())
        self._flush()

    def _read_replies(self) -> None:
        while self._sock is not None:
            try:
                msg, fds, _, _ = socket.recv_fds(self._sock, MAX_DATAGRAM, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, fds = b"", []
            if not msg:
                # EOF: the fork server is ending; _server_ended follows.
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
                return
            try:
                reply = json.loads(msg)
                key = str(reply["key"])
            except (ValueError, KeyError, TypeError):
                for f in fds:
                    os.close(f)
                log.error("event=forkserver_bad_reply")
                continue
            self.pending.discard(key)
            pid = reply.get("pid")
            self._call(self.on_spawned, key, pid if isinstance(pid, int) else None,
                       fds[0] if fds else None, reply.get("error"))

    def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while self._notify is not None:
            try:
                conn, _ = self._notify.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE...: try again in a moment, not in a busy loop
                log.error("event=supervisor_accept_failed error=\"%s\"", exc.strerror)
                fd = self._notify.fileno()
                loop.remove_reader(fd)
                loop.call_later(ACCEPT_RETRY, self._resume_accept, fd)
                return
            _, uid, _ = _CREDS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      _CREDS.size))
            if uid != self.uid or len(self._conns) >= MAX_CONNECTIONS:
                log.warning("event=supervisor_connection_refused uid=%s reason=\"%s\"", uid,
                            "not the daemon's user" if uid != self.uid else "too many")
                conn.close()
                continue
            conn.setblocking(False)
            self._conns[conn.fileno()] = (conn, bytearray())
            loop.add_reader(conn.fileno(), self._read_conn, conn)

    def _resume_accept(self, fd: int) -> None:
        if self._notify is not None and self._notify.fileno() == fd:
            asyncio.get_running_loop().add_reader(fd, self._accept)

    def _drop(self, conn: socket.socket) -> None:
        if self._conns.pop(conn.fileno(), None) is not None:
            asyncio.get_running_loop().remove_reader(conn.fileno())
        conn.close()

    def _read_conn(self, conn: socket.socket) -> None:
        entry = self._conns.get(conn.fileno())
        if entry is None:
            return
        buf = entry[1]
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)  # a half line left behind is dropped with it
            return
        buf += data
        while True:
            end = buf.find(b"\n")
            if end < 0:
                break
            line = bytes(buf[:end])
            del buf[:end + 1]
            self._line(line)
        if len(buf) > MAX_LINE:
            log.warning("event=supervisor_message_refused reason=\"line too long\"")
            self._drop(conn)

    def _line(self, line: bytes) -> None:
        try:
            ev = json.loads(line)
            key = ev["key"]
            if not isinstance(key, str) or not isinstance(ev.get("event"), str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            log.warning("event=supervisor_message_refused reason=\"malformed\"")
            return
        self._call(self.on_event, key, ev)

    @staticmethod
    def _call(fn, key: str, *args) -> None:
        # One run's trouble must not cost the others their news.
        try:
            fn(key, *args)
        except Exception:
            log.exception("event=run_event_failed key=%s", key)

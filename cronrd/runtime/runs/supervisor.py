"""Run supervisors: one small process per run that outlives the daemon.

The daemon starts one *fork server* (``python -m cronrd.runtime.runs.supervisor
FD``, or ``cronrd __forkserver FD`` in the frozen binary) and asks it, over a
SOCK_SEQPACKET socket, to start each run. The fork server forks one
*supervisor* per run and hands the daemon a pidfd of it. The supervisor:

- leaves the daemon's session (``setsid``), so nothing aimed at the daemon's
  process group or terminal reaches it;
- forks the job's process in a session and process group of its own (the
  group the daemon signals on timeout and cancel), its stdin the run's gate;
- copies the job's stdout and stderr (two pipes) into the run's log file
  (an fd the daemon opened and checked) and its index, keeping the first
  and the last half of the job's ``max_log_bytes`` (output.py: the files,
  their format and why; the sidecars are opened in the job's log directory,
  an fd the daemon opened without following symlinks);
- appends what happened to the run's *record* (one small file per spawn in
  ``DATA_DIR/runs``): spawned (pids, start ticks, boot id), started, and the
  raw wait status when the job exits;
- tells the daemon each step with a datagram to ``DATA_DIR/runs/notify``,
  resolved by path on every send, so a restarted daemon hears the runs that
  an earlier daemon started.

So a daemon that dies (SIGTERM, kill -9, an upgrade) takes no run with it: the
next daemon reads the records, adopts the runs that are still going and
collects the real exit status of those that ended meanwhile. The record, not
the datagram, is the truth; the datagram only saves a wait.

The supervisor exists twice, with the same behaviour: in C (``_supervise.c``,
built at install when a compiler is there; forked by the fork server's
zygote, the small C program ``cronrd-zygote``, so neither it nor the fork
server runs Python per run, and no supervisor carries the interpreter's
memory) and in Python
(``_Supervisor`` below: ~5 ms of CPU per run, used when the C one is not
built, for jobs that must switch their ids themselves, or when
``CRONRD_SUPERVISOR=python`` is in the fork server's environment).

Only the standard library is imported here: this module runs in the fork
server, whose forks must be small and quick.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from ..clock import Clock
from . import output as O

try:
    from . import _supervise as _native  # type: ignore[attr-defined]  # C (_supervise.c): no stub
except ImportError:  # not built (no C compiler at install): the Python supervisor
    _native = None

READY = 0x01     # the user-switch shell prepared the run (see executor.DROP_SCRIPT)
STARTED = 0x02   # the gate shell passed its gate: the job's command runs now
READ_CHUNK = 65536
NOTIFY_TIMEOUT = 2.0
EXIT_NOTIFY_TRIES = 5
MAX_REQUEST = 96 * 1024  # one spawn request: within a SEQPACKET socket's default buffer
SUPERVISOR_NICE = 10  # added to the supervisor's nice value once its job is started
# Seconds a supervisor waits, at idle CPU priority, between its last record
# and its end (a random moment in this range). A supervisor is a copy of
# the fork server's address space; tearing one down takes the kernel lock
# all those copies share, and a hundred runs that end together (one gate's
# worth) otherwise tear down together, spinning on that lock while the
# next runs are exec'ing: bench/fire_precision.py lost ~10 ms at p50 and
# ~25 ms at p99 to it. Spread over a second, the teardowns cost what they
# cost and delay nobody. Nothing waits for a supervisor's end: its news and
# its record are out before it lingers.
EXIT_LINGER = (0.05, 1.0)  # _supervise.c EXIT_LINGER_MIN / MAX
CLOCK = Clock()
_SNDTIMEO = struct.pack("ll", int(NOTIFY_TIMEOUT), 0)  # struct timeval


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22): with the pid, it names one process for as long as the host
    runs, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def zygote_program() -> str | None:
    """The zygote as a program of its own (built beside ``_supervise``; see
    setup.py), or None: the fork server then forks its zygote from itself."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cronrd-zygote")
    return path if os.access(path, os.X_OK) else None


def native_supervisor() -> bool:
    """Does the fork server start C supervisors (see the module doc)?"""
    return _native is not None and os.environ.get("CRONRD_SUPERVISOR") != "python"


class _Supervisor:
    def __init__(self, req: dict, gate_fd: int, log_fd: int, dir_fd: int, env_fd: int,
                 boot: str):
        self.key = req["key"]
        self.notify_path = req["notify"]
        self.phase = "ready" if req.get("switch") else "gate"
        self.log = _Output(log_fd, dir_fd, req["log_name"], int(req["cap"]))
        self.rec = os.open(req["record"], os.O_WRONLY | os.O_CREAT | os.O_APPEND |
                           os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        self.sock: socket.socket | None = None  # to the daemon, connected on first news
        out_r, out_w = _pipe()
        err_r, err_w = _pipe()
        pid = _spawn_job(req, gate_fd, out_w, err_w, env_fd, log_fd, dir_fd)
        os.close(out_w)
        os.close(err_w)
        # The job has its priority; the supervisor yields to it. At a fire
        # time hundreds of jobs exec at once while their supervisors wake to
        # note that they started: that bookkeeping can wait a moment, the
        # jobs' start cannot.
        try:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0)
                                                   + SUPERVISOR_NICE))
        except OSError:
            pass
        for fd in (gate_fd, env_fd):
            if fd >= 0:
                os.close(fd)
        self.pid, self.pipes = pid, {out_r: O.STDOUT, err_r: O.STDERR}
        self.record("spawned", boot=boot, sup=os.getpid(),
                    sup_start=start_ticks(os.getpid()), pid=pid, pid_start=start_ticks(pid))
        self.notify("spawned", pid=pid)

    def record(self, event: str, **fields) -> None:
        fields["at"] = round(CLOCK.now(), 6)
        line = json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n"
        try:
            os.write(self.rec, line.encode())
        except OSError:
            pass  # a full disk must not stop the run; the daemon then calls it lost

    def notify(self, event: str, tries: int = 1, **fields) -> None:
        """One line of news to the daemon. A connection broken by a daemon
        restart is made again (to the new daemon) once; with no daemon
        listening the news is dropped: the record says it all."""
        msg = json.dumps({"key": self.key, "event": event, **fields},
                         separators=(",", ":")).encode() + b"\n"
        reconnected = False
        while tries > 0:
            fresh = self.sock is None
            try:
                if fresh:
                    self.sock = socket.socket(socket.AF_UNIX,
                                              socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                    # Blocking, each connect and send bounded by SO_SNDTIMEO:
                    # a full listen backlog waits like a full buffer does (a
                    # Python timeout would refuse it at once as EAGAIN).
                    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SNDTIMEO)
                    self.sock.connect(self.notify_path)
                assert self.sock is not None  # made just now, or kept from before
                self.sock.sendall(msg)
                return
            except (TimeoutError, BlockingIOError):
                tries -= 1  # the daemon is busy
                self._disconnect()
            except OSError:
                self._disconnect()
                if fresh or reconnected:
                    return  # no daemon listening
                reconnected = True  # the daemon restarted: tell the new one

    def _disconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def output(self, stream: int, data: bytes) -> None:
        while data and self.phase != "run" and stream == O.STDOUT:
            marker = READY if self.phase == "ready" else STARTED
            if data[0] != marker:
                break  # output before the marker: why the run could not start
            data = data[1:]
            if self.phase == "ready":
                self.phase = "gate"
                self.notify("ready")
            else:
                self.phase = "run"
                self.record("started")
        if data:
            self.log.write(stream, data, CLOCK.now())

    def drain(self, fd: int, once: bool = False) -> bool:
        """Copy what the pipe holds now (one read if ``once``); False once
        it is closed."""
        while True:
            try:
                data = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                return False
            self.output(self.pipes[fd], data)
            if once:
                return True

    def run(self) -> None:
        pidfd = os.pidfd_open(self.pid)
        poll = select.poll()
        for fd in self.pipes:
            os.set_blocking(fd, False)
            poll.register(fd, select.POLLIN)
        poll.register(pidfd, select.POLLIN)
        open_fds, status = set(self.pipes), None

        def drain(fd: int, once: bool) -> None:
            if fd in open_fds and not self.drain(fd, once):
                open_fds.discard(fd)
                poll.unregister(fd)

        while open_fds or status is None:
            ready = [fd for fd, _ in poll.poll()]
            # One read per ready pipe and turn: the two streams interleave
            # in the order they came, as closely as two pipes can tell.
            for fd in ready:
                if fd != pidfd:
                    drain(fd, True)
            if pidfd in ready and status is None:
                _, status = os.waitpid(self.pid, 0)
                poll.unregister(pidfd)
                os.close(pidfd)
                for fd in list(self.pipes):
                    drain(fd, False)
                started = self.phase == "run"
                self.record("exited", status=status, started=started,
                            written=self.log.pos, truncated=self.log.dropped > 0)
                self.notify("exited", tries=EXIT_NOTIFY_TRIES, status=status,
                            started=started, written=self.log.pos)
        # Grandchildren that kept the output open have closed it too.
        self.log.finish(CLOCK.now())
        self.record("closed", written=self.log.pos, dropped=self.log.dropped)


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are above the descriptors a job's process is given
    (0-3: see _spawn_job), so dup2 never meets an end in place."""
    ends = []
    for fd in os.pipe2(os.O_CLOEXEC):
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10))
        os.close(fd)
    return ends[0], ends[1]


class _Output:
    """The run's output into its log, index and tail (output.py)."""

    def __init__(self, log_fd: int, dir_fd: int, name: str, cap: int):
        self.log_fd, self.dir_fd, self.name = log_fd, dir_fd, name
        self.cap = cap
        self.head, self.tail = O.split_cap(cap)
        self.pos = 0          # the job's bytes so far
        self.last_byte = b"\n"
        self.idx: int | None = None  # opened at the first output: a silent run has none
        self.idx_len = 0
        self.ring: int | None = None
        self.tidx: int | None = None
        self.ring_tried = False
        self.slots = O.tail_slots(self.tail)
        self.head_records = O.head_records(self.head)
        self.seq = 0
        self.last: dict[str, list] = {}  # "head"/"tail": [file off, pos, length, stream, time, at]

    @property
    def dropped(self) -> int:
        return max(0, self.pos - self.head - self.tail)

    def _open(self, suffix: str, flags: int) -> int | None:
        try:
            return os.open(self.name + suffix, flags | os.O_CREAT | os.O_NOFOLLOW |
                           os.O_CLOEXEC, 0o640, dir_fd=self.dir_fd)
        except OSError:
            return None  # the output still goes to the log

    def _index(self, which: str, fd: int | None, off: int, pos: int, n: int, stream: int,
               now: float) -> None:
        last = self.last.get(which)
        full = which == "head" and self.idx_len >= O.RECORD.size * self.head_records
        if (last is not None and last[1] + last[2] == pos and last[2] + n <= O.MAX_STRETCH
                and (full or (last[3] == stream and now - last[4] < O.MERGE_WINDOW))):
            last[2] += n
            if last[3] != stream:
                last[3] = O.ALL  # past head_records: the streams are no longer told apart
        else:
            if which == "head":
                at, self.idx_len = self.idx_len, self.idx_len + O.RECORD.size
            else:
                at = O.RECORD.size * (1 + self.seq % self.slots)
                self.seq += 1
            last = self.last[which] = [off, pos, n, stream, now, at]
        if fd is not None:
            try:
                os.pwrite(fd, O.RECORD.pack(*last[:5]), last[5])
            except OSError:
                pass

    def write(self, stream: int, data: bytes, now: float) -> None:
        if self.pos == 0 and self.idx is None:
            self.idx = self._open(O.IDX, os.O_WRONLY | os.O_TRUNC)
        if self.pos < self.head:
            n = min(len(data), self.head - self.pos)
            try:
                _write_all(self.log_fd, data[:n])
            except OSError:
                pass
            self._index("head", self.idx, self.pos, self.pos, n, stream, now)
            self.pos += n
            self.last_byte = data[n - 1:n]
            data = data[n:]
        if not data:
            return
        if self.tail == 0:
            self.pos += len(data)
            return
        if not self.ring_tried:  # once: without it the tail is dropped, the run goes on
            self.ring_tried = True
            self.ring = self._open(O.TAIL, os.O_RDWR | os.O_TRUNC)
            self.tidx = self._open(O.TIDX, os.O_RDWR | os.O_TRUNC)
            if self.tidx is not None:
                try:
                    os.pwrite(self.tidx, O.RECORD.pack(self.head, self.tail, self.slots,
                                                       O.TAIL_HEADER, now), 0)
                except OSError:
                    pass
        if len(data) > self.tail:  # only its last bytes can stay
            self.pos += len(data) - self.tail
            data = data[-self.tail:]
        view, pos = memoryview(data), self.pos
        while view and self.ring is not None:
            at = (pos - self.head) % self.tail
            n = min(len(view), self.tail - at)
            try:
                os.pwrite(self.ring, view[:n], at)
            except OSError:
                break
            view, pos = view[n:], pos + n
        self._index("tail", self.tidx, 0, self.pos, len(data), stream, now)
        self.pos += len(data)

    def finish(self, now: float) -> None:
        """Move the tail into the log (output.py)."""
        if self.pos <= self.head:
            return
        kept = min(self.pos - self.head, self.tail)
        start = self.pos - kept  # the tail's first byte
        off = self.head
        recs = []
        if start > self.head:
            note = O.drop_note(start - self.head, self.cap, self.last_byte != b"\n")
            try:
                _write_all(self.log_fd, note)
            except OSError:
                pass
            recs.append(O.RECORD.pack(off, start, len(note), O.CRONRD, now))
            off += len(note)
        if self.ring is not None and kept:
            pos = start
            while pos < self.pos:
                at = (pos - self.head) % self.tail
                try:
                    chunk = os.pread(self.ring, min(READ_CHUNK, self.tail - at,
                                                    self.pos - pos), at)
                    _write_all(self.log_fd, chunk)
                except OSError:
                    break
                if not chunk:
                    break
                pos += len(chunk)
            if self.tidx is not None:
                try:
                    table = os.pread(self.tidx, O.RECORD.size * (self.slots + 1), O.RECORD.size)
                except OSError:
                    table = b""
                tail_recs = sorted((r for r in (O.RECORD.unpack_from(table, i)
                                                for i in range(0, len(table) - O.RECORD.size + 1,
                                                               O.RECORD.size))
                                    if r[2] > 0 and r[3] in (O.STDOUT, O.STDERR)),
                                   key=lambda r: r[1])
                for _, rpos, length, stream, t in tail_recs:
                    lo, hi = max(rpos, start), min(rpos + length, self.pos)
                    if hi > lo:
                        recs.append(O.RECORD.pack(off + lo - start, lo, hi - lo, stream, t))
        if self.idx is not None and recs:
            try:
                os.pwrite(self.idx, b"".join(recs), self.idx_len)
            except OSError:
                pass
        for suffix in (O.TAIL, O.TIDX):  # the ring without LOG.tail is a finished one
            try:
                os.unlink(self.name + suffix, dir_fd=self.dir_fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_JOB_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGHUP, signal.SIGTERM,
                signal.SIGCHLD, signal.SIGQUIT)


def _job_fds(gate_fd: int, out_fd: int, err_fd: int, env_fd: int) -> list[tuple[int, int]]:
    """(from, to) descriptors of the job's process: the gate as stdin,
    stdout and stderr the two pipes; a job that switches users first reads
    its environment from stdout (the memfd) and finds the stdout pipe as 3
    (launch.DROP_SCRIPT)."""
    if env_fd >= 0:
        return [(gate_fd, 0), (env_fd, 1), (err_fd, 2), (out_fd, 3)]
    return [(gate_fd, 0), (out_fd, 1), (err_fd, 2)]


def _spawn_job(req: dict, gate_fd: int, out_fd: int, err_fd: int, env_fd: int, log_fd: int,
               dir_fd: int) -> int:
    """Start the job's process in a session of its own; its pid.

    posix_spawn (vfork underneath) is the quick way, used whenever it can do
    the job: the supervisor enters the working directory itself first. A
    job whose process must switch its ids itself (no setpriv on the host)
    or apply process controls (nice, limits...: ``apply_controls``), or
    whose start fails, goes through fork, where the failure is written to
    the run's log."""
    for fd in (gate_fd, env_fd, log_fd, dir_fd):
        if fd >= 0:
            os.set_inheritable(fd, False)  # received over a socket: not close-on-exec
    fds = _job_fds(gate_fd, out_fd, err_fd, env_fd)
    if not req.get("ids") and not req.get("controls"):
        try:
            os.chdir(req["cwd"])
            actions = [(os.POSIX_SPAWN_DUP2, a, b) for a, b in fds]
            return os.posix_spawn(req["argv"][0], req["argv"], req["env"],
                                  file_actions=actions, setsid=True, setsigdef=_JOB_SIGNALS)
        except OSError:
            pass
    pid = os.fork()
    if pid == 0:
        _exec_job(req, fds)
    return pid


def _exec_job(req: dict, fds: list[tuple[int, int]]) -> None:
    """In the job's process: never returns."""
    try:
        for sig in _JOB_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        os.setsid()
        for a, b in fds:
            os.dup2(a, b)
        apply_controls(req.get("controls") or ())
        ids = req.get("ids")
        if ids:
            os.setgroups(ids["groups"])
            os.setgid(ids["gid"])
            os.setuid(ids["uid"])
        os.chdir(req["cwd"])
        os.closerange(len(fds), os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0
                      else 65536)
        os.execve(req["argv"][0], req["argv"], req["env"])
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into the fork server's code
        try:
            if isinstance(exc, ControlError):
                os.write(2, f"cronrd: run not started: {exc}\n".encode())
            else:
                why = getattr(exc, "strerror", None) or str(exc)
                os.write(2, f"cronrd: cannot start the run: {why}\n".encode())
        except BaseException:  # noqa: BLE001
            pass
    os._exit(127)


# ioprio_set(2) has no wrapper in os: its number, for the architectures
# cronrd is built for (the C supervisor takes it from the system headers).
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "riscv64": 30, "i686": 289, "i386": 289,
                   "armv7l": 314, "ppc64le": 273, "s390x": 282}
_IOPRIO_WHO_PROCESS = 1


class ControlError(Exception):
    pass


def apply_controls(controls) -> None:
    """Apply the job's process controls (launch.controls) to this process;
    ControlError with the reason, worded as the C supervisor words it.
    ``cgroup DIR``: join the run's cgroup (cgroups.py), first."""
    for ctl in controls:
        what, act = _parse_control(ctl)
        try:
            if act is None:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            act()
        except OSError as exc:
            raise ControlError(f"cannot apply {what} ({ctl}): "
                               f"{exc.strerror or exc}") from None


def _parse_control(ctl: str):
    """(what it is called in messages, what applies it), or ("a control",
    None) for a string that is not a control (as the C supervisor's sscanf)."""
    name, _, rest = ctl.partition(" ")
    words = rest.split(" ")
    try:
        if name == "cgroup" and rest.startswith("/"):
            return "limits (the run's cgroup)", lambda: _join_cgroup(rest)
        if name == "rlimit" and len(words) == 4 and words[3]:
            res, soft, hard = int(words[0]), int(words[1]), int(words[2])
            return words[3], lambda: _setrlimit(res, soft, hard)
        if len(words) == 1:
            n = int(words[0])
            if name == "nice":
                return "nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, n)
            if name == "ioprio":
                return "ioclass/ioprio", lambda: _ioprio_set(n)
            if name == "umask":
                return "umask", lambda: os.umask(n)
    except ValueError:
        pass
    return "a control", None


def _join_cgroup(path: str) -> None:
    fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def _setrlimit(res: int, soft: int, hard: int) -> None:
    try:
        resource.setrlimit(res, (soft, hard))
    except ValueError as exc:  # Python's words for EINVAL and EPERM; the errno's, as in C
        err = errno.EPERM if "not allowed" in str(exc) else errno.EINVAL
        raise OSError(err, os.strerror(err)) from None


def _ioprio_set(value: int) -> None:
    import ctypes
    import platform
    number = _SYS_IOPRIO_SET.get(platform.machine())
    if number is None:
        raise OSError(38, "Function not implemented")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, _IOPRIO_WHO_PROCESS, 0, value) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _supervise(req: dict, fds: list[int], boot: str) -> None:
    """In the supervisor's process (a fork of the fork server): never returns."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        os.setsid()
        gate_fd, log_fd, dir_fd = fds[:3]
        env_fd = fds[3] if len(fds) > 3 else -1
        _Supervisor(req, gate_fd, log_fd, dir_fd, env_fd, boot).run()
        _linger()
    except BaseException:  # noqa: BLE001
        code = 1
    os._exit(code)


def _linger() -> None:
    """See EXIT_LINGER."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        pass
    low, high = EXIT_LINGER
    fraction = int.from_bytes(os.urandom(4), "little") / 2 ** 32
    time.sleep(low + (high - low) * fraction)  # a wait, not a reading of the clock


def _reap(*_) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def check_request(req) -> None:
    """Refuse, in the fork server, a request either supervisor could not
    carry out (ValueError): a run then fails with the reason instead of a
    supervisor dying without a record."""
    if not isinstance(req, dict):
        raise ValueError("a spawn request is a JSON object")
    for name in ("key", "notify", "record", "cwd", "log_name"):
        value = req.get(name)
        if not isinstance(value, str) or not value or "\0" in value:
            raise ValueError(f"bad spawn request: {name} must be a non-empty string without NUL")
    if "/" in req["log_name"]:
        raise ValueError("bad spawn request: log_name must be a file name (no '/')")
    if not req["key"].isascii():
        raise ValueError("bad spawn request: key must be ASCII")
    argv, env, cap = req.get("argv"), req.get("env"), req.get("cap")
    if (not isinstance(argv, list) or not argv or not argv[0]
            or not all(isinstance(a, str) and "\0" not in a for a in argv)):
        raise ValueError("bad spawn request: argv must be a non-empty list of strings "
                         "without NUL")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and "=" not in k
            and "\0" not in k and "\0" not in v for k, v in env.items()):
        raise ValueError("bad spawn request: env must map names (no '=', no NUL) to strings "
                         "without NUL")
    if not isinstance(cap, int) or isinstance(cap, bool) or not 0 <= cap < 2 ** 63:
        raise ValueError("bad spawn request: cap must be an integer from 0 to 2**63-1")
    ctl = req.get("controls")
    if ctl is not None and (not isinstance(ctl, list) or not all(
            isinstance(c, str) and c and "\0" not in c for c in ctl)):
        raise ValueError("bad spawn request: controls must be a list of non-empty strings "
                         "without NUL")


class Zygote:
    """The fork server's C zygote (``_supervise.c`` says why): it forks the
    C supervisors, so the fork server itself never forks per run."""

    def __init__(self, boot: str, close_fd: int):
        self.boot, self.close_fd = boot, close_fd
        self.sock: socket.socket | None = None
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        _, fd = _native.start_zygote(self.boot, self.close_fd, zygote_program())
        self.sock = socket.socket(fileno=fd)

    def _restart(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.restarts += 1
        self._start()

    def spawn(self, req: dict, fds: list[int]) -> tuple[int, int]:
        """Raises ValueError (the request) or OSError (the zygote: it is
        started again, and the caller forks this one itself)."""
        env = req["env"]
        fields = [req["key"], req["notify"], req["record"], req["cwd"], req["log_name"],
                  str(req["cap"]),
                  "1" if req.get("switch") else "0", str(len(req["argv"])), *req["argv"],
                  str(len(env)), *(f"{k}={v}" for k, v in env.items())]
        ctl = req.get("controls") or []
        if ctl:
            fields += [str(len(ctl)), *ctl]
        data = b"".join(os.fsencode(f) + b"\0" for f in fields)
        if len(data) > MAX_REQUEST:
            raise ValueError(f"spawn request of {len(data)} bytes is over {MAX_REQUEST}")
        assert self.sock is not None  # _start() made it
        try:
            socket.send_fds(self.sock, [data], fds)
            msg, rfds, _, _ = socket.recv_fds(self.sock, 512, 1)
        except OSError:
            self._restart()
            raise
        if not msg:
            self._restart()
            raise OSError("the zygote ended")
        text = msg.decode(errors="replace")
        if text.startswith("ok ") and rfds:
            return int(text[3:]), rfds[0]
        for f in rfds:
            os.close(f)
        raise ValueError(f"the supervisor could not be started: {text.removeprefix('error ')}")


def _start(sock: socket.socket, req: dict, fds: list[int], boot: str,
           native: bool, zygote: "Zygote | None" = None) -> tuple[int, int]:
    """Fork one supervisor for ``req``: its pid and a pidfd of it. The
    supervisor waits for a go from the fork server, sent once the pidfd is
    taken: so a supervisor that would end at once cannot be reaped (and its
    pid reused) first, and one whose pidfd cannot be taken never starts a job."""
    check_request(req)
    env_fd = fds[3] if len(fds) > 3 else -1
    if native and not req.get("ids"):
        if zygote is not None:
            try:
                return zygote.spawn(req, fds)
            except OSError:
                pass  # started again for the next run; this one forks here
        return _native.spawn(req["key"], req["notify"], req["record"], boot, req["cwd"],
                             req["log_name"], req["argv"], req["env"], req["cap"],
                             bool(req.get("switch")), fds[0], fds[1], fds[2], env_fd,
                             sock.fileno(), list(req.get("controls") or ()))
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError:
        os.close(go_r)
        os.close(go_w)
        raise
    if pid == 0:
        sock.close()
        os.close(go_w)
        if os.read(go_r, 1) != b"g":
            os._exit(1)
        os.close(go_r)
        _supervise(req, fds, boot)
    os.close(go_r)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        os.close(go_w)  # the supervisor ends without starting anything
        raise OSError(exc.errno, f"pidfd_open: {exc.strerror}") from None
    os.write(go_w, b"g")
    os.close(go_w)
    return pid, pidfd


def serve(fd: int) -> int:
    """The fork server's loop: one request in, one supervisor forked, its
    pidfd out. Ends when the daemon closes its end."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, _reap)
    sock = socket.socket(fileno=fd)
    boot, native = boot_id(), native_supervisor()
    zygote = None
    if native:
        try:
            zygote = Zygote(boot, fd)
        except OSError:
            zygote = None  # the fork server forks the supervisors itself
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
        except OSError:
            return 1
        if not msg:
            return 0
        reply: dict[str, object]
        try:
            req = json.loads(msg)
            if len(fds) not in (3, 4):
                raise ValueError(f"expected 3 or 4 descriptors (gate, log, log directory, "
                                 f"environment), got {len(fds)}")
            pid, pidfd = _start(sock, req, fds, boot, native, zygote)
        except (ValueError, OSError, KeyError, TypeError, ArithmeticError) as exc:
            why = (str(exc) if isinstance(exc, (ValueError, OSError))
                   else f"bad spawn request ({type(exc).__name__}: {exc})")
            reply, rfds = {"key": _key(msg), "error": why}, []
        else:
            reply, rfds = {"key": req["key"], "pid": pid}, [pidfd]
        for f in fds:
            if f >= 0:
                os.close(f)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], rfds)
        except OSError:
            return 1
        finally:
            for f in rfds:
                os.close(f)


def _key(msg: bytes) -> str:
    try:
        return str(json.loads(msg).get("key", ""))
    except (ValueError, AttributeError):
        return ""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m cronrd.runtime.runs.supervisor FD (started by cronrd daemon)",
              file=sys.stderr)
        return 2
    return serve(int(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The run supervisors (cronrd/runtime/runs/): a real fork server, real
supervisors and jobs, driven through the daemon's side (Spawner) without a
daemon. Gate protocol, output cap, records, exit statuses, bad datagrams."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess

import pytest

from cronrd.runtime.runs import output as O
from cronrd.runtime.runs import records
from cronrd.runtime.runs import supervisor as S
from cronrd.state.run_life import exit_code
from cronrd.runtime.runs.spawner import Spawner, new_key

GATE = 'read _ || exit 75; printf "\\002"; exec </dev/null; exec "$@"'


class Harness:
    def __init__(self, tmp_path):
        self.dir = str(tmp_path / "runs")
        self.events: list[tuple[str, dict]] = []
        self.spawned: dict[str, tuple] = {}
        self.changed = asyncio.Event()
        self.spawner = Spawner(self.dir, self._spawned, self._event)
        self.logs = tmp_path

    def _spawned(self, key, pid, pidfd, error):
        self.spawned[key] = (pid, error)
        if pidfd is not None:
            os.close(pidfd)
        self.changed.set()

    def _event(self, key, ev):
        self.events.append((key, ev))
        self.changed.set()

    async def wait(self, pred, timeout=10.0):
        async def loop():
            while not pred():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(loop(), timeout)

    async def wait_for(self, pred, timeout=10.0):
        """Wait for a condition nothing announces (a file's content)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred():
            assert loop.time() < deadline, "condition not met in time"
            await asyncio.sleep(0.05)

    def event(self, key, kind):
        return next((ev for k, ev in self.events if k == key and ev["event"] == kind), None)

    def start(self, command: str, *, cap: int = 1 << 20, switch: bool = False,
              gate_open: bool = True, script: str = GATE, controls: list | None = None,
              argv: list | None = None, env_fd: int = -1):
        key = new_key(1)
        log_path = os.path.join(self.logs, key + ".log")
        logfd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        dirfd = os.open(self.logs, os.O_RDONLY | os.O_DIRECTORY)
        rfd, wfd = os.pipe()
        req = {"key": key,
               "argv": argv or ["/bin/sh", "-c", script, "gate", "/bin/sh", "-c", command],
               "env": {"PATH": "/usr/bin:/bin"}, "cwd": "/", "cap": cap, "switch": switch,
               "ids": None, "record": os.path.join(self.dir, key), "log_name": key + ".log"}
        if controls is not None:
            req["controls"] = controls
        self.spawner.spawn(req, [rfd, logfd, dirfd] + ([env_fd] if env_fd >= 0 else []))
        os.close(rfd)
        os.close(logfd)
        os.close(dirfd)
        if gate_open:
            os.write(wfd, b"\n\n")
        os.close(wfd)
        return key, log_path


@pytest.fixture(params=["native", "python"])
def sup(request, tmp_path, monkeypatch):
    """Every test runs against both supervisors (C and Python)."""
    if request.param == "native" and not S.native_supervisor():
        pytest.skip("the C supervisor is not built (no C compiler at install)")
    if request.param == "python":
        monkeypatch.setenv("CRONRD_SUPERVISOR", "python")
    h = Harness(tmp_path)
    yield h


def run(coro):
    return asyncio.run(coro)


def test_a_run_passes_its_gate_and_its_exit_status_is_recorded(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("echo hello; exit 3")
        # The news may overtake the fork server's reply: wait for both.
        await sup.wait(lambda: sup.event(key, "exited") and key in sup.spawned)
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    assert sup.spawned[key][1] is None and sup.spawned[key][0] > 1
    ev = sup.event(key, "exited")
    assert exit_code(ev["status"]) == 3 and ev["started"] is True
    assert sup.event(key, "spawned")["pid"] > 1
    # The markers are not logged; the output is.
    assert open(log_path, "rb").read() == b"hello\n"
    rec = records.read(os.path.join(sup.dir, key))
    assert rec.started and rec.exited and exit_code(rec.status) == 3
    assert rec.written == 6 and rec.this_boot() and rec.closed


def test_a_closed_gate_means_the_command_never_ran(sup, tmp_path):
    witness = tmp_path / "ran"

    async def main():
        sup.spawner.start()
        key, _ = sup.start(f"touch {witness}", gate_open=False)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key
    key = run(main())
    ev = sup.event(key, "exited")
    assert ev["started"] is False and exit_code(ev["status"]) == 75
    assert not witness.exists()


def test_signal_is_recorded_as_the_signal(sup):
    async def main():
        sup.spawner.start()
        key, _ = sup.start("kill -USR1 $$")
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key
    key = run(main())
    assert exit_code(sup.event(key, "exited")["status"]) == -signal.SIGUSR1


def _closed(sup, key):
    rec = records.read(os.path.join(sup.dir, key))
    return rec is not None and rec.closed


def _parts(log_path):
    d = os.open(os.path.dirname(log_path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        files = O.open_files(d, os.path.basename(log_path))
    finally:
        os.close(d)
    try:
        parts, _, more = O.read(files, 0, 1 << 30)
    finally:
        files.close()
    assert not more
    return parts


def test_stdout_and_stderr_are_kept_apart_in_the_order_they_came(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("echo out1; sleep 0.3; echo err1 >&2; sleep 0.3; echo out2; "
                                  "sleep 0.3; echo err2 >&2")
        await sup.wait_for(lambda: _closed(sup, key))
        sup.spawner.close()
        return log_path
    log_path = run(main())
    # The log stays plain text, in the order the lines came.
    assert open(log_path, "rb").read() == b"out1\nerr1\nout2\nerr2\n"
    parts = _parts(log_path)
    assert [(p.stream, p.data) for p in parts] == [
        (O.STDOUT, b"out1\n"), (O.STDERR, b"err1\n"), (O.STDOUT, b"out2\n"),
        (O.STDERR, b"err2\n")]
    times = [p.time for p in parts]
    assert times == sorted(times) and times[-1] - times[0] >= 0.8


def test_a_silent_run_leaves_its_log_alone(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("true")
        await sup.wait_for(lambda: _closed(sup, key))
        sup.spawner.close()
        return log_path
    log_path = run(main())
    assert open(log_path, "rb").read() == b""
    assert not any(os.path.exists(log_path + s) for s in O.SIDECARS)


def test_lines_within_the_merge_window_share_one_record(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; done")
        await sup.wait_for(lambda: _closed(sup, key))
        sup.spawner.close()
        return log_path
    log_path = run(main())
    assert os.path.getsize(log_path + ".idx") == O.RECORD.size
    assert [p.stream for p in _parts(log_path)] == [O.STDOUT]


def test_the_heads_index_is_bounded_when_streams_alternate(sup):
    """100 alternations, each read on its own: 200 records unbounded; the
    head of a 1 KiB cap holds 64 + 512 // 256 = 66, the last one growing
    over both streams (ALL)."""
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("for i in $(seq 100); do echo o; echo e >&2; sleep 0.01; done",
                                  cap=1024)
        await sup.wait_for(lambda: _closed(sup, key), timeout=20)
        sup.spawner.close()
        return log_path
    log_path = run(main())
    assert open(log_path, "rb").read() == b"o\ne\n" * 100
    assert os.path.getsize(log_path + ".idx") == 66 * O.RECORD.size
    parts = _parts(log_path)
    assert b"".join(p.data for p in parts) == b"o\ne\n" * 100
    assert parts[-1].stream == O.ALL and parts[0].stream == O.STDOUT
    assert [p.data for p in parts[:4]] == [b"o\n", b"e\n", b"o\n", b"e\n"]


LINES = 'i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done'
LINES_OUT = b"".join(b"line %d\n" % i for i in range(300))


def test_over_the_cap_the_head_and_the_tail_are_kept_with_a_note(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start(LINES + "; echo the-error >&2", cap=1001)
        # the record closes before the supervisor's exited message reaches
        # the spawner (a race a loaded CI machine lost): wait for both
        await sup.wait_for(lambda: _closed(sup, key) and sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    everything = LINES_OUT + b"the-error\n"
    head, tail = everything[:501], everything[-500:]
    dropped = len(everything) - 1001
    note = (b"\n" if not head.endswith(b"\n") else b"") + (
        b"cronrd: %d bytes dropped here (max_log_bytes 1001 bytes keeps the first 501 bytes "
        b"and the last 500 bytes)\n" % dropped)
    assert open(log_path, "rb").read() == head + note + tail
    assert tail.endswith(b"line 299\nthe-error\n")
    parts = _parts(log_path)
    assert b"".join(p.data for p in parts) == head + note + tail
    assert [p.stream for p in parts] == [O.STDOUT, O.CRONRD, O.STDOUT, O.STDERR]
    assert parts[-1].data == b"the-error\n"
    # The ring is gone once the tail is in the log; the job went on.
    assert not os.path.exists(log_path + ".tail") and not os.path.exists(log_path + ".tidx")
    assert exit_code(sup.event(key, "exited")["status"]) == 0
    rec = records.read(os.path.join(sup.dir, key))
    assert rec.written == len(everything)


def test_a_killed_supervisor_leaves_the_tail_readable(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start(LINES + "; echo last >&2; sleep 30", cap=1000)
        await sup.wait(lambda: key in sup.spawned and sup.event(key, "spawned"))

        def has_last():
            try:
                return _parts(log_path)[-1].data.endswith(b"last\n")
            except (OSError, IndexError):
                return False
        await sup.wait_for(has_last)
        os.kill(sup.spawned[key][0], signal.SIGKILL)
        os.killpg(sup.event(key, "spawned")["pid"], signal.SIGKILL)
        sup.spawner.close()
        return log_path
    log_path = run(main())
    everything = LINES_OUT + b"last\n"
    parts = _parts(log_path)
    assert parts[0].data == everything[:500] and parts[0].stream == O.STDOUT
    assert parts[1].stream == O.CRONRD and b"%d bytes dropped here so far" % (
        len(everything) - 1000) in parts[1].data
    assert b"".join(p.data for p in parts[2:]) == everything[-500:]
    assert parts[-1] == O.Part(O.STDERR, parts[-1].time, b"last\n")
    # As plain text the log is the head (the tail is still in the ring).
    assert open(log_path, "rb").read() == everything[:500]


def test_user_switch_handshake_reports_ready_before_the_gate(sup):
    # The drop script's part: READY, then the gate shell.
    script = 'printf "\\001"; ' + GATE

    async def main():
        sup.spawner.start()
        key, log_path = sup.start("echo ok", switch=True, script=script)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    kinds = [ev["event"] for k, ev in sup.events if k == key]
    assert kinds == ["spawned", "ready", "exited"]
    assert sup.event(key, "exited")["started"] is True
    assert open(log_path, "rb").read() == b"ok\n"


def test_output_before_the_gate_is_logged_as_the_reason(sup):
    script = 'echo "cronrd: run not started: no such dir" >&2; exit 126'

    async def main():
        sup.spawner.start()
        key, log_path = sup.start("true", switch=True, script=script)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    assert sup.event(key, "ready") is None and sup.event(key, "exited")["started"] is False
    assert b"run not started: no such dir" in open(log_path, "rb").read()


IOPRIO_IDLE = 3 << 13
IOPRIO_BE_6 = (2 << 13) | 6


@pytest.mark.parametrize("ioprio, ionice", [(IOPRIO_IDLE, "idle"),
                                            (IOPRIO_BE_6, "best-effort: prio 6")])
def test_process_controls_reach_the_job(sup, ioprio, ionice):
    # What the job sees from inside: its umask, nice value (/proc stat
    # field 19), open-file and address-space limits, process limit, I/O class.
    import resource
    import shutil
    show = ('umask; cut -d" " -f19 /proc/$$/stat; ulimit -n; ulimit -Hn; ulimit -v; ulimit -p; '
            + ('ionice -p $$' if shutil.which("ionice") else 'echo no-ionice'))
    controls = [f"rlimit {resource.RLIMIT_AS} {1 << 30} {1 << 30} limits.memory",
                f"rlimit {resource.RLIMIT_NPROC} 4321 4321 limits.tasks",
                f"rlimit {resource.RLIMIT_NOFILE} 77 77 limits.open_files",
                "nice 7", f"ioprio {ioprio}", f"umask {0o027}"]

    async def main():
        sup.spawner.start()
        key, log_path = sup.start(show, controls=controls)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    assert exit_code(sup.event(key, "exited")["status"]) == 0
    lines = open(log_path).read().split("\n")
    assert lines[:6] == ["0027", "7", "77", "77", str((1 << 30) // 1024), "4321"], lines
    if lines[6] != "no-ionice":
        assert lines[6] == ionice, lines


def test_a_control_that_cannot_be_applied_fails_the_run_with_the_reason(sup, tmp_path):
    import resource
    witness = tmp_path / "ran"

    async def main():
        sup.spawner.start()
        # soft above hard: setrlimit refuses it
        key, log_path = sup.start(f"touch {witness}", controls=[
            f"rlimit {resource.RLIMIT_NOFILE} 100 50 limits.open_files"])
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    ev = sup.event(key, "exited")
    assert ev["started"] is False and exit_code(ev["status"]) == 127
    assert open(log_path).read() == (
        f"cronrd: run not started: cannot apply limits.open_files (rlimit "
        f"{resource.RLIMIT_NOFILE} 100 50 limits.open_files): Invalid argument\n")
    assert not witness.exists()


def test_the_job_joins_its_runs_cgroup_first(sup, tmp_path):
    # A stand-in for the run's cgroup: the job's process writes "0" (itself)
    # into its cgroup.procs before anything else; a missing one fails the run.
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.procs").write_text("")

    async def main():
        sup.spawner.start()
        ok, _ = sup.start("echo in", controls=[f"cgroup {cg}", "nice 1"])
        bad, bad_log = sup.start("echo in", controls=[f"cgroup {tmp_path}/gone"])
        await sup.wait(lambda: sup.event(ok, "exited") and sup.event(bad, "exited"))
        sup.spawner.close()
        return ok, bad, bad_log
    ok, bad, bad_log = run(main())
    assert exit_code(sup.event(ok, "exited")["status"]) == 0
    assert (cg / "cgroup.procs").read_text() == "0"
    assert sup.event(bad, "exited")["started"] is False
    assert open(bad_log).read() == (
        f"cronrd: run not started: cannot apply limits (the run's cgroup) (cgroup "
        f"{tmp_path}/gone): No such file or directory\n")


def test_a_string_that_is_no_control_fails_the_run_alike_in_both(sup):
    async def main():
        sup.spawner.start()
        key, log_path = sup.start("true", controls=["nice 1", "nice x", "bogus 1"])
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    assert sup.event(key, "exited")["started"] is False
    assert open(log_path).read() == ("cronrd: run not started: cannot apply a control "
                                     "(nice x): Invalid argument\n")


def test_a_malformed_control_is_refused_before_a_supervisor_starts(sup):
    async def main():
        sup.spawner.start()
        key, _ = sup.start("true", controls=["nice 1", ""])
        await sup.wait(lambda: key in sup.spawned)
        sup.spawner.close()
        return key
    key = run(main())
    assert "controls must be a list of non-empty strings" in sup.spawned[key][1]


def test_a_switching_run_with_controls_finds_its_streams_where_the_drop_script_looks(sup):
    # A run prepared by the drop script (its environment on stdout, the
    # stdout pipe as 3) that has process controls starts through fork in
    # both supervisors: the controls are applied there, and the job still
    # gets exactly 0-3, its output in the right streams.
    from cronrd.runtime.runs.launch import DROP_SCRIPT, env_memfd
    argv = ["/bin/sh", "-c", DROP_SCRIPT, "cronrd-start", "/", "nobody",
            "/bin/sh", "-c", GATE, "gate", "/bin/sh", "-c",
            "echo out-$GREETING; echo err >&2; umask >&2; ls /proc/self/fd"]
    envfd = env_memfd(b"export GREETING=hi\n")

    async def main():
        sup.spawner.start()
        key, log_path = sup.start("", switch=True, argv=argv, env_fd=envfd,
                                  controls=["nice 1", f"umask {0o027}"])
        os.close(envfd)
        # The record is closed before the supervisor's "exited" event reaches
        # the spawner: wait for both, or the event list may lack "exited".
        await sup.wait_for(lambda: _closed(sup, key) and sup.event(key, "exited"))
        sup.spawner.close()
        return key, log_path
    key, log_path = run(main())
    assert [ev["event"] for k, ev in sup.events if k == key] == ["spawned", "ready", "exited"]
    assert sup.event(key, "exited")["started"] is True
    parts = _parts(log_path)
    out = b"".join(p.data for p in parts if p.stream == O.STDOUT).decode().split()
    err = b"".join(p.data for p in parts if p.stream == O.STDERR)
    assert err == b"err\n0027\n", parts
    assert out[0] == "out-hi" and sorted(out[1:]) == ["0", "1", "2", "3"], out  # ls's dir is 3


def test_a_supervisor_outlives_the_fork_server_and_the_daemon_side(sup):
    async def main():
        sup.spawner.start()
        key, _ = sup.start("sleep 30")
        await sup.wait(lambda: sup.event(key, "spawned"))
        sup.spawner.close()  # the "daemon" goes away
        return key
    key = run(main())
    rec = records.read(os.path.join(sup.dir, key))
    assert rec.supervisor_alive() and rec.job_alive()
    os.killpg(rec.pid, signal.SIGTERM)
    deadline = asyncio.run(_until(lambda: records.read(rec.path).closed))
    assert deadline
    rec = records.read(rec.path)
    assert exit_code(rec.status) == -signal.SIGTERM and not rec.supervisor_alive()


async def _until(pred, timeout=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.02)  # polling a file another process writes
    return True


def test_bad_news_is_refused_without_harm(sup):
    async def main():
        sup.spawner.start()
        loop = asyncio.get_running_loop()
        for junk in (b"\xff\xfe\n", b"[]\n", json.dumps({"key": 5, "event": "x"}).encode() + b"\n",
                     b"x" * 10000,
                     json.dumps({"key": "1.abc", "event": "exited", "status": 0}).encode() + b"\n"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            await loop.sock_connect(s, sup.spawner.notify_path)
            await loop.sock_sendall(s, junk)
            s.close()
        key, _ = sup.start("true")
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key
    key = run(main())
    # The junk was dropped and the fork server still works; the well-formed
    # line under a key nobody made reaches the executor's callback, which
    # ignores unknown keys (Executor._on_event).
    assert [k for k, _ in sup.events if k != key] == ["1.abc"]


def test_notify_socket_is_private(sup):
    async def main():
        sup.spawner.start()
        mode = os.stat(sup.spawner.notify_path).st_mode & 0o777
        dmode = os.stat(sup.dir).st_mode & 0o777
        sup.spawner.close()
        return mode, dmode
    mode, dmode = run(main())
    assert mode & 0o077 == 0 and dmode == 0o700


def test_fork_server_death_is_logged_and_it_is_started_again(sup, caplog):
    async def main():
        sup.spawner.start()
        first = sup.spawner._proc.pid
        os.kill(first, signal.SIGKILL)
        await _until(lambda: sup.spawner.restarts == 1)
        key, _ = sup.start("exit 4")
        await sup.wait(lambda: sup.event(key, "exited"))
        second = sup.spawner._proc.pid
        sup.spawner.close()
        return key, first, second
    key, first, second = run(main())
    assert first != second and exit_code(sup.event(key, "exited")["status"]) == 4
    assert "event=forkserver_died" in caplog.text


def test_a_burst_of_runs_never_blocks_the_daemon_side(sup):
    """More requests than the fork server's socket queues (a SEQPACKET socket
    holds ~10 messages) wait in the spawner's own queue, and every run
    reports, while the event loop keeps running."""
    async def main():
        sup.spawner.start()
        keys = [sup.start("exit 0")[0] for _ in range(150)]
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)
        t = asyncio.get_running_loop().create_task(ticker())
        await sup.wait(lambda: all(sup.event(k, "exited") for k in keys), timeout=60)
        t.cancel()
        sup.spawner.close()
        return keys, ticks
    keys, ticks = run(main())
    assert all(exit_code(sup.event(k, "exited")["status"]) == 0 for k in keys)
    assert ticks > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_news_from_another_user_is_refused_even_if_the_socket_were_open(sup, caplog):
    """Defence in depth: the socket is 0600 in a 0700 dir; opened up by
    mistake, a connection from another uid is still refused (SO_PEERCRED),
    so a job cannot report another run's end."""
    async def main():
        sup.spawner.start()
        key, _ = sup.start("sleep 30")
        await sup.wait(lambda: sup.event(key, "spawned"))
        os.chmod(sup.dir, 0o711)
        os.chmod(sup.spawner.notify_path, 0o666)
        pid = os.fork()
        if pid == 0:  # a job of user nobody forging the run's end
            code = 1
            try:
                os.chdir(sup.dir)  # the test's tmp path above it is root's alone
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(os.path.basename(sup.spawner.notify_path))
                s.sendall(json.dumps({"key": key, "event": "exited", "status": 0}).encode()
                          + b"\n")
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # it could connect and send
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while "supervisor_connection_refused uid=65534" not in caplog.text:
            assert loop.time() < deadline, "refusal not logged"
            sup.changed.clear()
            try:
                await asyncio.wait_for(sup.changed.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
        forged = sup.event(key, "exited")
        rec = records.read(os.path.join(sup.dir, key))
        os.killpg(rec.pid, signal.SIGKILL)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return forged, sup.event(key, "exited")
    forged, real = run(main())
    assert forged is None  # the forged end never reached the executor
    assert exit_code(real["status"]) == -signal.SIGKILL


def test_an_oversized_request_fails_that_run_alone(sup):
    """A run whose command and environment exceed what one request carries
    is refused with a clear error; the runs after it start as usual."""
    from cronrd.errors import CronrdError

    async def main():
        sup.spawner.start()
        r, w = os.pipe()
        logfd = os.open(os.path.join(sup.logs, "big.log"), os.O_WRONLY | os.O_CREAT, 0o600)
        dirfd = os.open(sup.logs, os.O_RDONLY | os.O_DIRECTORY)
        req = {"key": new_key(2), "argv": ["/bin/true"], "env": {"BIG": "x" * 200_000},
               "cwd": "/", "cap": 1000, "switch": False, "ids": None,
               "record": os.path.join(sup.dir, "big"), "log_name": "big.log"}
        with pytest.raises(CronrdError, match="shorten them"):
            sup.spawner.spawn(req, [r, logfd, dirfd])
        for fd in (r, w, logfd, dirfd):
            os.close(fd)
        key, _ = sup.start("exit 5")
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return key
    key = run(main())
    assert exit_code(sup.event(key, "exited")["status"]) == 5


def test_a_request_the_socket_refuses_fails_that_run_and_not_the_queue(sup, monkeypatch):
    """Were a request too big for the socket after all (EMSGSIZE), that run
    fails and the queue behind it moves on (it used to stay stuck)."""
    from cronrd.runtime.runs import spawner as spawner_module
    monkeypatch.setattr(spawner_module, "MAX_REQUEST", 10 << 20)

    async def main():
        sup.spawner.start()
        r, w = os.pipe()
        logfd = os.open(os.path.join(sup.logs, "big.log"), os.O_WRONLY | os.O_CREAT, 0o600)
        dirfd = os.open(sup.logs, os.O_RDONLY | os.O_DIRECTORY)
        big = new_key(3)
        req = {"key": big, "argv": ["/bin/true"], "env": {"BIG": "x" * 2_000_000},
               "cwd": "/", "cap": 1000, "switch": False, "ids": None,
               "record": os.path.join(sup.dir, big), "log_name": "big.log"}
        sup.spawner.spawn(req, [r, logfd, dirfd])
        for fd in (r, w, logfd, dirfd):
            os.close(fd)
        key, _ = sup.start("exit 6")
        await sup.wait(lambda: big in sup.spawned and sup.event(key, "exited"))
        sup.spawner.close()
        return big, key
    big, key = run(main())
    assert sup.spawned[big][0] is None and "fork server" in sup.spawned[big][1]
    assert exit_code(sup.event(key, "exited")["status"]) == 6


def test_a_fork_server_that_cannot_start_is_a_clear_error(sup, monkeypatch):
    from cronrd.errors import CronrdError
    from cronrd.runtime.runs import spawner as spawner_module
    monkeypatch.setattr(spawner_module, "forkserver_argv",
                        lambda fd: ["/nonexistent/python", "-m", "x", str(fd)])

    async def main():
        with pytest.raises(CronrdError, match="cannot start cronrd's fork server"):
            sup.spawner.start()
        with pytest.raises(CronrdError, match="cannot start cronrd's fork server"):
            sup.start("true")
    run(main())


def test_the_c_supervisor_is_built_where_a_compiler_and_headers_are():
    """CI has gcc and Python's headers: there the C supervisor must be in use,
    or every test above ran the Python one twice."""
    import shutil
    import sysconfig
    headers = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    if not (shutil.which("cc") or shutil.which("gcc")) or not headers:
        pytest.skip("no C compiler or Python headers here: the Python supervisor is used")
    assert S.native_supervisor(), (
        "cronrd/runtime/runs/_supervise.c was not built: reinstall with "
        "`pip install -e .` and read the compiler's output")
    assert S.zygote_program(), (
        "the cronrd-zygote program was not built beside _supervise (setup.py): reinstall "
        "with `pip install -e .` and read the compiler's output")


def test_the_python_supervisor_can_be_forced(monkeypatch):
    monkeypatch.setenv("CRONRD_SUPERVISOR", "python")
    assert not S.native_supervisor()


GOOD_REQUEST = {"key": "7.abc", "notify": "/tmp/n", "record": "/tmp/r", "cwd": "/",
                "argv": ["/bin/true"], "env": {"PATH": "/bin"}, "cap": 1024,
                "log_name": "7.log"}


@pytest.mark.parametrize("change, why", [
    ({"argv": []}, "argv"), ({"argv": ["/bin/sh", "a\0b"]}, "argv"), ({"argv": [""]}, "argv"),
    ({"env": {"A=B": "x"}}, "env"), ({"env": {"": "x"}}, "env"), ({"env": {"A": "x\0"}}, "env"),
    ({"env": {"=A": "x"}}, "env"), ({"cap": 2 ** 63}, "cap"), ({"cap": "1"}, "cap"),
    ({"cap": True}, "cap"), ({"key": "é.1"}, "ASCII"), ({"cwd": ""}, "cwd"),
    ({"record": None}, "record"), ({"log_name": "../x.log"}, "log_name"),
    ({"log_name": None}, "log_name"),
])
def test_a_request_neither_supervisor_could_carry_out_is_refused_in_the_fork_server(change, why):
    """Both supervisors refuse the same requests, with the reason, before any
    fork (the Python one used to die silently in the child on some)."""
    S.check_request(GOOD_REQUEST)
    with pytest.raises(ValueError, match=why):
        S.check_request({**GOOD_REQUEST, **change})


@pytest.mark.parametrize("native", [True, False])
def test_the_pidfd_names_the_supervisor_even_if_it_ends_at_once(tmp_path, native):
    """A supervisor that ends at once (here: its record cannot be opened)
    could be reaped by the fork server's SIGCHLD handler before the pidfd
    was taken, and the run failed with "pidfd_open: No such process" (found
    0-3 times per 100 spawns). The pidfd is now taken before it may start."""
    if native and not S.native_supervisor():
        pytest.skip("the C supervisor is not built")
    req = {**GOOD_REQUEST, "notify": str(tmp_path / "n"),
           "record": str(tmp_path / "no-such-dir" / "rec")}
    r, w = os.pipe()
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid, pidfd = S._start(b, req, [r, log_fd, dir_fd], "boot", native)
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            assert f"Pid:\t{pid}\n" in f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 1  # the record could not be opened
        os.close(pidfd)
    finally:
        for fd in (r, w, log_fd, dir_fd):
            os.close(fd)
        a.close()
        b.close()


def _zygote(spawner):
    import psutil
    kids = [p for p in psutil.Process(spawner._proc.pid).children()
            if p.name() == "cronrd-zygote"]
    return kids[0] if kids else None


@pytest.fixture
def native_sup(tmp_path):
    if not S.native_supervisor():
        pytest.skip("the C supervisor is not built")
    return Harness(tmp_path)


def test_c_supervisors_are_forked_by_the_zygote_not_by_the_fork_server(native_sup):
    """The Python fork server forking each supervisor itself took ~240
    copy-on-write faults per run afterwards; its C zygote forks them."""
    import psutil
    sup = native_sup

    async def main():
        sup.spawner.start()
        key, _ = sup.start("sleep 0.5")
        await sup.wait(lambda: key in sup.spawned)
        pid = sup.spawned[key][0]
        parent = psutil.Process(pid).ppid()
        zygote = _zygote(sup.spawner)
        await sup.wait(lambda: sup.event(key, "exited"))
        sup.spawner.close()
        return parent, zygote
    parent, zygote = run(main())
    assert zygote is not None and parent == zygote.pid
    # The fork server gone, its zygote ends too (it reads EOF).
    zygote.wait(10)


def test_a_dead_zygote_costs_no_run_and_is_started_again(native_sup):
    sup = native_sup

    async def main():
        sup.spawner.start()
        first = sup.start("exit 3")[0]
        await sup.wait(lambda: sup.event(first, "exited"))
        old = _zygote(sup.spawner)
        old.kill()
        old.wait(10)
        second = sup.start("exit 5")[0]  # forked by the fork server itself
        await sup.wait(lambda: sup.event(second, "exited"))
        third = sup.start("exit 6")[0]   # through the new zygote
        await sup.wait(lambda: sup.event(third, "exited"))
        new = _zygote(sup.spawner)
        sup.spawner.close()
        return [sup.event(k, "exited")["status"] for k in (first, second, third)], old, new
    statuses, old, new = run(main())
    assert [exit_code(s) for s in statuses] == [3, 5, 6]
    assert new is not None and new.pid != old.pid


@pytest.mark.parametrize("payload, nfds", [
    (b"x\0" * (50 * 1024), 3), (b"no-nul-at-all", 3),
    (b"k\0n\0r\0/\0l\0" + b"1\0" + b"0\0" + b"99999999\0", 3),
    (b"k\0n\0r\0/\0l\0" + b"1\0" + b"0\0" + b"1\0/bin/true\0" + b"5\0A=1\0", 3),
    (b"k\0n\0r\0/\0l\0" + b"1\0" + b"0\0" + b"1\0/bin/true\0" + b"0\0", 2),
])
@pytest.mark.parametrize("program", ["program", "forked"])
def test_the_zygote_refuses_a_malformed_request_and_serves_the_next(tmp_path, monkeypatch,
                                                                     payload, nfds, program):
    """Only the fork server speaks to its zygote, but a request it cannot
    parse (oversized, truncated, counts beyond the data, descriptors missing) is
    answered with an error, forks nothing, and the zygote goes on: the
    cronrd-zygote program and a zygote forked from the fork server alike."""
    if not S.native_supervisor():
        pytest.skip("the C supervisor is not built")
    if program == "forked":
        monkeypatch.setattr(S, "zygote_program", lambda: None)
    elif S.zygote_program() is None:
        pytest.skip("the cronrd-zygote program is not built")
    zygote = S.Zygote("boot", -1)
    r, w = os.pipe()
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fds = [r, log_fd, dir_fd][:nfds]
        if fds:
            socket.send_fds(zygote.sock, [payload], fds)
        else:
            zygote.sock.send(payload)
        msg, rfds, _, _ = socket.recv_fds(zygote.sock, 512, 1)
        assert msg.startswith(b"error ") and rfds == []
        # Still serving: a good request starts a supervisor.
        req = {**GOOD_REQUEST, "notify": str(tmp_path / "n"), "record": str(tmp_path / "rec")}
        pid, pidfd = zygote.spawn(req, [r, log_fd, dir_fd])
        os.write(w, b"\n")
        assert zygote.restarts == 0 and pid > 0
        os.close(pidfd)
    finally:
        for fd in (r, w, log_fd, dir_fd):
            os.close(fd)
        zygote.sock.close()


def test_the_zygote_is_a_program_of_its_own_and_carries_no_interpreter(native_sup):
    """Forked from the fork server, the zygote carried the interpreter's
    memory (6.5 MB, 74 mappings), copied by every supervisor fork and torn
    down by every supervisor exit. It is now the cronrd-zygote program."""
    if S.zygote_program() is None:
        pytest.skip("the cronrd-zygote program is not built")
    sup = native_sup

    async def main():
        sup.spawner.start()
        key, _ = sup.start("exit 4")
        await sup.wait(lambda: sup.event(key, "exited"))
        zygote = _zygote(sup.spawner)
        maps = [m.path for m in zygote.memory_maps(grouped=True)]
        exe = zygote.exe()
        status = sup.event(key, "exited")["status"]
        sup.spawner.close()
        return exe, maps, status
    exe, maps, status = run(main())
    assert os.path.realpath(exe) == os.path.realpath(S.zygote_program())
    assert not [m for m in maps if "python" in os.path.basename(m).lower()], maps
    assert exit_code(status) == 4


def test_a_zygote_program_that_cannot_run_leaves_the_zygote_forked(tmp_path, monkeypatch):
    """If exec of the program fails (a noexec mount, a broken file), the
    forked child serves as the zygote itself: runs still start."""
    if not S.native_supervisor():
        pytest.skip("the C supervisor is not built")
    broken = tmp_path / "cronrd-zygote"
    broken.write_bytes(b"\x7fELF not really")
    broken.chmod(0o755)
    monkeypatch.setattr(S, "zygote_program", lambda: str(broken))
    zygote = S.Zygote("boot", -1)
    r, w = os.pipe()
    log_fd = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        record = tmp_path / GOOD_REQUEST["key"]
        req = {**GOOD_REQUEST, "notify": str(tmp_path / "n"), "record": str(record),
               "argv": ["/bin/sh", "-c", "read _; exit 9"]}
        pid, pidfd = zygote.spawn(req, [r, log_fd, dir_fd])
        os.write(w, b"\n")
        ended, _, _ = select.select([pidfd], [], [], 15)  # the supervisor is gone
        assert ended, "the supervisor did not end within 15 s"
        rec = records.read(str(record))
        assert rec is not None and exit_code(rec.status) == 9, record.read_text()
        os.close(pidfd)
    finally:
        for fd in (r, w, log_fd, dir_fd):
            os.close(fd)
        zygote.sock.close()


def test_the_zygote_program_says_how_it_is_used():
    program = S.zygote_program()
    if program is None:
        pytest.skip("the cronrd-zygote program is not built")
    for argv in ([], ["x", "boot"], ["3"]):
        done = subprocess.run([program, *argv], capture_output=True, text=True, timeout=10)
        assert done.returncode == 2
        assert "usage: cronrd-zygote FD BOOT_ID" in done.stderr

#!/usr/bin/env python3
"""Gate-window benchmark: what a per-run supervisor costs the runs a gate releases.

One trial: N runs wait at one gate (a pipe shared as their stdin, as the
daemon does it), each a shell that execs bench/stamp.c once the gate opens.
At a known instant the gate opens; stamp records when each process started.
Lateness = start - gate instant. Three ways of holding the runs, measured
interleaved in the same run (the machine's noise hits all alike):

  direct   this process spawns the shells itself and reads their output
           (the daemon's way before supervisors: the floor)
  c        the fork server with the C supervisor (runs/_supervise.c)
  python   the fork server with the Python supervisor (CRONRD_SUPERVISOR=python)

It also reports the CPU each way costs per run, measured from the processes
themselves (this process's reaped children, the fork server and everything
it reaped).

    python bench/gate_window.py                 # 15 trials x 100 runs each way
    python bench/gate_window.py --trials 30 --runs 200

Prints medians over trials of the per-trial p50/p99/max lateness and a
RESULT line. No daemon: this isolates the supervisors from the scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GATE = 'read _ || exit 75; printf "\\002"; exec </dev/null; exec "$@"'
FIRE = "1970-01-01T00:00:00Z"  # stamp needs one; lateness is taken from the gate instant


def build_stamp(workdir: Path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("gate_window needs a C compiler for bench/stamp.c (apt-get install gcc)")
    out = workdir / "stamp"
    subprocess.run([cc, "-O2", "-o", str(out), str(HERE / "stamp.c")], check=True)
    return str(out)


class NotifySink:
    """The daemon's end of the supervisors' notify socket: accepts and reads."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4096)
        self.sock.setblocking(False)
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        conns: list[socket.socket] = []
        while not self._stop:
            ready, _, _ = select.select([self.sock, *conns], [], [], 0.2)
            for s in ready:
                if s is self.sock:
                    try:
                        conn, _ = self.sock.accept()
                        conn.setblocking(False)
                        conns.append(conn)
                    except BlockingIOError:
                        pass
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    conns.remove(s)
                    s.close()


class ForkServer:
    def __init__(self, python_only: bool):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env.pop("CRONRD_SUPERVISOR", None)
        if python_only:
            env["CRONRD_SUPERVISOR"] = "python"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cronrd.runtime.runs.supervisor", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], env=env)
        theirs.close()

    def spawn(self, req: dict, fds: list[int]) -> int:
        socket.send_fds(self.sock, [json.dumps(req).encode()], fds)
        msg, rfds, _, _ = socket.recv_fds(self.sock, 4096, 2)
        reply = json.loads(msg)
        if "error" in reply:
            raise SystemExit(f"spawn failed: {reply['error']}")
        return rfds[0]

    def cpu(self) -> float:
        """The fork server's CPU with everything it reaped, and its zygote's
        (the C supervisors' parent) with everything that reaped (seconds)."""
        import psutil
        total = 0.0
        fs = psutil.Process(self.proc.pid)
        for p in (fs, *fs.children()):
            c = p.cpu_times()
            total += c.user + c.system + c.children_user + c.children_system
        return total

    def close(self) -> None:
        self.sock.close()
        self.proc.wait(10)


def trial(way: str, n: int, stamp: str, root: Path, tag: str, servers: dict,
          log_fd: int, notify: str) -> float:
    """Spawn n runs at a gate, open it; the gate instant (wall clock)."""
    rfd, wfd = os.pipe()
    handles = []
    for i in range(n):
        argv = ["/bin/sh", "-c", GATE, "gate", stamp, str(root / "stamps"), f"{tag}.{i}"]
        env = {"PATH": "/usr/bin:/bin", "CRONRD_FIRE_TIME": FIRE}
        if way == "direct":
            out_r, out_w = os.pipe()
            pid = os.posix_spawn(argv[0], argv, env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, rfd, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, out_w, 2)])
            os.close(out_w)
            handles.append((pid, out_r))
        else:
            req = {"key": f"{i}.{tag}", "notify": notify, "cap": 1 << 20,
                   "record": str(root / "records" / f"{tag}.{i}"), "argv": argv, "env": env,
                   "cwd": "/"}
            handles.append((None, servers[way].spawn(req, [rfd, log_fd])))
    os.close(rfd)
    time.sleep(0.5)  # every shell is at its gate
    gate_at = time.time()
    os.write(wfd, b"\n" * (2 * n))
    os.close(wfd)
    pending = {fd: pid for pid, fd in handles}
    while pending:  # output to EOF (direct) or supervisor gone (pidfd)
        ready, _, _ = select.select(list(pending), [], [], 30)
        if not ready:
            raise SystemExit(f"{way}: runs did not end within 30 s")
        for fd in ready:
            if pending[fd] is not None and os.read(fd, 65536):
                continue
            pid = pending.pop(fd)
            os.close(fd)
            if pid is not None:
                os.waitpid(pid, 0)
    return gate_at


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--runs", type=int, default=100, help="runs released by one gate")
    ap.add_argument("--ways", default="direct,c,python")
    ap.add_argument("--dir", default=None,
                    help="where the temporary directory goes (default: $TMPDIR or /tmp)")
    args = ap.parse_args()
    from cronrd.runtime.runs import supervisor
    ways = args.ways.split(",")
    if "c" in ways and not supervisor.native_supervisor():
        print("the C supervisor is not built (pip install -e . with a C compiler): "
              "skipping 'c'", file=sys.stderr)
        ways.remove("c")
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    root = Path(tempfile.mkdtemp(prefix="gw-", dir=args.dir))
    try:
        (root / "records").mkdir()
        stamp = build_stamp(root)
        notify = str(root / "notify")
        NotifySink(notify)
        log_fd = os.open(root / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        servers = {w: ForkServer(python_only=(w == "python")) for w in ways if w != "direct"}
        lat: dict[str, list[tuple[float, float, float]]] = {w: [] for w in ways}
        direct_cpu = 0.0
        for k in range(args.trials):
            for way in ways:
                tag = f"{way}{k}"
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                gate_at = trial(way, args.runs, stamp, root, tag, servers, log_fd, notify)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if way == "direct":
                    direct_cpu += (after.ru_utime + after.ru_stime
                                   - before.ru_utime - before.ru_stime)
                starts = sorted(
                    (float(line.split()[2]) - gate_at) * 1000
                    for line in (root / "stamps").read_text().splitlines()
                    if line.split()[0].startswith(tag + "."))
                if len(starts) != args.runs:
                    raise SystemExit(f"{way}: {len(starts)} of {args.runs} runs started")
                lat[way].append((starts[len(starts) // 2],
                                 starts[max(0, int(len(starts) * 0.99) - 1)], starts[-1]))
        time.sleep(1.2)  # the supervisors' last linger (supervisor.EXIT_LINGER)
        cpu = {"direct": direct_cpu}
        for way, server in servers.items():
            cpu[way] = server.cpu()
            server.close()
        total = args.trials * args.runs
        print(f"gate_window: {args.trials} trials x {args.runs} runs per way, "
              f"{os.cpu_count()} CPUs")
        print(f"{'way':8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU ms/run':>11}")
        result = []
        for way in ways:
            med = [statistics.median(t[i] for t in lat[way]) for i in range(3)]
            per_run = 1000 * cpu[way] / total
            print(f"{way:8} {med[0]:8.1f} {med[1]:8.1f} {med[2]:8.1f} {per_run:11.2f}")
            result += [f"{way}_p50_ms={med[0]:.1f}", f"{way}_p99_ms={med[1]:.1f}",
                       f"{way}_cpu_ms_per_run={per_run:.2f}"]
        print("(medians over trials of each trial's p50/p99/max; CPU: everything the runs "
              "cost, jobs included)")
        print("RESULT " + " ".join(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start-up time and size of the self-contained binary, beside the source install.

    python bench/binary_startup.py [--binary dist/cronrd] [--source CMD] [-n 20]

Measures, for the binary (default dist/cronrd) and for the source install (the
`cronrd` console script next to this Python, else `python -m cronrd`):

- the wall time of `cronrd --version`: one warm-up run, then the median of N;
- the wall time of `cronrd status` against a running daemon (one daemon in a
  temporary directory, started from the binary when there is one), likewise;
- for the binary, its size and the very first run with an empty extraction
  cache (the binary unpacks itself once into a private cache directory; the
  benchmark points CRONRD_CACHE_DIR at a temporary directory so that first run
  is a true first run and nothing is left in your own cache).

The last line is machine-readable:
RESULT binary_version_ms=... binary_status_ms=... source_version_ms=...
       source_status_ms=... size_mb=... binary_first_run_ms=... and the same four
       medians as CPU time (*_cpu_ms).
Targets (issue 5): binary --version <= 150 ms and status <= 250 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cronrd.client import Client  # noqa: E402
from cronrd.errors import CronrdError  # noqa: E402


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run. CPU time (user + system, with the
    children it waited for) barely depends on what else the machine runs, so
    it shows the unloaded cost when the wall clock is noisy."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.decode()}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def wall_ms(argv: list[str], env: dict) -> float:
    return timed(argv, env)[0]


def median_ms(argv: list[str], env: dict, n: int) -> tuple[float, float]:
    """Median wall and median CPU ms of n runs after one warm-up run (page
    cache, and the binary's one-time unpacking)."""
    timed(argv, env)
    runs = [timed(argv, env) for _ in range(n)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def source_command() -> list[str]:
    script = Path(sys.executable).parent / "cronrd"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cronrd"]


class Daemon:
    def __init__(self, argv: list[str], env: dict):
        self.base = Path(tempfile.mkdtemp(prefix="crbs-", dir="/tmp"))
        jobs = self.base / "jobs"
        jobs.mkdir(mode=0o755)
        (jobs / "hourly.yaml").write_text('schedule: "@hourly"\ncommand: "true"\n')
        os.chmod(jobs / "hourly.yaml", 0o644)
        self.config = self.base / "cronrd.yaml"
        self.socket = str(self.base / "sock")
        self.config.write_text(
            f"node_id: bench\njobs_dir: {jobs}\ndata_dir: {self.base / 'state'}\n"
            f"log_dir: {self.base / 'logs'}\nsocket: {self.socket}\ntimezone: UTC\n")
        env = {k: v for k, v in env.items() if k != "NOTIFY_SOCKET"}
        self.log = open(self.base / "daemon.log", "wb")
        self.proc = subprocess.Popen([*argv, "--config", str(self.config), "daemon"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"daemon exited {self.proc.returncode}:\n"
                                 + (self.base / "daemon.log").read_text())
            try:
                if Client(self.socket, timeout=2).call("status")["ready"]:
                    return
            except (CronrdError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise SystemExit("daemon did not become ready within 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=str(REPO / "dist" / "cronrd"))
    ap.add_argument("--source", help="Command for the source install (default: the "
                    "cronrd script beside this Python, else python -m cronrd).")
    ap.add_argument("-n", type=int, default=20, help="Timed runs after one warm-up.")
    args = ap.parse_args()

    source = args.source.split() if args.source else source_command()
    binary = Path(args.binary)
    have_binary = binary.is_file() and os.access(binary, os.X_OK)
    cache = tempfile.mkdtemp(prefix="crbs-cache-")
    env = {**os.environ, "CRONRD_CACHE_DIR": cache}
    env_src = {**os.environ, "PYTHONPATH": str(REPO)}  # measure this checkout's code
    res: dict[str, float | None] = dict.fromkeys(
        ["binary_version_ms", "binary_status_ms", "source_version_ms", "source_status_ms",
         "size_mb", "binary_first_run_ms", "binary_version_cpu_ms", "binary_status_cpu_ms",
         "source_version_cpu_ms", "source_status_cpu_ms"])
    daemon = None
    try:
        if have_binary:
            res["size_mb"] = binary.stat().st_size / 1e6
            res["binary_first_run_ms"] = wall_ms([str(binary), "--version"], env)
            res["binary_version_ms"], res["binary_version_cpu_ms"] = median_ms(
                [str(binary), "--version"], env, args.n)
        else:
            print(f"note: no binary at {binary} (packaging/build-binary builds it); "
                  "measuring the source install only", file=sys.stderr)
        res["source_version_ms"], res["source_version_cpu_ms"] = median_ms(
            [*source, "--version"], env_src, args.n)

        daemon = Daemon([str(binary)] if have_binary else source, env if have_binary
                        else env_src)
        # --config, not --socket: a real `cronrd status` reads the config to find the socket.
        status = ["--config", str(daemon.config), "status"]
        if have_binary:
            res["binary_status_ms"], res["binary_status_cpu_ms"] = median_ms(
                [str(binary), *status], env, args.n)
        res["source_status_ms"], res["source_status_cpu_ms"] = median_ms(
            [*source, *status], env_src, args.n)
    finally:
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(cache, ignore_errors=True)

    def fmt(v, unit="ms"):
        return "-" if v is None else (f"{v:.0f} {unit}" if unit == "ms" else f"{v:.1f} {unit}")
    print(f"{'':24}{'binary':>12}{'source':>12}{'target':>10}")
    print(f"{'cronrd --version':24}{fmt(res['binary_version_ms']):>12}"
          f"{fmt(res['source_version_ms']):>12}{'150 ms':>10}")
    print(f"{'cronrd status':24}{fmt(res['binary_status_ms']):>12}"
          f"{fmt(res['source_status_ms']):>12}{'250 ms':>10}")
    print(f"{'  CPU time of --version':24}{fmt(res['binary_version_cpu_ms']):>12}"
          f"{fmt(res['source_version_cpu_ms']):>12}")
    print(f"{'  CPU time of status':24}{fmt(res['binary_status_cpu_ms']):>12}"
          f"{fmt(res['source_status_cpu_ms']):>12}")
    print(f"{'first run (unpacking)':24}{fmt(res['binary_first_run_ms']):>12}")
    print(f"{'size':24}{fmt(res['size_mb'], 'MB'):>12}")
    print(f"(median of {args.n} after one warm-up; binary {binary}; source {' '.join(source)};"
          f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print("RESULT " + " ".join(
        f"{k}={'NA' if v is None else (f'{v:.1f}' if k == 'size_mb' else f'{v:.0f}')}"
        for k, v in res.items()))


if __name__ == "__main__":
    main()

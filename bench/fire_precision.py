#!/usr/bin/env python3
"""Fire-precision benchmark: cronrd vs APScheduler 3 on the same jobs and load.

N jobs with seconds-field schedules on one node, each running a tiny C
program (bench/stamp.c) that reads CLOCK_REALTIME first thing and appends
``<job> <fire_time> <start_time>`` to a file: the start time is measured by the
job, not by the scheduler. For a fixed window it reports lateness (process
start minus scheduled fire time) p50/p99/max, fires per second, missed and
duplicated fires, scheduler CPU seconds and peak RSS. Then it runs APScheduler
3 (BackgroundScheduler + thread pool, in its own process) on the same job set,
the same command and the same load, and prints the ratio of the p99s.

    python bench/fire_precision.py --quick          # 2000 jobs, 100 fires/s, 20 s
    python bench/fire_precision.py                  # 10000 jobs, 300 fires/s, 60 s
    python bench/fire_precision.py --skip-apscheduler --keep --profile

Targets (the issue): with 10,000 jobs and 300 fires/s, cronrd p99 <= 20 ms and
>= 5x better than APScheduler's p99 in the same run; daemon RSS <= 150 MB.

The last line is machine-readable: ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
TARGET_P99_MS = 20.0
TARGET_RATIO = 5.0
TARGET_RSS_MB = 150.0
IDLE_SCHEDULE = "0 0 0 1 1 *"  # once a year: a defined job that does not fire in the window


# ----------------------------------------------------------------------------- setup

def ensure_apscheduler() -> str:
    """Import APScheduler 3, installing ``apscheduler<4`` into this interpreter if missing."""
    try:
        import apscheduler  # noqa: F401
    except ImportError:
        print("APScheduler is not installed; running: "
              f"{sys.executable} -m pip install 'apscheduler<4'", flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "apscheduler<4"])
        import importlib
        importlib.invalidate_caches()
    import apscheduler
    version = getattr(apscheduler, "__version__", "?")
    if not str(version).startswith("3."):
        raise SystemExit(f"APScheduler {version} is installed; this benchmark needs 3.x "
                         "(pip install 'apscheduler<4')")
    return str(version)


def build_stamp(workdir: Path) -> tuple[list[str], str]:
    """Compile stamp.c; return (argv prefix before OUTFILE JOBNAME, description).

    Without a C compiler the fallback is a shell one-liner; its start time is
    taken by `date` after sh has started and forked, so it reads ~1-2 ms later
    than the real process start and the figures are pessimistic for both
    schedulers alike.
    """
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    src = HERE / "stamp.c"
    if cc and src.exists():
        out = workdir / "stamp"
        res = subprocess.run([cc, "-O2", "-o", str(out), str(src)], capture_output=True,
                             text=True)
        if res.returncode == 0:
            return [str(out)], f"compiled stamp ({cc} -O2)"
        print(f"warning: compiling {src} failed, using the shell fallback:\n{res.stderr}",
              file=sys.stderr)
    script = 'echo "$1 $CRONRD_FIRE_TIME $(date +%s.%N)" >> "$0"'
    return (["/bin/sh", "-c", script],
            "NO C COMPILER: shell fallback (sh + date), start times read ~1-2 ms late")


# ----------------------------------------------------------------------------- job set

@dataclass
class Plan:
    names: list[str]
    seconds: list[tuple[int, ...]]   # seconds of the minute each job fires at; () = idle
    per_second: list[int]            # fires due at each second of the minute

    @property
    def rate(self) -> float:
        return sum(self.per_second) / 60.0

    def schedule(self, i: int) -> str:
        secs = self.seconds[i]
        return IDLE_SCHEDULE if not secs else ",".join(map(str, secs)) + " * * * * *"

    def expected(self, t0: int, t1: int) -> int:
        """Fires due in [t0, t1) (whole seconds)."""
        return sum(self.per_second[t % 60] for t in range(t0, t1))


def plan_jobs(n: int, rate: float) -> Plan:
    """Give N jobs seconds-of-the-minute so that `rate` fires are due each second.

    Total fires per minute F = round(rate*60). Every job fires k = F // N or
    k + 1 times a minute; if F < N, the N - F jobs without a fire get a
    once-a-year schedule (defined and scheduled, but idle in the window). A
    job's k seconds are spread evenly (60/k apart) from a base second that
    cycles through 0..59, so each second of the minute gets the same load
    (+-1) and a job's own fires are far apart.
    """
    total = round(rate * 60)
    if total > 60 * n:
        raise SystemExit(f"--rate {rate:g} needs more than one fire per second per job "
                         f"with --jobs {n}; raise --jobs")
    base, extra = divmod(total, n)
    width = len(str(n - 1))
    names, seconds = [], []
    per_second = [0] * 60
    counters: dict[int, int] = {}
    for i in range(n):
        k = base + (1 if i < extra else 0)
        names.append(f"b{i:0{width}d}")
        if k == 0:
            seconds.append(())
            continue
        q = counters.get(k, 0)
        counters[k] = q + 1
        step = 60 // k
        secs = tuple(sorted({(q + m * step) % 60 for m in range(k)}))
        assert len(secs) == k
        for s in secs:
            per_second[s] += 1
        seconds.append(secs)
    return Plan(names, seconds, per_second)


# ----------------------------------------------------------------------------- sampling

def _is_forkserver(proc: psutil.Process) -> bool:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    return "cronrd.runtime.runs.supervisor" in cmd or "__forkserver" in cmd


class Sampler(threading.Thread):
    """CPU times and RSS of one process every `interval` seconds.

    Besides the process's own CPU it samples "all" CPU: its own, its reaped
    children's (the jobs, for a daemon that forks them itself) and its run
    supervisors' fork server with everything that one reaped (supervisors
    and their jobs): the whole cost of running the jobs, comparable between
    a daemon that forks jobs itself and one that hands them to supervisors."""

    def __init__(self, pid: int, interval: float = 0.5):
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, float, int, float]] = []  # (wall, cpu_s, rss, all)
        self._halt = threading.Event()

    def sample(self) -> None:
        try:
            with self.proc.oneshot():
                ct = self.proc.cpu_times()
                rss = self.proc.memory_info().rss
            total = ct.user + ct.system + ct.children_user + ct.children_system
            for child in self.proc.children():
                if _is_forkserver(child):
                    # The fork server, and its C zygote (which forks the
                    # supervisors and reaps them) while it lives.
                    for p in (child, *child.children()):
                        try:
                            c = p.cpu_times()
                            total += c.user + c.system + c.children_user + c.children_system
                        except psutil.Error:
                            pass
        except psutil.Error:
            return
        self.samples.append((time.time(), ct.user + ct.system, rss, total))

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.sample()

    def _nearest(self, t: float):
        """The (wall, cpu, rss) sample taken closest to wall time ``t``."""
        return min(self.samples, key=lambda s: abs(s[0] - t), default=None)

    def cpu_at(self, t: float) -> float:
        s = self._nearest(t)
        return s[1] if s else 0.0

    def all_cpu_at(self, t: float) -> float:
        s = self._nearest(t)
        return s[3] if s else 0.0

    @property
    def peak_rss(self) -> int:
        return max((s[2] for s in self.samples), default=0)

    def rss_at(self, t: float) -> int:
        s = self._nearest(t)
        return s[2] if s else 0


# ----------------------------------------------------------------------------- results

@dataclass
class Result:
    name: str
    jobs: int
    window: tuple[int, int]
    expected: int
    lateness: list[float] = field(default_factory=list)  # seconds, one per distinct fire
    fires: list[float] = field(default_factory=list)     # the matching fire times
    duplicates: int = 0
    bad_lines: int = 0
    cpu_s: float = 0.0
    cpu_all_s: float = 0.0  # with reaped children and run supervisors
    peak_rss: int = 0
    rss_start: int = 0   # RSS when the window opened (jobs loaded, warmed up)
    ready_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def recorded(self) -> int:
        return len(self.lateness)

    @property
    def missed(self) -> int:
        return self.expected - self.recorded

    def pct(self, p: float) -> float:
        if not self.lateness:
            return float("nan")
        xs = sorted(self.lateness)
        k = max(0, min(len(xs) - 1, math.ceil(p / 100.0 * len(xs)) - 1))
        return xs[k] * 1000.0

    @property
    def max_ms(self) -> float:
        return max(self.lateness) * 1000.0 if self.lateness else float("nan")

    @property
    def fires_per_s(self) -> float:
        return self.recorded / max(1, self.window[1] - self.window[0])


def parse_fire(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # the shell fallback writes the ISO text
        from datetime import datetime
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def collect(res: Result, outfile: Path) -> None:
    t0, t1 = res.window
    seen: dict[tuple[str, float], float] = {}
    try:
        lines = outfile.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            res.bad_lines += 1
            continue
        try:
            fire, start = parse_fire(parts[1]), float(parts[2])
        except ValueError:
            res.bad_lines += 1
            continue
        if fire < 0:
            res.bad_lines += 1
            continue
        if not (t0 <= fire < t1):
            continue
        key = (parts[0], fire)
        if key in seen:
            res.duplicates += 1
            continue
        seen[key] = start - fire
    res.fires = [k[1] for k in seen]
    res.lateness = list(seen.values())


def drift(res: Result, first: bool, span: int = 10) -> float:
    """p50 lateness (ms) of fires in the first / last `span` s of the window: a
    growing figure means the scheduler is falling behind (a backlog)."""
    t0, t1 = res.window
    lo, hi = (t0, t0 + span) if first else (t1 - span, t1)
    xs = sorted(late for f, late in zip(res.fires, res.lateness) if lo <= f < hi)
    return xs[len(xs) // 2] * 1000.0 if xs else float("nan")


def count_in_window(outfile: Path, t0: int, t1: int) -> int:
    n = 0
    try:
        with open(outfile) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    try:
                        if t0 <= parse_fire(parts[1]) < t1:
                            n += 1
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return n


def wait_settled(outfile: Path, res: "Result", quiet: float = 3.0, cap: float = 30.0) -> None:
    """After the window: wait until every expected fire of the window is recorded,
    or the count of the window's fires has not grown for `quiet` s (max `cap` s).
    Fires of later seconds keep arriving and are not waited for."""
    t0, t1 = res.window
    time.sleep(max(0.0, t1 + 0.5 - time.time()))
    deadline = time.time() + cap
    count, since = -1, time.time()
    while time.time() < deadline:
        now_count = count_in_window(outfile, t0, t1)
        if now_count >= res.expected:
            return
        if now_count != count:
            count, since = now_count, time.time()
        elif time.time() - since >= quiet:
            return
        time.sleep(0.5)


def window_after(warmup: float, duration: int) -> tuple[int, int]:
    t0 = math.ceil(time.time() + warmup)
    return t0, t0 + duration


# ----------------------------------------------------------------------------- cronrd

def write_cronrd_jobs(jobs_dir: Path, plan: Plan, argv: list[str], outfile: Path,
                      files: int) -> None:
    n = len(plan.names)
    per_file = max(1, math.ceil(n / files))
    for f in range(0, n, per_file):
        jobs = []
        for i in range(f, min(n, f + per_file)):
            jobs.append({"name": plan.names[i], "schedule": plan.schedule(i),
                         "command": [*argv, str(outfile), plan.names[i]],
                         "concurrency": "allow", "catchup": "none",
                         "max_log_bytes": "4KiB"})
        path = jobs_dir / f"bench-{f // per_file:03d}.yaml"
        path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False, width=1000))
        os.chmod(path, 0o644)


def run_cronrd(args, plan: Plan, argv: list[str], base: Path) -> Result:
    from cronrd.client import Client

    root = base / "cronrd"
    jobs_dir = root / "jobs"
    jobs_dir.mkdir(parents=True, mode=0o755)
    outfile = root / "stamps.txt"
    write_cronrd_jobs(jobs_dir, plan, argv, outfile, args.files)
    sock = str(root / "sock")
    if len(sock.encode()) >= 100:
        raise SystemExit(f"socket path {sock} is too long; set TMPDIR to a shorter directory")
    cfg = {"node_id": "bench", "data_dir": str(root / "state"), "jobs_dir": str(jobs_dir),
           "socket": sock, "log_dir": str(root / "logs"), "timezone": "UTC",
           "log_level": args.log_level, "shutdown": {"mode": "wait", "grace": "10s"}}
    config_path = root / "cronrd.yaml"
    config_path.write_text(yaml.safe_dump(cfg))
    log_path = root / "daemon.log"
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    started = time.time()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "cronrd", "--config", str(config_path),
                                 "daemon"], stdout=logf, stderr=subprocess.STDOUT, env=env,
                                cwd=str(root))
    sampler = Sampler(proc.pid)
    sampler.start()
    client = Client(sock, timeout=30)
    status = None
    n = len(plan.names)
    try:
        deadline = time.time() + args.load_timeout
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"cronrd exited with {proc.returncode} while loading:\n"
                                 + log_path.read_text()[-4000:])
            if time.time() > deadline:
                raise SystemExit(f"cronrd did not load {n} jobs within {args.load_timeout}s "
                                 f"(last status: {status and status.get('jobs')} jobs)")
            try:
                status = client.call("status")
            except Exception:
                status = None
            if status and status.get("jobs") == n:
                break
            time.sleep(0.2)
        ready_s = time.time() - started
        print(f"  cronrd: {n} jobs loaded in {ready_s:.1f} s (pid {proc.pid})", flush=True)
        if status.get("problems"):
            print(f"  cronrd: job file problems: {status['problems'][:3]}", flush=True)
        t0, t1 = window_after(args.warmup, args.duration)
        res = Result("cronrd", n, (t0, t1), plan.expected(t0, t1), ready_s=ready_s)
        prof = None
        time.sleep(max(0.0, t0 - time.time()))
        if args.profile:
            prof = start_profile(proc.pid, root, args.duration)
        print(f"  cronrd: measuring {args.duration} s ...", flush=True)
        time.sleep(max(0.0, t1 - time.time()))
        cpu = sampler.cpu_at(t1) - sampler.cpu_at(t0)
        cpu_all = sampler.all_cpu_at(t1) - sampler.all_cpu_at(t0)
        wait_settled(outfile, res)
        res.notes.append(run_state_note(client))
        if prof is not None:
            finish_profile(prof, res)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                print("  cronrd: did not stop within 60 s of SIGTERM; killed", flush=True)
        sampler.stop()
    res.cpu_s = cpu
    res.cpu_all_s = cpu_all
    res.peak_rss = sampler.peak_rss
    res.rss_start = sampler.rss_at(res.window[0])
    collect(res, outfile)
    if proc.returncode not in (0, None):
        res.notes.append(f"daemon exit code {proc.returncode}")
    res.notes.extend(daemon_log_notes(log_path))
    return res


def run_state_note(client) -> str:
    """Runs that did not succeed, over the whole daemon run (not only the window)."""
    counts = {}
    try:
        for state in ("failed", "skipped", "lost", "timed_out", "cancelled"):
            runs = client.call("runs", {"state": state, "limit": 100000}).get("runs", [])
            if runs:
                counts[state] = len(runs)
        st = client.call("status")
        for key in ("running", "assigned"):
            if st.get(key):
                counts[f"{key}_now"] = st[key]
    except Exception as exc:
        return f"querying run states failed: {exc}"
    return ("runs not succeeded (whole run): " + json.dumps(counts)) if counts else \
        "runs not succeeded (whole run): none"


def daemon_log_notes(log_path: Path) -> list[str]:
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                for level in ("ERROR", "WARNING", "CRITICAL", "Traceback"):
                    if f" {level} " in line or line.startswith(level):
                        counts[level] = counts.get(level, 0) + 1
                        examples.setdefault(level, line.strip()[:300])
    except FileNotFoundError:
        return []
    notes = [f"daemon log: {c} {lvl} line(s), e.g. {examples[lvl]}"
             for lvl, c in counts.items()]
    return notes or ["daemon log: no warnings or errors"]


# ----------------------------------------------------------------------------- profiling

def start_profile(pid: int, root: Path, duration: int):
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(exe):
        print("  --profile: py-spy not found (pip install py-spy)", flush=True)
        return None
    out = root / "profile.txt"
    cmd = [exe, "record", "--pid", str(pid), "--duration", str(duration), "--rate", "200",
           "--format", "raw", "--output", str(out), "--nonblocking", "--idle"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, out


def finish_profile(prof, res: Result) -> None:
    proc, out = prof
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        err = "timed out"
    if not out.exists():
        res.notes.append(f"profile: py-spy failed: {err.strip()[-300:]}")
        return
    res.notes.append(f"profile: {out} (collapsed stacks; summary below)")
    res.notes.extend(summarize_profile(out))


def summarize_profile(path: Path, top: int = 30) -> list[str]:
    """Where the event-loop thread's time goes, from py-spy's collapsed stacks.

    Only the main (event-loop) thread is counted; worker threads of
    run_in_executor idle most of the time and would dilute the figures.
    Percentages are of wall time of that thread (py-spy ran with --idle, so a
    thread blocked in epoll counts as "idle in select"). Inclusive: the
    function is anywhere on the stack; self: it is the innermost frame.
    """
    total = 0
    inclusive: dict[str, int] = {}
    leaf: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        if "Thread._bootstrap" in stack:
            continue
        total += n
        names = []
        for fr in stack.split(";"):
            fn, _, loc = fr.partition(" (")
            loc = os.path.basename(loc.rstrip(")").rsplit(":", 1)[0])
            names.append(f"{fn} ({loc})")
        for name in set(names):
            inclusive[name] = inclusive.get(name, 0) + n
        if names:
            leaf[names[-1]] = leaf.get(names[-1], 0) + n
    if not total:
        return ["profile: no samples of the event-loop thread"]
    lines = [f"profile: {total} samples of the event-loop thread; inclusive % of its "
             "wall time (frames on every stack left out):"]
    for name, n in sorted(inclusive.items(), key=lambda kv: -kv[1]):
        if n >= 0.97 * total:
            continue
        if len(lines) > top:
            break
        lines.append(f"  {100.0 * n / total:5.1f}%  {name}")
    lines.append("profile: self % (innermost frame):")
    for name, n in sorted(leaf.items(), key=lambda kv: -kv[1])[:15]:
        lines.append(f"  {100.0 * n / total:5.1f}%  {name}")
    return lines


# ----------------------------------------------------------------------------- APScheduler

APS_DRIVER = r'''
"""APScheduler 3 side of bench/fire_precision.py (written to a temp file and run
with the same interpreter, so its CPU and RSS are measured on their own)."""
import json, logging, os, signal, subprocess, sys, threading, time
from datetime import datetime, timezone

from apscheduler.executors import pool as aps_pool
from apscheduler.executors.base import run_job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

cfg = json.load(open(sys.argv[1]))
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
tls = threading.local()
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "SHELL": "/bin/sh", "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8"}
mismatch = [0]


class FireTimeExecutor(aps_pool.ThreadPoolExecutor):
    """Tells the job function its own scheduled fire time.

    APScheduler 3 does not pass the scheduled run time to the job function, but
    its executor receives it: ``_do_submit_job(job, run_times)``. This hands
    each run time to APScheduler's own ``run_job`` one at a time (so misfire
    checks, events and bookkeeping are APScheduler's) with the run time in a
    thread-local the job function reads. The fire time is therefore exactly
    the scheduled time, never inferred from the clock.
    """

    def _do_submit_job(self, job, run_times):
        def run_each(job, alias, run_times, logger_name):
            events = []
            for rt in run_times:
                tls.fire = rt
                events.extend(run_job(job, alias, [rt], logger_name))
            return events

        def callback(f):
            exc = f.exception()
            if exc:
                self._run_job_error(job.id, exc, getattr(exc, "__traceback__", None))
            else:
                self._run_job_success(job.id, f.result())

        f = self._pool.submit(run_each, job, job._jobstore_alias, run_times, self._logger.name)
        f.add_done_callback(callback)


def fire(name, seconds):
    rt = tls.fire
    now = time.time()
    env = dict(ENV, CRONRD_JOB=name,
               CRONRD_FIRE_TIME=rt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    p = subprocess.Popen([*cfg["argv"], cfg["outfile"], name], env=env,
                         stdin=subprocess.DEVNULL, close_fds=True, start_new_session=True)
    p.wait()
    # Cross-check (off the timed path): the most recent matching second <= the
    # call time must be the scheduled time while lateness is below the spacing
    # of the job's seconds.
    now = int(now)
    guess = max(t for t in range(now - 60, now + 1) if t % 60 in seconds)
    if guess != int(rt.timestamp()):
        mismatch[0] += 1


sched = BackgroundScheduler(
    executors={"default": FireTimeExecutor(cfg["workers"])},
    job_defaults={"coalesce": False, "max_instances": 1000,
                  "misfire_grace_time": 3600},
    timezone=timezone.utc)
for name, secs in cfg["jobs"]:
    if secs:
        trig = CronTrigger(second=",".join(map(str, secs)), timezone=timezone.utc)
    else:
        trig = CronTrigger(month=1, day=1, hour=0, minute=0, second=0, timezone=timezone.utc)
    sched.add_job(fire, trig, args=(name, set(secs)), id=name, name=name)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
sched.start()
print("ready", flush=True)
stop.wait(max(0.0, cfg["stop_at"] - time.time()))
sched.shutdown(wait=True)
print(json.dumps({"mismatch": mismatch[0]}), flush=True)
'''


def run_apscheduler(args, plan: Plan, argv: list[str], base: Path) -> Result:
    root = base / "aps"
    root.mkdir()
    outfile = root / "stamps.txt"
    driver = root / "aps_driver.py"
    driver.write_text(APS_DRIVER)
    cfg_path = root / "aps.json"
    n = len(plan.names)
    # stop_at is only a safety net: the driver is stopped with SIGTERM (it then
    # shuts the scheduler down cleanly) as soon as the window's fires are in.
    stop_at = time.time() + args.load_timeout + args.warmup + args.duration + 40
    cfg_path.write_text(json.dumps({"argv": argv, "outfile": str(outfile),
                                    "workers": args.workers, "stop_at": stop_at,
                                    "jobs": [[nm, list(s)] for nm, s in
                                             zip(plan.names, plan.seconds)]}))
    started = time.time()
    err = open(root / "driver.log", "wb")
    proc = subprocess.Popen([sys.executable, str(driver), str(cfg_path)],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    err.close()
    sampler = Sampler(proc.pid)
    sampler.start()
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.wait(10)
            raise SystemExit("APScheduler driver failed:\n"
                             + (root / "driver.log").read_text()[-4000:])
        ready_s = time.time() - started
        print(f"  APScheduler: {n} jobs added in {ready_s:.1f} s (pid {proc.pid}, "
              f"{args.workers} worker threads)", flush=True)
        t0, t1 = window_after(args.warmup, args.duration)
        res = Result("APScheduler", n, (t0, t1), plan.expected(t0, t1), ready_s=ready_s)
        time.sleep(max(0.0, t0 - time.time()))
        print(f"  APScheduler: measuring {args.duration} s ...", flush=True)
        time.sleep(max(0.0, t1 - time.time()))
        cpu = sampler.cpu_at(t1) - sampler.cpu_at(t0)
        cpu_all = sampler.all_cpu_at(t1) - sampler.all_cpu_at(t0)
        wait_settled(outfile, res)
    finally:
        tail = ""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                tail, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        sampler.stop()
    res.cpu_s = cpu
    res.cpu_all_s = cpu_all
    res.peak_rss = sampler.peak_rss
    res.rss_start = sampler.rss_at(res.window[0])
    collect(res, outfile)
    try:
        mismatch = json.loads(tail.strip().splitlines()[-1])["mismatch"]
        res.notes.append(f"fire-time cross-check: {mismatch} run(s) whose scheduled time "
                         "differs from the latest matching second before the call")
    except (ValueError, IndexError, KeyError):
        res.notes.append("driver did not report its cross-check (stopped uncleanly?)")
    log = (root / "driver.log").read_text(errors="replace")
    warn = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln]
    if warn:
        res.notes.append(f"driver log: {len(warn)} warning/error line(s), e.g. {warn[0][:200]}")
    return res


# ----------------------------------------------------------------------------- output

def fmt(x: float, digits: int = 1) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def print_table(results: list[Result]) -> None:
    rows = [
        ("jobs defined", lambda r: str(r.jobs)),
        ("time to load jobs s", lambda r: fmt(r.ready_s)),
        ("window s", lambda r: str(r.window[1] - r.window[0])),
        ("fires expected", lambda r: str(r.expected)),
        ("fires recorded", lambda r: str(r.recorded)),
        ("missed (not started by end)", lambda r: str(r.missed)),
        ("duplicate fires", lambda r: str(r.duplicates)),
        ("fires/s", lambda r: fmt(r.fires_per_s)),
        ("lateness p50 ms", lambda r: fmt(r.pct(50), 2)),
        ("lateness p90 ms", lambda r: fmt(r.pct(90), 2)),
        ("lateness p99 ms", lambda r: fmt(r.pct(99), 2)),
        ("lateness max ms", lambda r: fmt(r.max_ms, 2)),
        ("p50 first 10 s of window ms", lambda r: fmt(drift(r, True), 2)),
        ("p50 last 10 s of window ms", lambda r: fmt(drift(r, False), 2)),
        ("CPU s in window", lambda r: fmt(r.cpu_s, 2)),
        ("CPU % of one core", lambda r: fmt(100 * r.cpu_s / max(1, r.window[1] - r.window[0]))),
        ("CPU s incl. supervisors, jobs", lambda r: fmt(r.cpu_all_s, 2)),
        ("RSS at window start MB", lambda r: fmt(r.rss_start / 2**20)),
        ("peak RSS MB", lambda r: fmt(r.peak_rss / 2**20)),
    ]
    w0 = max(len(r[0]) for r in rows)
    widths = [max(12, len(r.name)) for r in results]
    print()
    print(" " * w0 + "  " + "  ".join(r.name.rjust(w) for r, w in zip(results, widths)))
    for label, get in rows:
        print(label.ljust(w0) + "  " + "  ".join(get(r).rjust(w) for r, w in
                                                 zip(results, widths)))
    for r in results:
        for note in r.notes:
            print(f"[{r.name}] {note}")
        if r.bad_lines:
            print(f"[{r.name}] {r.bad_lines} unreadable line(s) in the stamp file")


def measure_floor(argv: list[str], n: int, base: Path, rounds: int = 3) -> tuple[float, float]:
    """The machine's floor for ``n`` runs due at the same instant, without any
    scheduler: ``n`` shells already spawned and waiting on one pipe (as
    cronrd's gate does) are released at a whole second and exec the same
    stamp command. Returns the median over ``rounds`` of (p50, p99) ms."""
    outfile = base / "floor.stamps"
    script = 'read _ || exit 75; exec </dev/null; exec "$@"'
    p50s, p99s = [], []
    for _ in range(rounds):
        outfile.unlink(missing_ok=True)
        r, w = os.pipe()
        fire = int(time.time()) + 2
        env = dict(os.environ, CRONRD_FIRE_TIME=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime(fire)),
                   CRONRD_JOB="floor")
        cmd = [*argv, str(outfile), "floor"]
        procs = [subprocess.Popen(["/bin/sh", "-c", script, "floor", *cmd], stdin=r, env=env,
                                  start_new_session=True, stdout=subprocess.DEVNULL)
                 for _ in range(n)]
        while time.time() < fire:
            time.sleep(0.0005)
        os.write(w, b"\n" * (2 * n))
        os.close(w)
        os.close(r)
        for p in procs:
            p.wait()
        lat = sorted(float(line.split()[-1]) - fire for line in outfile.read_text().splitlines()
                     if line.strip())
        if lat:
            p50s.append(lat[len(lat) // 2] * 1000)
            p99s.append(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000)
    return sorted(p50s)[len(p50s) // 2], sorted(p99s)[len(p99s) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, help="jobs defined (default 10000; --quick 2000)")
    ap.add_argument("--rate", type=float, help="fires per second (default 300; --quick 100)")
    ap.add_argument("--duration", type=int, help="measurement window s (default 60; --quick 20)")
    ap.add_argument("--quick", action="store_true", help="2000 jobs, 100 fires/s, 20 s")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds between 'all jobs loaded' and the window (default 5)")
    ap.add_argument("--files", type=int, default=20,
                    help="job files the jobs are spread over (jobs: lists; default 20)")
    ap.add_argument("--workers", type=int, default=20,
                    help="APScheduler thread pool size (default 20)")
    ap.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                    help="cronrd log_level (default info, as shipped)")
    ap.add_argument("--load-timeout", type=float, default=300.0,
                    help="max seconds for either scheduler to load the jobs (default 300)")
    ap.add_argument("--skip-apscheduler", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy record the cronrd daemon during the window (needs py-spy "
                         "and ptrace permission; adds some overhead)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--dir", default=None,
                    help="where the temporary directory goes (default: $TMPDIR or /tmp). "
                         "Compare runs in the same place: creating a file costs 30x more in "
                         "a directory whose block group is full of inodes")
    args = ap.parse_args()
    quick = args.quick
    args.jobs = args.jobs or (2000 if quick else 10000)
    args.rate = args.rate or (100.0 if quick else 300.0)
    args.duration = args.duration or (20 if quick else 60)

    aps_version = None if args.skip_apscheduler else ensure_apscheduler()
    base = Path(tempfile.mkdtemp(prefix="crb-", dir=args.dir))
    try:
        argv, stamp_desc = build_stamp(base)
        plan = plan_jobs(args.jobs, args.rate)
        idle = sum(1 for s in plan.seconds if not s)
        print(f"fire_precision: {args.jobs} jobs ({idle} idle), {plan.rate:g} fires/s "
              f"(per second of the minute: {min(plan.per_second)}..{max(plan.per_second)}), "
              f"window {args.duration} s after {args.warmup:g} s warm-up; {stamp_desc}; "
              f"{psutil.cpu_count()} CPUs; python {sys.version.split()[0]}; tmp {base}",
              flush=True)
        results = [run_cronrd(args, plan, argv, base)]
        if aps_version:
            print(f"APScheduler {aps_version}:", flush=True)
            results.append(run_apscheduler(args, plan, argv, base))
        print_table(results)
        c = results[0]
        aps = results[1] if len(results) > 1 else None
        ratio = aps.pct(99) / c.pct(99) if aps and c.pct(99) > 0 else float("nan")
        print()
        if aps:
            print(f"p99 ratio APScheduler/cronrd: {fmt(ratio, 2)}x "
                  f"(target >= {TARGET_RATIO:g}x)")
        checks = [f"cronrd p99 {fmt(c.pct(99), 2)} ms (target <= {TARGET_P99_MS:g})"
                  f" {'OK' if c.pct(99) <= TARGET_P99_MS else 'MISSED'}",
                  f"RSS {fmt(c.peak_rss / 2**20)} MB (target <= {TARGET_RSS_MB:g})"
                  f" {'OK' if c.peak_rss / 2**20 <= TARGET_RSS_MB else 'MISSED'}"]
        if aps:
            checks.append(f"ratio {fmt(ratio, 2)}x {'OK' if ratio >= TARGET_RATIO else 'MISSED'}")
        if args.jobs != 10000 or args.rate != 300:
            checks.append("(targets are defined for 10000 jobs at 300 fires/s)")
        print("targets: " + "; ".join(checks))
        floor50, floor99 = measure_floor(argv, int(args.rate), base)
        print(f"floor on this machine (no scheduler: {int(args.rate)} shells released at once "
              f"exec the same stamp): p50 {fmt(floor50, 2)} ms, p99 {fmt(floor99, 2)} ms; "
              f"cronrd p99 is {fmt(c.pct(99) - floor99, 2)} ms above it")
        fields = {
            "jobs": args.jobs, "rate": f"{args.rate:g}", "duration": args.duration,
            "cronrd_fires": c.recorded, "cronrd_missed": c.missed,
            "cronrd_dup": c.duplicates, "cronrd_fires_per_s": fmt(c.fires_per_s, 1),
            "cronrd_p50_ms": fmt(c.pct(50), 2), "cronrd_p99_ms": fmt(c.pct(99), 2),
            "cronrd_max_ms": fmt(c.max_ms, 2), "cronrd_rss_mb": fmt(c.peak_rss / 2**20, 1),
            "cronrd_cpu_s": fmt(c.cpu_s, 2),
            "cronrd_cpu_all_s": fmt(c.cpu_all_s, 2),
            "aps_p50_ms": fmt(aps.pct(50), 2) if aps else "n/a",
            "aps_p99_ms": fmt(aps.pct(99), 2) if aps else "n/a",
            "aps_max_ms": fmt(aps.max_ms, 2) if aps else "n/a",
            "aps_missed": aps.missed if aps else "n/a",
            "aps_rss_mb": fmt(aps.peak_rss / 2**20, 1) if aps else "n/a",
            "aps_cpu_s": fmt(aps.cpu_s, 2) if aps else "n/a",
            "ratio_p99": fmt(ratio, 2),
            "floor_p99_ms": fmt(floor99, 2),
        }
        print("RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()))
        return 0
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Scale benchmark (issue 12): how does cronrd hold up with a fleet's job files?

For each size N it writes N jobs in ``--files`` files (a list under ``jobs:``,
each job at its own minute and hour of the day, command ``true``) plus one
every-second job, starts cronrd on them and measures:

* seconds from the daemon's start until ``status`` shows every job;
* the daemon's peak RSS (VmHWM from /proc, MB);
* seconds for ``cronrd jobs --json`` (the median of three);
* the every-second job's lateness (p50/p99 of started_at - fire time) over
  ``--steady`` seconds, from ``--settle`` seconds after loading.

``--runs N`` (default 10,000; 0: skip) then starts N runs at once across
three nodes: N jobs ``sleep`` whose fire times are spread over
``--runs-spread`` seconds, each sleeping until ``--runs-hold`` seconds after
the last one started, so all N are in flight together. It prints the most
runs in flight (the leader's ``status``), the runs' start lateness, each
daemon's CPU (% of one core) while they start and while all of them run,
peak RSS, and how many exits were collected (every run must end
``succeeded``). Each run holds three processes (its supervisor, the shell,
the command): as root the benchmark raises kernel.pid_max for the run if it
is too small, and puts it back after.

``--catchup`` (with ``--cluster``) then measures catch-up at the largest
size: a node is removed from the loaded three-node cluster and added back
with an empty data directory; it prints the seconds until the new node
shows every job and has applied what the leader had, and both nodes' peak
RSS (the snapshot is sent from a file and received into one, never whole
in memory).

``--cluster`` does the same on three nodes on loopback (127.0.0.25x, the
same files on each; cluster_ready_s is until every node shows every job),
then the every-second job's lateness in the cluster (read from the
leader) and ``jobs --json`` from every node (a follower answers from its
own replica; the slowest node's median is the column).
The last line is ``RESULT jobs=... ready_s=... rss_mb=... cluster_ready_s=...
cluster_rss_mb=... cluster_jobs_json_s=... cluster_tick_p99_ms=...
runs_in_flight=... runs_cpu_pct=...`` for the largest size (``-`` when not measured or not
reached within ``--timeout``).

    python bench/scale.py --sizes 10000            # quick
    python bench/scale.py                          # 10k, 50k, 100k, one node
    python bench/scale.py --cluster --sizes 10000,50000
    python bench/scale.py --cluster --sizes 100000 --repeat 3 --runs 0   # medians
    python bench/scale.py --sizes 0 --runs 10000       # only the runs in flight

Targets (issue 12): 100,000 jobs ready in <= 10 s on one node and <= 20 s on
three, peak RSS <= 150 MB (one node) and <= 200 MB per cluster node,
``jobs --json`` <= 3 s, the every-second job's p99 lateness unchanged,
10,000 runs in flight across three nodes without falling behind.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from cluster_harness import Cluster  # noqa: E402
from harness import Node  # noqa: E402


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def write_fleet(jobs_dir: Path, n: int, files: int) -> None:
    """N jobs over ``files`` files, each at its own minute and hour, plus tick."""
    per = (n + files - 1) // files
    for f in range(files):
        jobs = [{"name": f"f{f:02d}j{i:06d}",
                 "schedule": f"{(f * per + i) % 60} {((f * per + i) // 60) % 24} * * *",
                 "command": "true"}
                for i in range(min(per, n - f * per))]
        if jobs:
            (jobs_dir / f"fleet{f:02d}.yaml").write_text(
                yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    (jobs_dir / "tick.yaml").write_text(yaml.safe_dump(
        {"schedule": "* * * * * *", "command": "true"}))


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def jobs_known(node: Node) -> int:
    try:
        return int(node.call("status", timeout=30)["jobs"])
    except Exception:
        return -1


def wait_jobs(nodes: list[Node], want: int, start: float, timeout: float) -> float | None:
    while time.monotonic() - start < timeout:
        if all(jobs_known(n) >= want for n in nodes):
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def lateness(node: Node, steady: float, settle: float) -> tuple[float, float] | None:
    """The every-second job's lateness over ``steady`` seconds, from ``settle``
    seconds after the fleet is loaded (the load's own aftermath, such as the
    first checkpoint of a WAL that grew by the whole fleet, is not steady state)."""
    time.sleep(settle)
    since = time.time()
    time.sleep(steady)
    runs = [r for r in node.runs(job="tick", limit=10000)
            if r["started_at"] and stamp(r["fire_time"]) >= since]
    late = sorted((stamp(r["started_at"]) - stamp(r["fire_time"])) * 1000 for r in runs)
    if not late:
        return None
    return statistics.median(late), late[min(len(late) - 1, int(0.99 * len(late)))]


def timed_jobs_json(node: Node, times: int = 3) -> float:
    """The median of ``times`` runs of ``cronrd jobs --json`` (a shared,
    noisy machine: one run can be a second off)."""
    took = []
    for _ in range(times):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "cronrd", "--config", str(node.config_path),
                        "jobs", "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, check=False)
        took.append(time.monotonic() - t0)
    return statistics.median(took)


def median_of(results: list[dict]) -> dict:
    """Repeated measurements of one size: the median of each time, the
    largest RSS, and every ready time (to show the spread)."""
    def med(key):
        xs = [r[key] for r in results if r.get(key) is not None]
        return statistics.median(xs) if xs else None
    out = dict(results[0])
    for key in ("ready_s", "jobs_json_s"):
        if key in out:
            out[key] = med(key)
    rss = [r["rss_mb"] for r in results if r.get("rss_mb") is not None]
    out["rss_mb"] = max(rss) if rss else None
    out["ready_each"] = [r.get("ready_s") for r in results]
    return out


def one_node(n: int, args) -> dict:
    node = Node("n1", log_level="info")
    try:
        write_fleet(node.jobs_dir, n, args.files)
        t0 = time.monotonic()
        node.start(wait=False)
        ready = wait_jobs([node], n + 1, t0, args.timeout)
        out = {"ready_s": ready, "rss_mb": None, "jobs_json_s": None, "late": None}
        if ready is not None:
            out["late"] = lateness(node, args.steady, args.settle)
            out["jobs_json_s"] = timed_jobs_json(node)
        out["rss_mb"] = peak_rss_mb(node.proc.pid)
        return out
    finally:
        node.cleanup()


def three_nodes(n: int, args, catchup: bool = False) -> dict:
    c = Cluster(node_timeout="10s", first_ip=251)
    try:
        for node in c:
            write_fleet(node.jobs_dir, n, args.files)
        t0 = time.monotonic()
        for node in c:
            node.start(wait=False)
        ready = wait_jobs(list(c), n + 1, t0, args.timeout)
        out = {"ready_s": ready, "rss_mb": None, "late": None, "jobs_json_s": None}
        if ready is not None:
            # Runs are replicated: any node's record shows every node's runs.
            out["late"] = lateness(c.leader(), args.steady, args.settle)
            # From every node: a follower answers from its own replica.
            each = {node.config["node_id"]: timed_jobs_json(node) for node in c}
            out["jobs_json_each"] = each
            out["jobs_json_s"] = max(each.values())
        rss = [peak_rss_mb(node.proc.pid) for node in c]
        out["rss_mb"] = max((r for r in rss if r), default=None)
        if catchup and ready is not None:
            out["catchup"] = rejoin(c, n, args)
        return out
    finally:
        c.cleanup()


def rejoin(c: Cluster, n: int, args) -> dict:
    """Remove a follower, add it back empty; how long until it has caught up."""
    lead = c.leader()
    gid = next(node for node in c if node is not lead).config["node_id"]
    if lead.cli("cluster", "remove", gid).returncode != 0:
        return {}
    deadline = time.monotonic() + 60
    while c[gid].proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    node = c.replace_with_joiner(gid)
    while lead.cli("cluster", "add", gid, c.addrs[gid]).returncode != 0:
        if time.monotonic() > deadline:  # the removal's change is not applied yet
            return {}
        time.sleep(0.5)
    index = int(lead.call("status")["applied_index"])
    t0 = time.monotonic()
    node.start(wait=False)
    jobs_s = wait_jobs([node], n + 1, t0, args.timeout)
    while time.monotonic() - t0 < args.timeout:
        try:
            if int(node.call("status", timeout=10)["applied_index"]) >= index:
                break
        except Exception:
            pass
        time.sleep(0.2)
    return {"jobs_s": jobs_s, "applied_s": time.monotonic() - t0,
            "rss_mb": peak_rss_mb(node.proc.pid), "leader_rss_mb": peak_rss_mb(lead.proc.pid)}


PID_MAX = Path("/proc/sys/kernel/pid_max")


def ensure_pids(n: int) -> str | None:
    """Room for 3 processes per run; the old kernel.pid_max if raised, or
    None. Raises SystemExit when it is too small and cannot be raised."""
    need = 3 * n + 4096
    have = int(PID_MAX.read_text())
    if have >= need:
        return None
    if os.geteuid() != 0:
        raise SystemExit(f"kernel.pid_max is {have}: {n} runs in flight need about {need} "
                         f"processes; run as root, or sysctl -w kernel.pid_max={need}")
    PID_MAX.write_text(str(max(need, 4194304)))
    print(f"kernel.pid_max raised from {have} for the runs (put back after)", flush=True)
    return str(have)


def runs_in_flight(n: int, args) -> dict:
    spread, hold = args.runs_spread, args.runs_hold
    old_pid_max = ensure_pids(n)
    c = Cluster(node_timeout="10s", first_ip=241)
    try:
        lead = 30 + n / 1000   # s until the first fire: every node loads the jobs first
        first = int(time.time() + lead)
        for node in c:
            node.config.update(max_running=n, log_level="info")
            node.config_path.write_text(yaml.safe_dump(node.config))
            for f in range(0, n, 1000):
                jobs = []
                for i in range(f, min(n, f + 1000)):
                    t = time.gmtime(first + i % spread)
                    jobs.append({"name": f"s{i:06d}", "command": f"sleep {spread + hold}",
                                 "schedule": f"{t.tm_sec} {t.tm_min} {t.tm_hour} * * *"})
                (node.jobs_dir / f"sleep{f // 1000:03d}.yaml").write_text(
                    yaml.safe_dump({"jobs": jobs}))
        for node in c:
            node.start(wait=False)
        procs = [psutil.Process(node.proc.pid) for node in c]

        def cpu() -> list[float]:
            return [sum(p.cpu_times()[:2]) for p in procs]

        def running() -> int:
            try:
                return int(c.leader(timeout=5).call("status", timeout=10)["running"])
            except Exception:
                return -1
        while time.time() < first - 1:
            time.sleep(0.2)
        cpu0, t0 = cpu(), time.time()
        peak, all_at = 0, None
        while time.time() < first + spread + hold / 2:
            peak = max(peak, running())
            if all_at is None and peak >= n:
                all_at = time.time() - first
            time.sleep(1)
        ramp_end = time.time()
        cpu1 = cpu()
        time.sleep(max(1.0, first + spread + hold - 2 - time.time()))
        cpu2, steady_s = cpu(), time.time() - ramp_end
        deadline = time.time() + 120 + n / 50
        runs: list[dict] = []
        while time.time() < deadline:
            try:
                runs = c.leader(timeout=5).runs(limit=n + 1000)
            except Exception:
                runs = []
            if sum(r["state"] == "succeeded" for r in runs) >= n or \
                    (runs and not any(r["state"] in ("running", "assigned", "pending")
                                      for r in runs)):
                break
            time.sleep(2)
        late = sorted((stamp(r["started_at"]) - stamp(r["fire_time"])) * 1000
                      for r in runs if r.get("started_at"))
        ramp_s = ramp_end - t0
        return {
            "peak": peak, "all_at": all_at,
            "late": (statistics.median(late), late[min(len(late) - 1, int(0.99 * len(late)))])
            if late else None,
            "cpu_ramp": [100 * (b - a) / ramp_s for a, b in zip(cpu0, cpu1)],
            "cpu_steady": [100 * (b - a) / steady_s for a, b in zip(cpu1, cpu2)],
            "rss": [peak_rss_mb(node.proc.pid) for node in c],
            "collected": sum(r["state"] == "succeeded" for r in runs),
            "states": dict(sorted(collections.Counter(r["state"] for r in runs).items())),
        }
    finally:
        c.cleanup()
        if old_pid_max is not None:
            PID_MAX.write_text(old_pid_max)


def fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,50000,100000")
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--steady", type=float, default=20.0,
                    help="seconds of the every-second job measured once loaded")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds after loading before the every-second job is measured")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--cluster", action="store_true", help="also three nodes on loopback")
    ap.add_argument("--catchup", action="store_true",
                    help="with --cluster: a node added back empty at the largest size")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure each size this many times: medians (RSS: the largest)")
    ap.add_argument("--runs", type=int, default=10000,
                    help="runs in flight at once across three nodes (0: skip)")
    ap.add_argument("--runs-spread", type=int, default=100,
                    help="seconds over which their fire times are spread")
    ap.add_argument("--runs-hold", type=int, default=50,
                    help="seconds all of them run together")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s and int(s) > 0]  # 0: none
    print(f"scale: sizes {sizes}, {args.files} files, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'jobs':>8} {'ready s':>8} {'rss MB':>8} {'jobs --json s':>14} {'tick p50 ms':>12} "
          f"{'tick p99 ms':>12} {'3n ready s':>11} {'3n rss MB':>10} {'3n json s':>10} "
          f"{'3n p99 ms':>10}")
    last = {}
    for n in sizes:
        one = median_of([one_node(n, args) for _ in range(max(1, args.repeat))])
        three = (median_of([three_nodes(n, args, catchup=args.catchup and n == sizes[-1]
                                        and i == 0) for i in range(max(1, args.repeat))])
                 if args.cluster else {"ready_s": None, "rss_mb": None})
        late = one["late"] or (None, None)
        late3 = three.get("late") or (None, None)
        print(f"{n:>8} {fmt(one['ready_s']):>8} {fmt(one['rss_mb'], '.0f'):>8} "
              f"{fmt(one['jobs_json_s']):>14} {fmt(late[0]):>12} {fmt(late[1]):>12} "
              f"{fmt(three['ready_s']):>11} {fmt(three['rss_mb'], '.0f'):>10} "
              f"{fmt(three.get('jobs_json_s')):>10} {fmt(late3[1]):>10}", flush=True)
        if three.get("jobs_json_each"):
            print(f"{'':>8} three nodes, jobs --json s from each node (median of 3): "
                  + ", ".join(f"{k} {fmt(v)}" for k, v in sorted(three["jobs_json_each"].items())),
                  flush=True)
        if args.repeat > 1:
            each = lambda r: ", ".join(fmt(x) for x in r.get("ready_each", []))  # noqa: E731
            print(f"{'':>8} ready s of each run: one node {each(one)}"
                  + (f"; three nodes {each(three)}" if args.cluster else ""), flush=True)
        last = {"jobs": n, "ready_s": one["ready_s"], "rss_mb": one["rss_mb"],
                "cluster_ready_s": three["ready_s"], "cluster_rss_mb": three["rss_mb"],
                "cluster_jobs_json_s": three.get("jobs_json_s"),
                "cluster_tick_p99_ms": late3[1]}
        cu = three.get("catchup")
        if cu:
            print(f"  catch-up of a node added back empty at {n} jobs: every job after "
                  f"{fmt(cu['jobs_s'])} s, the leader's index applied after "
                  f"{fmt(cu['applied_s'])} s; peak RSS MB new node {fmt(cu['rss_mb'], '.0f')}, "
                  f"leader {fmt(cu['leader_rss_mb'], '.0f')}", flush=True)
            last.update(catchup_s=cu["applied_s"], catchup_rss_mb=cu["rss_mb"])
    if args.runs:
        r = runs_in_flight(args.runs, args)
        pct = lambda xs: "/".join(f"{x:.0f}" for x in xs)  # noqa: E731
        late = r["late"] or (None, None)
        print(f"runs in flight, 3 nodes: {args.runs} jobs fired over {args.runs_spread} s, "
              f"each running {args.runs_spread + args.runs_hold} s")
        print(f"  most in flight {r['peak']} (all {args.runs} after "
              f"{fmt(r['all_at'])} s); start lateness p50 {fmt(late[0])} ms, p99 "
              f"{fmt(late[1])} ms")
        print(f"  daemon CPU % of a core: {pct(r['cpu_ramp'])} while starting "
              f"({args.runs / args.runs_spread:.0f} runs/s), {pct(r['cpu_steady'])} while all "
              f"run; peak RSS MB {pct(r['rss'])}")
        print(f"  exits collected: {r['collected']} of {args.runs} succeeded; states "
              f"{r['states']}", flush=True)
        last.update(runs_in_flight=r["peak"], runs_collected=r["collected"],
                    runs_cpu_pct=max(r["cpu_steady"]), runs_rss_mb=max(r["rss"]))
    print("RESULT " + " ".join(
        f"{k}={v if isinstance(v, int) or k == 'jobs' else fmt(v, '.1f')}"
        for k, v in last.items()))


if __name__ == "__main__":
    main()

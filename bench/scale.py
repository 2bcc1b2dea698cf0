#!/usr/bin/env python3
"""Scale benchmark (issue 12): how does cronrd hold up with a fleet's job files?

For each size N it writes N jobs in ``--files`` files (a list under ``jobs:``,
each job at its own minute and hour of the day, command ``true``) plus one
every-second job, starts cronrd on them and measures:

* seconds from the daemon's start until ``status`` shows every job;
* the daemon's peak RSS (VmHWM from /proc, MB);
* seconds for ``cronrd jobs --json``;
* the every-second job's lateness (p50/p99 of started_at - fire time) over
  ``--steady`` seconds, from ``--settle`` seconds after loading.

``--cluster`` does the same on three nodes on loopback (127.0.0.25x, the
same files on each; cluster_ready_s is until every node shows every job).
The last line is ``RESULT jobs=... ready_s=... rss_mb=... cluster_ready_s=...
cluster_rss_mb=...`` for the largest size (``-`` when not measured or not
reached within ``--timeout``).

    python bench/scale.py --sizes 10000            # quick
    python bench/scale.py                          # 10k, 50k, 100k, one node
    python bench/scale.py --cluster --sizes 10000,50000

Targets (issue 12): 100,000 jobs ready in <= 10 s on one node and <= 20 s on
three, peak RSS <= 150 MB (one node) and <= 200 MB per cluster node,
``jobs --json`` <= 3 s, the every-second job's p99 lateness unchanged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

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


def timed_jobs_json(node: Node) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "cronrd", "--config", str(node.config_path), "jobs",
                    "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, check=False)
    return time.monotonic() - t0


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


def three_nodes(n: int, args) -> dict:
    c = Cluster(node_timeout="10s", first_ip=251)
    try:
        for node in c:
            write_fleet(node.jobs_dir, n, args.files)
        t0 = time.monotonic()
        for node in c:
            node.start(wait=False)
        ready = wait_jobs(list(c), n + 1, t0, args.timeout)
        rss = [peak_rss_mb(node.proc.pid) for node in c]
        return {"ready_s": ready, "rss_mb": max((r for r in rss if r), default=None)}
    finally:
        c.cleanup()


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
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"scale: sizes {sizes}, {args.files} files, {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'jobs':>8} {'ready s':>8} {'rss MB':>8} {'jobs --json s':>14} {'tick p50 ms':>12} "
          f"{'tick p99 ms':>12} {'3n ready s':>11} {'3n rss MB':>10}")
    last = {}
    for n in sizes:
        one = one_node(n, args)
        three = three_nodes(n, args) if args.cluster else {"ready_s": None, "rss_mb": None}
        late = one["late"] or (None, None)
        print(f"{n:>8} {fmt(one['ready_s']):>8} {fmt(one['rss_mb'], '.0f'):>8} "
              f"{fmt(one['jobs_json_s']):>14} {fmt(late[0]):>12} {fmt(late[1]):>12} "
              f"{fmt(three['ready_s']):>11} {fmt(three['rss_mb'], '.0f'):>10}", flush=True)
        last = {"jobs": n, "ready_s": one["ready_s"], "rss_mb": one["rss_mb"],
                "cluster_ready_s": three["ready_s"], "cluster_rss_mb": three["rss_mb"]}
    print("RESULT " + " ".join(f"{k}={fmt(v, '.1f') if k != 'jobs' else v}"
                               for k, v in last.items()))


if __name__ == "__main__":
    main()

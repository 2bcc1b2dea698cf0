#!/usr/bin/env python3
"""How many log entries do claims cost? (issue 11: "batch claims so 300
fires/s cost one commit per turn, not one per run").

Three real daemons on loopback (tests/support/cluster_harness.py, 127.0.0.22x)
run N jobs that fire every second (``true``) for D seconds. Afterwards the
leader's Raft log is read: per second of fire times, how many runs started,
how many ClaimRuns entries were committed and how many runs they carried,
beside the Fire entries (one per run) for scale. Also the lateness of the
starts (started_at - fire time), p50/p99, from the run records.

    python bench/claim_batching.py                 # 300 jobs, 20 s
    python bench/claim_batching.py --jobs 100 --duration 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import apsw

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from cluster_harness import Cluster  # noqa: E402
from cronrd.schedule import parse_iso  # noqa: E402


def stamp(iso: str) -> float:
    """An ISO 8601 UTC time with its milliseconds (parse_iso keeps seconds)."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
from harness import wait_for  # noqa: E402


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--first-ip", type=int, default=221)
    args = ap.parse_args()
    c = Cluster(node_timeout="10s", first_ip=args.first_ip)
    try:
        for i in range(args.jobs):
            c.write_job(f"j{i:03d}", {"schedule": "* * * * * *", "command": "true",
                                      "catchup": "all", "concurrency": "allow"})
        c.start()
        lead = c.leader()
        last_job = f"j{args.jobs - 1:03d}"
        wait_for(lambda: len(lead.runs(job=last_job, state="succeeded", limit=10)) >= 3,
                 timeout=120, interval=0.5, what="the jobs running")
        first = int(time.time()) + 1
        time.sleep(args.duration)
        last = int(time.time()) - 2
        runs = [r for r in lead.runs(limit=100000)
                if first <= parse_iso(r["fire_time"]) <= last and r["started_at"]]
        late = [(stamp(r["started_at"]) - stamp(r["fire_time"])) * 1000 for r in runs]
        db = apsw.Connection(os.path.join(lead.config["data_dir"], "raft.db"),
                             flags=apsw.SQLITE_OPEN_READONLY)
        ops, carried = Counter(), 0
        for (data,) in db.execute("SELECT data FROM raft_entry"):
            try:
                body = json.loads(bytes(data))
            except ValueError:
                continue
            op = body.get("op") if isinstance(body, dict) else None
            if op == "claim_runs":
                at = body.get("at", 0)
                if first <= at <= last + 1:
                    ops[op] += 1
                    carried += len(body["claims"])
            elif op == "fire" and first <= body.get("fire_time", 0) <= last:
                ops[op] += 1
        secs = last - first + 1
        print(f"claim_batching: {args.jobs} jobs every second, 3 nodes on loopback, "
              f"{secs} s of fire times; {os.cpu_count()} CPUs; load "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"runs started                     {len(runs):8d}  ({len(runs) / secs:.0f}/s)")
        print(f"Fire entries (one per run)       {ops['fire']:8d}  ({ops['fire'] / secs:.1f}/s)")
        print(f"ClaimRuns entries                {ops['claim_runs']:8d}  "
              f"({ops['claim_runs'] / secs:.1f}/s; {carried / max(1, ops['claim_runs']):.0f} "
              "runs per entry)")
        print(f"lateness of the starts ms        p50 {statistics.median(late):.1f}  "
              f"p99 {pct(late, 99):.1f}  max {max(late):.1f}")
        print(json.dumps({"jobs": args.jobs, "seconds": secs, "runs": len(runs),
                          "fire_entries": ops["fire"], "claim_entries": ops["claim_runs"],
                          "runs_per_claim": carried / max(1, ops["claim_runs"]),
                          "late_p50_ms": statistics.median(late),
                          "late_p99_ms": pct(late, 99), "late_max_ms": max(late)}))
    finally:
        c.cleanup()


if __name__ == "__main__":
    main()

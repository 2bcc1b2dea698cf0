#!/usr/bin/env python3
"""A long campaign of the Raft simulation (tests/support/raft_sim.py) on every core.

    python bench/sim_campaign.py --seeds 100000                 # fresh random start
    python bench/sim_campaign.py --seeds 100000 --workers 2 --start 83889000
    python bench/sim_campaign.py --seeds 500 --start 0          # the first fixed seeds

Prints progress (seeds done, seeds per second, failures so far) every
``--every`` seconds, then each failing seed with the line that replays it, the
totals of the faults exercised, and a last line of JSON with every figure.
Exits 1 if any seed failed. Without ``--start`` the start is drawn at random
above 10**13, a range no fixed or per-commit CI campaign uses, and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))

import raft_sim  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100_000, help="how many seeds")
    ap.add_argument("--start", type=int, default=None, help="first seed (default: random)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="processes (default: every core)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--events", type=int, default=30, help="trace lines shown per failure")
    args = ap.parse_args()
    start = args.start if args.start is not None else random.SystemRandom().randrange(
        10**13, 2 * 10**13)
    seeds = range(start, start + args.seeds)
    print(f"campaign: {args.seeds} seeds from {start} on {args.workers} workers", flush=True)
    t0 = last = time.monotonic()
    results: list[dict] = []
    for r in raft_sim.run_many(seeds, workers=args.workers):
        results.append(r)
        if "failed" in r:
            print(f"FAILED seed {r['seed']}: {r['failed'][:300]}\n"
                  f"  replay: {raft_sim.replay_line(r['seed'])}", flush=True)
        now = time.monotonic()
        if now - last >= args.every:
            last = now
            nfail = sum(1 for x in results if "failed" in x)
            print(f"  {len(results)}/{args.seeds} seeds, {len(results) / (now - t0):.1f} "
                  f"seeds/s, {nfail} failed", flush=True)
    elapsed = time.monotonic() - t0
    failed = sorted((r for r in results if "failed" in r), key=lambda r: r["seed"])
    for r in failed:
        print(raft_sim.report(r, events=args.events))
    print(raft_sim.summary(results, start, elapsed))
    print(json.dumps({"start": start, "seeds": len(results), "workers": args.workers,
                      "elapsed_s": round(elapsed, 1),
                      "seeds_per_s": round(len(results) / max(elapsed, 1e-9), 1),
                      "failed": [r["seed"] for r in failed]}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""One host: the direct log (LocalLog) against a one-voter Raft log.

    python bench/onehost_log.py                 # 5 rounds, 2000 proposals each
    python bench/onehost_log.py --rounds 9 --n 5000

Both logs run in-process on the same state database schema, in a temporary
directory on the disk given by --dir (default /var/tmp: not a tmpfs, so the
fsyncs are real), with the settings the daemon uses: the direct log commits
the state with synchronous=FULL; the Raft node fsyncs its own log and the
state runs with synchronous=NORMAL.

Two measures per round, the medians over the rounds are printed side by side:

* latency: one proposal at a time (a Fire, which inserts a run: the common
  command), awaited before the next; p50 and p99 of propose -> result.
* throughput: proposals in bursts of --burst at once (many fires due in the
  same second, many results coming back), commits per second.

Plus the idle cost: loop wake-ups per second of a log with nothing to do.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from log_impls import KINDS, open_log  # noqa: E402

from cronrd.state import commands as C  # noqa: E402

from tests.unit.runtime.log.test_replicated import put as put_job  # noqa: E402  (the tests' job)
from tests.unit.state.test_state import T0  # noqa: E402


def fire(i: int) -> C.Fire:
    t = T0 + i
    return C.Fire(job="j", fire_time=t, kind="scheduled", node="a", due_at=t, at=t)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


async def one_round(kind: str, directory: str, n: int, burst: int) -> dict:
    async with open_log(kind, directory, tick=0.05) as (log, machine):
        await log.propose(put_job())
        lat = []
        for i in range(1, n + 1):
            t = time.perf_counter()
            await log.propose(fire(i))
            lat.append(time.perf_counter() - t)
        start = time.perf_counter()
        base = n + 1
        for b in range(0, n, burst):
            await asyncio.gather(*(log.propose(fire(base + b + k)) for k in range(burst)))
        rate = n / (time.perf_counter() - start)
        # Idle: count the loop's wake-ups for half a second.
        loop = asyncio.get_running_loop()
        wakes = 0
        orig = loop._run_once

        def counting():
            nonlocal wakes
            wakes += 1
            orig()
        loop._run_once = counting
        await asyncio.sleep(0.5)
        loop._run_once = orig
        return {"p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
                "commits_s": rate, "idle_wakeups_s": (wakes - 2) / 0.5,
                "disk_kb": sum(os.path.getsize(os.path.join(directory, f))
                               for f in os.listdir(directory)) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=2000, help="proposals per measure and round")
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {k: [] for k in KINDS}
    for r in range(args.rounds):
        for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):  # alternate: fair to both
            d = tempfile.mkdtemp(prefix=f"onehost-{kind}-", dir=args.dir)
            try:
                results[kind].append(asyncio.run(one_round(kind, d, args.n, args.burst)))
            finally:
                shutil.rmtree(d, ignore_errors=True)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    names = {"local": "direct log", "raft1": "one-voter Raft"}
    print(f"medians of {args.rounds} rounds, {args.n} proposals per measure, "
          f"bursts of {args.burst}, in {args.dir}")
    print(f"{'':24}" + "".join(f"{names[k]:>18}" for k in KINDS))
    for key, label in (("p50_ms", "latency p50 (ms)"), ("p99_ms", "latency p99 (ms)"),
                       ("commits_s", "burst commits/s"),
                       ("idle_wakeups_s", "idle loop wake-ups/s"),
                       ("disk_kb", "data_dir size (KiB)")):
        print(f"{label:24}" + "".join(
            f"{statistics.median(x[key] for x in results[k]):>18.2f}" for k in KINDS))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Snapshot stall benchmark: does a Raft snapshot under load delay fires?

A fire's gate is opened by a timer on the daemon's event loop, so whatever
holds the loop delays the fires due meanwhile. This runs a one-voter
RaftNode over the daemon's real state machine (ReplicatedState on a WAL
SQLite file, RaftStorage with fsync), grows the state to --state-mb
(history rows, as months of runs leave), then for --duration seconds:

* proposes --rate commands per second (fires of one job), so the log grows
  and a snapshot comes every --snapshot-every entries;
* runs a "gate" timer that asks to wake every 10 ms and records how late
  it woke: the lateness a fire due then would have had.

Two ways, interleaved round by round in the same run (the machine's noise
hits both alike):

  on-loop    the snapshot taken on the event loop (cronrd before issue 11:
             serialize the database, store it as a blob in the Raft log)
  off-loop   the snapshot copied and fsynced by a worker thread, only a
             small row written on the loop (RaftNode._snapshot_off_loop)

    python bench/snapshot_stall.py                  # 30 MB state, 3 rounds
    python bench/snapshot_stall.py --state-mb 100 --rounds 5

Prints, per way, the medians over rounds of the timer's p50/p99/max lateness
and the longest loop stall, snapshots taken, and a RESULT line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cronrd.raft.types import ConfState  # noqa: E402
from cronrd.runtime.log.replicated import ReplicatedState  # noqa: E402
from cronrd.runtime.log.raft_node import RaftNode  # noqa: E402
from cronrd.runtime.log.raft_storage import RaftStorage  # noqa: E402
from cronrd.runtime.storage import open_db  # noqa: E402
from cronrd.state import commands as C  # noqa: E402
from cronrd.state.machine import StateMachine  # noqa: E402

TIMER = 0.010   # the gate timer's period, seconds
T0 = 1_800_000_000


class NoPeers:
    """A one-voter node sends nothing."""

    def send(self, msg) -> None:
        pass


def job_spec() -> dict:
    return {"name": "j", "schedule": "* * * * * *", "command": "true", "timezone": "UTC",
            "concurrency": "allow", "catchup": "none"}


def grow(path: str, mb: float) -> None:
    """A state of about ``mb`` MB: filler history rows (a real state grows by
    its runs table; what the copy costs is the bytes)."""
    conn = open_db(path)
    StateMachine(conn)  # the schema
    conn.execute("CREATE TABLE IF NOT EXISTS bench_filler(id INTEGER PRIMARY KEY, v BLOB)")
    row = os.urandom(400)
    rows = int(mb * 1e6 / 450)
    with conn:
        conn.executemany("INSERT INTO bench_filler(v) VALUES(?)", ((row,) for _ in range(rows)))
    conn.close()


async def one_round(base: Path, seed_db: str, way: str, args) -> dict:
    work = base / way
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    state_db = str(work / "state.db")
    shutil.copy(seed_db, state_db)
    rs = ReplicatedState(StateMachine(open_db(state_db)), str(work))
    if way == "on-loop":
        rs.snapshot_job = lambda: None   # RaftNode then snapshots on the loop, as before
    storage = RaftStorage(str(work / "raft.db"))
    node = RaftNode("a", ConfState(("a",)), storage, NoPeers(), rs, tick_interval=0.05,
                    proposal_timeout=10.0, rng=random.Random(7),
                    snapshot_every=args.snapshot_every)
    await node.start()
    loop = asyncio.get_running_loop()
    while not node.is_leader:
        await asyncio.sleep(0.01)
    await node.propose(C.PutJob(name="j", spec=job_spec(), digest="d" * 64,
                                source="/etc/cronrd.d/j.yaml", at=T0, node="a").encode())
    late: list[float] = []
    stop = loop.time() + args.duration
    snaps_before = storage.snapshot_index()

    async def gate_timer():
        due = loop.time() + TIMER
        while due < stop:
            await asyncio.sleep(max(0.0, due - loop.time()))
            late.append((loop.time() - due) * 1000.0)
            due += TIMER

    async def load():
        fire_t = T0 + 1
        interval = 1.0 / args.rate
        nxt = loop.time()
        pending = set()
        while loop.time() < stop:
            cmd = C.Fire(job="j", fire_time=fire_t, kind="scheduled", node="a",
                         due_at=fire_t, at=fire_t - 0.5)
            fire_t += 1
            pending.add(loop.create_task(node.propose(cmd.encode())))
            pending = {p for p in pending if not p.done()}
            nxt += interval
            await asyncio.sleep(max(0.0, nxt - loop.time()))
        await asyncio.gather(*pending, return_exceptions=True)

    snapshots = []
    watching = True

    async def watch_snapshots():
        last = storage.snapshot_index()
        while watching:
            await asyncio.sleep(0.05)
            if storage.snapshot_index() != last:
                last = storage.snapshot_index()
                snapshots.append(last)

    watcher = loop.create_task(watch_snapshots())
    await asyncio.gather(gate_timer(), load())
    watching = False
    await watcher
    await node.stop()
    storage.close()
    rs.conn.close()
    size = os.path.getsize(state_db) / 1e6
    shutil.rmtree(work, ignore_errors=True)
    late.sort()
    return {"p50": late[len(late) // 2], "p99": late[int(len(late) * 0.99) - 1],
            "max": late[-1], "snapshots": len(snapshots), "state_mb": size,
            "first_snapshot_index": snapshots[0] if snapshots else snaps_before}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state-mb", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per way per round")
    ap.add_argument("--rate", type=float, default=300.0, help="proposals per second")
    ap.add_argument("--snapshot-every", type=int, default=1000)
    ap.add_argument("--dir", default=None, help="where the temporary directory goes")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="snapstall-", dir=args.dir))
    try:
        seed = str(base / "seed.db")
        grow(seed, args.state_mb)
        ways = ["on-loop", "off-loop"]
        res: dict[str, list[dict]] = {w: [] for w in ways}
        for r in range(args.rounds):
            for way in (ways if r % 2 == 0 else ways[::-1]):
                res[way].append(asyncio.run(one_round(base, seed, way, args)))
        mb = statistics.median(x["state_mb"] for w in ways for x in res[w])
        print(f"snapshot_stall: state {mb:.0f} MB, {args.rate:g} proposals/s, a snapshot every "
              f"{args.snapshot_every} entries, {args.rounds} rounds x {args.duration:g} s per "
              f"way, {os.cpu_count()} CPUs")
        print(f"{'way':9} {'snapshots':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")
        out = []
        for way in ways:
            med = {k: statistics.median(x[k] for x in res[way]) for k in ("p50", "p99", "max")}
            snaps = sum(x["snapshots"] for x in res[way])
            print(f"{way:9} {snaps:>9} {med['p50']:>7.1f} {med['p99']:>7.1f} {med['max']:>7.1f}")
            out += [f"{way}_p99_ms={med['p99']:.1f}", f"{way}_max_ms={med['max']:.1f}",
                    f"{way}_snapshots={snaps}"]
        print("(lateness of a 10 ms timer on the event loop: what a fire due then waits; "
              "medians over rounds)")
        print("RESULT " + " ".join(out))
        print(json.dumps({w: res[w] for w in ways}))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

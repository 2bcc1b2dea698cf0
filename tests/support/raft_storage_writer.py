"""Crash-test writer for cronrd.runtime.log.raft_storage (run by test_raft_storage).

    python tests/support/raft_storage_writer.py DBPATH [SEED] [PAUSE_AT_BIG]

Opens (or reopens) the log, loads it, then loops forever doing seeded random
operations and reports each on stdout, flushed, one line each:

    R <snapshot_index> <last_index> <hard_state_term>   after load, before anything else
    B <first> <count> <term> <vote> <commit>             about to save (count 0: hard state only)
    S <last_index>                                       save() returned: durable
    P <index> <term>                                     about to save_snapshot
    Q <index>                                            save_snapshot() returned
    MID                                                  paused inside a big save's transaction

Entry data is derived from (index, term) by ``entry_data`` so the test can
check it. With PAUSE_AT_BIG=n the writer, during its n-th big batch, prints
MID once part of the batch is inserted (inside the transaction) and then
sleeps until it is killed: a deterministic mid-transaction crash point.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from cronrd.raft.types import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMeta  # noqa: E402
from cronrd.runtime.log.raft_storage import RaftStorage  # noqa: E402

BIG = 10000          # entries in a big batch (~1 MB: spills pages into the WAL)
PAUSE_AFTER_ROWS = 4000


def entry_data(index: int, term: int) -> bytes:
    return hashlib.sha256(f"{index}/{term}".encode()).digest() * (1 + index % 6)


def snapshot_data(index: int, term: int) -> bytes:
    return f"snapshot {index}/{term}".encode() * 50


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    path = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    pause_at_big = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    rng = random.Random(seed)
    st = RaftStorage(path)
    # A small page cache makes a big transaction spill uncommitted pages into
    # the WAL before its commit, so a crash leaves them there for recovery.
    st._conn.execute("PRAGMA cache_size=100")
    loaded = st.load()
    snap = loaded.snapshot_meta.index if loaded.snapshot_meta else 0
    last = st.last_index()
    term = loaded.hard_state.term + 1
    commit = loaded.hard_state.commit
    out(f"R {snap} {last} {loaded.hard_state.term}")
    bigs = 0
    for _ in range(1_000_000):
        r = rng.random()
        if r < 0.04 and commit > snap:
            sterm = st.entries(commit, commit + 1)[0].term
            out(f"P {commit} {sterm}")
            st.save_snapshot(Snapshot(SnapshotMeta(commit, sterm, ConfState(("n1", "n2", "n3"))),
                                      snapshot_data(commit, sterm)))
            snap = commit
            last = max(last, snap)
            out(f"Q {commit}")
            continue
        if r < 0.10:
            first, count = 0, 0                      # hard state only (a vote)
            term += 1
        elif r < 0.22:                               # a new leader overwrites a suffix
            term += 1
            first = max(commit + 1, snap + 1, last - rng.randint(0, 6))
            count = rng.randint(1, 8)
        elif r < 0.30:
            first, count = last + 1, BIG
            bigs += 1
        else:
            first, count = last + 1, rng.choice([1, 1, 2, 5, 64, 64, 300])
        if count:
            commit = max(commit, min(first - 1, last))
        vote = f"n{term % 3}"
        hs = HardState(term=term, vote=vote, commit=commit)
        entries = [Entry(term, i, EntryType.NORMAL if i % 5 else EntryType.NOOP, entry_data(i, term))
                   for i in range(first, first + count)]
        out(f"B {first} {count} {term} {vote} {commit}")
        if count == BIG and bigs == pause_at_big:
            rows = 0

            def hook(*_args):
                nonlocal rows
                rows += 1
                if rows == PAUSE_AFTER_ROWS:
                    out("MID")
                    time.sleep(3600)
            st._conn.set_update_hook(hook)
        st.save(hs, entries)
        if count:
            last = first + count - 1
        out(f"S {st.last_index()}")


if __name__ == "__main__":
    main()

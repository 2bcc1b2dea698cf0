"""Writes on a storage thread hold only that thread, however long the disk
takes (cronrd/runtime/storage.py: transaction). apsw's ``with conn:``
commits with the GIL held, so a slow fsync there froze the event loop as
surely as an fsync on it; ``transaction`` commits through ``execute``,
which lets go of the GIL. Measured in a child process whose fsyncs take
300 ms (the fault suite's LD_PRELOAD library)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from faults.nodes import build_preload  # noqa: E402

CHILD = r"""
import json, sys, threading, time
from cronrd.raft.types import Entry, HardState
from cronrd.runtime.log.raft_storage import RaftStorage
from cronrd.runtime.runs.outbox import Outbox
from cronrd.state import commands as C

tmp = sys.argv[1]
storage = RaftStorage(tmp + "/raft.db")
outbox = Outbox(tmp + "/local.db")
report = C.RunFinished(run_id=1, token=1, node="n1", state="succeeded", exit_code=0,
                       signal=None, started_at=1.0, finished_at=2.0, log_path=None,
                       reason=None)
open(tmp + "/fsync_ms", "w").write("300")

def longest_gap(work):
    t = threading.Thread(target=work)
    t.start()
    gap, last = 0.0, time.monotonic()
    while t.is_alive():
        time.sleep(0.005)
        now = time.monotonic()
        gap, last = max(gap, now - last), now
    return gap

began = time.monotonic()
out = {
    "raft_save": longest_gap(lambda: [storage.save(HardState(1, "n1", 0),
                                                   [Entry(1, i, data=b"x")])
                                      for i in (1, 2)]),
    "outbox": longest_gap(lambda: [outbox.add_many([report]) for _ in range(2)]),
}
out["took"] = time.monotonic() - began
print(json.dumps(out))
"""


def test_a_slow_commit_on_a_storage_thread_does_not_hold_the_others(tmp_path):
    lib, why = build_preload(tmp_path)
    if lib is None:
        pytest.skip(why)
    env = dict(os.environ, LD_PRELOAD=lib, CRONRD_FAULT_FSYNC_FILE=str(tmp_path / "fsync_ms"),
               PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["took"] >= 4 * 0.3        # the disk was slow: four commits of 300 ms at least
    # ... and the main thread ran all along (a held GIL shows as a 300 ms gap).
    assert got["raft_save"] < 0.2, got
    assert got["outbox"] < 0.2, got

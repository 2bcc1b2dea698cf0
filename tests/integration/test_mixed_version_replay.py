"""New code replaying what the previous release wrote decides what that
release decided (issue 31): one log, applied by the previous release's
state machine (its code, from git) and by this checkout's, gives equal
digests, both the chained one and the full one; and this checkout under
its own newest rules would not agree, so the log does exercise a rule the
cluster version changed (a node-scoped pool, state/versions.py)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from cronrd.state import commands as C
from harness import REPO
from releases import extract_previous
from tests.unit.state.test_state import T0, random_commands, spec

pytestmark = pytest.mark.integration

# Applies the log on stdin (hex entries) one entry a batch, as a follower
# would; prints the digests. "newest" forces this code's newest rules.
APPLY = """
import json, sys
import apsw
if sys.argv[1] == "newest":
    from cronrd.state import versions as V
    V.recorded = lambda conn: V.APPLY_VERSION
from cronrd.state.apply import apply_batch
from cronrd.state.machine import StateMachine
sm = StateMachine(apsw.Connection(":memory:"))
for i, entry in enumerate(json.load(sys.stdin), 1):
    apply_batch(sm, [(i, bytes.fromhex(entry))])
print(json.dumps({"applied": sm.applied_index, "chain": sm.state_digest,
                  "full": sm.full_digest()}))
"""


@pytest.fixture(scope="module")
def old_source(tmp_path_factory) -> Path:
    return extract_previous(tmp_path_factory.mktemp("previous-release"))


def a_log() -> list[bytes]:
    """A plausible history, with the node-scoped pool case whose rule
    version 2 changed: a waiting run cancelled while no node freed slots."""
    cmds: list[C.Command] = [C.SetPools(pools=[["db", 1, "node"]], at=T0)]
    for name in "pqr":
        cmds.append(C.PutJob(name=name, spec=spec(name=name, pool="db"), digest=name,
                             source=f"/{name}", at=T0, node="n1"))
        cmds.append(C.Fire(job=name, fire_time=T0 + 1, kind="scheduled", node="n1",
                           due_at=T0 + 1, at=T0 + 1))
    cmds.append(C.CancelRun(run_id=2, reason="operator", at=T0 + 2))
    cmds.append(C.SetPools(pools=[["db", 2, "node"]], at=T0 + 3))
    cmds += random_commands(random.Random(31), 400)
    return [c.encode() for c in cmds]


def digests(source: Path, rules: str, log: list[bytes]) -> dict:
    out = subprocess.run([sys.executable, "-c", APPLY, rules],
                         input=json.dumps([e.hex() for e in log]), capture_output=True,
                         text=True, timeout=120, cwd=str(source),
                         env={**os.environ, "PYTHONPATH": str(source)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_this_code_replays_the_previous_releases_log_to_the_same_digests(old_source):
    log = a_log()
    old = digests(old_source, "recorded", log)
    new = digests(REPO, "recorded", log)
    assert old["applied"] == new["applied"] == len(log)
    assert new == old
    # The newest rules decide the pool case otherwise: without the gate, a
    # node upgraded mid-log would have forked from the others here.
    assert digests(REPO, "newest", log)["full"] != old["full"]

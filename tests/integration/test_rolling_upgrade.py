"""A rolling upgrade (issue 31): three daemons on the previous recorded
release (packaging/releases.txt) are upgraded to this code one at a time
(stop, swap, start), the leader last and, in a second run, first; every
fire time of the every-second jobs runs exactly once (none twice, none
missed, none early), the DAG's children and the retried job go on, and the
nodes end with equal state digests.

The previous release is the newest recorded one whose commit is not this
checkout's HEAD; its cronrd/ is taken from git (git archive) and run with
this interpreter (the same dependencies). Skipped without git history
holding it (a shallow clone).

Until the cluster version gate lands, 0.2.0 and this code apply the same
log; the test is the harness that gate's change must then pass.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster_harness import check_exactly_once, fire_records
from cronrd.schedule import parse_iso
from harness import REPO, wait_for

pytestmark = pytest.mark.integration

TICKS = ("t0", "t1", "t2")


def previous_release() -> tuple[str, str] | None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    found = None
    for line in (REPO / "packaging" / "releases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, commit = line.split()
            if commit != head:
                found = (version, commit)
    return found


@pytest.fixture(scope="module")
def old_source(tmp_path_factory) -> Path:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the previous release comes from git")
    rel = previous_release()
    if rel is None:
        pytest.skip("packaging/releases.txt records no release older than HEAD")
    version, commit = rel
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "cronrd"],
                         capture_output=True)
    if tar.returncode != 0:
        pytest.skip(f"release {version} ({commit[:12]}) is not in this clone's history "
                    f"(shallow?): {tar.stderr.decode(errors='replace').strip()}")
    root = tmp_path_factory.mktemp(f"cronrd-{version}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(root, filter="data")
    (root / "cronrd" / "COMMIT").write_text(commit + "\n")  # its --version names it
    return root


def start(node, source: Path) -> None:
    node.start(env={"PYTHONPATH": str(source)}, wait=False)


@pytest.mark.parametrize("leader_order", ["last", "first"])
def test_a_cluster_upgraded_one_node_at_a_time_runs_every_fire_time_once(
        cluster, old_source, leader_order):
    c = cluster()
    for name in TICKS:
        c.write_job(name, {"schedule": "* * * * * *", "command": "true", "catchup": "all",
                           "concurrency": "allow"})
    c.write_job("child", {"schedule": "@after", "command": "true", "concurrency": "allow",
                          "depends_on": ["t0"]})
    # fails about every other attempt: retries go on across the upgrade
    c.write_job("flaky", {"schedule": "*/3 * * * * *", "command": "exit $(( $$ % 2 ))",
                          "concurrency": "allow", "retries": {"max": 2, "delay": "1s"}})
    for n in c:
        start(n, old_source)
    for n in c:
        n.wait_ready(timeout=40)
    lead = c.leader()
    first = int(time.time()) + 2
    lead.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3, job="child",
                   what="children of t0 on the old release", timeout=40)
    order = [n for n in c if n is not lead]
    order = order + [lead] if leader_order == "last" else [lead] + order
    for n in order:
        assert n.terminate() == 0, n.daemon_log()
        n.start(wait=False)           # this code (the harness's PYTHONPATH)
        n.wait_ready(timeout=40)
        wait_for(lambda: c.leader(), 20, what="a leader after upgrading a node",
                 on_fail=c.logs)
        # the others keep running: a mixed cluster goes on between upgrades
        any_node = c.leader()
        before = len(any_node.runs("t1"))
        any_node.wait_runs(lambda rs: len(rs) >= before + 2, job="t1",
                           what="ticks in the mixed cluster", timeout=30)
    lead = c.leader()
    for n in c:
        assert n.call("status")["ready"]
    more = len(lead.runs("child"))
    lead.wait_runs(lambda rs: len(rs) >= more + 2, job="child", what="children after",
                   timeout=30)
    last = int(time.time()) - 3
    c.converged(timeout=40)
    runs = lead.runs(limit=100000)
    for name in TICKS:
        check_exactly_once(runs, name, first, last)
        early = [r for r in fire_records(runs, name) if r.get("started_at") and
                 parse_iso(r["started_at"]) < parse_iso(r["fire_time"]) - 0.001]
        assert not early, f"{name}: started before its fire time: {early[:3]}"
    # each generation of the child consumed t0's outcome once
    keys = Counter((r["fire_time"], r["attempt"]) for r in runs if r["job"] == "child")
    assert not [k for k, m in keys.items() if m > 1], keys
    flaky = [r for r in runs if r["job"] == "flaky"]
    assert flaky and not Counter((r["fire_time"], r["attempt"]) for r in flaky
                                 ).most_common(1)[0][1] > 1


def test_the_previous_release_runs_as_itself(old_source):
    """The daemons above run the release's code, not this checkout's: its
    own --version, from the same interpreter, names the release's commit."""
    import os
    import sys
    version, commit = previous_release()
    out = subprocess.run([sys.executable, "-m", "cronrd", "--version"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(old_source)},
                         cwd=str(old_source))
    assert out.stdout.strip() == f"cronrd, version {version} (commit {commit[:12]})", out

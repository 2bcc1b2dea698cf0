"""A rolling upgrade (issue 31): three daemons on the previous recorded
release (packaging/releases.txt) are upgraded to this code one at a time
(stop, swap, start), the leader last and, in a second run, first; every
fire time of the every-second jobs runs exactly once (none twice, none
missed, none early), the DAG's children and the retried job go on, and the
nodes end with equal state digests.

The previous release is the newest recorded one whose commit is not this
checkout's HEAD (tests/support/releases.py). Skipped without git history
holding it (a shallow clone).

The cluster version (state/versions.py) stays at the old release's while
any node runs it, and rises once the last one is upgraded: the new rules
turn on then and not before. A node then started on the old release again
is refused (a downgrade below the cluster version), and a node whose state
is rebuilt by this code from the log the old nodes wrote reaches the same
digest as the nodes that applied it live.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster_harness import check_exactly_once, fire_records
from cronrd import __version__
from cronrd.runtime.cluster.versions import OLD_RELEASE
from cronrd.state import versions as V
from cronrd.schedule import parse_iso
from harness import wait_for
from releases import extract_previous, previous_release

pytestmark = pytest.mark.integration

TICKS = ("t0", "t1", "t2")


@pytest.fixture(scope="module")
def old_source(tmp_path_factory) -> Path:
    return extract_previous(tmp_path_factory.mktemp("previous-release"))


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
    # a run in flight on each node when it is upgraded: its supervisor
    # (KillMode=process) outlives the old daemon and the new one adopts it
    for n in c:
        nid = n.config["node_id"]
        c.write_job(f"long-{nid}", {"schedule": "*/4 * * * * *", "command": "sleep 2.5",
                                    "concurrency": "forbid", "run_on": nid})
    for n in c:
        start(n, old_source)
    for n in c:
        n.wait_ready(timeout=40)
    lead = c.leader()
    old = lead.call("status")["version"]
    differs = old != __version__
    old_applies = (lead.call("status").get("versions") or {}).get("applies", V.BASE)
    first = int(time.time()) + 2
    lead.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3, job="child",
                   what="children of t0 on the old release", timeout=40)
    order = [n for n in c if n is not lead]
    order = order + [lead] if leader_order == "last" else [lead] + order
    for i, n in enumerate(order):
        long_job = f"long-{n.config['node_id']}"
        in_flight = wait_for(lambda: next((r for r in n.runs(long_job)
                                           if r["state"] == "running"), None),
                             20, what=f"a run of {long_job} in flight", on_fail=c.logs)
        assert n.terminate() == 0, n.daemon_log()
        n.start(wait=False)           # this code (the harness's PYTHONPATH)
        n.wait_ready(timeout=40)
        # the run started by the old release ends as itself, once
        done = wait_for(lambda: next((r for r in n.runs(long_job) if r["run_id"] ==
                                      in_flight["run_id"] and r["state"] not in
                                      ("running", "assigned")), None),
                        30, what=f"the {long_job} run in flight to end", on_fail=c.logs)
        assert done["state"] == "succeeded" and done["attempt"] == in_flight["attempt"], done
        wait_for(lambda: c.leader(), 20, what="a leader after upgrading a node",
                 on_fail=c.logs)
        # the others keep running: a mixed cluster goes on between upgrades
        any_node = c.leader()
        before = len(any_node.runs("t1"))
        any_node.wait_runs(lambda rs: len(rs) >= before + 2, job="t1",
                           what="ticks in the mixed cluster", timeout=30)
        if i < len(order) - 1:
            # A node of the old release is still a member: the version holds,
            # and the upgraded node says the cluster is mixed.
            wait_for(lambda: n.call("status")["versions"]["mixed"] or not differs, 20,
                     what="the upgraded node to see the mixed cluster", on_fail=c.logs)
            v = n.call("status")["versions"]
            assert v["cluster_version"] == old_applies, v
            olds = [m for m in v["members"].values() if m["release"] in (OLD_RELEASE, old)]
            assert olds and all(m["applies"] == old_applies for m in olds), v
    # The last node is upgraded: the cluster version rises, on every node.
    wait_for(lambda: all(n.call("status")["versions"]["cluster_version"] == V.APPLY_VERSION
                         for n in c),
             30, what="the new cluster version once every node runs this code",
             on_fail=c.logs)
    # and each node, at its next round of asking the others, no longer
    # says the cluster is mixed
    wait_for(lambda: not any(n.call("status")["versions"]["mixed"] for n in c), 20,
             what="every node to see one release", on_fail=c.logs)
    lead = c.leader()
    members = lead.call("cluster_members")
    assert members["cluster_version"] == V.APPLY_VERSION and not members["mixed"]
    assert {m["version"]["release"] for m in members["members"]} == {__version__}
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
    follower = next(n for n in c if n is not c.leader())
    if leader_order == "last" and V.APPLY_VERSION > old_applies:
        downgrade_is_refused(c, follower, old_source)
    else:
        replay_gives_the_same_digest(c, follower)


def downgrade_is_refused(c, node, old_source: Path) -> None:
    """Started on the old release again, a node of a cluster at version 2
    is refused by the old code itself (the schema lock, state/versions.py),
    and loses nothing: on this code again it rejoins."""
    assert node.terminate() == 0, node.daemon_log()
    start(node, old_source)
    assert node.proc.wait(60) != 0, node.daemon_log()
    said = node.daemon_log()
    # 0.2.0 knows no cluster version: the schema lock refuses; a release
    # with the gate names both versions.
    assert "newer than this cronrd knows" in said or "applies versions up to" in said, said
    assert "upgrade cronrd" in said, said
    node.start(wait=False)
    node.wait_ready(timeout=40)
    c.converged(timeout=40)


def replay_gives_the_same_digest(c, node) -> None:
    """This code rebuilds a node's state from the Raft log the old release
    wrote (its state database removed): the same digest as the nodes that
    applied those entries live, the old ones and the new."""
    assert node.terminate() == 0, node.daemon_log()
    data = Path(node.config["data_dir"])
    for f in data.glob("state.db*"):
        f.unlink()
    node.start(wait=False)
    node.wait_ready(timeout=60)
    c.converged(timeout=60)


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

"""Integration: `cronrd cluster init` grows a one-host node into the first
member of a cluster without losing its jobs, runs or history."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import yaml

from cluster_harness import free_port
from cronrd.schedule import parse_iso
from harness import Node, wait_for

pytestmark = pytest.mark.integration


def fires(runs: list[dict], job: str) -> Counter:
    return Counter(parse_iso(r["fire_time"]) for r in runs
                   if r["job"] == job and r["kind"] in ("scheduled", "catchup")
                   and r["attempt"] == 1)


def set_config(node: Node, **changes) -> None:
    node.config.update(changes)
    node.config_path.write_text(yaml.safe_dump(node.config))


def test_cluster_init_keeps_jobs_runs_and_history(node_factory):
    a = node_factory(node_id="n1", shutdown={"mode": "wait", "grace": "5s"})
    a.write_job("tick", {"schedule": "* * * * * *", "command": "echo tick $CRONRD_FIRE_TIME",
                         "catchup": "all", "catchup_window": "1h", "concurrency": "allow"})
    a.write_job("once", {"schedule": "@yearly", "command": "echo once-output"})
    a.start()
    res = a.cli("run-now", "once", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    a.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3, job="tick",
                what="3 ticks on one host")
    assert a.terminate() == 0
    # What the one host left: the history of record (runs, audit) and its state.
    a.start()
    before_runs = {r["run_id"]: r for r in a.runs()}
    before_audit = a.call("audit", {"limit": 1000})["records"]
    before = a.call("status")
    assert a.terminate() == 0
    assert before["role"] == "leader" and before["term"] == 0  # no Raft on one host

    addr = f"127.0.0.61:{free_port('127.0.0.61')}"
    cluster = {"listen": addr, "initial_members": {"n1": addr}, "insecure": True,
               "election_timeout": "0.5s", "node_timeout": "3s"}
    # Without `cluster init` the cluster refuses the one-host data_dir, saying what to do.
    set_config(a, cluster=cluster)
    a.start(wait=False)
    assert a.proc.wait(30) == 1
    assert "cronrd cluster init" in a.daemon_log()

    res = a.cli("cluster", "init")
    assert res.returncode == 0, res.stdout + res.stderr
    converted = int(res.stdout.split("applied index ")[1].split(",")[0])
    assert converted >= before["applied_index"]
    res = a.cli("cluster", "init")  # once only
    assert res.returncode == 1 and "already holds a Raft log" in res.stderr

    restarted = time.time()
    a.start()
    st = a.call("status")
    assert st["role"] == "leader" and st["term"] >= 2 and st["voters"] == ["n1"]
    # Same state it left: every run and audit record, with the same ids.
    assert st["applied_index"] > converted
    after_runs = {r["run_id"]: r for r in a.runs()}
    for run_id, run in before_runs.items():
        if run["state"] in ("succeeded", "failed", "skipped", "lost", "cancelled"):
            assert after_runs[run_id] == run
    after_audit = a.call("audit", {"limit": 1000})["records"]
    assert after_audit[-len(before_audit):] == before_audit
    assert {j["name"] for j in a.call("jobs")} == {"once", "tick"}
    once = [r for r in after_runs.values() if r["job"] == "once"]
    assert len(once) == 1 and once[0]["state"] == "succeeded"
    out = a.cli("logs", "once", "--run", str(once[0]["run_id"]))
    assert out.returncode == 0 and "once-output" in out.stdout, out.stdout + out.stderr

    # New fires run exactly once per fire time, the outage caught up (catchup: all).
    runs = a.wait_runs(lambda rs: max(fires(rs, "tick")) >= restarted + 3 and all(
        r["state"] not in ("pending", "assigned", "running") for r in rs
        if parse_iso(r["fire_time"]) <= restarted + 2), job="tick", what="ticks in the cluster",
        timeout=30)
    seen = fires(runs, "tick")
    first, last = min(seen), int(restarted + 2)
    assert all(n == 1 for n in seen.values()), {t: n for t, n in seen.items() if n > 1}
    assert [t for t in range(first, last + 1) if t not in seen] == []
    # Every fire time ran to success, first time: a node alone keeps its
    # unstarted runs across a stop (nobody else could take them).
    assert [r for r in runs if r["state"] == "lost"] == []
    done = {parse_iso(r["fire_time"]) for r in runs if r["state"] == "succeeded"}
    assert [t for t in range(first, last + 1) if t not in done] == [], \
        ([(r["run_id"], r["fire_time"], r["state"], r["reason"]) for r in runs
          if r["state"] != "succeeded"], a.daemon_log())

    # It grows: a second node joins and gets the whole history.
    b_addr = f"127.0.0.62:{free_port('127.0.0.62')}"
    b = node_factory(node_id="b", cluster={
        "listen": b_addr, "initial_members": {"n1": addr}, "insecure": True, "join": True,
        "election_timeout": "0.5s", "node_timeout": "3s"})
    res = a.cli("cluster", "add", "b", b_addr)
    assert res.returncode == 0, res.stdout + res.stderr
    b.start(wait=False)
    b.wait_ready(timeout=40)
    wait_for(lambda: {r["run_id"] for r in b.runs()} >= set(before_runs), 30,
             what="the old history on the new member", on_fail=b.daemon_log)
    wait_for(lambda: a.call("status")["state_digest"] == b.call("status")["state_digest"], 30,
             what="equal states", on_fail=b.daemon_log)

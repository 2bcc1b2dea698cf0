"""Integration: dependencies in a three-node cluster whose leader is killed
in the middle of generations: exactly one child run per generation, no
generation left unfired, the same history on every node."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def test_leader_killed_mid_generation_one_child_run_per_generation(cluster):
    c = cluster()
    c.write_job("fast", {"schedule": "* * * * * *", "command": "sleep 0.3",
                         "concurrency": "allow", "catchup": "all"})
    c.write_job("slow", {"schedule": "*/2 * * * * *", "command": "sleep 0.5",
                         "concurrency": "allow", "catchup": "all"})
    c.write_job("join", {"schedule": "@after", "command": "true", "concurrency": "allow",
                         "depends_on": [{"job": "fast"}, {"job": "slow"}]})
    c.write_job("tail", {"schedule": "@after", "command": "true", "concurrency": "allow",
                         "depends_on": ["join"]})
    c.start()
    lead = c.leader()
    lead.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 2, job="join",
                   what="two generations of join", timeout=40)
    for _ in range(2):
        lead = c.leader()
        # in the middle of a generation: slow is running (its outcome not committed yet)
        lead.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="slow",
                       what="slow running", timeout=20)
        lead.kill9()
        wait_for(lambda: c.leader(), 20, what="new leader")
        lead.start(wait=False)
        lead.wait_ready(timeout=40)
    new = c.leader()
    before = len(new.runs("join"))
    new.wait_runs(lambda rs: len(rs) >= before + 3, job="join", what="more generations",
                  timeout=40)
    c.converged()
    runs = new.runs(limit=100000)
    joins = [r for r in runs if r["job"] == "join"]
    # one record per (job, fire time): no attempt 1 twice
    keys = Counter((r["fire_time"], r["attempt"]) for r in joins)
    assert not [k for k, n in keys.items() if n > 1], keys
    consumed = Counter()
    newest_slow = 0
    for j in joins:
        lineage = {x["job"]: x["run_id"] for x in j.get("lineage", [])}
        assert set(lineage) == {"fast", "slow"}, j
        consumed[lineage["slow"]] += 1
        newest_slow = max(newest_slow, lineage["slow"])
    # each slow outcome belongs to one generation at most (no child started twice)
    assert max(consumed.values()) == 1, consumed
    # no generation missed: every slow outcome before the last few was consumed, by
    # itself or together with a newer one (a child runs once for several parent runs)
    slow_final = sorted(r["run_id"] for r in runs if r["job"] == "slow"
                        and r["state"] == "succeeded")
    cutoff = time.time() - 4
    old = [r["run_id"] for r in runs if r["job"] == "slow" and r["state"] == "succeeded"
           and parse_iso(r["finished_at"]) < cutoff]
    assert old and all(rid <= newest_slow for rid in old), (old, newest_slow, slow_final)
    # the chain goes on below: one tail per join that succeeded
    tails = Counter(x["run_id"] for r in runs if r["job"] == "tail"
                    for x in r.get("lineage", []))
    assert tails and max(tails.values()) == 1
    assert c.converged()


def test_leader_killed_mid_downstream_rerun_each_record_reruns_once(cluster):
    """rerun a --downstream over a -> b -> c; the leader is killed while b's
    rerun runs: every record still gets exactly one more attempt, in order."""
    c = cluster()
    c.write_job("a", {"schedule": "0 0 1 1 *", "timezone": "UTC", "command": "true"})
    c.write_job("b", {"schedule": "@after", "command": "sleep 2", "depends_on": ["a"]})
    c.write_job("c", {"schedule": "@after", "command": "true", "depends_on": ["b"]})
    c.start()
    lead = c.leader()
    t = "2026-01-01T00:00:00Z"
    res = lead.cli("backfill", "a", "--from", t, "--to", t)
    assert res.returncode == 0, res.stderr
    lead.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="c",
                   what="the first generation of c", timeout=40)
    res = lead.cli("rerun", "a", "--at", t, "--downstream")
    assert res.returncode == 0 and f"then, downstream: b@{t}, c@{t}" in res.stdout, res
    lead.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "running"
                                  for r in rs), job="b", what="b's rerun running",
                   timeout=30)
    lead.kill9()
    new = c.leader()
    new.wait_runs(lambda rs: any(r["attempt"] >= 2 and r["state"] not in (
        "pending", "assigned", "running") for r in rs), job="c", what="c rerun",
                  timeout=60)
    lead.start(wait=False)
    lead.wait_ready(timeout=40)
    c.converged()
    for job in "abc":
        runs = sorted(new.runs(job), key=lambda r: (r["attempt"], r["run_id"]))
        assert {r["fire_time"] for r in runs} == {t}, runs
        attempts = Counter(r["attempt"] for r in runs)
        assert max(attempts.values()) == 1, runs    # never two of one attempt
        firsts = [r for r in runs if r["kind"] != "retry"]
        assert [r["attempt"] for r in firsts] == [1, 2], runs   # one rerun each

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

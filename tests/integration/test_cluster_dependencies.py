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
    b_node = next(r["node"] for r in lead.runs("b") if r["attempt"] == 2)
    lead.kill9()
    new = c.leader()
    # The killed node stays down: when b's rerun ran there, it is lost and
    # retried elsewhere (at-least-once), and c follows that retry.
    new.wait_runs(lambda rs: any(r["attempt"] >= 2 and r["state"] not in (
        "pending", "assigned", "running") for r in rs), job="c", what="c rerun",
                  timeout=90)
    if b_node == lead.config["node_id"]:
        b = {r["attempt"]: r for r in new.runs("b")}
        assert b[2]["state"] == "lost" and b[3]["kind"] == "retry", b
        assert b[3]["state"] == "succeeded", b
    c_runs = {r["attempt"]: r for r in new.runs("c")}
    assert c_runs[2]["kind"] == "rerun" and c_runs[2]["state"] == "succeeded", c_runs
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

def test_queued_after_child_keeps_its_generations_in_order_through_a_leader_kill(
        cluster, tmp_path):
    """concurrency: queue and @after across a failover: the child's first
    run blocks on a barrier the test holds, so each parent generation's run
    waits in the queue; the leader is killed -9 while they wait. Then the
    barrier opens: every generation has exactly one record per attempt, none
    is missed, and the queued runs start one at a time in fire-time order."""
    from tests.integration.test_concurrency_queue import started_in_order_one_at_a_time, t
    barrier = tmp_path / "go"
    c = cluster()
    c.write_job("p", {"schedule": "*/2 * * * * *", "command": "true",
                      "concurrency": "allow", "catchup": "all"})
    c.write_job("q", {"schedule": "@after", "depends_on": ["p"], "concurrency": "queue",
                      "max_queued": 1000,
                      "command": f"while [ ! -e {barrier} ]; do sleep 0.05; done"})
    c.start()
    lead = c.leader()
    runs = lead.wait_runs(lambda rs: sum(r["state"] == "waiting" for r in rs) >= 3
                          and any(r["state"] == "running" for r in rs), job="q",
                          timeout=60, what="a q run held at the barrier, 3 behind it")
    queued_at_kill = {r["run_id"] for r in runs if r["state"] == "waiting"}
    killed_at = time.time()
    lead.kill9()
    new = wait_for(lambda: c.leader(), 30, what="a new leader")
    assert new is not lead
    # the new leader goes on: the next parent generation joins the queue
    new.wait_runs(lambda rs: sum(r["state"] == "waiting" for r in rs) > len(queued_at_kill),
                  job="q", timeout=30, what="a generation queued after the failover")
    lead.start(wait=False)
    lead.wait_ready(timeout=40)
    barrier.touch()
    new = c.leader()
    new.wait_runs(lambda rs: {r["run_id"] for r in rs if r["state"] == "succeeded"}
                  >= queued_at_kill, job="q", timeout=90,
                  what="the runs queued at the kill done")
    # stop the parent, then wait for every record to end
    out = new.cli("pause", "p")
    assert out.returncode == 0, out.stderr
    active = ("pending", "assigned", "running", "waiting")
    wait_for(lambda: not [r for r in c.leader().runs() if r["job"] in ("p", "q")
                          and r["state"] in active], 60, what="p and q runs all ended",
             on_fail=c.logs)
    c.converged()
    runs = c.leader().runs(limit=100000)
    ps = [r for r in runs if r["job"] == "p"]
    qs = [r for r in runs if r["job"] == "q"]
    # one record per (child, fire time) and attempt
    keys = Counter((r["fire_time"], r["attempt"]) for r in qs)
    assert not [k for k, n in keys.items() if n > 1], keys
    # a later attempt is the retry of a lost one (the run at the barrier, if
    # it was on the killed node: on_node_loss retry), never a second record
    by_key = {(r["fire_time"], r["attempt"]): r for r in qs}
    for r in qs:
        if r["attempt"] == 1:
            assert r["kind"] == "upstream", r
        else:
            assert r["kind"] == "retry", r
            assert by_key[(r["fire_time"], r["attempt"] - 1)]["state"] == "lost", r
    # no generation missed: each parent fire time's outcome made exactly one
    # child record of that fire time, whose lineage names that parent run
    last_p, last_q = {}, {}
    for last, recs in ((last_p, ps), (last_q, qs)):
        for r in recs:
            if r["attempt"] >= last.get(r["fire_time"], {"attempt": 0})["attempt"]:
                last[r["fire_time"]] = r
    first_q = {r["fire_time"]: r for r in qs if r["attempt"] == 1}
    assert set(first_q) == set(last_p), (sorted(set(last_p) ^ set(first_q)), ps, qs)
    for ft, r in first_q.items():
        assert [x["run_id"] for x in r.get("lineage", [])] == [last_p[ft]["run_id"]], r
    # the queue: nothing skipped as full or as an overlap; every generation
    # whose parent succeeded ran to success; runs started one at a time, in
    # fire-time order, the ones queued at the kill after the failover
    assert all(last_q[ft]["state"] == "succeeded" for ft, r in last_p.items()
               if r["state"] == "succeeded"), qs
    started = started_in_order_one_at_a_time(qs)
    order = [r["run_id"] for r in started if r["run_id"] in queued_at_kill]
    assert order == sorted(queued_at_kill, key=lambda rid: t(next(
        r["fire_time"] for r in qs if r["run_id"] == rid))), (order, qs)
    assert all(t(r["started_at"]) > killed_at for r in qs if r["run_id"] in queued_at_kill)


def test_a_parent_on_every_node_starts_its_child_once_per_fire_time(cluster):
    """run_on: all: three nodes run each fire time of the parent; the child
    runs once per fire time (after the last of them), not once per node."""
    c = cluster()
    c.write_job("everywhere", {"schedule": "*/2 * * * * *", "run_on": "all",
                               # the nodes' runs end apart: the child ran in between
                               "command": 'case "$CRONRD_NODE" in a) sleep 0.1;; '
                                          'b) sleep 0.8;; *) sleep 1.5;; esac',
                               "concurrency": "allow"})
    c.write_job("once", {"schedule": "@after", "depends_on": ["everywhere"],
                         "command": "true", "concurrency": "allow"})
    c.start()
    lead = c.leader()
    lead.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3, job="once",
                   timeout=60, what="three runs of the child")
    out = lead.cli("pause", "everywhere")
    assert out.returncode == 0, out.stderr
    active = ("pending", "assigned", "running", "waiting")
    wait_for(lambda: not [r for r in lead.runs() if r["state"] in active], 60,
             what="every run ended", on_fail=c.logs)
    c.converged()
    runs = lead.runs(limit=100000)
    parent = [r for r in runs if r["job"] == "everywhere"]
    child = [r for r in runs if r["job"] == "once"]
    assert not [r for r in child if r["attempt"] != 1], child
    assert Counter(r["fire_time"] for r in child) == Counter(
        {r["fire_time"]: 1 for r in parent}), (parent, child)
    for r in child:
        (consumed,) = r["lineage"]
        assert consumed["run_id"] in {p["run_id"] for p in parent
                                      if p["fire_time"] == r["fire_time"]}, r

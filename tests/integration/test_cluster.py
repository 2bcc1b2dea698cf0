"""Integration: three real daemons on loopback forming one cluster.

Each daemon is a real process with its own data dir, job files and log dir;
nodes talk over TCP on their own 127.0.0.x address. Waits poll conditions
against deadlines; nothing depends on a sleep being long enough.
"""

from __future__ import annotations

import time

import pytest
import yaml

from cluster_harness import (Cluster, check_exactly_once, cut_off, fire_records, heal_all,
                             iptables_usable)
from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def test_cluster_forms_replicates_and_answers_on_every_node(cluster):
    c = cluster()
    c.write_job("tick", {"schedule": "* * * * * *", "command": "echo tick-$CRONRD_NODE"})
    c.write_job("once", {"schedule": "@yearly", "command": "echo hello-from-$CRONRD_NODE; "
                         "sleep 0.3"})
    c.start()
    lead = c.leader()
    followers = c.followers()
    roles = sorted(n.call("status")["role"] for n in c)
    assert roles == ["follower", "follower", "leader"]
    for n in c:
        st = n.call("status")
        assert st["leader"] == lead.config["node_id"] and st["term"] >= 1
    members = followers[0].call("cluster_members")
    assert sorted(m["id"] for m in members["members"]) == ["a", "b", "c"]
    assert all(m["role"] == "voter" for m in members["members"])
    assert [m["id"] for m in members["members"] if m["leader"]] == [lead.config["node_id"]]
    # Ticks run, spread over the nodes, and every node sees the same history.
    runs = followers[0].wait_runs(
        lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 9, job="tick",
        what="9 ticks", timeout=30)
    assert len({r["node"] for r in runs if r["state"] == "succeeded"}) >= 2
    # run-now from a follower is forwarded; logs are fetched from the node
    # that ran it, from any node.
    res = followers[1].cli("run-now", "once", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    run = followers[1].runs("once")[0]
    for n in c:
        logs = n.cli("logs", "once", "--run", str(run["run_id"]))
        assert logs.returncode == 0, logs.stderr
        assert f"hello-from-{run['node']}" in logs.stdout
    # --follow streams a running log from another node until the run ends.
    c.write_job("slow", {"schedule": "@yearly", "run_on": [followers[0].config["node_id"]],
                         "command": "echo one; sleep 1; echo two"})
    wait_for(lambda: [j for j in lead.call("jobs") if j["name"] == "slow"], what="slow job")
    slow_id = followers[1].call("run_now", {"job": "slow"})["run_id"]
    followers[1].wait_runs(lambda rs: any(r["run_id"] == slow_id and r["state"] == "running"
                                          for r in rs), job="slow", what="slow running")
    follow = followers[1].cli("logs", "slow", "--run", str(slow_id), "--follow")
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.split() == ["one", "two"]
    # A write from a follower; a consistent read sees it at once elsewhere.
    assert followers[0].cli("pause", "tick").returncode == 0
    jobs = {j["name"]: j for j in followers[1].call("jobs", {"consistent": True})}
    assert jobs["tick"]["paused"] is True
    c.converged()


def test_conflicting_job_definitions_keep_the_agreed_version(cluster):
    c = cluster()
    c.write_job("report", {"schedule": "@daily", "command": "echo v1"})
    c.start()
    a = c["a"]
    wait_for(lambda: [j for j in a.call("jobs") if j["name"] == "report"], what="job")
    c["b"].write_job("report", {"schedule": "@daily", "command": "echo v2"})
    st = wait_for(lambda: (s := a.call("status"))["conflicts"] and s, what="conflict shown",
                  on_fail=c.logs)
    assert "report" in st["conflicts"][0]
    job = [j for j in a.call("jobs") if j["name"] == "report"][0]
    assert job["command"] == "echo v1" and job["conflict"]
    # b fixes its file: the conflict is gone. Then only when every node has
    # dropped the file does the job disappear.
    c["b"].write_job("report", {"schedule": "@daily", "command": "echo v1"})
    wait_for(lambda: not a.call("status")["conflicts"], what="conflict resolved")
    for n in c:
        (n.jobs_dir / "report.yaml").unlink()
        if n is not c["c"]:
            time.sleep(0)  # (no wait: the job must survive while c still has it)
    wait_for(lambda: not [j for j in a.call("jobs") if j["name"] == "report"],
             what="job removed once no node has it", on_fail=c.logs)


def test_leader_killed_repeatedly_every_fire_time_exactly_once(cluster):
    c = cluster()
    jobs = [f"j{i}" for i in range(4)]
    for name in jobs:
        c.write_job(name, {"schedule": "* * * * * *", "command": "true", "catchup": "all",
                           "concurrency": "allow"})
    c.start()
    first = int(time.time()) + 2
    for _ in range(3):
        lead = c.leader()
        lead.kill9()
        # A new leader emerges from the other two, and fires keep coming.
        wait_for(lambda: c.leader(), 15, what="new leader")
        lead.start(wait=False)
        lead.wait_ready(timeout=40)
    last = int(time.time()) - 3
    c.converged()
    runs = c["a"].runs(limit=100000)
    for name in jobs:
        check_exactly_once(runs, name, first, last)
    # The same history on every node: converged() waits for one moment at which
    # every node has applied the same index with the same digest (and fails if
    # none comes). Reading the digests again afterwards raced the fires that
    # keep committing every second.
    assert c.converged()


def test_follower_killed_mid_run_is_lost_and_retried_elsewhere(cluster):
    c = cluster(node_timeout="3s")
    c.start()
    lead = c.leader()
    fids = sorted(n.config["node_id"] for n in c.followers())
    c.write_job("long", {"schedule": "@yearly", "command": "sleep 60", "run_on": fids,
                         "concurrency": "allow"})
    wait_for(lambda: [j for j in lead.call("jobs") if j["name"] == "long"], what="job")
    run_id = lead.call("run_now", {"job": "long"})["run_id"]
    run = lead.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="long",
                         what="long running")[0]
    victim = c[run["node"]]
    victim.kill9()
    # `status` on the leader names the member it cannot reach
    wait_for(lambda: f"DOWN      member {run['node']}: last heard from"
             in lead.cli("status").stdout, what="status names the dead member")
    runs = lead.wait_runs(
        lambda rs: any(r["run_id"] == run_id and r["state"] == "lost" for r in rs)
        and any(r["attempt"] == 2 and r["state"] == "running" for r in rs),
        job="long", what="lost and retried", timeout=30)
    retry = [r for r in runs if r["attempt"] == 2][0]
    assert retry["node"] != run["node"] and retry["node"] in fids
    lost = [r for r in runs if r["run_id"] == run_id][0]
    assert "node_timeout" in lost["reason"]


@pytest.mark.skipif(not iptables_usable(), reason="needs iptables (root) to cut traffic")
def test_cut_off_node_stops_starting_runs_then_rejoins(cluster):
    c = cluster(node_timeout="3s")
    stamps = c["a"].out / "stamps"  # one file for all three (same host)
    c.write_job("each", {"schedule": "* * * * * *", "run_on": "all",
                         "command": f"echo $CRONRD_NODE $(date +%s.%N) >> {stamps}"})
    c.start()
    victim = c.followers()[0]
    vid = victim.config["node_id"]
    victim.wait_runs(lambda rs: sum(r["state"] == "succeeded" and r["node"] == vid
                                    for r in rs) >= 2, job="each", what="runs on victim")
    cut_at = time.time()
    cut_off(c.hosts[vid])
    # Its lease (0.5 s) runs out: after a margin, nothing starts there.
    deadline = cut_at + 6
    while time.time() < deadline:
        time.sleep(0.2)
    stamps = [line.split() for line in stamps.read_text().splitlines()]
    late = [float(t) for node, t in stamps if node == vid and float(t) > cut_at + 1.5]
    assert not late, f"{vid} started runs after its lease expired: {late}"
    heal_all()
    # It rejoins: same state as the others, and it runs again.
    c.converged(timeout=30)
    rejoined = time.time()
    victim.wait_runs(lambda rs: any(r["node"] == vid and r["state"] == "succeeded" and
                                    parse_iso(r["started_at"]) > rejoined for r in rs),
                     job="each", what="victim runs again", timeout=20)


def test_remove_and_add_back_a_node(cluster):
    c = cluster()
    c.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    c.start()
    lead = c.leader()
    gone = [n for n in c if n is not lead][0]
    gid = gone.config["node_id"]
    res = lead.cli("cluster", "remove", gid)
    assert res.returncode == 0, res.stdout + res.stderr
    wait_for(lambda: gone.proc.poll() is not None, 20, what="removed node exits",
             on_fail=gone.daemon_log)
    members = lead.call("cluster_members")["members"]
    assert gid not in [m["id"] for m in members]
    # Add it back: a fresh data dir, joining the running cluster.
    node = c.replace_with_joiner(gid)
    res = lead.cli("cluster", "add", gid, c.addrs[gid])
    assert res.returncode == 0, res.stdout + res.stderr
    node.start(wait=False)
    node.wait_ready(timeout=40)
    wait_for(lambda: {m["id"]: m["role"] for m in lead.call("cluster_members")["members"]}
             .get(gid) == "voter", 30, what="promoted to voter", on_fail=c.logs)
    c.converged()
    since = time.time()
    lead.wait_runs(lambda rs: any(r["node"] == gid and r["state"] == "succeeded"
                                  and parse_iso(r["started_at"]) > since for r in rs),
                   job="tick", what="runs on the re-added node", timeout=30)
    # Leadership moves where the operator asks.
    res = node.cli("cluster", "transfer-leader", gid)
    assert res.returncode == 0, res.stdout + res.stderr
    assert c.leader() is node


def test_rolling_restart_keeps_fires_on_time(cluster):
    c = cluster()
    for i in range(3):
        c.write_job(f"r{i}", {"schedule": "* * * * * *", "command": "true"})
    c.start()
    first = int(time.time()) + 2
    order = [n for n in c if n is not c.leader()] + [c.leader()]
    for n in order:
        was_leader = n.call("status")["role"] == "leader"
        assert n.terminate(timeout=60) == 0
        if was_leader:  # SIGTERM on the leader hands leadership over first
            assert "event=leadership_transferred" in n.daemon_log()
        n.start(wait=False)
        n.wait_ready(timeout=40)
        c.leader()
    last = int(time.time()) - 2
    c.converged()
    runs = c["a"].runs(limit=100000)
    for i in range(3):
        check_exactly_once(runs, f"r{i}", first, last)
        recs = [r for r in fire_records(runs, f"r{i}")
                if first <= parse_iso(r["fire_time"]) <= last]
        late = [(r["fire_time"], r["started_at"], r["state"], r["node"], r["reason"]) for r in recs
                if r["started_at"] is None
                or parse_iso(r["started_at"]) - parse_iso(r["fire_time"]) > 1.0]
        assert not late, f"fires started more than 1s late or not at all: {late}"


def test_one_node_data_dir_is_not_switched_to_a_cluster_without_cluster_init(node):
    """It is refused, saying what to run (test_cluster_init.py runs it)."""
    node.write_job("tick", {"schedule": "@hourly", "command": "true"})
    node.start()
    assert node.terminate() == 0
    c = Cluster(ids=("n1",), first_ip=31)
    try:
        node.config["cluster"] = c["n1"].config["cluster"]
        node.config_path.write_text(yaml.safe_dump(node.config))
        node.start(wait=False)
        assert node.proc.wait(30) == 1
        assert "holds the state of a one-node cronrd" in node.daemon_log()
        assert "run `cronrd cluster init` (with the daemon stopped)" in node.daemon_log()
        assert "fresh data_dir" in node.daemon_log()
    finally:
        c.cleanup()


def test_sigterm_while_waiting_for_a_quorum_stops_the_daemon(cluster):
    c = cluster()
    a = c["a"]
    a.start(wait=False)  # b and c never start: no quorum, no leader
    wait_for(lambda: a.call("status", timeout=2)["ready"] is False, 20,
             what="socket answering while waiting", on_fail=a.daemon_log)
    assert a.call("status")["role"] in ("follower", "candidate")
    assert a.terminate(timeout=30) == 0
    assert "event=stopped" in a.daemon_log()


def test_a_new_run_on_all_job_does_not_fire_when_the_leader_changes_soon_after(cluster):
    """Issue 10 (8): a new job's cursor is its creation time; a leader change
    within a minute "completed" that as a fire, so `0 0 1 1 *` with run_on:
    all ran at once on every node."""
    c = cluster(first_ip=131).start()
    c.write_job("nightly", {"schedule": "0 0 1 1 *", "command": "true", "run_on": "all",
                            "timezone": "UTC"})
    lead = c.leader()
    wait_for(lambda: all("nightly" in {j["name"] for j in n.call("jobs")} for n in c), 20,
             what="the job everywhere")
    other = next(n for n in c if n is not lead)
    res = lead.cli("cluster", "transfer-leader", other.config["node_id"])
    assert res.returncode == 0, res.stdout + res.stderr
    new = c.leader()
    assert new is other
    wait_for(lambda: "event=leading" in new.daemon_log(), 10, what="the new leader scheduling")
    c.converged()
    assert [r for r in new.runs("nightly")] == []

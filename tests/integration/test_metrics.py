"""/metrics of a real daemon (issue 16, point 5): every family the issue
lists, filled by runs that really ran, failed, dead-lettered, notified and
took pool slots; parsed with the official client's parser."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronrd import __version__
from harness import wait_for

pytestmark = pytest.mark.integration


def scrape(url: str) -> tuple[dict, dict]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    fams = list(text_string_to_metric_families(text))
    return ({f.name: f.type for f in fams},
            {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams
             for s in f.samples})


def test_every_family_of_a_running_daemon(node_factory, tmp_path):
    sent = tmp_path / "sent"
    node = node_factory(
        pools={"db": {"slots": 3}},
        notifiers={"page": {"type": "command", "command": f"cat >> {sent}"}},
        notify=[{"to": "page", "on": ["failed"]}])
    node.write_job("ok", {"schedule": "* * * * * *", "command": "sleep 0.2", "pool": "db"})
    node.write_job("bad", {"schedule": "@yearly", "command": "exit 4",
                           "on_final_failure": "dead_letter"})
    node.write_job("idle", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    assert node.cli("run-now", "bad", "--wait").returncode == 4
    node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 2, job="ok")
    wait_for(lambda: sent.exists() and sent.read_text(), what="the failure notified")

    def settled():
        fams, got = scrape(url)
        return (got.get(("cronrd_notifications_total", (("notifier", "page"),
                                                        ("outcome", "sent")))) == 1
                and got.get(("cronrd_job_run_duration_seconds_count",
                             (("job_name", "ok"),)), 0) >= 2)
    wait_for(settled, timeout=20, what="the notification and two runs of ok in /metrics "
             "(the page is cached for a second)", on_fail=node.daemon_log)
    fams, got = scrape(url)
    ok, bad, idle = (("job_name", "ok"),), (("job_name", "bad"),), (("job_name", "idle"),)
    # counters: every job's from its load, at 0
    assert got[("cronrd_job_runs_total", idle + (("origin", "schedule"),
                                                 ("outcome", "succeeded")))] == 0
    assert got[("cronrd_job_runs_total", bad + (("origin", "manual"),
                                                ("outcome", "failed")))] == 1
    assert fams["cronrd_job_skips"] == "counter"
    # histograms: a second's job runs ~0.2 s and starts well within a second
    assert fams["cronrd_job_run_duration_seconds"] == "histogram"
    n = got[("cronrd_job_run_duration_seconds_count", ok)]
    assert got[("cronrd_job_run_duration_seconds_bucket", ok + (("le", "1.0"),))] == n
    assert got[("cronrd_job_run_duration_seconds_bucket", ok + (("le", "+Inf"),))] == n
    assert 0.1 * n < got[("cronrd_job_run_duration_seconds_sum", ok)] < 1.0 * n
    d = got[("cronrd_job_schedule_delay_seconds_count", ok)]
    assert d >= 2 and got[("cronrd_job_schedule_delay_seconds_bucket",
                           ok + (("le", "1.0"),))] == d
    assert ("cronrd_job_schedule_delay_seconds_count", bad) not in got  # manual: not late
    # and of every job together
    assert got[("cronrd_run_duration_seconds_count", ())] >= n + 1  # ok's and bad's
    assert got[("cronrd_schedule_delay_seconds_count", ())] >= d
    # gauges
    assert got[("cronrd_job_last_success_timestamp_seconds", ok)] > 0
    assert got[("cronrd_job_next_fire_timestamp_seconds", idle)] > 0
    assert fams["cronrd_job_running"] == "gauge"
    assert got[("cronrd_job_alerts_open", bad + (("kind", "failed"),))] == 1
    assert got[("cronrd_job_dead_letter", bad)] == 1
    assert got[("cronrd_pool_slots", (("pool", "db"),))] == 3
    assert 0 <= got[("cronrd_pool_slots_in_use", (("pool", "db"),))] <= 1
    assert got[("cronrd_pool_waiting_runs", (("pool", "db"),))] == 0
    # the node and its Raft view
    assert got[("cronrd_build_info", (("node", "n1"), ("version", __version__)))] == 1
    assert got[("cronrd_node_up", (("node", "n1"),))] == 1
    assert got[("cronrd_raft_is_leader", ())] == 1
    assert got[("cronrd_raft_apply_lag", ())] >= 0
    assert ("cronrd_raft_leader_changes_total", ()) in got
    # never a `job` label, never a run id
    for name, labels in got:
        assert "job" not in dict(labels) and "run_id" not in dict(labels), (name, labels)


def test_a_cluster_counts_the_same_on_every_node_and_sees_a_leader_go(cluster):
    c = cluster()
    c.write_job("once", {"schedule": "@yearly", "command": "sleep 0.3"})
    c.start()
    lead = c.leader()
    assert lead.cli("run-now", "once", "--wait").returncode == 0
    key = ("cronrd_job_run_duration_seconds_count", (("job_name", "once"),))
    urls = {n.config["node_id"]: n.call("status")["http"] for n in c}
    wait_for(lambda: all(scrape(u)[1].get(key) == 1 for u in urls.values()),
             what="the run's duration on every node")
    pages = {nid: scrape(u)[1] for nid, u in urls.items()}
    for got in pages.values():  # replicated: the same counts and buckets everywhere
        assert {k: v for k, v in got.items() if k[0].startswith(("cronrd_job_runs",
                "cronrd_job_run_duration", "cronrd_run_duration"))} == \
            {k: v for k, v in pages[lead.config["node_id"]].items()
             if k[0].startswith(("cronrd_job_runs", "cronrd_job_run_duration",
                                 "cronrd_run_duration"))}
    before = {nid: got[("cronrd_raft_leader_changes_total", ())] for nid, got in pages.items()}
    gone = lead.config["node_id"]
    lead.kill9()
    survivors = [n for n in c if n.config["node_id"] != gone]

    def seen():
        for n in survivors:
            got = scrape(urls[n.config["node_id"]])[1]
            if got[("cronrd_raft_leader_changes_total", ())] <= before[n.config["node_id"]] \
                    or got[("cronrd_node_up", (("node", gone),))] != 0:
                return False
        return sum(scrape(urls[n.config["node_id"]])[1][("cronrd_raft_is_leader", ())]
                   for n in survivors) == 1
    wait_for(seen, timeout=30, what="a new leader, one more leader change and the old "
             "leader down on both survivors", on_fail=c.logs)


def test_a_daemon_held_still_reports_its_stall_in_the_log_and_on_the_page(node):
    """Issue 29, point 3: a stall of the critical loop is an event. The
    daemon is stopped (SIGSTOP) for 0.6 s, as a VM pause or a loop held by
    a heavy request would hold it; it logs event=loop_stalled once and
    counts it in cronrd_loop_stall_seconds."""
    import os
    import signal
    import time

    node.start()
    url = node.call("status")["http"]
    fams, got = scrape(url)
    assert fams["cronrd_loop_stall_seconds"] == "histogram"
    before = got[("cronrd_loop_stall_seconds_count", ())]
    held = got[("cronrd_loop_stall_seconds_sum", ())]
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.6)   # the fault itself: the process is held this long
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    wait_for(lambda: "event=loop_stalled" in node.daemon_log(), timeout=10,
             what="the stall logged", on_fail=node.daemon_log)
    line = next(x for x in node.daemon_log().splitlines() if "event=loop_stalled" in x)
    assert 500 <= float(line.split("ms=")[1].split()[0]) < 5000

    def counted():
        _, now = scrape(url)
        return (now[("cronrd_loop_stall_seconds_count", ())] >= before + 1
                and now[("cronrd_loop_stall_seconds_sum", ())] >= held + 0.5)
    wait_for(counted, timeout=10, what="the stall on /metrics (cached for a second)")

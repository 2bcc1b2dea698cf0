"""Integration (issue 35): watches through real daemons. A watch's fire
times wait for pings: `cronrd ping` on the socket and POST
/api/v1/pings/NAME with a ping token close them (`cronrd ping --url` too);
a fire time with no ping within its grace is recorded failed and alerts
once; watches are listed with jobs and counted in /metrics; and across a
leader's death every missed ping alerts exactly once."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from harness import at_cluster_version, cli_ok, wait_for

pytestmark = pytest.mark.integration

WATCH = "watches:\n  - name: legacy\n    schedule: '*/4 * * * * *'\n    grace: 3s\n" \
        "  - name: other\n    schedule: '@yearly'\n"




def waiting(node, job: str = "legacy") -> dict:
    """A run of the watch that waits for its ping now (one whose grace has
    most of its time left)."""
    def find():
        now = time.time()
        runs = [r for r in node.runs(job) if r["state"] == "waiting"]
        fresh = [r for r in runs if now - _t(r["fire_time"]) < 1.0]
        return fresh[0] if fresh else None
    return wait_for(find, 20, what="a fresh waiting run of the watch")


def _t(iso: str) -> float:
    from cronrd.schedule import parse_iso
    return parse_iso(iso)


def post(url: str, path: str, token: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_pings_close_a_watchs_fire_times_and_a_missing_one_alerts(node):
    node.start()
    at_cluster_version(node)
    node.write_job("legacy", WATCH)
    wait_for(lambda: {"legacy", "other"} <= {j["name"] for j in node.call("jobs")}, 15,
             what="the watches loaded")
    line = [ln for ln in cli_ok(node.cli("jobs")).splitlines() if ln.startswith("legacy ")][0]
    assert "active (watch)" in line

    # the local socket: a start, then the end
    run = waiting(node)
    assert run["reason"].startswith("waiting for a ping until ")
    assert "running" in cli_ok(node.cli("ping", "legacy", "--start"))
    assert "succeeded" in cli_ok(node.cli("ping", "legacy"))
    done = next(r for r in node.runs("legacy") if r["run_id"] == run["run_id"])
    assert done["state"] == "succeeded" and done["started_at"] and done["node"] is None

    # the API, with a token that may only ping this watch
    url = node.call("status")["http"]
    token = cli_ok(node.cli("token", "create", "--name", "legacy-ping", "--role", "ping",
                        "--jobs", "legacy")).strip()
    run = waiting(node)
    status, res = post(url, "/api/v1/pings/legacy", token, {})
    assert status == 200 and res["run_id"] == run["run_id"] and res["state"] == "succeeded"
    assert post(url, "/api/v1/pings/other", token, {})[0] == 403     # not its watch
    req = urllib.request.Request(url + "/api/v1/jobs", headers={"Authorization":
                                                                f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(req, timeout=10)
    assert denied.value.code == 403                                   # it reads nothing
    # the CLI through the API, from "a host without cronrd": a failure
    run = waiting(node)
    out = node.cli("ping", "legacy", "--exit", "2", "--url", url, "--token", token)
    assert out.returncode == 0 and "failed" in out.stdout, out.stderr
    failed = next(r for r in node.runs("legacy") if r["run_id"] == run["run_id"])
    assert failed["state"] == "failed" and failed["exit_code"] == 2

    # no ping: missed once its grace (3s) is over, and alerted
    run = waiting(node)
    missed = wait_for(lambda: next((r for r in node.runs("legacy")
                                    if r["run_id"] == run["run_id"]
                                    and r["state"] == "failed"), None), 15, what="the miss")
    assert missed["reason"].startswith("missed: no ping within its grace (3s)")
    alerts = [a for a in json.loads(cli_ok(node.cli("alerts", "--json")))
              if a["job"] == "legacy" and a["fire_time"] == run["fire_time"]]
    assert len(alerts) == 1 and alerts[0]["kind"] == "failed"

    # a late ping: through the SLA machinery (finish_within), an alert of its own
    node.write_job("late", "watch:\n  schedule: '*/4 * * * * *'\n  grace: 3s\n"
                           "  sla: {finish_within: 1s}\n")
    wait_for(lambda: "late" in {j["name"] for j in node.call("jobs")}, 15, what="late")
    run = waiting(node, "late")
    wait_for(lambda: time.time() >= _t(run["fire_time"]) + 1.5, 5, what="1.5 s after it")
    assert "succeeded" in cli_ok(node.cli("ping", "late"))
    # (resolved at once, "done late": the run of its fire time succeeded; --all)
    sla = wait_for(lambda: [a for a in json.loads(cli_ok(node.cli("alerts", "--json", "--all")))
                            if a["job"] == "late" and a["kind"] == "finish_within"
                            and a["fire_time"] == run["fire_time"]], 20,
                   what="the late ping's finish_within alert")
    assert "not succeeded within 1s" in sla[0]["detail"]

    # a job is not a watch; a watch runs nothing
    node.write_job("real", {"schedule": "@yearly", "command": "true"})
    wait_for(lambda: "real" in {j["name"] for j in node.call("jobs")}, 15, what="real")
    res = node.cli("ping", "real")
    assert res.returncode == 1 and "'real' is not a watch" in res.stderr
    res = node.cli("run-now", "legacy")
    assert res.returncode == 1 and "is a watch: it runs nothing here" in res.stderr
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    # counted with the jobs: its runs by outcome (the pinged ones and the missed)
    assert 'cronrd_job_runs_total{job_name="legacy",origin="schedule",outcome="succeeded"}' \
        in metrics
    assert 'cronrd_job_runs_total{job_name="legacy",origin="schedule",outcome="failed"}' \
        in metrics


def test_every_missed_ping_alerts_exactly_once_across_a_leader_kill(cluster):
    c = cluster()
    c.start()
    lead = c.leader()
    at_cluster_version(lead)
    c.write_job("legacy", "watch:\n  name: legacy\n  schedule: '*/2 * * * * *'\n  grace: 1s\n")
    for n in c:
        wait_for(lambda n=n: "legacy" in {j["name"] for j in n.call("jobs")}, 15,
                 what="the watch loaded")
    first = wait_for(lambda: next((r for r in lead.runs("legacy") if r["state"] == "failed"),
                                  None), 20, what="a first miss")
    lead.kill9()
    new = wait_for(lambda: c.leader(), 20, what="a new leader")
    killed_at = time.time()
    wait_for(lambda: len([r for r in new.runs("legacy") if r["state"] == "failed"
                          and _t(r["fire_time"]) > killed_at + 2]) >= 2, 30,
             what="misses after the kill")
    lead.start(wait=False)
    lead.wait_ready(timeout=40)
    last = int(time.time()) - 6
    c.converged()
    runs = c[next(iter(c.nodes))].runs("legacy")
    scheduled = [r for r in runs if r["kind"] != "ping"]
    fires = Counter(int(_t(r["fire_time"])) for r in scheduled if r["attempt"] == 1)
    expected = range(int(_t(first["fire_time"])), last + 1, 2)   # */2 s: even seconds
    assert {t: fires.get(t, 0) for t in expected} == {t: 1 for t in expected}
    alerts = json.loads(cli_ok(new.cli("alerts", "--json", "--all")))
    by_fire: dict[str, int] = {}
    for a in alerts:
        if a["job"] == "legacy":
            by_fire[a["fire_time"]] = by_fire.get(a["fire_time"], 0) + 1
    for r in scheduled:
        if _t(r["fire_time"]) <= last:
            assert r["state"] == "failed", r
            assert by_fire.get(r["fire_time"]) == 1, (r, by_fire)

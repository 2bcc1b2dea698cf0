"""Integration (issue 35): one-shot runs through real daemons. A job with
schedule "@at TIME" fires once and is then listed `done`; `run-now --at`
plans a run that `next` lists, `cancel --plan` removes, and that starts at
its time; across a leader's death both start exactly once."""

from __future__ import annotations

import time

import pytest

from cronrd.schedule import iso_utc, parse_iso
from harness import at_cluster_version, cli_ok, wait_for

pytestmark = pytest.mark.integration




def test_an_at_job_fires_once_and_a_planned_run_starts_at_its_time(node):
    node.write_job("tick", {"schedule": "@yearly", "command": "echo tick"})
    node.start()
    at_cluster_version(node)
    at = int(time.time()) + 3
    node.write_job("once", {"schedule": f"@at {iso_utc(at)}", "command": "echo once"})
    wait_for(lambda: any(j["name"] == "once" for j in node.call("jobs")), 10,
             what="the @at job loaded")
    out = cli_ok(node.cli("next", "once"))
    assert out.startswith(iso_utc(at))

    planned = cli_ok(node.cli("run-now", "tick", "--at", "+3s"))
    assert planned.startswith("planned run ")
    plan_id = int(planned.split()[2])
    later = cli_ok(node.cli("run-now", "tick", "--at", "+1h"))
    later_id = int(later.split()[2])
    assert f"plan {later_id} by " in cli_ok(node.cli("show", "tick"))
    shown = cli_ok(node.cli("next", "tick", "-n", "3"))
    assert f"planned run {plan_id} (run-now --at" in shown and f"planned run {later_id}" in shown
    assert cli_ok(node.cli("cancel", "--plan", str(later_id))).endswith(": cancelled\n")
    res = node.cli("cancel", "--plan", str(later_id))
    assert res.returncode == 1 and "it started or was cancelled" in res.stderr

    runs = node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="once")
    assert [(r["fire_time"], r["kind"]) for r in runs] == [(iso_utc(at), "scheduled")]
    runs = node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick")
    (run,) = runs
    assert run["kind"] == "manual" and parse_iso(run["started_at"]) >= parse_iso(run["due_at"])
    assert node.call("job", {"name": "tick"})["planned"] == []   # the cancelled one is gone

    jobs = cli_ok(node.cli("jobs"))
    (line,) = [ln for ln in jobs.splitlines() if ln.startswith("once ")]
    assert line.split()[:4] == ["once", "@at", iso_utc(at), "done"], jobs
    assert "the job is done" in cli_ok(node.cli("next", "once"))
    assert "\nstate      done\n" in cli_ok(node.cli("show", "once"))
    assert len(node.runs("once")) == 1


def test_one_shots_start_exactly_once_across_a_leader_kill(cluster):
    c = cluster()
    c.write_job("tick", {"schedule": "@yearly", "command": "echo tick"})
    c.start()
    lead = c.leader()
    at_cluster_version(lead)
    at = int(time.time()) + 6
    c.write_job("once", {"schedule": f"@at {iso_utc(at)}", "command": "echo once"})
    for n in c:
        wait_for(lambda n=n: any(j["name"] == "once" for j in n.call("jobs")), 15,
                 what="the @at job loaded")
    follower = c.followers()[0]
    cli_ok(follower.cli("run-now", "tick", "--at", iso_utc(at)))
    wait_for(lambda: time.time() >= at - 2, 10, what="2 s before the one-shots")
    lead.kill9()
    new = wait_for(lambda: c.leader(), 20, what="a new leader")
    assert new is not lead

    for job in ("once", "tick"):
        new.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job=job,
                      timeout=30)
    lead.start(wait=False)
    lead.wait_ready(timeout=40)
    c.converged()
    for n in c:
        once = n.runs("once")
        tick = n.runs("tick")
        assert [(r["fire_time"], r["attempt"]) for r in once] == [(iso_utc(at), 1)], once
        assert [(r["kind"], r["due_at"], r["attempt"]) for r in tick] == \
            [("manual", iso_utc(at), 1)], tick

"""Integration: `cronrd explain` against a real daemon: a fire time skipped
by a pause names who paused it and why (after the resume too), one that
ran, a job no node may run, the next fire time, and the same trail with
the daemon down (read from the state database)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def trail(node, *args):
    res = node.cli("explain", *args)
    assert res.returncode == 0, res.stderr
    return res


def step_lines(out: str, step: str) -> list[str]:
    return [ln[12:] for ln in out.splitlines() if ln.startswith(step.ljust(11) + " ")]


def test_explain_a_pause_a_run_placement_and_the_next_fire_time(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.write_job("gpu", {"schedule": "* * * * * *", "command": "true",
                           "run_on": {"tags": ["gpu"]}})
    node.start()
    res = node.cli("pause", "tick", "--note", "disk full on /srv")
    assert res.returncode == 0, res.stderr
    runs = node.wait_runs(lambda rs: any(r["state"] == "skipped" for r in rs), job="tick")
    skipped = next(r for r in runs if r["state"] == "skipped")
    assert node.cli("resume", "tick").returncode == 0
    ran = node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick")
    ok = next(r for r in ran if r["state"] == "succeeded")

    out = trail(node, "tick", "--at", skipped["fire_time"]).stdout
    paused = step_lines(out, "paused")[0]
    # paused at T, or (the fire committed ahead of T and the resume before T)
    # when it was decided
    assert paused.startswith((f"paused at {skipped['fire_time']} by ",
                              "paused when the fire time was decided ahead of it"))
    assert " by uid " in paused and "disk full on /srv" in paused and ", resumed at " in paused
    assert step_lines(out, "verdict") == ["skipped: paused: `cronrd resume` re-enables the job"]

    out = trail(node, "tick", "--at", ok["fire_time"]).stdout
    assert step_lines(out, "schedule")[0].endswith("is a fire time")
    assert step_lines(out, "record")[0].startswith(
        f"run {ok['run_id']} attempt 1 (scheduled) on node n1: succeeded")
    assert step_lines(out, "verdict") == ["ran (succeeded)"]

    # no node has the tags: each fire time is recorded skipped with the reason
    gpu = node.wait_runs(lambda rs: any(r["state"] == "skipped" for r in rs), job="gpu")
    nxt = json.loads(trail(node, "gpu", "--next", "--json").stdout)
    assert nxt["future"] is True and nxt["verdict"]["outcome"] == "would_skip"
    placement = [s for s in nxt["steps"] if s["step"] == "placement"][0]
    assert placement["text"] == "run_on: tags gpu: no member has tags gpu"
    past = json.loads(trail(node, "gpu", "--at", gpu[0]["fire_time"], "--json").stdout)
    assert past["verdict"]["text"] == "skipped: no eligible node: no member has tags gpu"

    res = node.cli("explain", "tick", "--at", "2026-13-01")
    assert res.returncode == 2 and "--at" in res.stderr
    res = node.cli("explain", "nosuch")
    assert res.returncode == 1 and "no job named 'nosuch'" in res.stderr

    # with the daemon down: the same trail, from the state database
    node.terminate()
    res = trail(node, "tick", "--at", skipped["fire_time"])
    assert "daemon not running; state as of" in res.stderr
    assert "disk full on /srv" in step_lines(res.stdout, "paused")[0]
    assert step_lines(res.stdout, "verdict") == [
        "skipped: paused: `cronrd resume` re-enables the job"]
    res = trail(node, "tick", "--next")
    assert "as last announced; the daemon is not running" in step_lines(res.stdout,
                                                                        "placement")[0]


def test_explain_on_every_node_of_a_cluster(cluster):
    """Three nodes: the trail of a fire time is the same on each (the state is
    replicated); placement now is live on the leader and as last announced on
    a follower."""
    c = cluster()
    c.write_job("tick", {"schedule": "* * * * * *", "command": "true",
                         "run_on": {"tags": ["tag-b"]}})
    c.start()
    lead = c.leader()
    runs = lead.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick",
                          timeout=30)
    ok = next(r for r in runs if r["state"] == "succeeded")
    assert ok["node"] == "b"
    c.converged()
    trails = [json.loads(trail(n, "tick", "--at", ok["fire_time"], "--json").stdout)
              for n in c]
    assert all(t["verdict"] == {"outcome": "ran", "text": "ran (succeeded)"} for t in trails)
    assert len({json.dumps([s for s in t["steps"] if s["step"] == "record"]) for t in trails}) == 1
    placement = {n.config["node_id"]: [s for s in json.loads(
        trail(n, "tick", "--next", "--json").stdout)["steps"] if s["step"] == "placement"][0]
        for n in c}
    assert placement[lead.config["node_id"]]["text"] == \
        "run_on: tags tag-b: eligible now: b"
    follower = c.followers()[0].config["node_id"]
    assert placement[follower]["eligible"] == ["b"]
    assert "this node is not the leader" in placement[follower]["text"]

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


def test_explain_an_after_child_its_generation_and_its_gate_now(node):
    """extract -> transform -> load (@after transform, fx-rates within 26h),
    as in examples/jobs: the gate before anything ran, the generation that
    ran load, a time with no generation, and the gate after it."""
    node.write_job("extract", {"schedule": "@yearly", "command": "true"})
    node.write_job("transform", {"schedule": "@after", "depends_on": [{"job": "extract"}],
                                 "command": "true"})
    node.write_job("fx-rates", {"schedule": "@yearly", "command": "true"})
    node.write_job("load", {"schedule": "@after", "command": "true",
                            "depends_on": [{"job": "transform"},
                                           {"job": "fx-rates", "within": "26h"}],
                            "on_upstream_failure": "skip"})
    node.start()
    # nothing ran yet: explain load is its gate now
    res = json.loads(trail(node, "load", "--json").stdout)
    assert res["at"] is None and res["verdict"]["outcome"] == "waits_for_upstream"
    assert [s["text"] for s in res["steps"] if s["step"] == "parent"] == [
        "transform: no outcome yet", "fx-rates: no outcome yet"]
    out = trail(node, "load", "--next").stdout
    assert out.splitlines()[0].startswith("explain     load: its next generation (now ")
    assert step_lines(out, "verdict") == [
        "next generation waits for: transform, fx-rates; fires when transform and fx-rates "
        "finish; runs if every parent succeeded (trigger_rule all_succeeded)"]

    fx = node.call("run_now", {"job": "fx-rates"})["run_id"]
    node.wait_runs(lambda rs: any(r["job"] == "fx-rates" and r["state"] == "succeeded"
                                  for r in rs), what="fx-rates")
    node.call("run_now", {"job": "extract"})
    runs = node.wait_runs(lambda rs: any(r["job"] == "load" and r["state"] == "succeeded"
                                         for r in rs), what="load after transform")
    (load,) = [r for r in runs if r["job"] == "load"]
    (tr,) = [r for r in runs if r["job"] == "transform"]

    # the latest generation: what it consumed, the rule, where it ran
    out = trail(node, "load").stdout
    assert out.splitlines()[0].startswith(f"explain     load at {load['fire_time']} ")
    assert step_lines(out, "schedule")[0].startswith(
        f"@after: {load['fire_time']} (") and "is the fire time of 1 generation" in out
    who = f"run {load['run_id']} (attempt 1)"
    assert step_lines(out, "parent") == [
        f"{who} consumed transform run {tr['run_id']}: succeeded (fire time "
        f"{tr['fire_time']})",
        f"{who} consumed fx-rates run {fx}: succeeded (fire time "
        f"{node.call('run', {'run_id': fx})['fire_time']})"]
    assert step_lines(out, "gate") == [
        f"{who}: trigger_rule all_succeeded opened the gate (every parent succeeded): the run "
        "was made (attempts below)"]
    assert step_lines(out, "placement") == ["run_on: any node: placed on n1"]
    assert step_lines(out, "record")[0].startswith(
        f"run {load['run_id']} attempt 1 (upstream) on node n1: succeeded")
    assert step_lines(out, "verdict") == ["ran (succeeded)"]
    assert step_lines(out, "next")[0].startswith("next generation waits for: transform; ")
    at = trail(node, "load", "--at", load["fire_time"]).stdout
    assert step_lines(at, "parent") == step_lines(out, "parent") and not step_lines(at, "next")

    # a time with no generation: said, with the nearest record fire times
    later = iso_plus(load["fire_time"], 1)
    out = trail(node, "load", "--at", later).stdout
    assert f"@after: no record has fire time {later}" in step_lines(out, "schedule")[0]
    assert step_lines(out, "schedule")[0].endswith(
        f"nearest record fire times before: {load['fire_time']}")
    assert step_lines(out, "verdict") == [
        "no run: no generation of its parents has fire time T (@after)"]

    # the gate now: fx-rates is fresh, transform has nothing new
    out = trail(node, "load", "--next").stdout
    assert step_lines(out, "parent") == [
        f"transform: nothing new since run {tr['run_id']} (consumed last)",
        f"fx-rates: a success within 1d2h: run {fx} (fire time "
        f"{node.call('run', {'run_id': fx})['fire_time']})"]
    assert step_lines(out, "verdict") == [
        "next generation waits for: transform; fires when transform finishes; runs if every "
        "parent succeeded (trigger_rule all_succeeded)"]

    # with the daemon down: the same, from the state database
    node.terminate()
    res = trail(node, "load", "--next")
    assert "daemon not running; state as of" in res.stderr
    assert step_lines(res.stdout, "verdict") == step_lines(out, "verdict")


def iso_plus(iso: str, seconds: int) -> str:
    from cronrd.schedule import iso_utc, parse_iso
    return iso_utc(parse_iso(iso) + seconds)

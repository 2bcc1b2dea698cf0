"""Integration: dependencies between jobs through a real one-host daemon."""

from __future__ import annotations

import json

import pytest

from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def done(runs, job):
    return [r for r in runs if r["job"] == job and r["state"] == "succeeded"]


def test_after_child_runs_once_per_parent_run_with_its_lineage(node):
    out = node.out / "b.txt"
    node.write_job("a", {"schedule": "@yearly", "command": "true"})
    node.write_job("b", {"schedule": "@after", "depends_on": [{"job": "a"}],
                         "command": f"echo $CRONRD_FIRE_TIME >> {out}"})
    node.start()
    a1 = node.call("run_now", {"job": "a"})["run_id"]
    runs = node.wait_runs(lambda rs: len(done(rs, "b")) == 1, what="b after a")
    (b1,) = [r for r in runs if r["job"] == "b"]
    a_run = node.call("run", {"run_id": a1})
    assert b1["kind"] == "upstream" and b1["fire_time"] == a_run["fire_time"]
    view = node.call("run", {"run_id": b1["run_id"]})
    assert [(x["job"], x["run_id"], x["state"]) for x in view["lineage"]] == [
        ("a", a1, "succeeded")]
    listed = json.loads(node.cli("runs", "b", "--json").stdout)
    assert listed[0]["lineage"] == [{"job": "a", "run_id": a1}]
    # a second parent run, a second child run; none without one
    node.call("run_now", {"job": "a"})
    runs = node.wait_runs(lambda rs: len(done(rs, "b")) == 2, what="second b")
    assert len([r for r in runs if r["job"] == "b"]) == 2
    assert len(out.read_text().split()) == 2
    # a failed parent: the child's record says why it did not run
    node.write_job("a", {"schedule": "@yearly", "command": "exit 3"})
    wait_for(lambda: node.call("job", {"name": "a"})["spec"]["command"] == "exit 3",
             what="the watcher to take the changed job file")
    node.call("run_now", {"job": "a"})
    runs = node.wait_runs(lambda rs: any(r["job"] == "b" and r["state"] == "skipped"
                                         for r in rs), what="b skipped")
    (skipped,) = [r for r in runs if r["job"] == "b" and r["state"] == "skipped"]
    assert skipped["reason"].startswith("upstream_failed:a@")


def test_fan_in_with_parents_at_different_rates_runs_once_per_generation(node):
    node.write_job("fast", {"schedule": "* * * * * *", "command": "true"})
    node.write_job("slow", {"schedule": "*/3 * * * * *", "command": "true"})
    node.write_job("join", {"schedule": "@after", "command": "true",
                            "depends_on": [{"job": "fast"}, {"job": "slow"}]})
    node.start()
    runs = node.wait_runs(lambda rs: len(done(rs, "join")) >= 3, timeout=30,
                          what="three generations of join")
    joins = [r for r in runs if r["job"] == "join"]
    slow = done(runs, "slow")
    # once per generation: never more child runs than runs of the slower parent
    assert len(joins) <= len(slow) + 1
    fires = [r["fire_time"] for r in joins]
    assert len(fires) == len(set(fires))
    used = []
    for j in joins:
        lineage = {x["job"]: x["run_id"] for x in node.call("run", {"run_id": j["run_id"]})[
            "lineage"]}
        assert set(lineage) == {"fast", "slow"}
        used.append(lineage["slow"])
        # its fire time is the newest of the parents' fire times it consumed
        times = [parse_iso(node.call("run", {"run_id": rid})["fire_time"])
                 for rid in lineage.values()]
        assert parse_iso(j["fire_time"]) == max(times)
    assert len(used) == len(set(used))  # no slow run consumed twice


def test_graph_and_scheduled_child_wait(node):
    node.write_job("extract", {"schedule": "@yearly", "command": "true"})
    node.write_job("fx", {"schedule": "@yearly", "command": "true"})
    node.write_job("load", {"schedule": "@after", "command": "true", "depends_on": [
        {"job": "extract"}, {"job": "fx", "within": "1h"}]})
    node.write_job("report", {"schedule": "* * * * * *", "command": "true",
                              "depends_on": [{"job": "load"}], "wait_for_upstream": "1s"})
    node.start()
    # report waits at each fire time, then is skipped with the reason
    runs = node.wait_runs(lambda rs: any(r["job"] == "report" and r["state"] == "skipped"
                                         for r in rs), what="report skipped")
    skipped = [r for r in runs if r["job"] == "report" and r["state"] == "skipped"]
    assert skipped[0]["reason"].startswith("upstream_not_ready:load")
    res = node.cli("graph")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("extract  [@yearly] never ran")
    assert any(line.startswith("`-- load  [@after, all_succeeded]") for line in lines)
    assert any("report" in line for line in lines)
    assert any(line.startswith("fx  ") for line in lines)
    assert "load (see above)" in res.stdout
    dot = node.cli("graph", "load", "--dot").stdout
    assert dot.startswith("digraph cronrd {") and '"extract" -> "load";' in dot
    assert '"fx" -> "load" [label="within 3600s", style=dashed];' in dot
    data = json.loads(node.cli("graph", "report", "--json").stdout)
    assert {j["name"] for j in data["jobs"]} == {"extract", "fx", "load", "report"}
    # extract and fx run: load runs, and a report fire time after it runs too
    node.call("run_now", {"job": "fx"})
    node.wait_runs(lambda rs: len(done(rs, "fx")) == 1, what="fx")
    node.call("run_now", {"job": "extract"})
    node.wait_runs(lambda rs: len(done(rs, "load")) == 1 and len(done(rs, "report")) >= 1,
                   what="load then report")
    bad = node.cli("graph", "nosuch")
    assert bad.returncode == 1 and "no job named 'nosuch'" in bad.stderr


def test_an_after_child_with_concurrency_queue_runs_its_generations_one_at_a_time(node):
    """A parent that runs every second, a child that takes two: each new
    generation waits in the child's queue behind the run in flight (never
    beside it, never skipped as an overlap), with its lineage."""
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.write_job("slowchild", {"schedule": "@after", "depends_on": [{"job": "tick"}],
                                 "command": "sleep 2", "concurrency": "queue"})
    node.start()
    runs = node.wait_runs(
        lambda rs: len(done(rs, "slowchild")) >= 2 and any(
            r["job"] == "slowchild" and r["state"] == "waiting" for r in rs),
        timeout=30, what="two child runs done and one waiting in its queue")
    child = [r for r in runs if r["job"] == "slowchild"]
    assert not [r for r in child if r["state"] == "skipped"], child
    waiting = [r for r in child if r["state"] == "waiting"]
    assert all(r["reason"].startswith("waiting for run ") and
               r["reason"].endswith("concurrency: queue") for r in waiting), waiting
    assert node.call("run", {"run_id": waiting[0]["run_id"]})["lineage"]
    started = sorted((r for r in child if r["started_at"]), key=lambda r: r["run_id"])
    for before, after in zip(started, started[1:]):   # never two at once
        assert before["finished_at"] is not None, (before, after)
        assert parse_iso(after["started_at"]) >= parse_iso(before["finished_at"]), \
            (before, after)


def test_rerun_downstream_reruns_a_diamond_once_each_in_dependency_order(node):
    """a -> b, a -> c, (b, c) -> d: `rerun a --downstream` reruns b and c
    after a, and d once, after both; each as a new attempt of its record."""
    node.write_job("a", {"schedule": "0 0 1 1 *", "timezone": "UTC", "command": "true"})
    for child, parents in (("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])):
        node.write_job(child, {"schedule": "@after", "command": "sleep 0.3",
                               "depends_on": [{"job": p} for p in parents]})
    node.start()
    t = "2026-01-01T00:00:00Z"
    res = node.cli("backfill", "a", "--from", t, "--to", t)
    assert res.returncode == 0, res.stderr
    node.wait_runs(lambda rs: len(done(rs, "d")) == 1, what="the first generation of d")
    dry = node.cli("rerun", "a", "--at", t, "--downstream", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:4] == [
        f"{t}  a  rerun", f"{t}  b  rerun after its parents, if its trigger rule passes",
        f"{t}  c  rerun after its parents, if its trigger rule passes",
        f"{t}  d  rerun after its parents, if its trigger rule passes"]
    assert len(node.runs("a")) == 1                  # a dry run changes nothing
    res = node.cli("rerun", "a", "--at", t, "--downstream")
    assert res.returncode == 0, res.stderr
    assert f"then, downstream: b@{t}, c@{t}, d@{t}" in res.stdout
    runs = node.wait_runs(lambda rs: len(done(rs, "d")) == 2, what="d rerun downstream")
    by = {j: sorted((r for r in runs if r["job"] == j), key=lambda r: r["attempt"])
          for j in "abcd"}
    for j in "abcd":   # one record each (fire time t), two attempts
        assert [(r["fire_time"], r["attempt"]) for r in by[j]] == [(t, 1), (t, 2)], j
        assert by[j][1]["kind"] == "rerun" and by[j][1]["state"] == "succeeded"
    d2 = by["d"][1]
    for j in "bc":     # d's rerun started after both its parents' reruns ended
        assert parse_iso(d2["started_at"]) >= parse_iso(by[j][1]["finished_at"])
    assert parse_iso(by["b"][1]["started_at"]) >= parse_iso(by["a"][1]["finished_at"])
    lineage = {x["job"]: x["run_id"]
               for x in node.call("run", {"run_id": d2["run_id"]})["lineage"]}
    assert lineage == {"b": by["b"][1]["run_id"], "c": by["c"][1]["run_id"]}
    # nothing more follows: no third attempt, no new generation of d
    node.wait_runs(lambda rs: all(r["state"] in ("succeeded",) for r in rs),
                   what="every run ended")
    assert len(node.runs("d")) == 2

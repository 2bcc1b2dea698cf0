"""The vocabulary of placement (decisions/placement.py): which nodes a
job's run_on allows, whatever their health, and which states take runs."""

from __future__ import annotations

from cronrd.decisions.placement import TAKES_RUNS, NodeView, fits
from cronrd.jobspec.model import RunOn


def node(nid: str, *tags: str, healthy: bool = True, state: str = "up") -> NodeView:
    return NodeView(nid, healthy, state, frozenset(tags))


def test_run_on_nodes_allows_only_the_nodes_it_names():
    run_on = RunOn("nodes", ("web1", "db1"))
    assert fits(run_on, node("web1")) and fits(run_on, node("db1"))
    assert not fits(run_on, node("web2"))


def test_run_on_tags_needs_every_tag():
    run_on = RunOn("tags", ("ssd", "eu"))
    assert fits(run_on, node("a", "ssd", "eu", "big"))
    assert not fits(run_on, node("b", "ssd"))
    assert not fits(run_on, node("c"))


def test_any_and_all_allow_every_node_up_or_not():
    for mode in ("any", "all"):
        assert fits(RunOn(mode), node("a", healthy=False, state="draining"))


def test_only_up_and_not_yet_known_members_take_runs():
    assert TAKES_RUNS == {"up", "unknown"}
    assert "draining" not in TAKES_RUNS and "joining" not in TAKES_RUNS


def test_a_worker_takes_no_job_that_beats_a_heartbeat():
    from dataclasses import replace

    from cronrd.decisions.placement import takes
    from cronrd.jobspec import JobSpec
    spec = JobSpec.from_dict({"name": "j", "schedule": "@hourly", "command": "true"})
    worker = replace(node("wk1"), worker=True)
    assert takes(spec, worker) and takes(spec, node("a"))
    beats = replace(spec, heartbeat_timeout=30.0)
    assert not takes(beats, worker) and takes(beats, node("a"))

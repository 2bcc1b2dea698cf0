"""Reads answered from a state database alone (cronrd/runtime/control/reads.py):
the filters of `cronrd runs` and what `cronrd show` adds to a job."""

from __future__ import annotations

import pytest

from cronrd.errors import RequestError, UsageError
from cronrd.ops import requests as R
from cronrd.ops import typed
from cronrd.runtime.control.reads import job_details, job_view, next_fires, runs_listing
from cronrd.state import commands as C
from cronrd.state import queries as Q
from tests.unit.state.test_state import T0, Log


@pytest.fixture
def log():
    log = Log()
    log.put("a", timezone="Europe/Berlin")
    log.put("b", retries={"max": 1, "delay": 600.0, "backoff": 1.0, "max_delay": 600.0,
                          "jitter": 0.0})
    ok = log.fire(T0 + 1, "a")
    log.finish(ok["run_id"])
    bad = log.fire(T0 + 2, "b")
    log.finish(bad["run_id"], state="failed", exit_code=3)
    return log


def listing(log, **args):
    return runs_listing(log.sm.conn, typed.parse(R.ListRuns, args), "UTC", log.index)


def test_runs_filters_by_state_kind_node_and_time(log):
    all_runs = listing(log)["runs"]
    assert [(r["job"], r["state"], r["kind"]) for r in all_runs] == [
        ("b", "assigned", "retry"), ("b", "failed", "scheduled"), ("a", "succeeded", "scheduled")]
    assert [r["job"] for r in listing(log, state="failed")["runs"]] == ["b"]
    assert len(listing(log, state=["failed", "succeeded"])["runs"]) == 2
    assert len(listing(log, state="failed,succeeded")["runs"]) == 2
    assert [r["kind"] for r in listing(log, kind="retry")["runs"]] == ["retry"]
    assert listing(log, node="n2")["runs"] == []
    assert len(listing(log, node="n1")["runs"]) == 3
    assert [r["job"] for r in listing(log, since=T0 + 2)["runs"]] == ["b", "b"]
    assert [r["job"] for r in listing(log, until="2027-01-15T08:00:02Z")["runs"]] == ["a"]
    first = all_runs[0]["run_id"]
    assert len(listing(log, before=first)["runs"]) == 2
    # the job's zone rides along, for --local
    assert {r["job"]: r["timezone"] for r in all_runs} == {"a": "Europe/Berlin", "b": "UTC"}


def test_runs_refuses_unknown_jobs_states_and_kinds(log):
    with pytest.raises(RequestError, match="no job named 'nosuch'"):
        listing(log, job="nosuch")
    with pytest.raises(UsageError, match="unknown state 'done'"):
        listing(log, state="done")
    with pytest.raises(UsageError, match="unknown kind"):
        listing(log, kind="cron")
    with pytest.raises(UsageError, match="since"):
        listing(log, since="yesterday-ish")
    # a job removed from the files keeps its history, and can be asked for
    log.apply(C.RemoveJob(name="a", at=T0 + 5))
    assert [r["job"] for r in listing(log, job="a")["runs"]] == ["a"]


def test_show_details_state_pause_note_next_fires_and_runs(log):
    conn = log.sm.conn
    job = Q.jobs(conn, name="b")[0]
    view = job_view(job, Q.last_run(conn, "b"), "UTC", lambda j, d: None)
    d = job_details(conn, job, view, T0 + 3, 3, [])
    assert d["state"] == "active" and d["pause"] is None
    assert d["next_fires"] == ["2027-01-15T08:00:04Z", "2027-01-15T08:00:05Z",
                               "2027-01-15T08:00:06Z"]
    assert [r["state"] for r in d["recent_runs"]] == ["assigned", "failed"]
    assert [r["kind"] for r in d["active_runs"]] == ["retry"]
    log.apply(C.SetPaused(name="b", paused=True, at=T0 + 4, note="why", by="me"))
    job = Q.jobs(conn, name="b")[0]
    d = job_details(conn, job, view, T0 + 5, 3, ["f.yaml:2:1: bad"])
    assert d["state"] == "paused" and d["pause"]["note"] == "why" and d["next_fires"] == []
    assert d["last_good"] and d["file_problems"] == ["f.yaml:2:1: bad"]
    log.apply(C.SetPaused(name="", paused=True, at=T0 + 6))
    job = Q.jobs(conn, name="a")[0]
    d = job_details(conn, job, view | {"schedule": "* * * * * *"}, T0 + 7, 3, [])
    assert d["state"] == "paused (maintenance)" and d["maintenance"] is not None


def test_next_fires_of_reboot_and_bad_schedules_are_empty():
    assert next_fires("@reboot", "UTC", T0, 5) == []
    assert next_fires("not a schedule", "UTC", T0, 5) == []
    assert next_fires("0 0 1 1 *", "UTC", T0, 2) == ["2028-01-01T00:00:00Z",
                                                    "2029-01-01T00:00:00Z"]


def test_pools_view_shows_slots_in_use_and_where_this_nodes_config_differs():
    from cronrd.config import parse_config
    from cronrd.runtime.control.reads import pools_view
    from cronrd.state import commands as C
    from tests.unit.state.test_state import T0, Log
    log = Log()
    log.apply(C.SetPools(pools=[["db", 1, "cluster"], ["gpu", 2, "node"]], at=T0))
    log.put("a", pool="db")
    log.put("g", pool="gpu")
    log.fire(T0 + 1, "a")
    log.fire(T0 + 1, "a", target="n2")
    log.fire(T0 + 1, "g", node="n1")
    cfg = parse_config({"node_id": "n1", "pools": {"db": {"slots": 1}, "etl": {"slots": 3}}})
    view = {p["pool"]: p for p in pools_view(log.sm.conn, cfg)["pools"]}
    assert view["db"] == {"pool": "db", "slots": 1, "scope": "cluster", "defined": True,
                          "in_use": 1, "waiting": 1, "runs": [1]}
    assert view["gpu"]["by_node"] == {"n1": 1} and view["gpu"]["this_node_config"] is None
    assert view["etl"]["defined"] is False and view["etl"]["this_node_config"] == {
        "slots": 3, "scope": "cluster"}

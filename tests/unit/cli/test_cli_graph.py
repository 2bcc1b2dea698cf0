"""`cronrd graph`: the text tree (fan-in shown once, a cycle still shown),
Graphviz DOT and JSON, against a fake daemon."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cronrd.cli import main


def job(name, schedule="@after", rule="all_succeeded", parents=(), last=None, missing=False):
    return {"name": name, "missing": missing, "schedule": None if missing else schedule,
            "trigger_rule": rule if parents else None,
            "parents": [p if isinstance(p, dict) else {"job": p} for p in parents],
            "last_run": last}


GRAPH = {
    "jobs": [
        job("extract", "10 * * * *", last={"run_id": 1, "state": "succeeded",
                                           "fire_time": "2027-01-15T08:10:00Z", "reason": None}),
        job("fx-rates", "0 6 * * *"),
        job("load", parents=["transform", {"job": "fx-rates", "within": 93600.0}],
            last={"run_id": 3, "state": "skipped", "fire_time": "2027-01-15T08:10:00Z",
                  "reason": "upstream_failed:transform@2027-01-15T08:10:00Z"}),
        job("transform", parents=["extract"]),
    ],
    "edges": [["extract", "transform"], ["fx-rates", "load"], ["transform", "load"]],
    "truncated": False,
}


def cli(d, *argv):
    return CliRunner().invoke(main, ["--socket", d.path, *argv], catch_exceptions=False)


def test_text_tree_shows_a_fan_in_once(daemon):
    d = daemon(graph=GRAPH)
    res = cli(d, "graph")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [
        "extract  [10 * * * *] succeeded 2027-01-15T08:10:00Z",
        "`-- transform  [@after, all_succeeded] never ran",
        "    `-- load  [@after, all_succeeded] skipped 2027-01-15T08:10:00Z "
        "(upstream_failed:transform@2027-01-15T08:10:00Z)",
        "fx-rates  [0 6 * * *] never ran",
        "`-- load (see above)",
    ]
    assert d.requests[-1]["args"]["job"] is None


def test_one_job_is_marked_and_asked_for(daemon):
    d = daemon(graph=GRAPH)
    res = cli(d, "graph", "transform")
    assert "`-- transform < " in res.output
    assert d.requests[-1]["args"]["job"] == "transform"


def test_dot(daemon):
    d = daemon(graph=GRAPH)
    out = cli(d, "graph", "--dot").output
    assert out.startswith("digraph cronrd {\n")
    assert '"extract" [label="extract\\n10 * * * *\\nsucceeded", fillcolor=palegreen];' in out
    assert '"fx-rates" -> "load" [label="within 93600s", style=dashed];' in out
    assert '"transform" -> "load";' in out and out.rstrip().endswith("}")


def test_json_and_empty_and_cycle(daemon):
    d = daemon(graph=GRAPH)
    assert json.loads(cli(d, "graph", "--json").output) == GRAPH
    d = daemon(graph={"jobs": [], "edges": [], "truncated": False})
    assert cli(d, "graph").output.strip() == "no job has depends_on"
    cyc = {"jobs": [job("a", parents=["b"]), job("b", parents=["a"])],
           "edges": [["a", "b"], ["b", "a"]], "truncated": False}
    d = daemon(graph=cyc)
    lines = cli(d, "graph").output.splitlines()
    assert lines[0].startswith("a  [@after") and lines[-1] == "    `-- a (see above)"

"""`cronrd explain` in the CLI (cronrd/cli.py) against a fake daemon: what
it asks, how it prints the trail, --json, and its usage errors."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cronrd.cli import main

TRAIL = {"job": "backup", "at": "2026-03-29T01:00:00Z", "local": "2026-03-29 03:00:00 CEST",
         "timezone": "Europe/Berlin", "future": False, "now": "2026-04-01T00:00:00Z",
         "steps": [{"step": "schedule", "text": "30 2 * * * in Europe/Berlin: ... moved",
                    "fire_time": True},
                   {"step": "maintenance", "text": "off"},
                   {"step": "record", "text": "run 41 attempt 1 on node b: failed exit 3"},
                   {"step": "record", "text": "run 42 attempt 2 on node b: failed exit 3"}],
         "verdict": {"outcome": "ran", "text": "ran (failed after 2 attempts)"}}


def run(*argv: str):
    return CliRunner().invoke(main, list(argv), catch_exceptions=False)


def test_explain_asks_for_the_time_and_prints_one_step_a_line(daemon):
    d = daemon(explain=TRAIL)
    res = run("--socket", d.path, "explain", "backup", "--at", "2026-03-29T02:30", "--local")
    assert res.exit_code == 0, res.output
    assert d.requests[0] == {"cmd": "explain", "args": {"job": "backup",
                                                        "at": "2026-03-29T02:30",
                                                        "local": True}}
    assert res.output.splitlines() == [
        "explain     backup at 2026-03-29T01:00:00Z (2026-03-29 03:00:00 CEST, "
        "Europe/Berlin)",
        "schedule    30 2 * * * in Europe/Berlin: ... moved",
        "maintenance off",
        "record      run 41 attempt 1 on node b: failed exit 3",
        "record      run 42 attempt 2 on node b: failed exit 3",
        "verdict     ran (failed after 2 attempts)"]


def test_explain_next_and_json(daemon):
    d = daemon(explain=dict(TRAIL, future=True))
    res = run("--socket", d.path, "explain", "backup", "--next", "--json")
    assert res.exit_code == 0
    assert d.requests[0]["args"] == {"job": "backup", "next": True}
    assert json.loads(res.output)["verdict"]["outcome"] == "ran"
    res = run("--socket", d.path, "explain", "backup", "--next")
    assert res.output.splitlines()[0].endswith("- still to come")
    run("--socket", d.path, "explain", "backup", "--consistent")
    assert d.requests[-1]["args"] == {"job": "backup", "consistent": True}


def test_explain_usage_errors_exit_2_before_asking(daemon):
    d = daemon(explain=TRAIL)
    res = run("--socket", d.path, "explain", "backup", "--at", "2026-03-29T01:00:00Z",
              "--next")
    assert res.exit_code == 2 and "not both" in res.output
    res = run("--socket", d.path, "explain", "backup", "--local")
    assert res.exit_code == 2 and "give --at too" in res.output
    assert d.requests == []


def test_explain_says_the_daemons_refusal(daemon):
    d = daemon(explain={"__error__": "no job named 'nosuch'; `cronrd jobs` lists the known "
                                     "jobs", "code": 1})
    res = run("--socket", d.path, "explain", "nosuch")
    assert res.exit_code == 1 and "no job named 'nosuch'" in res.output


def test_explain_an_after_childs_next_generation_has_no_time(daemon):
    gate = dict(TRAIL, job="load", at=None, local=None, future=True, timezone="UTC",
                steps=[{"step": "parent", "text": "transform: no outcome yet"}],
                verdict={"outcome": "waits_for_upstream",
                         "text": "next generation waits for: transform"})
    d = daemon(explain=gate)
    res = run("--socket", d.path, "explain", "load", "--next")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [
        "explain     load: its next generation (now 2026-04-01T00:00:00Z, UTC) - still to "
        "come",
        "parent      transform: no outcome yet",
        "verdict     next generation waits for: transform"]

"""`cronrd backfill --dry-run` prints a capped answer: the first and last
lines the daemon sent, the count of those left out between them, and the
counts of the whole range (against a fake daemon, tests/support)."""

from __future__ import annotations

from click.testing import CliRunner

from cronrd.cli import main


def run(*argv: str):
    return CliRunner().invoke(main, list(argv), catch_exceptions=False)


def minute(i: int) -> str:
    return f"2027-01-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00Z"


def test_a_dry_run_prints_the_omitted_count_between_the_first_and_last_lines(daemon):
    head = [[minute(i), "create"] for i in range(50)]
    tail = [[minute(i), "create"] for i in range(9950, 10000)]
    d = daemon(backfill={"job": "j", "total": 10000, "limit": 1, "concurrency": "forbid",
                         "counts": {"create": 9990, "reprocess": 0, "skip": 10},
                         "lines": head + tail, "omitted": 9900, "omitted_after": 50})
    res = run("--socket", d.path, "backfill", "j", "--from", "2027-01-01T00:00:00Z",
              "--to", "2027-01-07T22:39:00Z", "--dry-run")
    assert res.exit_code == 0, res.output
    out = res.output.splitlines()
    assert out[0] == f"{minute(0)}  create"
    assert out[49] == f"{minute(49)}  create"
    assert out[50] == "... 9,900 more fire times ..."
    assert out[51] == f"{minute(9950)}  create"
    assert out[100] == f"{minute(9999)}  create"
    # the summary counts the whole range, not the lines shown
    assert out[101].startswith("10000 fire time(s) of j: 9990 create, 10 skip; at most 1")
    assert len(out) == 102


def test_an_answer_with_every_line_prints_no_gap(daemon):
    lines = [[minute(i), "create"] for i in range(3)] + [[minute(3), "skip: running"]]
    d = daemon(backfill={"job": "j", "total": 4, "limit": 1, "concurrency": "forbid",
                         "lines": lines})  # an older daemon: no counts, nothing omitted
    res = run("--socket", d.path, "backfill", "j", "--from", "2027-01-01T00:00:00Z",
              "--to", "2027-01-01T00:03:00Z", "--dry-run")
    assert res.exit_code == 0, res.output
    out = res.output.splitlines()
    assert out[:4] == [f"{minute(i)}  {line}" for i, (_t, line) in enumerate(lines)]
    assert out[4].startswith("4 fire time(s) of j: 3 create, 1 skip;")
    assert "more fire time" not in res.output

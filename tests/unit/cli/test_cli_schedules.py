"""`cronrd next` and `cronrd validate` read cron expressions as cron does.

Expected times are worked out by hand from the 2026 calendar (Jan 1 is a
Thursday; Jan 31 and Feb 28 are Saturdays, May 31 a Sunday; the first Mondays
are Jan 5, Feb 2, Mar 2, Apr 6, May 4), not taken from cronrd's output.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cronrd.cli import main


def cli(*argv: str):
    return CliRunner().invoke(main, list(argv), env={"CRONRD_CONFIG": None}, catch_exceptions=False)


def next_times(expr: str, count: int, after: str = "2026-01-01T00:00:00Z") -> list[str]:
    res = cli("next", expr, "-n", str(count), "--timezone", "UTC", "--after", after)
    assert res.exit_code == 0, res.output
    return [line.split()[0] for line in res.stdout.splitlines()]


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("0 0 * * 5L", ["2026-01-30", "2026-02-27", "2026-03-27", "2026-04-24", "2026-05-29"]),
        ("0 0 LW * *", ["2026-01-30", "2026-02-27", "2026-03-31", "2026-04-30", "2026-05-29"]),
        ("0 0 */100 * *", ["2026-02-01", "2026-03-01", "2026-04-01", "2026-05-01", "2026-06-01"]),
        ("0 0 * * 5#2", ["2026-01-09", "2026-02-13", "2026-03-13", "2026-04-10", "2026-05-08"]),
        ("0 0 L * *", ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30", "2026-05-31"]),
    ],
)
def test_next_prints_the_days_cron_would_run(expr, expected):
    assert next_times(expr, 5) == [f"{d}T00:00:00Z" for d in expected]


def test_next_first_monday_of_the_month():
    assert next_times("1 1 */100,1-7 * MON", 5) == [
        "2026-01-05T01:01:00Z", "2026-02-02T01:01:00Z", "2026-03-02T01:01:00Z",
        "2026-04-06T01:01:00Z", "2026-05-04T01:01:00Z"]


def test_next_step_larger_than_the_range():
    assert next_times("*/90 * * * *", 3) == [
        "2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"]


@pytest.mark.parametrize(
    "expr, message",
    [
        ("5L * * * *", "minute field '5L': cannot read '5L': L, W and # are only read in the day fields"),
        ("0 0 * * LW", "day-of-week field 'LW': cannot read 'LW'"),
        ("*/0 * * * *", "minute field '*/0': step '0' must be a whole number of 1 or more"),
    ],
)
def test_next_refuses_what_cron_refuses(expr, message):
    res = cli("next", expr, "--timezone", "UTC")
    assert res.exit_code == 1
    assert message in res.stderr
    assert res.stdout == ""


def test_validate_accepts_the_forms_and_points_at_a_misplaced_one(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "jobs:\n"
        "  - name: last-friday\n"
        "    schedule: \"0 0 * * 5L\"\n"
        "    command: \"true\"\n"
        "  - name: last-weekday\n"
        "    schedule: \"0 0 LW * *\"\n"
        "    command: \"true\"\n"
        "  - name: first-monday\n"
        "    schedule: \"1 1 */100,1-7 * MON\"\n"
        "    command: \"true\"\n")
    res = cli("validate", "--no-permissions", str(good))
    assert res.exit_code == 0, res.output
    assert "3 job(s) valid" in res.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("schedule: \"0 0 * * LW\"\ncommand: \"true\"\n")
    res = cli("validate", "--no-permissions", str(bad))
    assert res.exit_code == 1
    # line 1; the value starts at column 11 (its quote), LW 8 characters into the expression
    assert f"{bad}:1:20: invalid schedule '0 0 * * LW': day-of-week field 'LW': cannot read 'LW'" in res.stdout
    assert "belong in the day-of-month field" in res.stdout

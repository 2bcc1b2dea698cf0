"""The bounds of a backfill request, as plain values (decisions/backfill.py):
how many fire times a request may take, why more are refused, and the
excerpt and counts a dry run answers with."""

from __future__ import annotations

from cronrd.decisions import backfill as D


def test_a_request_counts_up_to_its_limit_and_says_more_than():
    assert D.fire_limit(False) == D.MAX_FIRES == 10_000
    assert D.fire_limit(True) == D.HARD_MAX_FIRES == 1_000_000
    msg = D.over_limit(False)
    assert msg.startswith("more than 10000 fire times;")
    assert "narrow the range" in msg and "an admin passes --force" in msg
    assert "split the range" in D.over_limit(True) and "1000000" in D.over_limit(True)


def test_a_dry_run_shows_the_first_and_last_lines_and_counts_every_one():
    lines = [(t, D.decide(None if t % 3 else D.Record(1, "succeeded"), "missing"))
             for t in range(1000)]
    shown, omitted = D.excerpt(lines)
    n = D.DRY_RUN_LINES
    assert shown == lines[:n] + lines[-n:] and omitted == 1000 - 2 * n
    assert D.excerpt(lines[:2 * n]) == (lines[:2 * n], 0)
    assert D.counts(lines) == {"create": 666, "reprocess": 0, "skip": 334}
    assert D.counts([]) == {"create": 0, "reprocess": 0, "skip": 0}

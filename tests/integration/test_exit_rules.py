"""Integration (issue 35): exit-code rules through a real daemon. A listed
exit code succeeds, a code in not_on_exit_codes is not retried, a plain
failure is retried until retries.max, and each run's reason (in `runs`
and in `explain`) names the rule that decided."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def first_of(runs: list[dict], **want) -> dict | None:
    for r in sorted(runs, key=lambda r: (r["fire_time"], r["attempt"])):
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def test_exit_codes_decide_success_and_retries_and_explain_names_the_rule(node):
    node.write_job("codes", {"schedule": "* * * * * *", "command": "exit 3",
                             "success_exit_codes": [0, 3]})
    node.write_job("usage", {"schedule": "* * * * * *", "command": "exit 65",
                             "retries": {"max": 3, "delay": "1s",
                                         "not_on_exit_codes": [2, "64-78"]}})
    node.write_job("flaky", {"schedule": "@yearly", "command": "exit 1",
                             "retries": {"max": 1, "delay": "1s", "retry_on": ["failure"]}})
    node.start()

    runs = node.wait_runs(lambda rs: first_of(rs, state="succeeded") is not None, job="codes")
    ok = first_of(runs, state="succeeded")
    assert ok["exit_code"] == 3
    assert "exit 3 counts as success (success_exit_codes: 0, 3)" in ok["reason"]

    runs = node.wait_runs(lambda rs: first_of(rs, state="failed") is not None, job="usage")
    bad = first_of(runs, state="failed")
    assert bad["exit_code"] == 65
    assert bad["reason"].endswith("not retried: exit 65 is in retries.not_on_exit_codes "
                                  "(2, 64-78)")
    # never a second attempt of that fire time
    assert [r for r in node.runs("usage") if r["fire_time"] == bad["fire_time"]
            and r["attempt"] > 1] == []
    out = node.cli("explain", "usage", "--at", bad["fire_time"], "--json")
    assert out.returncode == 0, out.stderr
    records = [s["text"] for s in json.loads(out.stdout)["steps"] if s["step"] == "record"]
    assert any("exit 65" in t and "not_on_exit_codes" in t for t in records), records

    res = node.cli("run-now", "flaky")
    assert res.returncode == 0, res.stderr
    runs = node.wait_runs(lambda rs: first_of(rs, attempt=2, state="failed") is not None,
                          job="flaky")
    one, two = first_of(runs, attempt=1), first_of(runs, attempt=2)
    assert one["state"] == "failed" and two["kind"] == "retry"
    assert one["reason"].endswith("retried (retries.retry_on lists failure): attempt 2 of 2 "
                                  "follows")
    assert two["reason"].endswith("not retried: retries.max 1 used")
    assert first_of(node.runs("flaky"), attempt=3) is None

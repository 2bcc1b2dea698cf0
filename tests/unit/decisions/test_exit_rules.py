"""decisions/exit_rules.py: which rule decides a run's state and retry."""

from __future__ import annotations

from cronrd.decisions.exit_rules import judge
from cronrd.jobspec.model import JobSpec, RetryPolicy


def job(**over) -> JobSpec:
    return JobSpec(name="j", schedule="* * * * *", command="true", **over)


def test_a_job_without_rules_keeps_the_nodes_word_and_says_nothing_more():
    v = judge(job(), "failed", 1, None, 1)
    assert (v.state, v.retry, v.rule) == ("failed", False, "")
    v = judge(job(), "succeeded", 0, None, 1)
    assert (v.state, v.retry, v.rule) == ("succeeded", False, "")


def test_success_exit_codes_turn_a_listed_exit_into_success_and_say_so():
    spec = job(success_exit_codes=(0, 3))
    v = judge(spec, "failed", 3, None, 1)
    assert (v.state, v.retry) == ("succeeded", False)
    assert "exit 3 counts as success (success_exit_codes: 0, 3)" == v.rule
    # a code not listed stays a failure, and the reason says why
    v = judge(spec, "failed", 4, None, 1)
    assert v.state == "failed" and "exit 4 is not in success_exit_codes (0, 3)" in v.rule


def test_a_list_without_0_makes_exit_0_a_failure():
    v = judge(job(success_exit_codes=(1,)), "succeeded", 0, None, 1)
    assert v.state == "failed" and "exit 0 is not in success_exit_codes (1)" in v.rule


def test_a_signal_is_never_a_listed_exit():
    v = judge(job(success_exit_codes=(0, 9)), "failed", None, 9, 1)
    assert v.state == "failed"


def test_not_on_exit_codes_stops_retries_naming_the_rule():
    spec = job(retries=RetryPolicy(max=2, not_on_exit_codes=(2, *range(64, 79))))
    v = judge(spec, "failed", 65, None, 1)
    assert (v.state, v.retry) == ("failed", False)
    assert v.rule == "not retried: exit 65 is in retries.not_on_exit_codes (2, 64-78)"
    v = judge(spec, "failed", 1, None, 1)
    assert v.retry and v.rule == "retried (retries.retry_on lists failure): attempt 2 of 3 follows"


def test_retry_on_chooses_between_failures_and_timeouts():
    spec = job(retries=RetryPolicy(max=2, retry_on=("timeout",)))
    v = judge(spec, "failed", 1, None, 1)
    assert not v.retry and v.rule == ("not retried: retries.retry_on does not list failure "
                                      "(it lists timeout)")
    v = judge(spec, "timed_out", None, 15, 1)
    assert v.retry and "retry_on lists timeout" in v.rule
    # a timeout's signal is not an exit code: not_on_exit_codes does not apply
    spec = job(retries=RetryPolicy(max=1, not_on_exit_codes=(143,)))
    assert judge(spec, "timed_out", 143, None, 1).retry


def test_retries_max_used_up_is_said():
    spec = job(retries=RetryPolicy(max=2))
    assert judge(spec, "failed", 1, None, 2).retry
    v = judge(spec, "failed", 1, None, 3)
    assert not v.retry and v.rule == "not retried: retries.max 2 used"


def test_a_success_is_never_retried_even_if_its_code_is_in_not_on_exit_codes():
    spec = job(success_exit_codes=(0, 2), retries=RetryPolicy(max=3, not_on_exit_codes=(2,)))
    v = judge(spec, "failed", 2, None, 1)
    assert (v.state, v.retry) == ("succeeded", False)


def test_cancelled_and_lost_are_not_judged():
    spec = job(retries=RetryPolicy(max=3), success_exit_codes=(0, 1))
    for state in ("cancelled", "lost", "skipped"):
        v = judge(spec, state, 1, None, 1)
        assert (v.state, v.retry, v.rule) == (state, False, "")

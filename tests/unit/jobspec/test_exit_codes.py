"""jobspec/exit_codes.py: success_exit_codes and the retry rules in job files."""

from __future__ import annotations

from cronrd.jobspec import parse_job_text
from cronrd.jobspec.exit_codes import codes_text
from cronrd.jobspec.model import JobSpec


def one(body: str):
    text = "jobs:\n  - name: j\n    schedule: '* * * * *'\n    command: 'true'\n" + body
    res = parse_job_text(text, "/etc/cronrd.d/j.yaml")
    return res.jobs, [str(p) for p in res.problems]


def test_codes_and_ranges_are_read_sorted_and_merged():
    jobs, problems = one("    success_exit_codes: [3, 0, 64-66, 65]\n"
                         "    retries: {max: 2, retry_on: [timeout, failure], "
                         "not_on_exit_codes: [2, 64-78]}\n")
    assert problems == []
    j = jobs[0]
    assert j.success_exit_codes == (0, 3, 64, 65, 66)
    assert j.retries.retry_on == ("failure", "timeout")
    assert j.retries.not_on_exit_codes == (2, *range(64, 79))


def test_bad_codes_name_the_line_the_column_and_the_shape():
    _, problems = one("    success_exit_codes: [0, 256, 9-3, x]\n")
    assert len(problems) == 3
    assert problems[0].startswith("/etc/cronrd.d/j.yaml:5:")
    assert "(got the number 256)" in problems[0]
    assert "range A-B with A <= B" in problems[1]
    _, problems = one("    success_exit_codes: []\n")
    assert "must be a non-empty list of exit codes" in problems[0]


def test_retry_on_takes_only_failure_and_timeout():
    _, problems = one("    retries: {max: 1, retry_on: [lost]}\n")
    assert "must be one of failure, timeout (got 'lost'); a lost run is retried by " \
           "on_node_loss" in problems[0]


def test_a_bare_on_key_is_refused_as_yaml_reads_it():
    _, problems = one("    retries: {max: 1, on: [1]}\n")
    assert "YAML reads as the boolean true" in problems[0]


def test_the_definition_round_trips_and_a_job_without_them_keeps_its_digest():
    jobs, _ = one("    success_exit_codes: [0, 3]\n    retries: {max: 1, not_on_exit_codes: [2]}\n")
    j = jobs[0]
    assert JobSpec.from_dict(j.to_dict()) == j.__class__(**{**j.__dict__, "source": "", "line": 0})
    plain = JobSpec(name="j", schedule="* * * * *", command="true")
    d = plain.to_dict()
    assert "success_exit_codes" not in d and set(d["retries"]) == {
        "max", "delay", "backoff", "max_delay", "jitter"}


def test_codes_text_shows_runs_as_ranges():
    assert codes_text([0, 3, 64, 65, 66, 67, 9, 10]) == "0, 3, 9, 10, 64-67"
    assert codes_text([]) == ""

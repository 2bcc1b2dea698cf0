"""The job field ``triggers:`` (jobspec/fields.py): the webhooks that start a job."""

from __future__ import annotations

from cronrd.jobspec import JobSpec, parse_job_text

BASE = 'schedule: "0 3 * * *"\ncommand: /bin/true\n'


def problems(text: str) -> list[str]:
    return [str(p) for p in parse_job_text(BASE + text, "/etc/cronrd.d/j.yaml").problems]


def test_triggers_are_kept_sorted_in_the_definition():
    [spec] = parse_job_text(BASE + "triggers: [deploy, build]\n", "j.yaml").jobs
    assert spec.triggers == ("build", "deploy")
    assert spec.to_dict()["triggers"] == ["build", "deploy"]
    assert JobSpec.from_dict(spec.to_dict(), spec.source, spec.line) == spec


def test_a_job_without_triggers_keeps_its_digest():
    [spec] = parse_job_text(BASE, "j.yaml").jobs
    assert "triggers" not in spec.to_dict() and spec.triggers == ()


def test_bad_triggers_are_errors_at_their_line_and_column():
    assert problems("triggers: deploy\n") == [
        "/etc/cronrd.d/j.yaml:3:11: triggers must be a non-empty list of hook names, e.g. "
        "triggers: [deploy] (the daemon config's hooks:) (got 'deploy')"]
    assert problems("triggers: []\n")[0].startswith("/etc/cronrd.d/j.yaml:3:11: triggers "
                                                    "must be a non-empty list")
    assert problems("triggers: [ok, 'no good']\n")[0].startswith(
        "/etc/cronrd.d/j.yaml:3:16: each entry of triggers must be a hook name")
    assert problems("triggers: [a, a]\n") == [
        "/etc/cronrd.d/j.yaml:3:15: hook 'a' is listed twice in triggers; remove one"]
    assert "did you mean 'triggers'" in problems("trigers: [a]\n")[0]

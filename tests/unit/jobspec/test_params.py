"""params: in job files (short and long forms, every problem with its
position), the canonical digest, and `run-now --param` values."""

from __future__ import annotations

import pytest

from cronrd.errors import UsageError
from cronrd.jobspec import JobSpec, Param, parse_job_text
from cronrd.jobspec.params import check_run_params, env_name, run_env

BASE = 'schedule: "0 3 * * *"\ncommand: /bin/true\n'


def spec(text: str) -> JobSpec:
    result = parse_job_text(BASE + text, "job.yaml")
    assert result.problems == (), [str(p) for p in result.problems]
    return result.jobs[0]


def problems(text: str) -> list[str]:
    return [str(p) for p in parse_job_text(BASE + text, "job.yaml").problems]


def test_short_form_takes_the_type_of_its_default():
    s = spec('params:\n  day: "2026-01-01"\n  limit: 5\n  ratio: 0.25\n  dry_run: false\n'
             '  note:\n')
    assert s.params == (
        Param("day", "string", "2026-01-01"), Param("dry_run", "bool", False),
        Param("limit", "int", 5), Param("note", "string", None),
        Param("ratio", "float", 0.25))


def test_long_form_with_every_key():
    s = spec("params:\n"
             "  mode: {type: enum, values: [fast, slow], default: slow, description: How}\n"
             "  target:\n    type: string\n    required: true\n"
             "  retries: {type: float, default: 3}\n")
    assert s.params == (
        Param("mode", "enum", "slow", ("fast", "slow"), False, "How"),
        Param("retries", "float", 3.0),
        Param("target", "string", None, (), True))


def test_values_alone_make_an_enum():
    assert spec("params:\n  env: {values: [dev, prod]}\n").params == (
        Param("env", "enum", None, ("dev", "prod")),)


@pytest.mark.parametrize("text,expected", [
    ("params: 5\n", "job.yaml:3:9: params must be a mapping of NAME: default-value"),
    ("params:\n  9lives: 1\n", "job.yaml:4:3: invalid parameter name '9lives'"),
    ("params:\n  day: 1\n  DAY: 2\n", "job.yaml:5:3: parameters 'day' and 'DAY' are both "
                                      "CRONRD_PARAM_DAY in the environment"),
    ("params:\n  day: 2026-01-01\n", "job.yaml:4:8: params.day must be a default value"),
    ("params:\n  day: [a, b]\n", "job.yaml:4:8: params.day must be a default value"),
    ("params:\n  n: {type: integer}\n", "job.yaml:4:13: params.n.type must be one of string, "
                                        "int, float, bool, enum"),
    ("params:\n  n: {type: int, default: x}\n", "job.yaml:4:27: params.n.default must be a "
                                                "whole number for an int parameter (got 'x')"),
    ("params:\n  n: {type: string, default: 5}\n", "job.yaml:4:30: params.n.default must be a "
                                                   "string for a string parameter"),
    ("params:\n  n: {type: bool, default: 1}\n", "job.yaml:4:28: params.n.default must be true "
                                                 "or false"),
    ("params:\n  m: {type: enum}\n", "job.yaml:4:13: params.m: an enum needs values:"),
    ("params:\n  m: {values: [a, b], default: c}\n", "job.yaml:4:32: params.m.default must be "
                                                     "one of its values: a, b (got 'c')"),
    ("params:\n  m: {values: [a, a]}\n", "job.yaml:4:19: params.m.values lists 'a' twice"),
    ("params:\n  m: {values: []}\n", "job.yaml:4:15: params.m.values must be a non-empty list"),
    ("params:\n  m: {type: int, values: [a]}\n", "job.yaml:4:18: params.m.values is for type: "
                                                 "enum"),
    ("params:\n  m: {required: true, default: a}\n", "job.yaml:4:17: params.m is required and "
                                                     "has a default"),
    ("params:\n  m: {required: yes please}\n", "job.yaml:4:17: params.m.required must be true "
                                               "or false"),
    ("params:\n  m: {defualt: 1}\n", "job.yaml:4:7: unknown key 'defualt' in params.m "
                                     "(did you mean 'default'?)"),
])
def test_bad_params_are_reported_where_they_are(text, expected):
    found = problems(text)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found[0]


def test_a_job_without_params_keeps_its_digest():
    plain = spec("")
    assert "params" not in plain.to_dict()
    # the digest cronrd computed for this job before params: existed
    assert plain.digest() == "c80fe5ab77a189f9f4b3533b7020ac724deba1265f46260d2dfb1d8d8ac592fc"
    with_params = spec("params:\n  n: 1\n")
    assert with_params.digest() != plain.digest()
    assert JobSpec.from_dict(plain.to_dict()).digest() == plain.digest()


def test_params_survive_the_canonical_round_trip():
    s = spec("params:\n  mode: {values: [a, b], default: a}\n  r: 1.5\n  d: true\n")
    again = JobSpec.from_dict(s.to_dict(), source=s.source, line=s.line)
    assert again == s and again.digest() == s.digest()


PARAMS = (Param("day", "string", "today"), Param("dry", "bool", False),
          Param("mode", "enum", "fast", ("fast", "slow")), Param("n", "int", 1),
          Param("r", "float", 0.5), Param("who", "string", None, (), True))


def test_run_values_are_checked_and_made_canonical():
    got = check_run_params("j", PARAMS, {"n": "+7", "r": "2", "dry": "Yes", "mode": "slow",
                                          "who": "me"})
    assert got == {"n": "7", "r": "2.0", "dry": "true", "mode": "slow", "who": "me"}


@pytest.mark.parametrize("given,words", [
    ({"who": "x", "nope": "1"}, "job 'j' has no parameter 'nope'; its parameters: day, dry, "
                                "mode, n, r, who"),
    ({"who": "x", "n": "1.5"}, "--param n='1.5': parameter 'n' of job 'j' is a whole number; "
                               "give a whole number such as 42"),
    ({"who": "x", "mode": "quick"}, "parameter 'mode' of job 'j' is an enum (fast, slow); give "
                                    "one of fast, slow"),
    ({"who": "x", "dry": "maybe"}, "give true or false"),
    ({"who": "x", "r": "nan"}, "give a finite number"),
    ({}, "job 'j' needs --param who=VALUE (required)"),
])
def test_bad_run_values_are_usage_errors(given, words):
    with pytest.raises(UsageError) as exc:
        check_run_params("j", PARAMS, given)
    assert words in str(exc.value)


def test_env_has_every_param_with_the_run_value_or_the_default():
    assert run_env(PARAMS, {"n": "9"}) == {
        "CRONRD_PARAM_DAY": "today", "CRONRD_PARAM_DRY": "false", "CRONRD_PARAM_MODE": "fast",
        "CRONRD_PARAM_N": "9", "CRONRD_PARAM_R": "0.5", "CRONRD_PARAM_WHO": ""}
    assert env_name("batch_size") == "CRONRD_PARAM_BATCH_SIZE"

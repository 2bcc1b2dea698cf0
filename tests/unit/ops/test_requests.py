"""The typed requests (``cronrd.ops.requests``): each parses what its
clients send, with the bounds the handlers always held."""

from __future__ import annotations

import dataclasses

import pytest

from cronrd.errors import UsageError
from cronrd.ops import requests as R
from cronrd.ops import typed


def test_every_request_is_frozen_and_registered_under_its_op():
    for op, cls in R.REQUESTS.items():
        assert cls.OP == op
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        assert typed.schema(cls)["type"] == "object"  # every field has a schema


def test_list_runs_takes_comma_lists_and_either_time_form():
    req = typed.parse(R.ListRuns, {"state": "failed,lost", "kind": ["manual"],
                                   "since": "2026-01-01T00:00:00Z", "until": 1767312000})
    assert req.state == ["failed", "lost"] and req.kind == ["manual"]
    assert (req.since, req.until, req.limit) == (1767225600.0, 1767312000.0, 50)


@pytest.mark.parametrize("cls, args, message", [
    (R.ListJobs, {"limit": 0}, f"limit must be 1 to {R.MAX_PAGE}"),
    (R.ListJobs, {"match": "*" * (R.MAX_PATTERN + 1)}, "argument 'match' is longer"),
    (R.ListRuns, {"limit": R.MAX_RUNS + 1}, f"limit must be between 1 and {R.MAX_RUNS}"),
    (R.ListRuns, {"kind": "sometimes"}, "unknown kind 'sometimes'"),
    (R.ShowJob, {}, "missing argument 'name'"),
    (R.ShowJob, {"name": "a", "next": 101}, "next must be 0 to 100"),
    (R.ShowRun, {"run_id": "7"}, "argument 'run_id' must be an integer"),
])
def test_out_of_bounds_arguments_are_refused(cls, args, message):
    with pytest.raises(UsageError, match=message.replace("*", r"\*")):
        typed.parse(cls, args)


def test_pause_and_resume_share_their_arguments_and_the_note_bound():
    assert typed.parse(R.ResumeJob, {"all": True}) == R.ResumeJob(all=True)
    with pytest.raises(UsageError, match="the note is longer than 1000 characters; say it "
                                         "shorter"):
        typed.parse(R.PauseJob, {"job": "a", "note": "x" * 1001})


def test_run_now_params_map_names_to_strings():
    req = typed.parse(R.RunNow, {"job": "a", "params": {"day": "monday"}, "key": "k1"})
    assert (req.params, req.key, req.wait) == ({"day": "monday"}, "k1", False)
    with pytest.raises(UsageError, match="argument 'params' has the wrong type"):
        typed.parse(R.RunNow, {"job": "a", "params": {"day": 1}})
    assert typed.parse(R.RunNow, {"job": "a"}).params == {}  # a fresh map each time

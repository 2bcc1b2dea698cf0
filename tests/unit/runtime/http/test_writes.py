"""The API's writes (runtime/http/writes.py): what a JSON body may carry."""

from __future__ import annotations

import math

import pytest

from cronrd.errors import UsageError
from cronrd.jobspec.params import Param, parse_value
from cronrd.ops import typed
from cronrd.ops import requests as R
from cronrd.runtime.http.writes import json_param


def test_a_json_number_or_boolean_is_a_params_text_and_its_type_still_checks_it():
    """Issue 33 (6): `{"params": {"n": 5}}` was refused (a value must be a
    string); a JSON client sends an int param as a number."""
    body = {"n": 5, "ratio": 0.25, "dry": True, "name": "x", "bad": [1]}
    params = {k: json_param(v) for k, v in body.items()}
    assert params == {"n": "5", "ratio": "0.25", "dry": "true", "name": "x", "bad": [1]}
    assert math.isnan(json_param(math.nan))   # no text: refused below as the wrong type
    assert parse_value(Param(name="n", type="int"), params["n"]) == "5"
    assert parse_value(Param(name="ratio", type="float"), params["ratio"]) == "0.25"
    assert parse_value(Param(name="dry", type="bool"), params["dry"]) == "true"
    with pytest.raises(ValueError):
        parse_value(Param(name="n", type="int"), json_param(2.5))
    # a list or an object is still no parameter value
    for wrong in (params["bad"], json_param(math.nan)):
        with pytest.raises(UsageError, match="wrong type"):
            typed.parse(R.RunNow, {"job": "j", "params": {"bad": wrong}})
    assert typed.parse(R.RunNow, {"job": "j", "params": {"n": params["n"]}}).params == {"n": "5"}

"""Parsing request arguments into typed values, and their schemas
(``cronrd.ops.typed``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import pytest

from cronrd.errors import UsageError
from cronrd.ops import typed
from cronrd.ops.typed import Doc, MaxLen, Names, Range, Time


@dataclass(frozen=True)
class Sample:
    """A sample request."""
    name: Annotated[str, MaxLen(5), Doc("a name")]
    count: Annotated[int, Range(1, 10)] = 3
    ratio: float | None = None
    flag: bool = False
    tags: list[str] | None = None
    params: dict[str, str] | None = None
    states: Annotated[list[str] | None, Names(("a", "b"))] = None
    at: Annotated[float | None, Time()] = None
    raw: Any = None


def parse(**args):
    return typed.parse(Sample, args)


def refused(**args) -> str:
    with pytest.raises(UsageError) as info:
        parse(**args)
    return str(info.value)


def test_a_full_request_parses_to_its_values():
    req = parse(name="x", count=10, ratio=2, flag=True, tags=["t"], params={"k": "v"},
                states="a, b", at="2026-01-01T00:00:00Z", raw={"any": [1]}, extra="ignored")
    assert req == Sample("x", 10, 2.0, True, ["t"], {"k": "v"}, ["a", "b"], 1767225600.0,
                         {"any": [1]})
    assert isinstance(req.ratio, float)


def test_defaults_and_null_count_as_left_out():
    assert parse(name="x", count=None, flag=None) == Sample("x")


def test_a_missing_required_argument_is_named():
    assert refused() == "missing argument 'name'"


@pytest.mark.parametrize("args, message", [
    ({"count": True}, "argument 'count' must be an integer"),
    ({"count": 1.5}, "argument 'count' must be an integer"),
    ({"count": 1 << 62}, "argument 'count' is out of range"),
    ({"count": 0}, "count must be 1 to 10"),
    ({"count": 11}, "count must be 1 to 10"),
    ({"ratio": "1"}, "argument 'ratio' must be a number"),
    ({"ratio": math.nan}, "argument 'ratio' must be a finite number"),
    ({"ratio": math.inf}, "argument 'ratio' must be a finite number"),
    ({"flag": 1}, "argument 'flag' has the wrong type"),
    ({"name": 7}, "argument 'name' has the wrong type"),
    ({"name": "toolong"}, "argument 'name' is longer than 5 characters"),
    ({"tags": ["ok", 1]}, "argument 'tags' has the wrong type"),
    ({"tags": "t"}, "argument 'tags' has the wrong type"),
    ({"params": {"k": 1}}, "argument 'params' has the wrong type"),
    ({"states": "a,c"}, "unknown states 'c'; use one of a, b"),
    ({"states": []}, "argument 'states' must be a name or a list of names"),
    ({"at": True}, "argument 'at' must be a time"),
    ({"at": math.nan}, "argument 'at' must be a time"),
    ({"at": [1]}, "argument 'at' must be a time (ISO 8601 or epoch seconds)"),
])
def test_a_wrong_argument_is_refused_with_its_name(args, message):
    assert refused(**{"name": "x", **args}).startswith(message)


def test_arguments_must_be_an_object():
    with pytest.raises(UsageError, match="JSON object"):
        typed.parse(Sample, ["name"])  # type: ignore[arg-type]


def test_as_args_round_trips():
    req = parse(name="x", states=["a"], at=5)
    assert typed.parse(Sample, typed.as_args(req)) == req
    assert "ratio" not in typed.as_args(req)


def test_the_schema_says_types_bounds_and_what_is_required():
    s = typed.schema(Sample)
    assert s["required"] == ["name"]
    assert s["description"] == "A sample request."
    p = s["properties"]
    assert p["name"] == {"type": "string", "maxLength": 5, "description": "a name"}
    assert p["count"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 3}
    assert p["ratio"] == {"type": "number"}
    assert p["tags"] == {"type": "array", "items": {"type": "string"}}
    assert p["params"]["additionalProperties"] == {"type": "string"}
    assert p["states"]["oneOf"][0]["items"]["enum"] == ["a", "b"]
    assert {alt["type"] for alt in p["at"]["oneOf"]} == {"number", "string"}
    assert [name for name, _, _ in typed.fields(Sample)][:2] == ["name", "count"]

"""The API's answer schemas (cronrd/runtime/http/schemas.py): valid JSON
Schema, every reference resolves, and they take the answers the handlers
make (the live check of every operation: tests/security/test_api_fuzz.py)."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from cronrd.jobspec import JobSpec
from cronrd.runtime.http import schemas as S


def _validator(name: str) -> Draft202012Validator:
    root = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": S.COMPONENTS}}
    return Draft202012Validator(root)


def test_every_schema_is_valid_and_every_reference_resolves():
    for name, schema in S.COMPONENTS.items():
        Draft202012Validator.check_schema(schema)
        for ref in _refs(schema):
            assert ref.split("/")[-1] in S.COMPONENTS, (name, ref)
    for route, name in S.SUCCESS.items():
        assert name in S.COMPONENTS, route


def _refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_a_run_view_and_a_job_view_fit_their_schemas():
    from cronrd.model.run import Run
    from cronrd.model.run_states import RunState
    run = Run(run_id=7, job="j", origin="schedule", kind="scheduled", fire_time=1796464800,
              attempt=1, target="", state=RunState.SUCCEEDED, node="n1", token=3,
              due_at=1796464800.0, created_at=1796464799.9, started_at=1796464800.1,
              finished_at=1796464801.0, exit_code=0)
    view = json.loads(json.dumps(run.view()))
    assert not list(_validator("Run").iter_errors(view))
    assert list(_validator("Run").iter_errors({**view, "run_id": "7"}))   # not a number
    job = {"name": "j", "schedule": "@daily", "timezone": "UTC",
           "command": list(JobSpec(name="j", schedule="@daily", command=("a", "b")).command),
           "enabled": True, "paused": False, "next_fire": None, "last_run": view}
    assert not list(_validator("Job").iter_errors(job))
    assert list(_validator("Job").iter_errors({**job, "paused": "no"}))


def test_a_page_needs_its_items_and_cursor():
    good = {"items": [], "next_cursor": None}
    assert not list(_validator("AlertPage").iter_errors(good))
    assert list(_validator("AlertPage").iter_errors({"items": []}))
    assert list(_validator("Problem").iter_errors({"title": "x", "status": "400"}))

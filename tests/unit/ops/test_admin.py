"""The typed requests of `cronrd.ops.admin`: each registered under its
operation, each parsing what its clients send; and the ADMIN ones served
through the control table's guard (the caller checked and audited first)."""

from __future__ import annotations

import asyncio
import dataclasses
import typing

import pytest

from cronrd.errors import PermissionDenied, UsageError
from cronrd.ops import admin as A
from cronrd.ops import typed
from cronrd.ops.requests import REQUESTS
from cronrd.ops.typed import Doc
from cronrd.state import commands as C


def test_every_type_is_registered_under_its_op():
    for cls in A.TYPES:
        assert REQUESTS[cls.OP] is cls


def test_every_type_is_frozen_documented_and_each_field_says_what_it_means():
    for cls in A.TYPES:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        assert typed.schema(cls)["description"], cls
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            assert any(isinstance(m, Doc) for m in getattr(hints[f.name], "__metadata__", ())), \
                f"{cls.__name__}.{f.name}"


def test_the_requests_without_arguments_take_none_and_ignore_newer_ones():
    for cls in (A.Reload, A.ClusterMembers, A.ListTokens):
        assert typed.parse(cls, {"from_a_newer_client": 1}) == cls()
    assert typed.parse(A.Status, {"consistent": True}) == A.Status(consistent=True)


def test_explain_keeps_the_time_as_given_for_explain_to_read():
    # a text is read in UTC or, with local, in the job's zone: explain/subject.py
    req = typed.parse(A.Explain, {"job": "a", "at": "2026-03-29T02:30", "local": True})
    assert (req.at, req.local, req.next) == ("2026-03-29T02:30", True, False)
    assert typed.parse(A.Explain, {"job": "a", "at": 1767225600}).at == 1767225600
    assert typed.parse(A.Explain, {"job": "a", "next": True}).next
    with pytest.raises(UsageError, match="missing argument 'job'"):
        typed.parse(A.Explain, {"at": 1})
    with pytest.raises(UsageError, match="argument 'next' has the wrong type"):
        typed.parse(A.Explain, {"job": "a", "next": "yes"})


def test_logs_bounds_lines_and_takes_since_as_seconds():
    req = typed.parse(A.ShowLogs, {"job": "a", "since": 1767225600, "lines": 0})
    assert (req.since, req.lines, req.run_id, req.follow) == (1767225600.0, 0, None, False)
    with pytest.raises(UsageError, match="lines must be >= 0"):
        typed.parse(A.ShowLogs, {"job": "a", "lines": -1})
    with pytest.raises(UsageError, match="argument 'since' must be a number"):
        typed.parse(A.ShowLogs, {"job": "a", "since": True})
    with pytest.raises(UsageError, match="argument 'run_id' must be an integer"):
        typed.parse(A.ShowLogs, {"job": "a", "run_id": "7"})


def test_membership_defaults():
    assert typed.parse(A.DrainNode, {"node": "b"}) == A.DrainNode(node="b", drained=True,
                                                                   note="")
    assert typed.parse(A.RevokeCert, {"serial": "0a"}).reason == "revoked by the operator"
    assert typed.parse(A.TransferLeader, {}).node is None
    assert typed.parse(A.AddMember, {"node": "c", "address": "h:7001"}).token is False
    with pytest.raises(UsageError, match="missing argument 'address'"):
        typed.parse(A.AddMember, {"node": "c"})


def test_token_create_bounds_the_glob_and_takes_seconds():
    req = typed.parse(A.CreateToken, {"name": "ci", "role": "viewer", "expires": 86400})
    assert (req.jobs, req.expires) == ("", 86400.0)
    with pytest.raises(UsageError, match="--jobs must be a glob of job names of at most 200 "
                                         "characters"):
        typed.parse(A.CreateToken, {"name": "ci", "role": "viewer", "jobs": "a" * 201})
    with pytest.raises(UsageError, match="argument 'expires' must be a number"):
        typed.parse(A.CreateToken, {"name": "ci", "role": "viewer", "expires": True})
    assert typed.schema(A.CreateToken)["required"] == ["name", "role"]


def test_the_requests_from_inside_a_run_name_the_run_and_its_token():
    for cls in (A.SaveCheckpoint, A.GetCheckpoint, A.Heartbeat):
        assert typed.schema(cls)["required"] == ["run_id", "token"]
        with pytest.raises(UsageError, match="missing argument 'token'"):
            typed.parse(cls, {"run_id": 1})
    save = typed.parse(A.SaveCheckpoint, {"run_id": 1, "token": "t", "value_b64": "eA=="})
    assert (save.value, save.value_b64) == (None, "eA==")
    beat = typed.parse(A.Heartbeat, {"run_id": 1, "token": "t", "progress": 1})
    assert (beat.progress, beat.message) == (1.0, None)
    with pytest.raises(UsageError, match="progress must be a number from 0 to 1"):
        typed.parse(A.Heartbeat, {"run_id": 1, "token": "t", "progress": 1.5})
    with pytest.raises(UsageError, match="the heartbeat message is longer than 1000 characters"):
        typed.parse(A.Heartbeat, {"run_id": 1, "token": "t", "message": "x" * 1001})


# -- the ADMIN guard (runtime/control/handlers.py) ----------------------------------------
def _handlers():
    from tests.unit.runtime.leader.test_backfills_requests import handlers
    return handlers()


def _call(h, op: str, args: dict, caller):
    return asyncio.run(h.table()[op](args, caller))


def test_an_admin_request_is_parsed_once_the_caller_is_allowed_and_audited_once_well_formed():
    from tests.unit.runtime.leader.test_backfills_requests import JOB_USER, ROOT
    h, props = _handlers()
    # refused first, whatever the arguments: a refused caller learns nothing of them
    with pytest.raises(PermissionDenied, match="`cronrd token create ci` needs root"):
        _call(h, "token_create", {"name": "ci", "role": "viewer", "jobs": 5}, JOB_USER)
    assert [(c.command, c.allowed) for c in props.proposed] == [("token_create", False)]
    # allowed, then the arguments are checked: a malformed change is refused
    # before it is audited as allowed (no record of a change never made)
    with pytest.raises(UsageError, match="argument 'jobs' has the wrong type"):
        _call(h, "token_create", {"name": "ci", "role": "viewer", "jobs": 5}, ROOT)
    res = _call(h, "token_create", {"name": "ci", "role": "viewer"}, ROOT)
    assert res["name"] == "ci" and res["token"]
    audits = [(c.command, c.target, c.allowed) for c in props.proposed
              if isinstance(c, C.Audit)]
    assert audits == [("token_create", "ci", False), ("token_create", "ci", True)]
    assert _call(h, "token_revoke", {"name": "ci"}, ROOT) == {"revoked": "ci"}


def test_the_api_documents_the_bodies_of_the_admin_writes():
    """The OpenAPI document (http/api.py) takes the token and drain bodies
    from these types."""
    from cronrd.runtime.http.api import openapi
    from cronrd.runtime.http.writes import ApiRoutes
    doc = openapi([r for r, _ in ApiRoutes(None, None).routes()], "t")

    def body(path):
        return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"][
            "schema"]["properties"]
    tokens = body("/api/v1/tokens")
    assert set(tokens) == {"name", "role", "jobs", "expires"}
    assert tokens["jobs"]["maxLength"] == A.MAX_TOKEN_JOBS
    assert tokens["expires"]["type"] == "number"
    assert set(body("/api/v1/nodes/{node}/drain")) == {"note"}

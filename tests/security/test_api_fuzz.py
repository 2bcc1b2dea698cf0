"""Issue 32, point 9: every route of the HTTP API, fuzzed from its own
OpenAPI document by schemathesis against a live daemon, with valid and
invalid path and query parameters (a "²" that ``isdigit()`` calls a digit,
30-digit ids, dates of year 1 or 9999, ...): each answer is below 500 and
the daemon lives on. Examples are derandomized (the same cases every run)
and bounded per operation."""

from __future__ import annotations

import json
import urllib.request

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

pytestmark = pytest.mark.integration

EXAMPLES = 12           # cases per operation and generation mode
STREAMS = ("/stream", "/events")   # answers that stay open: only their status is read


def document(url: str, ui: bool = False) -> dict:
    """The API's document, or (``ui``) the one of the web UI's pages."""
    query = "?ui=true" if ui else ""
    with urllib.request.urlopen(f"{url}/api/v1/openapi.json{query}", timeout=10) as resp:
        return json.loads(resp.read())


def operations(schema) -> list:
    out = []
    for result in schema.get_all_operations():
        op = result.ok()  # a route the document describes badly fails here
        out.append(op)
    return out


def exercise(op, base: str, session, auth: dict, mode: GenerationMode) -> list[str]:
    """Send the operation's cases; the answers of 500 and more, described.
    Sent as requests (schemathesis builds them): a stream's answer stays
    open, so only its status line and headers are read."""
    failures: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case):
        kwargs = case.as_transport_kwargs(base_url=base)
        # the token, always: a generated Authorization would stop every case at 401
        kwargs["headers"] = {**(kwargs.get("headers") or {}), **auth}
        with session.request(**kwargs, stream=True, timeout=15) as resp:
            if resp.status_code >= 500:
                body = b"" if any(p in op.path for p in STREAMS) else resp.content[:300]
                failures.append(f"{case.method} {case.formatted_path} query={case.query!r}: "
                                f"{resp.status_code} {body!r}")
    try:
        run()
    except Unsatisfiable:  # nothing of the operation can be made invalid
        assert mode is GenerationMode.NEGATIVE, op.label
    return failures


def test_no_route_answers_a_server_error_to_any_parameter(node):
    node.write_job("db-backup", {"schedule": "*/5 * * * *", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    res = node.cli("token", "create", "--name", "fuzz", "--role", "admin")
    assert res.returncode == 0, res.stderr
    secret = res.stdout.strip()
    session = requests.Session()
    # the API's routes take the token; the UI's pages a session of it
    login = session.post(f"{url}/login", data={"token": secret}, allow_redirects=False)
    assert login.status_code == 303, login.text
    auth = {"Authorization": f"Bearer {secret}",
            "Cookie": "; ".join(f"{k}={v}" for k, v in session.cookies.items())}
    session.cookies.clear()
    api = operations(schemathesis.openapi.from_dict(document(url)))
    pages = operations(schemathesis.openapi.from_dict(document(url, ui=True)))
    assert len(api) >= 30, [op.label for op in api]  # the whole API, not a part
    # Issue 33 (4): the API's document holds the API only; the pages apart
    assert all(op.path.startswith("/api/") or op.path in ("/healthz", "/readyz", "/metrics")
               for op in api), [op.label for op in api]
    assert len(pages) >= 10 and not any(op.path.startswith("/api/") for op in pages)
    ops = api + pages
    failures: list[str] = []
    for op in ops:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += exercise(op, url, session, auth, mode)
    assert not failures, "\n".join(failures[:20])
    # and the daemon is still whole
    assert node.call("status")["ready"]
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
        assert resp.status == 200


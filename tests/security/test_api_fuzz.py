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

from harness import wait_for
from openapi_check import mismatch

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


def exercise(op, base: str, session, auth: dict, mode: GenerationMode,
             doc: dict | None = None) -> list[str]:
    """Send the operation's cases; the answers of 500 and more, described,
    and (``doc``: the API's document) those the document does not describe:
    a status it does not list, a body that does not match its schema.
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
            elif doc is not None:
                stream = any(p in op.path for p in STREAMS) and resp.status_code == 200
                wrong = mismatch(doc, case.method, case.formatted_path, resp.status_code,
                                 resp.headers.get("Content-Type", ""),
                                 b"" if stream else resp.content)
                if wrong:
                    failures.append(f"{wrong} (query={case.query!r})")
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
    api_doc = document(url)
    api = operations(schemathesis.openapi.from_dict(api_doc))
    pages = operations(schemathesis.openapi.from_dict(document(url, ui=True)))
    assert len(api) >= 30, [op.label for op in api]  # the whole API, not a part
    # Issue 33 (4): the API's document holds the API only; the pages apart
    assert all(op.path.startswith("/api/") or op.path in ("/healthz", "/readyz", "/metrics")
               for op in api), [op.label for op in api]
    assert len(pages) >= 10 and not any(op.path.startswith("/api/") for op in pages)
    failures: list[str] = []
    for ops, doc in ((api, api_doc), (pages, None)):
        for op in ops:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                failures += exercise(op, url, session, auth, mode, doc)
    assert not failures, "\n".join(failures[:20])
    # and the daemon is still whole
    assert node.call("status")["ready"]
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
        assert resp.status == 200



def test_every_operation_answers_as_its_document_says(node, tmp_path):
    """Issue 33 (4): each operation of the API, called as a client would
    (valid requests, and its refusals: a missing job, a bad body, a role too
    low), answers a status its document lists with a body that matches the
    document's schema for it."""
    node.write_job("a", {"schedule": "@yearly", "command": "echo hi",
                         "sla": {"max_runtime": "1s"}})
    node.write_job("b", {"schedule": "@after", "depends_on": [{"job": "a"}],
                         "command": "false"})
    node.write_job("slow", {"schedule": "@yearly", "command": "sleep 30"})
    node.write_job("argv", {"schedule": "@yearly", "command": ["/bin/echo", "a list"]})
    node.start()
    url = node.call("status")["http"]
    admin = node.cli("token", "create", "--name", "adm", "--role", "admin").stdout.strip()
    viewer = node.cli("token", "create", "--name", "v", "--role", "viewer").stdout.strip()
    doc = document(url)
    session = requests.Session()
    seen: set[tuple[str, str]] = set()
    problems: list[str] = []

    def call(method: str, path: str, token: str = admin, headers: dict | None = None, **kw):
        resp = session.request(method, url + path,
                               headers={"Authorization": f"Bearer {token}", **(headers or {})},
                               timeout=15, stream=path.endswith(("/stream", "/events")), **kw)
        template = __import__("openapi_check").operation(doc, method, path.split("?")[0])[0]
        seen.add((method.lower(), template))
        body = b"" if path.endswith(("/stream", "/events")) else resp.content
        wrong = mismatch(doc, method, path.split("?")[0], resp.status_code,
                         resp.headers.get("Content-Type", ""), body)
        if wrong:
            problems.append(wrong)
        resp.close()
        return resp
    first = call("POST", "/api/v1/jobs/a/run", json={}).json()
    wait_for(lambda: node.call("run", {"run_id": first["run_id"]})["state"] == "succeeded",
             what="a's run")
    wait_for(lambda: node.runs("b"), what="b's run after a")
    slow = call("POST", "/api/v1/jobs/slow/run", json={}).json()["run_id"]
    wait_for(lambda: node.call("run", {"run_id": slow})["state"] == "running", what="slow runs")
    assert call("POST", "/api/v1/jobs/slow/run", json={}).status_code == 409
    rid = first["run_id"]
    for path in ("/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/api/v1/whoami",
                 "/api/v1/tokens", "/api/v1/cluster", "/api/v1/nodes", "/api/v1/jobs?limit=2",
                 "/api/v1/runs?limit=2", "/api/v1/jobs/a", "/api/v1/jobs/a/explain",
                 "/api/v1/jobs/b/graph", "/api/v1/graph", f"/api/v1/runs/{rid}",
                 f"/api/v1/runs/{rid}/log", f"/api/v1/runs/{rid}/log/stream",
                 "/api/v1/events", "/api/v1/backfills", "/api/v1/alerts?all=true",
                 "/api/v1/dead-letter?all=true", "/api/v1/pools", "/api/v1/audit?limit=3",
                 "/api/v1/jobs/nope", "/api/v1/runs/999999", "/api/v1/jobs?limit=0"):
        call("GET", path)
    assert call("GET", "/api/v1/audit", token=viewer).status_code == 403
    assert call("GET", "/api/v1/cluster", token="crd_wrong").status_code == 401
    call("GET", "/api/v1/jobs/argv")             # an argv command: a list, not a string
    call("POST", "/api/v1/jobs/a/pause", json={"note": "checking"},
         headers={"Idempotency-Key": "k1"})
    assert call("POST", "/api/v1/jobs/a/pause", json={"note": "another"},
                headers={"Idempotency-Key": "k1"}).status_code == 422
    call("POST", "/api/v1/jobs/a/resume", json={})
    call("POST", "/api/v1/jobs/a/rerun", json={"at": "2026-01-01T00:00:00Z", "dry_run": True})
    call("POST", "/api/v1/jobs/a/rerun", json={"at": "not a time"})
    call("POST", "/api/v1/backfills", json={"job": "a", "from": "2024-01-01T00:00:00Z",
                                             "to": "2026-01-02T00:00:00Z", "dry_run": True})
    made = call("POST", "/api/v1/backfills", json={"job": "a", "from": "2024-01-01T00:00:00Z",
                                                    "to": "2025-01-02T00:00:00Z",
                                                    "parallel": 1})
    if made.status_code == 202:
        bid = call("GET", "/api/v1/backfills").json()["items"][0]["id"]
        for verb in ("pause", "resume", "cancel"):
            call("POST", f"/api/v1/backfills/{bid}/{verb}", json={})
    call("POST", f"/api/v1/runs/{slow}/cancel", json={})
    wait_for(lambda: node.call("status")["versions"]["cluster_version"] >= 2,
             what="cluster version 2 (planned runs)")
    plan = call("POST", "/api/v1/jobs/a/run", json={"at": "+1h"}).json()
    call("POST", f"/api/v1/plans/{plan['plan_id']}/cancel", json={})
    call("POST", "/api/v1/plans/999999/cancel", json={})
    call("POST", "/api/v1/jobs/a/run", json={"at": "+99999999999999999999999y"})
    call("POST", "/api/v1/pings/a", json={})                  # a job, not a watch: 404
    call("POST", "/api/v1/pings/nope", json={"what": "start"})
    alerts = call("GET", "/api/v1/alerts?all=true").json()["items"]
    if alerts:
        call("POST", f"/api/v1/alerts/{alerts[0]['alert_id']}/ack", json={"note": "seen"})
    call("POST", "/api/v1/dead-letter/999999/requeue", json={})
    call("POST", "/api/v1/dead-letter/999999/discard", json={})
    call("POST", "/api/v1/tokens", json={"name": "t2", "role": "viewer", "expires": 3600})
    call("POST", "/api/v1/tokens", json={"name": "", "role": "viewer"})
    call("DELETE", "/api/v1/tokens/t2")
    call("POST", "/api/v1/validate", data=b"schedule: '@daily'\ncommand: true\n",
         headers={"Content-Type": "application/yaml"})
    call("POST", "/api/v1/validate", data=b"schedule: [\n",
         headers={"Content-Type": "application/yaml"})
    call("POST", "/api/v1/nodes/n1/drain", json={"note": "x"})
    call("POST", "/api/v1/nodes/n1/undrain", json={})
    call("POST", "/api/v1/hooks/nohook", data=b"{}")
    assert not problems, "\n".join(problems)
    every = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert every - seen == set(), sorted(every - seen)

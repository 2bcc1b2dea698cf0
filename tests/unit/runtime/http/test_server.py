"""The HTTP server (cronrd/runtime/http/server.py) through aiohttp's test
client: health, readiness, /metrics, problem+json errors, and requests that
must not hurt the daemon."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess

import pytest

from aiohttp.test_utils import TestClient, TestServer

from cronrd.config import HttpConfig, HttpTLS
from cronrd.runtime.http.server import HttpServer


class FakeMetrics:
    def __init__(self):
        self.fail = False

    async def page(self) -> bytes:
        if self.fail:
            raise RuntimeError("boom")
        return b"# HELP x y\n"


NOW = 1_800_000_000.0
TOKENS = {
    "v-secret": {"name": "grafana", "role": "viewer", "jobs": "", "expires_at": None,
                 "created_at": NOW - 10, "node": "n1"},
    "a-secret": {"name": "ops", "role": "admin", "jobs": "", "expires_at": NOW + 60,
                 "created_at": NOW - 10, "node": "n1"},
    "old": {"name": "old", "role": "admin", "jobs": "", "expires_at": NOW,
            "created_at": NOW - 10, "node": "n1"},
    "b-secret": {"name": "backups", "role": "viewer", "jobs": "backup-*", "expires_at": None,
                 "created_at": NOW, "node": "n1"},
}


def serve(body, ready=True):
    """Run ``body(client, server, state)`` against a server on a free port."""
    state = {"ready": ready}
    metrics = FakeMetrics()
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: state["ready"],
                        status=lambda: {"role": "leader", "leader": "n1"}, metrics=metrics,
                        find_token=TOKENS.get, list_tokens=lambda: list(TOKENS.values()),
                        now=lambda: NOW)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            return await body(client, state, metrics)
    return asyncio.run(main())


def test_healthz_answers_while_readyz_waits_for_ready():
    async def body(client, state, metrics):
        r = await client.get("/healthz")
        assert r.status == 200 and (await r.json()) == {"status": "ok"}
        r = await client.get("/readyz")
        assert r.status == 503
        assert r.headers["Content-Type"].startswith("application/problem+json")
        doc = await r.json()
        assert doc["status"] == 503 and doc["ready"] is False and doc["title"] == "Not Ready"
        state["ready"] = True
        r = await client.get("/readyz")
        assert r.status == 200 and (await r.json())["ready"] is True
    serve(body, ready=False)


def test_metrics_are_the_exposition_format():
    async def body(client, state, metrics):
        r = await client.get("/metrics")
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert await r.text() == "# HELP x y\n"
    serve(body)


def test_errors_are_problem_json_and_a_failing_handler_is_a_500():
    async def body(client, state, metrics):
        r = await client.get("/nosuch")
        assert r.status == 404
        assert json.loads(await r.text()) == {"type": "about:blank", "title": "Not Found",
                                              "status": 404}
        r = await client.post("/healthz", data=b"x")
        assert r.status == 405
        assert (await r.json(content_type=None))["status"] == 405
        metrics.fail = True
        r = await client.get("/metrics")
        assert r.status == 500
        doc = await r.json(content_type=None)
        assert "RuntimeError" in doc["detail"] and "boom" not in doc["detail"]
        metrics.fail = False
        r = await client.get("/healthz")  # and it still serves
        assert r.status == 200
    serve(body)


def bearer(secret):
    return {"Authorization": f"Bearer {secret}"}


def test_the_api_needs_a_valid_token():
    async def body(client, state, metrics):
        for headers in ({}, {"Authorization": "Basic abc"}, bearer("nosuch"), bearer("old"),
                        {"Authorization": "Bearer "}):
            r = await client.get("/api/v1/whoami", headers=headers)
            assert r.status == 401, headers
            assert r.headers["WWW-Authenticate"] == 'Bearer realm="cronrd"'
            assert r.headers["Content-Type"].startswith("application/problem+json")
        r = await client.get("/api/v1/whoami", headers=bearer("old"))
        assert "has expired" in (await r.json(content_type=None))["detail"]
        r = await client.get("/api/v1/whoami", headers=bearer("v-secret"))
        assert r.status == 200
        assert await r.json() == {"name": "grafana", "role": "viewer", "jobs": None,
                                  "expires_at": None}
        # an unknown API path without a token is a 401, not a map of the routes
        r = await client.get("/api/v1/nosuch")
        assert r.status == 401
        # health and metrics stay open
        assert (await client.get("/healthz")).status == 200
    serve(body)


def test_a_role_too_low_is_forbidden():
    async def body(client, state, metrics):
        r = await client.get("/api/v1/tokens", headers=bearer("v-secret"))
        assert r.status == 403
        doc = await r.json(content_type=None)
        assert doc["needed"] == "admin" and doc["role"] == "viewer"
        assert "this needs admin or higher" in doc["detail"]
        r = await client.get("/api/v1/tokens", headers=bearer("a-secret"))
        assert r.status == 200
        names = [t["name"] for t in (await r.json())["tokens"]]
        assert names == ["grafana", "ops", "old", "backups"]
        assert all("hash" not in t for t in (await r.json())["tokens"])
    serve(body)


class FakeReads:
    """The daemon's jobs and runs reads over fixed lists (control/handlers.py's answers)."""

    def __init__(self):
        self.jobs = [{"name": n} for n in ("backup-db", "backup-www", "report", "sync")]
        self.runs = [{"run_id": i, "job": self.jobs[i % 4]["name"]} for i in range(10, 0, -1)]
        self.asked = []

    async def h_jobs(self, req):  # a ListJobs (ops/requests.py), as the real handler
        self.asked.append(req)
        import fnmatch
        rows = [j for j in self.jobs if (req.after is None or j["name"] > req.after)
                and (req.match is None or fnmatch.fnmatchcase(j["name"], req.match))]
        page = rows[:req.limit]
        return {"jobs": page, "next": page[-1]["name"] if len(page) == req.limit else None}

    async def h_runs(self, req):  # a ListRuns: its filters were parsed at the edge
        self.asked.append(req)
        rows = [r for r in self.runs if req.before is None or r["run_id"] < req.before]
        return {"runs": rows[:req.limit], "gaps": []}


def serve_reads(body):
    reads = FakeReads()
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=dict, metrics=FakeMetrics(), find_token=TOKENS.get,
                        now=lambda: NOW, reads=reads)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            return await body(client, reads)
    return asyncio.run(main()), server


def test_jobs_and_runs_page_with_a_cursor():
    async def body(client, reads):
        names, cursor = [], None
        while True:
            r = await client.get("/api/v1/jobs", params={"limit": "3", **(
                {"cursor": cursor} if cursor else {})}, headers=bearer("v-secret"))
            assert r.status == 200
            doc = await r.json()
            names += [j["name"] for j in doc["items"]]
            cursor = doc["next_cursor"]
            if cursor is None:
                break
        assert names == ["backup-db", "backup-www", "report", "sync"]
        r = await client.get("/api/v1/runs", params={"limit": "4", "job": "report",
                                                      "since": "1800000000"},
                             headers=bearer("v-secret"))
        doc = await r.json()
        assert [x["run_id"] for x in doc["items"]] == [10, 9, 8, 7]
        assert reads.asked[-1].job == "report" and reads.asked[-1].since == 1.8e9
        r = await client.get("/api/v1/runs", params={"limit": "4",
                                                      "cursor": doc["next_cursor"]},
                             headers=bearer("v-secret"))
        assert [x["run_id"] for x in (await r.json())["items"]] == [6, 5, 4, 3]
    serve_reads(body)


def test_a_token_for_some_jobs_sees_only_those():
    async def body(client, reads):
        r = await client.get("/api/v1/jobs", headers=bearer("b-secret"))
        assert [j["name"] for j in (await r.json())["items"]] == ["backup-db", "backup-www"]
        r = await client.get("/api/v1/jobs", params={"match": "*www"},
                             headers=bearer("b-secret"))
        assert [j["name"] for j in (await r.json())["items"]] == ["backup-www"]
        r = await client.get("/api/v1/runs", headers=bearer("b-secret"))
        assert {x["job"] for x in (await r.json())["items"]} == {"backup-db", "backup-www"}
        r = await client.get("/api/v1/runs", params={"job": "report"},
                             headers=bearer("b-secret"))
        assert r.status == 403
    serve_reads(body)


@pytest.mark.parametrize("path, params, detail", [
    ("/api/v1/jobs", {"limit": "0"}, "limit must be a whole number from 1 to 1000"),
    ("/api/v1/jobs", {"limit": "x"}, "limit must be a whole number"),
    ("/api/v1/jobs", {"cursor": "!!!"}, "cursor is not one this server made"),
    ("/api/v1/runs", {"cursor": "eyJiZWZvcmUiOiJ4In0"}, "cursor is not one this server made"),
    ("/api/v1/runs", {"state": "bogus"}, "unknown state 'bogus'"),
])
def test_bad_parameters_are_a_400_saying_what_to_do(path, params, detail):
    async def body(client, reads):
        r = await client.get(path, params=params, headers=bearer("v-secret"))
        assert r.status == 400
        assert detail in (await r.json(content_type=None))["detail"]
    serve_reads(body)


def test_every_route_is_in_the_openapi_document_with_its_role():
    async def body(client, reads):
        r = await client.get("/api/v1/openapi.json")  # no token needed
        assert r.status == 200
        ui = await client.get("/api/v1/openapi.json?ui=true")
        return await r.json(), await ui.json()
    (doc, ui_doc), server = serve_reads(body)
    served = {(r.method.lower(), r.resource.canonical) for r in server.app.router.routes()
              if r.method != "HEAD"}
    listed = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    pages = {(m, p) for p, ops in ui_doc["paths"].items() for m in ops}
    # Issue 33 (4): the API's document lists the API, the UI's pages apart;
    # together they are every route served
    assert not listed & pages and ("get", "/login") in pages and ("get", "/login") not in listed
    assert served == listed | pages
    assert doc["openapi"].startswith("3.") and ("get", "/api/v1/runs") in listed
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if path.startswith("/api/v1/hooks/"):  # webhooks: HMAC, not a token
                assert op["security"] == [{"hmac": []}] and "x-cronrd-role" not in op
                assert server.roles[(method.upper(), path)] is None
            elif path.startswith("/api/v1/") and path != "/api/v1/openapi.json":
                assert op["security"] == [{"bearer": []}] and op["x-cronrd-role"], path
                assert server.roles[(method.upper(), path)] == op["x-cronrd-role"]
            else:
                assert "security" not in op, path


def test_the_openapi_documents_are_valid_openapi_3_1():
    """Issue 33 (4): a client can be generated from the document: it
    validates against the OpenAPI 3.1 schema, the UI pages' one too."""
    from openapi_spec_validator import validate

    async def body(client, reads):
        return [await (await client.get(path)).json()
                for path in ("/api/v1/openapi.json", "/api/v1/openapi.json?ui=true")]
    docs, _ = serve_reads(body)
    for doc in docs:
        assert doc["openapi"] == "3.1.0" and doc["paths"]
        validate(doc)   # raises, naming the place, on any fault


def test_the_openapi_schemas_come_from_the_typed_requests():
    """Query parameters and JSON bodies of routes that build a typed request
    (ops/requests.py) carry its types, bounds and names, not bare strings."""
    async def body(client, reads):
        return await (await client.get("/api/v1/openapi.json")).json()
    doc, _ = serve_reads(body)
    runs = {p["name"]: p["schema"] for p in doc["paths"]["/api/v1/runs"]["get"]["parameters"]}
    assert runs["limit"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
    assert runs["consistent"]["type"] == "boolean"
    assert runs["state"]["type"] == "string"  # a query's text form: names, comma-separated
    assert runs["cursor"] == {"type": "string"}
    jobs = {p["name"]: p["schema"] for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"]}
    assert jobs["match"] == {"type": "string", "maxLength": 200}
    # Issue 33 (4): the statuses the server answers (run-now said 200; it is 202)
    statuses = {(m, p): set(op["responses"]) for p, ops in doc["paths"].items()
                for m, op in ops.items()}
    assert {"202", "409"} <= statuses[("post", "/api/v1/jobs/{name}/run")]
    assert "200" not in statuses[("post", "/api/v1/jobs/{name}/run")]
    assert {"200", "202"} <= statuses[("post", "/api/v1/backfills")]
    assert "201" in statuses[("post", "/api/v1/tokens")]


def test_the_openapi_bodies_of_typed_writes():
    """The write routes' bodies (http/writes.py) from their requests: run-now's
    params map names to strings, pause's note is bounded."""
    from cronrd.runtime.http.api import Route, openapi
    from cronrd.ops import requests as R
    doc = openapi([Route("POST", "/api/v1/jobs/{name}/run", "run", "operator",
                         request=R.RunNow, body=("params", "key")),
                   Route("POST", "/api/v1/jobs/{name}/pause", "pause", "operator",
                         request=R.PauseJob, body=("note",)),
                   Route("POST", "/api/v1/runs/{run_id}/cancel", "cancel", "operator")], "t")
    schema = lambda p: doc["paths"][p]["post"]["requestBody"]["content"][  # noqa: E731
        "application/json"]["schema"]
    run = schema("/api/v1/jobs/{name}/run")["properties"]
    assert run["params"]["additionalProperties"] == {"type": "string"}
    assert run["key"]["type"] == "string" and "job" not in run  # the path names the job
    assert schema("/api/v1/jobs/{name}/pause")["properties"]["note"]["maxLength"] == 1000
    assert schema("/api/v1/runs/{run_id}/cancel") == {"type": "object"}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_server_serves_https_with_the_configured_certificate(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
                   check=True, capture_output=True)
    cfg = HttpConfig(listen=("127.0.0.1", 0), tls=HttpTLS(str(tmp_path / "c.pem"),
                                                          str(tmp_path / "k.pem")))
    server = HttpServer(cfg, is_ready=lambda: True, status=dict, metrics=FakeMetrics())

    async def main():
        task = asyncio.create_task(server.run())
        for _ in range(200):
            if server.address is not None:
                break
            await asyncio.sleep(0.01)
        assert server.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(tmp_path / "c.pem"))
        host, port = server.address
        reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = await reader.read()
        writer.close()
        # plain HTTP to the TLS port gets nothing it could take for an answer
        r2, w2 = await asyncio.open_connection(host, port)
        w2.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        plain = await asyncio.wait_for(r2.read(100), 5)
        w2.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert server.address is None
        return reply, plain
    reply, plain = asyncio.run(main())
    assert reply.startswith(b"HTTP/1.1 200") and b'{"status": "ok"}' in reply
    assert b"200 OK" not in plain


def test_a_client_gone_in_the_middle_is_no_error_and_no_traceback(caplog):
    """bench/hostile_load.py (issue 29): every slow-body client that dropped
    its connection logged an ERROR with a whole traceback."""
    import logging

    class GoneMetrics(FakeMetrics):
        async def page(self) -> bytes:
            raise ConnectionResetError("Connection lost")

    async def body(client, state, metrics):
        server.metrics = GoneMetrics()
        r = await client.get("/metrics")
        assert r.status == 400 and "lost" in (await r.json())["detail"]
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=dict, metrics=FakeMetrics(), find_token=TOKENS.get,
                        now=lambda: NOW)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            await body(client, None, None)
    with caplog.at_level(logging.DEBUG, logger="cronrd.http"):
        asyncio.run(main())
    assert "event=http_client_gone" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

"""The HTTP server (cronrd/runtime/http_server.py) through aiohttp's test
client: health, readiness, /metrics, problem+json errors, and requests that
must not hurt the daemon."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from cronrd.config import HttpConfig
from cronrd.runtime.http_server import HttpServer


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
        assert names == ["grafana", "ops", "old"]
        assert all("hash" not in t for t in (await r.json())["tokens"])
    serve(body)


def test_every_api_route_has_a_role():
    server = HttpServer(HttpConfig(), is_ready=lambda: True, status=dict,
                        metrics=FakeMetrics())
    api = {(r.method, r.resource.canonical) for r in server.app.router.routes()
           if r.resource is not None and r.resource.canonical.startswith("/api/v1/")
           and r.method != "HEAD"}
    assert api and api == set(server.roles)

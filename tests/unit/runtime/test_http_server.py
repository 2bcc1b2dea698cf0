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


def serve(body, ready=True):
    """Run ``body(client, server, state)`` against a server on a free port."""
    state = {"ready": ready}
    metrics = FakeMetrics()
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: state["ready"],
                        status=lambda: {"role": "leader", "leader": "n1"}, metrics=metrics)

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

"""Issue 32 point 5: requests that need no login must not flood the log.
Badly signed hooks are counted, one line per interval; a client that goes
away mid-request is a debug line, never a traceback."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from cronrd.config.model import HookConfig
from cronrd.runtime.http.hooks import SIGNATURE, TIMESTAMP, HookRoutes

NOW = 1_800_000_000.0


def hook_app() -> web.Application:
    routes = HookRoutes(reads=None, hooks=(HookConfig("deploy", None, secret=b"k" * 32),),
                        now=lambda: NOW, refusal_interval=0.3)
    app = web.Application()
    for route, handler in routes.routes():
        app.router.add_route(route.method, route.path, handler)
    return app


def test_a_flood_of_badly_signed_hooks_is_one_log_line_with_its_count(caplog):
    caplog.set_level(logging.DEBUG, logger="cronrd")

    async def main():
        async with TestClient(TestServer(hook_app())) as client:
            for _ in range(300):
                r = await client.post("/api/v1/hooks/deploy", data=b"{}", headers={
                    TIMESTAMP: str(int(NOW)), SIGNATURE: "sha256=" + "0" * 64})
                assert r.status == 401
                await r.release()
            await asyncio.sleep(0.9)   # the summary lines' intervals (a timer) pass

    def lines():
        return [r.getMessage() for r in caplog.records if "event=hook_refused" in r.getMessage()]
    started = asyncio.run(main()) or lines()
    # the first at once, the rest as counts, one line per interval
    assert "count=1 status=401" in started[0] and "hook=deploy" in started[0]
    counts = [int(line.split("count=")[1].split()[0]) for line in started]
    assert sum(counts) == 300 and len(started) < 30, started   # was a line each

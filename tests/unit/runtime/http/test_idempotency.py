"""Idempotency-Key (cronrd/runtime/http/idempotency.py)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from cronrd.errors import UsageError
from cronrd.runtime.http.idempotency import IdempotencyCache, KeyReused


def req(key: str | None, path: str = "/api/v1/jobs/a/run"):
    return make_mocked_request("POST", path, headers={"Idempotency-Key": key} if key else {})


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


def test_the_same_key_answers_once_and_replays():
    async def main():
        cache, done = IdempotencyCache(), []

        async def answer():
            done.append(1)
            return web.json_response({"run_id": len(done)}, status=202)
        first = await cache.run("op", req("k"), b"{}", answer)
        again = await cache.run("op", req("k"), b"{}", answer)
        assert done == [1] and again.status == 202 and again.text == first.text
        assert again.headers["Idempotent-Replayed"] == "true"
        await cache.run("other", req("k"), b"{}", answer)     # another token's key
        await cache.run("op", req(None), b"{}", answer)       # no key: done each time
        await cache.run("op", req(None), b"{}", answer)
        assert len(done) == 4
        with pytest.raises(KeyReused, match="another request"):
            await cache.run("op", req("k"), b'{"a":1}', answer)
        with pytest.raises(KeyReused):
            await cache.run("op", req("k", "/api/v1/jobs/b/run"), b"{}", answer)
        with pytest.raises(UsageError, match="1 to 255 printable"):
            await cache.run("op", req("x" * 256), b"{}", answer)
    asyncio.run(main())


def test_failures_are_not_kept_and_keys_expire_and_are_bounded():
    async def main():
        clock = Clock()
        cache, calls = IdempotencyCache(now=clock, ttl=100, max_keys=3), []

        async def fails():
            calls.append("f")
            raise UsageError("bad")

        async def refused():
            calls.append("r")
            return web.json_response({}, status=404)

        async def ok():
            calls.append("ok")
            return web.json_response({})
        with pytest.raises(UsageError):
            await cache.run("op", req("k"), b"", fails)
        assert (await cache.run("op", req("k"), b"", refused)).status == 404
        await cache.run("op", req("k"), b"", ok)
        assert calls == ["f", "r", "ok"]
        clock.t += 101  # a day later: done again
        await cache.run("op", req("k"), b"", ok)
        assert calls.count("ok") == 2
        for i in range(5):
            await cache.run("op", req(f"n{i}"), b"", ok)
        assert len(cache.entries) == 3
    asyncio.run(main())


def test_a_retry_while_the_first_is_answered_waits_for_its_answer():
    async def main():
        cache, gate, calls = IdempotencyCache(), asyncio.Event(), []

        async def slow():
            calls.append(1)
            await gate.wait()
            return web.json_response({"n": len(calls)})
        first = asyncio.create_task(cache.run("op", req("k"), b"", slow))
        await asyncio.sleep(0)
        second = asyncio.create_task(cache.run("op", req("k"), b"", slow))
        await asyncio.sleep(0)
        gate.set()
        a, b = await first, await second
        assert calls == [1] and a.text == b.text
    asyncio.run(main())

"""Issue 32 point 2: the Idempotency-Key cache has a byte bound. Every 2xx
answer was kept whole for 24 h under up to 10,000 keys: five 60.8 MB dry-run
answers took a node from 555 to 871 MB."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from cronrd.runtime.http.idempotency import AnswerNotKept, IdempotencyCache


def req(key: str):
    return make_mocked_request("POST", "/api/v1/backfills", headers={"Idempotency-Key": key})


def test_big_answers_are_not_kept_and_their_replay_is_refused_not_done_again():
    async def main():
        cache, done = IdempotencyCache(max_answer=1000), []

        async def big():
            done.append(1)
            return web.json_response({"lines": ["x" * 100] * 100}, status=201)
        first = await cache.run("op", req("k1"), b"{}", big)
        assert first.status == 201 and len(first.text) > 1000
        assert cache.bytes == 0
        with pytest.raises(AnswerNotKept, match="status 201.*not kept") as err:
            await cache.run("op", req("k1"), b"{}", big)
        assert err.value.http_status == 409 and done == [1]   # not done twice
    asyncio.run(main())


def test_the_answers_kept_stay_within_their_byte_budget_oldest_dropped_first():
    async def main():
        cache = IdempotencyCache(max_answer=10_000, max_bytes=50_000)

        async def answer():
            return web.json_response({"pad": "y" * 9_000}, status=202)
        for i in range(40):   # 40 answers of ~9 kB each: 360 kB unbounded
            await cache.run("op", req(f"k{i}"), b"{}", answer)
            assert cache.bytes <= 50_000
        assert len(cache.entries) == 5 and ("op", "k39") in cache.entries
        assert ("op", "k0") not in cache.entries
        assert cache.bytes == sum(cache.sizes.values())
    asyncio.run(main())

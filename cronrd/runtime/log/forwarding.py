"""A follower's proposals, forwarded to the leader in batches.

Every proposal a follower makes in one loop turn (its runs' claims, starts
and results, its job files, its announcements) goes to the leader in one
``propose`` peer request with a list of commands, at most ``BATCH`` a
request. The leader serves at most 32 requests of one peer at once
(peers/rpc.py): one request per proposal ran into that limit at about a
hundred runs a second, and the refusals made claims miss their fire times.
Each command keeps its own answer: a refusal of one is not a refusal of
the others, and a request that fails as a whole (no leader, no answer)
fails each of its commands the way one alone would have failed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ..peers.rpc import PeerError

BATCH = 64   # commands per request (the leader refuses more)


class Forwarder:
    def __init__(self, call: Callable[[str, dict], Awaitable[Any]]):
        """``call(leader, args)``: the ``propose`` peer request."""
        self.call = call
        self._queue: dict[str, list[tuple[bytes, asyncio.Future]]] = {}
        self._armed = False
        self.tasks: set[asyncio.Task] = set()
        self.requests = 0

    def forward(self, leader: str, data: bytes) -> asyncio.Future:
        """The leader's answer to one command (its result, or its error)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.setdefault(leader, []).append((data, fut))
        if not self._armed:
            self._armed = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self._armed = False
        queue, self._queue = self._queue, {}
        loop = asyncio.get_running_loop()
        for leader, items in queue.items():
            for i in range(0, len(items), BATCH):
                task = loop.create_task(self._send(leader, items[i:i + BATCH]))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _send(self, leader: str, items: list[tuple[bytes, asyncio.Future]]) -> None:
        self.requests += 1
        try:
            answer = await self.call(leader, {"cmds": [d.decode() for d, _ in items]})
            results = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(results, list) or len(results) != len(items):
                raise PeerError(f"node {leader} answered {len(items)} forwarded proposals "
                                "with something else (run the same cronrd version everywhere)")
        except Exception as exc:  # the request as a whole: each command fails alike
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), res in zip(items, results):
            if fut.done():
                continue
            if isinstance(res, dict) and "error" in res:
                fut.set_exception(PeerError(str(res["error"]), str(res.get("kind", "error")),
                                            res.get("leader")))
            elif isinstance(res, dict) and "ok" in res:
                fut.set_result(res["ok"])
            else:
                fut.set_exception(PeerError(f"node {leader} answered a forwarded proposal "
                                            "with something else"))

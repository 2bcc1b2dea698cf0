"""Requests between daemons, on the authenticated peer connections.

Raft messages and these requests share the transport: a request is a
``RPC_REQ`` message (``index`` = request id, ``context`` = method name,
``data`` = JSON arguments) and its answer a ``RPC_RESP`` (``reject`` set for
an error). The transport has already checked that ``frm`` is the peer the
TLS certificate names, so a handler knows which member asks.

Used for what Raft does not carry: a follower forwarding a proposal to the
leader (and getting its result back), and reading a run's log from the node
that ran it. A bad request is answered with an error, never raised into the
transport.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from typing import Any, Awaitable, Callable

from ...errors import CronrdError, RequestError
from ...raft.types import Message, MsgType
from ..tasks import wait_within

log = logging.getLogger("cronrd.rpc")

Handler = Callable[[str, dict], Awaitable[Any]]

MAX_ANSWER = 512 * 1024  # bytes of JSON per answer (log chunks are sized below it)
MAX_SERVING_PER_PEER = 32  # requests of one peer served at once; more are refused


class PeerError(CronrdError):
    """A peer answered a request with an error. ``kind`` names its class."""

    def __init__(self, message: str, kind: str = "error", leader: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.leader = leader


class PeerUnavailable(CronrdError):
    """No answer from a peer in time (down, cut off, or not connected yet)."""


class PeerRPC:
    def __init__(self, node_id: str, transport, handlers: dict[str, Handler]):
        self.node_id = node_id
        self.transport = transport
        self.handlers = handlers
        # Ids start at a random point: an answer meant for an earlier run of
        # this daemon must not resolve a new request that reuses its id.
        self._ids = itertools.count(int.from_bytes(os.urandom(7), "big"))
        self._waiting: dict[tuple[str, int], asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._serving: dict[str, int] = {}   # peer -> requests being served
        self.stats = {"served": 0, "refused": 0, "calls": 0, "timeouts": 0}

    async def call(self, peer: str, method: str, args: dict, timeout: float = 5.0) -> Any:
        req = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[(peer, req)] = fut
        self.stats["calls"] += 1
        try:
            sent = self.transport.send(Message(
                type=MsgType.RPC_REQ, to=peer, frm=self.node_id, term=0, index=req,
                context=method.encode(), data=json.dumps(args).encode()))
            if not sent:
                raise PeerUnavailable(f"cannot send {method} to node {peer}: its queue is "
                                      "full or it is not a known peer")
            return await wait_within(fut, timeout)
        except asyncio.TimeoutError:
            self.stats["timeouts"] += 1
            raise PeerUnavailable(f"node {peer} did not answer {method} within {timeout:g}s "
                                  "(down or cut off?)") from None
        finally:
            self._waiting.pop((peer, req), None)

    def on_message(self, msg: Message) -> None:
        if msg.type == MsgType.RPC_RESP:
            fut = self._waiting.get((msg.frm, msg.index))  # only the peer asked
            if fut is None or fut.done():
                return  # answered after its caller gave up
            try:
                body = json.loads(msg.data)
            except ValueError:
                fut.set_exception(PeerError(f"node {msg.frm} sent an unreadable answer"))
                return
            if msg.reject:
                body = body if isinstance(body, dict) else {}
                fut.set_exception(PeerError(str(body.get("error", "error")),
                                            str(body.get("kind", "error")),
                                            body.get("leader")))
            else:
                fut.set_result(body)
            return
        busy = self._serving.get(msg.frm, 0)
        if busy >= MAX_SERVING_PER_PEER:
            self.stats["refused"] += 1
            self._answer(msg, True, json.dumps({
                "error": f"node {self.node_id} is already serving {busy} requests of "
                         f"{msg.frm}; retry shortly", "kind": "RequestError"}).encode())
            return
        self._serving[msg.frm] = busy + 1
        task = asyncio.get_running_loop().create_task(self._serve(msg))
        self._tasks.add(task)

        def done(t: asyncio.Task, peer: str = msg.frm) -> None:
            self._tasks.discard(t)
            left = self._serving.get(peer, 1) - 1
            if left > 0:
                self._serving[peer] = left
            else:
                self._serving.pop(peer, None)
        task.add_done_callback(done)

    async def _serve(self, msg: Message) -> None:
        method = msg.context.decode("utf-8", "replace")
        try:
            handler = self.handlers.get(method)
            if handler is None:
                raise RequestError(f"unknown peer request {method!r} (version mismatch "
                                   "between nodes? run the same cronrd version everywhere)")
            try:
                args = json.loads(msg.data)
            except ValueError:
                raise RequestError(f"peer request {method}: arguments are not JSON") from None
            if not isinstance(args, dict):
                raise RequestError(f"peer request {method}: arguments must be an object")
            result = await handler(msg.frm, args)
            data = json.dumps(result).encode()
            if len(data) > MAX_ANSWER:
                raise RequestError(f"answer to {method} too large ({len(data)} bytes)")
            reject = False
            self.stats["served"] += 1
        except Exception as exc:
            self.stats["refused"] += 1
            if not isinstance(exc, CronrdError):
                log.exception("event=peer_request_failed method=%s from=%s", method, msg.frm)
            body = {"error": str(exc), "kind": type(exc).__name__,
                    "leader": getattr(exc, "leader", None)}
            data = json.dumps(body).encode()
            reject = True
        self._answer(msg, reject, data)

    def _answer(self, msg: Message, reject: bool, data: bytes) -> None:
        self.transport.send(Message(type=MsgType.RPC_RESP, to=msg.frm, frm=self.node_id,
                                    term=0, index=msg.index, reject=reject, data=data))

    def close(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable("the daemon is stopping"))
        for task in self._tasks:
            task.cancel()

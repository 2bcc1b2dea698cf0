"""The worker port's frames: length-prefixed JSON, requests both ways.

A frame is a 4-byte big-endian length and a JSON object of at most
MAX_FRAME bytes. A request carries ``op`` and ``id``; its answer carries
``re`` (the id) and either ``ok`` (the result) or ``error`` and ``kind``
(the error's class name). A message without ``id`` is one-way. Used by the
servers (runtime/cluster/worker_hub.py) and the agent
(runtime/worker/link.py); pure framing, no policy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from typing import Any

from ...errors import (CronrdError, NotLeader, PermissionDenied, Refused, RequestError,
                       StateError)

HEADER = struct.Struct(">I")
MAX_FRAME = 4 << 20          # bytes of one frame (a hello's answer with its runs, at most)
MAX_UP_FRAME = 1 << 20       # ... of one frame from a worker (a log chunk's answer: ~350 KB)
MAX_HELLO = 64 << 10         # ... of a hello
MAX_PENDING = 1024           # requests one side may have unanswered
WRITE_LIMIT = 8 << 20        # bytes queued to one peer before it is cut off as too slow

ERRORS: dict[str, type[CronrdError]] = {
    "NotLeader": NotLeader, "PermissionDenied": PermissionDenied, "Refused": Refused,
    "RequestError": RequestError, "StateError": StateError,
}


TLS_READ_BUFFER = 32 * 1024  # bytes asyncio reads per TLS connection at once


def small_tls_buffers() -> None:
    """asyncio gives every TLS connection a read buffer of
    ``sslproto.SSLProtocol.max_size`` bytes, 256 KiB, allocated and zeroed
    at once: on a leader with 1,000 workers, 256 MB for connections that
    carry a ping each half second (bench/workers.py measured 302 KB per
    worker). 32 KiB still takes two full TLS records per read. The setting
    is the process's (the peer port's connections read in 32 KiB too; their
    frames are reassembled by the stream reader either way)."""
    import asyncio.sslproto as sslproto
    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class WireError(CronrdError):
    """A frame that is not the protocol (too large, not a JSON object)."""


def encode(msg: dict[str, Any]) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise WireError(f"a frame of {len(data)} bytes is over the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> dict[str, Any]:
    """The next frame (at most ``limit`` bytes); WireError for one that
    breaks the protocol, IncompleteReadError at the end of the stream."""
    (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if n > limit:
        raise WireError(f"a frame of {n} bytes is over the {limit}-byte limit")
    try:
        msg = json.loads(await reader.readexactly(n))
    except (ValueError, RecursionError):
        raise WireError("a frame that is not JSON") from None
    if not isinstance(msg, dict):
        raise WireError("a frame that is not a JSON object")
    return msg


def error_of(msg: dict[str, Any]) -> CronrdError:
    """The exception an error answer stands for."""
    kind = ERRORS.get(str(msg.get("kind")), CronrdError)
    text = str(msg.get("error"))[:2000]
    if kind is NotLeader:
        leader = msg.get("leader")
        return NotLeader(leader if isinstance(leader, str) else None)
    return kind(text)


def answer_error(rid: Any, exc: BaseException) -> dict[str, Any]:
    kind = next((name for name, cls in ERRORS.items() if type(exc) is cls), "CronrdError")
    out: dict[str, Any] = {"re": rid, "error": str(exc), "kind": kind}
    if isinstance(exc, NotLeader):
        out["leader"] = exc.leader
    return out


class Channel:
    """One side of a connection: sends frames, matches answers to requests.
    The owner reads frames and hands answers to ``answered``."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self.closed = False

    def send(self, msg: dict[str, Any]) -> bool:
        """Queue one frame; False (and the connection closed) if the peer
        is too slow to take what was queued for it already."""
        if self.closed:
            return False
        transport = self.writer.transport
        if transport.get_write_buffer_size() > WRITE_LIMIT:
            self.close()
            return False
        self.writer.write(encode(msg))
        return True

    async def request(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        if len(self._waiting) >= MAX_PENDING:
            raise StateError(f"{MAX_PENDING} requests are unanswered on this connection; "
                             "try again")
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            if not self.send({"op": op, "id": rid, **args}):
                raise StateError("the connection closed")
            return await _within(fut, timeout)
        finally:
            self._waiting.pop(rid, None)

    def answered(self, msg: dict[str, Any]) -> None:
        rid = msg.get("re")
        fut = self._waiting.get(rid) if isinstance(rid, int) else None
        if fut is None or fut.done():
            return
        if "error" in msg:
            fut.set_exception(error_of(msg))
        else:
            fut.set_result(msg.get("ok"))

    def close(self) -> None:
        """At once: a TLS close waits for the peer's answer, and a peer that
        died answers nothing (asyncio gives up after 30 s; the reader
        blocked that long, and the worker dialled no other server)."""
        if self.closed:
            return
        self.closed = True
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(StateError("the connection closed before the answer"))
        self._waiting.clear()
        self.writer.transport.abort()


async def _within(fut: asyncio.Future, timeout: float) -> Any:
    """``fut``'s result, or StateError after ``timeout`` seconds."""
    done, _ = await asyncio.wait([fut], timeout=timeout)
    if not done:
        raise StateError(f"no answer within {timeout:g}s")
    return fut.result()

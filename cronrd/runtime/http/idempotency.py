"""``Idempotency-Key`` on the API's POST routes: a client that sends the
same key with the same token within a day gets the first answer back
(header ``Idempotent-Replayed: true``) and nothing is done again.

The answers are kept in this node's memory (at most MAX_KEYS and
MAX_BYTES of answers, the oldest dropped first, for TTL seconds): a retry
that reaches another node of a cluster, or this node after a restart, is
done again. Only answers that succeeded (2xx) are kept: a refused request
may be retried with the same key. An answer over MAX_ANSWER bytes (a big
dry run) is not kept whole: its replay is refused (409) with the first
answer's status, and nothing is done again. The same key sent with
a different request (method, path or body) is refused (422); a retry
while the first is still being answered waits for its answer.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from typing import Awaitable, Callable

from aiohttp import web

from ...errors import UsageError
from ..clock import monotonic

TTL = 24 * 3600.0
MAX_KEYS = 10_000
MAX_ANSWER = 64 * 1024          # bytes of an answer kept whole for a replay
MAX_BYTES = 32 * 1024 * 1024    # bytes of answers kept in all
MAX_KEY_LEN = 255
HEADER = "Idempotency-Key"


class KeyReused(UsageError):
    """The same Idempotency-Key with another request (422)."""
    http_status = 422


class AnswerNotKept(UsageError):
    """A replay of a request whose answer was too big to keep (409)."""
    http_status = 409


class IdempotencyCache:
    def __init__(self, now: Callable[[], float] = monotonic, ttl: float = TTL,
                 max_keys: int = MAX_KEYS, max_answer: int = MAX_ANSWER,
                 max_bytes: int = MAX_BYTES):
        self.now = now
        self.ttl = ttl
        self.max_keys = max_keys
        self.max_answer = max_answer
        self.max_bytes = max_bytes
        # (token name, key) -> (fingerprint, stored at, future of (status, body, type))
        self.entries: OrderedDict[tuple[str, str], tuple[str, float, asyncio.Future]] = \
            OrderedDict()
        self.sizes: dict[tuple[str, str], int] = {}   # bytes of each kept answer
        self.bytes = 0

    def _drop(self, slot: tuple[str, str]) -> None:
        self.entries.pop(slot, None)
        self.bytes -= self.sizes.pop(slot, 0)

    def _expire(self) -> None:
        """Drop the keys older than TTL, and the oldest while full (room for one)."""
        now = self.now()
        while self.entries:
            slot, (_fp, at, _fut) = next(iter(self.entries.items()))
            if now - at < self.ttl and len(self.entries) < self.max_keys:
                break
            self._drop(slot)

    async def run(self, token: str, request: web.Request, body: bytes,
                  answer: Callable[[], Awaitable[web.Response]]) -> web.Response:
        key = request.headers.get(HEADER)
        if key is None:
            return await answer()
        if not key or len(key) > MAX_KEY_LEN or not key.isprintable():
            raise UsageError(f"{HEADER} must be 1 to {MAX_KEY_LEN} printable characters "
                             "(a UUID is a good choice)")
        fp = hashlib.sha256(request.method.encode() + b" " + request.path_qs.encode() + b"\n"
                            + body).hexdigest()
        self._expire()
        slot = (token, key)
        entry = self.entries.get(slot)
        if entry is not None:
            if entry[0] != fp:
                raise KeyReused(f"{HEADER} {key!r} was used for another request (method, "
                                "path or body) by this token within 24 h; use a new key "
                                "for a new request")
            status, text, ctype = await asyncio.shield(entry[2])
            if text is None:
                raise AnswerNotKept(f"{HEADER} {key!r}: this request was done (status {status})"
                                    f"; its answer, over {self.max_answer} bytes, was not kept "
                                    "to be sent again (read the result with a GET, or send a "
                                    "new key to do it again)")
            resp = web.Response(status=status, text=text, content_type=ctype)
            resp.headers["Idempotent-Replayed"] = "true"
            return resp
        fut = asyncio.get_running_loop().create_future()
        self.entries[slot] = (fp, self.now(), fut)
        try:
            resp = await answer()
        except BaseException as exc:
            self._drop(slot)  # not kept: a retry does it
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning if none waits
            raise
        if 200 <= resp.status < 300 and isinstance(resp, web.Response) and \
                resp.text is not None:
            size = len(resp.body) if isinstance(resp.body, (bytes, bytearray)) else \
                len(resp.text.encode())
            if size > self.max_answer:   # done, but not kept whole: a replay says so
                fut.set_result((resp.status, None, resp.content_type))
            else:
                fut.set_result((resp.status, resp.text, resp.content_type))
                if slot in self.entries:
                    self.sizes[slot] = size
                    self.bytes += size
                    while self.bytes > self.max_bytes:   # the oldest answers go first
                        self._drop(next(iter(self.entries)))
        else:
            self._drop(slot)
            fut.set_result((resp.status, resp.text or "", resp.content_type))
        return resp

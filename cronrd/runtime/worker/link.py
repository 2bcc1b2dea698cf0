"""A worker's connection to the leader (the servers' worker port).

``Link`` dials the servers of ``worker.servers`` in turn until one is the
leader (a follower answers the hello with ``NotLeader`` and closes), keeps
that connection, and dials again when it ends. It is the executor's
proposer (``propose``: claims and reports go to the leader, which commits
them) and its fence: a worker may start a run only while it holds a lease
(a ping it sent within ``lease`` seconds was answered; the leader declares
a worker lost only after ``node_timeout`` of silence, twice that) and its
clock is within ``max_clock_offset`` of the leader's (measured from each
ping's round trip, as the members measure theirs).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any, Awaitable, Callable

from ...errors import CronrdError, NotLeader, StateError
from ...state import commands as C
from ..clock import Clock
from ..peers.tls import cert_is_worker, cert_names, client_context
from ..peers.worker_wire import (Channel, WireError, answer_error, error_of, read_frame,
                                 small_tls_buffers)
from ..tasks import wait_within

log = logging.getLogger("cronrd.worker")

HELLO_WAIT = 10.0      # s for a server's answer to the hello
PROPOSE_WAIT = 10.0    # s for a proposal's answer (then the caller retries)
CONNECT_WAIT = 5.0     # s to connect and shake hands
BACKOFF_MIN, BACKOFF_MAX = 0.2, 5.0   # s between rounds of the server list


class Link:
    changes = None   # (the claims' "leader changed" wake-up: a new leader is a new link)

    def __init__(self, node_id: str, servers: tuple[tuple[str, int], ...], tls: Any,
                 clock: Clock, *, hello: Callable[[], dict],
                 arrived: Callable[[dict], None],
                 welcome: Callable[[dict], Awaitable[None]],
                 message: Callable[[dict], None],
                 serve: dict[str, Callable[[dict], Awaitable[Any]]],
                 running: Callable[[], int] = lambda: 0):
        self.node_id = node_id
        self.servers = servers
        self.tls = tls
        self.clock = clock
        self.hello = hello
        self.arrived = arrived
        self.welcome = welcome
        self.message = message
        self.serve = serve
        self.running = running
        self.chan: Channel | None = None
        self.leader: str | None = None
        self.lease = 0.0
        self.lease_until = float("-inf")    # monotonic
        self.max_clock_offset = 0.5
        self.offset: float | None = None    # this clock minus the leader's (s)
        self.ping_every = 0.5
        self.connected = asyncio.Event()
        self.connects = 0
        self._ctx: ssl.SSLContext | None = None
        self._tasks: set[asyncio.Task] = set()

    # -- what the executor asks ------------------------------------------------------
    def fence(self) -> str | None:
        """Why this worker may not start a run now, or None."""
        if self.clock.monotonic() > self.lease_until:
            return ("had no fresh lease from the leader at the fire time (not connected to "
                    "it?)")
        if self.offset is None:
            return "has not measured its clock against the leader's yet"
        if abs(self.offset) > self.max_clock_offset:
            return (f"has a clock {self.offset * 1000:+.0f}ms off the leader's (over "
                    f"max_clock_offset {self.max_clock_offset * 1000:g}ms)")
        return None

    async def propose(self, cmd: C.Command) -> Any:
        chan = self.chan
        if chan is None:
            raise StateError(f"worker {self.node_id} is not connected to the leader; "
                             "the request is retried when it is")
        return await chan.request("propose", {"cmd": cmd.encode().decode()}, PROPOSE_WAIT)

    # -- the connection --------------------------------------------------------------
    async def run(self) -> None:
        """Keep a connection to the leader, until cancelled."""
        small_tls_buffers()
        self._ctx = client_context(self.tls)
        backoff = BACKOFF_MIN
        while True:
            for host, port in self.servers:
                try:
                    if await self._session(host, port):
                        backoff = BACKOFF_MIN
                except NotLeader as exc:
                    log.debug("event=worker_not_leader server=%s:%d leader=%s", host, port,
                              exc.leader)
                except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                        CronrdError) as exc:
                    log.info("event=worker_link_down server=%s:%d error=\"%s\"", host, port,
                             str(exc) or type(exc).__name__)
                except Exception:   # a bug: logged, and the link goes on (dialled again)
                    log.exception("event=worker_link_failed server=%s:%d", host, port)
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)

    async def _session(self, host: str, port: int) -> bool:
        """One connection to one server; True if it was the leader's."""
        reader, writer = await wait_within(asyncio.open_connection(
            host, port, ssl=self._ctx, server_hostname=""), CONNECT_WAIT)
        chan = Channel(writer)
        try:
            cert = writer.get_extra_info("peercert")
            if cert_is_worker(cert):
                raise StateError(f"{host}:{port} presented a worker's certificate "
                                 f"({sorted(cert_names(cert))}): it is not a server")
            # The hello's answer is read here, before anything else: the view is
            # the leader's list of this worker's runs before any later message
            # about them is applied (read_loop starts after).
            sent, wall = self.clock.monotonic(), self.clock.now()
            chan.send({"op": "hello", "id": 0, **self.hello()})
            reply = await wait_within(read_frame(reader), HELLO_WAIT)
            if "error" in reply:
                raise error_of(reply)
            answer = reply.get("ok")
            if not isinstance(answer, dict) or answer.get("node") != self.node_id:
                raise StateError(f"{host}:{port} answered the hello with something that is "
                                 "not a welcome")
            self.offset = None   # this leader's clock is measured afresh
            self._welcomed(answer)
            self._answered(sent, wall, answer)
            self.arrived(answer)
            self.chan = chan
            self.connects += 1
            log.info("event=worker_link_up server=%s:%d leader=%s runs=%d", host, port,
                     self.leader, len(answer.get("runs") or ()))
            loop = asyncio.get_running_loop()
            pump = loop.create_task(self._read(reader, chan))
            pinger = loop.create_task(self._ping(chan))   # the lease, during welcome too
            try:
                await self.welcome(answer)
                self.connected.set()
                await pump
            finally:
                pump.cancel()
                pinger.cancel()
            return True
        finally:
            if self.chan is chan:
                self.chan = None
                self.connected.clear()
                log.info("event=worker_link_lost leader=%s", self.leader)
            chan.close()

    def _welcomed(self, answer: dict) -> None:
        def number(key: str, default: float) -> float:
            v = answer.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
                and v > 0 else default
        self.leader = str(answer.get("leader") or "") or None
        self.lease = number("lease", 5.0)
        self.ping_every = number("ping", 0.5)
        self.max_clock_offset = number("max_clock_offset", 0.5)

    def _answered(self, sent: float, wall: float, answer: Any) -> None:
        """The leader answered what this worker sent at ``sent`` (monotonic;
        ``wall`` by its clock): the lease runs from the send, and the round
        trip measures the clock (dropped when it took longer than the offset
        allowed: it could not tell)."""
        rtt = self.clock.monotonic() - sent
        self.lease_until = sent + self.lease
        leader_now = answer.get("now") if isinstance(answer, dict) else None
        if isinstance(leader_now, (int, float)) and not isinstance(leader_now, bool) \
                and rtt <= self.max_clock_offset:
            self.offset = wall + rtt / 2 - float(leader_now)

    async def _read(self, reader: asyncio.StreamReader, chan: Channel) -> None:
        while not chan.closed:
            try:
                msg = await read_frame(reader)
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
                return
            except WireError as exc:
                log.warning("event=worker_bad_frame leader=%s error=\"%s\"", self.leader, exc)
                return
            if "re" in msg:
                chan.answered(msg)
                continue
            op = msg.get("op")
            handler = self.serve.get(op) if isinstance(op, str) else None
            if handler is not None and "id" in msg:
                task = asyncio.get_running_loop().create_task(self._answer(chan, msg, handler))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                continue
            try:
                self.message(msg)
            except Exception:   # one bad message must not cost the connection
                log.exception("event=worker_message_failed op=%s", op)

    async def _answer(self, chan: Channel, msg: dict, handler) -> None:
        try:
            result = await handler(msg)
        except CronrdError as exc:
            chan.send(answer_error(msg.get("id"), exc))
            return
        chan.send({"re": msg.get("id"), "ok": result})

    async def _ping(self, chan: Channel) -> None:
        """Renew the lease and measure the clock, every ping_every seconds."""
        while not chan.closed:
            sent, wall = self.clock.monotonic(), self.clock.now()
            try:
                answer = await chan.request("ping", {"offset": self.offset,
                                                     "running": self.running()},
                                            max(self.lease, 1.0))
            except CronrdError:
                chan.close()
                return
            self._answered(sent, wall, answer)
            await asyncio.sleep(max(0.0, self.ping_every - (self.clock.monotonic() - sent)))

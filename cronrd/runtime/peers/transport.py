"""Peer transport for Raft messages: framed, authenticated TCP on asyncio.

Shape
-----
* One **outgoing** connection per peer, owned by a writer task. ``send``
  encodes the message and appends the frame to that peer's bounded queue (it
  never blocks and never raises for network reasons); the writer task drains
  the queue and writes every queued frame in one ``write`` call (batching), then
  waits for the kernel buffer to drain. A lost connection is re-dialled with
  exponential back-off (``backoff_base`` doubling to ``backoff_max``, jittered
  by the injected ``random.Random``). Frames taken off the queue when a
  connection breaks are lost (counted in ``dropped_send_failed``): Raft
  retransmits, so the transport never replays.
* **Incoming** connections only carry frames towards us. Each one is read by
  its own task, which calls ``on_message(msg)`` for every valid message, in
  the order the peer sent them. The server never writes application data back
  (replies travel on our own outgoing connection to that peer).

Wire
----
Every frame is a u32 big-endian length and a payload (``cronrd.raft.codec``).
The first frame a dialling node sends is a *hello* naming itself; every later
frame is one encoded ``Message``.

Authentication
--------------
With ``tls`` (the default and only sane production mode) both sides use TLS
1.3 with certificates signed by the cluster CA (``cronrd.runtime.peers.tls``):

* the server requires a client certificate chaining to the CA;
* the client verifies the server certificate against the CA and checks that
  it names the peer it meant to dial (CN or subjectAltName DNS == peer id);
  host names are not checked, node ids are;
* the server accepts the hello only if the client certificate names the id
  the hello claims, and then only if ``authorize(id)`` (the cluster's
  membership view) admits that id: a certificate signed by the cluster CA
  is not enough, the node must be a member (or the one being added). A
  refused id is counted in ``dropped_nonmember``; ``revoke`` closes the
  connections of ids that stop being members;
* every message whose ``frm`` is not the authenticated id is dropped
  (``dropped_spoofed``), as is one whose ``to`` is not this node.

With ``tls=None`` the transport refuses to start unless ``insecure=True``.
In insecure mode the hello is **trusted as sent**: anyone who can reach the
port can impersonate any node, inject votes and entries, and so run commands
on every host. Use it only on a loopback or an isolated test network.

Robustness
----------
Malformed frames (bad payload, unknown codec version) are dropped with one
log line (at most ``_LOG_BAD_PER_CONN`` per connection, then one "suppressing"
line); a length above ``max_frame`` closes that connection; TLS failures and
name mismatches close the connection and count ``dropped_unauthenticated``.
A dialled connection whose data stays unacknowledged for ``stall_timeout``
(TCP_USER_TIMEOUT, also bounding an unanswered SYN) is aborted by the kernel
and dialled again: a connection that lived through a partition would
otherwise sit in TCP's retransmission back-off long after the path is back.
Memory is bounded: ``queue_limit`` frames and ``queue_bytes_limit`` bytes per
peer queue, ``max_frame`` per read, ``max_incoming`` connections.

Connections are bounded so that strangers cannot keep members out: a
connection must finish TLS and its hello within ``auth_timeout``; until it
has, it holds a slot: at most ``max_incoming`` such connections from
addresses that are not members' addresses, at most ``max_per_address`` from
any one of them, and the addresses of members (``set_peers``, and the
address each member last connected from) have slots of their own
(``member_slots`` each) that strangers cannot take. An admitted connection
gives its slot back (the bookkeeping: admission.py). Refusals are logged at
most ``REFUSAL_LOG_BURST`` times per ``REFUSAL_LOG_INTERVAL``, then summed
up in one line per interval.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
import ssl
from typing import Any, Callable

from cronrd.config import TLSPaths
from cronrd.raft.codec import (FRAME_HEADER, MAX_FRAME, CodecError, decode,
                               decode_hello_token, encode, encode_hello, frame)
from cronrd.raft.types import Message
from cronrd.runtime.clock import monotonic
from cronrd.runtime.tasks import wait_within
from cronrd.runtime.peers.admission import RefusalLog, Slots, one_spelling
from cronrd.runtime.peers.tls import (WORKER_OU, TransportConfigError, cert_is_worker,  # noqa: F401
                                      cert_names, cert_serial,
                                      client_context, server_context)

log = logging.getLogger("cronrd.transport")

_MAX_HELLO = 1024                 # a hello is ~10 bytes; anything bigger is not one
_BATCH_BYTES = 1024 * 1024        # at most this much per write() when coalescing
_LOG_BAD_PER_CONN = 5

STAT_NAMES = (
    "sent",                       # frames handed to a connection
    "received",                   # messages delivered to on_message
    "dropped_full",               # send() refused: the peer's queue is full
    "dropped_unknown_peer",       # send() refused: no such peer (or transport closed)
    "dropped_too_large",          # send() refused: encoded message above max_frame
    "dropped_encode_error",       # send() refused: the message cannot be encoded
    "dropped_send_failed",        # dequeued, but the connection broke before/while writing
    "dropped_bad_frame",          # incoming: malformed/oversized/unknown-version frame
    "dropped_unauthenticated",    # incoming: TLS failure, cert/hello mismatch, no hello
    "dropped_nonmember",          # incoming: authenticated, but not a member (authorize)
    "dropped_spoofed",            # incoming: msg.frm != authenticated id
    "dropped_misaddressed",       # incoming: msg.to != this node
    "on_message_errors",          # on_message raised (logged, connection kept)
    "connects",                   # outgoing connections established
    "reconnects",                 # ... of which re-established after a loss
    "connect_failures",           # outgoing dial/handshake failures
    "accepted",                   # incoming connections authenticated
    "rejected_connections",       # incoming connections refused (limit, shutdown)
)


TLSConfig = TLSPaths  # the one TLS paths type (cronrd.config)


_DIRECT_WRITE_LIMIT = 1 << 20  # bytes buffered in a connection before send() queues


class _Refused(Exception):
    """An incoming or outgoing connection failed authentication."""


class _Peer:
    __slots__ = ("id", "addr", "queue", "qbytes", "wake", "task", "connected",
                 "ever_connected", "failures", "flaps", "full_logged", "writer", "out",
                 "out_bytes")

    def __init__(self, peer_id: str, addr: tuple[str, int]):
        self.id = peer_id
        self.addr = addr
        self.queue: collections.deque[bytes] = collections.deque()
        self.qbytes = 0
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.connected = False
        self.ever_connected = False
        self.failures = 0
        self.flaps = 0
        self.full_logged = False
        self.writer: asyncio.StreamWriter | None = None
        self.out: list[bytes] = []  # frames to write directly at the end of this loop turn
        self.out_bytes = 0


class _Incoming:
    __slots__ = ("peer", "writer", "task", "bad_logged", "ip", "stranger", "counted")

    def __init__(self, writer: asyncio.StreamWriter | None, task: asyncio.Task | None):
        self.ip = ""
        self.stranger = True
        self.counted = False   # holds a pre-authentication slot
        self.peer: str | None = None
        self.writer = writer
        self.task = task
        self.bad_logged = 0


class Transport:
    def __init__(self, node_id: str, listen: tuple[str, int], peers: dict[str, tuple[str, int]],
                 on_message: Callable[[Message], None], *, tls: TLSConfig | None,
                 insecure: bool = False, queue_limit: int = 1024, max_frame: int = MAX_FRAME,
                 queue_bytes_limit: int = 64 * 1024 * 1024, rng: random.Random | None = None,
                 clock: Any = None, backoff_base: float = 0.05, backoff_max: float = 2.0,
                 connect_timeout: float = 5.0, write_timeout: float = 10.0,
                 max_incoming: int = 64, max_per_address: int = 8, member_slots: int = 4,
                 auth_timeout: float = 3.0, stall_timeout: float | None = 2.5,
                 authorize: Callable[[str, dict], str | None] | None = None):
        if tls is None and not insecure:
            raise TransportConfigError(
                f"node {node_id}: peer transport without TLS refused; configure tls "
                f"(ca, cert, key — see `cronrd cluster init-tls`) or set insecure: true "
                f"(test networks only: anyone reaching the port can impersonate a node)")
        if queue_limit < 1 or max_frame < 64:
            raise TransportConfigError(f"queue_limit must be >= 1 and max_frame >= 64 "
                                       f"(got {queue_limit}, {max_frame})")
        self.node_id = node_id
        self.listen = listen
        self.on_message = on_message
        self.tls = tls
        self.insecure = tls is None
        self.queue_limit = queue_limit
        self.queue_bytes_limit = queue_bytes_limit
        self.max_frame = max_frame
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.connect_timeout = connect_timeout
        self.write_timeout = write_timeout
        self.max_incoming = max_incoming
        self.max_per_address = max_per_address
        self.member_slots = member_slots
        self.auth_timeout = auth_timeout
        self.stall_timeout = stall_timeout
        self.authorize = authorize
        # Called with a peer's id when its current incoming connection ends.
        self.on_peer_closed: Callable[[str], None] | None = None
        self.join_token = ""                    # sent in our hello while we join with one
        self.peer_serials: dict[str, str] = {}  # member -> serial of its certificate
        self._slots = Slots(max_incoming=max_incoming, max_per_address=max_per_address,
                            member_slots=member_slots)
        self._rng = rng or random.Random()
        self._monotonic = clock.monotonic if clock is not None else monotonic
        self._refused = RefusalLog(node_id, self._monotonic)
        self._server_ctx = server_context(tls) if tls is not None else None
        self._client_ctx = client_context(tls) if tls is not None else None
        self.stats: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        self.port: int | None = None
        self.unknown_peers_seen: set[str] = set()
        self._peers: dict[str, _Peer] = {}
        self._incoming: set[_Incoming] = set()
        self._incoming_by_peer: dict[str, _Incoming] = {}
        self._last_contact: dict[str, float] = {}
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._started = False
        self._closed = False
        if self.insecure:
            log.warning("node %s: peer transport runs WITHOUT TLS (insecure mode): peers are "
                        "not authenticated", node_id)
        self.set_peers(peers)

    # ------------------------------------------------------------- public API

    async def start(self) -> None:
        host, port = self.listen
        try:
            sock = socket.create_server((host, port), family=_family(host), backlog=128)
        except OSError as exc:
            raise TransportConfigError(f"node {self.node_id}: cannot listen on {host}:{port}: "
                                       f"{exc}") from exc
        sock.setblocking(False)
        self._listener = sock
        self.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        self._accept_task = loop.create_task(self._accept_loop(sock),
                                             name=f"transport-{self.node_id}-accept")
        self._started = True
        for p in self._peers.values():
            self._start_peer(p)
        log.info("node %s: peer transport listening on %s:%d (%s)", self.node_id, host,
                 self.port, "plaintext, insecure" if self.insecure else "mutual TLS")

    def send(self, msg: Message) -> bool:
        p = self._peers.get(msg.to)
        if p is None or self._closed:
            self.stats["dropped_unknown_peer"] += 1
            return False
        if len(p.queue) >= self.queue_limit:
            return self._full(p)
        try:
            payload = encode(msg)
        except CodecError as exc:
            self.stats["dropped_encode_error"] += 1
            log.error("node %s: cannot encode %s for %s: %s", self.node_id, msg.type, msg.to, exc)
            return False
        if len(payload) > self.max_frame:
            self.stats["dropped_too_large"] += 1
            log.error("node %s: %s for %s is %d bytes, above max_frame %d; dropped",
                      self.node_id, msg.type.name, msg.to, len(payload), self.max_frame)
            return False
        data = frame(payload)
        w = p.writer
        if (w is not None and not p.queue and w.transport.get_write_buffer_size()
                + p.out_bytes + len(data) < _DIRECT_WRITE_LIMIT):
            # Fast path: connected and idle, so no task switch: every frame sent
            # to this peer in this loop turn goes out in one write (one TLS
            # record, one syscall); the queue and pump only take over under
            # backpressure or while reconnecting.
            if not p.out:
                asyncio.get_running_loop().call_soon(self._flush_direct, p)
            p.out.append(data)
            p.out_bytes += len(data)
            return True
        if p.out:
            # Over the direct-write budget: what is buffered goes first, through
            # the bounded queue like everything after it.
            for frame_ in p.out:
                p.queue.append(frame_)
                p.qbytes += len(frame_)
            p.out, p.out_bytes = [], 0
        if p.qbytes + len(data) > self.queue_bytes_limit:
            return self._full(p)
        p.queue.append(data)
        p.qbytes += len(data)
        p.full_logged = False
        p.wake.set()
        return True

    def flush(self) -> None:
        """Write every directly-buffered frame now (the Raft driver calls this
        before an fsync so that a leader's appends overlap it)."""
        for p in self._peers.values():
            if p.out:
                self._flush_direct(p)

    def _flush_direct(self, p: _Peer) -> None:
        out, p.out = p.out, []
        p.out_bytes = 0
        if not out:
            return
        w = p.writer
        if w is not None and not self._closed:
            try:
                w.write(b"".join(out))
                self.stats["sent"] += len(out)
                return
            except (RuntimeError, OSError):
                pass
        # The connection went away meanwhile: hand the frames to the pump,
        # ahead of anything queued after them.
        for data in reversed(out):
            if len(p.queue) < self.queue_limit:
                p.queue.appendleft(data)
                p.qbytes += len(data)
            else:
                self.stats["dropped_full"] += 1
        p.wake.set()

    def set_peers(self, peers: dict[str, tuple[str, int]]) -> None:
        """Make the outgoing peer set exactly ``peers`` (this node's own id is ignored).
        A peer whose address changed keeps its queue and re-dials the new address."""
        for pid in list(self._peers):
            if pid not in peers or pid == self.node_id:
                gone = self._peers.pop(pid)
                gone.writer = None
                if gone.task is not None:
                    gone.task.cancel()
                gone.queue.clear()
                gone.qbytes = 0
                log.info("node %s: peer %s removed", self.node_id, pid)
        self._slots.configure({pid: a for pid, a in peers.items() if pid != self.node_id})
        for pid, addr in peers.items():
            if pid == self.node_id:
                continue
            addr = (addr[0], int(addr[1]))
            p = self._peers.get(pid)
            if p is None:
                p = self._peers[pid] = _Peer(pid, addr)
                if self._started and not self._closed:
                    self._start_peer(p)
            elif p.addr != addr:
                log.info("node %s: peer %s moved %s -> %s", self.node_id, pid, p.addr, addr)
                p.addr = addr
                if p.task is not None:
                    p.task.cancel()
                    p.task = None
                p.connected = False
                p.writer = None
                if self._started and not self._closed:
                    self._start_peer(p)

    def connected_peers(self) -> list[str]:
        """Ids with an authenticated incoming connection open."""
        return list(self._incoming_by_peer)

    def revoke(self, peers: set[str] | list[str]) -> None:
        """Close the incoming connections of ``peers`` (they stopped being
        members); they are refused when they dial again."""
        for pid in peers:
            conn = self._incoming_by_peer.get(pid)
            if conn is not None and conn.writer is not None:
                log.warning("node %s: closing the connection of %s: no longer a member",
                            self.node_id, pid)
                conn.writer.transport.abort()

    def reachable(self, peer: str) -> bool:
        """True while an authenticated outgoing connection to ``peer`` is open."""
        p = self._peers.get(peer)
        return bool(p is not None and p.connected)

    def last_contact(self, peer: str) -> float | None:
        """Monotonic time of the last valid frame received from ``peer``."""
        return self._last_contact.get(peer)

    def queue_length(self, peer: str) -> int:
        p = self._peers.get(peer)
        return len(p.queue) if p is not None else 0

    def queue_bytes(self, peer: str) -> int:
        p = self._peers.get(peer)
        return p.qbytes if p is not None else 0

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = []
        if self._accept_task is not None:
            self._accept_task.cancel()
            tasks.append(self._accept_task)
        for p in self._peers.values():
            if p.task is not None:
                p.task.cancel()
                tasks.append(p.task)
            p.queue.clear()
            p.qbytes = 0
            p.out, p.out_bytes = [], 0
            p.wake.set()
        for conn in list(self._incoming):
            if conn.task is not None:
                conn.task.cancel()
                tasks.append(conn.task)
            if conn.writer is not None:
                conn.writer.transport.abort()
        # Every loop also checks _closed, so a cancellation lost inside
        # asyncio.wait_for (a known 3.11 race) still ends its task; the bounded
        # wait is a last resort so close() itself can never hang.
        for attempt in range(3):
            pending = [t for t in tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending, timeout=1.0)
            for t in pending:
                if not t.done():
                    t.cancel()
        else:
            log.error("node %s: %d transport tasks did not stop", self.node_id,
                      sum(not t.done() for t in tasks))
        if self._listener is not None:
            self._listener.close()

    # ------------------------------------------------------------- outgoing

    def _full(self, p: _Peer) -> bool:
        self.stats["dropped_full"] += 1
        if not p.full_logged:
            p.full_logged = True
            log.warning("node %s: send queue for %s is full (%d frames, %d bytes); dropping "
                        "messages until it drains", self.node_id, p.id, len(p.queue), p.qbytes)
        return False

    def _start_peer(self, p: _Peer) -> None:
        p.task = asyncio.get_running_loop().create_task(self._run_peer(p),
                                                        name=f"transport-{self.node_id}->{p.id}")

    def _backoff(self, delay: float) -> float:
        return delay * (0.5 + 0.5 * self._rng.random())

    async def _run_peer(self, p: _Peer) -> None:
        delay = self.backoff_base
        me = asyncio.current_task()
        while not self._closed and p.task is me:
            writer = None
            try:
                reader, writer = await self._dial(p)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.stats["connect_failures"] += 1
                p.failures += 1
                level = logging.WARNING if p.failures == 1 else logging.DEBUG
                log.log(level, "node %s: cannot connect to peer %s at %s:%d: %s (retrying with "
                        "back-off)", self.node_id, p.id, p.addr[0], p.addr[1], _describe(exc))
                await asyncio.sleep(self._backoff(delay))
                delay = min(delay * 2, self.backoff_max)
                continue
            self.stats["connects"] += 1
            if p.ever_connected:
                self.stats["reconnects"] += 1
            if (p.failures or p.ever_connected) and p.flaps <= 1:
                log.info("node %s: connected to peer %s at %s:%d", self.node_id, p.id, *p.addr)
            p.ever_connected = True
            p.failures = 0
            p.connected = True
            p.writer = writer
            since = self._monotonic()
            try:
                await self._pump(p, reader, writer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A connection dropped straight away (e.g. the peer refuses our
                # certificate, which TLS 1.3 reports only after the handshake)
                # keeps the back-off growing and is logged once, not every retry.
                if self._monotonic() - since >= self.backoff_max:
                    p.flaps = 0
                    delay = self.backoff_base
                else:
                    p.flaps += 1
                level = logging.DEBUG if p.flaps > 1 else logging.INFO
                log.log(level, "node %s: connection to peer %s lost: %s", self.node_id, p.id,
                        _describe(exc))
            finally:
                p.connected = False
                if p.writer is writer:
                    p.writer = None
                writer.transport.abort()
            await asyncio.sleep(self._backoff(delay))
            delay = min(delay * 2, self.backoff_max)

    async def _dial(self, p: _Peer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = p.addr
        kwargs: dict[str, Any] = {}
        if self._client_ctx is not None:
            # server_hostname "" = no SNI and no host-name check; the node id is checked below.
            kwargs = dict(ssl=self._client_ctx, server_hostname="",
                          ssl_handshake_timeout=self.connect_timeout)
        sock = await self._connect(host, port)
        try:
            reader, writer = await wait_within(
                asyncio.open_connection(sock=sock, **kwargs), self.connect_timeout * 2)
        except BaseException:
            sock.close()
            raise
        try:
            if self._client_ctx is not None:
                cert = writer.get_extra_info("peercert")
                names = cert_names(cert)
                if cert_is_worker(cert):
                    raise _Refused(f"{p.id} answered with a worker's certificate (OU "
                                   f"{WORKER_OU}); only members' certificates serve the "
                                   "peer port")
                if p.id not in names:
                    raise _Refused(f"its certificate names {sorted(names)}, not {p.id!r}")
                why = (self.authorize(p.id, {"serial": cert_serial(cert), "outgoing": True})
                       if self.authorize is not None else None)
                if why is not None:
                    raise _Refused(why)
            writer.write(frame(encode_hello(self.node_id, self.join_token)))
            await wait_within(writer.drain(), self.write_timeout)
        except BaseException:
            writer.transport.abort()
            raise
        return reader, writer

    async def _connect(self, host: str, port: int) -> socket.socket:
        """A TCP connection to ``host:port`` on a socket tuned before its SYN.

        ``TCP_USER_TIMEOUT`` (``stall_timeout``) makes the kernel abort a
        connection whose data stays unacknowledged that long, and a connect
        whose SYN goes unanswered. Without it a connection that lived through
        a partition sits in TCP's retransmission back-off (the gap doubling
        towards two minutes) long after the path is back, and every Raft
        message queued behind its lost segment waits: measured, a vote grant
        1.8 s late eleven seconds after a partition healed. Aborted, the
        connection is dialled afresh with our own back-off (at most
        ``backoff_max``).
        """
        loop = asyncio.get_running_loop()
        infos = await wait_within(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                                  self.connect_timeout)
        bind = self.listen[0] not in ("", "0.0.0.0", "::")
        error: BaseException = OSError(f"no address found for {host}")
        for family, kind, proto, _, addr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                if self.stall_timeout and hasattr(socket, "TCP_USER_TIMEOUT"):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT,
                                    max(1, int(self.stall_timeout * 1000)))
                if bind and _family(self.listen[0]) == family:
                    # Dial from the address we listen on: on a multi-homed
                    # host the cluster traffic stays on the cluster network,
                    # and a firewall rule on that address covers both
                    # directions.
                    sock.bind((self.listen[0], 0))
                await wait_within(loop.sock_connect(sock, addr), self.connect_timeout)
                return sock
            except asyncio.CancelledError:
                sock.close()
                raise
            except (OSError, TimeoutError) as exc:
                sock.close()
                error = exc
        raise error

    async def _pump(self, p: _Peer, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        # The server never sends us data: any read completing means it closed
        # (or broke protocol); either way the connection is done.
        eof = asyncio.ensure_future(reader.read(1))
        waiter: asyncio.Future | None = None
        me = asyncio.current_task()
        try:
            while not self._closed and p.task is me:
                if not p.queue:
                    p.wake.clear()
                    waiter = asyncio.ensure_future(p.wake.wait())
                    await asyncio.wait((waiter, eof), return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    waiter = None
                    if eof.done():
                        raise ConnectionError("peer closed the connection")
                    continue
                if eof.done():
                    raise ConnectionError("peer closed the connection")
                q = p.queue
                batch = [q.popleft()]
                size = len(batch[0])
                while q and size < _BATCH_BYTES:
                    f = q.popleft()
                    batch.append(f)
                    size += len(f)
                p.qbytes -= size
                try:
                    writer.write(batch[0] if len(batch) == 1 else b"".join(batch))
                    await wait_within(writer.drain(), self.write_timeout)
                except BaseException:
                    self.stats["dropped_send_failed"] += len(batch)
                    raise
                self.stats["sent"] += len(batch)
        finally:
            if waiter is not None:
                waiter.cancel()
            eof.cancel()
            if eof.done() and not eof.cancelled():
                eof.exception()  # retrieved, so asyncio does not log it

    # ------------------------------------------------------------- incoming

    async def _accept_loop(self, sock: socket.socket) -> None:
        # Our own accept loop rather than asyncio.start_server(ssl=...): that one
        # hides TLS handshake failures from us (they could not be counted or
        # logged as refusals), and StreamWriter.start_tls on an accepted
        # connection can lose the ClientHello already buffered by the reader.
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                conn_sock, addr = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE and friends: do not spin
                log.error("node %s: accept failed: %s", self.node_id, _describe(exc))
                await asyncio.sleep(0.1)
                continue
            where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            ip = one_spelling(addr[0]) if isinstance(addr, tuple) else str(addr)
            why = "shutting down" if self._closed else self._slots.refusal(ip)
            if why is not None:
                self.stats["rejected_connections"] += 1
                self._refused(where, why)
                conn_sock.close()
                continue
            conn = _Incoming(None, None)
            self._slots.take(conn, ip)
            self._incoming.add(conn)
            conn.task = loop.create_task(self._handle(conn, conn_sock, where),
                                         name=f"transport-{self.node_id}-in-{where}")

    async def _handle(self, conn: _Incoming, sock: socket.socket, where: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                reader = asyncio.StreamReader(limit=2 ** 16, loop=loop)
                protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
                kwargs: dict[str, Any] = {}
                if self._server_ctx is not None:
                    kwargs = dict(ssl=self._server_ctx, ssl_handshake_timeout=self.auth_timeout)
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, **kwargs)
            except asyncio.CancelledError:
                sock.close()
                raise
            except Exception as exc:
                sock.close()
                self.stats["dropped_unauthenticated"] += 1
                self._refused(where, f"TLS handshake failed: {_describe(exc)}")
                return
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            conn.writer = writer
            await self._serve(conn, reader, writer, where)
        except asyncio.CancelledError:
            pass
        except Exception:  # never let one connection take the node down
            log.exception("node %s: error on connection from %s", self.node_id, where)
        finally:
            self._incoming.discard(conn)
            self._slots.release(conn)
            if conn.peer is not None and self._incoming_by_peer.get(conn.peer) is conn:
                del self._incoming_by_peer[conn.peer]
                if not self._closed and self.on_peer_closed is not None:
                    # The peer's current connection to us ended (it died, or
                    # restarts its transport): the driver may act on it.
                    self.on_peer_closed(conn.peer)
            if conn.writer is not None:
                conn.writer.transport.abort()

    async def _serve(self, conn: _Incoming, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, where: str) -> None:
        try:
            peer, token, serial = await wait_within(
                self._authenticate(reader, writer, where), self.auth_timeout)
        except asyncio.CancelledError:
            raise
        except (_Refused, ssl.SSLError, ssl.CertificateError, OSError, EOFError,
                asyncio.IncompleteReadError, TimeoutError) as exc:
            self.stats["dropped_unauthenticated"] += 1
            self._refused(where, _describe(exc))
            return
        except CodecError as exc:
            self.stats["dropped_bad_frame"] += 1
            self._refused(where, f"bad hello: {exc}")
            return
        why = (self.authorize(peer, {"serial": serial, "token": token})
               if self.authorize is not None else None)
        if why is not None:
            self.stats["dropped_nonmember"] += 1
            self._refused(f"{peer} ({where})", why)
            return
        conn.peer = peer
        self._slots.release(conn)
        if serial:
            self.peer_serials[peer] = serial
        if peer in self._peers:
            self._slots.member_from(peer, conn.ip)
        self.stats["accepted"] += 1
        self._last_contact[peer] = self._monotonic()
        old = self._incoming_by_peer.get(peer)
        if old is not None:
            # The peer re-dialled: its previous connection is dead from its side.
            assert old.writer is not None  # (an accepted connection has its writer)
            old.writer.transport.abort()
        self._incoming_by_peer[peer] = conn
        if peer not in self._peers and peer not in self.unknown_peers_seen:
            self.unknown_peers_seen.add(peer)
            log.info("node %s: accepted connection from %s (%s), which is not a configured "
                     "peer (a member being added?)", self.node_id, peer, where)
        where = f"{peer} ({where})"
        on_message = self.on_message
        stats = self.stats
        max_frame = self.max_frame
        me = self.node_id
        while not self._closed:
            try:
                header = await reader.readexactly(4)
                (n,) = FRAME_HEADER.unpack(header)
                if n > max_frame:
                    stats["dropped_bad_frame"] += 1
                    log.warning("node %s: closing connection from %s: frame of %d bytes exceeds "
                                "max_frame %d", me, where, n, max_frame)
                    return
                payload = await reader.readexactly(n)
            except asyncio.IncompleteReadError:
                return  # closed by the peer
            except (OSError, ssl.SSLError) as exc:
                log.info("node %s: connection from %s lost: %s", me, where, _describe(exc))
                return
            try:
                msg = decode(payload)
            except CodecError as exc:
                stats["dropped_bad_frame"] += 1
                self._log_bad(conn, where, f"malformed frame dropped: {exc}")
                continue
            if msg.frm != peer:
                stats["dropped_spoofed"] += 1
                self._log_bad(conn, where, f"{msg.type.name} claiming to be from {msg.frm!r} dropped")
                continue
            if msg.to != me:
                stats["dropped_misaddressed"] += 1
                self._log_bad(conn, where, f"{msg.type.name} addressed to {msg.to!r} dropped")
                continue
            self._last_contact[peer] = self._monotonic()
            stats["received"] += 1
            try:
                on_message(msg)
            except Exception:
                stats["on_message_errors"] += 1
                log.exception("node %s: on_message failed for %s from %s", me, msg.type.name, peer)

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            where: str) -> tuple[str, str, str]:
        names: set[str] | None = None
        serial = ""
        if self._server_ctx is not None:
            cert = writer.get_extra_info("peercert")
            if cert_is_worker(cert):
                # A worker (cronrd worker) reaches the cluster through the
                # servers' worker port only: on this port it could send Raft
                # messages or ask to join as a member. Refused before its hello.
                raise _Refused(f"a worker's certificate ({sorted(cert_names(cert))}, OU "
                               f"{WORKER_OU}) may not speak the peer protocol")
            names = cert_names(cert)
            serial = cert_serial(cert)
        header = await reader.readexactly(4)
        (n,) = FRAME_HEADER.unpack(header)
        if n > _MAX_HELLO:
            raise CodecError(f"first frame of {n} bytes is not a hello")
        peer, token = decode_hello_token(await reader.readexactly(n))
        if names is not None and peer not in names:
            raise _Refused(f"hello claims to be {peer!r} but the certificate names {sorted(names)}")
        if peer == self.node_id:
            raise _Refused(f"hello claims to be this node ({peer!r})")
        return peer, token, serial

    def _log_bad(self, conn: _Incoming, where: str, what: str) -> None:
        conn.bad_logged += 1
        if conn.bad_logged <= _LOG_BAD_PER_CONN:
            log.warning("node %s: from %s: %s", self.node_id, where, what)
        if conn.bad_logged == _LOG_BAD_PER_CONN:
            log.warning("node %s: from %s: further bad frames on this connection are counted "
                        "but not logged", self.node_id, where)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, TimeoutError) or isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

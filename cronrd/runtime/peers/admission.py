"""Who gets a connection slot on the peer listener, and how refusals are
logged: the listener's bookkeeping, apart from its sockets (transport.py).

A connection holds a slot from accept until it authenticates (TLS and its
hello, within the transport's ``auth_timeout``); an admitted member gives
its slot back. Strangers cannot keep members out: the addresses of members
(configured, and each member's last source address) have ``member_slots``
each of their own; any other address gets at most ``max_per_address``, and
all of them together ``max_incoming``.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Protocol

log = logging.getLogger("cronrd.transport")

REFUSAL_LOG_INTERVAL = 10.0  # seconds; refusals beyond the burst are summed up
REFUSAL_LOG_BURST = 5


def one_spelling(host: str) -> str:
    """One spelling per address (an IPv4-mapped IPv6 address is its IPv4)."""
    return host[7:] if host.startswith("::ffff:") else host


class Holder(Protocol):
    """A connection as the slots see it."""
    ip: str
    stranger: bool
    counted: bool   # holds a pre-authentication slot


class Slots:
    """The pre-authentication slots, by source address."""

    def __init__(self, *, max_incoming: int, max_per_address: int, member_slots: int):
        self.max_incoming = max_incoming
        self.max_per_address = max_per_address
        self.member_slots = member_slots
        self.by_address: dict[str, int] = {}   # open unauthenticated connections per address
        self.strangers = 0                     # ... of which from non-member addresses
        self.member_ips: set[str] = set()
        self._configured: set[str] = set()
        self._seen: dict[str, str] = {}        # member -> the address it connected from

    def configure(self, members: Mapping[str, tuple[str, int]]) -> None:
        """The members (id -> configured address), this node left out."""
        self._seen = {m: ip for m, ip in self._seen.items() if m in members}
        self._configured = {one_spelling(addr[0]) for addr in members.values()}
        self.member_ips = self._configured | set(self._seen.values())

    def member_from(self, member: str, ip: str) -> None:
        """A member authenticated from ``ip``: that address gets member slots
        from now on (its configured address may be a host name, or another
        interface)."""
        if self._seen.get(member) != ip:
            self._seen[member] = ip
            self.member_ips = self._configured | set(self._seen.values())

    def refusal(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` is refused, or None."""
        have = self.by_address.get(ip, 0)
        if ip in self.member_ips:
            if have >= self.member_slots:
                return f"{have} connections already open from this member's address"
            return None
        if have >= self.max_per_address:
            return f"{have} connections already open from {ip} (max_per_address)"
        if self.strangers >= self.max_incoming:
            return (f"{self.strangers} connections from non-member addresses already "
                    "open; members' addresses keep their own slots")
        return None

    def take(self, conn: Holder, ip: str) -> None:
        """``conn``, just accepted from ``ip``, takes a slot."""
        conn.ip = ip
        conn.stranger = ip not in self.member_ips
        conn.counted = True
        self.by_address[ip] = self.by_address.get(ip, 0) + 1
        self.strangers += conn.stranger

    def release(self, conn: Holder) -> None:
        """``conn`` authenticated or ended: its slot is free (once)."""
        if not conn.counted:
            return
        conn.counted = False
        left = self.by_address.get(conn.ip, 1) - 1
        if left > 0:
            self.by_address[conn.ip] = left
        else:
            self.by_address.pop(conn.ip, None)
        self.strangers -= conn.stranger


class RefusalLog:
    """Logs refused connections, at most a burst per interval; the rest
    are summed up in one line when the interval ends."""

    def __init__(self, node_id: str, monotonic: Callable[[], float]):
        self.node_id = node_id
        self._monotonic = monotonic
        self._logged = 0        # refusals logged in this interval
        self._quiet = 0         # refusals not logged in this interval
        self._window = 0.0      # when this interval began

    def __call__(self, where: str, why: str) -> None:
        now = self._monotonic()
        if now - self._window >= REFUSAL_LOG_INTERVAL:
            if self._quiet:
                log.warning("node %s: refused %d more connections in the last %.0fs (not "
                            "logged one by one)", self.node_id, self._quiet, now - self._window)
            self._window = now
            self._quiet = 0
            self._logged = 0
        if self._logged < REFUSAL_LOG_BURST:
            self._logged += 1
            log.warning("node %s: refused connection from %s: %s", self.node_id, where, why)
        else:
            self._quiet += 1

"""The listener's slots and refusal log (``cronrd.runtime.peers.admission``),
without sockets: members keep slots strangers cannot take, a slot is given
back once, refusals are logged a burst at a time."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cronrd.runtime.peers.admission import (REFUSAL_LOG_BURST, REFUSAL_LOG_INTERVAL,
                                            RefusalLog, Slots, one_spelling)


@dataclass
class Conn:
    ip: str = ""
    stranger: bool = True
    counted: bool = False


def slots() -> Slots:
    s = Slots(max_incoming=3, max_per_address=2, member_slots=2)
    s.configure({"b": ("10.0.0.2", 7000), "c": ("::ffff:10.0.0.3", 7000)})
    return s


def test_strangers_fill_their_slots_but_not_the_members():
    s = slots()
    for ip in ("192.0.2.1", "192.0.2.1", "192.0.2.2"):
        assert s.refusal(ip) is None
        s.take(Conn(), ip)
    assert "max_per_address" in s.refusal("192.0.2.1")
    assert "non-member addresses" in s.refusal("192.0.2.9")
    # members' addresses (the mapped IPv6 one too) keep their own slots
    assert s.refusal("10.0.0.2") is None and s.refusal("10.0.0.3") is None
    a, b = Conn(), Conn()
    s.take(a, "10.0.0.2")
    s.take(b, "10.0.0.2")
    assert not a.stranger and "this member's address" in s.refusal("10.0.0.2")


def test_a_slot_is_given_back_once():
    s = slots()
    conn = Conn()
    s.take(conn, "192.0.2.1")
    assert (s.by_address, s.strangers) == ({"192.0.2.1": 1}, 1)
    s.release(conn)
    s.release(conn)  # admitted, then ended: counted once
    assert (s.by_address, s.strangers) == ({}, 0)


def test_a_member_seen_from_another_address_gets_member_slots_there():
    s = slots()
    assert "10.9.9.9" not in s.member_ips
    s.member_from("b", "10.9.9.9")
    assert "10.9.9.9" in s.member_ips
    s.configure({"c": ("10.0.0.3", 7000)})  # b is no longer a member
    assert s.member_ips == {"10.0.0.3"}


def test_one_spelling_per_address():
    assert one_spelling("::ffff:192.0.2.1") == "192.0.2.1" and one_spelling("::1") == "::1"


def test_refusals_are_logged_a_burst_per_interval_then_summed(caplog):
    now = [100.0]
    refused = RefusalLog("a", lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="cronrd.transport"):
        for i in range(REFUSAL_LOG_BURST + 3):
            refused(f"192.0.2.{i}:1", "no")
        assert len(caplog.records) == REFUSAL_LOG_BURST
        now[0] += REFUSAL_LOG_INTERVAL
        refused("192.0.2.99:1", "no")
    assert "refused 3 more connections" in caplog.records[-2].getMessage()
    assert caplog.records[-1].getMessage().endswith("192.0.2.99:1: no")

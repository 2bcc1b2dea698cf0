"""A worker's link to the leader (worker/link.py): its lease runs from the
send of an answered ping, and its clock is measured from the round trip."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.errors import StateError
from cronrd.runtime.worker.link import Link
from cronrd.state import commands as C


class FakeClock:
    def __init__(self):
        self.mono, self.wall = 100.0, 5000.0

    def monotonic(self):
        return self.mono

    def now(self):
        return self.wall


def _link(clock):
    async def welcome(answer):
        return None
    return Link("wk1", (("127.0.0.1", 1),), None, clock, hello=dict,
                arrived=lambda answer: None, welcome=welcome, message=lambda m: None,
                serve={})


def test_no_lease_no_start_and_an_answer_gives_one_from_its_send():
    clock = FakeClock()
    link = _link(clock)
    assert "no fresh lease" in link.fence()
    link._welcomed({"lease": 5.0, "ping": 0.5, "max_clock_offset": 0.5})
    sent, wall = clock.mono, clock.wall
    clock.mono += 0.01           # a 10 ms round trip
    clock.wall += 0.01
    link._answered(sent, wall, {"now": wall + 0.005 - 0.2})   # the leader's clock 200 ms behind
    assert link.offset == pytest.approx(0.2) and link.fence() is None
    assert link.lease_until == sent + 5.0
    clock.mono = sent + 5.01     # one lease after the ping was sent: fenced
    assert "no fresh lease" in link.fence()


def test_a_clock_off_the_leaders_starts_nothing_and_a_slow_trip_measures_nothing():
    clock = FakeClock()
    link = _link(clock)
    link._welcomed({"lease": 5.0, "max_clock_offset": 0.5})
    link._answered(clock.mono, clock.wall, {"now": clock.wall - 0.9})
    assert "clock +900ms off the leader's" in link.fence()
    sent = clock.mono
    clock.mono += 0.8            # a round trip longer than max_clock_offset: no measure
    link._answered(sent, clock.wall, {"now": clock.wall})
    assert link.offset == pytest.approx(0.9) and link.lease_until == sent + 5.0
    fresh = _link(clock)
    fresh._welcomed({"lease": 5.0})
    fresh._answered(clock.mono, clock.wall, {"now": "soon"})
    assert "has not measured its clock" in fresh.fence()


def test_a_proposal_without_a_connection_is_retried_later():
    link = _link(FakeClock())
    with pytest.raises(StateError, match="not connected to the leader"):
        asyncio.run(link.propose(C.ClaimRuns(node="wk1", at=1.0, claims=[])))

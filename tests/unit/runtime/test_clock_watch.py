"""Clock offsets between members (runtime/clock_watch.py): a follower and a
leader on fake clocks, the peer request between them in process. The math:
unit/decisions/test_clocks.py; real clocks under faketime:
integration/test_cluster_clocks.py."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cronrd.runtime.clock_watch import ClockWatch


class Clock:
    """A node's clock: shared true time plus this node's wall offset."""

    def __init__(self, world, offset=0.0):
        self.world, self.offset = world, offset

    def now(self):
        return self.world["t"] + self.offset

    def monotonic(self):
        return self.world["t"]


def cluster(offsets: dict[str, float], leader="a", rtt=0.002, limit=0.5):
    world = {"t": 1000.0}
    watches: dict[str, ClockWatch] = {}

    async def call(node, method, args, timeout):
        world["t"] += rtt / 2
        reply = await watches[node].rpc(caller["id"], args)
        world["t"] += rtt / 2
        return reply
    caller = {"id": None}
    for nid, off in offsets.items():
        watches[nid] = ClockWatch(nid, Clock(world, off), limit, lambda: leader,
                                  lambda nid=nid: nid == leader, lambda: list(offsets), call)

    async def rounds(n=3):  # a first estimate, reports in, everyone told the median
        for _ in range(n):
            for nid, w in watches.items():
                caller["id"] = nid
                await w.probe()
                w.check()
            world["t"] += 1.0
    return watches, rounds


def test_every_node_knows_its_offset_from_the_median_and_the_leader_knows_all(caplog):
    watches, rounds = cluster({"a": 0.0, "b": 0.004, "c": 30.0})
    with caplog.at_level(logging.INFO, logger="cronrd.cluster"):
        asyncio.run(rounds())
    assert watches["c"].own()["offset"] == pytest.approx(29.996, abs=0.002)
    assert watches["c"].own()["vs_leader"] == pytest.approx(30.0, abs=0.002)
    assert watches["c"].is_off() and not watches["b"].is_off() and not watches["a"].is_off()
    on_leader = watches["a"].members()
    assert on_leader["c"] == pytest.approx(29.996, abs=0.002)
    assert abs(on_leader["a"]) < 0.01 and abs(on_leader["b"]) < 0.01
    # Logged once where it is measured (c itself, and the leader), not every second.
    offs = [r for r in caplog.records if "event=clock_off node=c" in r.getMessage()]
    assert len(offs) == 2 and all("max_clock_offset" in r.getMessage() for r in offs)


def test_a_leader_whose_clock_is_wrong_is_the_one_shown_off():
    watches, rounds = cluster({"a": -30.0, "b": 0.0, "c": 0.001})
    asyncio.run(rounds())
    assert watches["a"].is_off() and watches["a"].own()["offset"] == pytest.approx(-30.0,
                                                                                  abs=0.01)
    assert not watches["b"].is_off() and not watches["c"].is_off()
    assert watches["b"].own()["vs_leader"] == pytest.approx(30.0, abs=0.002)


def test_a_clock_that_comes_back_is_logged_back(caplog):
    watches, rounds = cluster({"a": 0.0, "b": 2.0, "c": 0.0})
    with caplog.at_level(logging.INFO, logger="cronrd.cluster"):
        asyncio.run(rounds())
        watches["b"].clock.offset = 0.0
        watches["b"].samples.clear()   # (an old fast sample would otherwise linger 30 s)
        asyncio.run(rounds())
    assert not watches["b"].is_off()
    text = [r.getMessage() for r in caplog.records if "node=b" in r.getMessage()]
    assert any("event=clock_off" in t for t in text) and any("event=clock_ok" in t for t in text)


@pytest.mark.parametrize("args", [{"offset": "1"}, {"offset": float("nan")}, {"offset": 1e9},
                                  {"offset": True}, {"offset": 0.1, "error": "x"}])
def test_a_bad_report_is_refused_and_changes_nothing(args):
    watches, _ = cluster({"a": 0.0, "b": 0.0})
    with pytest.raises(ValueError, match="seconds"):
        asyncio.run(watches["a"].rpc("b", args))
    assert watches["a"].reports == {}


def test_unknown_until_measured_and_kept_across_a_leader_change():
    watches, rounds = cluster({"a": 0.0, "b": 0.3})
    assert watches["b"].own()["offset"] is None and not watches["b"].is_off()
    asyncio.run(rounds())
    assert watches["b"].own()["vs_leader"] == pytest.approx(0.3, abs=0.002)
    # Another leader now: the clock did not move, and a node must not stop
    # starting runs until the new leader has answered.
    watches["b"]._leader = lambda: "z"
    assert watches["b"].own()["vs_leader"] == pytest.approx(0.3, abs=0.002)
    assert watches["b"].fence() is None


def test_no_clock_is_judged_before_a_majority_has_reported():
    """With only the leader's clock to go by, a median would call a good
    follower wrong whenever the leader's clock is the bad one."""
    watches, rounds = cluster({"a": 30.0, "b": 0.0, "c": 0.0})
    asyncio.run(rounds(1))   # first answers: no follower has reported an offset yet
    assert all(w.own()["offset"] is None and not w.is_off() for w in watches.values())
    assert watches["a"].members() == {}


def test_two_clocks_of_three_are_not_enough_to_judge():
    """Found by the faketime test: with the leader's and the bad clock only,
    the median is their mean and called a 30 s clock 15 s off."""
    watches, _ = cluster({"a": 0.0, "b": 0.0, "c": 30.0})
    asyncio.run(watches["a"].rpc("c", {"offset": 30.0, "error": 0.001}))
    assert watches["a"].members() == {} and watches["a"].own()["offset"] is None
    reply = asyncio.run(watches["a"].rpc("b", {"offset": 0.001, "error": 0.001}))
    assert reply["median"] == pytest.approx(0.001)
    assert watches["a"].members()["c"] == pytest.approx(29.999)


def test_a_follower_starts_no_run_until_its_clock_is_measured_and_within_bounds():
    watches, rounds = cluster({"a": 0.0, "b": 0.0, "c": 30.0})
    assert watches["c"].fence() == "has not measured its clock against the leader's yet"
    # A leader of three waits for the followers' reports: its own clock may
    # be the wrong one.
    assert "just elected" in watches["a"].fence()
    asyncio.run(rounds(1))
    # Measured against the leader (the median not known yet): already fenced.
    assert "30.0s ahead" in watches["c"].fence() and "max_clock_offset" in watches["c"].fence()
    assert watches["b"].fence() is None
    asyncio.run(rounds(2))
    assert "30.0s ahead" in watches["c"].fence() and watches["b"].fence() is None
    assert watches["a"].fence() is None


def test_a_new_leader_goes_by_its_last_measurement_until_the_reports_are_in():
    """After a failover the new leader knows its clock against the old
    leader's: its runs are not held back while the followers report."""
    watches, rounds = cluster({"a": 0.0, "b": 0.002, "c": 0.0})
    asyncio.run(rounds())
    b = watches["b"]
    b._is_leader = lambda: True
    b.reports.clear()
    assert b.own()["offset"] is None and b.own()["vs_leader"] == pytest.approx(0.002, abs=0.002)
    assert b.fence() is None


def test_a_leader_whose_clock_is_off_holds_itself_and_hands_over_to_a_good_clock(caplog):
    watches, rounds = cluster({"a": 30.0, "b": 0.0, "c": 0.001})
    held, handed = [], []

    async def hand_over(good):
        handed.append(good)
        return good[0]
    a = watches["a"]
    a._hold = held.append
    a._hand_over = hand_over
    with caplog.at_level(logging.WARNING, logger="cronrd.cluster"):
        asyncio.run(rounds())
        asyncio.run(a.act())
    assert held == [True] and handed and handed[-1] == ["b", "c"]
    assert "event=clock_step_down node=a to=b" in caplog.text
    # A follower with a good clock is not held.
    assert not watches["b"].held

"""Clock offsets from round trips (decisions/clocks.py), on given times."""

from __future__ import annotations

import pytest

from cronrd.decisions import clocks as K


def sample(local_ahead: float, rtt: float, at: float, asked_at: float = 5000.0,
           reply_delay: float | None = None) -> K.Sample:
    """A round trip to a peer whose clock is ``local_ahead`` behind ours; the
    answer is taken ``reply_delay`` after the question left (default: half
    way through the round trip)."""
    d = rtt / 2 if reply_delay is None else reply_delay
    return K.Sample(sent=asked_at, rtt=rtt, remote=asked_at + d - local_ahead, at=at)


def test_a_symmetric_round_trip_gives_the_offset_exactly():
    assert sample(0.25, 0.004, at=1.0).offset == pytest.approx(0.25)
    assert sample(-30.0, 0.010, at=1.0).offset == pytest.approx(-30.0)


def test_the_shortest_round_trip_of_the_window_wins_and_bounds_the_error():
    # A slow answer (queued on the way back) is off by up to half its round trip.
    slow = sample(0.1, 0.200, at=10.0, reply_delay=0.010)
    fast = sample(0.1, 0.002, at=11.0)
    est = K.estimate([slow, fast], now=12.0)
    assert est.offset == pytest.approx(0.1) and est.error == pytest.approx(0.001)
    assert abs(slow.offset - 0.1) > 0.05  # the slow one alone would have been wrong


def test_old_samples_age_out_of_the_estimate_and_the_list():
    old = sample(5.0, 0.001, at=0.0)
    new = sample(0.0, 0.050, at=K.WINDOW + 1)
    est = K.estimate([old, new], now=K.WINDOW + 1)
    assert est.offset == pytest.approx(0.0)   # the old best sample no longer counts
    assert K.estimate([old], now=K.WINDOW + 1) is None
    kept = K.keep([old], new, now=K.WINDOW + 1)
    assert kept == [new]
    many: list[K.Sample] = []
    for i in range(K.MAX_SAMPLES + 10):
        many = K.keep(many, sample(0.0, 0.001, at=float(i) / 100), now=float(i) / 100)
    assert len(many) == K.MAX_SAMPLES and many[-1].at == pytest.approx((K.MAX_SAMPLES + 9) / 100)


def test_the_reference_tells_which_clock_is_wrong_the_leaders_included():
    # A follower 30 s fast: it alone is off.
    ahead = {"a": 0.0, "b": 0.01, "c": 30.0}
    assert K.from_median(ahead, K.reference(ahead, 0.5, 3)) == pytest.approx(
        {"a": -0.005, "b": 0.005, "c": 29.995})
    # The leader (a) 30 s fast: both followers see themselves 30 s behind it;
    # against the reference the leader is the one off.
    ahead = {"a": 0.0, "b": -30.0, "c": -30.02}
    rel = K.from_median(ahead, K.reference(ahead, 0.5, 3))
    assert rel["a"] == pytest.approx(30.01) and abs(rel["b"]) < 0.05
    assert K.reference({"a": 0.0}, 0.5, 1) == 0.0 and K.from_median({}, 0.0) == {}


def test_off_is_beyond_the_limit_either_way_and_unknown_is_not_off():
    assert K.off(0.6, 0.5) and K.off(-0.6, 0.5)
    assert not K.off(0.5, 0.5) and not K.off(None, 0.5)
    assert K.describe(30.0) == "30.0s ahead" and K.describe(-0.35) == "350ms behind"
    assert K.describe(0.0) == "in step"



def test_the_reference_is_the_largest_group_of_clocks_that_agree_if_a_majority():
    # Two good and two 30 s fast of five: no majority agrees (a median of
    # four would have said +15 s and called every clock wrong).
    assert K.reference({"a": 0.0, "b": 0.01, "c": 30.0, "d": 30.0}, 0.5, 5) is None
    # Three agree of five: their median.
    assert K.reference({"a": 0.0, "b": 0.01, "c": 0.02, "d": 30.0}, 0.5, 5) == \
        pytest.approx(0.01)
    # Two of three that agree are enough; two that disagree are not.
    assert K.reference({"a": 0.0, "b": 0.2}, 0.5, 3) == pytest.approx(0.1)
    assert K.reference({"a": 0.0, "b": 30.0}, 0.5, 3) is None
    assert K.relative(-0.35) == "350ms behind" and K.relative(2.0) == "2.0s ahead of"


# -- issue 29, point 5: placement knows clocks ------------------------------------------------
def test_the_leader_places_no_run_on_a_clock_it_has_not_measured_or_that_is_off():
    from cronrd.decisions.clocks import placement_bar
    offsets = {"a": 0.0, "b": 0.004, "c": 30.0}
    assert placement_bar("b", "a", offsets, 0.5, None) is None
    assert "30.0s ahead of" in placement_bar("c", "a", offsets, 0.5, None)
    # d answers the new leader but has not reported its clock yet: it may be
    # the one 30 s off (a run placed there was reported lost 30 s late)
    assert "not measured by this leader" in placement_bar("d", "a", offsets, 0.5, None)
    # the leader itself: only its own fence counts
    assert placement_bar("a", "a", offsets, 0.5, None) is None
    assert "not measured" in placement_bar("a", "a", {}, 0.5, "has not measured its clock")
    # a follower's view (it measures its own clock only) holds nothing unknown
    assert placement_bar("d", "b", offsets, 0.5, None, measured=False) is None
    assert placement_bar("c", "b", offsets, 0.5, None, measured=False) is not None


def test_a_new_leader_waits_for_the_clocks_of_the_members_that_answer_it():
    from cronrd.decisions.clocks import unmeasured
    members = ["a", "b", "c", "d"]
    assert unmeasured(members, "a", {"a": 0.0, "b": 0.0}, answering={"b", "c"}) == ["c"]
    assert unmeasured(members, "a", {"a": 0.0, "b": 0.0, "c": 9.0}, {"b", "c"}) == []
    assert unmeasured(members, "a", {}, answering=()) == []   # d, down: not waited for


def test_only_a_clock_behind_within_bounds_moves_a_claim_deadline():
    """A node 30 s behind claims nothing (fenced); its claim deadline waited
    30 s for it all the same, and its runs started 9 s late (fault suite,
    clock-jump seed 321856370) when its clock came back sooner."""
    vs = {"a": -0.3, "b": -30.0, "c": 0.2, "d": -0.5, "e": 0.0}
    assert K.behind(vs, 0.5) == {"a": pytest.approx(0.3), "d": 0.5}

"""The leader's view of a follower (``cronrd.raft.tracker``)."""

import pytest

from cronrd.raft.tracker import PROBE, REPLICATE, SNAPSHOT, Progress, most_caught_up


def test_probe_waits_for_the_answer_to_its_one_append():
    pr = Progress(match=3, next=4)
    assert pr.state == PROBE and not pr.paused(8)
    pr.probe_sent = True
    assert pr.paused(8)


def test_replicate_pauses_at_max_inflight_and_acks_free_the_window():
    pr = Progress(match=3, next=4)
    pr.become_replicate()
    pr.inflight = [5, 7]
    assert pr.paused(2) and not pr.paused(3)
    assert pr.maybe_update(5)
    assert pr.inflight == [7] and pr.match == 5 and pr.next >= 6
    assert not pr.maybe_update(4)  # stale: nothing moves back
    assert pr.match == 5


def test_a_snapshot_pauses_appends_and_probing_after_it_starts_past_it():
    pr = Progress(match=2, next=3)
    pr.become_snapshot(10)
    assert pr.state == SNAPSHOT and pr.paused(100)
    pr.become_probe()
    assert pr.state == PROBE and pr.next == 11 and pr.pending_snapshot == 0


def test_probe_after_replicate_starts_after_the_match():
    pr = Progress(match=6, next=12)
    pr.become_replicate()
    assert pr.state == REPLICATE and pr.next == 7
    pr.next = 20
    pr.become_probe()
    assert pr.next == 7


def test_leadership_goes_to_the_voter_most_caught_up_not_the_first_by_name():
    prs = {"a": Progress(match=10, next=11), "b": Progress(match=42, next=43),
           "c": Progress(match=42, next=43)}
    assert most_caught_up(["a", "b", "c"], prs) == "b"      # ties: the first by name
    assert most_caught_up(["a", "c"], prs) == "c"
    assert most_caught_up(["a", "d"], prs) == "a"           # d: no progress known yet
    with pytest.raises(ValueError):
        most_caught_up([], prs)

"""heartbeat_timeout: a run is stuck once silent for its timeout, and is not
proposed again while a proposal for it is recent."""

from cronrd.decisions.heartbeats import stuck


def test_a_run_is_stuck_once_silent_for_its_timeout():
    running = [(1, 60.0, 1000.0), (2, 60.0, 1001.0), (3, 300.0, 900.0)]
    assert stuck(1060.0, running, {}, 5.0) == [1]
    assert stuck(1200.0, running, {}, 5.0) == [1, 2, 3]


def test_a_recent_proposal_is_not_made_again():
    running = [(1, 60.0, 1000.0)]
    assert stuck(1062.0, running, {1: 1060.0}, 5.0) == []
    assert stuck(1065.0, running, {1: 1060.0}, 5.0) == [1]


def test_silence_counts_from_when_the_leader_began_to_lead():
    running = [(1, 60.0, 1000.0)]
    assert stuck(1100.0, running, {}, 5.0, leading_since=1090.0) == []
    assert stuck(1150.0, running, {}, 5.0, leading_since=1090.0) == [1]
    assert stuck(1100.0, running, {}, 5.0, leading_since=900.0) == [1]   # heard before

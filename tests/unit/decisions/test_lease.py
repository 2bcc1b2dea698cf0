"""The lease (cronrd.decisions.lease) on a fake clock: when may a node start
the runs committed to it?"""

from __future__ import annotations

from cronrd.decisions.lease import follower_fresh, leader_fresh, lease_length

LEASE = lease_length(node_timeout=10.0, election_timeout=0.5)


def test_the_lease_ends_two_election_timeouts_and_a_second_before_node_loss():
    assert LEASE == 8.0
    assert lease_length(node_timeout=2.0, election_timeout=0.5) == 0.5  # at least one


def test_a_follower_is_fresh_for_one_lease_after_its_last_round_trip():
    t0 = 1000.0
    assert follower_fresh(t0 + LEASE - 0.001, t0, LEASE)
    assert not follower_fresh(t0 + LEASE, t0, LEASE)
    assert not follower_fresh(t0, 0.0, LEASE)  # never reached a leader


def test_a_leader_is_fresh_while_a_quorum_answered_within_the_lease():
    t0 = 1000.0
    voters = ("a", "b", "c")
    answered = {"b": t0, "c": t0 - 100}
    assert leader_fresh(t0 + 1, "a", voters, answered, lead_since=0.0, lease=LEASE)
    # b's answer ages out: only a itself is left, no quorum
    assert not leader_fresh(t0 + LEASE, "a", voters, answered, lead_since=0.0, lease=LEASE)
    # a learner's answers do not count, only voters'
    assert not leader_fresh(t0 + LEASE, "a", voters, {"l": t0 + LEASE}, 0.0, LEASE)


def test_a_new_leader_is_fresh_for_one_lease_after_its_election():
    t0 = 1000.0
    assert leader_fresh(t0 + 1, "a", ("a", "b", "c"), {}, lead_since=t0, lease=LEASE)
    assert not leader_fresh(t0 + LEASE, "a", ("a", "b", "c"), {}, lead_since=t0, lease=LEASE)


def test_a_single_voter_is_always_its_own_quorum():
    assert leader_fresh(10**6, "a", ("a",), {}, lead_since=0.0, lease=LEASE)


def test_a_leader_that_steps_down_counts_its_lease_from_its_last_quorum_round_trip():
    from cronrd.decisions.lease import leader_basis
    voters = ["a", "b", "c", "d", "e"]
    # a quorum of five is a and two others: the second latest answer
    acks = {"b": 105.0, "c": 103.0, "d": 101.0}
    assert leader_basis("a", voters, acks, lead_since=90.0) == 103.0
    # too few answers: its election is the last quorum round trip it had
    assert leader_basis("a", voters, {"b": 105.0}, lead_since=90.0) == 90.0
    assert leader_basis("a", voters, {}, lead_since=90.0) == 90.0
    # the election is newer than the answers (a new term)
    assert leader_basis("a", voters, acks, lead_since=110.0) == 110.0
    assert leader_basis("a", ["a"], {}, lead_since=7.0) == 7.0

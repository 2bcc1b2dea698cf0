"""Majority arithmetic (``cronrd.raft.quorum``)."""

from cronrd.raft import quorum


def test_majority_of_one_to_five_voters():
    assert [quorum.majority("abcde"[:n]) for n in range(1, 6)] == [1, 2, 2, 3, 3]


def test_committed_index_is_what_a_quorum_holds():
    match = {"a": 9, "b": 5, "c": 7}
    assert quorum.committed_index(("a", "b", "c"), match.__getitem__) == 7
    match = {"a": 9, "b": 5, "c": 7, "d": 1}
    # Four voters need three: the third highest.
    assert quorum.committed_index(("a", "b", "c", "d"), match.__getitem__) == 5


def test_committed_index_without_voters_is_none():
    assert quorum.committed_index((), lambda v: 0) is None


def test_only_voters_count_in_an_election():
    votes = {"a": True, "b": False, "learner": True, "stranger": False}
    assert quorum.granted(votes, ("a", "b", "c")) == 1
    assert quorum.rejected(votes, ("a", "b", "c")) == 1


def test_acknowledged_needs_a_quorum_of_voters():
    assert not quorum.acknowledged({"a", "learner"}, ("a", "b", "c"))
    assert quorum.acknowledged({"a", "c"}, ("a", "b", "c"))

"""Membership changes one node at a time (``cronrd.raft.confchange``)."""

import pytest

from cronrd.raft import confchange
from cronrd.raft.types import ConfChange, ConfChangeType, ConfState

ADD, PROMOTE, REMOVE = ConfChangeType.ADD_LEARNER, ConfChangeType.PROMOTE, ConfChangeType.REMOVE
CONF = ConfState(("a", "b"), ("l",))


@pytest.mark.parametrize("kind, node, reason", [
    (ADD, "a", "a is already a member"),
    (ADD, "l", "l is already a member"),
    (PROMOTE, "a", "a is not a learner"),
    (PROMOTE, "x", "x is not a learner"),
    (REMOVE, "x", "x is not a member"),
])
def test_refused_changes_say_why(kind, node, reason):
    assert confchange.refusal(CONF, ConfChange(kind, node)) == reason


def test_the_last_voter_cannot_be_removed():
    assert confchange.refusal(ConfState(("a",), ()), ConfChange(REMOVE, "a")) \
        == "cannot remove the last voter"
    assert confchange.refusal(ConfState(("a",), ("l",)), ConfChange(REMOVE, "l")) is None


@pytest.mark.parametrize("kind, node", [(ADD, "n"), (PROMOTE, "l"), (REMOVE, "b"), (REMOVE, "l")])
def test_allowed_changes_are_not_refused(kind, node):
    assert confchange.refusal(CONF, ConfChange(kind, node)) is None


def test_apply_each_kind_keeps_the_lists_sorted():
    conf = confchange.apply_change(CONF, ConfChange(ADD, "c"))
    assert conf == ConfState(("a", "b"), ("c", "l"))
    conf = confchange.apply_change(conf, ConfChange(PROMOTE, "c"))
    assert conf == ConfState(("a", "b", "c"), ("l",))
    conf = confchange.apply_change(conf, ConfChange(REMOVE, "a"))
    assert conf == ConfState(("b", "c"), ("l",))
    conf = confchange.apply_change(conf, ConfChange(REMOVE, "l"))
    assert conf == ConfState(("b", "c"), ())


def test_a_change_that_no_longer_applies_changes_nothing():
    # Replayed entries (a log older than the snapshot's conf) are no-ops.
    for cc in (ConfChange(ADD, "a"), ConfChange(PROMOTE, "a"), ConfChange(REMOVE, "zz")):
        assert confchange.apply_change(CONF, cc) == CONF

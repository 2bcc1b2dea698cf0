"""Membership changes (etcd's ``confchange/``), one node at a time: whether
a proposed change may enter the log, and the configuration after applying
one. Pure functions over ``ConfState`` values; the core decides when (never
more than one change uncommitted, see ``Raft.propose_conf_change``)."""

from __future__ import annotations

from .types import ConfChange, ConfChangeType, ConfState


def refusal(conf: ConfState, cc: ConfChange) -> str | None:
    """Why ``cc`` cannot be proposed against ``conf``, or None if it can."""
    if cc.type == ConfChangeType.ADD_LEARNER and cc.node in conf.members():
        return f"{cc.node} is already a member"
    if cc.type == ConfChangeType.PROMOTE and cc.node not in conf.learners:
        return f"{cc.node} is not a learner"
    if cc.type == ConfChangeType.REMOVE and cc.node not in conf.members():
        return f"{cc.node} is not a member"
    if cc.type == ConfChangeType.REMOVE and conf.voters == (cc.node,):
        return "cannot remove the last voter"
    return None


def apply_change(conf: ConfState, cc: ConfChange) -> ConfState:
    """The configuration after ``cc``. A change that no longer applies (the
    node was added, promoted or removed already) leaves it as it is: a log
    replayed from an older snapshot may carry such entries."""
    voters, learners = list(conf.voters), list(conf.learners)
    if cc.type == ConfChangeType.ADD_LEARNER:
        if cc.node not in voters and cc.node not in learners:
            learners.append(cc.node)
    elif cc.type == ConfChangeType.PROMOTE:
        if cc.node in learners:
            learners.remove(cc.node)
            voters.append(cc.node)
    elif cc.type == ConfChangeType.REMOVE:
        if cc.node in voters:
            voters.remove(cc.node)
        if cc.node in learners:
            learners.remove(cc.node)
    return ConfState(tuple(sorted(voters)), tuple(sorted(learners)))

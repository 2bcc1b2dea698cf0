"""Majority arithmetic over a set of voters (etcd's ``quorum/``): how many
make a quorum, which index a quorum holds, how an election stands. Pure
functions of their arguments; learners never count, so every function takes
the voters and ignores anyone else."""

from __future__ import annotations

from typing import Callable, Collection, Mapping


def majority(voters: Collection[str]) -> int:
    """How many of ``voters`` make a quorum."""
    return len(voters) // 2 + 1


def committed_index(voters: Collection[str], match: Callable[[str], int]) -> int | None:
    """The highest index that a quorum of ``voters`` holds, given each
    voter's matched index; None with no voters at all."""
    matches = sorted(match(v) for v in voters)
    if not matches:
        return None
    return matches[len(matches) - majority(voters)]


def granted(votes: Mapping[str, bool], voters: Collection[str]) -> int:
    """Votes granted by voters (a learner's or a stranger's do not count)."""
    return sum(1 for v, yes in votes.items() if yes and v in voters)


def rejected(votes: Mapping[str, bool], voters: Collection[str]) -> int:
    """Votes refused by voters."""
    return sum(1 for v, yes in votes.items() if not yes and v in voters)


def acknowledged(acks: Collection[str], voters: Collection[str]) -> bool:
    """Whether the nodes in ``acks`` include a quorum of ``voters``."""
    return len(set(acks) & set(voters)) >= majority(voters)

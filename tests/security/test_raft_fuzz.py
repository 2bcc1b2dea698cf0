"""Fuzzing ``Raft.step`` with well-formed but hostile messages (issue 9).

Every message decodes (the codec's bounds hold), names a real member as its
sender, and carries arbitrary terms, indexes, commits, hints, entries and
snapshot metadata. Whatever arrives, a node must not raise (one frame must
not stop a node) and must keep its own invariants: commit never beyond its
log or backwards, applied never beyond commit, term never backwards.
"""

from __future__ import annotations

import random

import pytest

from cronrd.raft.codec import MAX_COUNTER, decode, encode
from cronrd.raft.core import Raft, RaftConfig
from cronrd.raft.types import (ConfChange, ConfChangeType, ConfState, Entry, EntryType,
                               Message, MsgType, SnapshotMeta)

IDS = ("a", "b", "c")


def _num(rng: random.Random, near: int) -> int:
    return min(MAX_COUNTER - 1, rng.choice([0, 1, near, near + 1, max(0, near - 1),
                                            rng.randrange(near + 20), MAX_COUNTER - 1,
                                            rng.randrange(MAX_COUNTER)]))


def _hostile(rng: random.Random, r: Raft) -> Message:
    near_t, near_i = r.term, r.last_index
    entries = ()
    if rng.random() < 0.5:
        start = _num(rng, near_i)
        entries = tuple(
            Entry(term=_num(rng, near_t), index=min(start + k, MAX_COUNTER - 1),
                  type=rng.choice(list(EntryType)),
                  data=(ConfChange(rng.choice(list(ConfChangeType)),
                                   rng.choice(IDS + ("z",))).encode()
                        if rng.random() < 0.3 else rng.randbytes(rng.randrange(8))))
            for k in range(rng.randrange(4)))
    meta = None
    if rng.random() < 0.2:
        meta = SnapshotMeta(index=_num(rng, near_i), term=_num(rng, near_t),
                            conf=ConfState(tuple(rng.sample(IDS, rng.randrange(4))), ()))
    m = Message(type=rng.choice(list(MsgType)), to=r.id, frm=rng.choice([i for i in IDS
                                                                           if i != r.id]),
                term=_num(rng, near_t), log_term=_num(rng, near_t), index=_num(rng, near_i),
                entries=entries, commit=_num(rng, r.commit), reject=rng.random() < 0.5,
                reject_hint=_num(rng, near_i), hint_term=_num(rng, near_t),
                context=rng.choice([b"", b"transfer", rng.randbytes(4)]), snapshot_meta=meta,
                offset=_num(rng, 10), data=rng.randbytes(rng.randrange(16)),
                done=rng.random() < 0.5)
    return decode(encode(m))  # only what the wire can carry


def _drive(r: Raft) -> None:
    while r.has_ready():
        r.advance(r.ready())


@pytest.mark.parametrize("seed", range(16))
def test_hostile_messages_never_crash_a_node_or_break_its_invariants(seed):
    rng = random.Random(seed)
    nodes = {i: Raft(RaftConfig(i, pre_vote=rng.random() < 0.5), random.Random(f"{seed}{i}"),
                     conf=ConfState(IDS)) for i in IDS}
    # a healthy start: a elects itself and replicates a few entries
    a = nodes["a"]
    for _ in range(40):
        for r in nodes.values():
            r.tick()
        for r in nodes.values():
            rd = r.ready()
            for m in rd.messages:
                nodes[m.to].step(m)
            r.advance(rd)
    for r in nodes.values():
        last_commit, last_term = r.commit, r.term
        for _ in range(400):
            r.step(_hostile(rng, r))
            if rng.random() < 0.2:
                r.tick()
            if rng.random() < 0.1 and r.role == "leader":
                r.propose(b"x")
            _drive(r)
            assert r.applied <= r.commit <= r.last_index
            assert r.commit >= last_commit and r.term >= last_term
            last_commit, last_term = r.commit, r.term
    assert a is nodes["a"]

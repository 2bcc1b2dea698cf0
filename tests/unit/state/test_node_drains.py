"""Nodes drained by an admin (cronrd/state/node_drains.py)."""

from __future__ import annotations

import pytest

from cronrd.state import commands as C
from cronrd.state import node_drains
from cronrd.state.forwarded import check_forwarded
from cronrd.errors import PermissionDenied
from cronrd.errors import Refused
from tests.unit.state.test_state import T0, Log


def drain(node="b", drained=True, note="disk swap", origin="a", at=T0):
    return C.DrainNode(origin=origin, node=node, drained=drained, note=note,
                       by="token 'ops' (role admin)", at=at)


def test_a_drain_is_kept_until_undrained_and_goes_with_the_node():
    log = Log()
    log.apply(C.NodeInfo(node="b", state="up", addr="10.0.0.2:7000", tags=(), at=T0))
    assert log.apply(drain()) == {"node": "b", "drained": True}
    assert node_drains.drained(log.sm.conn) == {
        "b": {"at": T0, "by": "token 'ops' (role admin)", "note": "disk swap"}}
    log.apply(drain(note="again", at=T0 + 1))  # drained again: the newest note
    assert node_drains.drained(log.sm.conn)["b"]["note"] == "again"
    assert log.apply(drain(drained=False)) == {"node": "b", "drained": False}
    assert node_drains.drained(log.sm.conn) == {}
    log.apply(drain())
    log.apply(C.RemoveNode(node="b", at=T0 + 2))
    assert node_drains.drained(log.sm.conn) == {}


def test_an_unknown_node_or_a_long_note_is_refused_and_changes_nothing():
    log = Log()
    with pytest.raises(Refused, match="no node 'zz' in the cluster"):
        log.apply(drain(node="zz"))
    log.apply(C.NodeInfo(node="b", state="up", addr="10.0.0.2:7000", tags=(), at=T0))
    with pytest.raises(Refused, match="longer than 1000"):
        log.apply(drain(note="x" * 1001))
    assert node_drains.drained(log.sm.conn) == {}


def test_drains_are_in_the_digest_and_forwarded_only_for_their_origin():
    a, b = Log(), Log()
    for log in (a, b):
        log.apply(C.NodeInfo(node="b", state="up", addr="10.0.0.2:7000", tags=(), at=T0))
    assert a.sm.full_digest() == b.sm.full_digest()
    a.apply(drain())
    assert a.sm.full_digest() != b.sm.full_digest()
    cmd = C.decode(drain().encode())
    assert check_forwarded(cmd, "a") == cmd
    with pytest.raises(PermissionDenied, match="a member speaks only for itself"):
        check_forwarded(cmd, "c")

"""The web UI's sessions in the replicated state (state/tokens.py,
StartSession / EndSession): only hashes kept, bound to the token as it was
at login, ended by logout, revocation, a token made again under the name
and time; bounded in number; and only from cluster version 2 on."""

from __future__ import annotations

import pytest

from cronrd.errors import Refused
from cronrd.state import commands as C
from cronrd.state import tokens as T
from cronrd.state import versions as V
from tests.unit.state.test_state import T0, Log


def cluster(*names: str) -> Log:
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    for name in names:
        make(log, name)
    return log


def make(log: Log, name: str, secret: str | None = None, expires_at=None) -> None:
    log.apply(C.CreateToken(node="n1", name=name, token_hash=T.token_hash(secret or name),
                            role="admin", jobs="", expires_at=expires_at, at=T0))


def start(log: Log, session: str, name: str = "ops", secret: str | None = None,
          at: float = T0 + 1, ttl: float = 3600):
    return log.apply(C.StartSession(node="n1", name=name, token_hash=T.token_hash(
        secret or name), session_hash=T.token_hash(session), expires_at=at + ttl, at=at))


def test_a_session_is_found_by_its_secret_until_it_ends_and_keeps_no_secret():
    log = cluster("ops")
    start(log, "s1.abc")
    conn = log.sm.conn
    token = T.by_session(conn, "s1.abc", T0 + 2)
    assert token["name"] == "ops" and token["session_expires_at"] == T0 + 1 + 3600
    stored = list(conn.execute("SELECT * FROM ui_sessions"))
    assert "s1.abc" not in repr(stored) and T.token_hash("s1.abc") in repr(stored)
    assert T.by_session(conn, "s1.abd", T0 + 2) is None
    assert T.by_secret(conn, "s1.abc") is None  # not a token
    assert T.by_session(conn, "s1.abc", T0 + 1 + 3600) is None  # its time is up
    assert log.apply(C.EndSession(node="n1", session_hash=T.token_hash("s1.abc"),
                                  at=T0 + 3)) == {"ended": True}
    assert T.by_session(conn, "s1.abc", T0 + 4) is None


def test_revoking_or_remaking_the_token_ends_its_sessions():
    log = cluster("ops")
    start(log, "s1.a")
    log.apply(C.RevokeToken(node="n1", name="ops", at=T0 + 2))
    assert T.by_session(log.sm.conn, "s1.a", T0 + 3) is None
    make(log, "ops", secret="another")  # the same name, another secret
    assert T.by_session(log.sm.conn, "s1.a", T0 + 3) is None
    with pytest.raises(Refused, match="revoked"):  # a login with the old secret
        start(log, "s1.b", at=T0 + 4)
    start(log, "s1.c", secret="another", at=T0 + 4)
    assert T.by_session(log.sm.conn, "s1.c", T0 + 5)["name"] == "ops"


def test_ended_sessions_are_pruned_and_a_token_keeps_a_bounded_number(monkeypatch):
    monkeypatch.setattr(T, "MAX_SESSIONS_PER_TOKEN", 3)
    log = cluster("ops", "web")
    conn = log.sm.conn
    start(log, "old", at=T0 + 1, ttl=10)
    start(log, "new", at=T0 + 20)  # "old" ended at T0 + 11: gone
    assert T.by_session(conn, "old", T0) is None
    for i in range(4):
        start(log, f"s{i}", at=T0 + 30 + i)
    alive = {s for s in ("new", "s0", "s1", "s2", "s3") if T.by_session(conn, s, T0 + 40)}
    assert alive == {"s1", "s2", "s3"}  # the oldest of its sessions ended
    monkeypatch.setattr(T, "MAX_SESSIONS", 4)
    start(log, "w0", name="web", at=T0 + 41)
    with pytest.raises(Refused, match="the most allowed"):
        start(log, "w1", name="web", at=T0 + 42)
    with pytest.raises(Refused, match="exists already"):
        start(log, "w0", name="web", at=T0 + 43, ttl=7200)


def test_sessions_need_cluster_version_2():
    log = Log()
    make(log, "ops")
    cmd = C.StartSession(node="n1", name="ops", token_hash=T.token_hash("ops"),
                         session_hash=T.token_hash("s"), expires_at=T0 + 10, at=T0)
    with pytest.raises(Refused, match="needs cluster version 2"):
        V.check_proposable(cmd, V.recorded(log.sm.conn))
    with pytest.raises(Refused):
        log.apply(cmd)
    assert not list(log.sm.conn.execute("SELECT * FROM ui_sessions"))

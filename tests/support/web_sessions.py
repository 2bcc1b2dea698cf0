"""Tokens and web sessions in a real state machine, for tests of the HTTP
face with the daemon's Handlers faked: ``StateLog`` is the log the UI
proposes StartSession and EndSession to, and each token has begun one
session already, whose secret is ``session_of(token secret)``."""

from __future__ import annotations

from cronrd.runtime.http.session import COOKIE
from cronrd.state import commands as C
from cronrd.state import tokens as T
from tests.unit.state.test_state import Log


def session_of(token_secret: str) -> str:
    """The secret of the session each token has begun."""
    return f"s1.session-of-{token_secret}"


def session_cookie(key: str, tokens: dict) -> dict:
    """The Cookie header of token ``key``'s session (any other key: as it is)."""
    return {"Cookie": f"{COOKIE}={session_of(key) if key in tokens else key}"}


class FakeConfig:
    node_id = "n1"


class StateLog:
    """The daemon's log as the web face proposes to it, over a real state
    machine holding ``tokens`` (secret -> row) and their sessions."""

    leader = "n1"
    is_leader = True

    def __init__(self, tokens: dict, now: float):
        self.log = Log()
        self.proposed: list = []
        self.log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=now - 1000))
        for secret, t in tokens.items():
            self.log.apply(C.CreateToken(node="n1", name=t["name"], token_hash=T.token_hash(
                secret), role=t["role"], jobs=t["jobs"], expires_at=t["expires_at"],
                at=now - 1000))
            # begun before any of them expires
            self.log.apply(C.StartSession(node="n1", name=t["name"],
                                          token_hash=T.token_hash(secret),
                                          session_hash=T.token_hash(session_of(secret)),
                                          expires_at=now + 1000, at=now - 100))

    def subscribe(self, listener) -> None:
        pass

    async def propose(self, cmd):
        self.proposed.append(cmd)
        return self.log.apply(cmd)

    @property
    def conn(self):
        return self.log.sm.conn

    def find_token(self, secret: str):
        return T.by_secret(self.conn, secret)

    def find_session(self, secret: str, now: float):
        return T.by_session(self.conn, secret, now)

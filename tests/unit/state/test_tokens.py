"""HTTP API tokens in the replicated state (cronrd/state/tokens.py)."""

from __future__ import annotations

import pytest

from cronrd.state import commands as C
from cronrd.state import tokens
from cronrd.errors import Refused
from tests.unit.state.test_state import T0, Log


def create(log, name="ci", secret="s3cret", role="viewer", jobs="", expires_at=None):
    return log.apply(C.CreateToken(node="n1", name=name, token_hash=tokens.token_hash(secret),
                                   role=role, jobs=jobs, expires_at=expires_at, at=T0))


def test_a_token_is_stored_hashed_and_found_by_its_secret():
    log = Log()
    assert create(log, jobs="backup-*", expires_at=T0 + 90 * 86400) == {"name": "ci",
                                                                         "role": "viewer"}
    row = tokens.by_secret(log.sm.conn, "s3cret")
    assert row == {"name": "ci", "role": "viewer", "jobs": "backup-*",
                   "expires_at": T0 + 90 * 86400, "created_at": T0, "node": "n1"}
    assert tokens.by_secret(log.sm.conn, "wrong") is None
    stored = list(log.sm.conn.execute("SELECT hash FROM api_tokens"))
    assert stored == [(tokens.token_hash("s3cret"),)] and "s3cret" not in str(stored)
    assert [t["name"] for t in tokens.listing(log.sm.conn)] == ["ci"]


def test_names_are_unique_roles_known_and_revoking_removes():
    log = Log()
    create(log)
    with pytest.raises(Refused, match="a token named 'ci' exists already"):
        create(log, secret="other")
    with pytest.raises(Refused, match="unknown role 'root'"):
        create(log, name="x", secret="x", role="root")
    assert log.apply(C.RevokeToken(node="n1", name="ci", at=T0)) == {"revoked": "ci"}
    assert tokens.by_secret(log.sm.conn, "s3cret") is None
    with pytest.raises(Refused, match="no token named 'ci'"):
        log.apply(C.RevokeToken(node="n1", name="ci", at=T0))


def test_tokens_are_in_the_full_digest():
    a, b = Log(), Log()
    create(a)
    create(b, role="admin")
    assert a.sm.full_digest() != b.sm.full_digest()


def test_roles_are_ordered_and_jobs_globbed():
    assert tokens.role_allows("admin", "operator") and tokens.role_allows("viewer", "viewer")
    assert not tokens.role_allows("viewer", "operator")
    assert not tokens.role_allows("nobody", "viewer")
    assert tokens.job_allowed("", "x") and tokens.job_allowed("backup-*", "backup-db")
    assert not tokens.job_allowed("backup-*", "report")

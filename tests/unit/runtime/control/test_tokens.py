"""`cronrd token create | list | revoke` as the daemon answers them
(cronrd/runtime/control/tokens.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from cronrd.errors import UsageError
from cronrd.ops import admin as A
from cronrd.ops.typed import parse
from cronrd.runtime.control.tokens import PREFIX, TokenRequests
from cronrd.state import tokens
from tests.unit.runtime.control.test_checkpoints import FakeLog
from tests.unit.state.test_state import T0, Log


def requests():
    log = Log()
    clock = SimpleNamespace(now=lambda: T0 + 100.0)
    return TokenRequests(SimpleNamespace(node_id="n1"), clock, log.sm.conn, FakeLog(log)), log


def run(coro):
    return asyncio.run(coro)


def test_create_returns_the_secret_once_and_proposes_only_its_hash():
    req, log = requests()
    res = run(req.create(A.CreateToken(name="ci", role="operator", jobs="backup-*",
                                       expires=86400)))
    secret = res.pop("token")
    assert secret.startswith(PREFIX) and len(secret) > 40
    assert res == {"name": "ci", "role": "operator", "jobs": "backup-*",
                   "expires_at": "2027-01-16T08:01:40Z"}
    (cmd,) = req.log.proposed
    assert cmd.token_hash == tokens.token_hash(secret) and secret not in cmd.encode().decode()
    assert cmd.node == "n1" and cmd.expires_at == T0 + 100 + 86400
    assert tokens.by_secret(log.sm.conn, secret)["role"] == "operator"
    other = run(req.create(A.CreateToken(name="ci2", role="viewer")))["token"]
    assert other != secret  # fresh randomness each time
    listed = run(req.list(A.ListTokens()))["tokens"]
    assert [(t["name"], t["expired"]) for t in listed] == [("ci", False), ("ci2", False)]
    assert run(req.revoke(A.RevokeToken(name="ci"))) == {"revoked": "ci"}


@pytest.mark.parametrize("args, message", [
    ({"role": "viewer"}, "missing argument 'name'"),
    ({"name": "-x", "role": "viewer"}, "token name '-x' is not valid"),
    ({"name": "x", "role": "root"}, "unknown role 'root'"),
    ({"name": "x", "role": "viewer", "expires": 0}, "--expires must be a duration"),
    ({"name": "x", "role": "viewer", "jobs": "a" * 201}, "at most 200 characters"),
])
def test_bad_requests_are_refused_before_anything_is_proposed(args, message):
    """Refused by the request's type (parsed as the control table does) or
    by the handler."""
    req, _ = requests()
    with pytest.raises(UsageError, match=message):
        run(req.create(parse(A.CreateToken, args)))
    assert req.log.proposed == []

"""`cronrd token create | list | revoke` over the control socket (root only:
the handlers' ADMIN guard checks the caller and audits the change).

The secret is made here, from the operating system's randomness, sent back
once in the reply, and only its sha256 goes into the log
(state/tokens.py)."""

from __future__ import annotations

import secrets
from typing import Any

from ...errors import UsageError
from ...jobspec.model import NAME_RE
from ...ops import admin as A
from ...schedule import iso_utc
from ...state import commands as C
from ...state import tokens as T

PREFIX = "crd_"          # a cronrd API token is recognisable (e.g. by secret scanners)
MAX_EXPIRES = 10 * 366 * 86400.0


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


class TokenRequests:
    def __init__(self, config, clock, conn, log):
        self.config = config
        self.clock = clock
        self.conn = conn
        self.log = log

    async def create(self, req: A.CreateToken) -> dict[str, Any]:
        name = req.name
        if not NAME_RE.fullmatch(name):
            raise UsageError(f"token name {name!r} is not valid: use letters, digits, '_', "
                             "'.' and '-', starting with a letter or digit (e.g. grafana)")
        role = req.role
        if role not in T.ALL_ROLES:
            raise UsageError(f"unknown role {role!r}; use one of {', '.join(T.ALL_ROLES)} "
                             "(viewer reads; operator also runs, pauses, cancels; admin also "
                             "manages tokens and nodes; ping only pings the watches its "
                             "--jobs names)")
        jobs = req.jobs  # at most MAX_TOKEN_JOBS characters (the request's bound)
        if role == T.PING and not jobs:
            raise UsageError("a ping token names the watches it may ping: --jobs NAME (or a "
                             "glob such as 'legacy-*')")
        expires = req.expires
        # (0 < expires: typed.Range has no bound that leaves its end out)
        if expires is not None and not 0 < expires <= MAX_EXPIRES:
            raise UsageError("--expires must be a duration from 1s to 10 years, e.g. 90d")
        now = self.clock.now()
        secret = new_secret()
        expires_at = None if expires is None else round(now + expires, 3)
        await self.log.propose(C.CreateToken(
            node=self.config.node_id, name=name, token_hash=T.token_hash(secret), role=role,
            jobs=jobs, expires_at=expires_at, at=now))
        return {"name": name, "role": role, "jobs": jobs, "expires_at": iso_utc(expires_at),
                "token": secret}

    async def list(self, req: A.ListTokens) -> dict[str, Any]:
        now = self.clock.now()
        return {"tokens": [{**t, "expires_at": iso_utc(t["expires_at"]),
                            "created_at": iso_utc(t["created_at"]),
                            "expired": t["expires_at"] is not None and t["expires_at"] <= now}
                           for t in T.listing(self.conn)]}

    async def revoke(self, req: A.RevokeToken) -> Any:
        name = req.name
        return await self.log.propose(C.RevokeToken(node=self.config.node_id, name=name,
                                                    at=self.clock.now()))

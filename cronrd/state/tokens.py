"""HTTP API tokens in the replicated state (table api_tokens): made and
revoked through the log (CreateToken, RevokeToken), looked up by the sha256
of the secret a client presents. The secret itself is never stored or
logged. Roles are ordered: viewer reads, operator also acts on jobs and
runs, admin also manages tokens and nodes."""

from __future__ import annotations

import fnmatch
import hashlib
from typing import Any

import apsw

from . import commands as C

ROLES = ("viewer", "operator", "admin")
MAX_TOKENS = 10_000


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def role_allows(role: str, needed: str) -> bool:
    """Whether ``role`` may do what ``needed`` may (viewer < operator < admin)."""
    return role in ROLES and ROLES.index(role) >= ROLES.index(needed)


def job_allowed(glob: str, job: str) -> bool:
    """Whether a token limited to ``glob`` ("" none) may act on ``job``."""
    return not glob or fnmatch.fnmatchcase(job, glob)


def sql_glob(glob: str) -> str | None:
    """``glob`` for SQLite's GLOB (queries.jobs), when it means there what
    it means to :func:`job_allowed`; None when it does not (SQLite reads a
    bracket otherwise: ``[!x]`` and ``[^x]``), then filter with
    :func:`job_allowed`. An answer narrowed in SQL is filtered again anyway."""
    return glob if glob and "[" not in glob else None


def create(conn: apsw.Connection, cmd: C.CreateToken) -> str | None:
    """Store the token; or the reason it is refused (nothing stored)."""
    if cmd.role not in ROLES:
        return f"unknown role {cmd.role!r}; use one of {', '.join(ROLES)}"
    for _ in conn.execute("SELECT 1 FROM api_tokens WHERE name=?", (cmd.name,)):
        return (f"a token named {cmd.name!r} exists already; revoke it first "
                f"(`cronrd token revoke {cmd.name}`) or choose another name")
    for _ in conn.execute("SELECT 1 FROM api_tokens WHERE hash=?", (cmd.token_hash,)):
        return "that token exists already under another name; create a new one"
    (count,), = conn.execute("SELECT COUNT(*) FROM api_tokens")
    if count >= MAX_TOKENS:
        return (f"there are {count} tokens already, the most allowed; revoke unused ones "
                "(`cronrd token list`)")
    conn.execute("INSERT INTO api_tokens(name, hash, role, jobs, expires_at, created_at, node) "
                 "VALUES(?,?,?,?,?,?,?)", (cmd.name, cmd.token_hash, cmd.role, cmd.jobs,
                                           cmd.expires_at, cmd.at, cmd.node))
    return None


def revoke(conn: apsw.Connection, cmd: C.RevokeToken) -> str | None:
    """Delete the token; or the reason it is refused."""
    conn.execute("DELETE FROM api_tokens WHERE name=?", (cmd.name,))
    if not conn.changes():
        return f"no token named {cmd.name!r}; `cronrd token list` shows them"
    return None


_COLUMNS = ("name", "role", "jobs", "expires_at", "created_at", "node")


def listing(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Every token, by name, without its hash."""
    return [dict(zip(_COLUMNS, row)) for row in conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM api_tokens ORDER BY name")]


def by_secret(conn: apsw.Connection, secret: str) -> dict[str, Any] | None:

    """The token whose secret this is (expired or not: the caller compares
    ``expires_at`` with its clock), or None."""
    for row in conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM api_tokens WHERE hash=?",
                            (token_hash(secret),)):
        return dict(zip(_COLUMNS, row))
    return None

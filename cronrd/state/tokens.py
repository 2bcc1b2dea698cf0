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
from . import versions as V

ROLES = ("viewer", "operator", "admin")
# A token that may only ping watches (POST /api/v1/pings/NAME; its --jobs
# glob names them): what a legacy host holds. Cluster version 2 on.
PING = "ping"
ALL_ROLES = ROLES + (PING,)
MAX_TOKENS = 10_000


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def role_allows(role: str, needed: str) -> bool:
    """Whether ``role`` may do what ``needed`` may (viewer < operator < admin;
    a ping, which writes, is for ping, operator and admin tokens; a ping
    token may do nothing else)."""
    if needed == PING:
        return role in (PING, "operator", "admin")
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
    roles = ALL_ROLES if V.at_least(conn, V.WATCHES) else ROLES
    if cmd.role not in roles:
        return f"unknown role {cmd.role!r}; use one of {', '.join(roles)}"
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


# -- the web UI's sessions (table ui_sessions) ----------------------------------------
MAX_SESSIONS = 10_000          # live sessions in all
MAX_SESSIONS_PER_TOKEN = 100   # a token's oldest session ends when it logs in once more


def start_session(conn: apsw.Connection, cmd: C.StartSession) -> str | None:
    """Keep the session; or the reason it is refused (nothing kept). Ended
    and expired sessions go first (``cmd.at``: every node prunes alike)."""
    conn.execute("DELETE FROM ui_sessions WHERE expires_at <= ?", (cmd.at,))
    found = [row for row in conn.execute("SELECT hash FROM api_tokens WHERE name=?",
                                         (cmd.name,))]
    if not found or found[0][0] != cmd.token_hash:
        return (f"token {cmd.name!r} was revoked (or made again) meanwhile; log in with "
                "a token `cronrd token list` shows")
    if cmd.expires_at <= cmd.at:
        return "the session would have ended already; log in again"
    for _ in conn.execute("SELECT 1 FROM ui_sessions WHERE hash=?", (cmd.session_hash,)):
        return "that session exists already; log in again"
    (mine,), = conn.execute("SELECT COUNT(*) FROM ui_sessions WHERE name=?", (cmd.name,))
    if mine >= MAX_SESSIONS_PER_TOKEN:  # the oldest of this token's sessions ends
        conn.execute("DELETE FROM ui_sessions WHERE hash IN (SELECT hash FROM ui_sessions "
                     "WHERE name=? ORDER BY created_at, hash LIMIT ?)",
                     (cmd.name, mine - MAX_SESSIONS_PER_TOKEN + 1))
    (count,), = conn.execute("SELECT COUNT(*) FROM ui_sessions")
    if count >= MAX_SESSIONS:
        return (f"there are {count} open web sessions, the most allowed; wait for some "
                "to end, or revoke unused tokens (`cronrd token list`)")
    conn.execute("INSERT INTO ui_sessions(hash, name, token_hash, expires_at, created_at, "
                 "node) VALUES(?,?,?,?,?,?)", (cmd.session_hash, cmd.name, cmd.token_hash,
                                               cmd.expires_at, cmd.at, cmd.node))
    return None


def end_session(conn: apsw.Connection, cmd: C.EndSession) -> bool:
    """Forget the session (logout); whether there was one."""
    conn.execute("DELETE FROM ui_sessions WHERE hash=?", (cmd.session_hash,))
    return bool(conn.changes())


def by_session(conn: apsw.Connection, secret: str, now: float) -> dict[str, Any] | None:
    """The token of the live session whose secret this is, with the session's
    ``session_expires_at``; None when there is no such session, it has
    ended, or its token was revoked or made again since it began (the caller
    compares the token's ``expires_at`` with its clock)."""
    rows = conn.execute(
        f"SELECT {', '.join('t.' + c for c in _COLUMNS)}, s.expires_at FROM ui_sessions s "
        "JOIN api_tokens t ON t.name = s.name AND t.hash = s.token_hash "
        "WHERE s.hash=? AND s.expires_at > ?", (token_hash(secret), now))
    for row in rows:
        token = dict(zip(_COLUMNS, row[:-1]))
        token["session_expires_at"] = row[-1]
        return token
    return None


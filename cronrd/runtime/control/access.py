"""Who may do what on the control socket.

The kernel tells the control server who is on the other end of a connection
(``SO_PEERCRED``: uid, gid, pid); nothing the client sends can change that.
Root and the daemon's own uid may do everything. Anyone else who can reach
the socket (a member of ``socket_group``) may read the views, and may act on
a job (run-now, pause, resume, cancel, read a run's log) only if the job runs
as their own user; a job without ``user:`` runs as root. Changes to the
cluster and ``reload`` are for root only. A job's own checkpoints and
heartbeats are authorised by its run's token, not by the caller's uid.
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
from dataclasses import dataclass

from ...errors import PermissionDenied
from ...jobspec import JobSpec
from ...state.tokens import job_allowed, role_allows

# How a request is checked: every request name the daemon serves has one.
READ = "read"    # anyone who can reach the socket
JOB = "job"      # root, the daemon's uid, or the job's own user
ADMIN = "admin"  # root or the daemon's uid only
# Whoever presents a run's token (CRONRD_RUN_TOKEN), whatever their uid:
# checkpoints and heartbeats from inside a job (runtime/control/checkpoints.py).
TOKEN = "token"

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Caller:
    uid: int
    gid: int
    pid: int
    name: str  # the uid's user name on this host ('' if it has none); "token:NAME"
    # An HTTP API token's caller (the api_tokens row, state/tokens.py): its
    # role and job glob decide, never the uid (-1); never privileged.
    token: dict | None = None

    @classmethod
    def of_token(cls, row: dict) -> "Caller":
        """A token's caller, "token:NAME"; a client certificate's principal
        (http/certs.py) keeps its "cert:NAME" (token names have no colon)."""
        name = row["name"] if ":" in row["name"] else f"token:{row['name']}"
        return cls(uid=-1, gid=-1, pid=0, name=name, token=row)

    @classmethod
    def of(cls, uid: int, gid: int, pid: int) -> "Caller":
        return cls(uid=uid, gid=gid, pid=pid, name=user_name(uid))

    @classmethod
    def from_socket(cls, sock: socket.socket) -> "Caller":
        """The process at the other end of a connected Unix socket."""
        pid, uid, gid = _PEERCRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        return cls.of(uid, gid, pid)

    @property
    def privileged(self) -> bool:
        """Root, or the user the daemon runs as (never a token)."""
        if self.token is not None:
            return False
        return self.uid == 0 or self.uid == os.geteuid()

    def describe(self) -> str:
        if self.token is not None:
            kind, _, name = self.name.partition(":")
            kind = {"cert": "certificate"}.get(kind, kind)
            return f"{kind} {name!r} (role {self.token['role']})"
        return f"uid {self.uid} ({self.name})" if self.name else f"uid {self.uid}"


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def user_uid(user: str) -> int | None:
    """The uid of a job's ``user:`` (a name or a numeric id) on this host."""
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def job_user(spec: JobSpec | None) -> str:
    """Who a job runs as: its ``user:``, root when it has none (or the job
    is gone)."""
    return (spec.user if spec is not None else None) or "root"


def check_admin(caller: Caller, what: str) -> None:
    if caller.token is not None:
        if not role_allows(caller.token["role"], "admin"):
            raise PermissionDenied(f"permission denied: `{what}` needs an admin token; you "
                                   f"are {caller.describe()}")
        if caller.token.get("jobs"):  # it could make an unlimited token, or act on all
            raise PermissionDenied(f"permission denied: `{what}` needs an admin token for "
                                   f"every job; {caller.describe()} is limited to the jobs "
                                   f"matching {caller.token['jobs']!r}")
        return
    if not caller.privileged:
        raise PermissionDenied(f"permission denied: `{what}` needs root; you are "
                               f"{caller.describe()}")


def check_job(caller: Caller, what: str, spec: JobSpec | None, job: str | None = None) -> None:
    """``what`` (e.g. ``cronrd pause backup``) acts on the job ``job`` with
    ``spec`` (None: gone)."""
    if caller.token is not None:
        check_token_job(caller, what, job if job is not None else
                        spec.name if spec is not None else None)
        return
    if caller.privileged:
        return
    user = job_user(spec)
    if user_uid(user) == caller.uid:
        return
    needs = "root" if user in ("root", "0") else f"root or user {user!r}"
    raise PermissionDenied(f"permission denied: `{what}` needs {needs}; you are "
                           f"{caller.describe()}")


def check_token_job(caller: Caller, what: str, job: str | None) -> None:
    """A token acts on a job when its role is operator or admin and its
    ``jobs`` glob (if any) matches the job's name."""
    t = caller.token
    assert t is not None  # check_job asks this of a token's caller only
    if not role_allows(t["role"], "operator"):
        raise PermissionDenied(f"permission denied: `{what}` needs an operator or admin "
                               f"token; you are {caller.describe()}")
    check_token_sees(caller, what, job)


def check_token_sees(caller: Caller, what: str, job: str | None) -> None:
    """A token limited to some jobs (``--jobs GLOB``) reads and acts on
    those only (a job that is gone: only an unlimited token)."""
    glob = (caller.token or {}).get("jobs") or ""
    if glob and (job is None or not job_allowed(glob, job)):
        assert caller.token is not None  # it has a glob
        raise PermissionDenied(f"permission denied: `{what}`: token "
                               f"{caller.token['name']!r} may act only on the jobs matching "
                               f"{glob!r}; ask an admin for a token that covers {job!r}")

"""At daemon start, as root: refuse directories another user could change."""

from __future__ import annotations

import os
import stat

from cronrd.errors import ConfigError

from .model import Config


def _owner(uid: int) -> str:
    import pwd
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _dir_refusal(what: str, path: str, st: os.stat_result, allowed: set[int],
                 parent: bool) -> str | None:
    """Why a daemon running as root may not trust this directory, or None.

    The directory itself must be owned by root (or the daemon's uid) and not
    writable by group or others. A parent may be writable by others only
    with the sticky bit (as /tmp is): then nobody else can rename or replace
    the entries root owns in it."""
    found, fixes = [], []
    if st.st_uid not in allowed:
        found.append(f"owned by {_owner(st.st_uid)}")
        fixes.append(f"chown root:root {path}")
    mode = stat.S_IMODE(st.st_mode)
    writers = [w for bit, w in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others"))
               if mode & bit]
    if writers and not (parent and mode & stat.S_ISVTX):
        found.append(f"writable by {' and '.join(writers)} (mode {mode:04o})")
        fixes.append(f"chmod go-w {path}")
    if not found:
        return None
    where = f"{what} is inside {path}, which is" if parent else f"{what} {path} is"
    return (f"refusing to start: {where} {' and '.join(found)}; whoever can change it could "
            f"replace the daemon's files or plant symlinks in them, and cronrd runs as root. "
            f"Fix: {' && '.join(fixes)}")


def check_directories(config: Config) -> None:
    """At daemon start, as root: refuse a data_dir, log_dir, jobs_dir or
    control-socket directory (or a parent of one) that a user other than
    root, or the daemon's own uid, could change. Raises ConfigError naming
    the directory, what was found and the command that fixes it."""
    if os.geteuid() != 0:
        return
    allowed = {0, os.geteuid()}
    for what, path in (("data_dir", config.data_dir), ("log_dir", config.log_dir),
                       ("jobs_dir", config.jobs_dir),
                       ("the control socket's directory", os.path.dirname(config.socket))):
        path = os.path.abspath(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None  # created later, or reported by whoever needs it
        except OSError as exc:
            raise ConfigError(f"cannot check {what} {path}: {exc.strerror}") from None
        if st is not None:
            msg = _dir_refusal(what, path, st, allowed, parent=False)
            if msg:
                raise ConfigError(msg)
        # The parents, as written and as resolved (a symlinked parent counts).
        seen = set()
        for start in (path, os.path.realpath(path)):
            parent = os.path.dirname(start)
            while parent not in seen:
                seen.add(parent)
                try:
                    pst = os.stat(parent)
                except OSError:
                    pst = None
                if pst is not None:
                    msg = _dir_refusal(what, parent, pst, allowed, parent=True)
                    if msg:
                        raise ConfigError(msg)
                if parent == os.path.dirname(parent):
                    break
                parent = os.path.dirname(parent)

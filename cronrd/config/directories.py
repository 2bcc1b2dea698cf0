"""The directories of the config: at daemon start, as root, refuse those another
user could change; for ``check-config``, also those the daemon could not create."""

from __future__ import annotations

import os
import stat
from typing import Mapping

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


# The directories the daemon uses, by the config key that names them (for the
# socket: the directory the socket file goes in).
def _directories(paths: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, what, directory) for data_dir, log_dir, jobs_dir and the socket's directory."""
    out = []
    for key in ("data_dir", "log_dir", "jobs_dir", "socket"):
        if key in paths:
            path = paths[key]
            what = key
            if key == "socket":
                path, what = os.path.dirname(path) or ".", "the directory of socket"
            out.append((key, what, os.path.abspath(path)))
    return out


def ownership_problems(paths: Mapping[str, str]) -> list[tuple[str, str]]:
    """As root: (key, message) for each data_dir, log_dir, jobs_dir or
    control-socket directory (or a parent of one) that a user other than
    root, or the daemon's own uid, could change; every one, not the first.
    ``paths`` maps those keys to their paths (socket: the socket file)."""
    if os.geteuid() != 0:
        return []
    allowed = {0, os.geteuid()}
    found: list[tuple[str, str]] = []
    for key, what, path in _directories(paths):
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            st = None  # created later, or reported by whoever needs it
        except OSError as exc:
            found.append((key, f"cannot check {what} {path}: {exc.strerror}"))
            continue
        if st is not None:
            msg = _dir_refusal(what, path, st, allowed, parent=False)
            if msg:
                found.append((key, msg))
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
                        found.append((key, msg))
                if parent == os.path.dirname(parent):
                    break
                parent = os.path.dirname(parent)
    return found


def creation_problems(paths: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, message) for each of data_dir, log_dir and the socket's directory
    that the daemon could not create or use at start: a part of the path is a
    file, or (as root, who could otherwise) the first directory that exists on
    the way is not writable (a read-only file system). As another user, whether
    the daemon (usually root) may write there cannot be told: not checked."""
    found = []
    for key, what, path in _directories(paths):
        if key == "jobs_dir":
            continue  # read, never created: see jobs_dir_problems
        existing = _nearest_existing(path)
        if existing is None:
            continue  # cannot look (permissions): the daemon will tell
        st, where = existing
        if not stat.S_ISDIR(st.st_mode):
            if where == path:
                found.append((key, f"{what} {path} is not a directory; point {key} at a "
                                   "directory (it is created if missing)"))
            else:
                found.append((key, f"{what} {path} cannot be created: {where} is not a "
                                   f"directory; point {key} elsewhere or move {where} away"))
        elif where != path and os.geteuid() == 0 and not os.access(where, os.W_OK | os.X_OK):
            found.append((key, f"{what} {path} cannot be created: {where} is not writable "
                               "(a read-only file system?); point "
                               f"{key} at a writable place or create {path} first"))
    return found


def jobs_dir_problems(paths: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, message) when jobs_dir is not a directory: the daemon starts
    without it (it reads it, never creates it) but then runs no jobs."""
    path = os.path.abspath(paths["jobs_dir"])
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return [("jobs_dir", f"jobs_dir {path} does not exist: the daemon would start but "
                             f"run no jobs; create it (mkdir -p {path}) or point jobs_dir at "
                             "the directory of your job files")]
    except OSError:
        return []  # cannot look (permissions): the daemon will tell
    if not stat.S_ISDIR(st.st_mode):
        return [("jobs_dir", f"jobs_dir {path} is not a directory; point jobs_dir at the "
                             "directory of your job files")]
    return []


def _nearest_existing(path: str) -> tuple[os.stat_result, str] | None:
    """The stat of ``path`` or of its nearest ancestor that exists, and which one."""
    while True:
        try:
            return os.stat(path), path
        except (FileNotFoundError, NotADirectoryError):
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent
        except OSError:
            return None


def check_directories(config: Config) -> None:
    """At daemon start, as root: refuse a data_dir, log_dir, jobs_dir or
    control-socket directory (or a parent of one) that a user other than
    root, or the daemon's own uid, could change. Raises one ConfigError naming
    each directory, what was found and the command that fixes it."""
    found = ownership_problems({"data_dir": config.data_dir, "log_dir": config.log_dir,
                                "jobs_dir": config.jobs_dir, "socket": config.socket})
    if found:
        raise ConfigError("\n".join(dict.fromkeys(msg for _, msg in found)))

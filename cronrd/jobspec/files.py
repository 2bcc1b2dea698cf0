"""Job files on disk: permission checks (as cron's), bounded reads, a directory of files."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
from dataclasses import dataclass
from typing import Mapping

from cronrd import bounded_yaml

from .model import DirResult, FileResult, JobSpec, Problem
from .parse import _parse_text

MAX_FILE_BYTES = bounded_yaml.MAX_FILE_BYTES  # a bigger job file is refused

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _uid_desc(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _refusal(st: os.stat_result, subject: str, fix_path: str, allowed: set[int] | None) -> str | None:
    """Why a file with this stat may not be used, or None.

    ``allowed=None`` checks only that it is a regular file (no owner/mode)."""
    if not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        return f"{subject} is not a regular file (it is {kind}); job files must be regular files"
    if allowed is None:
        return None
    reasons: list[str] = []
    fixes: list[str] = []
    if st.st_uid not in allowed:
        want = " or ".join(_uid_desc(u) for u in sorted(allowed))
        reasons.append(f"owned by {_uid_desc(st.st_uid)}, not by {want}")
        owner = 0 if 0 in allowed else min(allowed)
        fixes.append(f"chown {'root' if owner == 0 else owner} {fix_path}")
    writable = [who for bit, who in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
    if writable:
        reasons.append(f"writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})")
        fixes.append(f"chmod go-w {fix_path}")
    if not reasons:
        return None
    return f"{subject} is {' and '.join(reasons)}; run: {' && '.join(fixes)}"


def _default_uids(allowed_uids: set[int] | None) -> set[int]:
    return {0, os.geteuid()} if allowed_uids is None else set(allowed_uids)


def check_file_permissions(path: str, allowed_uids: set[int] | None) -> Problem | None:
    """Refuse job files the way cron refuses crontabs.

    A file is refused when it is not a regular file, is writable by group or
    others (mode & 0o022), or is owned by a uid outside ``allowed_uids``
    (default: root and the effective uid of this process). A symlink is
    refused when the link itself has a foreign owner or its target fails the
    same checks. Returns a Problem at line 0, column 0, or None if allowed.
    """
    allowed = _default_uids(allowed_uids)

    def refuse(msg: str) -> Problem:
        return Problem(path, 0, 0, f"refusing job file: {msg}")

    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return refuse("it does not exist")
    except OSError as e:
        return refuse(f"cannot inspect it: {e.strerror}")
    if not stat.S_ISLNK(lst.st_mode):
        msg = _refusal(lst, "it", path, allowed)
        return refuse(msg) if msg else None
    if lst.st_uid not in allowed:
        return refuse(f"it is a symlink owned by {_uid_desc(lst.st_uid)}; "
                      f"run: chown -h root {path}")
    target = os.path.realpath(path)
    try:
        st = os.stat(path)
    except OSError:
        return refuse(f"it is a symlink to {os.readlink(path)!r}, which does not exist")
    msg = _refusal(st, f"its symlink target {target}", target, allowed)
    return refuse(msg) if msg else None


def _read_bytes_checked(path: str, allowed: set[int] | None
                        ) -> tuple[bytes | None, Problem | None]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return None, Problem(path, 0, 0, f"cannot read job file: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        # the file may have been swapped since check_file_permissions: check what was opened
        msg = _refusal(os.fstat(f.fileno()), "it", path, allowed)
        if msg:
            return None, Problem(path, 0, 0, f"refusing job file: {msg}")
        try:
            return bounded_yaml.read_bounded(f.fileno(), MAX_FILE_BYTES), None
        except bounded_yaml.FileTooLarge as e:
            return None, Problem(path, 0, 0, f"refusing job file: it is larger than "
                                             f"{MAX_FILE_BYTES} bytes (1 MiB; it has at least "
                                             f"{e.size}); split its jobs into several files")
        except OSError as e:
            return None, Problem(path, 0, 0, f"cannot read job file: {e.strerror}")


def _decode(path: str, data: bytes) -> tuple[str | None, Problem | None]:
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return None, Problem(path, line, col, f"job file is not valid UTF-8 (byte 0x{data[e.start]:02x}); "
                                              "save it as UTF-8")


def _read_checked(path: str, allowed: set[int] | None) -> tuple[str | None, Problem | None]:
    data, problem = _read_bytes_checked(path, allowed)
    if problem is not None:
        return None, problem
    assert data is not None  # one of the two is set
    return _decode(path, data)


def _reader_digest() -> bytes:
    """What a file's digest covers besides its bytes: this cronrd's reading
    of job files (the source of the modules that parse and validate them),
    so that an upgrade that reads a file differently parses it again."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(b"cronrd job file reader\0")
    for folder in (here, os.path.join(os.path.dirname(here), "schedule")):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        except OSError:
            names = []
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
            except OSError:
                h.update(name.encode() + b"\0?")
    from cronrd import __version__
    h.update(__version__.encode())
    return h.digest()


READER = _reader_digest()


def file_digest(data: bytes, pools: Mapping[str, int] | None = None) -> str:
    """The digest of a job file's bytes as this cronrd reads them (with the
    daemon config's pools for a file that may name one: it is read again
    when they change; other files keep their digest)."""
    if not pools or b"pool" not in data:
        return hashlib.sha256(READER + data).hexdigest()
    names = json.dumps(sorted(pools.items()), separators=(",", ":")).encode()
    return hashlib.sha256(READER + b"pools\0" + names + b"\0" + data).hexdigest()


@dataclass
class Scanned:
    """One job file looked at by :func:`scan_job_file`: ``digest`` of its
    bytes (None when it could not be read), and its jobs and problems, or
    ``result`` None when its digest is the one it had (not parsed again)."""
    path: str
    digest: str | None
    result: FileResult | None
    positions: dict[str, tuple[int, int]]


def scan_job_file(path: str, allowed: set[int] | None, known: str | None = None,
                  parse: bool = True, pools: Mapping[str, int] | None = None) -> Scanned:
    """Check, read and (unless its digest is ``known``) parse one job file.
    ``parse=False``: only its digest (``result`` None) or its problem.
    Never raises: every failure is a problem of the file."""
    try:
        if allowed is None:
            msg = _refusal(os.stat(path), "it", path, None)
            problem = Problem(path, 0, 0, f"refusing job file: {msg}") if msg else None
        else:
            problem = check_file_permissions(path, allowed)
        if problem is None:
            data, problem = _read_bytes_checked(path, allowed)
        if problem is not None:
            return Scanned(path, None, FileResult(path, (), (problem,)), {})
        assert data is not None  # one of the two is set
        digest = file_digest(data, pools)
        if digest == known or not parse:
            return Scanned(path, digest, None, {})
        text, problem = _decode(path, data)
        if problem is not None:
            return Scanned(path, digest, FileResult(path, (), (problem,)), {})
        assert text is not None  # one of the two is set
        result, positions = _parse_text(text, path, pools)
        return Scanned(path, digest, result, positions)
    except Exception as e:  # RecursionError, MemoryError, a bug: one file's problem
        return Scanned(path, None, _guarded_failure(path, e), {})


def _load_file(path: str, allowed: set[int] | None, pools: Mapping[str, int] | None = None
               ) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """``allowed=None``: skip the owner and mode checks (still regular files only)."""
    if allowed is None:
        try:
            msg = _refusal(os.stat(path), "it", path, None)
            problem = Problem(path, 0, 0, f"refusing job file: {msg}") if msg else None
        except OSError as e:
            problem = Problem(path, 0, 0, f"cannot read job file: {e.strerror}")
    else:
        problem = check_file_permissions(path, allowed)
    if problem is not None:
        return FileResult(path, (), (problem,)), {}
    text, problem = _read_checked(path, allowed)
    if problem is not None:
        return FileResult(path, (), (problem,)), {}
    assert text is not None  # one of the two is set
    return _parse_text(text, path, pools)


def _load_file_guarded(path: str, allowed: set[int] | None,
                       pools: Mapping[str, int] | None = None,
                       ) -> tuple[FileResult, dict[str, tuple[int, int]]]:
    """``_load_file``, where any exception becomes a problem of this one file.

    The bounds make deep recursion and huge trees impossible; this is the
    backstop that keeps one file from stopping the watcher or the daemon's
    start whatever it holds."""
    try:
        return _load_file(path, allowed, pools)
    except Exception as e:  # RecursionError, MemoryError, a bug: one file's problem
        return _guarded_failure(path, e), {}


def _guarded_failure(path: str, e: Exception) -> FileResult:
    what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return FileResult(path, (), (Problem(
        path, 0, 0, f"cannot load job file ({what}); the file is skipped and the jobs it "
                    "defined keep their last good version: simplify or fix the file, "
                    "and report this to the cronrd developers with the file"),))


def load_job_file(path: str, *, allowed_uids: set[int] | None = None,
                  check_permissions: bool = True,
                  pools: Mapping[str, int] | None = None) -> FileResult:
    """Check permissions, then read and parse one job file.

    ``check_permissions=False`` skips the owner and mode checks (for
    ``cronrd validate`` on files not installed yet); non-regular files are
    still refused. Never raises: every failure is a problem of the file."""
    return _load_file_guarded(path, _default_uids(allowed_uids) if check_permissions else None,
                              pools)[0]


def is_job_file_name(name: str) -> bool:
    """True for names the directory loader reads: ``*.yaml``/``*.yml`` that
    are not hidden (editor backups ``*~``, ``*.swp``, ``*.dpkg-*`` do not end
    in .yaml and are skipped too)."""
    return (
        not name.startswith(".")
        and name.endswith((".yaml", ".yml"))
        and ".dpkg-" not in name
    )


def list_job_files(path: str) -> tuple[list[str], Problem | None]:
    """The job file names in a directory, sorted; or the directory's problem
    (missing, not a directory, unreadable) at line 0."""
    try:
        return sorted(e.name for e in os.scandir(path) if is_job_file_name(e.name)), None
    except FileNotFoundError:
        return [], Problem(path, 0, 0, f"job directory {path} does not exist; create it with: "
                                       f"install -d -m 0755 {path}")
    except NotADirectoryError:
        return [], Problem(path, 0, 0, f"{path} is not a directory; point cronrd at the "
                                       "directory that holds the *.yaml job files")
    except OSError as e:
        return [], Problem(path, 0, 0, f"cannot read job directory {path}: {e.strerror}")


def default_uids(allowed_uids: set[int] | None) -> set[int]:
    """The owners a job file may have: root and this process's euid, unless given."""
    return _default_uids(allowed_uids)


def load_jobs_dir(path: str, *, allowed_uids: set[int] | None = None,
                  check_permissions: bool = True,
                  pools: Mapping[str, int] | None = None) -> DirResult:
    """Load every job file in a directory (sorted by name).

    A job name defined twice (in one file or across files) is reported on
    the later definition, which is dropped. A missing or unreadable
    directory is one Problem at line 0, not an exception.
    ``check_permissions=False``: as for :func:`load_job_file`.
    """
    allowed = _default_uids(allowed_uids) if check_permissions else None
    names, problem = list_job_files(path)
    if problem is not None:
        return DirResult((FileResult(path, (), (problem,)),))
    files: list[FileResult] = []
    first: dict[str, JobSpec] = {}
    for name in names:
        full = os.path.join(path, name)
        result, positions = _load_file_guarded(full, allowed, pools)
        kept: list[JobSpec] = []
        extra: list[Problem] = []
        for job in result.jobs:
            prev = first.get(job.name)
            if prev is not None:
                line, col = positions.get(job.name, (job.line, 1))
                extra.append(Problem(full, line, col,
                                     f"duplicate job name {job.name!r}: already defined at "
                                     f"{prev.source}:{prev.line}; rename one of them"))
                continue
            first[job.name] = job
            kept.append(job)
        if extra:
            problems = tuple(sorted(result.problems + tuple(extra), key=lambda p: (p.line, p.col)))
            result = FileResult(result.path, tuple(kept), problems)
        files.append(result)
    return DirResult(tuple(files))

"""Run log files: where they live, how they are opened, when they go.

A run's log file is LOG_DIR/JOB/STAMP-aATTEMPT-rRUN.log, derived on the node
from its own log_dir and the run's job, fire time, attempt and id. The path a
run record carries (RunStarted/RunFinished.log_path) is for display only:
whoever can commit a record cannot make a node open a file of its choice. Both
components are opened relative to log_dir without following symlinks.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import re
import stat

from ...config import Config
from ...errors import CronrdError, RequestError
from ...model import run_states
from ...schedule import iso_utc
from ...model.run import Run
from . import output as O

log = logging.getLogger("cronrd.executor")

LOG_CHUNK = 256 * 1024  # bytes per read of a run's log (local or from another node)


def log_file_name(run: Run) -> str:
    stamp = iso_utc(int(run.fire_time)).replace("-", "").replace(":", "")
    return f"{stamp}-a{int(run.attempt)}-r{int(run.run_id)}.log"


def safe_dir_name(job: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(job)) or "_"
    return "_" + name if name.strip(".") == "" else name  # never "." or ".."


def run_log_path(log_dir: str, run: Run) -> str:
    """Where this node keeps (or would keep) the log of ``run``."""
    return os.path.join(log_dir, safe_dir_name(run.job), log_file_name(run))


def _job_dir(log_dir: str, run: Run, *, create: bool) -> int:
    """The job's log directory, opened without following a symlink."""
    sub = safe_dir_name(run.job)
    top = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if create:
            try:
                os.mkdir(sub, 0o750, dir_fd=top)
            except FileExistsError:
                pass
        try:
            return os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=top)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _not_followed(os.path.join(log_dir, sub), "directory") from None
            raise
    finally:
        os.close(top)


def open_run_log(log_dir: str, run: Run, *, create: bool, with_dir: bool = False):
    """Open the log of ``run`` under ``log_dir``: for appending (creating the
    job's directory and the file) or for reading. Raises FileNotFoundError
    when it does not exist, CronrdError for a symlink or anything but a
    regular file (in place of the file or of the job's directory).
    ``with_dir``: (log fd, the job's directory fd), for the supervisor,
    which opens the log's sidecars there (output.py)."""
    sub, name = safe_dir_name(run.job), log_file_name(run)
    jd = _job_dir(log_dir, run, create=create)
    try:
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT if create
                 else os.O_RDONLY | os.O_NONBLOCK)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640, dir_fd=jd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _not_followed(os.path.join(log_dir, sub, name), "file") from None
            raise
    except BaseException:
        os.close(jd)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        os.close(jd)
        raise _not_followed(os.path.join(log_dir, sub, name), "file")
    if with_dir:
        return fd, jd
    os.close(jd)
    return fd


def open_run_output(log_dir: str, run: Run) -> O.Files:
    """The log of ``run`` and its sidecars (output.py), for reading; raises
    like open_run_log."""
    sub, name = safe_dir_name(run.job), log_file_name(run)
    jd = _job_dir(log_dir, run, create=False)
    try:
        try:
            return O.open_files(jd, name)
        except OSError as exc:
            if exc.errno == errno.ELOOP or isinstance(exc, IsADirectoryError):
                raise _not_followed(os.path.join(log_dir, sub, name), "file") from None
            raise
    finally:
        os.close(jd)


def remove_run_log(path: str) -> None:
    """Delete a log and its sidecars (output.py); those not there are fine."""
    for suffix in ("", *O.SIDECARS):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


def _not_followed(path: str, what: str) -> CronrdError:
    return CronrdError(f"{path} is a symlink or not a regular {what}; cronrd does not follow "
                       f"symlinks in log_dir: remove it (the daemon makes its own)")


def read_run_log(log_dir: str, run: Run, offset: int, size: int, running: bool = False
                 ) -> tuple[list[O.Part], int, bool]:
    """Up to about ``size`` bytes of the output of ``run`` from output
    position ``offset`` (output.read): parts, next position, more now."""
    files = open_run_output(log_dir, run)
    try:
        return O.read(files, offset, size, running)
    finally:
        files.close()


def say(fd: int, text: str) -> None:
    """A line of cronrd's own into a run's log (why it did not start)."""
    try:
        os.write(fd, text.encode())
    except OSError:
        pass



# -- log retention ----------------------------------------------------------------
def prune_logs(log_dir: str, max_age: float, max_files: int, now: float,
               active: set[str] | None = None) -> int:
    """Delete run logs (with their sidecars, output.py) older than ``max_age``
    (log_retention.max_age) or beyond ``max_files`` per job; never those in
    ``active`` (in use). A sidecar whose log is gone goes too.

    Runs in a worker thread: ``active`` is taken on the event loop by the caller."""
    removed = 0
    cutoff = now - max_age
    active = active or set()
    try:
        dirs = os.scandir(log_dir)
    except FileNotFoundError:
        return 0
    with dirs:
        for d in dirs:
            if not d.is_dir(follow_symlinks=False):
                continue
            files, sidecars = [], []
            with os.scandir(d.path) as it:
                for f in it:
                    if f.name.endswith(".log") and f.is_file(follow_symlinks=False):
                        files.append((f.stat().st_mtime, f.path))
                    elif f.name.endswith(O.SIDECARS) and f.is_file(follow_symlinks=False):
                        sidecars.append(f.path)
            logs = {path for _, path in files}
            for path in sidecars:  # left by a log removed by hand (or a crash)
                if path.rsplit(".", 1)[0] not in logs:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            files.sort(reverse=True)
            for i, (mtime, path) in enumerate(files):
                if path in active:
                    continue
                if mtime < cutoff or i >= max_files:
                    try:
                        remove_run_log(path)
                        removed += 1
                    except OSError as exc:
                        if exc.errno != errno.ENOENT:
                            log.warning("event=log_prune_failed path=%s error=%s",
                                        path, exc.strerror)
    return removed


def read_run_chunk(config: Config, run: Run, offset: int) -> dict:
    """Up to LOG_CHUNK bytes of ``run``'s log on this node, from ``offset``
    (control/logs.read_log_chunk looks the run up; a worker agent, which
    holds no state, is sent the run whole (a worker agent holds no
    state: the leader sends the run with the request)."""
    run_id = run.run_id
    if not isinstance(offset, int) or offset < 0:
        raise RequestError(f"offset {offset!r} of run {run_id}'s log must be a whole "
                           "number >= 0")
    path = run_log_path(config.log_dir, run)
    parts: list[O.Part] = []
    more = False
    try:
        parts, offset, more = read_run_log(config.log_dir, run, offset, LOG_CHUNK,
                                           running=run.state in run_states.ACTIVE)
    except FileNotFoundError:
        # No log: a run that never started has none. One the record says
        # had a log (and that is over) lost it to log retention.
        if run.log_path and run.state not in run_states.ACTIVE:
            raise RequestError(f"log file {path} of run {run_id} is gone from node "
                               f"{config.node_id} (removed by log "
                               "retention?)") from None
    except CronrdError as exc:
        raise RequestError(f"cannot read the log of run {run_id} on node "
                           f"{config.node_id}: {exc}") from None
    except OSError as exc:
        raise RequestError(f"cannot read log file {path} of run {run_id} on node "
                           f"{config.node_id}: {exc.strerror}") from None
    # "data" alone is what older nodes read; "parts" says which bytes came
    # from which stream when (output.py). "offset" is the output position.
    return {"data": base64.b64encode(b"".join(p.data for p in parts)).decode(),
            "parts": [[p.stream, p.time, len(p.data)] for p in parts],
            "offset": offset, "more": more}

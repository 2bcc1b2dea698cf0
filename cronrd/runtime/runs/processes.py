"""Process-tree helpers: signal a run's whole tree, grandchildren included."""

from __future__ import annotations

import os
import signal

import psutil

from ...state.checkpoints import token_hash


def snapshot_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (those that left the group too)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def signal_tree(pgid: int, procs: list[psutil.Process], sig: int, *,
                leader_reaped: bool = False) -> None:
    """Send ``sig`` to the process group and to every process in ``procs``.

    psutil.Process checks the creation time before signalling, so a pid that
    was reused since the snapshot is never hit. Once the group's leader is
    reaped (``leader_reaped``), its number could in time name someone else's
    group: the group is signalled only while a process of ``procs`` (ours)
    is still in it, which keeps the number taken.
    """
    if pgid > 1 and (not leader_reaped or any(_in_group(p, pgid) for p in procs)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def _in_group(proc: psutil.Process, pgid: int) -> bool:
    try:
        return proc.is_running() and os.getpgid(proc.pid) == pgid
    except (OSError, psutil.Error):
        return False


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def run_identity(proc: psutil.Process, run_id: int, node: str) -> bool:
    """Does ``proc`` carry the identity the executor gives a run's processes
    (CRONRD_RUN_ID and CRONRD_NODE in the environment it was started with)?

    Only the node's own view of the process counts: a pid or start time
    from the replicated state can name any process on the host (pid 1,
    sshd), so it is never enough to signal one.
    """
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return False
    return env.get("CRONRD_RUN_ID") == str(run_id) and env.get("CRONRD_NODE") == node


def run_process(pid: int | None, started_at: float | None, *, run_id: int,
                node: str) -> psutil.Process | None:
    """The live process ``pid`` if it is run ``run_id``'s on ``node``: started
    at ``started_at`` (when given) and carrying the run's identity."""
    if not pid or isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
        return None
    try:
        proc = psutil.Process(pid)
        if started_at is not None and abs(proc.create_time() - started_at) > 2.0:
            return None  # the pid was reused by an unrelated process
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.Error, OSError, ValueError, OverflowError):
        return None
    return proc if run_identity(proc, run_id, node) else None


def run_secret(proc: psutil.Process | None, run_id: int, node: str) -> str:
    """The hash of the CRONRD_RUN_TOKEN run ``run_id`` was started with, read
    from its process (an adopted run whose start was not reported yet: the
    daemon that made the token is gone); "" if it cannot be read."""
    if proc is None:
        return ""
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return ""
    if env.get("CRONRD_RUN_ID") != str(run_id) or env.get("CRONRD_NODE") != node:
        return ""
    token = env.get("CRONRD_RUN_TOKEN", "")
    return token_hash(token) if token else ""


SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}

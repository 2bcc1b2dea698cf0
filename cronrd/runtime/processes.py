"""Process-tree helpers: signal a run's whole tree, grandchildren included."""

from __future__ import annotations

import os
import signal

import psutil


def snapshot_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (those that left the group too)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def signal_tree(pgid: int, procs: list[psutil.Process], sig: int) -> None:
    """Send ``sig`` to the process group and to every process in ``procs``.

    psutil.Process checks the creation time before signalling, so a pid that
    was reused since the snapshot is never hit.
    """
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def process_matches(pid: int | None, started_at: float | None) -> psutil.Process | None:
    """The live process ``pid`` if it is the one started at ``started_at``."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if started_at is not None and abs(proc.create_time() - started_at) > 2.0:
            return None  # the pid was reused by an unrelated process
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


SIGNAL_NAMES = {s.value: s.name for s in signal.Signals}

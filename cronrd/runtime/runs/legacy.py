"""Runs of daemons older than the run supervisors: kill and retry.

Such a run has no record in data_dir/runs. Its processes are found by the
identity the old executor gave them (CRONRD_RUN_ID and CRONRD_NODE in their
environment), never by a pid from the replicated state alone, and stopped:
a process that is not our child cannot tell us its exit status.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Callable

import psutil

from .launch import GATE_SCRIPT, LEGACY_GATE_SCRIPTS
from .processes import alive, run_identity

POLL = 0.05  # while waiting for processes that are not our children to go


def at_gate(proc: psutil.Process) -> bool:
    """Is this one of our shells still waiting at its gate (nothing ran)?"""
    try:
        cmd = proc.cmdline()[:3]
    except psutil.Error:
        return True  # gone: nothing to stop
    return len(cmd) == 3 and cmd[:2] == ["/bin/sh", "-c"] and \
        (cmd[2] == GATE_SCRIPT or cmd[2] in LEGACY_GATE_SCRIPTS)


def find_orphans(node_id: str) -> dict[int, list[psutil.Process]]:
    """Live processes of this node's runs, by run id."""
    found: dict[int, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        run_id = env.get("CRONRD_RUN_ID", "")
        if run_id.isdigit() and env.get("CRONRD_NODE") == node_id:
            found.setdefault(int(run_id), []).append(proc)
    return found


async def stop_orphans(procs: list, *, run_id: int, node_id: str, grace: float,
                       monotonic: Callable[[], float]) -> str:
    """Stop the processes of run ``run_id`` (SIGTERM, SIGKILL after
    ``grace``); the reason to record for the run."""
    # Checked again right before signalling anything.
    procs = [p for p in procs if run_identity(p, run_id, node_id)]
    if not procs:
        return "cronrd was not running when the run ended; its result is unknown"
    tree = list(procs)
    for p in procs:
        try:
            tree.extend(p.children(recursive=True))
        except psutil.Error:
            pass
    for p in procs:
        try:
            if os.getpgid(p.pid) == p.pid:  # a run's session leader
                os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            pass
    for p in tree:
        try:
            p.terminate()
        except psutil.Error:
            pass
    deadline = monotonic() + grace
    while alive(tree) and monotonic() < deadline:
        await asyncio.sleep(POLL)  # not our children: no pidfd to wait on for all
    for p in alive(tree):
        try:
            p.kill()
        except psutil.Error:
            pass
    return (f"cronrd restarted during the run; its processes "
            f"({', '.join(str(p.pid) for p in procs)}) were stopped (kill and retry)")

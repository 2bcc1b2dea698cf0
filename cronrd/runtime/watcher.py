"""The job-file watcher: keeps the replicated job set equal to jobs_dir.

It fingerprints the directory (names, sizes, mtimes, inodes, modes, owners)
every ``watch_interval`` and reloads when anything changed, or at once on
SIGHUP. Only differences are proposed. A file with problems never removes
the jobs it defined before: they keep their last good version until the
file is fixed or deleted.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable

from ..jobspec import DirResult, FileResult, Problem, load_jobs_dir
from ..state import commands as C
from ..state import queries as Q
from ..errors import NotLeader, ProposalDropped, StateError, StorageError
from ..state.machine import Refused
from .clock import Clock

log = logging.getLogger("cronrd.watcher")


def _transient(exc: BaseException) -> bool:
    """A failed proposal worth trying again (not a refusal of the change)."""
    return isinstance(exc, (NotLeader, ProposalDropped, StorageError, asyncio.TimeoutError)) \
        or (isinstance(exc, StateError) and not isinstance(exc, Refused))


def fingerprint(path: str) -> tuple:
    try:
        st = os.stat(path)
        entries = []
        with os.scandir(path) as it:
            for e in it:
                try:
                    s = e.stat()
                except OSError:
                    continue
                entries.append((e.name, s.st_size, s.st_mtime_ns, s.st_ino, s.st_mode,
                                s.st_uid))
        return (st.st_mtime_ns, st.st_mode, st.st_uid, tuple(sorted(entries)))
    except OSError as exc:
        return ("error", exc.errno)


class Watcher:
    def __init__(self, jobs_dir: str, proposer, conn, clock: Clock, interval: float = 1.0,
                 allowed_uids: set[int] | None = None, node: str = "",
                 hold: Callable[[], str | None] = lambda: None):
        """``hold()``: why this node's clock may not date a new job now (a
        leader's clock not yet measured or off: a job's schedule starts at
        its creation time), or None; its changes wait meanwhile."""
        self.jobs_dir = jobs_dir
        self.hold = hold
        self._held = False
        self.node = node  # whose jobs_dir this is: the state keeps one source per node
        self.proposer = proposer
        self.conn = conn
        self.clock = clock
        self.interval = interval
        self.allowed_uids = allowed_uids
        self.problems: list[Problem] = []
        self.conflicts: dict[str, str] = {}
        self._fingerprint: tuple | None = None
        self._kick = asyncio.Event()
        self.reloads = 0
        self.stopped = False

    def kick(self) -> None:
        """Reload at once (SIGHUP)."""
        self._fingerprint = None
        self._kick.set()

    async def reload(self) -> dict:
        fp = fingerprint(self.jobs_dir)
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                None, lambda: load_jobs_dir(self.jobs_dir, allowed_uids=self.allowed_uids))
        except Exception as exc:  # load_jobs_dir reports per file; this is the backstop
            log.exception("event=job_files_load_failed jobs_dir=%s", self.jobs_dir)
            result = DirResult((FileResult(self.jobs_dir, (), (Problem(
                self.jobs_dir, 0, 0, f"cannot load the job files ({type(exc).__name__}: {exc}); "
                                     "every job keeps its last good version: fix the file "
                                     "named in the daemon's log, then run `cronrd reload`"),)),))
        self._fingerprint = fp
        self.reloads += 1
        problems = result.problems
        if [str(p) for p in problems] != [str(p) for p in self.problems]:
            for p in problems:
                log.error("event=job_file_problem problem=\"%s\"", p)
        self.problems = list(problems)
        broken = {f.path for f in result.files if f.problems}
        desired = result.jobs
        # This node's own definitions: other nodes propose theirs, and the
        # state merges them (identical = one job, different = a conflict).
        current = Q.job_sources(self.conn, self.node)
        held = self.hold()
        if held is not None and any(name not in current for name in desired):
            # A new job's first fire time is counted from its creation time:
            # a clock 30 s fast would skip its first 30 s of fire times.
            if not self._held:
                log.warning("event=job_changes_held reason=\"this leader's clock %s\" "
                            "hint=\"retried every %gs until it is measured good\"", held,
                            self.interval)
            self._held = True
            self._fingerprint = None  # again at the next look
            return {"jobs": len(desired), "changes": 0, "kept": [], "held": held,
                    "problems": [str(p) for p in problems]}
        self._held = False
        at = self.clock.now()
        futures = []
        for name, spec in desired.items():
            have = current.get(name)
            if have is None or have["digest"] != spec.digest() or have["source"] != spec.source:
                futures.append(self.proposer.propose(C.PutJob(
                    name=name, spec=spec.to_dict(), digest=spec.digest(), source=spec.source,
                    at=at, node=self.node)))
                log.info("event=job_%s job=%s file=%s", "added" if have is None else "updated",
                         name, spec.source)
        kept = []
        for name, have in current.items():
            if name in desired:
                continue
            if have["source"] in broken or self._dir_unreadable(result):
                kept.append(name)
                continue
            futures.append(self.proposer.propose(C.RemoveJob(name=name, at=at, node=self.node)))
            log.info("event=job_removed job=%s file=%s", name, have["source"])
        for name in kept:
            log.warning("event=job_kept job=%s reason=\"its file has problems; the last good "
                        "version keeps running until the file is fixed\"", name)
        results = await asyncio.gather(*futures, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for e in errors:
            if not _transient(e):
                log.error("event=job_update_failed error=\"%s\"", e)
        again = any(_transient(e) for e in errors)
        if again:  # once per look, not once per job: it is tried again anyway
            log.info("event=job_update_deferred count=%d error=\"%s\" hint=\"tried again "
                     "in %gs\"", sum(map(_transient, errors)),
                     next(e for e in errors if _transient(e)), self.interval)
        if again:
            # No leader, a timeout, a forward that failed, a leader's clock
            # not measured yet: not the change's fault. Only differences are
            # proposed: the next look tries again.
            self._fingerprint = None
        return {"jobs": len(desired), "changes": len(futures), "kept": kept,
                "problems": [str(p) for p in problems], **({"again": True} if again else {})}

    async def settle(self, patience: float) -> dict:
        """The first look at the daemon's start: again (every 0.1 s) while
        its changes wait for a leader or the leader's clock, for at most
        ``patience`` seconds, so that a started daemon has its jobs."""
        deadline = self.clock.monotonic() + patience
        while True:
            result = await self.reload()
            if not (result.get("held") or result.get("again")) or \
                    self.clock.monotonic() >= deadline:
                return result
            await asyncio.sleep(0.1)

    def _dir_unreadable(self, result) -> bool:
        # A missing or unreadable directory must not wipe every job.
        return any(p.line == 0 and p.path.rstrip("/") == self.jobs_dir.rstrip("/")
                   for p in result.problems)

    async def run(self) -> None:
        while not self.stopped:
            try:
                await asyncio.wait_for(self._kick.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._kick.clear()
            if self.stopped:
                return
            if fingerprint(self.jobs_dir) != self._fingerprint:
                try:
                    await self.reload()
                except Exception:
                    log.exception("event=reload_failed")

    def stop(self) -> None:
        self.stopped = True
        self._kick.set()

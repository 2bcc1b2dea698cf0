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

from dataclasses import dataclass

from ..jobspec import FileResult, Problem
from ..jobspec.files import default_uids, list_job_files, scan_job_file
from ..state import commands as C
from ..state import queries as Q
from ..errors import NotLeader, ProposalDropped, StateError, StorageError
from ..state.machine import Refused
from .clock import Clock

log = logging.getLogger("cronrd.watcher")

MAX_PUTS = 1000           # jobs in one SyncJobs command
MAX_BYTES = 256 * 1024    # bytes of definitions in one SyncJobs command (a Raft entry)
WINDOW = 4                # SyncJobs commands in flight at once
LOG_JOBS_PER_FILE = 20    # a line per job added/updated/removed up to this, then a sum


@dataclass
class _Scan:
    digest: str | None
    result: FileResult | None
    positions: dict
    canon: dict               # job name -> (canonical text, digest)


class _Batch:
    """The SyncJobs commands of one look, built as the files are read and
    proposed WINDOW at a time (a file's record rides with its last jobs)."""

    def __init__(self, watcher: "Watcher", at: float):
        self.w, self.at = watcher, at
        self.puts: list = []
        self.removes: list = []
        self.files: list = []
        self.size = 0
        self.changes = 0
        self.flight: list[asyncio.Future] = []
        self.results: list = []

    async def put(self, item: list, size: int) -> None:
        if self.puts and (len(self.puts) >= MAX_PUTS or self.size + size > MAX_BYTES):
            await self.flush()
        self.puts.append(item)
        self.size += size
        self.changes += 1

    async def remove(self, name: str) -> None:
        if len(self.puts) + len(self.removes) >= MAX_PUTS:
            await self.flush()
        self.removes.append(name)
        self.changes += 1

    async def file(self, item: list) -> None:
        self.files.append(item)

    async def flush(self) -> None:
        if not (self.puts or self.removes or self.files):
            return
        cmd = C.SyncJobs(node=self.w.node, at=self.at, puts=self.puts, removes=self.removes,
                         files=self.files)
        self.puts, self.removes, self.files, self.size = [], [], [], 0
        fut = self.w.proposer.propose(cmd)
        if not isinstance(fut, asyncio.Future):
            fut = asyncio.ensure_future(fut)
        self.flight.append(fut)
        while len(self.flight) >= WINDOW:
            await self._collect(self.flight.pop(0))

    async def _collect(self, fut) -> None:
        try:
            self.results.append(await fut)
        except Exception as exc:
            self.results.append(exc)

    async def finish(self) -> list:
        await self.flush()
        while self.flight:
            await self._collect(self.flight.pop(0))
        return self.results


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
        """Look at the job files and commit what differs from the state.

        File by file: a file whose bytes are those this node last synced
        (``source_files``) is not parsed again; a parsed file's jobs are
        compared with this node's definitions in the state and only the
        changed ones are proposed, in bulk (``SyncJobs``: up to MAX_PUTS
        jobs or MAX_BYTES of definitions each, WINDOW in flight), with a
        definition's text only where the state does not hold its digest
        yet. Memory holds one file at a time and the names seen."""
        fp = fingerprint(self.jobs_dir)
        loop = asyncio.get_running_loop()
        names, dir_problem = list_job_files(self.jobs_dir)
        allowed = default_uids(self.allowed_uids)
        known = dict(self._query("SELECT path, digest FROM source_files WHERE node=?",
                                 (self.node,)))
        problems: list[Problem] = [dir_problem] if dir_problem else []
        seen: dict[str, str] = {}     # job name -> the file that defines it (first wins)
        lines: dict[str, int] = {}    # job name -> its line, for the files parsed
        broken: set[str] = set()
        held_reason = None
        counts = {"jobs": 0, "parsed": 0, "unchanged": 0, "deferred": 0}
        batch = _Batch(self, self.clock.now())
        for fname in names:
            path = os.path.join(self.jobs_dir, fname)
            scanned = await self._scan(loop, path, allowed, known.get(path))
            if scanned.result is None:  # unchanged since last synced: the state has its jobs
                mine = [n for (n,) in self._query(
                    "SELECT name FROM job_sources WHERE node=? AND source=?", (self.node, path))]
                if not any(n in seen for n in mine):
                    counts["unchanged"] += 1
                    counts["jobs"] += len(mine)
                    seen.update(dict.fromkeys(mine, path))
                    continue
                # an earlier file defines one of its jobs now: read it again
                scanned = await self._scan(loop, path, allowed, None)
            counts["parsed"] += 1
            result, canon = scanned.result, scanned.canon
            jobs, file_problems = [], list(result.problems)
            for job in result.jobs:
                prev = seen.get(job.name)
                if prev is not None:
                    line, col = scanned.positions.get(job.name, (job.line, 1))
                    where = f"{prev}:{lines[job.name]}" if job.name in lines else prev
                    file_problems.append(Problem(
                        path, line, col, f"duplicate job name {job.name!r}: already defined "
                                         f"at {where}; rename one of them"))
                    continue
                seen[job.name] = path
                lines[job.name] = job.line
                jobs.append(job)
            file_problems.sort(key=lambda p: (p.line, p.col))
            problems.extend(file_problems)
            if file_problems or scanned.digest is None:
                broken.add(path)
            counts["jobs"] += len(jobs)
            have = {n: (d, src) for n, d, src in self._query(
                "SELECT name, digest, source FROM job_sources WHERE node=? AND source=?",
                (self.node, path))}
            deferred, added, updated = 0, 0, 0
            for job in jobs:
                text, digest = canon[job.name]
                before = have.get(job.name)
                if before == (digest, path):
                    continue
                if before is None:
                    before = next(iter(self._query(
                        "SELECT digest, source FROM job_sources WHERE node=? AND name=?",
                        (self.node, job.name))), None)
                    if before == (digest, path):
                        continue
                if before is None:
                    held = self.hold()
                    if held is not None and not any(self._query(
                            "SELECT 1 FROM jobs WHERE name=?", (job.name,))):
                        # A new job's first fire time is counted from its
                        # creation time: a clock 30 s fast would skip its
                        # first 30 s of fire times.
                        held_reason, deferred = held, deferred + 1
                        continue
                have_text = any(self._query("SELECT 1 FROM specs WHERE name=? AND digest=?",
                                            (job.name, digest)))
                if before is None:
                    added += 1
                else:
                    updated += 1
                if added + updated <= LOG_JOBS_PER_FILE:
                    log.info("event=job_%s job=%s file=%s", "added" if before is None
                             else "updated", job.name, path)
                await batch.put([job.name, digest, path, None if have_text else text],
                                len(text) + 200 if not have_text else 200)
            counts["deferred"] += deferred
            if added + updated > LOG_JOBS_PER_FILE:
                log.info("event=jobs_synced file=%s added=%d updated=%d", path, added, updated)
            if path not in broken and not deferred:
                await batch.file([path, scanned.digest, len(jobs)])
            elif path in known:
                await batch.file([path, None, 0])  # read it again next time
        # Jobs this node defined before that no file defines now go, except
        # those of a file with problems (they keep their last good version)
        # or when the directory itself cannot be read.
        kept: list[str] = []
        if dir_problem is None:
            gone: list[str] = []
            for name, source in self._query(
                    "SELECT name, source FROM job_sources WHERE node=?", (self.node,)):
                if name in seen:
                    continue
                if source in broken:
                    kept.append(name)
                else:
                    gone.append(name)
                    if len(gone) <= LOG_JOBS_PER_FILE:
                        log.info("event=job_removed job=%s file=%s", name, source)
            if len(gone) > LOG_JOBS_PER_FILE:
                log.info("event=jobs_removed count=%d", len(gone))
            for name in gone:
                await batch.remove(name)
            present = {os.path.join(self.jobs_dir, n) for n in names}
            for path in known:
                if path not in present:
                    await batch.file([path, None, 0])
        else:
            kept = [n for (n,) in self._query("SELECT name FROM job_sources WHERE node=?",
                                              (self.node,))]
        for name in kept[:LOG_JOBS_PER_FILE]:
            log.warning("event=job_kept job=%s reason=\"its file has problems; the last good "
                        "version keeps running until the file is fixed\"", name)
        results = await batch.finish()
        del seen, lines

        self._fingerprint = fp
        self.reloads += 1
        if [str(p) for p in problems] != [str(p) for p in self.problems]:
            for p in problems:
                log.error("event=job_file_problem problem=\"%s\"", p)
        self.problems = problems
        if held_reason is not None:
            if not self._held:
                log.warning("event=job_changes_held reason=\"this leader's clock %s\" "
                            "count=%d hint=\"new jobs are retried every %gs until it is "
                            "measured good\"", held_reason, counts["deferred"], self.interval)
            self._held = True
            self._fingerprint = None  # again at the next look
        else:
            self._held = False
        errors = [r for r in results if isinstance(r, BaseException)]
        for e in errors:
            if not _transient(e):
                log.error("event=job_update_failed error=\"%s\"", e)
        again = any(_transient(e) for e in errors)
        if again:  # once per look, not once per command: it is tried again anyway
            log.info("event=job_update_deferred count=%d error=\"%s\" hint=\"tried again "
                     "in %gs\"", sum(map(_transient, errors)),
                     next(e for e in errors if _transient(e)), self.interval)
        if any(isinstance(r, dict) and r.get("need_spec") for r in results):
            again = True  # a definition went meanwhile: sent again with its text
        if again:
            # No leader, a timeout, a forward that failed, a leader's clock
            # not measured yet: not the change's fault. Only differences are
            # proposed: the next look tries again.
            self._fingerprint = None
        out = {"jobs": counts["jobs"], "changes": batch.changes, "kept": kept,
               "problems": [str(p) for p in problems], "files_parsed": counts["parsed"],
               "files_unchanged": counts["unchanged"]}
        if held_reason is not None:
            out["held"] = held_reason
        if again:
            out["again"] = True
        return out

    def _query(self, sql: str, args: tuple):
        return self.conn.execute(sql, args)

    async def _scan(self, loop, path: str, allowed: set[int], known: str | None) -> "_Scan":
        """scan_job_file off the event loop, with each job's canonical form;
        any failure is a problem of that one file."""
        def work():
            scanned = scan_job_file(path, allowed, known)
            canon = {} if scanned.result is None else {
                job.name: job.canonical() for job in scanned.result.jobs}
            return _Scan(scanned.digest, scanned.result, scanned.positions, canon)
        try:
            return await loop.run_in_executor(None, work)
        except Exception as exc:  # the backstop: this file's jobs keep their last version
            log.exception("event=job_file_load_failed file=%s", path)
            return _Scan(None, FileResult(path, (), (Problem(
                path, 0, 0, f"cannot load the job file ({type(exc).__name__}: {exc}); the "
                            "jobs it defined keep their last good version: fix the file, "
                            "then run `cronrd reload`"),)), {}, {})

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

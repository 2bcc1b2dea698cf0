"""The job-file watcher: keeps the replicated job set equal to jobs_dir.

It fingerprints the directory (names, sizes, mtimes, inodes, modes, owners)
every ``watch_interval`` and reloads when anything changed, or at once on
SIGHUP. Only differences are proposed. A file with problems never removes
the jobs it defined before: they keep their last good version until the
file is fixed or deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Callable

from dataclasses import dataclass

from ...jobspec import Problem
from ...jobspec.files import default_uids, list_job_files, scan_job_file
from ...jobspec.worker import argv as worker_argv, problems_of, scan_for_sync
from ...state import commands as C
from ...state import versions as V
from ...errors import NotLeader, ProposalDropped, StateError, StorageError
from ...state.apply_common import CLAIM_TTL
from ...errors import Refused
from ..clock import Clock
from ..tasks import wait_within

log = logging.getLogger("cronrd.watcher")

MAX_PUTS = 1000           # jobs in one SyncJobs command
MAX_BYTES = 256 * 1024    # bytes of definitions in one SyncJobs command (a Raft entry)
WINDOW = 4                # SyncJobs commands in flight at once
PARSER_BYTES = 256 * 1024  # job files to parse at least this big: worker processes parse them
MAX_PARSERS = 2           # worker processes at most (and at most one per CPU but one)
LOOKAHEAD = 2             # files asked of each worker ahead of the one being synced
PARSER_ANSWER = 64 << 20  # bytes of one worker answer (a 1 MiB file's jobs, canonical)
LOG_JOBS_PER_FILE = 20    # a line per job added/updated/removed up to this, then a sum
CLAIM_GRACE = 2.0         # seconds a follower leaves the leader to claim a big change first
HOLD_PATIENCE = 5.0       # seconds a look with changes waits for the clock hold to lift


@dataclass
class _Job:
    name: str
    line: int
    text: str      # canonical JSON of the definition
    digest: str


@dataclass
class _Scan:
    """A parsed file as the watcher needs it (jobspec/worker.py's answer)."""
    digest: str | None
    problems: tuple
    positions: dict
    jobs: list

    @classmethod
    def of(cls, answer: dict) -> "_Scan":
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return cls(answer["digest"], problems_of(answer),
                   {k: tuple(v) for k, v in answer["positions"].items()},
                   [_Job(*j) for j in answer["jobs"]])


class _Parsers:
    """Worker processes that parse job files (jobspec/worker.py) for a big
    load, up to LOOKAHEAD files ahead of the one the watcher is at. Any
    failure of theirs (cannot start, died, answered nonsense) leaves that
    file to the watcher's own thread."""

    def __init__(self, procs, allowed: set[int], todo: list[str],
                 pools: dict[str, int] | None = None):
        self.pools = pools
        self.procs = procs
        self.allowed = sorted(allowed)
        self.todo = list(todo)
        self.asked: dict[str, asyncio.Task] = {}
        self.locks = [asyncio.Lock() for _ in procs]
        self.dead: set[int] = set()
        self.next = 0

    @classmethod
    async def start_for(cls, changed: list[tuple[str, str | None]],
                        allowed: set[int], pools: dict[str, int] | None = None
                        ) -> "_Parsers | None":
        size = 0
        for path, _digest in changed:
            try:
                size += os.stat(path).st_size
            except OSError:
                pass
        if size < PARSER_BYTES:
            return None
        count = max(1, min(MAX_PARSERS, os.cpu_count() or 1, len(changed)))
        procs = []
        try:
            for _ in range(count):
                procs.append(await asyncio.create_subprocess_exec(
                    *worker_argv(), stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, limit=PARSER_ANSWER))
        except Exception as exc:
            log.warning("event=job_parsers_unavailable error=\"%s\" hint=\"the job files "
                        "are parsed in the daemon (slower for many jobs)\"", exc)
            await cls(procs, allowed, []).close()
            return None
        parsers = cls(procs, allowed, [p for p, _d in changed], pools)
        parsers._ask_ahead()
        log.info("event=job_parsers_started count=%d files=%d bytes=%d", count, len(changed),
                 size)
        return parsers

    def _ask_ahead(self) -> None:
        while self.todo and len(self.asked) < LOOKAHEAD * len(self.procs):
            path = self.todo.pop(0)
            slot = self.next % len(self.procs)
            self.next += 1
            self.asked[path] = asyncio.ensure_future(self._ask(slot, path))

    async def _ask(self, slot: int, path: str) -> "_Scan | None":
        proc = self.procs[slot]
        async with self.locks[slot]:
            if slot in self.dead:
                return None
            try:
                proc.stdin.write(json.dumps({"path": path, "allowed": self.allowed,
                                             "known": None, "pools": self.pools}
                                            ).encode() + b"\n")
                await proc.stdin.drain()
                answer = json.loads(await proc.stdout.readline())
                if answer.get("path") != path:
                    raise ValueError(f"answered for {answer.get('path')!r}")
                return _Scan.of(answer)
            except Exception as exc:
                # Its pipe may be out of step now (an answer over the limit,
                # half read): never ask it again; the daemon parses instead.
                log.warning("event=job_parser_failed file=%s error=\"%s\"", path, exc)
                self.dead.add(slot)
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                return None

    async def take(self, path: str) -> "_Scan | None":
        task = self.asked.pop(path, None)
        if task is None:
            if path in self.todo:
                self.todo.remove(path)
            return None
        try:
            return await task
        finally:
            self._ask_ahead()

    async def close(self) -> None:
        for task in self.asked.values():
            task.cancel()
        for proc in self.procs:
            try:
                proc.stdin.close()
            except Exception:
                pass
        for proc in self.procs:
            try:
                await wait_within(proc.wait(), 5)
            except (asyncio.TimeoutError, ProcessLookupError):
                proc.kill()
                await proc.wait()
            # its pipes too (one killed with an answer half read keeps them)
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()


class _Batch:
    """The SyncJobs commands of one look, built as the files are read and
    proposed WINDOW at a time (a file's record rides with its last jobs)."""

    def __init__(self, watcher: "Watcher", at: float):
        self.w, self.at = watcher, at
        self.puts: list = []
        self.removes: list = []
        self.files: list = []
        self.copies: list = []
        self.weight = 0   # jobs the command applies: its puts and those its copies stand for
        self.records: list = []
        self.release = False  # the look claimed files: its last command lets them go
        self.claimed: set[str] = set()  # the paths of those: others wait for their jobs
        self.size = 0
        self.changes = 0
        self.flight: list[asyncio.Future] = []
        self.results: list = []

    async def put(self, item: list, size: int) -> None:
        if self.weight and (self.weight >= MAX_PUTS or self.size + size > MAX_BYTES):
            await self.flush()
        self.puts.append(item)
        self.weight += 1
        self.size += size
        self.changes += 1

    async def copy(self, item: list, names: list[str]) -> None:
        """Another node's recorded file with this file's digest: its jobs
        (``names``, sorted) without parsing or sending them, in parts of at
        most MAX_PUTS jobs (the work of applying one command is bounded)."""
        for i in range(0, len(names), MAX_PUTS):
            part = names[i:i + MAX_PUTS]
            if self.weight and self.weight + len(part) > MAX_PUTS:
                await self.flush()
            self.copies.append(item + [part[0], part[-1]])
            self.weight += len(part)
            self.size += 300
            self.changes += len(part)

    async def remove(self, name: str) -> None:
        if len(self.puts) + len(self.removes) >= MAX_PUTS:
            await self.flush()
        self.removes.append(name)
        self.changes += 1

    async def file(self, item: list) -> None:
        """A file's record; kept for the last command of the look (only if
        every job command committed: a record says the state has all of the
        file's jobs, and a file recorded is not read again)."""
        self.records.append(item)

    async def flush(self, last: bool = False) -> None:
        release = last and self.release
        if not (self.puts or self.removes or self.files or self.copies or release):
            return
        cmd = C.SyncJobs(node=self.w.node, at=self.at, puts=self.puts, removes=self.removes,
                         files=self.files, copies=self.copies, release=release)
        self.puts, self.removes, self.files, self.copies = [], [], [], []
        self.size = self.weight = 0
        if release:
            self.release = False
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
        failed = any(isinstance(r, BaseException) or (isinstance(r, dict) and (
            r.get("need_spec") or r.get("copy_refused"))) for r in self.results)
        # Forgetting a record is always safe (the file is read again); so
        # only the records that say "all of it is in" wait for success.
        records = [r for r in self.records if r[1] is None or not failed]
        for i in range(0, max(len(records), 1), MAX_PUTS):  # bounded commands, as the jobs
            self.files = records[i:i + MAX_PUTS]
            await self.flush(last=i + MAX_PUTS >= len(records))
            while self.flight:
                await self._collect(self.flight.pop(0))
        return self.results


def _wait_from(plan: dict, path: str) -> dict:
    """``plan`` up to ``path``, which is waited for (the files after it are
    not reached this look)."""
    names = list(plan)
    for later in names[names.index(path):]:
        del plan[later]
    plan[path] = "wait"
    return plan


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
                 hold: Callable[[], str | None] = lambda: None,
                 pools: dict[str, int] | None = None, calendars: set[str] | None = None):
        """``calendars``: the daemon config's calendar names (a job's
        calendar: must name them; None: not checked). ``hold()``: why this node's clock may not date a new job now (a
        leader's clock not yet measured or off: a job's schedule starts at
        its creation time), or None; its changes wait meanwhile."""
        self.jobs_dir = jobs_dir
        self.hold = hold
        self.pools = pools  # the daemon config's (name -> slots) a job's pool must name
        self.calendars = calendars
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
        # Jobs whose definition a follower sends by digest first (the leader
        # may hold it already: its own identical file); those the state
        # lacked come back as need_spec and go with their text next look.
        self._send_text: set[str] = set()
        # Files whose copy the state refused (that node's record changed
        # meanwhile), by digest: parsed instead.
        self._no_copy: set[tuple[str, str | None]] = set()
        self._waiting: str | None = None
        # A follower's big change nobody claimed yet, by digest: when first
        # seen (the leader is given CLAIM_GRACE to claim it).
        self._unclaimed: dict[str, float] = {}
        self._held_since: float | None = None  # when hold() began to hold a look with changes
        # Jobs held back until the cluster version allows them (versions.JOB_KEYS_SINCE):
        # their files are read again once it does.
        self._version_held = False
        self._held_at = 0                # the cluster version they were held back at
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
        recorded = {path: (digest, count) for path, digest, count in self._query(
            "SELECT path, digest, jobs FROM source_files WHERE node=?", (self.node,))}
        known = {path: digest for path, (digest, _count) in recorded.items()}
        problems: list[Problem] = [dir_problem] if dir_problem else []
        seen: dict[str, str] = {}     # job name -> the file that defines it (first wins)
        lines: dict[str, int] = {}    # job name -> its line, for the files parsed
        broken: set[str] = set()
        held_reason = None
        counts = {"jobs": 0, "parsed": 0, "unchanged": 0, "deferred": 0, "copied": 0}
        batch = _Batch(self, self.clock.now())
        paths = [os.path.join(self.jobs_dir, fname) for fname in names]
        # First only the bytes: which files changed since they were last synced.
        def digest_of(path: str) -> str | None:
            try:
                return scan_job_file(path, allowed, known.get(path), parse=False,
                                     pools=self.pools).digest
            except Exception:  # never (one file's problem): parsed below, which says why
                return None
        digests = await loop.run_in_executor(None, lambda: [digest_of(p) for p in paths])
        changed = [(path, digest) for path, digest in zip(paths, digests)
                   if digest is None or digest != known.get(path)]
        early = self._hold_early(changed)
        if early is not None:
            return early
        plan = await self._plan(changed, batch)
        parsers = await _Parsers.start_for(
            [(p, d) for p, d in changed if plan.get(p) == "parse"], allowed, self.pools)
        waiting = None  # the file this look stopped at: another node is reading the same bytes
        reached: set[str] = set()
        try:
            for path, digest in zip(paths, digests):
                reached.add(path)
                if digest is not None and digest == known.get(path):
                    # unchanged since last synced: the state has its jobs
                    mine = [n for (n,) in self._query(
                        "SELECT name FROM job_sources WHERE node=? AND source=?",
                        (self.node, path))]
                    if len(mine) == recorded[path][1] and not any(n in seen for n in mine):
                        counts["unchanged"] += 1
                        counts["jobs"] += len(mine)
                        seen.update(dict.fromkeys(mine, path))
                        continue
                    # an earlier file defines one of its jobs now, or the state lost
                    # some of them (the node was removed and came back): read it again
                    scanned = None
                else:
                    step = plan.get(path, "parse")
                    if step == "wait":
                        waiting = path
                        break
                    # (a copy is planned only for a file with a digest)
                    if isinstance(step, tuple) and digest is not None and await self._copy_file(
                            path, digest, step, seen, counts, batch):
                        continue
                    scanned = await parsers.take(path) if parsers is not None else None
                if scanned is None:
                    scanned = await self._scan(loop, path, allowed)
                counts["parsed"] += 1
                held = await self._sync_file(path, scanned, seen, lines, broken, problems,
                                             counts, known, batch)
                held_reason = held or held_reason
        finally:
            # (their exits are waited for after this look's last commands:
            # waiting first held the last jobs of a load back for a second)
            closing = asyncio.ensure_future(parsers.close()) if parsers is not None else None
        # Jobs this node defined before that no file defines now go, except
        # those of a file with problems (they keep their last good version)
        # or when the directory itself cannot be read.
        kept: list[str] = []
        if waiting is not None:
            # the files after it are not read yet: nothing is known gone
            problems += [p for p in self.problems if p.path not in reached]
        elif dir_problem is None:
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
        if closing is not None:
            await closing
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
        wanted = [n for r in results if isinstance(r, dict) for n in r.get("need_spec", ())]
        self._send_text = set(wanted)
        if wanted:
            again = True  # sent again with the definitions at the next look
        refused = {p for r in results if isinstance(r, dict) for p in r.get("copy_refused", ())}
        if refused:  # that record changed meanwhile: parse these next look
            self._no_copy |= {(p, d) for p, d in changed if p in refused}
            again = True
        if waiting is not None:
            again = True
            if self._waiting != waiting:
                log.info("event=job_file_waiting file=%s hint=\"the leader (or another "
                         "node) reads a file with the same bytes: its jobs are copied when it "
                         "is done (this node reads it itself if nobody claims it within %gs, "
                         "or the claim is %gs old)\"", waiting, CLAIM_GRACE, CLAIM_TTL)
        self._waiting = waiting
        if again:
            # No leader, a timeout, a forward that failed, a leader's clock
            # not measured yet: not the change's fault. Only differences are
            # proposed: the next look tries again.
            self._fingerprint = None
        out = {"jobs": counts["jobs"], "changes": batch.changes, "kept": kept,
               "problems": [str(p) for p in problems], "files_parsed": counts["parsed"],
               "files_unchanged": counts["unchanged"]}
        if counts["copied"]:
            out["files_copied"] = counts["copied"]
        if waiting is not None:
            out["waiting"] = waiting
        if held_reason is not None:
            out["held"] = held_reason
        if again:
            out["again"] = True
        return out

    def _unknown_calendars(self, text: str) -> list[str]:
        """The calendar names of a job definition (canonical JSON) that
        the daemon config lacks."""
        if self.calendars is None or '"calendar":' not in text:
            return []
        rule = json.loads(text).get("calendar") or {}
        names = list(dict.fromkeys((rule.get("skip") or []) + (rule.get("only") or [])))
        return [n for n in names if n not in self.calendars]

    async def _sync_file(self, path: str, scanned: "_Scan", seen: dict, lines: dict,
                         broken: set, problems: list, counts: dict, known: dict,
                         batch: "_Batch") -> str | None:
        """One parsed file: its problems (a name an earlier file took is one
        of them), and its new and changed jobs into ``batch``. Returns why
        new jobs were held back, if they were."""
        leading = getattr(self.proposer, "is_leader", True)
        jobs, file_problems = [], list(scanned.problems)
        version = V.recorded(self.conn)
        for job in scanned.jobs:
            # (to_dict writes a newer key only when the job sets it)
            need = V.job_needs(job.text) if version < V.APPLY_VERSION else None
            if need is not None and need[0] > version:
                line, col = scanned.positions.get(job.name, (job.line, 1))
                file_problems.append(Problem(
                    path, line, col,
                    f"job {job.name!r}: {need[1]} needs cluster version {need[0]} (every "
                    f"member on cronrd {V.release_of(need[0])} or newer): {need[2]}; it is "
                    "loaded once the last member is upgraded (`cronrd status` shows the "
                    "cluster version)"))
                self._version_held = True
                self._held_at = version
                continue
            unknown = self._unknown_calendars(job.text)
            if unknown:
                line, col = scanned.positions.get(job.name, (job.line, 1))
                file_problems.append(Problem(
                    path, line, col,
                    f"job {job.name!r}: calendar names {', '.join(map(repr, unknown))}, which "
                    "the daemon config does not define (it defines: "
                    f"{', '.join(sorted(self.calendars or ())) or 'none'}); add it under "
                    "calendars: in the daemon config or fix the name"))
                continue
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
        # What the state has of this file's jobs, in a few queries.
        names = json.dumps([job.name for job in jobs])
        in_list = "name IN (SELECT value FROM json_each(?))"
        have = {n: (d, src) for n, d, src in self._query(
            f"SELECT name, digest, source FROM job_sources WHERE node=? AND {in_list}",
            (self.node, names))}
        texts = {(n, d) for n, d in self._query(
            f"SELECT name, digest FROM specs WHERE {in_list}", (names,))}
        held = self.hold()
        existing = None if held is None else {n for (n,) in self._query(
            f"SELECT name FROM jobs WHERE {in_list}", (names,))}
        deferred, added, updated = 0, 0, 0
        for job in jobs:
            text, digest = job.text, job.digest
            before = have.get(job.name)
            if before == (digest, path):
                continue
            if before is None and existing is not None and job.name not in existing:
                # A new job's first fire time is counted from its
                # creation time: a clock 30 s fast would skip its
                # first 30 s of fire times.
                deferred += 1
                continue
            have_text = (job.name, digest) in texts
            if not have_text and not leading and job.name not in self._send_text \
                    and path not in batch.claimed:
                # A follower: the leader checks every definition a member
                # sends (job-file validators); most are already there, from
                # the leader's own identical file. Ask by digest first.
                # (Not for a file it claimed: the others wait for its jobs.)
                have_text = True
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
        return held if deferred else None

    def _query(self, sql: str, args: tuple):
        return self.conn.execute(sql, args)

    def _hold_early(self, changed: list) -> dict | None:
        """A leader elected a moment ago has not measured its clock yet, so
        new jobs would be held back (their schedules start at their creation
        time) and their files read again at the next look: 10,000 jobs of a
        fleet's load parsed twice. For HOLD_PATIENCE seconds of such a hold,
        a look with changes reads nothing and is tried again (``settle``
        every 0.1 s at the start); past it, what the hold allows goes on as
        before (changes to jobs that exist)."""
        reason = self.hold() if changed else None
        if reason is None:
            self._held_since = None
            return None
        now = self.clock.monotonic()
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since >= HOLD_PATIENCE:
            return None
        self._fingerprint = None  # again at the next look
        if not self._held:
            log.warning("event=job_changes_held reason=\"this leader's clock %s\" files=%d "
                        "hint=\"the changed files are read once it is measured good (tried "
                        "again every %gs)\"", reason, len(changed), self.interval)
        self._held = True
        jobs = next(iter(self._query("SELECT count(*) FROM job_sources WHERE node=?",
                                     (self.node,))))[0]
        return {"jobs": jobs, "changes": 0, "kept": [],
                "problems": [str(p) for p in self.problems], "files_parsed": 0,
                "files_unchanged": 0, "held": reason, "again": True}

    async def _plan(self, changed: list[tuple[str, str | None]], batch: "_Batch") -> dict:
        """How to take each changed file, in order, up to the first one to
        wait for: ``(node, path, jobs)`` to copy another node's record of
        the same bytes, "wait" while another node's claim on them holds,
        else "parse". A big change is claimed first (one command): a node
        with the same bytes waits for this one's records, not parse them
        too. The claims go with this look's last command."""
        now = self.clock.now()
        held: dict[str, str] = {}
        mine = False
        for digest, node, at in self._query("SELECT digest, node, at FROM file_claims", ()):
            if node == self.node:
                mine = True
            elif now - at <= CLAIM_TTL:
                held[digest] = node
        batch.release = mine  # left over from a look that did not end
        plan: dict = {}
        claims, size = [], 0
        for path, digest in changed:
            if digest is None:
                plan[path] = "parse"  # which says what is wrong with it
                continue
            if (path, digest) not in self._no_copy:
                source = next(iter(self._query(
                    "SELECT node, path, jobs FROM source_files WHERE digest=? AND node!=? "
                    "ORDER BY node, path LIMIT 1", (digest, self.node))), None)
                if source is not None:
                    plan[path] = tuple(source)
                    continue
            if digest in held:
                plan[path] = "wait"
                break
            plan[path] = "parse"
            claims.append([digest, path])
            try:
                size += os.stat(path).st_size
            except OSError:
                pass
        if claims and size >= PARSER_BYTES and not getattr(self.proposer, "is_leader", True):
            # Most of the time the leader has the same files (one
            # configuration pushed to every host): it claims them first
            # (what a follower parses, the leader checks again).
            t = self.clock.monotonic()
            self._unclaimed = {d: self._unclaimed.get(d, t) for d, _path in claims}
            if t - min(self._unclaimed.values()) < CLAIM_GRACE:
                return _wait_from(plan, claims[0][1])
        if claims and size >= PARSER_BYTES:
            batch.release = True
            try:
                result = await self.proposer.propose(
                    C.SyncJobs(node=self.node, at=batch.at, claims=claims))
            except Exception as exc:  # parsed anyway: at worst twice in the cluster
                log.info("event=job_files_claim_failed error=\"%s\"", exc)
                result = {}
            taken = result.get("claimed_by", {}) if isinstance(result, dict) else {}
            for digest, path in claims:
                if digest not in taken:
                    batch.claimed.add(path)
                else:
                    # another node's claim committed first: wait from here on
                    return _wait_from(plan, path)
        return plan

    async def _copy_file(self, path: str, digest: str, source: tuple, seen: dict,
                         counts: dict, batch: "_Batch") -> bool:
        """Take another node's record of a file with the same bytes as this
        file's jobs; False (parse it) when that record has changed
        meanwhile or an earlier file defines one of its jobs."""
        node, their_path, count = source
        names = [n for (n,) in self._query(
            "SELECT name FROM job_sources WHERE node=? AND source=? ORDER BY name",
            (node, their_path))]
        if len(names) != count or any(n in seen for n in names):
            return False
        seen.update(dict.fromkeys(names, path))
        counts["jobs"] += count
        counts["copied"] += 1
        await batch.copy([path, digest, node, their_path, count], names)
        await batch.file([path, digest, count])
        log.info("event=job_file_copied file=%s jobs=%d from=%s:%s", path, count, node,
                 their_path)
        return True

    async def _scan(self, loop, path: str, allowed: set[int]) -> "_Scan":
        """Parse one file in a thread (a small load, or no parser process);
        any failure is a problem of that one file."""
        try:
            return _Scan.of(await loop.run_in_executor(
                None, lambda: scan_for_sync(path, allowed, None, self.pools)))
        except Exception as exc:  # the backstop: this file's jobs keep their last version
            log.exception("event=job_file_load_failed file=%s", path)
            return _Scan(None, (Problem(
                path, 0, 0, f"cannot load the job file ({type(exc).__name__}: {exc}); the "
                            "jobs it defined keep their last good version: fix the file, "
                            "then run `cronrd reload`"),), {}, [])

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
                await wait_within(self._kick.wait(), self.interval)
            except asyncio.TimeoutError:
                pass
            self._kick.clear()
            if self.stopped:
                return
            if self._version_held and V.recorded(self.conn) > self._held_at:
                self._version_held = False
                self._fingerprint = None   # the held jobs' files are read again
            if fingerprint(self.jobs_dir) != self._fingerprint:
                try:
                    await self.reload()
                except Exception:
                    log.exception("event=reload_failed")

    def stop(self) -> None:
        self.stopped = True
        self._kick.set()

"""Applying the commands about jobs: job definitions and their sources
(SyncJobs, PutJob, RemoveJob, file claims and copies), conflicts between
nodes' definitions, pause and maintenance.

A part of the state machine (machine.py), which is one of these
classes each: the methods use its connection and one another."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Iterable

from . import planned as PLN
from . import commands as C
from . import dependencies as deps
from . import run_events as RE
from . import pause_log
from . import queries as Q
from ..model.run import SELECT as SELECT_RUNS, Run
from ..errors import Refused
from .effects import Effect, JobSourceMoved, JobsChanged
from ..model.run_states import NOT_STARTED, sql_in
from .apply_common import CLAIM_TTL, ApplyBase, canon_text

if TYPE_CHECKING:
    from ..jobspec import JobSpec


def _sync_parts(cmd: C.SyncJobs) -> tuple[list[tuple[Any, ...]], list[str], list[tuple[Any, ...]],
                                           list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A SyncJobs command's lists, checked (it may come from a peer)."""
    def bad(what: str) -> Refused:
        return Refused(f"sync_jobs: {what}; run the same cronrd version on every node")
    puts, removes, files = cmd.puts, cmd.removes, cmd.files
    copies, claims = cmd.copies, cmd.claims
    if not all(isinstance(v, list) for v in (puts, removes, files, copies, claims)):
        raise bad("puts, removes, files, copies and claims must be lists")
    if not isinstance(cmd.release, bool):
        raise bad("release must be true or false")
    out_puts = []
    for p in puts:
        if not (isinstance(p, list) and len(p) == 4 and all(isinstance(v, str) for v in p[:3])
                and (p[3] is None or isinstance(p[3], str)) and p[0] and len(p[1]) == 64):
            raise bad("each put is [name, sha256 digest, source, definition or null]")
        out_puts.append(tuple(p))
    if not all(isinstance(n, str) and n for n in removes):
        raise bad("each remove is a job name")
    out_files = []
    for f in files:
        if not (isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
                and (f[1] is None or isinstance(f[1], str))
                and isinstance(f[2], int) and not isinstance(f[2], bool)):
            raise bad("each file is [path, digest or null, number of jobs]")
        out_files.append(tuple(f))
    for c in copies:
        if not (isinstance(c, list) and len(c) == 7 and all(isinstance(v, str) and v
                                                            for v in c[:4] + c[5:])
                and len(c[1]) == 64 and isinstance(c[4], int) and not isinstance(c[4], bool)
                and c[5] <= c[6]):
            raise bad("each copy is [path, digest, node, its path, number of jobs, first "
                      "job, last job]")
    for c in claims:
        if not (isinstance(c, list) and len(c) == 2 and all(isinstance(v, str) for v in c)
                and len(c[0]) == 64 and c[1]):
            raise bad("each claim is [digest, path]")
    if len({p[0] for p in out_puts} | set(removes)) != len(out_puts) + len(removes):
        raise bad("a job is named twice")
    return out_puts, list(removes), out_files, [tuple(c) for c in copies], \
        [tuple(c) for c in claims]

def conflict_text(name: str, rows: list[dict[str, Any]], in_force: str) -> str:
    """Which nodes disagree on a job, for `cronrd jobs` and the logs."""
    groups: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: r["node"]):
        groups.setdefault(r["digest"], []).append(r["node"] or "''")
    order = sorted(groups, key=lambda d: (d != in_force, groups[d]))

    def who(nodes: list[str]) -> str:
        return ("node " if len(nodes) == 1 else "nodes ") + ", ".join(nodes)

    first = groups[order[0]]
    return (f"{who(first)} define{'s' if len(first) == 1 else ''} job {name!r} differently "
            f"from {' and '.join(who(groups[d]) for d in order[1:])} (digests "
            f"{', '.join(d[:8] for d in order)}); make the job files identical on every "
            f"node (until then the version with digest {in_force[:8]} stays in force)")


class JobsApply(ApplyBase):
    """The jobs part of StateMachine."""

    def _job(self, name: str) -> dict[str, Any] | None:
        """The job's row (its definition as the digest of it, not decoded)."""
        for row in self.conn.execute(
                "SELECT name, digest, source, paused, cursor, conflict FROM jobs "
                "WHERE name=?", (name,)):
            return {"name": row[0], "digest": row[1], "source": row[2],
                    "paused": bool(row[3]), "cursor": row[4], "conflict": row[5]}
        return None


    def _job_spec(self, name: str) -> JobSpec | None:
        """The job's definition in force, decoded (None: no such job)."""
        return Q.job_spec(self.conn, name)


    def _need_job(self, name: str) -> dict[str, Any]:
        job = self._job(name)
        if job is None:
            raise Refused(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
        return job


    def _sources(self, name: str) -> list[dict[str, Any]]:
        """The job's definitions by node, most recently changed first."""
        return [{"node": r[0], "digest": r[1], "source": r[2], "updated_at": r[3]}
                for r in self.conn.execute(
                    "SELECT node, digest, source, updated_at FROM job_sources "
                    "WHERE name=? ORDER BY updated_at DESC, node", (name,))]


    def _keep_spec(self, name: str, digest: str, text: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO specs(name, digest, spec) VALUES(?, ?, ?)",
                          (name, digest, text))


    def _forget_specs(self, name: str, digests: Iterable[str]) -> None:
        """Drop the job's definitions nothing refers to any more (a
        definition lives while the job or a node's source names it)."""
        for digest in set(digests):
            self.conn.execute(
                "DELETE FROM specs WHERE name=?1 AND digest=?2 AND NOT EXISTS (SELECT 1 FROM "
                "jobs WHERE name=?1 AND digest=?2) AND NOT EXISTS (SELECT 1 FROM job_sources "
                "WHERE name=?1 AND digest=?2)", (name, digest))


    def _put_source(self, name: str, node: str, digest: str, source: str, at: float) -> str | None:
        """Record ``node``'s definition of a job; the digest it replaced, or
        "" for a new source, or None when it is unchanged."""
        old = None
        for (d, src) in self.conn.execute(
                "SELECT digest, source FROM job_sources WHERE name=? AND node=?", (name, node)):
            if (d, src) == (digest, source):
                return None
            old = d
        self.conn.execute(
            "INSERT INTO job_sources(name, node, digest, source, updated_at) VALUES(?,?,?,?,?) "
            "ON CONFLICT(name, node) DO UPDATE SET digest=excluded.digest, "
            "source=excluded.source, updated_at=excluded.updated_at",
            (name, node, digest, source, at))
        return old or ""


    def _unrecord(self, node: str, paths: Iterable[str]) -> None:
        """Forget the records of a node's files whose jobs changed (a record
        says which jobs a file's bytes define; another node may copy them)."""
        for path in sorted(paths):
            self.conn.execute("DELETE FROM source_files WHERE node=? AND path=?", (node, path))


    def _sources_of(self, name: str, node: str) -> set[str]:
        return {src for (src,) in self.conn.execute(
            "SELECT source FROM job_sources WHERE name=? AND node=?", (name, node))}


    def _apply_put_job(self, index: int, cmd: C.PutJob, effects: list[Effect]) -> dict[str, Any]:
        """One job of one node (the form of earlier versions; SyncJobs is the bulk one)."""
        self._unrecord(cmd.node, self._sources_of(cmd.name, cmd.node) | {cmd.source})
        self._keep_spec(cmd.name, cmd.digest, canon_text(cmd.spec))
        old = self._put_source(cmd.name, cmd.node, cmd.digest, cmd.source, cmd.at)
        changed, created = self._reconcile(cmd.name, cmd.at, effects)
        if old:
            self._forget_specs(cmd.name, [old])
        if old is None and not changed:
            return {"changed": False}
        job = self._job(cmd.name)
        assert job is not None  # it has the source just put
        return {"changed": True, "created": created, "conflict": job["conflict"]}


    def _apply_remove_job(self, index: int, cmd: C.RemoveJob, effects: list[Effect]) -> dict[str, Any]:
        gone = [d for (d,) in self.conn.execute(
            "SELECT digest FROM job_sources WHERE name=? AND node=?", (cmd.name, cmd.node))]
        if not gone:
            self._need_job(cmd.name)
        self._unrecord(cmd.node, self._sources_of(cmd.name, cmd.node))
        self.conn.execute("DELETE FROM job_sources WHERE name=? AND node=?",
                          (cmd.name, cmd.node))
        self._reconcile(cmd.name, cmd.at, effects)
        self._forget_specs(cmd.name, gone)
        return {"removed": cmd.name, "sources_left": len(self._sources(cmd.name))}


    def _apply_sync_jobs(self, index: int, cmd: C.SyncJobs, effects: list[Effect]) -> dict[str, Any]:
        """A node's job files in bulk: its new and changed definitions
        (``puts``), the jobs its files no longer define (``removes``), and
        the files these complete (``files``, recorded only when every put
        applied). A put without the definition's text names a definition
        the state holds already (another node's identical file); if it is
        gone meanwhile, the put is left out and named in ``need_spec``: the
        node sends it again with the text.

        A copy is the puts of another node's recorded file with the same
        digest, read from the state; one that does not check out (that
        record is gone or changed, or names a job twice) is left out and
        named in ``copy_refused``: the node parses its file. A claim another
        node holds is named in ``claimed_by``. A file whose jobs change here
        loses its record (its record says what its jobs are: another node
        may copy them) unless this command records it again."""
        puts, removes, files, copies, claims = _sync_parts(cmd)
        for name, digest, source, text in puts:
            if text is not None and hashlib.sha256(text.encode()).hexdigest() != digest:
                raise Refused(f"sync_jobs: job {name!r}: its digest is not the sha256 of "
                              "its definition; run the same cronrd version on every node")
        claimed_by = self._claim_files(cmd.node, cmd.at, claims)
        touched: set[str] = set()  # this node's files whose jobs change here
        copy_refused, changed = self._apply_copies(cmd.node, cmd.at, copies, puts, removes,
                                                   effects, touched)
        # What the state has of these jobs, in three queries (not six per job).
        names = json.dumps([p[0] for p in puts])
        in_list = "name IN (SELECT value FROM json_each(?))"
        jobs = {n: (d, src, c) for n, d, src, c in self.conn.execute(
            f"SELECT name, digest, source, conflict FROM jobs WHERE {in_list}", (names,))}
        mine = {n: (d, src) for n, d, src in self.conn.execute(
            f"SELECT name, digest, source FROM job_sources WHERE node=? AND {in_list}",
            (cmd.node, names))}
        known = {(n, d) for n, d in self.conn.execute(
            f"SELECT name, digest FROM specs WHERE {in_list}", (names,))} if any(
            p[3] is None for p in puts) else set()
        latest = dict(self.conn.execute(
            f"SELECT name, MAX(updated_at) FROM job_sources WHERE {in_list} GROUP BY name",
            (names,)))
        need, created, fresh, agreeing, moved = [], 0, [], [], []
        for name, digest, source, text in puts:
            if text is None and (name, digest) not in known:
                need.append(name)
                continue
            before = mine.get(name)
            if before == (digest, source):
                continue  # unchanged
            touched.add(source)
            if before is not None:
                touched.add(before[1])
            job = jobs.get(name)
            if job is None:
                # A new job (a job exists while any node has a source of it):
                # this is its only source and its definition is agreed.
                fresh.append((name, digest, source, text))
                effects.append(JobsChanged(job=name))
                continue
            if name not in mine and job[0] == digest and job[2] is None \
                    and cmd.at != latest.get(name):
                # Another node's identical definition of a job all agree on
                # (a cluster's common case): one more source. As _reconcile
                # has it, the newest source names the job's file.
                agreeing.append((name, cmd.node, digest, source, cmd.at))
                if cmd.at > latest.get(name, cmd.at) and job[1] != source:
                    moved.append((source, cmd.at, name))
                    # Only the file it is read from: nothing to schedule anew
                    # (a refresh per job per node held a leader for seconds
                    # when nodes keep the same jobs under different paths).
                    effects.append(JobSourceMoved(job=name))
                    changed += 1
                continue
            if text is not None:
                self._keep_spec(name, digest, text)
            old = self._put_source(name, cmd.node, digest, source, cmd.at)
            if old is None:
                continue
            ch, cr = self._reconcile(name, cmd.at, effects)
            changed += ch
            created += cr
            if old:
                self._forget_specs(name, [old])
        if agreeing:
            self.conn.executemany(
                "INSERT INTO job_sources(name, node, digest, source, updated_at) "
                "VALUES(?,?,?,?,?)", agreeing)
            self.conn.executemany("UPDATE jobs SET source=?, updated_at=? WHERE name=?", moved)
        if fresh:
            # A new job starts fresh: fire times before it existed are not missed.
            self.conn.executemany("INSERT OR IGNORE INTO specs(name, digest, spec) VALUES(?,?,?)",
                                  [(n, d, t) for n, d, _src, t in fresh if t is not None])
            self.conn.executemany(
                "INSERT INTO job_sources(name, node, digest, source, updated_at) "
                "VALUES(?,?,?,?,?)", [(n, cmd.node, d, src, cmd.at) for n, d, src, _t in fresh])
            self.conn.executemany(
                "INSERT INTO jobs(name, digest, source, paused, cursor, created_at, updated_at) "
                "VALUES(?,?,?,0,?,?,?)",
                [(n, d, src, int(cmd.at), cmd.at, cmd.at) for n, d, src, _t in fresh])
            for n, _d, _src, t in fresh:
                if t is None or '"depends_on"' in t:
                    deps.sync_parents(self, n)
            changed += len(fresh)
            created += len(fresh)
        removed = 0
        for name in removes:
            rows = list(self.conn.execute(
                "SELECT digest, source FROM job_sources WHERE name=? AND node=?",
                (name, cmd.node)))
            touched.update(src for _d, src in rows)
            gone = [d for d, _src in rows]
            self.conn.execute("DELETE FROM job_sources WHERE name=? AND node=?",
                              (name, cmd.node))
            if gone:
                removed += 1
                changed += self._reconcile(name, cmd.at, effects)[0]
                self._forget_specs(name, gone)
        if need or copy_refused:  # the files are not all in: record none of them
            files = [f for f in files if f[1] is None]
        self._unrecord(cmd.node, touched - {f[0] for f in files})
        for path, digest, count in files:
            if digest is None:
                self.conn.execute("DELETE FROM source_files WHERE node=? AND path=?",
                                  (cmd.node, path))
            else:
                self.conn.execute(
                    "INSERT INTO source_files(node, path, digest, jobs, updated_at) "
                    "VALUES(?,?,?,?,?) ON CONFLICT(node, path) DO UPDATE SET "
                    "digest=excluded.digest, jobs=excluded.jobs, "
                    "updated_at=excluded.updated_at",
                    (cmd.node, path, digest, count, cmd.at))
        if cmd.release:
            self.conn.execute("DELETE FROM file_claims WHERE node=?", (cmd.node,))
        return {"changed": changed, "created": created, "removed": removed,
                **({"need_spec": need} if need else {}),
                **({"copy_refused": copy_refused} if copy_refused else {}),
                **({"claimed_by": claimed_by} if claimed_by else {})}


    def _claim_files(self, node: str, at: float, claims: list[tuple[Any, ...]]) -> dict[str, str]:
        """Take the claims no other node holds (or held longer than
        CLAIM_TTL ago: it died or stalled); those another holds, by digest."""
        held: dict[str, str] = {}
        for digest, path in claims:
            row = next(iter(self.conn.execute(
                "SELECT node, at FROM file_claims WHERE digest=?", (digest,))), None)
            if row is not None and row[0] != node and at - row[1] <= CLAIM_TTL:
                held[digest] = row[0]
                continue
            self.conn.execute(
                "INSERT INTO file_claims(digest, node, path, at) VALUES(?,?,?,?) "
                "ON CONFLICT(digest) DO UPDATE SET node=excluded.node, path=excluded.path, "
                "at=excluded.at", (digest, node, path, at))
        return held


    def _apply_copies(self, node: str, at: float, copies: list[tuple[Any, ...]],
                      puts: list[tuple[Any, ...]], removes: list[str], effects: list[Effect],
                      touched: set[str]) -> tuple[list[str], int]:
        """Each copy: the jobs another node's record of a file with the same
        digest says it defines, those named ``first`` to ``last`` (a big
        file is copied in parts, each a bounded amount of work), become this
        node's, from ``path``. The common
        case (none of them this node's yet, each agreed on by every source,
        this command the newest source of each) is a few statements over the
        whole file; any other becomes puts (appended to ``puts``) that take
        the path each put takes. Returns the paths of the copies that do not
        check out, and how many jobs changed."""
        refused: list[str] = []
        changed = 0
        named = {p[0] for p in puts} | set(removes)
        for path, digest, frm, frm_path, count, first, last in copies:
            record = next(iter(self.conn.execute(
                "SELECT digest, jobs FROM source_files WHERE node=? AND path=?",
                (frm, frm_path))), None)
            # their jobs in the part: ?1 their node, ?2 their path, ?3 first, ?4 last
            part = "m.node=?1 AND m.source=?2 AND m.name BETWEEN ?3 AND ?4"
            args = (frm, frm_path, first, last)
            names = [] if record != (digest, count) or frm == node else [n for (n,) in (
                self.conn.execute(f"SELECT m.name FROM job_sources m WHERE {part}", args))]
            if record != (digest, count) or frm == node or not names \
                    or not named.isdisjoint(names):
                refused.append(path)
                continue
            named.update(names)
            touched.add(path)
            simple = next(iter(self.conn.execute(
                "SELECT count(*) FROM job_sources m JOIN jobs j ON j.name = m.name "
                f"WHERE {part} AND j.digest = m.digest AND j.conflict IS NULL AND NOT EXISTS "
                "(SELECT 1 FROM job_sources s WHERE s.name = m.name AND (s.node = ?5 OR "
                "s.updated_at >= ?6))", args + (node, at))))[0] == len(names)
            if not simple:
                puts.extend((name, d, path, None) for name, d in self.conn.execute(
                    f"SELECT m.name, m.digest FROM job_sources m WHERE {part}", args))
                continue
            # As a put of each: one more source of an agreed job; the newest
            # source names the job's file.
            for (name,) in self.conn.execute(
                    "UPDATE jobs SET source=?5, updated_at=?6 WHERE name IN (SELECT m.name "
                    f"FROM job_sources m WHERE {part}) AND source != ?5 RETURNING name",
                    args + (path, at)):
                effects.append(JobSourceMoved(job=name))
                changed += 1
            self.conn.execute(
                "INSERT INTO job_sources(name, node, digest, source, updated_at) "
                f"SELECT m.name, ?5, m.digest, ?6, ?7 FROM job_sources m WHERE {part}",
                args + (node, path, at))
        return refused, changed


    def _reconcile(self, name: str, at: float, effects: list[Effect]) -> tuple[bool, bool]:
        """Derive the job's effective row from its sources: the definition they
        all agree on, or, while they disagree, the last agreed one with the
        conflict spelled out. No source left: the job goes. (changed, created)"""
        rows, job = self._sources(name), self._job(name)
        if not rows:
            if job is not None:
                self._delete_job(name, at, effects)
            return job is not None, False
        agreed = rows[0] if len({r["digest"] for r in rows}) == 1 else None
        created = job is None
        if job is None:
            # A new job starts fresh: fire times before it existed are not missed.
            first = agreed or min(rows, key=lambda r: (r["updated_at"], r["node"]))
            self.conn.execute(
                "INSERT INTO jobs(name, digest, source, paused, cursor, created_at,"
                " updated_at) VALUES(?,?,?,0,?,?,?)",
                (name, first["digest"], first["source"], int(at), at, at))
            job = {"digest": first["digest"], "source": first["source"], "conflict": None}
        changed = created
        if created:
            deps.sync_parents(self, name)
        if agreed is not None and (agreed["digest"], agreed["source"]) != (job["digest"],
                                                                         job["source"]):
            self.conn.execute("UPDATE jobs SET digest=?, source=?, updated_at=? WHERE name=?",
                              (agreed["digest"], agreed["source"], at, name))
            changed = True
            if agreed["digest"] != job["digest"]:
                self._forget_specs(name, [job["digest"]])
                deps.sync_parents(self, name)
                spec = self._job_spec(name)
                if spec is not None and not spec.enabled:
                    self._skip_committed_ahead(name, at, "disabled: enabled is false in the "
                                               "job file", effects)
                if spec is not None and spec.concurrency != "queue":
                    self._queue_dissolve(name, at, spec.concurrency, effects)
        conflict = None if agreed is not None else conflict_text(name, rows, job["digest"])
        if conflict != job["conflict"]:
            self.conn.execute("UPDATE jobs SET conflict=? WHERE name=?", (conflict, name))
            changed = True
        if changed:
            effects.append(JobsChanged(job=name))
        return changed, created


    def _delete_job(self, name: str, at: float, effects: list[Effect]) -> None:
        job = self._job(name)
        assert job is not None  # only a job that exists is deleted
        digest = job["digest"]
        spec = self._job_spec(name)
        watch = spec is not None and spec.watch is not None
        self.conn.execute("DELETE FROM jobs WHERE name=?", (name,))
        self.conn.execute("DELETE FROM pauses WHERE name=?", (name,))
        PLN.remove_job(self.conn, name)  # its planned runs (none before version 2)
        RE.forget(self.conn, name)  # a job of this name made again starts afresh
        self._forget_specs(name, [digest])
        deps.sync_parents(self, name)
        # Runs not yet started will never start; running ones finish.
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE job=? AND state IN "
                f"{sql_in(NOT_STARTED)} ORDER BY run_id", (name,))):
            self._finish(Run.from_row(row), "cancelled", at,
                         reason="job removed before the run started", effects=effects)
        if watch:   # a watch's run that a start ping began waits for nothing now
            for row in list(self.conn.execute(
                    f"{SELECT_RUNS} WHERE job=? AND state='running' ORDER BY run_id", (name,))):
                self._finish(Run.from_row(row), "cancelled", at,
                             reason="watch removed while it waited for its end ping",
                             effects=effects)
        effects.append(JobsChanged(job=name))


    def _apply_set_paused(self, index: int, cmd: C.SetPaused, effects: list[Effect]) -> dict[str, Any]:
        if cmd.name == "":
            return self._set_maintenance(cmd, effects)
        job = self._need_job(cmd.name)
        pause_log.record(self.conn, cmd.name, cmd.paused, cmd.note, cmd.by, cmd.at)
        if cmd.paused:
            self.conn.execute("INSERT OR REPLACE INTO pauses(name, note, by, at) "
                              "VALUES(?,?,?,?)", (cmd.name, str(cmd.note), str(cmd.by),
                                                  cmd.at))
        else:
            self.conn.execute("DELETE FROM pauses WHERE name=?", (cmd.name,))
        if job["paused"] == cmd.paused:
            return {"changed": False, "paused": cmd.paused}
        self.conn.execute("UPDATE jobs SET paused=?, updated_at=? WHERE name=?",
                          (int(cmd.paused), cmd.at, cmd.name))
        if cmd.paused:
            self._skip_committed_ahead(cmd.name, cmd.at, "paused: `cronrd resume` "
                                       "re-enables the job", effects)
        effects.append(JobsChanged(job=cmd.name))
        return {"changed": True, "paused": cmd.paused}


    def _set_maintenance(self, cmd: C.SetPaused, effects: list[Effect]) -> dict[str, Any]:
        """`pause --all`: every fire time is recorded skipped until `resume
        --all`; the jobs' own paused flags are left as they are."""
        was = self._maintenance() is not None
        pause_log.record(self.conn, "", cmd.paused, cmd.note, cmd.by, cmd.at)
        if not cmd.paused:
            self.conn.execute("DELETE FROM pauses WHERE name=''")
            return {"changed": was, "paused": False}
        self.conn.execute("INSERT OR REPLACE INTO pauses(name, note, by, at) VALUES('',?,?,?)",
                          (str(cmd.note), str(cmd.by), cmd.at))
        if not was:
            reason = self._maintenance_reason()
            assert reason is not None  # the maintenance pause was just recorded
            for (name,) in list(self.conn.execute(
                    "SELECT DISTINCT job FROM runs WHERE state='assigned' AND "
                    "kind IN ('scheduled','catchup') AND due_at > ?", (cmd.at,))):
                self._skip_committed_ahead(name, cmd.at, reason, effects)
        return {"changed": not was, "paused": True}


    def _maintenance(self) -> tuple[str, str] | None:
        """(note, by) of the maintenance pause of every job, if one is on."""
        for note, by in self.conn.execute("SELECT note, by FROM pauses WHERE name=''"):
            return note, by
        return None


    def _maintenance_reason(self) -> str | None:
        m = self._maintenance()
        if m is None:
            return None
        note, by = m
        return (f"maintenance pause of every job{' by ' + by if by else ''}"
                f"{': ' + note if note else ''}; `cronrd resume --all` ends it")


    def _skip_committed_ahead(self, job: str, at: float, reason: str, effects: list[Effect]) -> None:
        """Scheduled fires committed ahead whose time has not come yet follow a
        pause or a disable at once (their waiting process is stopped)."""
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE job=? AND state='assigned'"
                " AND kind IN ('scheduled','catchup') AND due_at > ?", (job, at))):
            self._finish(Run.from_row(row), "skipped", at, reason=reason, effects=effects)

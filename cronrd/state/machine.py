"""The replicated state machine: ``apply(index, command)`` over SQLite.

``apply`` is deterministic: it reads only the command and the current state
(no clock, no randomness, no node-local facts), so every node that applies
the same committed commands holds the same database. It returns the
command's result and a list of *effects*: facts about what changed that the
runtime on each node reacts to (a run assigned to this node, a cancel
request), never side effects performed here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import apsw

from ..decisions import overlap
from ..errors import StateError
from ..schedule import iso_utc, retry_delay
from . import backfill as BF
from . import checkpoints as CK
from . import commands as C
from . import dependencies as deps
from . import alerts as AL
from . import downstream as DS
from . import seq as SEQ
from . import events as EV
from . import run_events as RE
from . import deliveries as DL
from . import pause_log
from . import tokens
from . import node_drains
from . import pools as PL
from . import start_deadline as SD
from . import queries as Q
from . import queue as QU
from . import run_params as RP
from ..model.run import SELECT as SELECT_RUNS, Run
from ..errors import Refused
from .effects import Effect
from ..model.run_states import ACTIVE, NOT_STARTED, REPORTABLE, TRANSITIONS, sql_in
from .schema import (ADDED_COLUMNS, NODE_STATES, SCHEMA, SCHEMA_VERSION, SEED_JOB_OUTCOMES,
                     SEED_JOB_HISTOGRAMS, SEED_NOTIFY_OUTCOMES,
                     UPGRADE_FROM_V1,
                     UPGRADE_TO_V5, UPGRADE_TO_V6)


PRUNE_BATCH = 50_000  # run records one Prune deletes by count at most
CLAIM_TTL = 60.0      # seconds another node's claim on a job file's digest holds


def canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def canon_text(spec: dict) -> str:
    """A job definition's stored text: the JSON its digest is the sha256 of
    (``JobSpec.canonical``)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sync_parts(cmd) -> tuple[list, list, list, list, list]:
    """A SyncJobs command's lists, checked (it may come from a peer)."""
    def bad(what: str):
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


# Every replicated table (all but meta) and the order full_digest reads it in.
DIGEST_TABLES = (
    ("jobs", "name"), ("specs", "name, digest"),
    ("job_sources", "name, node"), ("source_files", "node, path"),
    ("file_claims", "digest"), ("job_deps", "parent, child"),
    ("dep_cursors", "child, parent"),
    ("run_lineage", "run_id, parent_job"),
    ("nodes", "node"), ("runs", "run_id"), ("gaps", "gap_id"),
    ("late_reports", "report_id"), ("audit", "audit_id"),
    ("denied", "kind, value"), ("join_tokens", "node"),
    ("backfills", "id"), ("backfill_items", "backfill, fire_time"),
    ("downstream_items", "root, job, fire_time"),
    ("events", "event_id"), ("alerts", "alert_id"),
    ("dead_letter", "run_id"),
    ("downstream_edges", "root, parent_job, parent_fire_time, child_job, child_fire_time"),
    ("pause_log", "event_id"),
    ("run_params", "run_id"), ("run_keys", "job, key"), ("run_retries", "run_id"),
    ("run_queue", "run_id"),
    ("failing_jobs", "job, target"),
    ("deliveries", "event_id, notifier, attempt"),
    ("pools", "name"), ("pool_runs", "run_id"),
    ("run_heartbeats", "run_id"),
    ("checkpoints", "job, origin, fire_time, target"),
    ("job_outcomes", "job, origin, outcome, reason"),
    ("job_histograms", "job, metric"),
    ("notify_outcomes", "notifier, outcome"),
    ("api_tokens", "name"),
    ("pauses", "name"),
    ("node_drains", "node"),
)


class StateMachine:
    def __init__(self, conn: apsw.Connection, node_id: str = ""):
        """``node_id`` is used only to upgrade a version 1 database, whose jobs
        all came from this node's jobs_dir."""
        self.conn = conn
        self.node_id = node_id
        self.migrate()

    def migrate(self) -> None:
        """Bring the database to this version's schema (at start, and after
        a snapshot from the leader replaced it: a snapshot file written
        before an upgrade has the older schema)."""
        conn = self.conn
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value)")
            version = self._meta("schema_version")
            version = None if version is None else int(version)
            if version is not None and version > SCHEMA_VERSION:
                raise StateError(f"the state database has schema version {version}, newer "
                                 f"than this cronrd knows ({SCHEMA_VERSION}); upgrade cronrd")
            if version == 1:
                conn.execute(UPGRADE_FROM_V1)
                # each job gets a source row: this node's file
                conn.execute("CREATE TABLE job_sources(name TEXT NOT NULL, node TEXT NOT NULL, "
                             "spec TEXT NOT NULL, digest TEXT NOT NULL, source TEXT NOT NULL, "
                             "updated_at REAL NOT NULL, PRIMARY KEY(name, node))")
                conn.execute("INSERT INTO job_sources(name, node, spec, digest, source, "
                             "updated_at) SELECT name, ?, spec, digest, source, "
                             "updated_at FROM jobs", (self.node_id,))
            if version is not None and version < 5:
                have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
                for column, sql in UPGRADE_TO_V5:
                    if have and column not in have:
                        conn.execute(sql)
            if version is not None and version < 6 and "spec" in {
                    row[1] for row in conn.execute("PRAGMA table_info(job_sources)")}:
                conn.execute(UPGRADE_TO_V6)
            for (sql,) in list(conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type='index' AND name='runs_active'")):
                if "'waiting'" not in (sql or ""):  # made before the waiting state: remade
                    conn.execute("DROP INDEX runs_active")
            have = {name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            seed = version is not None and "job_outcomes" not in have
            conn.execute(SCHEMA)
            if seed:
                conn.execute(SEED_JOB_OUTCOMES)
            if version is not None and "job_histograms" not in have:
                for sql in SEED_JOB_HISTOGRAMS:
                    conn.execute(sql)
            if version is not None and "notify_outcomes" not in have:
                conn.execute(SEED_NOTIFY_OUTCOMES)
            for table, column, sql in ADDED_COLUMNS:
                if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(sql)
            if version is None:
                self._set_meta("schema_version", SCHEMA_VERSION)
                self._set_meta("applied_index", 0)
            elif version < SCHEMA_VERSION:
                self._set_meta("schema_version", SCHEMA_VERSION)

    # -- meta ---------------------------------------------------------------
    def _meta(self, key: str) -> Any:
        for (value,) in self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)):
            return value
        return None

    def _set_meta(self, key: str, value: Any) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    @property
    def applied_index(self) -> int:
        """A query on this machine's connection: the critical loop's (a
        reader on another thread asks its own: queries.applied_index)."""
        return Q.applied_index(self.conn)

    # -- apply ----------------------------------------------------------------
    def apply(self, index: int, cmd: C.Command, raw: bytes | None = None
              ) -> tuple[Any, list[Effect]]:
        """Apply one committed command at log ``index`` (``raw``: its bytes
        in the log, when it came from there: hashed as they are, not encoded
        again).

        Must run inside a transaction owned by the caller. A refused command
        changes nothing but the applied index and raises ``Refused``.
        """
        if index <= self.applied_index:
            raise StateError(f"command at index {index} was already applied "
                             f"(applied index {self.applied_index})")
        effects: list[Effect] = []
        handler = getattr(self, "_apply_" + cmd.op)
        outcome = "refused"
        try:
            with self.conn:  # savepoint: a refusal rolls back only this command
                result = handler(index, cmd, effects)
                # A run that went to wait for its pool's slots (state/pools.py)
                # is neither placed nor to be placed.
                effects[:] = [e for e in effects if not (
                    e.kind in ("assign", "pending") and e.run is not None
                    and e.run.state == "waiting")]
            outcome = json.dumps(result, sort_keys=True, separators=(",", ":"))
        finally:
            self._set_meta("applied_index", index)
            self._chain(index, raw if raw is not None else cmd.encode(), outcome)
        return result, effects

    def skip_undecodable(self, index: int, data: bytes) -> None:
        """An entry at ``index`` that does not decode: it changes nothing but
        the applied index and the digest (which folds in its bytes), alike on
        every node. Inside the caller's transaction, like ``apply``."""
        self._set_meta("applied_index", index)
        self._chain(index, data, "undecodable")

    def _chain(self, index: int, data: bytes, outcome: str) -> None:
        """Fold this command into the running state digest.

        The state is a deterministic function of the applied commands, so a
        hash chained over (index, command, outcome) identifies the state at
        ``applied_index`` in O(1) per command: equal on every node at the
        same index, different as soon as two nodes diverge. It lives in the
        database, so a snapshot carries it.
        """
        h = hashlib.sha256((self._meta("chain") or "").encode())
        h.update(f"{index}\0".encode())
        h.update(data)
        h.update(outcome.encode())
        self._set_meta("chain", h.hexdigest())

    @property
    def state_digest(self) -> str:
        return self._meta("chain") or hashlib.sha256(b"").hexdigest()

    # -- jobs ---------------------------------------------------------------
    def _job(self, name: str) -> dict | None:
        """The job's row (its definition as the digest of it, not decoded)."""
        for row in self.conn.execute(
                "SELECT name, digest, source, paused, cursor, conflict FROM jobs "
                "WHERE name=?", (name,)):
            return {"name": row[0], "digest": row[1], "source": row[2],
                    "paused": bool(row[3]), "cursor": row[4], "conflict": row[5]}
        return None

    def _job_spec(self, name: str):
        """The job's definition in force, decoded (None: no such job)."""
        return Q.job_spec(self.conn, name)

    def _need_job(self, name: str) -> dict:
        job = self._job(name)
        if job is None:
            raise Refused(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
        return job

    def _sources(self, name: str) -> list[dict]:
        """The job's definitions by node, most recently changed first."""
        return [{"node": r[0], "digest": r[1], "source": r[2], "updated_at": r[3]}
                for r in self.conn.execute(
                    "SELECT node, digest, source, updated_at FROM job_sources "
                    "WHERE name=? ORDER BY updated_at DESC, node", (name,))]

    def _keep_spec(self, name: str, digest: str, text: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO specs(name, digest, spec) VALUES(?, ?, ?)",
                          (name, digest, text))

    def _forget_specs(self, name: str, digests) -> None:
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

    def _unrecord(self, node: str, paths) -> None:
        """Forget the records of a node's files whose jobs changed (a record
        says which jobs a file's bytes define; another node may copy them)."""
        for path in sorted(paths):
            self.conn.execute("DELETE FROM source_files WHERE node=? AND path=?", (node, path))

    def _sources_of(self, name: str, node: str) -> set[str]:
        return {src for (src,) in self.conn.execute(
            "SELECT source FROM job_sources WHERE name=? AND node=?", (name, node))}

    def _apply_put_job(self, index, cmd: C.PutJob, effects):
        """One job of one node (the form of earlier versions; SyncJobs is the bulk one)."""
        self._unrecord(cmd.node, self._sources_of(cmd.name, cmd.node) | {cmd.source})
        self._keep_spec(cmd.name, cmd.digest, canon_text(cmd.spec))
        old = self._put_source(cmd.name, cmd.node, cmd.digest, cmd.source, cmd.at)
        changed, created = self._reconcile(cmd.name, cmd.at, effects)
        if old:
            self._forget_specs(cmd.name, [old])
        if old is None and not changed:
            return {"changed": False}
        return {"changed": True, "created": created, "conflict": self._job(cmd.name)["conflict"]}

    def _apply_remove_job(self, index, cmd: C.RemoveJob, effects):
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

    def _apply_sync_jobs(self, index, cmd: C.SyncJobs, effects):
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
                effects.append(Effect("jobs_changed", job=name))
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
                    effects.append(Effect("job_source_moved", job=name))
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

    def _claim_files(self, node: str, at: float, claims: list) -> dict[str, str]:
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

    def _apply_copies(self, node: str, at: float, copies: list, puts: list, removes: list,
                      effects: list, touched: set) -> tuple[list[str], int]:
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
                effects.append(Effect("job_source_moved", job=name))
                changed += 1
            self.conn.execute(
                "INSERT INTO job_sources(name, node, digest, source, updated_at) "
                f"SELECT m.name, ?5, m.digest, ?6, ?7 FROM job_sources m WHERE {part}",
                args + (node, path, at))
        return refused, changed

    def _reconcile(self, name: str, at: float, effects) -> tuple[bool, bool]:
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
        if created:
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
            effects.append(Effect("jobs_changed", job=name))
        return changed, created

    def _delete_job(self, name: str, at: float, effects) -> None:
        digest = self._job(name)["digest"]
        self.conn.execute("DELETE FROM jobs WHERE name=?", (name,))
        self.conn.execute("DELETE FROM pauses WHERE name=?", (name,))
        RE.forget(self.conn, name)  # a job of this name made again starts afresh
        self._forget_specs(name, [digest])
        deps.sync_parents(self, name)
        # Runs not yet started will never start; running ones finish.
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE job=? AND state IN "
                f"{sql_in(NOT_STARTED)} ORDER BY run_id", (name,))):
            self._finish(Run.from_row(row), "cancelled", at,
                         reason="job removed before the run started", effects=effects)
        effects.append(Effect("jobs_changed", job=name))

    def _apply_set_paused(self, index, cmd: C.SetPaused, effects):
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
        effects.append(Effect("jobs_changed", job=cmd.name))
        return {"changed": True, "paused": cmd.paused}

    def _set_maintenance(self, cmd: C.SetPaused, effects):
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

    def _skip_committed_ahead(self, job: str, at: float, reason: str, effects) -> None:
        """Scheduled fires committed ahead whose time has not come yet follow a
        pause or a disable at once (their waiting process is stopped)."""
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE job=? AND state='assigned'"
                " AND kind IN ('scheduled','catchup') AND due_at > ?", (job, at))):
            self._finish(Run.from_row(row), "skipped", at, reason=reason, effects=effects)

    # -- runs -----------------------------------------------------------------
    def _get_run(self, run_id: int) -> Run:
        for row in self.conn.execute(
                f"{SELECT_RUNS} WHERE run_id=?", (run_id,)):
            return Run.from_row(row)
        raise Refused(f"no run with id {run_id}; `cronrd runs` lists recent runs")

    def _active_runs(self, job: str) -> list[Run]:
        return [Run.from_row(r) for r in self.conn.execute(
            f"{SELECT_RUNS} WHERE job=? AND state IN "
            f"{sql_in(ACTIVE)} ORDER BY run_id", (job,))]

    def _insert_run(self, index: int, *, job: str, origin: str, kind: str,
                    fire_time: int, attempt: int, state: str, node: str | None,
                    due_at: float | None, at: float, reason: str | None = None,
                    target: str = "") -> Run:
        run_id = SEQ.peek(self.conn, "run_seq", "runs", "run_id")  # never one given before
        try:
            self.conn.execute(
                "INSERT INTO runs(run_id, job, origin, kind, fire_time, attempt, target, state,"
                " node, token, due_at, created_at, reason, assigned_at)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, job, origin, kind, fire_time, attempt, target, state, node,
                 index if state == "assigned" else None, due_at, at, reason,
                 at if state == "assigned" else None))
        except apsw.ConstraintError:
            raise Refused(f"a run record for job {job!r} at fire time {fire_time} "
                          f"attempt {attempt} already exists") from None
        SEQ.taken(self.conn, "run_seq", run_id)
        run = self._get_run(run_id)
        return self._pool_gate(run) if state in ("pending", "assigned") else run

    def _admit(self, index: int, job: dict, at: float, effects) -> str | None:
        """The overlap policy for a manual run: against runs already running
        (one assigned ahead of its fire time is decided at its own gate)."""
        active = {r.run_id: r for r in self._active_runs(job["name"])
                  if r.state == "running"}
        decision = overlap.decide(self._job_spec(job["name"]).concurrency,
                                  [overlap.Running(rid) for rid in active])
        for other in decision.replace:
            self._request_cancel(active[other.run_id], decision.reason, at, effects)
        return decision.skip

    def _request_cancel(self, run: Run, reason: str, at: float, effects) -> None:
        if run.state in NOT_STARTED:
            self._finish(run, "cancelled", at, reason=reason, effects=effects)
        else:
            self.conn.execute("UPDATE runs SET cancel_requested=1, reason=? WHERE run_id=?",
                              (reason, run.run_id))
            effects.append(Effect("cancel", run=self._get_run(run.run_id)))

    # -- concurrency: queue (state/queue.py) --------------------------------------------
    def _queue_hold(self, job: str, target: str, fire_time: int, spec=None,
                    bounded: bool = True) -> overlap.Decision | None:
        """None unless the job queues its runs; else may this one start now,
        must it wait, or is the queue full (overlap.hold; never, unless
        ``bounded``). ``spec``: the job's definition, if the caller has it."""
        spec = spec or self._job_spec(job)
        if spec is None or spec.concurrency != "queue":
            return None
        bound = spec.max_queued or overlap.DEFAULT_MAX_QUEUED
        return QU.hold(self.conn, job, target, fire_time,
                       bound if bounded else overlap.MAX_QUEUED_LIMIT + bound)

    def _enqueue(self, index: int, *, job: str, origin: str, kind: str, fire_time: int,
                 due_at: float, at: float, reason: str, target: str, attempt: int = 1) -> Run:
        """A run that waits in its job's queue (not placed: no node yet)."""
        run = self._insert_run(index, job=job, origin=origin, kind=kind,
                               fire_time=fire_time, attempt=attempt, state="waiting", node=None,
                               due_at=due_at, at=at, reason=reason, target=target)
        QU.enqueue(self.conn, run)
        QU.refresh_reasons(self.conn, job, target)  # one may have come before others
        return run

    def _stop_reason(self, job: dict) -> str | None:
        """Why the job may not start a run now (paused, maintenance, disabled)."""
        if job["paused"]:
            return "paused: `cronrd resume` re-enables the job"
        reason = self._maintenance_reason()
        if reason is None and not self._job_spec(job["name"]).enabled:
            reason = "disabled: enabled is false in the job file"
        return reason

    def _queue_after(self, run: Run, at: float, effects) -> None:
        """``run`` ended (at ``at``): if none of its job's runs is in flight
        any more, the first waiting one is released to pending, in this
        command (overlap.release); the others name the run now ahead."""
        QU.dequeue(self.conn, run.run_id)
        if not QU.has_queue(self.conn, run.job, run.target):
            return
        job = self._job(run.job)
        if job is None:
            return  # the job is going: its waiting runs are cancelled
        if not QU.in_flight(self.conn, run.job, run.target):
            spec = self._job_spec(run.job)
            waiting = {r.run_id: r for r in QU.queued(self.conn, run.job, run.target)}
            out = overlap.release(
                [overlap.Queued(r.run_id, r.fire_time if r.due_at is None else r.due_at)
                 for r in waiting.values()], at, spec.catchup_window, self._stop_reason(job))
            for run_id, why in out.skip:
                QU.dequeue(self.conn, run_id)
                self._finish(waiting[run_id], "skipped", at, reason=why, effects=effects,
                             release=False)
            if out.go is not None:
                QU.to_pending(self.conn, waiting[out.go], at,
                              f"waited in the queue until run {run.run_id} ended at "
                              f"{iso_utc(at)} (concurrency: queue)")
                effects.append(Effect("pending", run=self._pool_gate(self._get_run(out.go))))
        QU.refresh_reasons(self.conn, run.job, run.target)

    def _queue_dissolve(self, job: str, at: float, policy: str, effects) -> None:
        """The job no longer queues: its waiting runs are released at once,
        for its new policy to decide at their start."""
        for run in QU.all_queued(self.conn, job):
            QU.to_pending(self.conn, run, at, f"released from the queue: the job's "
                                              f"concurrency is now {policy}")
            effects.append(Effect("pending", run=self._pool_gate(self._get_run(run.run_id))))

    def _apply_fire(self, index, cmd: C.Fire, effects):
        job = self._need_job(cmd.job)
        if not cmd.boot:
            if cmd.fire_time <= job["cursor"] and not (
                    cmd.target and cmd.fire_time == job["cursor"]):
                raise Refused(f"fire time {cmd.fire_time} of job {cmd.job!r} was already "
                              f"handled (cursor {job['cursor']})")
            self.conn.execute("UPDATE jobs SET cursor=? WHERE name=?",
                              (cmd.fire_time, cmd.job))
        reason = cmd.skip_reason
        if reason is None and job["paused"]:
            reason = "paused: `cronrd resume` re-enables the job"
        if reason is None:
            reason = self._maintenance_reason()
        spec = self._job_spec(cmd.job) if reason is None else None
        if spec is not None and not spec.enabled:
            reason = "disabled: enabled is false in the job file"
        if reason is None and not cmd.boot:
            reason = SD.fire_reason(cmd.fire_time, spec, cmd.at)
        # The overlap policy is applied by the executor at the fire time (a fire
        # is committed ahead of it), against the runs then running; but a
        # queued job's run waits here, behind the runs ahead of it.
        hold = None if reason is not None else self._queue_hold(cmd.job, cmd.target,
                                                                 cmd.fire_time, spec)
        if hold is not None and hold.skip is not None:
            reason = hold.skip
        if reason is not None:
            run = self._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                   fire_time=cmd.fire_time, attempt=1, state="skipped",
                                   node=None, due_at=None, at=cmd.at, reason=reason,
                                   target=cmd.target)
            self.conn.execute("UPDATE runs SET finished_at=? WHERE run_id=?",
                              (cmd.at, run.run_id))
            deps.parent_final(self, index, cmd.job, run.run_id, cmd.at, effects)
            return {"run_id": run.run_id, "state": "skipped", "reason": reason}
        if spec.depends_on:  # its gate, at its fire time
            return deps.scheduled_fire(self, index, cmd, spec, effects)
        if hold is not None and hold.wait is not None:
            run = self._enqueue(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                fire_time=cmd.fire_time, due_at=cmd.due_at, at=cmd.at,
                                reason=hold.wait, target=cmd.target)
            return {"run_id": run.run_id, "state": "waiting", "reason": hold.wait}
        run = self._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                               fire_time=cmd.fire_time, attempt=1, state="assigned",
                               node=cmd.node, due_at=cmd.due_at, at=cmd.at,
                               target=cmd.target)
        effects.append(Effect("assign", run=run))
        if run.state == "waiting":  # for its pool's slots
            return {"run_id": run.run_id, "state": "waiting", "reason": run.reason}
        return {"run_id": run.run_id, "state": "assigned"}

    def _apply_record_gap(self, index, cmd: C.RecordGap, effects):
        job = self._need_job(cmd.job)
        if cmd.first <= job["cursor"]:
            raise Refused(f"gap starting at {cmd.first} overlaps fire times of job "
                          f"{cmd.job!r} already handled (cursor {job['cursor']})")
        self.conn.execute(
            "INSERT INTO gaps(job, first, last, count, reason, created_at) VALUES(?,?,?,?,?,?)",
            (cmd.job, cmd.first, cmd.last, cmd.count, cmd.reason, cmd.at))
        self.conn.execute("UPDATE jobs SET cursor=? WHERE name=?", (cmd.last, cmd.job))
        return {"gap_id": self.conn.last_insert_rowid()}

    def _apply_manual_run(self, index, cmd: C.ManualRun, effects):
        job = self._need_job(cmd.job)
        problem = RP.params_problem(cmd.params) or (cmd.key and RP.key_problem(cmd.key))
        if problem:
            raise Refused(f"manual_run: {problem}")
        if cmd.key:
            existing = RP.run_of_key(self.conn, cmd.job, cmd.key)
            if existing is not None:  # the key's run: no second one
                run = self._get_run(existing)
                return {"run_id": run.run_id, "state": run.state.value, "existing": True}
        reason = self._admit(index, job, cmd.at, effects)
        if reason is not None:
            raise Refused(f"job {cmd.job!r} not started: {reason}; wait for the active run "
                          "to finish (`cronrd runs " + cmd.job + " --state running`)")
        hold = self._queue_hold(cmd.job, "", int(cmd.at))
        if hold is not None and hold.skip is not None:
            raise Refused(f"job {cmd.job!r} not started: {hold.skip}; wait for the queue to "
                          "drain (`cronrd runs " + cmd.job + " --state waiting`)")
        if hold is not None and hold.wait is not None:
            run = self._enqueue(index, job=cmd.job, origin="manual", kind="manual",
                                fire_time=int(cmd.at), due_at=cmd.at, at=cmd.at,
                                reason=hold.wait, target="")
            RP.record(self.conn, run.run_id, cmd.job, cmd.params, cmd.key)
            return {"run_id": run.run_id, "state": "waiting", "reason": hold.wait}
        # No node given (a cluster): the run waits, pending, for the leader to place it.
        state = "assigned" if cmd.node else "pending"
        run = self._insert_run(index, job=cmd.job, origin="manual", kind="manual",
                               fire_time=int(cmd.at), attempt=1, state=state,
                               node=cmd.node or None, due_at=cmd.at, at=cmd.at)
        RP.record(self.conn, run.run_id, cmd.job, cmd.params, cmd.key)
        effects.append(Effect("assign" if cmd.node else "pending", run=run))
        if run.state == "waiting":  # for its pool's slots
            return {"run_id": run.run_id, "state": "waiting", "reason": run.reason}
        return {"run_id": run.run_id, "state": state}

    def _apply_run_started(self, index, cmd: C.RunStarted, effects):
        run = self._get_run(cmd.run_id)
        if run.token != cmd.token or run.node != cmd.node:
            raise Refused(f"run {cmd.run_id}: start report from {cmd.node} with token "
                          f"{cmd.token} is stale (current token {run.token} on {run.node})")
        CK.record_start(self.conn, cmd.run_id, cmd.secret if isinstance(cmd.secret, str)
                        and len(cmd.secret) == CK.TOKEN_HASH_LEN else "")
        if run.pid == cmd.pid and run.started_at == cmd.started_at:
            # The same report again (a forwarded proposal retried after a timeout).
            return {"state": run.state.value, "duplicate": True,
                    "cancel": run.state == "running" and bool(run.cancel_requested)}
        if run.state != "assigned":
            # Cancelled while the process was being started: tell the node to stop it.
            self.conn.execute("UPDATE runs SET pid=?, started_at=?, log_path=? "
                              "WHERE run_id=?",
                              (cmd.pid, cmd.started_at, cmd.log_path, cmd.run_id))
            effects.append(Effect("cancel", run=self._get_run(cmd.run_id)))
            return {"state": run.state.value, "cancel": True}
        self.conn.execute(
            "UPDATE runs SET state='running', pid=?, started_at=?, log_path=?, "
            "claimed_at=COALESCE(claimed_at, ?) WHERE run_id=?",
            (cmd.pid, cmd.started_at, cmd.log_path, cmd.started_at, cmd.run_id))
        if QU.has_queue(self.conn, run.job, run.target):  # the runs behind it say so
            QU.refresh_reasons(self.conn, run.job, run.target)
        return {"state": "running", "cancel": bool(run.cancel_requested)}

    def _apply_run_finished(self, index, cmd: C.RunFinished, effects):
        if cmd.state not in REPORTABLE:
            raise Refused(f"run {cmd.run_id}: {cmd.state!r} is not a final state")
        run = self._get_run(cmd.run_id)
        if run.state == cmd.state and run.state not in TRANSITIONS and (
                run.token, run.node) == (cmd.token, cmd.node):
            # The same report again (a forwarded proposal retried after a timeout),
            # or the node's own word after the leader declared the run lost.
            out = {"state": run.state.value, "duplicate": True}
            if cmd.state == "lost" and cmd.not_started:
                out["retry_run_id"] = self._retry_never_started(index, run, cmd.finished_at,
                                                                effects)
            return out
        if (run.token, run.node, run.state.value) == (cmd.token, cmd.node, "lost") \
                and not cmd.not_started:
            # The node's own word on an attempt declared lost while it could
            # not report (dead, cut off): the record keeps "lost" (a retry
            # may have run meanwhile) but says what really happened there.
            self._late_word(run, cmd)
        elif cmd.not_started and cmd.state == "lost" and run.token != cmd.token:
            # Never started on a node that had lost the run already (moved):
            # nothing to keep.
            return {"state": run.state.value, "late": True}
        if run.token != cmd.token or run.state not in TRANSITIONS:
            # Stale attempt or already final: keep as history, do not overwrite.
            self.conn.execute(
                "INSERT INTO late_reports(run_id, node, token, state, exit_code, signal,"
                " finished_at, log_path, received_index) VALUES(?,?,?,?,?,?,?,?,?)",
                (cmd.run_id, cmd.node, cmd.token, cmd.state, cmd.exit_code, cmd.signal,
                 cmd.finished_at, cmd.log_path, index))
            return {"state": run.state.value, "late": True}
        if cmd.started_at is not None:
            self.conn.execute("UPDATE runs SET started_at=COALESCE(started_at, ?) "
                              "WHERE run_id=?", (cmd.started_at, cmd.run_id))
        if cmd.pid is not None:
            self.conn.execute("UPDATE runs SET pid=COALESCE(pid, ?) WHERE run_id=?",
                              (cmd.pid, cmd.run_id))
        retry = self._finish(run, cmd.state, cmd.finished_at, reason=cmd.reason,
                             exit_code=cmd.exit_code, signal=cmd.signal,
                             log_path=cmd.log_path, effects=effects, index=index,
                             not_started=cmd.not_started and cmd.state == "lost")
        return {"state": cmd.state, "retry_run_id": retry}

    def _late_word(self, run: Run, cmd: C.RunFinished) -> None:
        """Fill in a lost attempt from its node's late report: when it
        started, its pid, exit code and log, and a note saying so."""
        outcome = cmd.state if cmd.exit_code is None else f"{cmd.state} (exit {cmd.exit_code})"
        if cmd.signal is not None:
            outcome = f"{cmd.state} (signal {cmd.signal})"
        started = cmd.started_at is not None
        note = (f"node {cmd.node} reported later that it ran: {outcome}" if started else
                f"node {cmd.node} reported later: {outcome}")
        self.conn.execute(
            "UPDATE runs SET started_at=COALESCE(started_at, ?), pid=COALESCE(pid, ?), "
            "exit_code=COALESCE(exit_code, ?), signal=COALESCE(signal, ?), "
            "log_path=COALESCE(log_path, ?), reason=? WHERE run_id=?",
            (cmd.started_at, cmd.pid, cmd.exit_code, cmd.signal, cmd.log_path,
             run.reason if run.reason and run.reason.endswith(note) else
             f"{run.reason}; {note}" if run.reason else note, run.run_id))

    def _retry_never_started(self, index: int, run: Run, at: float, effects) -> int | None:
        """A run declared lost (node silent) whose node now says it never
        started: give it its next attempt if nothing else did (the policy may
        have kept a lost run from being retried; one that never ran is)."""
        if self._job(run.job) is None or self._has_next_attempt(run):
            return None
        hold = self._queue_hold(run.job, run.target, run.fire_time, bounded=False)
        if hold is not None and hold.wait is not None:
            # The queue moved on meanwhile: the attempt waits its turn (by
            # its fire time: at the head), full or not.
            new = self._enqueue(index, job=run.job, origin=run.origin, kind="retry",
                                fire_time=run.fire_time, attempt=run.attempt + 1,
                                due_at=max(at, run.due_at or at), at=at,
                                reason=hold.wait, target=run.target)
            self._link_retry(run, new)
            return new.run_id
        new = self._insert_run(index, job=run.job, origin=run.origin, kind="retry",
                               fire_time=run.fire_time, attempt=run.attempt + 1,
                               state="pending", node=None, due_at=max(at, run.due_at or at),
                               at=at,
                               target=run.target)
        self._link_retry(run, new)
        effects.append(Effect("pending", run=new))
        return new.run_id

    def _has_next_attempt(self, run: Run) -> bool:
        """Whether ``run`` was retried already (its record has its next
        attempt): by the link for any run; by the attempt number for a
        scheduled record (one per attempt) made before links were kept."""
        if any(self.conn.execute("SELECT 1 FROM run_retries WHERE run_id=?", (run.run_id,))):
            return True
        return run.origin == "schedule" and any(self.conn.execute(
            "SELECT 1 FROM runs WHERE job=? AND origin='schedule' AND fire_time=? AND "
            "target=? AND attempt=?", (run.job, run.fire_time, run.target, run.attempt + 1)))

    def _link_retry(self, run: Run, new: Run) -> None:
        """``new`` retries ``run``: it takes its parameters and key, and the
        link (`run-now --wait` follows it; run_retries)."""
        RP.carry(self.conn, run.run_id, new.run_id)
        self.conn.execute("INSERT INTO run_retries(run_id, retry_run_id) VALUES(?,?)",
                          (run.run_id, new.run_id))

    def _finish(self, run: Run, state: str, at: float, *, reason: str | None = None,
                exit_code: int | None = None, signal: int | None = None,
                log_path: str | None = None, effects, index: int | None = None,
                not_started: bool = False, release: bool = True) -> int | None:
        """``_end_run``; when no retry follows, the job's outcome for that
        fire time is final: its children's gates are looked at
        (state/dependencies.py). Then the job's queue moves on if this was
        the last of its runs in flight (concurrency: queue; not when
        ``release`` is false: the queue itself is being settled)."""
        retry = self._end_run(run, state, at, reason=reason, exit_code=exit_code,
                              signal=signal, log_path=log_path, effects=effects, index=index,
                              not_started=not_started)
        if retry is None:
            AL.on_final(self, run, at)
            deps.parent_final(self, index or 0, run.job, run.run_id, at, effects)
        if release:
            self._queue_after(run, at, effects)
        self._pool_after(run, at, effects)
        return retry

    def _apply_upstream_timeout(self, index, cmd: C.UpstreamTimeout, effects):
        run = self._get_run(cmd.run_id)
        if run.state != "waiting":
            raise Refused(f"run {cmd.run_id} is {run.state}, not waiting for its parents")
        if not deps.waits_for_upstream(self.conn, run.run_id):
            raise Refused(f"run {cmd.run_id} waits in its job's queue (concurrency: queue), "
                          "not for its parents")
        spec = self._job_spec(run.job)
        if spec is None:
            raise Refused(f"run {cmd.run_id}: job {run.job!r} is gone")
        if cmd.at < (run.due_at or 0) + spec.wait_for_upstream:
            raise Refused(f"run {cmd.run_id} waits for its parents until "
                          f"{(run.due_at or 0) + spec.wait_for_upstream} (wait_for_upstream)")
        state = deps.resolve_waiting(self, index, run, spec, cmd.at, effects, timed_out=True)
        return {"run_id": run.run_id, "state": state}

    def _end_run(self, run: Run, state: str, at: float, *, reason: str | None = None,
                 exit_code: int | None = None, signal: int | None = None,
                 log_path: str | None = None, effects, index: int | None = None,
                 not_started: bool = False) -> int | None:
        """Move ``run`` to a final state and schedule a retry if policy says so.

        A lost run its node says never started is retried whatever the
        policy: running it once is then neither a second run (at-most-once
        holds) nor optional (at-least-once needs it)."""
        if state not in TRANSITIONS.get(run.state, ()):
            raise Refused(f"run {run.run_id} cannot go from {run.state} to {state}")
        spec = None if index is None or run.cancel_requested else self._job_spec(run.job)
        no_retry = spec is not None and state == "lost" and spec.on_node_loss != "retry" \
            and not not_started
        if no_retry:
            note = f"not retried (on_node_loss: {spec.on_node_loss})"
            base = reason if reason is not None else run.reason
            reason = f"{base}; {note}" if base else note
        self.conn.execute(
            "UPDATE runs SET state=?, finished_at=?, exit_code=?, signal=?,"
            " log_path=COALESCE(?, log_path), reason=COALESCE(?, reason) WHERE run_id=?",
            (state, at, exit_code, signal, log_path, reason, run.run_id))
        effects.append(Effect("run_done", run=self._get_run(run.run_id)))
        if spec is None or no_retry:
            return None
        policy = spec.retries
        allowed = 1 + policy.max
        if state == "lost":
            allowed = max(allowed, 2)  # at-least-once: a lost run is retried
        elif state not in ("failed", "timed_out"):
            return None
        attempt = run.attempt + 1
        if self._has_next_attempt(run):  # another way gave the record its next attempt
            return None
        # The retries count from the attempt that began this try: a rerun (or
        # a dead-letter requeue) is attempt 2, 5, ... of its record and has
        # its own retries, and a lost one is run again like any other.
        if attempt - self._try_began(run) + 1 > allowed and not not_started:
            return None
        key = f"{run.job}/{run.fire_time}/{attempt}"
        delay = 0.0 if state == "lost" else retry_delay(
            attempt, policy.delay, policy.backoff, policy.max_delay, policy.jitter, key)
        # A lost run must run elsewhere: it waits, pending, for the leader to place
        # it; a failed one is retried where it ran.
        lost = state == "lost"
        new = self._insert_run(index, job=run.job, origin=run.origin, kind="retry",
                               fire_time=run.fire_time, attempt=attempt,
                               state="pending" if lost else "assigned",
                               # never before the attempt it replaces was due (one
                               # handed back before its fire time waits for it)
                               node=None if lost else run.node,
                               due_at=max(at + delay, run.due_at or at), at=at,
                               target=run.target)
        self._link_retry(run, new)
        effects.append(Effect("pending" if lost else "assign", run=new))
        RE.on_retry(self.conn, run.run_id, new.run_id, at)
        return new.run_id

    def _try_began(self, run: Run) -> int:
        """The attempt that began the try ``run`` belongs to: its own, or for
        a retry the newest earlier attempt of its record that was no retry."""
        if run.kind != "retry":
            return run.attempt
        for (first,) in self.conn.execute(
                "SELECT MAX(attempt) FROM runs WHERE job=? AND fire_time=? AND target=? "
                "AND origin=? AND attempt<? AND kind!='retry'",
                (run.job, run.fire_time, run.target, run.origin, run.attempt)):
            return first or 1
        return 1

    def _apply_cancel_run(self, index, cmd: C.CancelRun, effects):
        run = self._get_run(cmd.run_id)
        if run.state not in ACTIVE:
            raise Refused(f"run {cmd.run_id} is already {run.state}")
        self._request_cancel(run, cmd.reason, cmd.at, effects)
        return {"run_id": cmd.run_id}

    def _apply_assign_run(self, index, cmd: C.AssignRun, effects):
        run = self._get_run(cmd.run_id)
        if run.state != "pending":
            raise Refused(f"run {cmd.run_id} is {run.state}, not pending; only pending "
                          "runs are placed")
        why = PL.placed_check(self.conn, run, cmd.node)  # a node-scoped pool full there
        if why is not None:
            return {"run_id": cmd.run_id, "state": "waiting", "reason": why}
        self.conn.execute("UPDATE runs SET state='assigned', node=?, token=?, assigned_at=? "
                          "WHERE run_id=?", (cmd.node, index, cmd.at, cmd.run_id))
        run = self._get_run(cmd.run_id)
        effects.append(Effect("assign", run=run))
        return {"run_id": cmd.run_id, "state": "assigned", "node": cmd.node, "token": index}

    # -- claims: who starts a run is decided by the log --------------------------------
    def _apply_claim_runs(self, index, cmd: C.ClaimRuns, effects):
        """A node may start a run once its claim is committed: the run is
        assigned to it under the same token and nobody moved it first. A
        claim again is won again (a retried proposal)."""
        if not isinstance(cmd.at, (int, float)) or isinstance(cmd.at, bool):
            # A won claim must leave claimed_at set (ReplaceRuns moves only
            # runs without one): a claim with no time would be won and moved.
            raise Refused("claim_runs: at must be a number")
        won, lost = [], {}
        for run_id, token in _pairs(cmd.claims, 2, "claims"):
            run = Q.get_run(self.conn, run_id)
            if run is None:
                lost[str(run_id)] = "no such run"
            elif run.node != cmd.node or run.token != token:
                lost[str(run_id)] = (f"moved to node {run.node}" if run.state == "assigned"
                                     else f"no longer this node's attempt ({run.state})")
            elif run.state != "assigned":
                if run.claimed_at is not None and run.state == "running":
                    won.append(run_id)  # claimed, and started: a retried claim
                else:
                    lost[str(run_id)] = f"already {run.state}"
            else:
                if run.claimed_at is None:
                    self.conn.execute("UPDATE runs SET claimed_at=? WHERE run_id=?",
                                      (cmd.at, run_id))
                won.append(run_id)
        return {"won": won, "lost": lost}

    def _apply_replace_runs(self, index, cmd: C.ReplaceRuns, effects):
        """Move runs nobody claimed to other nodes (a new token: the old
        node's claim, if it still comes, loses). Claimed, moved or ended
        meanwhile: left alone."""
        moved, kept = [], []
        for run_id, token, node in _pairs(cmd.moves, 3, "moves"):
            run = Q.get_run(self.conn, run_id)
            if (run is None or run.state != "assigned" or run.token != token
                    or run.claimed_at is not None or run.target or not isinstance(node, str)
                    or not node or node == run.node or not PL.fits_on(self.conn, run_id, node)):
                kept.append(run_id)
                continue
            trail = ",".join(filter(None, [run.moved_from, run.node]))
            self.conn.execute("UPDATE runs SET node=?, token=?, assigned_at=?, moved_from=?, "
                              "reason=? WHERE run_id=?",
                              (node, index, cmd.at, trail,
                               f"moved from {run.node}: {cmd.reason}", run_id))
            effects.append(Effect("moved", run=run))
            effects.append(Effect("assign", run=self._get_run(run_id)))
            moved.append(run_id)
        return {"moved": moved, "kept": kept}

    # -- nodes ----------------------------------------------------------------
    def _apply_node_info(self, index, cmd: C.NodeInfo, effects):
        if cmd.state not in NODE_STATES:
            raise Refused(f"node {cmd.node}: state {cmd.state!r} is not one of "
                          f"{', '.join(NODE_STATES)}")
        tags = canon(sorted({str(t) for t in cmd.tags}))
        old = None
        for old in self.conn.execute("SELECT state, addr, tags, since FROM nodes WHERE node=?",
                                     (cmd.node,)):
            pass
        if old is not None and old[:3] == (cmd.state, cmd.addr, tags):
            return {"changed": False}
        since = old[3] if old is not None and old[0] == cmd.state else cmd.at
        self.conn.execute(
            "INSERT INTO nodes(node, state, addr, tags, since) VALUES(?,?,?,?,?) "
            "ON CONFLICT(node) DO UPDATE SET state=excluded.state, addr=excluded.addr,"
            " tags=excluded.tags, since=excluded.since",
            (cmd.node, cmd.state, cmd.addr, tags, since))
        return {"changed": True}

    def _lose_runs(self, index: int, node: str, at: float, reason: str, effects) -> dict:
        lost, retries = [], []
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE state IN ('pending',"
                "'assigned','running') AND state != 'pending' AND node=? ORDER BY run_id",
                (node,))):
            run = Run.from_row(row)
            # An assigned run nobody claimed cannot have started (a node
            # starts only what its committed claim gave it): it is run again
            # whatever on_node_loss says.
            unclaimed = run.state == "assigned" and run.claimed_at is None
            retry = self._finish(run, "lost", at, effects=effects, index=index,
                                 reason=f"{reason}; it had not started (never claimed)"
                                 if unclaimed else reason, not_started=unclaimed)
            lost.append(run.run_id)
            if retry is not None:
                retries.append(retry)
        return {"lost": lost, "retries": retries}

    def _apply_node_lost(self, index, cmd: C.NodeLost, effects):
        # a lost node finishes no job file it was reading: others need not wait
        self.conn.execute("DELETE FROM file_claims WHERE node=?", (cmd.node,))
        return self._lose_runs(index, cmd.node, cmd.at, cmd.reason, effects)

    def _apply_remove_node(self, index, cmd: C.RemoveNode, effects):
        self.conn.execute("DELETE FROM nodes WHERE node=?", (cmd.node,))
        removed = bool(self.conn.changes())
        self.conn.execute("DELETE FROM join_tokens WHERE node=?", (cmd.node,))
        self.conn.execute("DELETE FROM node_drains WHERE node=?", (cmd.node,))
        why = f"node {cmd.node} was removed from the cluster"
        if cmd.deny:
            self._deny("node", cmd.node, why, cmd.at)
        if cmd.serial:
            self._deny("serial", cmd.serial, why, cmd.at)
        had = list(self.conn.execute(
            "SELECT name, digest FROM job_sources WHERE node=? ORDER BY name", (cmd.node,)))
        self.conn.execute("DELETE FROM job_sources WHERE node=?", (cmd.node,))
        # Its files too: if it joins again, they are read again, not skipped.
        self.conn.execute("DELETE FROM source_files WHERE node=?", (cmd.node,))
        self.conn.execute("DELETE FROM file_claims WHERE node=?", (cmd.node,))
        deleted = []
        for name, digest in had:  # first, so runs of a job that goes are not retried
            self._reconcile(name, cmd.at, effects)
            self._forget_specs(name, [digest])
            if self._job(name) is None:
                deleted.append(name)
        result = self._lose_runs(index, cmd.node, cmd.at,
                                 f"node {cmd.node} was removed from the cluster", effects)
        return {"removed": removed, "jobs_removed": deleted, **result}

    def _apply_prune(self, index, cmd: C.Prune, effects):
        self.conn.execute(
            f"DELETE FROM runs WHERE state NOT IN {sql_in(ACTIVE)} AND "
            "COALESCE(finished_at, created_at) < ?", (cmd.before,))
        runs = self.conn.changes()
        self.conn.execute("DELETE FROM gaps WHERE created_at < ?", (cmd.before,))
        self.conn.execute("DELETE FROM late_reports WHERE finished_at < ?", (cmd.before,))
        self.conn.execute("DELETE FROM audit WHERE at < ?", (cmd.before,))
        pause_log.prune(self.conn, cmd.before)
        more = False
        if isinstance(cmd.keep, int) and not isinstance(cmd.keep, bool) and cmd.keep > 0:
            # An every-second job makes 86,400 records a day: a count keeps
            # the newest ``keep`` of each job whatever its rate.
            budget = PRUNE_BATCH
            for job, _count in list(self.conn.execute(
                    "SELECT job, COUNT(*) FROM runs GROUP BY job HAVING COUNT(*) > ? "
                    "ORDER BY job", (cmd.keep,))):
                cutoff = next(iter(self.conn.execute(
                    "SELECT run_id FROM runs WHERE job=? ORDER BY run_id DESC LIMIT 1 OFFSET ?",
                    (job, cmd.keep - 1))))[0]
                self.conn.execute(
                    f"DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs WHERE job=? AND "
                    f"run_id < ? AND state NOT IN {sql_in(ACTIVE)} ORDER BY run_id LIMIT ?)",
                    (job, cutoff, budget))
                runs += self.conn.changes()
                budget -= self.conn.changes()
                if budget <= 0:  # maybe more: the next Prune goes on
                    more = True
                    break
        RP.prune(self.conn)
        self.conn.execute("DELETE FROM run_retries WHERE run_id NOT IN (SELECT run_id FROM runs)")
        DS.prune(self.conn)
        CK.prune(self.conn)
        EV.prune(self.conn, cmd.before)
        PL.prune(self.conn)
        DL.prune(self.conn)
        AL.prune(self.conn, cmd.before)
        return {"runs_deleted": runs, **({"more": True} if more else {})}

    # -- audit ----------------------------------------------------------------
    def _deny(self, kind: str, value: str, reason: str, at: float) -> None:
        self.conn.execute("INSERT INTO denied(kind, value, at, reason) VALUES(?,?,?,?) "
                          "ON CONFLICT(kind, value) DO UPDATE SET at=excluded.at, "
                          "reason=excluded.reason", (kind, value, at, reason))

    def _apply_deny(self, index, cmd: C.Deny, effects):
        if cmd.kind not in ("node", "serial") or not cmd.value:
            raise Refused(f"deny: kind must be node or serial with a value (got "
                          f"{cmd.kind!r}, {cmd.value!r})")
        if cmd.lift:
            self.conn.execute("DELETE FROM denied WHERE kind=? AND value=?",
                              (cmd.kind, cmd.value))
            return {"lifted": bool(self.conn.changes())}
        self._deny(cmd.kind, cmd.value, cmd.reason, cmd.at)
        return {"denied": cmd.value}

    def _apply_join_token(self, index, cmd: C.JoinToken, effects):
        if not cmd.token_hash:
            self.conn.execute("DELETE FROM join_tokens WHERE node=?", (cmd.node,))
            return {"withdrawn": bool(self.conn.changes())}
        self.conn.execute("INSERT INTO join_tokens(node, hash, addr, at) VALUES(?,?,?,?) "
                          "ON CONFLICT(node) DO UPDATE SET hash=excluded.hash, "
                          "addr=excluded.addr, at=excluded.at",
                          (cmd.node, cmd.token_hash, cmd.addr, cmd.at))
        return {"node": cmd.node}

    def _apply_create_token(self, index, cmd: C.CreateToken, effects):
        problem = tokens.create(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"name": cmd.name, "role": cmd.role}

    def _apply_revoke_token(self, index, cmd: C.RevokeToken, effects):
        problem = tokens.revoke(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"revoked": cmd.name}

    def _apply_drain_node(self, index, cmd: C.DrainNode, effects):
        problem = node_drains.apply(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"node": cmd.node, "drained": cmd.drained}

    def _apply_audit(self, index, cmd: C.Audit, effects):
        self.conn.execute(
            "INSERT INTO audit(at, node, uid, user, pid, command, target, allowed, detail) "
            "VALUES(?,?,?,?,?,?,?,?,?)",
            (cmd.at, cmd.node, cmd.uid, cmd.user, cmd.pid, cmd.command, cmd.target,
             int(cmd.allowed), cmd.detail))
        return {"audit_id": self.conn.last_insert_rowid()}

    # -- backfills and reruns (state/backfill.py) ---------------------------------
    def _apply_create_backfill(self, index, cmd: C.CreateBackfill, effects):
        return BF.create(self.conn, cmd, self._need_job(cmd.job), self._job_spec(cmd.job),
                         Refused)

    def _apply_backfill_step(self, index, cmd: C.BackfillStep, effects):
        bf = BF.get(self.conn, cmd.backfill, Refused)
        job = self._job(bf["job"])

        def new_attempt(kind: str, fire_time: int, attempt: int) -> int:
            run = self._insert_run(index, job=bf["job"], origin="schedule", kind=kind,
                                   fire_time=fire_time, attempt=attempt, state="pending",
                                   node=None, due_at=cmd.at, at=cmd.at)
            effects.append(Effect("pending", run=run))
            if bf["downstream"] and attempt > 1:  # a record some children may have consumed
                try:
                    DS.start(self, run.run_id, bf["job"], fire_time)
                except DS.TooMany:
                    pass  # (the rerun stands; its children follow by their generations)
            return run.run_id
        return BF.step(self.conn, cmd.backfill, cmd.at, spec=self._job_spec(bf["job"]),
                       held=BF.held(self.conn, bf["job"]),
                       cursor=None if job is None else job["cursor"],
                       new_attempt=new_attempt, refused=Refused)

    def _apply_set_backfill_state(self, index, cmd: C.SetBackfillState, effects):
        return BF.set_state(self.conn, cmd, Refused)

    def _apply_rerun(self, index, cmd: C.Rerun, effects):
        """A new attempt (kind rerun) of an existing record, never a second record."""
        job = self._need_job(cmd.job)
        BF.check_job(self._job_spec(cmd.job), cmd.job, Refused)
        if not isinstance(cmd.fire_time, int) or isinstance(cmd.fire_time, bool):
            raise Refused("rerun: fire_time must be whole seconds")
        attempt = BF.rerun_attempt(self.conn, cmd.job, cmd.fire_time, Refused)
        reason = self._admit(index, job, cmd.at, effects)
        if reason is not None:
            raise Refused(f"job {cmd.job!r} not rerun: {reason}; wait for the active run to "
                          f"finish (`cronrd runs {cmd.job} --state running`)")
        hold = self._queue_hold(cmd.job, "", cmd.fire_time)
        if hold is not None and hold.skip is not None:
            raise Refused(f"job {cmd.job!r} not rerun: {hold.skip}; wait for the queue to "
                          f"drain (`cronrd runs {cmd.job} --state waiting`)")
        if hold is not None and hold.wait is not None:  # queued, by its fire time
            run = self._enqueue(index, job=cmd.job, origin="schedule", kind="rerun",
                                fire_time=cmd.fire_time, attempt=attempt, due_at=cmd.at,
                                at=cmd.at, reason=hold.wait, target="")
            state = "waiting"
        else:
            run = self._insert_run(index, job=cmd.job, origin="schedule", kind="rerun",
                                   fire_time=cmd.fire_time, attempt=attempt, state="pending",
                                   node=None, due_at=cmd.at, at=cmd.at,
                                   reason=f"rerun by {cmd.who}" if cmd.who else "rerun")
            effects.append(Effect("pending", run=run))
            state = run.state.value  # pending, or waiting for its pool's slots
        out = {"run_id": run.run_id, "attempt": attempt, "state": state}
        if cmd.downstream is True:
            out["downstream"] = self._downstream(run.run_id, cmd.job, cmd.fire_time)
        return out

    def _downstream(self, root_run: int, job: str, fire_time: int) -> list[list]:
        """Record the --downstream of an attempt (state/downstream.py): the
        records that will follow it, [job, fire time] in order."""
        try:
            return [list(r) for r in DS.start(self, root_run, job, fire_time)]
        except DS.TooMany as exc:
            raise Refused(f"{exc}; rerun fewer at once (without --downstream, then "
                          "the children one by one)") from None

    # -- pools (state/pools.py) ---------------------------------------------------------
    def _pool_gate(self, run: Run) -> Run:
        """``run`` just became pending or assigned: it takes its pool's slots,
        or waits for them (the run as it is now)."""
        if not PL.names_pool(self.conn, run.job):
            return run
        if PL.gate(self.conn, run, self._job_spec(run.job)) is None:
            return run
        return self._get_run(run.run_id)

    def _pool_after(self, run: Run, at: float, effects) -> None:
        """``run`` ended: it leaves its pool, whose waiting runs that fit now
        are released to pending, in order."""
        pool = PL.drop(self.conn, run.run_id)
        if pool is not None:
            self._pool_release(pool, at, effects, run.node)

    def _pool_release(self, pool: str, at: float, effects, freed_on: str | None = None
                      ) -> list[int]:
        """Release the pool's waiting runs that fit now (state/pools.py); the
        ids of those that go to pending."""
        out: list[int] = []
        while True:
            stopped = []
            for run_id in PL.release(self.conn, pool, at, freed_on):
                released = self._get_run(run_id)
                job = self._job(released.job)
                why = None if job is None else self._stop_reason(job)
                if why is None:
                    effects.append(Effect("pending", run=released))
                    out.append(run_id)
                else:
                    stopped.append((released, why))
            if not stopped:
                return out
            # Its job was paused or disabled while it waited: it does not
            # start (as a queued run's), and the next in line goes instead.
            for released, why in stopped:
                PL.drop(self.conn, released.run_id)
                self._finish(released, "skipped", at, reason=why, effects=effects)

    def _apply_set_pools(self, index, cmd: C.SetPools, effects):
        pools = PL.check_pools(cmd.pools)
        if pools is None:
            raise Refused("set_pools: pools must be a list of [name, slots >= 1, cluster|node]"
                          " with distinct names; run the same cronrd version on every node")
        changed = PL.set_pools(self.conn, pools)
        released = []
        for pool in PL.pools_with_waiters(self.conn) if changed else []:
            released += self._pool_release(pool, cmd.at, effects)
        return {"changed": changed, "released": released}

    def _apply_start_deadline(self, index, cmd: C.StartDeadline, effects):
        run = self._get_run(cmd.run_id)
        if not SD.not_started(run):
            raise Refused(f"run {cmd.run_id} is {run.state.value}"
                          f"{' (claimed)' if run.claimed_at is not None else ''}: started or "
                          "ended already")
        spec = self._job_spec(run.job)
        end = SD.expires(run, spec)
        if end is None or cmd.at < end:
            raise Refused(f"run {cmd.run_id} is not past its start_deadline"
                          f"{'' if end is None else ' (' + iso_utc(end) + ')'}")
        self._finish(run, "skipped", cmd.at, reason=SD.reason(run, spec), effects=effects,
                     index=index)
        return {"run_id": run.run_id, "state": "skipped"}

    # -- checkpoints and heartbeats from inside a job (state/checkpoints.py) --------------
    def _token_run(self, cmd, what: str) -> Run:
        """The attempt a SaveCheckpoint or Heartbeat speaks for, checked."""
        if not isinstance(cmd.run_id, int) or isinstance(cmd.run_id, bool):
            raise Refused(f"{what}: run_id must be a whole number")
        if not isinstance(cmd.at, (int, float)) or isinstance(cmd.at, bool):
            raise Refused(f"{what}: at must be a number")
        run = Q.get_run(self.conn, cmd.run_id)
        problem = CK.check_attempt(self.conn, run, cmd.token_hash, cmd.node,
                                   at=cmd.at if isinstance(cmd, C.Heartbeat) else None)
        if problem is not None:
            raise Refused(f"{what} refused: {problem}")
        return run

    def _apply_save_checkpoint(self, index, cmd: C.SaveCheckpoint, effects):
        problem = CK.value_problem(cmd.value)
        if problem is not None:
            raise Refused(f"checkpoint refused: {problem}")
        run = self._token_run(cmd, "checkpoint")
        CK.save(self.conn, run, cmd.value, cmd.at)
        CK.beat(self.conn, run.run_id, cmd.at, None, None)  # a save is a sign of life
        return {"run_id": run.run_id, "attempt": run.attempt}

    def _apply_heartbeat(self, index, cmd: C.Heartbeat, effects):
        problem = CK.progress_problem(cmd.progress) or (
            None if cmd.message is None else CK.message_problem(cmd.message))
        if problem is not None:
            raise Refused(f"heartbeat refused: {problem}")
        run = self._token_run(cmd, "heartbeat")
        CK.beat(self.conn, run.run_id, cmd.at,
                None if cmd.progress is None else float(cmd.progress), cmd.message)
        return {"run_id": run.run_id}

    def _apply_heartbeat_timeout(self, index, cmd: C.HeartbeatTimeout, effects):
        run = self._get_run(cmd.run_id)
        if run.state != "running":
            raise Refused(f"run {cmd.run_id} is {run.state}, not running")
        spec = self._job_spec(run.job)
        timeout = spec.heartbeat_timeout if spec is not None else None
        if not timeout:
            raise Refused(f"run {cmd.run_id}: job {run.job!r} has no heartbeat_timeout")
        last = CK.silent_since(self.conn, run)
        if last is None or cmd.at - last < timeout:
            raise Refused(f"run {cmd.run_id} was heard of at {iso_utc(last)}, within its "
                          f"heartbeat_timeout")
        reason = CK.stuck_reason(timeout)
        retry = self._finish(run, "timed_out", cmd.at, reason=reason, effects=effects,
                             index=index)
        # Its node stops the process (the record is final already).
        effects.append(Effect("stuck", run=self._get_run(run.run_id)))
        return {"run_id": run.run_id, "state": "timed_out", "retry_run_id": retry}

    # -- notifications: delivery attempts (state/deliveries.py) ------------------------
    def _apply_delivery_result(self, index, cmd: C.DeliveryResult, effects):
        if not DL.well_formed(cmd.attempts, cmd.done):
            raise Refused("delivery_result: attempts must be [event_id, notifier, attempt, "
                          "ok, final, error] lists and done a list of event ids")
        return DL.record(self.conn, cmd.at, cmd.leader, cmd.attempts, cmd.done)

    # -- alerts and the dead letter (state/alerts.py) -----------------------------------
    def _apply_raise_alerts(self, index, cmd: C.RaiseAlerts, effects):
        if not isinstance(cmd.alerts, list) or len(cmd.alerts) > 1000:
            raise Refused("raise_alerts: alerts must be a list of at most 1000")
        opened = []
        for item in cmd.alerts:
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                    and isinstance(item[1], int) and item[2] in EV.SLA_KINDS
                    and isinstance(item[3], str)):
                raise Refused("raise_alerts: each alert is [job, fire_time, sla kind, detail]")
            aid = AL.raise_alert(self.conn, job=item[0], fire_time=item[1], kind=item[2],
                                 detail=item[3], at=cmd.at)
            if aid is not None:
                opened.append(aid)
        return {"opened": opened}

    def _apply_ack_alert(self, index, cmd: C.AckAlert, effects):
        return AL.ack(self.conn, cmd.alert_id, cmd.note, cmd.who, cmd.at, Refused)

    def _apply_dead_letter_action(self, index, cmd: C.DeadLetterAction, effects):
        return AL.dead_letter_action(self, index, cmd, Refused, effects)

    # -- digest ---------------------------------------------------------------
    def full_digest(self) -> str:
        """Hash of every replicated table (O(rows): for tests and audits)."""
        h = hashlib.sha256()
        h.update(str(self.applied_index).encode())
        for table, order in DIGEST_TABLES:
            h.update(table.encode())
            for row in self.conn.execute(f"SELECT * FROM {table} ORDER BY {order}"):
                h.update(json.dumps(row, separators=(",", ":")).encode())
        # the id counters (state/seq.py, events.py) decide the next ids
        for row in self.conn.execute("SELECT key, value FROM meta WHERE key IN "
                                     "('run_seq', 'alert_seq', 'event_seq') ORDER BY key"):
            h.update(json.dumps(row, separators=(",", ":")).encode())
        return h.hexdigest()


def conflict_text(name: str, rows: list[dict], in_force: str) -> str:
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


def _pairs(items, width: int, what: str) -> list[tuple]:
    """``items`` as tuples of ``width`` (run id and token first, integers);
    Refused if the command is malformed (it came from a peer)."""
    if not isinstance(items, list) or not items:
        raise Refused(f"{what}: a non-empty list is required")
    out = []
    for item in items:
        if (not isinstance(item, list) or len(item) != width
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item[:2])):
            raise Refused(f"{what}: each entry must be [run_id, token{', node' * (width > 2)}]")
        out.append(tuple(item))
    return out

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
from typing import Any, Callable

import apsw

from .. import __version__
from ..errors import StateError
from . import commands as C
from . import queries as Q
from . import versions as V
from .effects import Effect, RunAssigned, RunPending
from .schema import (ADDED_COLUMNS, SCHEMA, SCHEMA_VERSION, SEED_JOB_OUTCOMES,
                     SEED_JOB_HISTOGRAMS, SEED_NOTIFY_OUTCOMES,
                     UPGRADE_FROM_V1,
                     UPGRADE_TO_V5, UPGRADE_TO_V6)
from .apply_access import AccessApply
from .apply_common import CLAIM_TTL, PRUNE_BATCH, canon, canon_text  # noqa: F401
from .apply_jobs import JobsApply, conflict_text  # noqa: F401
from .apply_nodes import NodesApply
from .apply_runs import RunsApply
from .apply_watches import WatchesApply
from .apply_workflows import WorkflowsApply


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
    ("ui_sessions", "hash"),
    ("workers", "node"),
    ("planned_runs", "plan_id"),
    ("calendars", "name"),
    ("watch_waits", "run_id"),
    ("watch_strays", "run_id"),
)
# Tables that came with a cluster version above 1: hashed only once they
# hold a row, so a log of an older release gives the digest it gave there.
LATER_TABLES = frozenset({"ui_sessions", "workers", "planned_runs", "calendars",
                          "watch_waits", "watch_strays"})


class StateMachine(JobsApply, RunsApply, NodesApply, AccessApply, WorkflowsApply,
                   WatchesApply):
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
            check_readable(conn, "this node's state database")
            version = self._meta("schema_version")
            version = None if version is None else int(version)
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
            # Which cronrd opened it last (a snapshot of it names its maker).
            if self._meta("written_by") != __version__:
                self._set_meta("written_by", __version__)

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
        handler = APPLIERS[type(cmd)].__get__(self)
        outcome = "refused"
        try:
            if type(cmd).since > V.BASE or type(cmd).added:
                # a proposer's gate missed it (state/versions.py): refused alike
                V.check_proposable(cmd, V.recorded(self.conn))
            with self.conn:  # savepoint: a refusal rolls back only this command
                result = handler(index, cmd, effects)
                # A run that went to wait for its pool's slots (state/pools.py)
                # is neither placed nor to be placed.
                effects[:] = [e for e in effects if not (
                    isinstance(e, (RunAssigned, RunPending)) and e.run is not None
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


    # -- digest ---------------------------------------------------------------
    def full_digest(self) -> str:
        """Hash of every replicated table (O(rows): for tests and audits)."""
        h = hashlib.sha256()
        h.update(str(self.applied_index).encode())
        for table, order in DIGEST_TABLES:
            rows = self.conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            if table in LATER_TABLES:
                first = next(rows, None)
                if first is None:
                    continue
                h.update(table.encode())
                h.update(json.dumps(first, separators=(",", ":")).encode())
            else:
                h.update(table.encode())
            for row in rows:
                h.update(json.dumps(row, separators=(",", ":")).encode())
        # the id counters (state/seq.py, events.py) decide the next ids
        for row in self.conn.execute("SELECT key, value FROM meta WHERE key IN "
                                     "('run_seq', 'alert_seq', 'event_seq', "
                                     "'cluster_version') ORDER BY key"):
            h.update(json.dumps(row, separators=(",", ":")).encode())
        return h.hexdigest()


def check_readable(conn: apsw.Connection, what: str) -> None:
    """Refuse a state database (this node's, or a snapshot's before it is
    installed) that only a newer cronrd applies: its schema, or the cluster
    version its log reached (state/versions.py)."""
    meta: dict[str, Any] = {}
    if any(conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'")):
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN "
                                 "('schema_version', 'cluster_version', 'written_by')"))
    V.readable(meta, what)
    schema = meta.get("schema_version")
    if schema is not None and int(schema) > max(V.SCHEMA_LOCK.values()):
        raise V.NewerLog(f"{what} has schema version {schema}, newer than this cronrd "
                         f"{__version__} knows ({max(V.SCHEMA_LOCK.values())}): "
                         f"{V.upgrade_hint(V.APPLY_VERSION + 1)}")


# Every command type and the method of its area that applies it: one table,
# built when the module loads, so a command type with no applier fails the
# import (and every test), never its first apply in a cluster.
def _appliers() -> dict[type[C.Command], Callable[..., Any]]:
    table = {}
    for op, cls in C.COMMANDS.items():
        method = getattr(StateMachine, "_apply_" + op, None)
        if method is None:
            raise TypeError(f"no applier for command {cls.__name__} ({op!r})")
        table[cls] = method
    return table


APPLIERS = _appliers()

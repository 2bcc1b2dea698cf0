"""Read-only queries over the replicated state. Runs come back as ``Run``
values (run.py); the rest shaped for the CLI's JSON."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

import apsw

from ..jobspec import JobSpec
from ..schedule import iso_utc
from ..model.run import SELECT as SELECT_RUNS, Run
from ..model.run_states import ACTIVE as ACTIVE_STATES, sql_in

# The runs_active partial index's predicate: a query must repeat it to use the index.
ACTIVE_SQL = "state IN (%s)" % ",".join(f"'{s}'" for s in ACTIVE_STATES)

TIME_FIELDS = ("due_at", "created_at", "started_at", "finished_at")


def applied_index(conn: apsw.Connection) -> int:
    """The log index the state on ``conn`` has applied up to: read from
    ``conn`` itself, so a reader on a connection of its own (the faces')
    sees the index of the very state it reads."""
    for (value,) in conn.execute("SELECT value FROM meta WHERE key='applied_index'"):
        return int(value or 0)
    return 0


def get_run(conn: apsw.Connection, run_id: int) -> Run | None:
    for row in conn.execute(f"{SELECT_RUNS} WHERE run_id=?", (run_id,)):
        return Run.from_row(row)
    return None


def list_runs(conn: apsw.Connection, job: str | None = None,
              state: str | Iterable[str] | None = None,
              limit: int = 50, *, kind: str | Iterable[str] | None = None, node: str | None = None,
              since: float | None = None, until: float | None = None,
              before: int | None = None) -> list[Run]:
    """Runs newest first. ``state`` and ``kind``: one value or several;
    ``since``/``until``: fire times in [since, until); ``before``: run ids
    below it (pages back from the last id shown)."""
    where: list[str] = []
    args: list[Any] = []
    if job is not None:
        where.append("job=?")
        args.append(job)
    for column, value in (("state", state), ("kind", kind)):
        if value is None:
            continue
        values = [value] if isinstance(value, str) else list(value)
        where.append(f"{column} IN ({','.join('?' * len(values))})")
        args.extend(values)
        if column == "state" and values and set(values) <= set(ACTIVE_STATES):
            # the partial index of the active runs is used only with its own
            # term: without it, "running" scanned a million records newest first
            where.append(f"state IN {sql_in(ACTIVE_STATES)}")
    if node is not None:
        where.append("node=?")
        args.append(node)
    if since is not None:
        where.append("fire_time>=?")
        args.append(since)
    if until is not None:
        where.append("fire_time<?")
        args.append(until)
    if before is not None:
        where.append("run_id<?")
        args.append(before)
    sql = SELECT_RUNS
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY run_id DESC LIMIT ?"
    args.append(limit)
    return [Run.from_row(r) for r in conn.execute(sql, args)]


def job_has_runs(conn: apsw.Connection, job: str) -> bool:
    """Does any run record name ``job`` (a removed job keeps its history)?"""
    for _ in conn.execute("SELECT 1 FROM runs WHERE job=? LIMIT 1", (job,)):
        return True
    return False


def runs_for_node(conn: apsw.Connection, node: str, states: tuple[str, ...]) -> list[Run]:
    marks = ",".join("?" * len(states))
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE node=? AND state IN ({marks}) ORDER BY run_id", (node, *states))]


def list_gaps(conn: apsw.Connection, job: str | None = None,
              limit: int = 50) -> list[dict[str, Any]]:
    sql = "SELECT gap_id, job, first, last, count, reason, created_at FROM gaps"
    args: list[Any] = []
    if job is not None:
        sql += " WHERE job=?"
        args.append(job)
    sql += " ORDER BY gap_id DESC LIMIT ?"
    args.append(limit)
    return [{"gap_id": r[0], "job": r[1], "first": iso_utc(r[2]), "last": iso_utc(r[3]),
             "count": r[4], "reason": r[5], "recorded_at": iso_utc(r[6])}
            for r in conn.execute(sql, args)]


@functools.lru_cache(maxsize=2048)
def decode_spec(spec_json: str, source: str = "") -> JobSpec:
    """The one decoder of a stored job definition (``specs.spec``): JobSpec's
    defaults fill what an older version did not write, so nothing else
    restates them. Cached: a definition is decoded once, not per fire."""
    return JobSpec.from_dict(json.loads(spec_json), source=source)


def jobs(conn: apsw.Connection, after: str | None = None, limit: int | None = None,
         name: str | None = None, glob: str | None = None,
         as_dicts: bool = False) -> list[dict[str, Any]]:
    """Jobs with their effective spec, cursor, conflict and per-node
    sources, by name: one page (names after ``after``, at most ``limit``),
    one job (``name``) or the names matching a shell pattern (``glob``).
    ``as_dicts``: each spec as a dict of the fields a listing shows
    (VIEW_KEYS, read out of the stored JSON by SQLite: a page of 1,000 jobs
    is not 1,000 JobSpecs, nor 1,000 whole definitions decoded)."""
    where: list[str] = []
    args: list[Any] = []
    if name is not None:
        where.append("jobs.name = ?")
        args.append(name)
    if after is not None:
        where.append("jobs.name > ?")
        args.append(after)
    if glob is not None:
        where.append("jobs.name GLOB ?")
        args.append(glob)
    fields = _VIEW_SQL if as_dicts else "spec"
    sql = (f"SELECT jobs.name, {fields}, digest, source, paused, cursor, conflict FROM jobs "
           "JOIN specs USING(name, digest)")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY jobs.name"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit)
    out: list[dict[str, Any]] = []
    width = len(VIEW_KEYS) if as_dicts else 1
    row: tuple[Any, ...]
    for row in conn.execute(sql, args):
        name_, digest, source, paused, cursor, conflict = row[0], *row[1 + width:]
        spec = _view_dict(row[1:1 + width]) if as_dicts else decode_spec(row[1], source)
        out.append({"name": name_, "digest": digest, "spec": spec,
                    "source": source, "paused": bool(paused), "cursor": cursor,
                    "conflict": conflict, "sources": []})
    if out:
        by_name = {j["name"]: j for j in out}
        lo, hi = out[0]["name"], out[-1]["name"]
        for name_, node, digest, source in conn.execute(
                "SELECT name, node, digest, source FROM job_sources WHERE name >= ? AND "
                "name <= ? ORDER BY name, node", (lo, hi)):
            job = by_name.get(name_)
            if job is not None:
                job["sources"].append({"node": node, "digest": digest, "source": source})
    return out


_DEFAULTS = JobSpec(name="", schedule="", command="").to_dict()
# What `cronrd jobs` shows of a definition; (key, holds JSON: a list or mapping)
VIEW_KEYS = (("schedule", False), ("timezone", False), ("command", True), ("enabled", False),
             ("description", False), ("concurrency", False), ("catchup", False),
             ("run_on", True), ("watch", True), ("calendar", True))
# JSON values come back as JSON text (->), plain ones as SQL values (->>).
_VIEW_SQL = ", ".join(f"spec {'->' if js else '->>'} '$.{key}'" for key, js in VIEW_KEYS)


# A listing's job as JSON text, built by SQLite (`jobs --json` of 100,000 jobs:
# no dict per job in Python, no Python encoder). Only next_fire and last_run
# are added by the caller (they need the scheduler and the runs).
_VIEW_JSON = """
SELECT jobs.name,
  json_object(
    'name', jobs.name,
    'schedule', spec ->> '$.schedule',
    'timezone', COALESCE(spec ->> '$.timezone', :tz),
    'command', spec -> '$.command',
    'enabled', COALESCE(spec -> '$.enabled', json('true')),
    'paused', json(CASE WHEN paused THEN 'true' ELSE 'false' END),
    'description', COALESCE(spec ->> '$.description', ''),
    'source', jobs.source,
    'conflict', conflict,
    'last_fire', CASE WHEN cursor THEN strftime('%Y-%m-%dT%H:%M:%SZ', cursor, 'unixepoch')
                 END,
    'concurrency', COALESCE(spec ->> '$.concurrency', 'forbid'),
    'catchup', COALESCE(spec ->> '$.catchup', 'latest'),
    'run_on', COALESCE(spec -> '$.run_on', json('{"mode":"any","values":[]}')),
    'digest', jobs.digest,
    'watch', json(CASE WHEN spec -> '$.watch' IS NULL THEN 'false' ELSE 'true' END)),
  spec ->> '$.schedule', spec ->> '$.timezone',
  COALESCE(spec ->> '$.enabled', 1), paused, cursor, spec -> '$.calendar'
FROM jobs JOIN specs USING(name, digest)
WHERE jobs.name > :after AND (:glob IS NULL OR jobs.name GLOB :glob)
ORDER BY jobs.name LIMIT :limit
"""
# Each job's sources, for a page of names (one query, not a subquery per job).
_VIEW_SOURCES = """
SELECT name, json_group_array(json_object('node', node, 'digest', digest, 'source', source))
FROM (SELECT name, node, digest, source FROM job_sources
      WHERE name >= :lo AND name <= :hi ORDER BY name, node)
GROUP BY name
"""


def job_view_texts(conn: apsw.Connection, default_tz: str, after: str | None = None,
                   glob: str | None = None, limit: int = 1000) -> list[tuple[Any, ...]]:
    """A page of jobs as (name, JSON object text, schedule, timezone, enabled,
    paused, cursor, calendar rule as JSON text or None): the text has every
    field of a listing but next_fire and last_run."""
    # ("after" as a bound of the index range: an OR with "no after" made
    # every page scan the names from the first, 100 pages of 1,000 jobs
    # reading 5 million index entries)
    rows = list(conn.execute(_VIEW_JSON, {"tz": default_tz, "after": after or "",
                                          "glob": glob, "limit": limit}))
    if not rows:
        return rows
    sources = dict(conn.execute(_VIEW_SOURCES, {"lo": rows[0][0], "hi": rows[-1][0]}))
    return [(name, f'{text[:-1]},"sources":{sources.get(name, "[]")}}}', *rest)
            for name, text, *rest in rows]


@functools.lru_cache(maxsize=4096)
def _small_json(text: str) -> Any:
    """A command or run_on, decoded (a listing repeats the same ones; the
    value is only serialised again, never changed)."""
    return json.loads(text)


def _view_dict(values: Iterable[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (key, js), value in zip(VIEW_KEYS, values):
        if value is None:
            value = _DEFAULTS.get(key)  # written by a version without the key (or unset)
        elif js:
            value = _small_json(value)
        elif key == "enabled":
            value = bool(value)
        out[key] = value
    return out


def last_runs(conn: apsw.Connection, jobs: list[str]) -> dict[str, Run]:
    """Each job's most recent run record, in one query."""
    if not jobs:
        return {}
    marks = ",".join("?" * len(jobs))
    return {r.job: r for r in map(Run.from_row, conn.execute(
        f"{SELECT_RUNS} WHERE run_id IN (SELECT MAX(run_id) FROM runs WHERE job IN ({marks}) "
        "GROUP BY job)", jobs))}


def count_jobs(conn: apsw.Connection) -> tuple[int, int]:
    """(jobs, paused jobs)."""
    (total,), (paused,) = conn.execute(
        "SELECT COUNT(*) FROM jobs UNION ALL SELECT COUNT(*) FROM jobs WHERE paused != 0")
    return total, paused


def conflicts(conn: apsw.Connection, limit: int = 100) -> list[str]:
    """The conflicts between nodes' job files (at most ``limit``), by job name."""
    return [c for (c,) in conn.execute(
        "SELECT conflict FROM jobs WHERE conflict IS NOT NULL ORDER BY name LIMIT ?", (limit,))]


def job_sources(conn: apsw.Connection, node: str) -> dict[str, dict[str, Any]]:
    """The job definitions one node has proposed: {name: {digest, source}}."""
    return {name: {"digest": digest, "source": source} for name, digest, source in
            conn.execute("SELECT name, digest, source FROM job_sources WHERE node=? "
                         "ORDER BY name", (node,))}


def nodes(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Known nodes: {node, state, addr, tags (list), since (epoch seconds)}."""
    return [{"node": node, "state": state, "addr": addr, "tags": json.loads(tags),
             "since": since} for node, state, addr, tags, since in conn.execute(
                "SELECT node, state, addr, tags, since FROM nodes ORDER BY node")]


def workers(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Registered worker agents: {node, tags (list), capacity, version, since}."""
    return [{"node": node, "tags": json.loads(tags), "capacity": capacity,
             "version": version, "since": since} for node, tags, capacity, version, since
            in conn.execute("SELECT node, tags, capacity, version, since FROM workers "
                            "ORDER BY node")]


def active_by_node(conn: apsw.Connection) -> dict[str, int]:
    """Assigned plus running runs per node (the leader's placement load)."""
    return {node: n for node, n in conn.execute(
        f"SELECT node, COUNT(*) FROM runs WHERE {ACTIVE_SQL} AND state != 'pending' "
        "GROUP BY node ORDER BY node")}


def pending_runs(conn: apsw.Connection) -> list[Run]:
    """Runs waiting for the leader to place them, oldest first."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE {ACTIVE_SQL} AND state = 'pending' "
        "ORDER BY run_id")]


def unclaimed_runs(conn: apsw.Connection) -> list[Run]:
    """Runs placed on a node that has not claimed them yet (a cluster's
    leader moves the ones overdue: decisions/claims.py)."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE {ACTIVE_SQL} AND state = 'assigned' AND claimed_at IS NULL "
        "ORDER BY run_id")]


def lost_by(conn: apsw.Connection, run: Run) -> tuple[str, float] | None:
    """(node, when) the attempt before ``run`` ended lost, if it did: a
    retry is not put straight back on that node (it may have refused to
    start it)."""
    if run.attempt <= 1:
        return None
    for node, finished in conn.execute(
            "SELECT node, finished_at FROM runs WHERE job=? AND origin=? AND fire_time=? "
            "AND target=? AND attempt=? AND state='lost'",
            (run.job, run.origin, run.fire_time, run.target, run.attempt - 1)):
        return (node, finished or 0.0) if node else None
    return None


def last_run(conn: apsw.Connection, job: str) -> Run | None:
    """The job's most recent run record (index lookup, not a scan)."""
    for row in conn.execute(f"{SELECT_RUNS} WHERE job=? "
                            "ORDER BY run_id DESC LIMIT 1", (job,)):
        return Run.from_row(row)
    return None


def queued_manual(conn: apsw.Connection, job: str) -> int:
    """The job's manual runs (run-now, hooks) held waiting (for a pool's
    slot, behind the job's running one, for a dependency)."""
    (n,), = conn.execute("SELECT COUNT(*) FROM runs WHERE job=? AND origin='manual' AND "
                         "state='waiting'", (job,))
    return int(n)


def count_active(conn: apsw.Connection) -> dict[str, int]:
    """Runs in flight by state (served by the partial index on active runs)."""
    return {state: n for state, n in conn.execute(
        f"SELECT state, COUNT(*) FROM runs WHERE {ACTIVE_SQL} GROUP BY state")}


AUDIT_COLUMNS = ("audit_id", "at", "node", "uid", "user", "pid", "command", "target",
                 "allowed", "detail")


def audit(conn: apsw.Connection, limit: int = 50, before: int | None = None,
          job_glob: str = "") -> list[dict[str, Any]]:
    """Audit records, newest first; ``before`` (an audit_id) pages back.
    ``job_glob``: only the records whose target is a job it covers (what a
    token limited to those jobs may read)."""
    from .tokens import job_allowed, sql_glob
    pattern = sql_glob(job_glob)
    out: list[dict[str, Any]] = []
    while True:
        sql = f"SELECT {','.join(AUDIT_COLUMNS)} FROM audit WHERE 1"
        args: list[Any] = []
        if before is not None:
            sql += " AND audit_id < ?"
            args.append(before)
        if pattern is not None:
            sql += " AND target GLOB ?"
            args.append(pattern)
        sql += " ORDER BY audit_id DESC LIMIT ?"
        args.append(limit)
        rows = list(conn.execute(sql, args))
        for row in rows:
            rec: dict[str, Any] = dict(zip(AUDIT_COLUMNS, row))
            before = rec["audit_id"]
            if job_glob and not job_allowed(job_glob, rec["target"]):
                continue
            rec["at"] = iso_utc(rec["at"])
            rec["allowed"] = bool(rec["allowed"])
            out.append(rec)
            if len(out) == limit:
                return out
        if len(rows) < limit:
            return out


def denied(conn: apsw.Connection) -> dict[str, dict[str, str]]:
    """{"node": {id: reason}, "serial": {serial: reason}}: refused on the peer port."""
    out: dict[str, dict[str, str]] = {"node": {}, "serial": {}}
    for kind, value, reason in conn.execute("SELECT kind, value, reason FROM denied"):
        out.setdefault(kind, {})[value] = reason
    return out


def join_token(conn: apsw.Connection, node: str) -> dict[str, Any] | None:
    for h, addr, at in conn.execute("SELECT hash, addr, at FROM join_tokens WHERE node=?",
                                    (node,)):
        return {"hash": h, "addr": addr, "at": at}
    return None


def job_source_nodes(conn: apsw.Connection, name: str) -> list[str]:
    """The nodes whose job files define ``name``."""
    return [n for (n,) in conn.execute(
        "SELECT node FROM job_sources WHERE name=? ORDER BY node", (name,))]


def fire_recorded(conn: apsw.Connection, job: str, fire_time: int) -> bool:
    """Has some node's scheduled fire of ``job`` at ``fire_time`` been recorded?"""
    for _ in conn.execute("SELECT 1 FROM runs WHERE job=? AND origin='schedule' AND "
                          "fire_time=? LIMIT 1", (job, fire_time)):
        return True
    return False


def job_spec(conn: apsw.Connection, name: str) -> JobSpec | None:
    """The definition in force of job ``name``."""
    for spec, source in conn.execute("SELECT spec, source FROM jobs JOIN specs "
                                     "USING(name, digest) WHERE name=?", (name,)):
        return decode_spec(spec, source)
    return None


def in_force_from(conn: apsw.Connection, name: str, nodes: Iterable[str]) -> bool:
    """Is the definition of ``name`` in force one that one of ``nodes`` defines?"""
    nodes = list(nodes)
    if not nodes:
        return False
    marks = ",".join("?" * len(nodes))
    for _ in conn.execute(
            f"SELECT 1 FROM jobs j JOIN job_sources s ON s.name = j.name AND s.digest = j.digest "
            f"WHERE j.name=? AND s.node IN ({marks}) LIMIT 1", (name, *nodes)):
        return True
    return False


def job_names(conn: apsw.Connection) -> list[str]:
    return [n for (n,) in conn.execute("SELECT name FROM jobs ORDER BY name")]


# What the scheduler keeps of a job: its schedule, time zone, enabled flag
# (read out of the stored definition by SQLite, not decoded per job), paused
# flag and cursor.
_SCHEDULE_ROWS = ("SELECT jobs.name, json_extract(spec, '$.schedule'), "
                  "json_extract(spec, '$.timezone'), "
                  "COALESCE(json_extract(spec, '$.enabled'), 1), paused, cursor, "
                  "json_extract(spec, '$.calendar') "
                  "FROM jobs JOIN specs USING(name, digest)")


def schedule_rows(conn: apsw.Connection, name: str | None = None, after: str | None = None,
                  limit: int = -1) -> apsw.Cursor:
    """(name, schedule, timezone or None, enabled, paused, cursor, calendar
    rule as JSON or None) of one job or, streamed in name order, of every job (after ``after``, at most
    ``limit``)."""
    if name is not None:
        return conn.execute(_SCHEDULE_ROWS + " WHERE jobs.name=?", (name,))
    if after is not None:
        return conn.execute(_SCHEDULE_ROWS + " WHERE jobs.name > ? ORDER BY jobs.name LIMIT ?",
                            (after, limit))
    return conn.execute(_SCHEDULE_ROWS + " ORDER BY jobs.name LIMIT ?", (limit,))


def schedule_rows_of(conn: apsw.Connection, names: list[str]) -> apsw.Cursor:
    """``schedule_rows`` of the jobs named (those that exist), in one query."""
    return conn.execute(_SCHEDULE_ROWS + " WHERE jobs.name IN (SELECT value FROM json_each(?))",
                        (json.dumps(names),))


def reboot_rows(conn: apsw.Connection) -> apsw.Cursor:
    """``schedule_rows`` of the jobs whose schedule may be @reboot (a
    superset: those whose definition says @reboot anywhere, in any case;
    the caller checks the schedule). A pattern over the stored text, not a
    JSON extraction per job: 100,000 of those held a daemon's start for
    0.4 s."""
    return conn.execute(_SCHEDULE_ROWS + " WHERE spec LIKE '%@reboot%' ORDER BY jobs.name")


def job_schedule(conn: apsw.Connection, name: str) -> tuple[JobSpec, bool, int] | None:
    """What the scheduler needs of job ``name``: (spec in force, paused, cursor)."""
    for spec, source, paused, cursor in conn.execute(
            "SELECT spec, source, paused, cursor FROM jobs JOIN specs USING(name, digest) "
            "WHERE name=?", (name,)):
        return decode_spec(spec, source), bool(paused), cursor
    return None


def next_attempt(conn: apsw.Connection, run: Run) -> int | None:
    """The run id of ``run``'s next attempt (a retry of the same fire), if any."""
    rid: int
    for (rid,) in conn.execute("SELECT retry_run_id FROM run_retries WHERE run_id=?",
                               (run.run_id,)):
        return rid
    if run.origin == "manual":  # two manual runs may share a fire time: only the link
        return None
    for (rid,) in conn.execute(
            "SELECT run_id FROM runs WHERE job=? AND origin=? AND fire_time=? AND target=? "
            "AND attempt=? ORDER BY run_id LIMIT 1",
            (run.job, run.origin, run.fire_time, run.target, run.attempt + 1)):
        return rid
    return None


def run_assignments(conn: apsw.Connection,
                    run_ids: list[int]) -> dict[int, tuple[str, str | None, int | None]]:
    """(state, node, token) of each run in ``run_ids`` that exists."""
    if not run_ids:
        return {}
    return {rid: (state, node, token) for rid, state, node, token in conn.execute(
        f"SELECT run_id, state, node, token FROM runs WHERE run_id IN "
        f"({','.join('?' * len(run_ids))})", list(run_ids))}


def running_elsewhere(conn: apsw.Connection, run: Run, node: str) -> list[tuple[int, str]]:
    """(run id, node) of the runs of ``run``'s job and target running on other
    nodes, other fire times (or origins) than its own: a sibling of the same
    fire is no overlap."""
    return [(rid, other) for rid, other in conn.execute(
        "SELECT run_id, node FROM runs WHERE state='running' AND job=? AND node!=? "
        "AND target=? AND NOT (fire_time=? AND origin=?)",
        (run.job, node, run.target, run.fire_time, run.origin))]


def pause_note(conn: apsw.Connection, name: str) -> dict[str, Any] | None:

    """Why job ``name`` is paused and who paused it (``name`` "": the
    maintenance pause of every job), or None."""
    for note, by, at in conn.execute("SELECT note, by, at FROM pauses WHERE name=?", (name,)):
        return {"note": note, "by": by, "at": iso_utc(at)}
    return None


def active_runs_of(conn: apsw.Connection, job: str) -> list[Run]:
    """The job's runs that have not ended, oldest first."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE job=? AND {ACTIVE_SQL} ORDER BY run_id", (job,))]


def jobs_of_sources(conn: apsw.Connection, sources: list[str]) -> list[tuple[str, str]]:
    """(name, source) of the jobs whose definition in force came from one of
    ``sources`` (file paths)."""
    if not sources:
        return []
    marks = ",".join("?" * len(sources))
    return list(conn.execute(f"SELECT name, source FROM jobs WHERE source IN ({marks})",
                             sources))


def calendar_jobs(conn: apsw.Connection) -> list[str]:
    """The names of the jobs with a calendar."""
    return [name for (name,) in conn.execute(
        "SELECT jobs.name FROM jobs JOIN specs USING(name, digest) "
        "WHERE json_extract(spec, '$.calendar') IS NOT NULL ORDER BY jobs.name")]

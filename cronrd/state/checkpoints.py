"""Checkpoints and heartbeats from inside a job, in the replicated state.

The node that starts an attempt makes it a secret token (random; the run
gets it as ``CRONRD_RUN_TOKEN``) and reports only the token's sha256 with
the attempt's start (``RunStarted.secret``), kept here in
``run_heartbeats``. A job proves with the token that it is that attempt:
`cronrd checkpoint save|get` and `cronrd heartbeat` are authorised by it,
whatever uid the job runs as, and fenced here, inside apply: a request of
an attempt that is not its record's newest one, or not running, or not on
the node that proposes it, is refused, so a stale attempt never
overwrites a newer one.

A checkpoint belongs to the record (job, origin, fire time, node key): the
last value saved by any of its attempts, with the attempt that saved it.
A retry of the record starts with it (``CRONRD_CHECKPOINT``,
``CRONRD_CHECKPOINT_ATTEMPT``, see ``env``). Values are text (they travel
in an environment variable): UTF-8 without NUL, at most ``MAX_VALUE`` bytes.

A heartbeat sets the attempt's ``heartbeat_at``, ``progress`` (0 to 1) and
``message``; a job with ``heartbeat_timeout`` whose running attempt stays
silent for that long (since its last heartbeat, or its start) is ended
``timed_out`` by the leader's duty (``HeartbeatTimeout``, ``stuck``).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import apsw

from ..schedule import iso_utc
from ..schedule.durations import human_duration
from . import queries as Q
from ..model.run import COLUMNS as RUN_COLUMNS, Run

MAX_VALUE = 64 * 1024    # bytes of UTF-8 in one checkpoint value
MAX_MESSAGE = 1000       # characters of a heartbeat's message
TOKEN_HASH_LEN = 64      # sha256 hex


def token_hash(token: str) -> str:
    """What the replicated state keeps of an attempt's token."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a checkpoint, or None."""
    if not isinstance(value, str):
        return "a checkpoint value is text"
    if "\x00" in value:
        return ("a checkpoint value cannot hold NUL bytes (it is passed to the retry in "
                "an environment variable); encode binary data, e.g. with base64")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return ("a checkpoint value is UTF-8 text, and this one holds a lone surrogate; "
                "encode binary data, e.g. with base64")
    if size > MAX_VALUE:
        return (f"the checkpoint value is {size} bytes, more than the {MAX_VALUE} bytes "
                "(64 KiB) a checkpoint may hold; save a smaller value, e.g. a position or "
                "the path of a file that holds the rest")
    return None


def message_problem(message: object) -> str | None:
    if not isinstance(message, str):
        return "a heartbeat message is text"
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        return "a heartbeat message is UTF-8 text, and this one holds a lone surrogate"
    if len(message) > MAX_MESSAGE:
        return f"the heartbeat message is longer than {MAX_MESSAGE} characters; say it shorter"
    return None


def progress_problem(progress: object) -> str | None:
    if progress is None:
        return None
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) \
            or not 0.0 <= progress <= 1.0:
        return f"progress must be a number from 0 to 1 (got {progress!r})"
    return None


# -- the attempt's token and heartbeat ---------------------------------------------------
def record_start(conn: apsw.Connection, run_id: int, secret: str) -> None:
    """Keep the token hash of an attempt that started (RunStarted)."""
    if not secret:
        return
    conn.execute("INSERT INTO run_heartbeats(run_id, token_hash) VALUES(?, ?) "
                 "ON CONFLICT(run_id) DO UPDATE SET token_hash=excluded.token_hash",
                 (run_id, secret))


def stored_hash(conn: apsw.Connection, run_id: int) -> str | None:
    h: str | None
    for (h,) in conn.execute("SELECT token_hash FROM run_heartbeats WHERE run_id=?",
                             (run_id,)):
        return h
    return None


def newer_attempt(conn: apsw.Connection, run: Run) -> int | None:
    """The newest attempt of ``run``'s record after it, or None."""
    attempt: int | None
    for (attempt,) in conn.execute(
            "SELECT MAX(attempt) FROM runs WHERE job=? AND origin=? AND fire_time=? "
            "AND target=? AND attempt>?",
            (run.job, run.origin, run.fire_time, run.target, run.attempt)):
        return attempt
    return None


def check_attempt(conn: apsw.Connection, run: Run | None, presented_hash: str, node: str | None,
                  at: float | None = None) -> str | None:
    """Why the attempt ``run`` may not save or beat with a token whose hash
    is ``presented_hash`` (proposed by ``node``; None: not a proposal), or
    None when it may. ``at``: a heartbeat made then, which an attempt that
    has ended since may still record (it was sent while it ran and reached
    the log after its end: held back a moment, runtime/control/checkpoints.py).
    Deterministic: used inside apply."""
    if run is None:
        return "no such run"
    stored = stored_hash(conn, run.run_id)
    if stored is None or not isinstance(presented_hash, str) \
            or not hmac.compare_digest(stored, presented_hash):
        return (f"the token does not belong to run {run.run_id} (CRONRD_RUN_TOKEN is "
                "given to each attempt as it starts; use the run's own)")
    if node is not None and run.node != node:
        return f"run {run.run_id} runs on node {run.node}, not on {node}"
    newer = newer_attempt(conn, run)
    if newer is not None:
        return (f"run {run.run_id} is attempt {run.attempt} of {run.key}, and attempt "
                f"{newer} has replaced it; a stale attempt cannot save or beat")
    if run.state != "running":
        if at is not None and run.finished_at is not None and at <= run.finished_at \
                and run.started_at is not None and at >= run.started_at:
            return None
        return f"run {run.run_id} is {run.state}, not running"
    return None


def beat(conn: apsw.Connection, run_id: int, at: float, progress: float | None, message: str | None) -> None:
    """Record a heartbeat made at ``at``; one older than the newest recorded
    changes nothing (a held-back beat may reach the log after a newer one)."""
    conn.execute("UPDATE run_heartbeats SET heartbeat_at=?, progress=COALESCE(?, progress), "
                 "message=COALESCE(?, message) WHERE run_id=? AND "
                 "(heartbeat_at IS NULL OR heartbeat_at <= ?)",
                 (at, progress, message, run_id, at))


def heartbeat_of(conn: apsw.Connection, run_id: int) -> tuple[float | None, float | None, str | None]:
    """(heartbeat_at, progress, message) of an attempt (Nones: it has none)."""
    row: tuple[float | None, float | None, str | None]
    for row in conn.execute("SELECT heartbeat_at, progress, message FROM run_heartbeats "
                            "WHERE run_id=?", (run_id,)):
        return row
    return None, None, None


# -- checkpoints -----------------------------------------------------------------------
def save(conn: apsw.Connection, run: Run, value: str, at: float) -> None:
    conn.execute(
        "INSERT INTO checkpoints(job, origin, fire_time, target, value, attempt, run_id, at) "
        "VALUES(?,?,?,?,?,?,?,?) ON CONFLICT(job, origin, fire_time, target) DO UPDATE SET "
        "value=excluded.value, attempt=excluded.attempt, run_id=excluded.run_id, "
        "at=excluded.at", (run.job, run.origin, run.fire_time, run.target, value,
                           run.attempt, run.run_id, at))


def of_record(conn: apsw.Connection, run: Run) -> dict[str, Any] | None:
    """The last checkpoint of ``run``'s record: {value, attempt, run_id, at}."""
    for value, attempt, run_id, at in conn.execute(
            "SELECT value, attempt, run_id, at FROM checkpoints WHERE job=? AND origin=? "
            "AND fire_time=? AND target=?", (run.job, run.origin, run.fire_time, run.target)):
        return {"value": value, "attempt": attempt, "run_id": run_id, "at": at}
    return None


def env(conn: apsw.Connection, run: Run) -> dict[str, str]:
    """``CRONRD_CHECKPOINT`` and ``CRONRD_CHECKPOINT_ATTEMPT`` for a retry of
    a record that has a checkpoint (saved by an attempt of the same chain:
    a rerun or backfill reprocess starts afresh, its retries from its
    checkpoints); {} otherwise. The same on every node."""
    if run.kind != "retry":
        return {}
    ck = of_record(conn, run)
    if ck is None or ck["attempt"] >= run.attempt:
        return {}
    # The attempt that began this chain: the newest one before ``run`` that
    # is not a retry (the first, a rerun, a reprocess).
    for (head,) in conn.execute(
            "SELECT MAX(attempt) FROM runs WHERE job=? AND origin=? AND fire_time=? AND "
            "target=? AND attempt<? AND kind!='retry'",
            (run.job, run.origin, run.fire_time, run.target, run.attempt)):
        if head is not None and ck["attempt"] < head:
            return {}
    return {"CRONRD_CHECKPOINT": ck["value"], "CRONRD_CHECKPOINT_ATTEMPT": str(ck["attempt"])}


# -- heartbeat_timeout -------------------------------------------------------------------
def silent_since(conn: apsw.Connection, run: Run) -> float | None:
    """When ``run`` was last heard of: its last heartbeat, else its start."""
    at, _p, _m = heartbeat_of(conn, run.run_id)
    return at if at is not None else run.started_at


def stuck_reason(timeout: float) -> str:
    return f"heartbeat_timeout: no heartbeat for {human_duration(timeout)}"


def running_with_timeouts(conn: apsw.Connection) -> list[tuple[Run, float, float]]:
    """``[(run, heartbeat_timeout, last heard)]`` of the running runs whose
    job's definition in force has a heartbeat_timeout (one query: the
    leader asks every duty pass)."""
    cols = ",".join(f"r.{c}" for c in RUN_COLUMNS)
    out: list[tuple[Run, float, float]] = []
    for row in list(conn.execute(
            f"SELECT {cols}, json_extract(s.spec, '$.heartbeat_timeout'), h.heartbeat_at "
            "FROM runs r JOIN jobs j ON j.name = r.job "
            "JOIN specs s ON s.name = j.name AND s.digest = j.digest "
            "LEFT JOIN run_heartbeats h ON h.run_id = r.run_id "
            f"WHERE r.{Q.ACTIVE_SQL} AND r.state = 'running' "  # (index runs_active)
            "AND json_extract(s.spec, '$.heartbeat_timeout') IS NOT NULL ORDER BY r.run_id")):
        run = Run.from_row(row[:-2])
        timeout, beat_at = row[-2], row[-1]
        last = beat_at if beat_at is not None else run.started_at
        if timeout and last is not None:
            out.append((run, float(timeout), last))
    return out


def views(conn: apsw.Connection, views_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run view with ``heartbeat_at`` (ISO), ``progress`` and
    ``heartbeat_message`` (None where the run has none)."""
    ids = [v["run_id"] for v in views_]
    found: dict[int, tuple[Any, ...]] = {}
    try:
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for rid, at, progress, message in conn.execute(
                    "SELECT run_id, heartbeat_at, progress, message FROM run_heartbeats "
                    f"WHERE run_id IN ({','.join('?' * len(chunk))})", chunk):
                found[rid] = (at, progress, message)
    except apsw.SQLError:
        pass  # a database an older version wrote, read offline: no heartbeats in it
    for v in views_:
        at, progress, message = found.get(v["run_id"], (None, None, None))
        v["heartbeat_at"] = iso_utc(at) if at is not None else None
        v["progress"] = progress
        v["heartbeat_message"] = message
    return views_


def prune(conn: apsw.Connection) -> None:

    """Forget the heartbeats of pruned runs, and the checkpoints of records
    none of whose attempts is kept."""
    conn.execute("DELETE FROM run_heartbeats WHERE run_id NOT IN (SELECT run_id FROM runs)")
    conn.execute("DELETE FROM checkpoints WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE "
                 "r.job=checkpoints.job AND r.origin=checkpoints.origin AND "
                 "r.fire_time=checkpoints.fire_time AND r.target=checkpoints.target)")

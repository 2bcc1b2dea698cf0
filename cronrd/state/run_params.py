"""A run's parameters and idempotency key (`run-now --param k=v --key KEY`),
kept beside the run record (tables ``run_params`` and ``run_keys``): a run
without either has no row, so scheduled runs cost nothing.

``run_params`` holds, per attempt, the values given for the job's
``params:`` (canonical text) and the key; a retry carries them to its new
attempt. ``run_keys`` maps ``(job, key)`` to the key's latest attempt: a
second `run-now --key` with the same key finds it and makes no new run.
The machine calls the writers from ``apply`` (deterministic: they read only
the command and the state); the readers serve the executor and the views.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import apsw

if TYPE_CHECKING:
    from ..model.run import Run


MAX_KEY = 200           # characters of an idempotency key
MAX_PARAMS = 100
MAX_VALUE = 4096


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot be an idempotency key, or None."""
    if not key or len(key) > MAX_KEY:
        return f"a key is 1 to {MAX_KEY} characters"
    if not key.isprintable() or any(c.isspace() for c in key):
        return "a key has no spaces or control characters"
    return None


def params_problem(params: object) -> str | None:
    """Why ``params`` (from a command) is not a small ``{name: text}``, or None."""
    if not isinstance(params, dict) or len(params) > MAX_PARAMS:
        return f"params must be a mapping of at most {MAX_PARAMS} names to strings"
    for name, value in params.items():
        if not (isinstance(name, str) and name and len(name) <= 64 and isinstance(value, str)
                and len(value) <= MAX_VALUE and "\0" not in value):
            return "each param is a name (1 to 64 characters) and a string value"
    return None


def run_of_key(conn: apsw.Connection, job: str, key: str) -> int | None:
    """The run (latest attempt) the key made for ``job``, if any."""
    run_id: int
    for (run_id,) in conn.execute("SELECT run_id FROM run_keys WHERE job=? AND key=?",
                                  (job, key)):
        return run_id
    return None


def record(conn: apsw.Connection, run_id: int, job: str, params: dict[str, str],
           key: str) -> None:
    """Keep a new run's parameters and key (nothing when it has neither)."""
    if not params and not key:
        return
    conn.execute("INSERT INTO run_params(run_id, params, key) VALUES(?,?,?)",
                 (run_id, json.dumps(params, sort_keys=True, separators=(",", ":")),
                  key or None))
    if key:
        conn.execute("INSERT INTO run_keys(job, key, run_id) VALUES(?,?,?)", (job, key, run_id))


def carry(conn: apsw.Connection, old_run_id: int, new_run_id: int) -> None:
    """A new attempt of ``old_run_id`` gets its parameters and key; the key
    names the new attempt from now on."""
    conn.execute("INSERT INTO run_params(run_id, params, key) SELECT ?, params, key "
                 "FROM run_params WHERE run_id=?", (new_run_id, old_run_id))
    conn.execute("UPDATE run_keys SET run_id=? WHERE run_id=?", (new_run_id, old_run_id))


def prune(conn: apsw.Connection) -> None:
    """Forget the parameters and keys of runs that were pruned."""
    conn.execute("DELETE FROM run_params WHERE run_id NOT IN (SELECT run_id FROM runs)")
    conn.execute("DELETE FROM run_keys WHERE run_id NOT IN (SELECT run_id FROM runs)")


def of_run(conn: apsw.Connection, run_id: int) -> tuple[dict[str, str], str | None]:
    """(params, key) of one run ({} and None: it has neither)."""
    for params, key in conn.execute("SELECT params, key FROM run_params WHERE run_id=?",
                                    (run_id,)):
        return json.loads(params), key
    return {}, None


def of_runs(conn: apsw.Connection,
            run_ids: list[int]) -> dict[int, tuple[dict[str, str], str | None]]:
    """(params, key) of the runs that have them, by run id."""
    out: dict[int, tuple[dict[str, str], str | None]] = {}
    try:
        for i in range(0, len(run_ids), 500):
            chunk = run_ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for run_id, params, key in conn.execute(
                    f"SELECT run_id, params, key FROM run_params WHERE run_id IN ({marks})",
                    chunk):
                out[run_id] = (json.loads(params), key)
    except apsw.SQLError:   # a database of an older version, read offline
        return {}
    return out


# A new generation of a fire time: `cronrd rerun`, or a backfill that
# reprocesses a record (an attempt after the first, made by a backfill).
# (Reruns and backfills are records of scheduled fire times: origin
# 'schedule', which lets the lookup use the runs_key index.)
_RERUN_SQL = (
    "SELECT MAX(o.attempt) FROM runs r JOIN runs o ON o.job=r.job AND "
    "o.fire_time=r.fire_time AND o.target=r.target AND o.origin='schedule' AND "
    "o.attempt<=r.attempt AND (o.kind='rerun' OR (o.kind='backfill' AND o.attempt>1)) "
    "WHERE r.run_id=? AND r.origin='schedule'")


def rerun_of(conn: apsw.Connection, run_id: int) -> int | None:
    """The attempt of the latest rerun or backfill reprocess of the run's
    fire time, up to the run's own attempt (None: there is none, it is the
    fire time's first generation; or a manual run)."""
    found: int | None
    try:
        for (found,) in conn.execute(_RERUN_SQL, (run_id,)):
            return found
    except apsw.SQLError:   # a database of an older version, read offline
        pass
    return None


def inputs(conn: apsw.Connection, run: Run) -> tuple[dict[str, str], str | None, int | None]:
    """(params, key, rerun) of a run (a ``Run``): what its workflow
    variables are made of besides the run and its job (decisions/run_env.py)."""
    params, key = of_run(conn, run.run_id)
    rerun = rerun_of(conn, run.run_id) if run.attempt > 1 and not key else None
    return params, key, rerun


def add_to_views(conn: apsw.Connection, views: list[dict[str, Any]]) -> list[dict[str, Any]]:

    """Each run view (``Run.view``) with its ``params``, ``key`` and
    ``idempotency_key`` (for `runs --json` and `show`)."""
    found = of_runs(conn, [v["run_id"] for v in views])
    for v in views:
        params, key = found.get(v["run_id"], ({}, None))
        v["params"] = params
        v["key"] = key
        rerun = rerun_of(conn, v["run_id"]) if v["attempt"] > 1 and not key else None
        v["idempotency_key"] = (f"{v['job']}/key:{key}" if key else
                                f"{v['job']}/{v['fire_time']}"
                                + (f"/rerun-{rerun}" if rerun else ""))
    return views

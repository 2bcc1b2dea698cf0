"""The reads `cronrd explain JOB --at T` needs beside queries.py: the
records of one fire time, the gaps covering it and the job's row with its
times. (The pause history is pause_log.py.)"""

from __future__ import annotations

from typing import Any

import apsw

from ..schedule import iso_utc
from ..model.run import SELECT as SELECT_RUNS, Run


def records_at(conn: apsw.Connection, job: str, fire_time: int) -> list[Run]:
    """Every scheduled-origin record of ``job`` at ``fire_time``: each
    attempt, each node's of a ``run_on: all`` job, in the order made."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE job=? AND fire_time=? AND origin='schedule' "
        "ORDER BY target, attempt, run_id", (job, fire_time))]


def latest_fire_time(conn: apsw.Connection, job: str) -> int | None:
    """The fire time of ``job``'s newest scheduled-origin record (for an
    ``@after`` child: its latest generation), or None."""
    t: int
    for (t,) in conn.execute("SELECT fire_time FROM runs WHERE job=? AND origin='schedule' "
                             "ORDER BY run_id DESC LIMIT 1", (job,)):
        return t
    return None


def fire_times_near(conn: apsw.Connection, job: str, t: int, n: int = 2) -> dict[str, list[int]]:
    """The fire times of ``job``'s scheduled-origin records nearest ``t``:
    {"before": [up to n, newest first], "after": [up to n, oldest first]}."""
    return {"before": [r for (r,) in conn.execute(
                "SELECT DISTINCT fire_time FROM runs WHERE job=? AND origin='schedule' AND "
                "fire_time<? ORDER BY fire_time DESC LIMIT ?", (job, t, n))],
            "after": [r for (r,) in conn.execute(
                "SELECT DISTINCT fire_time FROM runs WHERE job=? AND origin='schedule' AND "
                "fire_time>? ORDER BY fire_time LIMIT ?", (job, t, n))]}


def gaps_covering(conn: apsw.Connection, job: str, t: int) -> list[dict[str, Any]]:
    """The gap records (fire times skipped in bulk) whose range holds ``t``."""
    return [{"gap_id": r[0], "first": iso_utc(r[1]), "last": iso_utc(r[2]), "count": r[3],
             "reason": r[4], "recorded_at": iso_utc(r[5])}
            for r in conn.execute(
                "SELECT gap_id, first, last, count, reason, created_at FROM gaps "
                "WHERE job=? AND first <= ? AND last >= ? ORDER BY gap_id", (job, t, t))]


def job_times(conn: apsw.Connection, job: str) -> dict[str, Any] | None:

    """When job ``job`` was created, since when a node has had the
    definition in force (``updated_at``: the earliest of its sources with
    that digest), and its cursor; None if it is not defined."""
    for created, updated, cursor in conn.execute(
            "SELECT created_at, (SELECT MIN(s.updated_at) FROM job_sources s WHERE "
            "s.name = j.name AND s.digest = j.digest), cursor FROM jobs j WHERE name=?",
            (job,)):
        return {"created_at": created, "updated_at": created if updated is None else updated,
                "cursor": cursor}
    return None

"""What ``/metrics`` reads from the replicated state: one query per metric
family, never one per job (a scrape of 100,000 jobs is a handful of indexed
scans); the per-job ones are read as the page is rendered, not held whole."""

from __future__ import annotations

from typing import Any, Iterator

import apsw


def running_of_every_job(conn: apsw.Connection) -> Iterator[tuple[str, int]]:
    """(job, runs running now) of every known job, 0 included, by job, as read."""
    return iter(conn.execute(
        "SELECT jobs.name, COALESCE(r.n, 0) FROM jobs LEFT JOIN (SELECT job, COUNT(*) AS n "
        "FROM runs WHERE state IN ('pending', 'assigned', 'running', 'waiting') AND state = "
        "'running' GROUP BY job) AS r ON r.job = jobs.name ORDER BY jobs.name"))


def outcomes(conn: apsw.Connection) -> list[tuple[str, str, str, str, int]]:
    """(job, origin, outcome, reason, count) of every known job's ended runs
    (job_outcomes: counted as records end, never lowered by pruning)."""
    return list(conn.execute(
        "SELECT o.job, o.origin, o.outcome, o.reason, o.n FROM job_outcomes AS o "
        "JOIN jobs ON jobs.name = o.job ORDER BY o.job, o.origin, o.outcome, o.reason"))


def histograms(conn: apsw.Connection, metric: str) -> Iterator[tuple[Any, ...]]:
    """(job, b0..b9, sum, count) of every known job with an observation of
    ``metric`` (duration | delay: job_histograms, kept by triggers), by job,
    as read (a scrape does not hold 100,000 rows at once)."""
    cols = ", ".join(f"h.b{i}" for i in range(10))
    return iter(conn.execute(
        f"SELECT h.job, {cols}, h.sum, h.count FROM job_histograms AS h "
        "JOIN jobs ON jobs.name = h.job WHERE h.metric = ? ORDER BY h.job", (metric,)))


def open_alerts(conn: apsw.Connection) -> list[tuple[str, str, int]]:
    """(job, kind, count) of the open alerts (the partial index alerts_open)."""
    return list(conn.execute(
        "SELECT job, kind, COUNT(*) FROM alerts WHERE state = 'open' "
        "GROUP BY job, kind ORDER BY job, kind"))


def dead_letter_open(conn: apsw.Connection) -> list[tuple[str, int]]:
    """(job, count) of the open dead-letter entries (index dead_letter_open)."""
    return list(conn.execute(
        "SELECT job, COUNT(*) FROM dead_letter WHERE state = 'open' GROUP BY job ORDER BY job"))


def notify_outcomes(conn: apsw.Connection) -> list[tuple[str, str, int]]:
    """(notifier, outcome, count) of every delivery attempt recorded."""
    return list(conn.execute(
        "SELECT notifier, outcome, n FROM notify_outcomes ORDER BY notifier, outcome"))


def histogram_total(conn: apsw.Connection, metric: str) -> tuple[Any, ...]:
    """(b0..b9, sum, count) of ``metric`` over every job's row, removed jobs
    included (a total that never goes down)."""
    cols = ", ".join(f"COALESCE(SUM(b{i}), 0)" for i in range(10))
    return next(iter(conn.execute(
        f"SELECT {cols}, COALESCE(SUM(sum), 0.0), COALESCE(SUM(count), 0) "
        "FROM job_histograms WHERE metric = ?", (metric,))))


def job_count(conn: apsw.Connection) -> int:
    """How many jobs are known."""
    count: int = next(iter(conn.execute("SELECT COUNT(*) FROM jobs")))[0]
    return count


def run_counts(conn: apsw.Connection, zero: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """(job, origin, outcome, count) of every known job's ended runs, by job,
    origin and outcome, as read; each job has its origin "schedule" outcomes
    ``zero`` from its load, at 0 when none happened."""
    zeros = " UNION ALL ".join("SELECT ?" for _ in zero)
    return iter(conn.execute(
        "SELECT job, origin, outcome, MAX(n) FROM ("
        "SELECT o.job AS job, o.origin AS origin, o.outcome AS outcome, SUM(o.n) AS n "
        "FROM job_outcomes AS o JOIN jobs ON jobs.name = o.job WHERE o.outcome != 'skipped' "
        "GROUP BY 1, 2, 3 "
        f"UNION ALL SELECT jobs.name, 'schedule', z.outcome, 0 FROM jobs, "
        f"(SELECT NULL AS outcome WHERE 0 UNION ALL {zeros}) AS z"
        ") GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", zero))


def skip_counts(conn: apsw.Connection) -> Iterator[tuple[Any, ...]]:
    """(job, reason, count) of every known job's skipped fire times (every
    origin together), by job and reason, as read."""
    return iter(conn.execute(
        "SELECT o.job, o.reason, SUM(o.n) FROM job_outcomes AS o JOIN jobs ON "
        "jobs.name = o.job WHERE o.outcome = 'skipped' GROUP BY 1, 2 ORDER BY 1, 2"))


def last_successes(conn: apsw.Connection) -> Iterator[tuple[Any, ...]]:

    """(job, finished_at) of each job's newest success, by job, as read."""
    return iter(conn.execute(
        "SELECT job, MAX(finished_at) FROM runs WHERE state = 'succeeded' "
        "AND finished_at IS NOT NULL GROUP BY job ORDER BY job"))

"""What ``/metrics`` reads from the replicated state: one query per metric
family, never one per job (a scrape of 100,000 jobs is a handful of indexed
scans)."""

from __future__ import annotations

import apsw


def job_names(conn: apsw.Connection) -> list[str]:
    """Every known job, by name (the primary key's order)."""
    return [name for (name,) in conn.execute("SELECT name FROM jobs ORDER BY name")]


def running_by_job(conn: apsw.Connection) -> dict[str, int]:
    """Runs now running, per job (the partial index of active runs)."""
    return {job: n for job, n in conn.execute(
        "SELECT job, COUNT(*) FROM runs WHERE state IN ('pending', 'assigned', 'running', "
        "'waiting') AND state = 'running' GROUP BY job")}


def last_success_by_job(conn: apsw.Connection) -> dict[str, float]:
    """When each job's newest success ended (the index of successes)."""
    return {job: at for job, at in conn.execute(
        "SELECT job, MAX(finished_at) FROM runs WHERE state = 'succeeded' "
        "AND finished_at IS NOT NULL GROUP BY job")}


def outcomes(conn: apsw.Connection) -> list[tuple[str, str, str, str, int]]:
    """(job, origin, outcome, reason, count) of every known job's ended runs
    (job_outcomes: counted as records end, never lowered by pruning)."""
    return list(conn.execute(
        "SELECT o.job, o.origin, o.outcome, o.reason, o.n FROM job_outcomes AS o "
        "JOIN jobs ON jobs.name = o.job ORDER BY o.job, o.origin, o.outcome, o.reason"))


def histograms(conn: apsw.Connection, metric: str) -> list[tuple]:
    """(job, b0..b9, sum, count) of every known job with an observation of
    ``metric`` (duration | delay: job_histograms, kept by triggers)."""
    cols = ", ".join(f"h.b{i}" for i in range(10))
    return list(conn.execute(
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


def histogram_total(conn: apsw.Connection, metric: str) -> tuple:
    """(b0..b9, sum, count) of ``metric`` over every job's row, removed jobs
    included (a total that never goes down)."""
    cols = ", ".join(f"COALESCE(SUM(b{i}), 0)" for i in range(10))
    return next(iter(conn.execute(
        f"SELECT {cols}, COALESCE(SUM(sum), 0.0), COALESCE(SUM(count), 0) "
        "FROM job_histograms WHERE metric = ?", (metric,))))

"""What /metrics reads (cronrd/state/metric_reads.py), and the job_outcomes
counts behind cronrd_job_runs_total: kept by triggers as records end, seeded
from the records when an older database first gets the table."""

from __future__ import annotations

from cronrd.state import metric_reads as R
from cronrd.state.machine import StateMachine
from tests.unit.state.test_state import T0, Log


def test_outcomes_count_each_record_once_as_it_ends():
    log = Log()
    log.put("a")
    run = log.fire(T0 + 1, "a")
    assert R.outcomes(log.sm.conn) == []  # assigned: not ended
    log.finish(run["run_id"], state="failed", exit_code=1)
    log.fire(T0 + 2, "a", skip_reason="max_running (3) reached")
    log.fire(T0 + 3, "a", skip_reason="Catch-up skipped it")  # no leading code word
    assert R.outcomes(log.sm.conn) == [("a", "schedule", "failed", "", 1),
                                       ("a", "schedule", "skipped", "max_running", 1),
                                       ("a", "schedule", "skipped", "other", 1)]


def test_an_older_database_is_seeded_from_its_records():
    log = Log()
    log.put("a")
    for t in (1, 2):
        log.finish(log.fire(T0 + t, "a")["run_id"])
    conn = log.sm.conn
    conn.execute("DROP TABLE job_outcomes")  # as a database made before it
    StateMachine(conn)  # migrate() at open
    assert R.outcomes(conn) == [("a", "schedule", "succeeded", "", 2)]
    assert list(R.last_successes(conn)) == [("a", T0 + 3)]
    assert R.job_count(conn) == 1


def test_histograms_and_notification_counts_of_an_older_database_are_seeded():
    from cronrd.state import commands as C
    from cronrd.state import events as EV
    log = Log()
    log.put("a")
    for t in (1, 2):
        log.finish(log.fire(T0 + t, "a")["run_id"], at=T0 + t + 3)
    eid = EV.emit(log.sm.conn, "failed", job="a", at=T0)
    log.apply(C.DeliveryResult(at=T0, leader="n1", attempts=[[eid, "c", 1, False, True, "x"]]))
    conn = log.sm.conn
    before = (list(R.histograms(conn, "duration")), list(R.histograms(conn, "delay")),
              R.notify_outcomes(conn))
    assert before[0] == [("a", 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 6.0, 2)]
    assert before[2] == [("c", "given_up", 1)]
    conn.execute("DROP TABLE job_histograms; DROP TABLE notify_outcomes")
    StateMachine(conn)  # migrate() at open
    assert (list(R.histograms(conn, "duration")), list(R.histograms(conn, "delay")),
            R.notify_outcomes(conn)) == before


def test_the_per_job_reads_use_their_indexes():
    log = Log()
    plans = {name: " ".join(str(r[-1]) for r in log.sm.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
             for name, sql in (
                 ("alerts", "SELECT job, kind, COUNT(*) FROM alerts WHERE state = 'open' "
                            "GROUP BY job, kind"),
                 ("dead_letter", "SELECT job, COUNT(*) FROM dead_letter WHERE state = 'open' "
                                 "GROUP BY job"))}
    assert "alerts_open" in plans["alerts"], plans
    assert "dead_letter_open" in plans["dead_letter"], plans


def test_run_counts_have_every_jobs_zeros_and_leave_the_skips_to_the_skip_counts():
    log = Log()
    log.put("a")
    log.put("idle")
    log.finish(log.fire(T0 + 1, "a")["run_id"])
    log.fire(T0 + 2, "a", skip_reason="overlap: run 1")
    log.fire(T0 + 3, "a", skip_reason="max_running (1) reached")
    log.fire(T0 + 4, "a", skip_reason="overlap: run 2")
    assert list(R.run_counts(log.sm.conn, ("succeeded", "failed"))) == [
        ("a", "schedule", "failed", 0), ("a", "schedule", "succeeded", 1),
        ("idle", "schedule", "failed", 0), ("idle", "schedule", "succeeded", 0)]
    assert list(R.skip_counts(log.sm.conn)) == [("a", "max_running", 1), ("a", "overlap", 2)]
    assert R.job_count(log.sm.conn) == 2
    assert list(R.last_successes(log.sm.conn)) == [("a", T0 + 2)]

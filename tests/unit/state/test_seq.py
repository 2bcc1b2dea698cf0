"""Ids that only grow (cronrd/state/seq.py): a run or alert id pruned away
is never given to another run or alert."""

from __future__ import annotations

from cronrd.state import alerts as AL
from cronrd.state import commands as C
from tests.unit.state.test_backfill import finish
from tests.unit.state.test_state import T0, Log


def test_a_run_id_is_not_given_again_once_every_run_was_pruned():
    # Before: SQLite's largest-plus-one gave the next run the id of the
    # pruned newest one (`cronrd logs 3` would show another run's log).
    log = Log()
    log.put(schedule="* * * * * *")
    ids = [log.fire(T0 + i)["run_id"] for i in (1, 2, 3)]
    for rid in ids:
        finish(log, rid, at=T0 + 5)
    log.apply(C.Prune(before=T0 + 1000, at=T0 + 1000))
    assert list(log.sm.conn.execute("SELECT run_id FROM runs")) == []
    new = log.fire(T0 + 1001)["run_id"]
    assert new == max(ids) + 1


def test_an_alert_id_is_not_given_again_once_pruned():
    log = Log()
    conn = log.sm.conn
    first = AL.raise_alert(conn, job="j", fire_time=1, kind="failed", detail="x", at=T0)
    second = AL.raise_alert(conn, job="j", fire_time=2, kind="failed", detail="x", at=T0)
    assert AL.raise_alert(conn, job="j", fire_time=2, kind="failed", detail="x",
                          at=T0) is None          # one per (job, fire time, kind)
    conn.execute("DELETE FROM alerts")
    third = AL.raise_alert(conn, job="j", fire_time=3, kind="failed", detail="x", at=T0)
    assert first < second < third


def test_the_id_counters_are_in_the_full_digest():
    # two states alike but for a counter would give different ids next
    a, b = Log(), Log()
    for log in (a, b):
        log.put(schedule="* * * * * *")
    assert a.sm.full_digest() == b.sm.full_digest()
    b.sm.conn.execute("INSERT INTO meta(key, value) VALUES('run_seq', 99)")
    assert a.sm.full_digest() != b.sm.full_digest()

"""What a restarted daemon does with each run it had in flight
(cronrd/runtime/runs/recovery.py): pure, no processes."""

from __future__ import annotations

import dataclasses

from cronrd.runtime.runs import recovery as R
from cronrd.runtime.runs.records import Record, Seen
from cronrd.model.run import Run
from cronrd.model.run_states import RunState


def rec(key="7.a", started=True, status=None, **kw) -> Record:
    return Record(key=key, run_id=7, path=f"/runs/{key}", boot="b", sup=100, sup_start=1,
                  pid=101, pid_start=2, spawned_at=1.0, started_at=2.0 if started else None,
                  status=status, **kw)


def seen(r: Record, *, boot=True, sup=True, job=True) -> Seen:
    return Seen(r, boot, sup, job)


ASSIGNED = Run(run_id=7, job="j", origin="schedule", kind="scheduled", fire_time=1800000000,
               attempt=1, target="", state=RunState.ASSIGNED, node="n1", token=3,
               due_at=1800000000.0, created_at=1799999999.0)
RUNNING = dataclasses.replace(ASSIGNED, state=RunState.RUNNING, pid=101, started_at=2.0)


def test_a_live_supervisor_means_adopt():
    s = seen(rec())
    assert R.decide(RUNNING, [s], legacy=False) == R.Settle(R.ADOPT, s)
    # Even if the cluster had not heard it started: the record says so.
    assert R.decide(ASSIGNED, [s], legacy=False).kind == R.ADOPT


def test_an_exit_status_means_collect_whatever_the_processes_do_now():
    s = seen(rec(status=7 << 8), sup=False, job=False)
    assert R.decide(RUNNING, [s], legacy=False) == R.Settle(R.COLLECT, s)


def test_supervisor_gone_without_a_word_is_lost_and_an_orphaned_job_is_killed():
    s = seen(rec(), sup=False, job=True)
    got = R.decide(RUNNING, [s], legacy=False)
    assert got.kind == R.LOST and got.kill == (s,)
    assert got.reason == ("cronrd restarted during the run and its supervisor is gone too; "
                          "its processes were stopped (retried per on_node_loss)")
    quiet = R.decide(RUNNING, [seen(rec(), sup=False, job=False)], legacy=False)
    assert quiet.kill == () and "processes were stopped" not in quiet.reason


def test_after_a_reboot_nothing_is_killed_by_an_old_pid():
    got = R.decide(RUNNING, [seen(rec(), boot=False, sup=False, job=False)], legacy=False)
    assert got.kind == R.LOST and got.kill == ()
    assert got.reason.startswith("the host restarted during the run")


def test_never_started_spawns_are_killed_and_removed_and_the_run_starts_again():
    waiting = seen(rec(key="7.a", started=False))
    got = R.decide(ASSIGNED, [waiting], legacy=False)
    assert got == R.Settle(R.START_AGAIN, kill=(waiting,), remove=("/runs/7.a",))
    # A run the cluster saw running whose command never started: lost.
    assert R.decide(RUNNING, [waiting], legacy=False).kind == R.LOST


def test_the_started_spawn_counts_and_older_ones_are_cleared():
    old = seen(rec(key="7.a", started=False), job=False)
    live = seen(rec(key="7.b"))
    got = R.decide(RUNNING, [old, live], legacy=False)
    assert got.kind == R.ADOPT and got.seen is live and got.remove == ("/runs/7.a",)


def test_no_record_only_searches_processes_at_the_first_supervised_start():
    assert R.decide(RUNNING, [], legacy=True).kind == R.LEGACY
    assert R.decide(ASSIGNED, [], legacy=False).kind == R.START_AGAIN
    lost = R.decide(RUNNING, [], legacy=False)
    assert lost.kind == R.LOST and lost.seen is None and "left no record" in lost.reason

"""Backfills and reruns in the replicated state: one record per fire time,
the parallel limit enforced by apply, the object's life cycle."""

from __future__ import annotations

import random

import pytest

from cronrd.state import backfill as BF
from cronrd.state import commands as C
from cronrd.errors import Refused
from replay import Replay

from .test_state import T0, Log, apply_all, random_commands

MIN = 60
PAST = [T0 - MIN * k for k in range(6, 0, -1)]   # six past minutes, oldest first


def log_with_job(**over) -> Log:
    log = Log()
    log.put(schedule="* * * * *", **over)
    return log


def create(log: Log, times=PAST, **kw) -> dict:
    kw.setdefault("reprocess", "missing")
    kw.setdefault("parallel", 2)
    kw.setdefault("order", "oldest")
    return log.apply(C.CreateBackfill(job="j", fire_times=list(times), from_time=min(times),
                                      to_time=max(times), at=T0 + 1, **kw))


def step(log: Log, bid: int, at=T0 + 2) -> dict:
    return log.apply(C.BackfillStep(backfill=bid, at=at))


def runs(log: Log) -> list[tuple]:
    return list(log.sm.conn.execute(
        "SELECT run_id, fire_time, attempt, kind, state FROM runs ORDER BY run_id"))


def active(log: Log) -> int:
    return next(iter(log.sm.conn.execute(
        "SELECT count(*) FROM runs WHERE state IN ('pending','assigned','running')")))[0]


def finish(log: Log, run_id: int, state="succeeded", at=T0 + 3):
    state_now, token = next(iter(log.sm.conn.execute(
        "SELECT state, token FROM runs WHERE run_id=?", (run_id,))))
    if state_now == "pending":
        log.apply(C.AssignRun(run_id=run_id, node="n1", at=at))
        token = log.index
    log.apply(C.RunStarted(run_id=run_id, token=token, node="n1", pid=10, started_at=at,
                           log_path="/l"))
    log.apply(C.RunFinished(run_id=run_id, token=token, node="n1", state=state,
                            exit_code=0 if state == "succeeded" else 1, signal=None,
                            started_at=at, finished_at=at + 1, log_path="/l"))


def test_a_backfill_releases_at_most_parallel_runs_and_finishes():
    log = log_with_job(concurrency="allow")
    bid = create(log)["backfill"]
    first = step(log, bid)
    assert len(first["released"]) == 2
    # Another step (a second leader's, say) releases nothing more: apply counts.
    assert step(log, bid)["released"] == []
    assert active(log) == 2
    done = set()
    while len(done) < 6:
        ids = [r[0] for r in runs(log) if r[4] == "pending"]
        assert 0 < len(ids) <= 2
        for rid in ids:
            finish(log, rid)
            done.add(rid)
        step(log, bid)
        assert active(log) <= 2
    rows = runs(log)
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        (t, 1, "backfill", "succeeded") for t in PAST]
    [bf] = BF.listing(log.sm.conn)
    assert bf["state"] == "done" and bf["counts"]["done"] == 6
    assert bf["outcomes"] == {"succeeded": 6}


def test_newest_order_releases_the_latest_fire_times_first():
    log = log_with_job(concurrency="allow")
    bid = create(log, order="newest", parallel=3)["backfill"]
    step(log, bid)
    assert sorted(r[1] for r in runs(log)) == PAST[-3:]


def test_reprocess_adds_an_attempt_to_the_existing_record_never_a_second_record():
    log = log_with_job(concurrency="allow")
    # the scheduler's own records: T0-5m failed, T0-4m succeeded
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (T0 - 6 * MIN - 1,))
    log.fire(PAST[1], due_at=PAST[1])
    log.fire(PAST[2], due_at=PAST[2])
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (T0,))
    failed, ok = [r[0] for r in runs(log)]
    for rid, st in ((failed, "failed"), (ok, "succeeded")):
        token = next(iter(log.sm.conn.execute("SELECT token FROM runs WHERE run_id=?",
                                              (rid,))))[0]
        log.apply(C.RunFinished(run_id=rid, token=token, node="n1", state=st,
                                exit_code=1, signal=None, started_at=T0, finished_at=T0,
                                log_path="/l"))
    res = create(log, reprocess="failed", parallel=10)
    assert res["skipped"] == 1          # the success
    step(log, res["backfill"])
    rows = runs(log)
    by_time = {}
    for _rid, t, attempt, kind, _st in rows:
        by_time.setdefault(t, []).append((attempt, kind))
    assert by_time[PAST[1]] == [(1, "scheduled"), (2, "backfill")]
    assert by_time[PAST[2]] == [(1, "scheduled")]
    assert all(v == [(1, "backfill")] for t, v in by_time.items() if t not in PAST[1:3])
    # exactly one record per (job, fire_time): attempts, never a second attempt 1
    assert not list(log.sm.conn.execute(
        "SELECT fire_time FROM runs GROUP BY fire_time, attempt HAVING count(*) > 1"))


def test_fire_times_after_the_cursor_are_left_to_the_scheduler():
    log = log_with_job(concurrency="allow")
    res = create(log, times=PAST + [T0 + MIN], parallel=10)
    assert res["skipped"] == 1
    step(log, res["backfill"])
    assert T0 + MIN not in [r[1] for r in runs(log)]
    [(_t, state, note, _r, _o)] = [i for i in BF.items(log.sm.conn, res["backfill"])
                                   if i[0] == T0 + MIN]
    assert state == "skipped" and "scheduler" in note


def test_forbid_queues_one_at_a_time_behind_every_run_of_the_job():
    log = log_with_job(concurrency="forbid")
    bid = create(log, parallel=4)["backfill"]
    assert len(step(log, bid)["released"]) == 1
    assert step(log, bid)["released"] == []


def test_a_backfill_yields_to_an_on_time_run():
    log = log_with_job(concurrency="allow")
    log.fire(T0 + MIN, due_at=T0 + MIN)      # an on-time run, assigned ahead
    bid = create(log)["backfill"]
    assert step(log, bid)["released"] == []
    on_time = runs(log)[0][0]
    finish(log, on_time)
    assert len(step(log, bid)["released"]) == 2


def test_pause_resume_cancel():
    log = log_with_job(concurrency="allow")
    bid = create(log, parallel=1)["backfill"]
    step(log, bid)
    assert log.apply(C.SetBackfillState(backfill=bid, state="paused", at=T0 + 2))["changed"]
    finish(log, runs(log)[0][0])
    step(log, bid)                              # accounts for the ended run, releases none
    assert len(runs(log)) == 1
    assert not BF.movable(log.sm.conn, bid, log.sm._job_spec("j"), None)
    log.apply(C.SetBackfillState(backfill=bid, state="running", at=T0 + 4))
    assert len(step(log, bid)["released"]) == 1
    log.apply(C.SetBackfillState(backfill=bid, state="cancelled", at=T0 + 5, who="root"))
    [bf] = BF.listing(log.sm.conn)
    assert bf["state"] == "cancelled" and bf["counts"]["cancelled"] == 4
    with pytest.raises(Refused, match="cancelled already"):
        log.apply(C.SetBackfillState(backfill=bid, state="running", at=T0 + 6))
    # the run released before the cancel finishes and is accounted for
    finish(log, runs(log)[1][0])
    step(log, bid)
    assert BF.listing(log.sm.conn)[0]["counts"]["done"] == 2


def test_a_paused_job_holds_its_backfill():
    log = log_with_job(concurrency="allow")
    bid = create(log)["backfill"]
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 1))
    assert step(log, bid)["released"] == []
    log.apply(C.SetPaused(name="j", paused=False, at=T0 + 1))
    assert len(step(log, bid)["released"]) == 2


def test_one_open_backfill_per_job_and_checked_arguments():
    log = log_with_job(concurrency="allow")
    bid = create(log)["backfill"]
    with pytest.raises(Refused, match=f"backfill {bid} still open"):
        create(log)
    with pytest.raises(Refused, match="reprocess must be"):
        log.apply(C.CreateBackfill(job="j", fire_times=[PAST[0]], from_time=PAST[0],
                                   to_time=PAST[0], reprocess="some", parallel=1,
                                   order="oldest", at=T0))
    with pytest.raises(Refused, match="within the range"):
        log.apply(C.CreateBackfill(job="j", fire_times=[PAST[0] - 1], from_time=PAST[0],
                                   to_time=PAST[0], reprocess="all", parallel=1,
                                   order="oldest", at=T0))


def test_rerun_is_a_new_attempt_of_the_record():
    log = log_with_job(concurrency="allow")
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (PAST[0] - 1,))
    log.fire(PAST[0], due_at=PAST[0])
    rid = runs(log)[0][0]
    with pytest.raises(Refused, match="attempt 1 is assigned"):
        log.apply(C.Rerun(job="j", fire_time=PAST[0], at=T0))
    token = next(iter(log.sm.conn.execute("SELECT token FROM runs WHERE run_id=?", (rid,))))[0]
    log.apply(C.RunFinished(run_id=rid, token=token, node="n1", state="succeeded",
                            exit_code=0, signal=None, started_at=T0, finished_at=T0,
                            log_path="/l"))
    res = log.apply(C.Rerun(job="j", fire_time=PAST[0], at=T0 + 1, who="root"))
    assert res["attempt"] == 2
    assert [(r[1], r[2], r[3]) for r in runs(log)] == [(PAST[0], 1, "scheduled"),
                                                        (PAST[0], 2, "rerun")]
    with pytest.raises(Refused, match="no record at fire time"):
        log.apply(C.Rerun(job="j", fire_time=PAST[1], at=T0 + 1))


def _with_backfills(rng: random.Random, n: int) -> list:
    cmds = random_commands(rng, n)
    out = []
    for cmd in cmds:
        out.append(cmd)
        r = rng.random()
        if r < 0.05:
            t = int(cmd.at) if hasattr(cmd, "at") else T0
            out.append(C.CreateBackfill(job=rng.choice("abc"),
                                        fire_times=[t - k for k in range(1, 8)],
                                        from_time=t - 7, to_time=t - 1,
                                        reprocess=rng.choice(["missing", "failed", "all"]),
                                        parallel=rng.randint(1, 3),
                                        order=rng.choice(["oldest", "newest"]), at=t))
        elif r < 0.2:
            out.append(C.BackfillStep(backfill=rng.randint(1, 4), at=T0 + len(out)))
        elif r < 0.22:
            out.append(C.SetBackfillState(backfill=rng.randint(1, 4),
                                          state=rng.choice(["paused", "running", "cancelled"]),
                                          at=T0))
        elif r < 0.25:
            out.append(C.Rerun(job=rng.choice("abc"), fire_time=T0 + rng.randint(0, 60),
                               at=T0 + len(out)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_backfill_histories_are_deterministic_and_keep_one_record_per_fire_time(seed):
    cmds = _with_backfills(random.Random(seed), 300)
    d1, r1 = apply_all(cmds, batch=1)
    d2, r2 = apply_all(cmds, batch=29)
    assert d1 == d2 and r1 == r2
    replay = Replay()
    sm = replay.sm
    for cmd in cmds:
        replay.apply(cmd)
        # never more in flight than the backfill's parallel
        for bid, par in list(sm.conn.execute("SELECT id, parallel FROM backfills")):
            n = next(iter(sm.conn.execute(
                "SELECT count(*) FROM backfill_items i JOIN backfills b ON b.id = i.backfill "
                "JOIN runs r ON r.job = b.job AND r.fire_time = i.fire_time AND "
                "r.origin='schedule' AND r.state IN ('pending','assigned','running') "
                "WHERE i.backfill=? AND i.state='released' AND r.kind='backfill'", (bid,))))[0]
            assert n <= par
    assert not list(sm.conn.execute(
        "SELECT job, fire_time, target, attempt FROM runs WHERE origin='schedule' "
        "GROUP BY 1,2,3,4 HAVING COUNT(*) > 1"))


def test_random_histories_do_release_backfill_runs():
    released = 0
    for seed in range(8):
        _, results = apply_all(_with_backfills(random.Random(seed), 300), batch=1)
        released += sum(len(res.get("released", [])) for kind, res in results
                        if kind == "ok" and isinstance(res, dict))
    assert released >= 2   # the histories above are not all refusals


def test_the_listing_says_why_an_open_backfill_is_held():
    log = log_with_job(concurrency="allow")
    create(log)
    assert BF.listing(log.sm.conn)[0]["held"] is None
    log.apply(C.SetPaused(name="", paused=True, at=T0 + 1))
    assert BF.listing(log.sm.conn)[0]["held"] == "maintenance pause of every job"


def _end_newest(log: Log, state: str, at: float) -> tuple:
    """End the newest attempt of j@PAST[0] ``state`` (lost: its node is lost)."""
    rid, run_state, token = next(iter(log.sm.conn.execute(
        "SELECT run_id, state, token FROM runs WHERE job='j' ORDER BY attempt DESC LIMIT 1")))
    if run_state == "pending":
        log.apply(C.AssignRun(run_id=rid, node="n1", at=at))
        token = log.index
    log.apply(C.RunStarted(run_id=rid, token=token, node="n1", pid=10, started_at=at,
                           log_path="/l"))
    if state == "lost":
        return log.apply(C.NodeLost(node="n1", at=at + 1, reason="node n1 is down"))
    log.apply(C.RunFinished(run_id=rid, token=token, node="n1", state=state, exit_code=1,
                            signal=None, started_at=at, finished_at=at + 1, log_path="/l"))
    return {}


def test_a_rerun_has_retries_of_its_own_and_a_lost_rerun_is_run_again():
    # Before the fix the retries counted from the record's first attempt: a
    # rerun after the retries were spent had none, and a rerun lost with its
    # node was never run again (at-least-once broken; --downstream then
    # reported its consumers upstream_failed).
    log = log_with_job(concurrency="allow", retries={"max": 1, "delay": 0})
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (PAST[0] - 1,))
    log.fire(PAST[0], due_at=PAST[0])
    _end_newest(log, "failed", T0)          # attempt 1 fails
    _end_newest(log, "failed", T0 + 2)      # its retry, attempt 2, fails: spent
    assert [r[3] for r in runs(log)] == ["scheduled", "retry"]
    log.apply(C.Rerun(job="j", fire_time=PAST[0], at=T0 + 10))
    _end_newest(log, "failed", T0 + 11)     # the rerun, attempt 3, fails...
    assert [(r[3], r[4]) for r in runs(log)][-1] == ("retry", "assigned")  # ...and is retried
    _end_newest(log, "failed", T0 + 13)     # attempt 4 fails: this try is spent
    assert len(runs(log)) == 4
    log.apply(C.Rerun(job="j", fire_time=PAST[0], at=T0 + 20))
    res = _end_newest(log, "lost", T0 + 21)  # the rerun's node is lost
    assert len(res["retries"]) == 1
    assert [(r[2], r[3], r[4]) for r in runs(log)][-1] == (6, "retry", "pending")


def test_a_record_waiting_in_its_queue_is_not_rerun_and_its_failure_is_still_recorded():
    # Found in review: a rerun of a record whose attempt waited in the queue
    # made attempt 2; when attempt 1 then failed, its retry (attempt 2 again)
    # broke the unique key and the whole RunFinished was refused: the run
    # stayed running for ever and the queue stuck.
    log = Log()
    log.put(schedule="* * * * *", concurrency="queue", retries={"max": 1, "delay": 0})
    first = log.fire(T0 + 60)["run_id"]
    second = log.fire(T0 + 120)["run_id"]
    assert log.run(second).state == "waiting"
    with pytest.raises(Refused, match="attempt 1 is waiting"):
        log.apply(C.Rerun(job="j", fire_time=T0 + 120, at=T0 + 121))
    finish(log, first, at=T0 + 125)
    finish(log, second, state="failed", at=T0 + 130)
    assert log.run(second).state == "failed"
    assert [(r[2], r[3]) for r in runs(log) if r[1] == T0 + 120] == [(1, "scheduled"),
                                                                      (2, "retry")]

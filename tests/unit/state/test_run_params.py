"""Run parameters and idempotency keys in the state machine: ManualRun with
params and a key, a repeated key (no second run), retries that carry both,
prune, malformed commands, determinism, and the encoding of a plain
ManualRun (the bytes of earlier versions)."""

from __future__ import annotations

import json
import random

import apsw
import pytest

from cronrd.schedule import iso_utc
from cronrd.state import commands as C
from cronrd.decisions.run_env import idempotency_key
from cronrd.state import run_params as RP
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from tests.unit.state.test_state import T0, Log


def manual(log: Log, at=T0 + 10, **kw):
    return log.apply(C.ManualRun(job="j", node="n1", at=at, **kw))


def test_params_and_key_are_stored_with_the_run():
    log = Log()
    log.put()
    res = manual(log, params={"day": "2026-01-01"}, key="load-2026-01-01")
    assert res == {"run_id": 1, "state": "assigned"}
    assert RP.of_run(log.sm.conn, 1) == ({"day": "2026-01-01"}, "load-2026-01-01")
    assert RP.run_of_key(log.sm.conn, "j", "load-2026-01-01") == 1


def test_a_plain_manual_run_has_no_row():
    log = Log()
    log.put()
    manual(log)
    assert RP.of_run(log.sm.conn, 1) == ({}, None)
    assert list(log.sm.conn.execute("SELECT COUNT(*) FROM run_params")) == [(0,)]


def test_a_repeated_key_returns_the_existing_run_and_makes_none():
    log = Log()
    log.put()
    first = manual(log, key="k1")
    log.effects.clear()
    again = manual(log, at=T0 + 20, key="k1", params={"x": "other"})
    assert again == {"run_id": first["run_id"], "state": "assigned", "existing": True}
    assert log.effects == []
    assert list(log.sm.conn.execute("SELECT COUNT(*) FROM runs")) == [(1,)]
    # even while it runs (concurrency: forbid would refuse a new run)
    log.apply(C.RunStarted(run_id=1, token=log.run(1).token, node="n1", pid=5,
                           started_at=T0 + 11, log_path="/l"))
    assert manual(log, at=T0 + 30, key="k1") == {"run_id": 1, "state": "running",
                                                  "existing": True}
    # another key, another job's same key: new runs
    log.finish(1)
    assert manual(log, at=T0 + 40, key="k2")["run_id"] == 2
    log.put(name="other")
    assert log.apply(C.ManualRun(job="other", node="n1", at=T0 + 41, key="k1"))["run_id"] == 3


def test_a_retry_carries_params_and_the_key_names_it():
    log = Log()
    log.put(retries={"max": 2, "delay": 1.0, "backoff": 1.0, "max_delay": 5.0,
                     "jitter": 0.0})
    manual(log, params={"n": "3"}, key="once")
    log.finish(1, state="failed", exit_code=1)
    retry = [r for r in (log.run(2),) if r is not None]
    assert retry and retry[0].attempt == 2 and retry[0].fire_time == log.run(1).fire_time
    assert RP.of_run(log.sm.conn, 2) == ({"n": "3"}, "once")
    assert RP.of_run(log.sm.conn, 1) == ({"n": "3"}, "once")   # history keeps its own
    assert RP.run_of_key(log.sm.conn, "j", "once") == 2
    assert manual(log, at=T0 + 50, key="once") == {"run_id": 2, "state": "assigned",
                                                    "existing": True}
    # the idempotency key is the same for both attempts, the run key is not
    one, two = log.run(1), log.run(2)
    assert idempotency_key("j", one.fire_time, "once") == "j/key:once"
    assert one.key != two.key


def test_a_lost_run_that_never_started_carries_them_too():
    log = Log()
    log.put()
    manual(log, params={"n": "1"})
    log.apply(C.NodeLost(node="n1", at=T0 + 11, reason="silent"))
    assert log.run(2).attempt == 2
    assert RP.of_run(log.sm.conn, 2) == ({"n": "1"}, None)


def test_prune_forgets_params_and_keys_of_pruned_runs():
    log = Log()
    log.put()
    manual(log, key="old", params={"a": "1"})
    log.finish(1)
    manual(log, at=T0 + 5000, key="new")
    log.apply(C.Prune(before=T0 + 1000, at=T0 + 6000))
    assert log.run(1) is None
    assert RP.run_of_key(log.sm.conn, "j", "old") is None
    assert RP.of_run(log.sm.conn, 1) == ({}, None)
    assert RP.run_of_key(log.sm.conn, "j", "new") == 2
    # the key is free again once its run is gone
    assert "existing" not in manual(log, at=T0 + 7000, key="old")


@pytest.mark.parametrize("kw,words", [
    ({"params": ["a"]}, "params must be a mapping"),
    ({"params": {"a": 1}}, "each param is a name"),
    ({"params": {"a": "x" * 5000}}, "each param is a name"),
    ({"key": "a b"}, "no spaces"),
    ({"key": "k" * 201}, "1 to 200 characters"),
])
def test_malformed_commands_are_refused(kw, words):
    log = Log()
    log.put()
    with pytest.raises(Refused, match=words):
        manual(log, **kw)
    assert list(log.sm.conn.execute("SELECT COUNT(*) FROM runs")) == [(0,)]


def test_plain_manual_run_encodes_as_before_and_round_trips():
    plain = C.ManualRun(job="j", node="", at=1.5)
    assert plain.encode() == b'{"at":1.5,"job":"j","node":"","op":"manual_run"}'
    full = C.ManualRun(job="j", node="", at=1.5, params={"a": "1"}, key="k")
    assert C.decode(full.encode()) == full
    assert json.loads(full.encode())["params"] == {"a": "1"}


def _history(rng: random.Random) -> list[C.Command]:
    from tests.unit.state.test_state import spec
    cmds: list[C.Command] = [C.PutJob(name="j", spec=spec(retries={
        "max": 1, "delay": 1.0, "backoff": 1.0, "max_delay": 5.0, "jitter": 0.0},
        concurrency="allow"), digest="d", source="/x", at=T0)]
    t = T0
    for _ in range(200):
        t += rng.choice([1, 2, 3])
        r = rng.random()
        if r < 0.5:
            cmds.append(C.ManualRun(job="j", node="n1", at=t,
                                    params={"n": str(rng.randint(0, 3))} if rng.random() < 0.5
                                    else {},
                                    key=rng.choice(["", "a", "b", "c", "d"])))
        elif r < 0.9:
            cmds.append(C.RunFinished(run_id=rng.randint(1, 60), token=rng.randint(1, 200),
                                      node="n1", state=rng.choice(["succeeded", "failed"]),
                                      exit_code=1, signal=None, started_at=t,
                                      finished_at=t + 1, log_path="/l"))
        else:
            cmds.append(C.Prune(before=t - 20, at=t))
    return cmds


@pytest.mark.parametrize("seed", range(5))
def test_histories_with_keys_apply_alike(seed):
    cmds = _history(random.Random(seed))
    digests = []
    for batch in (1, 13):
        sm = StateMachine(apsw.Connection(":memory:"))
        index = 0
        for i in range(0, len(cmds), batch):
            with sm.conn:
                for cmd in cmds[i:i + batch]:
                    index += 1
                    try:
                        sm.apply(index, C.decode(cmd.encode()))
                    except Refused:
                        pass
        # a key made one run (one first attempt) of the job, never two
        rows = list(sm.conn.execute(
            "SELECT key, COUNT(*) FROM run_params JOIN runs USING(run_id) WHERE attempt=1 "
            "AND key IS NOT NULL GROUP BY job, key HAVING COUNT(*) > 1"))
        assert rows == []
        assert list(sm.conn.execute("SELECT COUNT(*) FROM run_params WHERE key IS NOT NULL"))[0][0]
        digests.append((sm.full_digest(), sm.state_digest))
    assert digests[0] == digests[1]


def _key(log: Log, run_id: int) -> str:
    run = log.run(run_id)
    params, key, rerun = RP.inputs(log.sm.conn, run)
    return idempotency_key(run.job, run.fire_time, key, rerun)


def test_a_rerun_and_a_backfill_reprocess_start_a_new_key_their_retries_keep():
    from tests.unit.state.test_backfill import PAST, finish, log_with_job
    log = log_with_job(concurrency="allow", retries={"max": 3, "delay": 1.0, "backoff": 1.0,
                                                     "max_delay": 5.0, "jitter": 0.0})
    log.sm.conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (PAST[0] - 1,))
    first = log.fire(PAST[0], due_at=PAST[0])["run_id"]
    finish(log, first, "failed")                       # attempt 2: a retry
    retry = 2
    finish(log, retry, "succeeded")
    fire = iso = iso_utc(PAST[0])
    assert log.run(retry).kind == "retry"
    assert _key(log, first) == _key(log, retry) == f"j/{iso}"
    rerun = log.apply(C.Rerun(job="j", fire_time=PAST[0], at=T0 + 5))["run_id"]
    assert log.run(rerun).attempt == 3
    finish(log, rerun, "failed")                       # attempt 4: the rerun's retry
    rerun_retry = 4
    assert log.run(rerun_retry).kind == "retry"
    assert _key(log, rerun) == _key(log, rerun_retry) == f"j/{fire}/rerun-3"
    assert _key(log, first) == f"j/{iso}"              # history keeps its own
    finish(log, rerun_retry, "failed")
    for spent in (5, 6):  # the rerun has retries of its own (max 3): 4, 5, 6
        assert (log.run(spent).kind, log.run(spent).attempt) == ("retry", spent)
        assert _key(log, spent) == f"j/{fire}/rerun-3"
        finish(log, spent, "failed")
    # a backfill with --reprocess failed: attempt 7, a new key again
    bid = log.apply(C.CreateBackfill(job="j", fire_times=[PAST[0]], from_time=PAST[0],
                                     to_time=PAST[0], reprocess="failed", parallel=1,
                                     order="oldest", at=T0 + 9))["backfill"]
    log.apply(C.BackfillStep(backfill=bid, at=T0 + 10))
    reprocess = max(r for (r,) in log.sm.conn.execute("SELECT run_id FROM runs"))
    assert (log.run(reprocess).kind, log.run(reprocess).attempt) == ("backfill", 7)
    assert _key(log, reprocess) == f"j/{fire}/rerun-7"
    # the views say the same
    views = RP.add_to_views(log.sm.conn, [log.run(i).view() for i in (first, rerun_retry,
                                                                       reprocess)])
    assert [v["idempotency_key"] for v in views] == [f"j/{iso}", f"j/{fire}/rerun-3",
                                                     f"j/{fire}/rerun-7"]


def test_a_backfill_that_creates_a_missing_record_keeps_the_plain_key():
    from tests.unit.state.test_backfill import PAST, create, log_with_job, step
    log = log_with_job(concurrency="allow")
    bid = create(log, times=PAST[:1], parallel=1)["backfill"]
    step(log, bid)
    [run_id] = [r for (r,) in log.sm.conn.execute("SELECT run_id FROM runs")]
    assert log.run(run_id).kind == "backfill" and log.run(run_id).attempt == 1
    assert _key(log, run_id) == f"j/{iso_utc(PAST[0])}"

"""concurrency: queue in the state machine (cronrd.state.queue): runs wait
behind the job's run in flight and are released, one at a time in fire-time
order, by the command that ends it."""

from __future__ import annotations

import random

import apsw
import pytest

from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from cronrd.state.effects import RunPending
from replay import Replay
from tests.unit.state.test_state import T0, Log, random_commands, spec


def queued_log(name="q", **over) -> Log:
    log = Log()
    log.put(name, concurrency="queue", **over)
    return log


def start(log: Log, run_id: int, at: float | None = None) -> None:
    run = log.run(run_id)
    log.apply(C.RunStarted(run_id=run_id, token=run.token, node=run.node, pid=100 + run_id,
                           started_at=run.due_at if at is None else at, log_path="/l"))


def place(log: Log, run_id: int, node: str = "n1", at: float | None = None) -> None:
    run = log.run(run_id)
    log.apply(C.AssignRun(run_id=run_id, node=node, at=run.due_at if at is None else at))


def states(log: Log, name="q") -> dict[int, str]:
    return {r.run_id: r.state.value for r in Q.list_runs(log.sm.conn, name, limit=10**6)}


def in_flight(log: Log, name="q") -> list[int]:
    return [rid for rid, st in states(log, name).items()
            if st in ("pending", "assigned", "running")]


def test_a_fire_waits_behind_the_running_run_and_is_released_when_it_ends():
    log = queued_log()
    first = log.fire(T0 + 1, "q")["run_id"]
    start(log, first)
    res = log.fire(T0 + 2, "q")
    assert res["state"] == "waiting"
    second = res["run_id"]
    run = log.run(second)
    assert (run.state, run.node, run.token) == ("waiting", None, None)
    assert run.reason == ("waiting for run 1 (started 2027-01-15T08:00:01Z) to end: "
                          "concurrency: queue")
    log.effects.clear()
    log.finish(first, at=T0 + 5)
    # Released in the same command: pending, for the leader to place, due now.
    run = log.run(second)
    assert run.state == "pending" and run.due_at == T0 + 5
    assert run.reason == ("waited in the queue until run 1 ended at 2027-01-15T08:00:05Z "
                          "(concurrency: queue)")
    assert [(e.kind, e.run.run_id) for e in log.effects if isinstance(e, RunPending)] == \
        [("pending", second)]
    # Placed like any pending run, on whichever node the leader picks.
    place(log, second, node="n2", at=T0 + 5.01)
    assert (log.run(second).state, log.run(second).node) == ("assigned", "n2")


def test_released_before_its_own_time_it_is_still_due_at_its_fire_time():
    log = queued_log()
    first = log.fire(T0 + 1, "q")["run_id"]
    second = log.fire(T0 + 2, "q", at=T0 + 1.3)["run_id"]  # committed ahead
    log.finish(first, at=T0 + 1.5)
    assert (log.run(second).state, log.run(second).due_at) == ("pending", T0 + 2)


def test_runs_start_one_at_a_time_in_fire_time_order():
    log = queued_log()
    ids = [log.fire(T0 + i, "q")["run_id"] for i in range(1, 6)]
    assert [states(log)[i] for i in ids] == ["assigned"] + ["waiting"] * 4
    # Each names the run directly ahead of it.
    assert log.run(ids[2]).reason == ("waiting for run 2 (waiting too, fire time "
                                      "2027-01-15T08:00:02Z) to end: concurrency: queue")
    order = []
    current = ids[0]
    for t in range(10, 15):
        start(log, current, at=T0 + t)
        assert in_flight(log) == [current]
        order.append(current)
        log.finish(current, at=T0 + t + 0.5)
        waiting_now = [r for r, st in states(log).items() if st == "pending"]
        if not waiting_now:
            break
        (current,) = waiting_now
        place(log, current, at=T0 + t + 0.6)
    assert order == ids
    assert set(states(log).values()) == {"succeeded"}


def test_a_failed_run_retried_holds_the_queue_until_its_last_attempt():
    log = queued_log(retries={"max": 1, "delay": 1.0, "backoff": 2.0, "max_delay": 60.0,
                              "jitter": 0.0})
    first = log.fire(T0 + 1, "q")["run_id"]
    waiting = log.fire(T0 + 2, "q")["run_id"]
    res = log.finish(first, state="failed", exit_code=1, at=T0 + 3)
    retry = res["retry_run_id"]
    assert retry is not None and log.run(waiting).state == "waiting"
    assert log.run(waiting).reason.startswith(f"waiting for run {retry} (assigned, due ")
    log.finish(retry, at=T0 + 6)
    assert log.run(waiting).state == "pending"


def test_the_queue_is_bounded_by_max_queued():
    log = queued_log(max_queued=2)
    log.fire(T0 + 1, "q")
    assert log.fire(T0 + 2, "q")["state"] == "waiting"
    assert log.fire(T0 + 3, "q")["state"] == "waiting"
    res = log.fire(T0 + 4, "q")
    assert res["state"] == "skipped" and res["reason"] == (
        "queue full: 2 runs already waiting (max_queued 2, concurrency: queue)")
    assert log.run(res["run_id"]).reason == res["reason"]


def test_the_default_bound_is_100_waiting_runs():
    log = queued_log()
    for i in range(1, 103):
        log.fire(T0 + i, "q")
    got = states(log)
    assert list(got.values()).count("waiting") == 100
    assert got[102] == "skipped" and "max_queued 100" in log.run(102).reason


def test_a_waiting_run_can_be_cancelled_and_the_queue_closes_up():
    log = queued_log()
    a = log.fire(T0 + 1, "q")["run_id"]
    b = log.fire(T0 + 2, "q")["run_id"]
    c = log.fire(T0 + 3, "q")["run_id"]
    log.apply(C.CancelRun(run_id=b, at=T0 + 2.5, reason="cancelled by alice"))
    assert (log.run(b).state, log.run(b).reason) == ("cancelled", "cancelled by alice")
    assert log.run(c).state == "waiting" and log.run(c).reason.startswith("waiting for run 1 ")
    with pytest.raises(Refused, match="already cancelled"):
        log.apply(C.CancelRun(run_id=b, at=T0 + 2.6, reason="again"))
    log.finish(a, at=T0 + 4)
    assert log.run(c).state == "pending"


def test_cancelling_the_run_in_flight_releases_the_next():
    log = queued_log()
    a = log.fire(T0 + 1, "q")["run_id"]
    b = log.fire(T0 + 2, "q")["run_id"]
    log.apply(C.CancelRun(run_id=a, at=T0 + 1.5, reason="by hand"))  # not started: ends now
    assert log.run(a).state == "cancelled" and log.run(b).state == "pending"


def test_a_run_that_waited_past_the_catchup_window_is_skipped_and_the_next_goes():
    log = queued_log(catchup_window=60.0)
    a = log.fire(T0 + 1, "q")["run_id"]
    b = log.fire(T0 + 2, "q")["run_id"]
    c = log.fire(T0 + 100, "q")["run_id"]
    log.finish(a, at=T0 + 120)
    assert log.run(b).state == "skipped" and log.run(b).reason.startswith(
        "waited in the queue longer than catchup_window 1m (due 2027-01-15T08:00:02Z")
    assert log.run(c).state == "pending"


def test_a_paused_job_starts_nothing_from_its_queue():
    log = queued_log()
    a = log.fire(T0 + 1, "q")["run_id"]
    start(log, a)
    b = log.fire(T0 + 2, "q")["run_id"]
    log.apply(C.SetPaused(name="q", paused=True, at=T0 + 2.5))
    assert log.run(b).state == "waiting"  # its turn has not come
    log.finish(a, at=T0 + 3)
    assert log.run(b).state == "skipped" and log.run(b).reason == (
        "paused: `cronrd resume` re-enables the job (it was waiting in the queue)")


def test_removing_the_job_cancels_its_waiting_runs():
    log = queued_log()
    a = log.fire(T0 + 1, "q")["run_id"]
    start(log, a)
    b = log.fire(T0 + 2, "q")["run_id"]
    log.apply(C.RemoveJob(name="q", at=T0 + 3))
    assert log.run(b).state == "cancelled" and log.run(a).state == "running"
    assert list(log.sm.conn.execute("SELECT * FROM run_queue")) == []


def test_the_reason_follows_the_run_ahead_from_assigned_to_started():
    log = queued_log(jitter=0.0)
    a = log.fire(T0 + 1, "q", due_at=T0 + 1.25)["run_id"]
    b = log.fire(T0 + 2, "q")["run_id"]
    assert log.run(b).reason.startswith(
        "waiting for run 1 (assigned, due 2027-01-15T08:00:01.250Z)")
    start(log, a, at=T0 + 1.5)
    assert log.run(b).reason.startswith("waiting for run 1 (started 2027-01-15T08:00:01.500Z)")


def test_a_manual_run_queues_too_and_is_refused_when_the_queue_is_full():
    log = queued_log(max_queued=1)
    a = log.fire(T0 + 1, "q")["run_id"]
    res = log.apply(C.ManualRun(job="q", node="", at=T0 + 1.5))
    assert res["state"] == "waiting" and log.run(res["run_id"]).node is None
    with pytest.raises(Refused, match=r"queue full: 1 runs already waiting .*`cronrd runs q "
                                      r"--state waiting`"):
        log.apply(C.ManualRun(job="q", node="", at=T0 + 1.6))
    log.finish(a, at=T0 + 2)
    assert log.run(res["run_id"]).state == "pending"


def test_a_queued_manual_run_keeps_its_params_and_its_key_makes_one_run():
    from cronrd.state import run_params as RP
    log = queued_log()
    log.fire(T0 + 1, "q")
    res = log.apply(C.ManualRun(job="q", node="", at=T0 + 1.5, params={"n": "3"}, key="k1"))
    assert res["state"] == "waiting"
    assert RP.of_run(log.sm.conn, res["run_id"]) == ({"n": "3"}, "k1")
    again = log.apply(C.ManualRun(job="q", node="", at=T0 + 1.6, key="k1"))
    assert again == {"run_id": res["run_id"], "state": "waiting", "existing": True}


def test_each_node_of_a_per_node_job_has_its_own_queue():
    log = queued_log()
    a1 = log.fire(T0 + 1, "q", target="n1")["run_id"]
    assert log.fire(T0 + 1, "q", target="n2", node="n2")["state"] == "assigned"
    b1 = log.fire(T0 + 2, "q", target="n1")["run_id"]
    assert log.run(b1).state == "waiting"
    log.finish(a1, at=T0 + 3)
    assert (log.run(b1).state, log.run(b1).target) == ("pending", "n1")


def test_a_job_that_no_longer_queues_releases_its_waiting_runs_to_its_new_policy():
    log = queued_log()
    a = log.fire(T0 + 1, "q")["run_id"]
    start(log, a)
    b = log.fire(T0 + 2, "q")["run_id"]
    c = log.fire(T0 + 3, "q")["run_id"]
    log.put("q", at=T0 + 3.5, concurrency="forbid")
    for rid in (b, c):  # placed now; forbid decides at their start
        assert log.run(rid).state == "pending"
        assert log.run(rid).reason == ("released from the queue: the job's concurrency is "
                                       "now forbid")
    assert list(log.sm.conn.execute("SELECT * FROM run_queue")) == []
    # An unrelated change (still queue) leaves the queue as it is.
    log2 = queued_log()
    log2.fire(T0 + 1, "q")
    w = log2.fire(T0 + 2, "q")["run_id"]
    log2.put("q", at=T0 + 2.5, concurrency="queue", command="false")
    assert log2.run(w).state == "waiting"


def test_a_lost_run_that_never_started_waits_for_the_run_released_meanwhile():
    # on_node_loss: fail, so NodeLost retries nothing and the queue moves on;
    # then the node says the run never started: its retry must not start
    # beside the released one, so it waits at the head of the queue.
    log = queued_log(on_node_loss="fail")
    a = log.fire(T0 + 1, "q")["run_id"]
    b = log.fire(T0 + 2, "q")["run_id"]
    token = log.run(a).token
    log.apply(C.ClaimRuns(node="n1", claims=[[a, token]], at=T0 + 0.9))  # then cut off
    log.apply(C.NodeLost(node="n1", at=T0 + 5, reason="silent"))
    assert log.run(a).state == "lost" and log.run(b).state == "pending"
    res = log.apply(C.RunFinished(run_id=a, token=token, node="n1", state="lost",
                                  exit_code=None, signal=None, started_at=None,
                                  finished_at=T0 + 6, log_path=None, reason="fenced",
                                  not_started=True))
    retry = log.run(res["retry_run_id"])
    assert (retry.state, retry.attempt, retry.fire_time) == ("waiting", 2, T0 + 1)
    assert retry.reason.startswith(f"waiting for run {b} (pending, due ")
    assert in_flight(log) == [b]
    place(log, b, at=T0 + 6.1)
    log.finish(b, at=T0 + 8)
    assert log.run(retry.run_id).state == "pending"


def test_a_rerun_of_a_queued_job_waits_its_turn_by_its_fire_time():
    log = queued_log()
    old = log.fire(T0 + 1, "q")["run_id"]
    log.finish(old, at=T0 + 2)
    a = log.fire(T0 + 3, "q")["run_id"]
    b = log.fire(T0 + 4, "q")["run_id"]
    res = log.apply(C.Rerun(job="q", fire_time=T0 + 1, at=T0 + 3.5, who="root"))
    rerun = log.run(res["run_id"])
    assert (res["state"], rerun.attempt, rerun.kind) == ("waiting", 2, "rerun")
    # Its fire time is older than b's: it goes first, b now waits behind it.
    assert log.run(b).reason.startswith(f"waiting for run {rerun.run_id} (waiting too")
    log.finish(a, at=T0 + 5)
    assert log.run(rerun.run_id).state == "pending" and log.run(b).state == "waiting"


def test_other_policies_do_not_queue():
    log = Log()
    log.put("f", concurrency="forbid")
    log.fire(T0 + 1, "f")
    assert log.fire(T0 + 2, "f")["state"] == "assigned"  # decided at the gate


# -- determinism and the guarantee, over random histories -------------------------------
def random_queue_commands(rng: random.Random, n: int) -> list[C.Command]:
    """A random history of two queued jobs, made against the state as it
    goes (so that runs really are placed, started, ended and cancelled),
    with some stale reports thrown in."""
    cmds: list[C.Command] = [
        C.PutJob(name=name, spec=spec(name=name, concurrency="queue", max_queued=3,
                                      on_node_loss=rng.choice(["retry", "fail"]),
                                      catchup_window=rng.choice([5.0, 86400.0]),
                                      retries={"max": rng.randint(0, 1), "delay": 1.0,
                                               "backoff": 2.0, "max_delay": 60.0,
                                               "jitter": 0.0}),
                 digest=name, source="/x", at=T0) for name in "ab"]
    replay = Replay()
    sm, apply = replay.sm, replay.apply

    for cmd in cmds:
        apply(cmd)
    t = T0
    for _ in range(n):
        t += rng.choice([0, 1, 2])
        name = rng.choice("ab")
        runs = [r for r in Q.list_runs(sm.conn, name, limit=20)
                if r.state.value in ("pending", "assigned", "running", "waiting")]
        run = rng.choice(runs) if runs else None
        k = rng.random()
        if k < 0.15 or run is None:
            cmd = C.Fire(job=name, fire_time=t + 1, kind="scheduled", node="n1",
                         due_at=t + 1, at=t)
        elif k < 0.18:
            cmd = C.ManualRun(job=name, node="", at=t)
        elif k < 0.2:
            cmd = C.SetPaused(name=name, paused=rng.random() < 0.3, at=t)
        elif k < 0.25:
            cmd = C.CancelRun(run_id=run.run_id, at=t, reason="by hand")
        elif k < 0.27:  # a node goes silent, and says later what it never started
            cmd = C.NodeLost(node=rng.choice(["n1", "n2"]), at=t, reason="silent")
            if run.state.value in ("assigned", "running") and run.node:
                cmds.append(cmd)
                apply(cmd)
                cmd = C.RunFinished(run_id=run.run_id, token=run.token, node=run.node,
                                    state="lost", exit_code=None, signal=None,
                                    started_at=None, finished_at=t, log_path=None,
                                    not_started=True)
        elif k < 0.3:  # a stale report
            cmd = C.RunFinished(run_id=run.run_id, token=(run.token or 0) + 1000, node="n1",
                                state="succeeded", exit_code=0, signal=None, started_at=t,
                                finished_at=t, log_path="/l")
        elif run.state.value == "pending":
            cmd = C.AssignRun(run_id=run.run_id, node=rng.choice(["n1", "n2"]), at=t)
        elif run.state.value == "assigned" and run.claimed_at is None and k < 0.45:
            cmd = C.ClaimRuns(node=run.node, claims=[[run.run_id, run.token]], at=t)
        elif run.state.value == "assigned" and k < 0.65:
            cmd = C.RunStarted(run_id=run.run_id, token=run.token, node=run.node, pid=100,
                               started_at=t, log_path="/l")
        elif run.state.value in ("assigned", "running"):
            cmd = C.RunFinished(
                run_id=run.run_id, token=run.token, node=run.node,
                state=rng.choice(["succeeded", "failed", "lost", "skipped"]), exit_code=0,
                signal=None, started_at=t, finished_at=t + 1, log_path="/l")
        else:  # waiting: its turn comes when the one ahead ends
            ahead = [r for r in runs if r.state.value != "waiting"]
            run = ahead[0] if ahead else run
            cmd = C.RunFinished(
                run_id=run.run_id, token=run.token, node=run.node or "n1", state="succeeded",
                exit_code=0, signal=None, started_at=t, finished_at=t + 1, log_path="/l")
        cmds.append(cmd)
        apply(cmd)
    return cmds


def play(cmds, batch: int, check=None):
    sm = StateMachine(apsw.Connection(":memory:"))
    results = []
    index = 0
    for i in range(0, len(cmds), batch):
        with sm.conn:
            for cmd in cmds[i:i + batch]:
                index += 1
                try:
                    results.append(sm.apply(index, C.decode(cmd.encode()))[0])
                except Refused as exc:
                    results.append(str(exc))
                if check is not None:
                    check(sm)
    return (sm.full_digest(), sm.state_digest), results


def one_in_flight_per_job(sm: StateMachine) -> None:
    """What a queued job never has: two runs in flight, a waiting run with
    nothing ahead of it, a queue row for a run that is not waiting."""
    for job, count in sm.conn.execute(
            "SELECT job, COUNT(*) FROM runs WHERE state IN ('pending','assigned','running') "
            "GROUP BY job, target"):
        assert count <= 1, f"job {job}: {count} runs in flight"
    rows = set(sm.conn.execute("SELECT run_id FROM run_queue"))
    assert rows == set(sm.conn.execute("SELECT run_id FROM runs WHERE state='waiting'"))
    for (job,) in sm.conn.execute("SELECT DISTINCT job FROM run_queue"):
        assert list(sm.conn.execute(
            "SELECT 1 FROM runs WHERE job=? AND state IN ('pending','assigned','running')",
            (job,))), f"job {job} has waiting runs and none in flight"
    waiting = list(sm.conn.execute("SELECT COUNT(*) FROM run_queue GROUP BY job, target"))
    assert all(n <= 3 for (n,) in waiting)


@pytest.mark.parametrize("seed", range(12))
def test_queues_are_deterministic_and_never_start_two_runs(seed):
    cmds = random_queue_commands(random.Random(seed), 300)
    d1, r1 = play(cmds, batch=1, check=one_in_flight_per_job)
    d2, r2 = play(cmds, batch=23)
    assert d1 == d2 and r1 == r2
    assert any(isinstance(r, dict) and r.get("state") == "waiting" for r in r1)


@pytest.mark.parametrize("seed", range(8))
def test_histories_that_switch_jobs_to_and_from_queue_are_deterministic(seed):
    # test_state's random histories, with some definitions switched to queue.
    rng = random.Random(seed)
    cmds = []
    for cmd in random_commands(random.Random(seed), 300):
        if isinstance(cmd, C.PutJob) and rng.random() < 0.5:
            s = dict(cmd.spec, concurrency="queue", max_queued=rng.randint(1, 4))
            cmd = C.PutJob(name=cmd.name, spec=s, digest=cmd.digest + "q", source=cmd.source,
                           at=cmd.at)
        cmds.append(cmd)
    d1, r1 = play(cmds, batch=1)
    d2, r2 = play(cmds, batch=31)
    assert d1 == d2 and r1 == r2
    assert any(isinstance(r, dict) and r.get("state") == "waiting" for r in r1)

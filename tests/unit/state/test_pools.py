"""Pools in the state machine (cronrd.state.pools): a run that would exceed
its pool's slots waits, with the reason, and the command that frees slots
releases the waiting runs in order (on-time before backfill, priority, fire
time), so no history of commands puts more runs in a pool than it has."""

from __future__ import annotations

import random

import pytest

from cronrd.state import commands as C
from cronrd.state import pools as PL
from cronrd.state import queries as Q
from cronrd.state import versions as V
from cronrd.errors import Refused
from cronrd.state.effects import RunPending

from .test_state import T0, Log, apply_all


class RecordingLog(Log):
    """A Log that keeps the commands it applied (to replay them)."""

    def __init__(self):
        super().__init__()
        self.cmds = []

    def apply(self, cmd):
        self.cmds.append(cmd)
        return super().apply(cmd)

MIN = 60


def pool_log(slots=2, scope="cluster", jobs=("a", "b", "c"), **over) -> Log:
    log = Log()
    log.apply(C.SetPools(pools=[["db", slots, scope]], at=T0))
    for name in jobs:
        log.put(name, pool="db", **over.get(name, {}))
    return log


def start(log: Log, run_id: int, at=None) -> None:
    run = log.run(run_id)
    log.apply(C.RunStarted(run_id=run_id, token=run.token, node=run.node, pid=100 + run_id,
                           started_at=run.due_at if at is None else at, log_path="/l"))


def place(log: Log, run_id: int, node="n1", at=None):
    return log.apply(C.AssignRun(run_id=run_id, node=node,
                                 at=log.run(run_id).due_at if at is None else at))


def state(log: Log, run_id: int) -> str:
    return log.run(run_id).state.value


def test_a_run_beyond_the_slots_waits_with_the_reason_and_goes_when_one_ends():
    log = pool_log(slots=2)
    a = log.fire(T0 + 1, "a")["run_id"]
    b = log.fire(T0 + 1, "b")["run_id"]
    res = log.fire(T0 + 1, "c")
    assert res == {"run_id": 3, "state": "waiting", "reason": "pool db: 2/2 slots in use"}
    c = res["run_id"]
    assert (state(log, a), state(log, b)) == ("assigned", "assigned")
    run = log.run(c)
    assert (run.state, run.node, run.token) == ("waiting", None, None)
    # not placed, not to be placed: no effect for the executor or the leader
    assert not [e for e in log.effects if e.run is not None and e.run.run_id == c]
    start(log, a)
    log.effects.clear()
    log.finish(a, at=T0 + 5)
    run = log.run(c)
    assert (run.state, run.due_at) == ("pending", T0 + 5)
    assert run.reason == "waited for pool db until 2027-01-15T08:00:05Z"
    assert [(e.kind, e.run.run_id) for e in log.effects if isinstance(e, RunPending)] == [("pending", c)]
    assert place(log, c)["state"] == "assigned"
    assert PL.in_use(log.sm.conn, "db") == 2


def test_waiting_runs_are_released_by_priority_then_fire_time():
    log = pool_log(slots=1, jobs=("low", "high", "mid", "busy"),
                   high={"priority": 10}, mid={"priority": 5}, low={"priority": -1})
    busy = log.fire(T0 + 1, "busy")["run_id"]
    low = log.fire(T0 + 2, "low")["run_id"]
    high1 = log.fire(T0 + 3, "high")["run_id"]
    mid = log.fire(T0 + 4, "mid")["run_id"]
    high2 = log.fire(T0 + 5, "high")["run_id"]
    assert log.run(low).reason == "pool db: 1/1 slots in use, 3 runs ahead"
    assert log.run(mid).reason == "pool db: 1/1 slots in use, 2 runs ahead"
    assert log.run(high1).reason == "pool db: 1/1 slots in use"
    order, current, t = [], busy, T0 + 10
    for _ in range(5):
        log.finish(current, at=t)
        t += 1
        released = [r for r in (low, high1, mid, high2) if state(log, r) == "pending"]
        if not released:
            break
        assert len(released) == 1
        current = released[0]
        order.append(current)
        place(log, current, at=t)
    assert order == [high1, high2, mid, low]


def test_a_run_waits_behind_runs_ahead_even_when_a_slot_is_free():
    # a waiting run needing two slots is not overtaken by small ones behind it
    log = pool_log(slots=2, jobs=("big", "small"), big={"pool_slots": 2})
    s1 = log.fire(T0 + 1, "small")["run_id"]
    big = log.fire(T0 + 2, "big")["run_id"]
    assert log.run(big).reason == "pool db: 1/2 slots in use"
    s2 = log.fire(T0 + 3, "small")
    assert s2["state"] == "waiting" and s2["reason"] == "pool db: 1/2 slots in use, 1 run ahead"
    log.finish(s1, at=T0 + 10)
    assert (state(log, big), state(log, s2["run_id"])) == ("pending", "waiting")


def test_a_higher_priority_run_goes_first_when_it_fits():
    log = pool_log(slots=2, jobs=("x", "vip"), vip={"priority": 3})
    log.fire(T0 + 1, "x")
    log.fire(T0 + 1, "x", target="n2")  # a second run of x, per node
    waiting = log.fire(T0 + 2, "x")["run_id"]
    vip = log.fire(T0 + 3, "vip")
    assert vip["state"] == "waiting" and log.run(waiting).state == "waiting"
    log.finish(1, at=T0 + 10)
    assert (state(log, vip["run_id"]), state(log, waiting)) == ("pending", "waiting")


def test_backfill_runs_come_after_on_time_runs_whatever_their_priority():
    log = pool_log(slots=1, jobs=("busy", "j", "other"),
                   j={"schedule": "* * * * *", "concurrency": "allow", "priority": 100})
    busy = log.fire(T0 + 1, "busy")["run_id"]
    past = [T0 - MIN * k for k in (3, 2)]
    bid = log.apply(C.CreateBackfill(job="j", fire_times=past, from_time=past[0],
                                     to_time=past[-1], reprocess="missing", parallel=2,
                                     order="oldest", at=T0 + 2))["backfill"]
    released = log.apply(C.BackfillStep(backfill=bid, at=T0 + 2))["released"]
    assert [state(log, r) for r in released] == ["waiting", "waiting"]
    on_time = log.fire(T0 + 3, "other")["run_id"]
    assert log.run(on_time).reason == "pool db: 1/1 slots in use"
    log.finish(busy, at=T0 + 10)
    assert state(log, on_time) == "pending" and [state(log, r) for r in released] == [
        "waiting", "waiting"]
    place(log, on_time, at=T0 + 10)
    log.finish(on_time, at=T0 + 11)
    assert [state(log, r) for r in released] == ["pending", "waiting"]


def test_a_pool_the_leader_does_not_define_holds_its_runs_until_it_does():
    log = Log()
    log.put("a", pool="db")
    res = log.fire(T0 + 1, "a")
    assert res["state"] == "waiting" and res["reason"].startswith(
        "pool db: not defined in the leader's daemon config; add it under pools:")
    out = log.apply(C.SetPools(pools=[["db", 1, "cluster"]], at=T0 + 2))
    assert out == {"changed": True, "released": [res["run_id"]]}
    assert state(log, res["run_id"]) == "pending"
    assert log.apply(C.SetPools(pools=[["db", 1, "cluster"]], at=T0 + 3))["changed"] is False


def test_more_slots_release_waiting_runs_and_bad_pools_are_refused():
    log = pool_log(slots=1)
    log.fire(T0 + 1, "a")
    b = log.fire(T0 + 1, "b")["run_id"]
    log.apply(C.SetPools(pools=[["db", 2, "cluster"]], at=T0 + 2))
    assert state(log, b) == "pending"
    for bad in ([["db", 0, "cluster"]], [["db", 1, "host"]], "db",
                [["db", 1, "node"], ["db", 2, "node"]]):
        with pytest.raises(Refused, match="set_pools: pools must be"):
            log.apply(C.SetPools(pools=bad, at=T0 + 3))


def test_a_manual_run_and_a_retry_wait_for_the_pool_too():
    log = pool_log(slots=1, a={"retries": {"max": 1, "delay": 0.0, "backoff": 1.0,
                                           "max_delay": 1.0, "jitter": 0.0}})
    a = log.fire(T0 + 1, "a")["run_id"]
    res = log.apply(C.ManualRun(job="b", node="", at=T0 + 1.5))
    manual = res["run_id"]
    assert res == {"run_id": manual, "state": "waiting", "reason": "pool db: 1/1 slots in use"}
    assert log.run(manual).state == "waiting"
    start(log, a)
    res = log.finish(a, state="failed", exit_code=1, at=T0 + 3)
    retry = res["retry_run_id"]
    # The manual run waited first (same priority and fire second): it goes,
    # the retry waits behind it.
    assert (state(log, manual), state(log, retry)) == ("pending", "waiting")
    assert PL.in_use(log.sm.conn, "db") == 1


def test_node_scoped_slots_count_per_node():
    log = pool_log(slots=1, scope="node")
    a = log.fire(T0 + 1, "a", node="n1")["run_id"]
    b = log.fire(T0 + 1, "b", node="n2")["run_id"]
    res = log.fire(T0 + 1, "c", node="n1")
    assert (state(log, a), state(log, b)) == ("assigned", "assigned")
    assert res["state"] == "waiting" and res["reason"] == "pool db: 1/1 slots in use on node n1"
    # Released when a slot frees, to pending: placed on a node with room.
    log.finish(a, at=T0 + 5)
    assert state(log, res["run_id"]) == "pending"
    # Placed where the pool is full, it waits again rather than run there.
    out = place(log, res["run_id"], node="n2", at=T0 + 5)
    assert out["state"] == "waiting" and "on node n2" in out["reason"]


def test_a_run_that_ends_while_waiting_leaves_the_pool():
    log = pool_log(slots=1)
    log.fire(T0 + 1, "a")
    b = log.fire(T0 + 2, "b")["run_id"]
    log.apply(C.CancelRun(run_id=b, reason="no", at=T0 + 3))
    assert state(log, b) == "cancelled" and PL.waiters(log.sm.conn, "db") == []
    assert PL.usage(log.sm.conn)[0] == {"pool": "db", "slots": 1, "scope": "cluster",
                                        "defined": True, "in_use": 1, "waiting": 0,
                                        "runs": [1]}


def _holding(log: Log, weights: dict[str, int], node: str | None = None) -> int:
    states = ("pending", "assigned", "running") if node is None else ("assigned", "running")
    return sum(weights[r.job] for r in Q.list_runs(log.sm.conn, None, limit=10**6)
               if r.state.value in states and r.job in weights
               and (node is None or r.node == node))


@pytest.mark.parametrize("seed", range(8))
def test_no_history_puts_more_runs_on_a_node_than_its_node_scoped_pool_has(seed):
    rng = random.Random(1000 + seed)
    slots = rng.choice([1, 2])
    weights = {"a": 1, "b": 1, "c": min(2, slots)}
    log = Log()
    log.apply(C.SetPools(pools=[["db", slots, "node"]], at=T0))
    for name, w in weights.items():
        log.put(name, pool="db", pool_slots=w, priority=rng.randint(-2, 2),
                concurrency="allow")
    t, fire_at, waited = T0, {n: T0 for n in weights}, 0
    nodes = ["n1", "n2", "n3"]
    for _ in range(250):
        t += rng.choice([0, 1, 2])
        live = [r for r in Q.list_runs(log.sm.conn, None, limit=10**6)
                if r.state.value in ("pending", "assigned", "running")]
        op = rng.random()
        try:
            if op < 0.35:
                name = rng.choice(list(weights))
                fire_at[name] = max(fire_at[name] + 1, t)
                log.fire(fire_at[name], name, at=t, due_at=t, node=rng.choice(nodes))
            elif op < 0.55 and live:
                r = rng.choice(live)
                if r.state.value == "pending":
                    place(log, r.run_id, node=rng.choice(nodes), at=t)
                elif r.state.value == "assigned" and r.claimed_at is None:
                    log.apply(C.ReplaceRuns(moves=[[r.run_id, r.token, rng.choice(nodes)]],
                                            at=t, reason="x"))
            elif op < 0.7 and live:
                r = rng.choice(live)
                if r.state.value == "assigned":
                    start(log, r.run_id, at=t)
            elif live:
                r = rng.choice(live)
                if r.state.value in ("assigned", "running"):
                    log.apply(C.RunFinished(
                        run_id=r.run_id, token=r.token, node=r.node,
                        state=rng.choice(["succeeded", "failed"]), exit_code=1,
                        signal=None, started_at=t, finished_at=t, log_path="/l"))
        except Refused:
            pass
        for n in nodes:
            used = _holding(log, weights, n)
            assert used <= slots, f"{used} slots in use of {slots} on {n}"
        waited += bool(PL.waiters(log.sm.conn, "db"))
    assert waited > 20


@pytest.mark.parametrize("seed", range(12))
def test_no_history_puts_more_runs_in_a_pool_than_it_has_slots(seed):
    rng = random.Random(seed)
    slots = rng.choice([1, 2, 3])
    weights = {"a": 1, "b": 1, "c": min(2, slots)}
    log = RecordingLog()
    log.apply(C.SetPools(pools=[["db", slots, "cluster"]], at=T0))
    for name, w in weights.items():
        log.put(name, pool="db", pool_slots=w, priority=rng.randint(-2, 2),
                concurrency=rng.choice(["allow", "queue"]),
                retries={"max": rng.randint(0, 1), "delay": 0.0, "backoff": 1.0,
                         "max_delay": 1.0, "jitter": 0.0})
    t = T0
    fire_at = {n: T0 for n in weights}
    waited = 0
    for _ in range(250):
        t += rng.choice([0, 1, 2])
        live = [r for r in Q.list_runs(log.sm.conn, None, limit=10**6)
                if r.state.value in ("pending", "assigned", "running", "waiting")]
        op = rng.random()
        try:
            if op < 0.3:
                name = rng.choice(list(weights))
                fire_at[name] = max(fire_at[name] + 1, t)
                log.fire(fire_at[name], name, at=t, due_at=t)
            elif op < 0.4:
                log.apply(C.ManualRun(job=rng.choice(list(weights)), node="", at=t))
            elif op < 0.55 and live:
                r = rng.choice(live)
                if r.state.value == "pending":
                    place(log, r.run_id, node=rng.choice(["n1", "n2"]), at=t)
            elif op < 0.7 and live:
                r = rng.choice(live)
                if r.state.value == "assigned":
                    start(log, r.run_id, at=t)
            elif op < 0.95 and live:
                r = rng.choice(live)
                if r.state.value in ("assigned", "running"):
                    log.apply(C.RunFinished(
                        run_id=r.run_id, token=r.token, node=r.node,
                        state=rng.choice(["succeeded", "failed", "lost"]), exit_code=1,
                        signal=None, started_at=t, finished_at=t, log_path="/l"))
            elif live:
                log.apply(C.CancelRun(run_id=rng.choice(live).run_id, reason="x", at=t))
        except Refused:
            pass
        used = _holding(log, weights)
        assert used <= slots, f"{used} slots in use of {slots}"
        waited += bool(PL.waiters(log.sm.conn, "db"))
        # and nothing waits that could go: the first in line does not fit
        ws = PL.waiters(log.sm.conn, "db")
        if ws:
            head = sorted(ws, key=lambda w: w.key())[0]
            assert used + head.slots > slots
    assert waited > 20  # the pool was full often: the property was put to the test
    # and the same commands, decoded and applied in batches, give the same state
    (digest, chain), _ = apply_all(log.cmds, batch=7)
    assert (digest, chain) == (log.sm.full_digest(), log.sm.state_digest)


def test_a_paused_jobs_waiting_run_is_skipped_at_its_turn_and_the_next_goes():
    log = pool_log(slots=1)
    a = log.fire(T0 + 1, "a")["run_id"]
    b = log.fire(T0 + 2, "b")["run_id"]
    c = log.fire(T0 + 3, "c")["run_id"]
    log.apply(C.SetPaused(name="b", paused=True, at=T0 + 4))
    log.finish(a, at=T0 + 5)
    assert state(log, b) == "skipped" and log.run(b).reason.startswith("paused")
    assert state(log, c) == "pending"


def test_a_node_scoped_run_pinned_to_a_full_node_does_not_hold_up_the_others():
    log = pool_log(slots=1, scope="node", a={"concurrency": "allow"})
    for n in ("n1", "n2"):
        log.apply(C.NodeInfo(node=n, state="up", addr=f"{n}:1", tags=[], at=T0))
    log.fire(T0 + 1, "a", node="n1")
    b2 = log.fire(T0 + 1, "b", node="n2")["run_id"]
    pinned = log.fire(T0 + 2, "a", node="n1", target="n1")["run_id"]   # run_on: all's run on n1
    free = log.fire(T0 + 3, "c", node="n2")["run_id"]
    assert (state(log, pinned), state(log, free)) == ("waiting", "waiting")
    log.finish(b2, at=T0 + 5)   # a slot on n2: not for the run pinned to n1
    assert (state(log, pinned), state(log, free)) == ("waiting", "pending")


def test_backfill_priority_ranks_backfill_runs_with_the_on_time_runs():
    log = pool_log(slots=1, jobs=("busy", "j", "other"),
                   j={"schedule": "* * * * *", "concurrency": "allow", "priority": 1,
                      "backfill_priority": 5},
                   other={"priority": 3})
    busy = log.fire(T0 + 1, "busy")["run_id"]
    past = [T0 - MIN * 3]
    bid = log.apply(C.CreateBackfill(job="j", fire_times=past, from_time=past[0],
                                     to_time=past[0], reprocess="missing", parallel=1,
                                     order="oldest", at=T0 + 2))["backfill"]
    [back] = log.apply(C.BackfillStep(backfill=bid, at=T0 + 2))["released"]
    on_time = log.fire(T0 + 3, "other")["run_id"]
    log.finish(busy, at=T0 + 10)
    assert (state(log, back), state(log, on_time)) == ("pending", "waiting")


def test_a_run_that_needs_more_slots_than_its_pool_has_does_not_hold_up_the_others():
    """It can never fit (it waits, saying so), so it is no run "ahead": the
    pool's other runs go by it, however it got there (a job file with a
    pool_slots too large, or a pool the daemon config shrank)."""
    log = pool_log(slots=2, jobs=("a", "b"), a={"pool_slots": 3})
    big = log.fire(T0 + 1, "a")
    assert big["state"] == "waiting" and "a run takes 3 slots" in big["reason"]
    b = log.fire(T0 + 1, "b")
    assert b["state"] == "assigned"
    start(log, b["run_id"])
    log.finish(b["run_id"], at=T0 + 5)
    assert state(log, big["run_id"]) == "waiting"
    assert log.fire(T0 + 6, "b")["state"] == "assigned"
    # The pool grows: it fits now, and goes.
    log.apply(C.SetPools(pools=[["db", 4, "cluster"]], at=T0 + 7))
    assert state(log, big["run_id"]) == "pending"


def test_a_node_scoped_pool_releases_when_no_node_freed_the_slots():
    """Slots of a node-scoped pool freed by no node (the pool grew; a run
    that never was placed ended) release its waiting runs too, from cluster
    version 2 on: the nodes' room is reckoned without a node None (sorting
    it with the node names refused SetPools and CancelRun)."""
    log = pool_log(slots=1, scope="node")
    log.apply(C.SetClusterVersion(version=V.POOL_RELEASE_WITHOUT_NODE, members={}, at=T0))
    log.fire(T0 + 1, "a", node="n1")
    b = log.fire(T0 + 1, "b", node="n1")["run_id"]
    c = log.fire(T0 + 1, "c", node="n1")["run_id"]
    assert (state(log, b), state(log, c)) == ("waiting", "waiting")
    # A waiting run (never placed: no node) is cancelled: the other still waits.
    log.apply(C.CancelRun(run_id=b, reason="no", at=T0 + 2))
    assert (state(log, b), state(log, c)) == ("cancelled", "waiting")
    # The pool grows: n1 has room for c now.
    log.apply(C.SetPools(pools=[["db", 2, "node"]], at=T0 + 3))
    assert state(log, c) == "pending"


def test_before_cluster_version_2_the_old_rule_still_refuses_as_the_old_nodes_did():
    """A log written before the raise, replayed by this code, decides what
    cronrd 0.2.0 decided there: the CancelRun is refused (and changes
    nothing), or this node's state would differ from the old nodes'."""
    log = pool_log(slots=1, scope="node")
    log.fire(T0 + 1, "a", node="n1")
    b = log.fire(T0 + 1, "b", node="n1")["run_id"]
    c = log.fire(T0 + 1, "c", node="n1")["run_id"]
    with pytest.raises(TypeError):
        log.apply(C.CancelRun(run_id=b, reason="no", at=T0 + 2))
    assert (state(log, b), state(log, c)) == ("waiting", "waiting")
    log.apply(C.SetClusterVersion(version=2, members={}, at=T0 + 3))
    log.apply(C.CancelRun(run_id=b, reason="no", at=T0 + 4))
    log.apply(C.SetPools(pools=[["db", 2, "node"]], at=T0 + 5))
    assert (state(log, b), state(log, c)) == ("cancelled", "pending")

"""``--downstream``: a rerun's (or backfill reprocess's) consumers follow it,
once each, in dependency order, never as a second record."""

from __future__ import annotations

import random

import pytest

from cronrd.state import commands as C
from cronrd.state import downstream as DS
from cronrd.errors import Refused
from tests.unit.state.test_backfill import finish
from tests.unit.state.test_dependencies import after, child_runs, ok, put_all
from tests.unit.state.test_state import T0, Log


def records(log, job):
    """{fire_time: [(attempt, kind, state), ...]} of a job's scheduled records."""
    out: dict[int, list] = {}
    for ft, attempt, kind, state in log.sm.conn.execute(
            "SELECT fire_time, attempt, kind, state FROM runs WHERE job=? AND "
            "origin='schedule' ORDER BY fire_time, attempt", (job,)):
        out.setdefault(ft, []).append((attempt, kind, state))
    return out


def run_through(log, job, t, state="succeeded"):
    """Finish the newest attempt of (job, t), assigning it first if pending."""
    (rid,) = next(iter(log.sm.conn.execute(
        "SELECT run_id FROM runs WHERE job=? AND fire_time=? AND origin='schedule' "
        "ORDER BY attempt DESC LIMIT 1", (job, t))))
    finish(log, rid, state=state, at=T0 + 100)
    return rid


def diamond():
    """a -> b, a -> c, (b, c) -> d, d -> e; one generation, all succeeded."""
    log = Log()
    put_all(log, a={}, b=after("a"), c=after("a"), d=after("b", "c"), e=after("d"))
    ok(log, "a", T0 + 1)
    for job in "bcde":
        run_through(log, job, T0 + 1)
    return log


def test_closure_orders_parents_before_children_and_lists_a_diamond_once():
    log = diamond()
    order, edges = DS.closure(log.sm.conn, "a", T0 + 1)
    assert order == [("b", T0 + 1), ("c", T0 + 1), ("d", T0 + 1), ("e", T0 + 1)]
    assert (("b", T0 + 1), ("d", T0 + 1)) in edges and (("c", T0 + 1), ("d", T0 + 1)) in edges
    assert DS.closure(log.sm.conn, "e", T0 + 1) == ([], [])


def test_rerun_downstream_reruns_each_consumer_once_after_all_its_parents():
    log = diamond()
    res = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    assert res["downstream"] == [["b", T0 + 1], ["c", T0 + 1], ["d", T0 + 1], ["e", T0 + 1]]
    assert len(records(log, "b")[T0 + 1]) == 1       # nothing moves before a is done
    run_through(log, "a", T0 + 1)
    assert records(log, "b")[T0 + 1][-1][:2] == (2, "rerun")
    assert records(log, "c")[T0 + 1][-1][:2] == (2, "rerun")
    run_through(log, "b", T0 + 1)
    assert len(records(log, "d")[T0 + 1]) == 1       # d waits for c too (the diamond)
    run_through(log, "c", T0 + 1)
    assert records(log, "d")[T0 + 1][-1] == (2, "rerun", "pending")
    run_through(log, "d", T0 + 1)
    run_through(log, "e", T0 + 1)
    for job in "bcde":  # one record each, two attempts: never a second record
        assert list(records(log, job)) == [T0 + 1]
        assert [a for a, _k, _s in records(log, job)[T0 + 1]] == [1, 2]
    # the @after generations did not fire a third attempt alongside
    assert sum(len(v) for v in records(log, "d").values()) == 2
    items = DS.items(log.sm.conn, res["run_id"])
    assert {i["job"]: i["state"] for i in items} == {"a": "done", "b": "done", "c": "done",
                                                     "d": "done", "e": "done"}


def test_without_downstream_a_scheduled_child_is_left_alone():
    log = Log()
    put_all(log, a={}, s={"schedule": "* * * * * *", "depends_on": [{"job": "a"}]})
    ok(log, "a", T0 + 1)
    sid = log.fire(T0 + 2, name="s")["run_id"]
    finish(log, sid)
    log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50))
    run_through(log, "a", T0 + 1)
    assert len(records(log, "s")[T0 + 2]) == 1
    # with --downstream the scheduled child's record that consumed it runs again
    log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 60, downstream=True))
    run_through(log, "a", T0 + 1)
    assert records(log, "s")[T0 + 2][-1] == (2, "rerun", "pending")


def test_a_failed_rerun_leaves_the_consumers_as_they_were_and_says_why():
    log = diamond()
    res = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    run_through(log, "a", T0 + 1, state="failed")
    for job in "bcde":
        assert len(records(log, job)[T0 + 1]) == 1, job
    notes = {i["job"]: (i["state"], i["note"]) for i in DS.items(log.sm.conn, res["run_id"])}
    assert notes["b"] == ("not_rerun", "not rerun: upstream_failed:a@2027-01-15T08:00:01Z")
    assert notes["e"] == ("not_rerun", "not rerun: no parent of it ran again")


def test_a_paused_consumer_is_not_rerun_and_its_children_neither():
    log = diamond()
    log.apply(C.SetPaused(name="b", paused=True, at=T0 + 40))
    res = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    run_through(log, "a", T0 + 1)
    run_through(log, "c", T0 + 1)
    notes = {i["job"]: i["note"] for i in DS.items(log.sm.conn, res["run_id"])}
    assert notes["b"] == "not rerun: job paused"
    # d: c ran again, b did not; its rule (all_succeeded) passes over b's old success
    assert records(log, "d")[T0 + 1][-1][:2] == (2, "rerun")


def test_downstream_of_a_backfill_reprocess():
    log = Log()
    put_all(log, a={"concurrency": "allow"}, b=after("a"))
    ok(log, "a", T0 + 1, state="failed")
    (b,) = child_runs(log, "b")
    assert b.state == "skipped"
    res = log.apply(C.CreateBackfill(job="a", fire_times=[T0 + 1], from_time=T0,
                                     to_time=T0 + 1, reprocess="failed", parallel=1,
                                     order="oldest", at=T0 + 50, downstream=True))
    step = log.apply(C.BackfillStep(backfill=res["backfill"], at=T0 + 51))
    (rid,) = step["released"]
    finish(log, rid)
    assert records(log, "b")[T0 + 1] == [(1, "upstream", "skipped"), (2, "rerun", "pending")]


def test_too_many_downstream_records_are_refused_whole(monkeypatch):
    log = diamond()
    monkeypatch.setattr(DS, "MAX_ITEMS", 2)
    monkeypatch.setattr(DS.closure, "__defaults__", (2,))
    with pytest.raises(Refused, match="more than 2 records are downstream"):
        log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    assert len(records(log, "a")[T0 + 1]) == 1   # the rerun itself rolled back


def _random_history(seed: int) -> Log:
    rng = random.Random(seed)
    log = Log()
    put_all(log, a={"concurrency": "allow"}, b=after("a"), c=after("a"), d=after("b", "c"))
    for step in range(80):
        r = rng.random()
        try:
            if r < 0.25:
                ok(log, "a", T0 + step + 1, state=rng.choice(["succeeded", "failed"]))
            elif r < 0.45:
                recs = list(log.sm.conn.execute(
                    "SELECT DISTINCT job, fire_time FROM runs ORDER BY job, fire_time"))
                if recs:
                    job, ft = rng.choice(recs)
                    log.apply(C.Rerun(job=job, fire_time=ft, at=T0 + 200 + step,
                                      downstream=rng.random() < 0.7))
            else:
                pend = list(log.sm.conn.execute(
                    "SELECT run_id FROM runs WHERE state IN ('pending','assigned') "
                    "ORDER BY run_id LIMIT 1"))
                if pend:
                    finish(log, pend[0][0], rng.choice(["succeeded", "failed"]),
                           at=T0 + 300 + step)
        except Refused:
            pass
    return log


def test_random_downstream_histories_are_deterministic_and_keep_one_record_per_attempt():
    released = 0
    for seed in range(8):
        log = _random_history(seed)
        assert log.sm.full_digest() == _random_history(seed).sm.full_digest()
        conn = log.sm.conn
        assert not list(conn.execute(
            "SELECT job, fire_time, target, attempt FROM runs WHERE origin='schedule' "
            "GROUP BY 1,2,3,4 HAVING COUNT(*) > 1"))
        # an item released only once every item it waits for had ended
        for root, job, ft, run_id in list(conn.execute(
                "SELECT root, job, fire_time, run_id FROM downstream_items WHERE run_id IS "
                "NOT NULL AND run_id != root")):
            released += 1
            for pj, pft in conn.execute(
                    "SELECT parent_job, parent_fire_time FROM downstream_edges WHERE root=? "
                    "AND child_job=? AND child_fire_time=?", (root, job, ft)):
                (pstate, prun) = next(iter(conn.execute(
                    "SELECT state, run_id FROM downstream_items WHERE root=? AND job=? AND "
                    "fire_time=?", (root, pj, pft))))
                assert pstate in ("done", "not_rerun")
                assert prun is None or prun < run_id
    assert released >= 5   # the histories do exercise --downstream


def test_explain_says_what_a_downstream_rerun_did_to_a_record():
    from cronrd.explain import explain as E
    from cronrd.ops.admin import Explain
    log = diamond()
    log.apply(C.SetPaused(name="b", paused=True, at=T0 + 40))
    res = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    run_through(log, "a", T0 + 1)

    def lines(job):
        out = E.explain(log.sm.conn, Explain(job=job, at=T0 + 1), now=T0 + 500,
                        default_tz="UTC")
        return [st["text"] for st in out["steps"] if st["step"] == "downstream"]
    root = f"a@2027-01-15T08:00:01Z (run {res['run_id']})"
    assert lines("a") == [f"its rerun (run {res['run_id']}) was --downstream"]
    assert lines("b") == [f"downstream of {root}: not rerun: job paused"]
    (c,) = lines("c")
    assert c.startswith(f"downstream of {root}: rerun as run ")
    assert lines("d") == [f"downstream of {root}: waits for its parents in that rerun to end"]
    assert lines("e") == [f"downstream of {root}: waits for its parents in that rerun to end"]


def test_a_consumer_follows_a_rerun_lost_with_its_node_once_the_retry_succeeds():
    # The 3-node leader-kill test saw this: b's rerun ran on the killed node,
    # was lost, was not retried, and c was reported upstream_failed.
    log = Log()
    put_all(log, a={}, b=after("a"), c=after("b"))
    ok(log, "a", T0 + 1)
    for job in "bc":
        run_through(log, job, T0 + 1)
    res = log.apply(C.Rerun(job="a", fire_time=T0 + 1, at=T0 + 50, downstream=True))
    run_through(log, "a", T0 + 1)
    (rid,) = next(iter(log.sm.conn.execute(
        "SELECT run_id FROM runs WHERE job='b' ORDER BY attempt DESC LIMIT 1")))
    log.apply(C.AssignRun(run_id=rid, node="n2", at=T0 + 60))
    log.apply(C.RunStarted(run_id=rid, token=log.index, node="n2", pid=10,
                           started_at=T0 + 60, log_path="/l"))
    assert log.apply(C.NodeLost(node="n2", at=T0 + 70, reason="down"))["retries"]
    assert len(records(log, "c")[T0 + 1]) == 1    # c waits for b's last attempt
    run_through(log, "b", T0 + 1)                  # the retry succeeds elsewhere
    assert [a[:2] for a in records(log, "b")[T0 + 1]] == [(1, "upstream"), (2, "rerun"),
                                                          (3, "retry")]
    assert records(log, "c")[T0 + 1][-1] == (2, "rerun", "pending")
    run_through(log, "c", T0 + 1)
    assert {i["job"]: i["state"] for i in DS.items(log.sm.conn, res["run_id"])} == {
        "a": "done", "b": "done", "c": "done"}

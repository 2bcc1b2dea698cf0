"""/metrics (cronrd/runtime/http/metrics.py): the families, their labels and values,
rendered by the official client from a registry of our own."""

from __future__ import annotations

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronrd import __version__
import asyncio

from cronrd.runtime.http.metrics import CACHE_FACTOR, CACHE_SECONDS, Metrics, live_view, render
from cronrd.state import alerts as AL
from cronrd.state import commands as C
from cronrd.state import events as EV
from cronrd.state import queries as Q
from tests.unit.state.test_state import T0, Log


def samples(page: bytes) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(page.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(log: Log, status=None, leader=True) -> bytes:
    return render(log.sm.conn, live_view("n1", status or {
        "role": "leader", "leader": "n1", "term": 3, "commit_index": 41, "down": []},
        log.index, leader))


def a_log() -> Log:
    log = Log()
    log.apply(C.NodeInfo(node="n1", state="up", addr="127.0.0.1:7000", tags=(), at=T0))
    log.apply(C.NodeInfo(node="n2", state="up", addr="127.0.0.1:7001", tags=(), at=T0))
    log.apply(C.NodeInfo(node="n3", state="draining", addr="127.0.0.1:7002", tags=(), at=T0))
    log.put("a")
    log.put("b")
    log.put("idle")
    ok = log.fire(T0 + 1, "a")
    log.finish(ok["run_id"], at=T0 + 5)
    ok = log.fire(T0 + 2, "a")
    log.finish(ok["run_id"], at=T0 + 9)
    bad = log.fire(T0 + 3, "b")
    log.finish(bad["run_id"], state="failed", exit_code=2)
    run = log.fire(T0 + 4, "b")
    log.apply(C.RunStarted(run_id=run["run_id"], token=log.run(run["run_id"]).token,
                           node="n1", pid=10, started_at=T0 + 4, log_path="/l"))
    return log


def test_the_families_and_their_values():
    log = a_log()
    status = {"term": 3, "commit_index": 41, "down": [{"id": "n2"}], "leader_changes": 2}
    got = samples(scrape(log, status))
    assert got[("cronrd_build_info", (("node", "n1"), ("version", __version__)))] == 1
    assert got[("cronrd_raft_is_leader", ())] == 1
    assert got[("cronrd_raft_term", ())] == 3
    assert got[("cronrd_raft_commit_index", ())] == 41
    assert got[("cronrd_raft_applied_index", ())] == log.index
    assert got[("cronrd_raft_leader_changes_total", ())] == 2
    # up, unreachable from here, draining
    assert got[("cronrd_node_up", (("node", "n1"),))] == 1
    assert got[("cronrd_node_up", (("node", "n2"),))] == 0
    assert got[("cronrd_node_up", (("node", "n3"),))] == 0
    # every job has its running gauge, 0 included
    assert got[("cronrd_job_running", (("job_name", "b"),))] == 1
    # Issue 33 (6): a job with none running says 0 (it was absent)
    assert got[("cronrd_job_running", (("job_name", "a"),))] == 0
    # the daemon's process: CPU, memory, start time (process_*; issue 33 (6))
    assert got[("process_start_time_seconds", ())] > 0
    assert got[("process_resident_memory_bytes", ())] > 0
    # the newest success only; a job without one has no sample
    assert got[("cronrd_job_last_success_timestamp_seconds", (("job_name", "a"),))] == T0 + 9
    assert ("cronrd_job_last_success_timestamp_seconds", (("job_name", "b"),)) not in got


def test_run_and_skip_counters_exist_from_load_and_survive_pruning():
    log = a_log()
    skipped = log.fire(T0 + 20, "idle", skip_reason="overlap: run 3 still running")
    assert log.run(skipped["run_id"]).state == "skipped"
    got = samples(scrape(log))
    runs = "cronrd_job_runs_total"
    assert got[(runs, (("job_name", "a"), ("origin", "schedule"), ("outcome", "succeeded")))] == 2
    assert got[(runs, (("job_name", "b"), ("origin", "schedule"), ("outcome", "failed")))] == 1
    # a job that never ran has its counters, at 0
    for outcome in ("succeeded", "failed"):
        assert got[(runs, (("job_name", "idle"), ("origin", "schedule"),
                           ("outcome", outcome)))] == 0
    assert got[("cronrd_job_skips_total", (("job_name", "idle"), ("reason", "overlap")))] == 1
    # a skip is counted once, there, not also as a run's outcome (issue 33 (6))
    assert not [k for k in got if k[0] == runs and ("outcome", "skipped") in k[1]]
    # pruning the records keeps the counts (counters never go down)
    log.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000, keep=1))
    assert Q.list_runs(log.sm.conn, job="a") == []  # the records are gone
    assert samples(scrape(log))[(runs, (("job_name", "a"), ("origin", "schedule"),
                                        ("outcome", "succeeded")))] == 2


def test_labels_are_job_name_never_job_nor_a_run_id():
    page = scrape(a_log()).decode()
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            assert "job" not in s.labels and "run_id" not in s.labels, s


def test_the_registry_is_our_own_not_the_global_one():
    scrape(a_log())
    assert b"cronrd_" not in prometheus_client.generate_latest(prometheus_client.REGISTRY)


def test_a_page_is_reused_within_the_cache_time():
    log = a_log()
    now = [100.0]
    m = Metrics(lambda: log.sm.conn, lambda: live_view("n1", {}, log.index, True),
                monotonic=lambda: now[0])

    async def main():
        first = await m.page()
        log.put("new")
        assert await m.page() is first
        now[0] += CACHE_SECONDS
        assert b'job_name="new"' in await m.page()
        # a slow render is reused for CACHE_FACTOR times its duration
        m._render = lambda live: now.__setitem__(0, now[0] + 3.0) or b"slow"
        now[0] += CACHE_SECONDS
        assert await m.page() == b"slow"
        m._render = lambda live: b"next"
        now[0] += 3.0 * CACHE_FACTOR - 0.5
        assert await m.page() == b"slow"
        now[0] += 0.5
        assert await m.page() == b"next"
    try:
        asyncio.run(main())
    finally:
        m._conn = None  # the test's connection stays the test's
        m.close()


def test_next_fire_times_come_from_the_leaders_scheduler():
    log = a_log()
    page = render(log.sm.conn, live_view("n1", {}, log.index, True, {"a": T0 + 60}))
    got = samples(page)
    assert got[("cronrd_job_next_fire_timestamp_seconds", (("job_name", "a"),))] == T0 + 60
    assert ("cronrd_job_next_fire_timestamp_seconds", (("job_name", "b"),)) not in got


def test_a_follower_reports_it_does_not_lead():
    got = samples(scrape(a_log(), leader=False))
    assert got[("cronrd_raft_is_leader", ())] == 0


def bucket(got, name, job, le):
    return got[(f"{name}_bucket", (("job_name", job), ("le", le)))]


def test_run_duration_and_schedule_delay_are_histograms_per_job():
    log = a_log()  # a: ran 4 s and 7 s, started on time; b: failed after 1 s, one running
    late = log.fire(T0 + 30, "a")
    log.apply(C.RunStarted(run_id=late["run_id"], token=log.run(late["run_id"]).token,
                           node="n1", pid=11, started_at=T0 + 30.7, log_path="/l"))
    log.finish(late["run_id"], at=T0 + 33)
    manual = log.apply(C.ManualRun(job="a", node="n1", at=T0 + 40))  # late by design
    log.finish(manual["run_id"], at=T0 + 140)
    took = T0 + 140 - log.run(manual["run_id"]).started_at
    assert 60 < took <= 300
    got = samples(scrape(log))
    dur, delay = "cronrd_job_run_duration_seconds", "cronrd_job_schedule_delay_seconds"
    assert got[(f"{dur}_count", (("job_name", "a"),))] == 4
    assert got[(f"{dur}_sum", (("job_name", "a"),))] == pytest.approx(4 + 7 + 2.3 + took)
    assert [bucket(got, dur, "a", le) for le in ("1.0", "5.0", "15.0", "60.0", "300.0",
                                                 "+Inf")] == [0, 2, 3, 3, 4, 4]
    assert got[(f"{dur}_count", (("job_name", "b"),))] == 1  # the running one has not ended
    assert got[(f"{delay}_count", (("job_name", "a"),))] == 3  # not the manual run
    assert got[(f"{delay}_sum", (("job_name", "a"),))] == pytest.approx(0.7)
    assert bucket(got, delay, "a", "0.5") == 2 and bucket(got, delay, "a", "1.0") == 3
    assert got[(f"{delay}_count", (("job_name", "b"),))] == 2  # the running one started
    # a job that never ran has no histogram series (its counters exist at 0)
    assert not [k for k in got if k[0].startswith(dur) and ("job_name", "idle") in k[1]]
    # pruning the records keeps the histograms
    log.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000, keep=1))
    assert samples(scrape(log))[(f"{dur}_count", (("job_name", "a"),))] == 4


def test_open_alerts_by_kind_and_open_dead_letter_per_job():
    log = a_log()  # b's failure opened a "failed" alert
    log.apply(C.RaiseAlerts(alerts=[["a", T0 + 1, "start_within", "late"],
                                    ["a", T0 + 2, "start_within", "late"],
                                    ["a", T0 + 2, "finish_within", "slow"]], at=T0 + 50))
    log.put("dl", on_final_failure="dead_letter")
    log.finish(log.fire(T0 + 60, "dl")["run_id"], state="failed", exit_code=1)
    got = samples(scrape(log))
    al = "cronrd_job_alerts_open"
    assert got[(al, (("job_name", "a"), ("kind", "start_within")))] == 2
    assert got[(al, (("job_name", "a"), ("kind", "finish_within")))] == 1
    assert got[(al, (("job_name", "b"), ("kind", "failed")))] == 1
    assert got[("cronrd_job_dead_letter", (("job_name", "dl"),))] == 1
    assert ("cronrd_job_dead_letter", (("job_name", "b"),)) not in got
    (aid,) = [a["alert_id"] for a in AL.alerts(log.sm.conn) if a["job"] == "b"]
    log.apply(C.AckAlert(alert_id=aid, note="known", who="root", at=T0 + 70))
    (d,) = AL.dead_letters(log.sm.conn)
    log.apply(C.DeadLetterAction(run_id=d["run_id"], action="discard", at=T0 + 71, note="x"))
    got = samples(scrape(log))
    assert (al, (("job_name", "b"), ("kind", "failed"))) not in got
    assert ("cronrd_job_dead_letter", (("job_name", "dl"),)) not in got


def test_pool_slots_in_use_and_waiting():
    log = a_log()
    log.apply(C.SetPools(pools=[["db", 2, "cluster"]], at=T0))
    log.put("p1", pool="db", pool_slots=2)
    log.put("p2", pool="db")
    log.fire(T0 + 80, "p1")
    assert log.fire(T0 + 80, "p2")["state"] == "waiting"
    got = samples(scrape(log))
    assert got[("cronrd_pool_slots", (("pool", "db"),))] == 2
    assert got[("cronrd_pool_slots_in_use", (("pool", "db"),))] == 2
    assert got[("cronrd_pool_waiting_runs", (("pool", "db"),))] == 1


def test_notification_outcomes_count_attempts_and_survive_pruning():
    log = a_log()
    e1 = EV.emit(log.sm.conn, "failed", job="b", at=T0)
    e2 = EV.emit(log.sm.conn, "failed", job="b", at=T0)
    log.apply(C.DeliveryResult(at=T0 + 1, leader="n1", attempts=[
        [e1, "chat", 1, False, False, "HTTP 500"], [e1, "chat", 2, True, True, ""],
        [e2, "chat", 1, False, True, "HTTP 500"], [e2, "mail", 1, True, True, ""]],
        done=[e1, e2]))
    log.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000, keep=1))
    got = samples(scrape(log))
    n = "cronrd_notifications_total"
    assert got[(n, (("notifier", "chat"), ("outcome", "sent")))] == 1
    assert got[(n, (("notifier", "chat"), ("outcome", "failed")))] == 1
    assert got[(n, (("notifier", "chat"), ("outcome", "given_up")))] == 1
    assert got[(n, (("notifier", "mail"), ("outcome", "sent")))] == 1


def test_apply_lag_is_what_is_committed_and_not_applied():
    log = a_log()
    got = samples(scrape(log, {"term": 3, "commit_index": log.index + 5, "down": []}))
    assert got[("cronrd_raft_apply_lag", ())] == 5
    got = samples(scrape(log, {"term": 3, "commit_index": 0, "down": []}))
    assert got[("cronrd_raft_apply_lag", ())] == 0  # a follower that knows less: never < 0


def test_every_family_has_help_and_type_and_parses():
    fams = {f.name: f.type for f in text_string_to_metric_families(scrape(a_log()).decode())}
    assert fams["cronrd_job_run_duration_seconds"] == "histogram"
    assert fams["cronrd_job_schedule_delay_seconds"] == "histogram"
    assert fams["cronrd_job_runs"] == "counter" and fams["cronrd_job_skips"] == "counter"
    assert fams["cronrd_notifications"] == "counter"
    for g in ("cronrd_job_running", "cronrd_job_last_success_timestamp_seconds",
              "cronrd_job_next_fire_timestamp_seconds", "cronrd_job_alerts_open",
              "cronrd_job_dead_letter", "cronrd_pool_slots", "cronrd_pool_slots_in_use",
              "cronrd_raft_apply_lag", "cronrd_node_up"):
        assert fams[g] == "gauge", g


def test_histograms_of_all_jobs_always_per_job_only_up_to_the_limit():
    log = a_log()  # three jobs: a, b, idle
    dur = "cronrd_run_duration_seconds"
    for limit, per_job in ((3, True), (2, False), (0, False)):
        got = samples(render(log.sm.conn, live_view("n1", {}, log.index, True), limit))
        assert got[(f"{dur}_count", ())] == 3  # a's two and b's one, whatever the limit
        assert got[(f"{dur}_bucket", (("le", "5.0"),))] == 2
        assert got[("cronrd_schedule_delay_seconds_count", ())] == 4
        assert (("cronrd_job_run_duration_seconds_count", (("job_name", "a"),)) in got) \
            is per_job
    # a removed job's runs stay in the totals (they never go down)
    log.apply(C.RemoveJob(name="a", at=T0 + 500))
    got = samples(scrape(log))
    assert got[(f"{dur}_count", ())] == 3
    assert ("cronrd_job_run_duration_seconds_count", (("job_name", "a"),)) not in got


def test_an_empty_state_has_zero_totals():
    got = samples(scrape(Log()))
    assert got[("cronrd_run_duration_seconds_count", ())] == 0
    assert got[("cronrd_schedule_delay_seconds_bucket", (("le", "+Inf"),))] == 0


def test_a_big_family_is_rendered_in_pieces_as_one_family(monkeypatch):
    import cronrd.runtime.http.metrics as M
    log = a_log()
    for i in range(25):
        log.put(f"more{i:02d}")
    def state_only(page: bytes) -> bytes:   # the process_* samples move between scrapes
        return b"\n".join(ln for ln in page.split(b"\n") if b"process_" not in ln)
    whole = scrape(log)
    monkeypatch.setattr(M, "CHUNK", 7)
    pieces = scrape(log)
    # the same bytes: one HELP and TYPE per family
    assert state_only(pieces) == state_only(whole)
    text = pieces.decode()
    assert text.count("# TYPE cronrd_job_runs_total counter") == 1
    assert samples(pieces)[("cronrd_job_runs_total", (("job_name", "more24"),
                                                      ("origin", "schedule"),
                                                      ("outcome", "failed")))] == 0

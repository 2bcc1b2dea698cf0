"""Integration: concurrency: queue through a real daemon. Runs of a job wait
for the one ahead of them and start when it ends, one at a time, in
fire-time order; nothing is skipped as an overlap; a caught-up outage runs
every missed fire time in turn."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


def t(iso: str | None) -> float | None:
    """An ISO time of a run view, with its milliseconds."""
    return None if iso is None else dt.datetime.fromisoformat(
        iso.replace("Z", "+00:00")).timestamp()


def started_in_order_one_at_a_time(runs: list[dict]) -> list[dict]:
    """The runs that started, by fire time (then run id); asserts that each started after
    the one before it ended (no overlap) and that they started in fire-time
    order."""
    done = sorted((r for r in runs if r["started_at"]),
                  key=lambda r: (t(r["fire_time"]), r["run_id"]))
    for before, after in zip(done, done[1:]):
        assert before["finished_at"] is not None, (before, after)
        assert t(after["started_at"]) >= t(before["finished_at"]), (before, after)
    return done


def test_runs_queue_behind_each_other_and_never_overlap(node):
    node.write_job("slow", {"schedule": "* * * * * *", "command": "sleep 2",
                            "concurrency": "queue"})
    node.start()
    runs = node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3
                          and any(r["state"] == "waiting" for r in rs), job="slow",
                          timeout=30, what="3 queued runs done, more waiting")
    assert not [r for r in runs if r["state"] == "skipped"], runs  # no overlap skips
    started = started_in_order_one_at_a_time(runs)
    assert sum(r["state"] == "running" for r in runs) <= 1
    # The first three succeeded back to back: each started as the one before
    # it ended, not at its own (earlier) fire time.
    done = [r for r in started if r["state"] == "succeeded"]
    for before, after in zip(done, done[1:]):
        assert t(after["started_at"]) - t(before["finished_at"]) < 1.5, (before, after)
        assert t(after["started_at"]) > t(after["fire_time"]) + 0.5
    # `cronrd runs` shows what a waiting run waits for.
    out = node.cli("runs", "slow", "--state", "waiting")
    assert out.returncode == 0, out.stderr
    assert "waiting" in out.stdout and "concurrency: queue" in out.stdout, out.stdout
    waiting = [r for r in node.runs("slow") if r["state"] == "waiting"]
    assert waiting and all(r["reason"].startswith("waiting for run ") and r["node"] is None
                           for r in waiting), waiting
    # A waiting run can be cancelled; the queue goes on without it.
    victim = waiting[0]["run_id"]
    out = node.cli("cancel", str(victim))
    assert out.returncode == 0, out.stderr
    runs = node.wait_runs(
        lambda rs: any(r["run_id"] > victim and r["state"] == "succeeded" for r in rs),
        job="slow", timeout=20, what="a run behind the cancelled one done")
    (gone,) = [r for r in runs if r["run_id"] == victim]
    assert gone["state"] == "cancelled" and gone["started_at"] is None
    assert "cancelled by" in gone["reason"]
    started_in_order_one_at_a_time(runs)


def test_a_manual_run_of_a_queued_job_waits_its_turn(node):
    node.write_job("busy", {"schedule": "@yearly", "command": "sleep 1.5",
                            "concurrency": "queue"})
    node.start()
    first = node.call("run_now", {"job": "busy"})
    node.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="busy")
    out = node.cli("run-now", "busy")
    assert out.returncode == 0, out.stderr
    assert "queued run" in out.stdout and "--state waiting" in out.stdout, out.stdout
    runs = node.wait_runs(lambda rs: len(rs) == 2 and all(r["state"] == "succeeded"
                                                          for r in rs), job="busy")
    assert runs[-1]["run_id"] == first["run_id"]
    started_in_order_one_at_a_time(runs)


def test_catchup_all_with_queue_runs_every_missed_fire_time_in_order(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "sleep 0.3",
                            "concurrency": "queue", "catchup": "all",
                            "catchup_window": "1h"})
    node.start()
    node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 2, job="tick")
    node.kill9()
    down = time.time()
    # Fires are committed a second ahead: the outage must be longer than that.
    wait_for(lambda: time.time() - down > 4.5, what="an outage of a few fire times")
    node.start()
    runs = node.wait_runs(
        lambda rs: sum(r["kind"] == "catchup" and r["state"] == "succeeded"
                       for r in rs) >= 3
        and not any(r["state"] in ("waiting", "pending") and t(r["fire_time"]) < down + 5
                    for r in rs),
        job="tick", timeout=30, what="the missed fire times caught up")
    fires = sorted(int(t(r["fire_time"])) for r in runs)
    # Every fire time from the first to the last has one record; none skipped
    # (today's forbid skips all but the first as overlaps).
    assert fires == list(range(fires[0], fires[-1] + 1)), fires
    assert fires[0] < down < fires[-1]
    assert not [r for r in runs if r["state"] == "skipped"], runs
    # They ran one after another, in fire-time order.
    started = started_in_order_one_at_a_time(runs)
    missed = [r for r in started if down < t(r["fire_time"]) < down + 4]
    assert len(missed) >= 3 and all(r["state"] == "succeeded" for r in missed), missed


def test_three_nodes_queue_across_nodes_through_a_leader_kill(cluster):
    c = cluster()
    c.write_job("slow", {"schedule": "* * * * * *", "command": "sleep 1",
                         "concurrency": "queue"})
    c.start()
    a = c["a"]
    a.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 2, job="slow",
                timeout=30)
    lead = c.leader()
    lead.kill9()
    wait_for(lambda: c.leader(), 15, what="new leader")
    lead.start(wait=False)
    lead.wait_ready(timeout=40)
    after = time.time()
    survivor = next(n for n in c if n is not lead)
    runs = survivor.wait_runs(
        lambda rs: sum(r["state"] == "succeeded" and t(r["started_at"]) > after
                       for r in rs) >= 4, job="slow", timeout=60,
        what="queued runs going on after the leader kill")
    assert not [r for r in runs if r["state"] == "skipped"], runs
    # One attempt-1 record per fire time, and never two runs at once, on any node.
    firsts = [r["fire_time"] for r in runs if r["attempt"] == 1]
    assert len(firsts) == len(set(firsts))
    done = started_in_order_one_at_a_time(runs)
    # Each released run was placed anew: the queue moves between nodes.
    assert len({r["node"] for r in done}) >= 2, [(r["run_id"], r["node"]) for r in done]
    assert c.converged()

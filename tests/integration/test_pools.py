"""Integration: pools and priorities through a real daemon. A pool of one
slot never runs two of its jobs' runs at once; the runs waiting for it
start in priority order; start_deadline skips what could not start in
time; a job naming a pool the config lacks is refused at FILE:LINE:COL."""

from __future__ import annotations

import datetime as dt

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


def t(iso: str | None) -> float | None:
    return None if iso is None else dt.datetime.fromisoformat(
        iso.replace("Z", "+00:00")).timestamp()


def assert_one_at_a_time(runs: list[dict]) -> list[dict]:
    """The runs that started, by start time; none started before the one
    before it finished."""
    done = sorted((r for r in runs if r["started_at"]), key=lambda r: t(r["started_at"]))
    for before, after in zip(done, done[1:]):
        assert before["finished_at"] is not None, (before, after)
        assert t(after["started_at"]) >= t(before["finished_at"]), (before, after)
    return done


def test_a_pool_of_one_slot_runs_one_at_a_time_in_priority_order(node_factory):
    node = node_factory(pools={"db": {"slots": 1}})
    for name, prio in (("hold", 0), ("low", -5), ("mid", 0), ("high", 10)):
        # hold keeps the slot while the others are asked for and looked at
        node.write_job(name, {"schedule": "@yearly", "pool": "db", "priority": prio,
                              "command": "sleep 4" if name == "hold" else "sleep 1"})
    node.start()
    node.call("run_now", {"job": "hold"})
    node.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="hold")
    for name in ("low", "mid", "high"):
        out = node.cli("run-now", name)
        assert out.returncode == 0, out.stderr
        assert f"of {name} waits for its pool (pool db: 1/1 slots in use" in out.stdout, \
            out.stdout
    waiting = node.wait_runs(lambda rs: sum(r["state"] == "waiting" for r in rs) == 3,
                             what="three runs waiting for the pool")
    assert {r["reason"] for r in waiting if r["state"] == "waiting"} <= {
        "pool db: 1/1 slots in use", "pool db: 1/1 slots in use, 1 run ahead",
        "pool db: 1/1 slots in use, 2 runs ahead"}
    assert all(r["node"] is None for r in waiting if r["state"] == "waiting")
    out = node.cli("pools")
    assert out.returncode == 0, out.stderr
    assert "db" in out.stdout and "1/1" in out.stdout, out.stdout
    pools = node.call("pools")["pools"]
    assert pools[0]["pool"] == "db" and pools[0]["in_use"] == 1 and pools[0]["waiting"] == 3
    runs = node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) == 4,
                          timeout=30, what="all four runs done")
    started = assert_one_at_a_time(runs)
    assert [r["job"] for r in started] == ["hold", "high", "mid", "low"]
    assert all(r["reason"].startswith("waited for pool db until ") for r in started[1:]), \
        started
    out = node.cli("status")
    assert "pools     db 0/1; `cronrd pools` for more" in out.stdout, out.stdout
    # With the daemon down, from this node's copy of the state.
    assert node.terminate() == 0
    out = node.cli("pools")
    assert out.returncode == 0 and out.stdout.split("\n")[1].split()[:4] == [
        "db", "cluster", "0/1", "0"], out.stdout + out.stderr


def test_scheduled_runs_share_the_slot_and_start_deadline_skips_the_backlog(node_factory):
    node = node_factory(pools={"db": {"slots": 1}})
    for name in ("a", "b", "c"):
        node.write_job(name, {"schedule": "* * * * * *", "command": "sleep 0.4", "pool": "db",
                              "concurrency": "allow", "start_deadline": "2s"})
    node.start()
    runs = node.wait_runs(
        lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 6
        and any((r["reason"] or "").startswith("start_deadline") for r in rs),
        timeout=40, what="runs done and some skipped by start_deadline")
    assert_one_at_a_time(runs)
    skipped = [r for r in runs if (r["reason"] or "").startswith("start_deadline")]
    assert all(r["state"] == "skipped" and r["started_at"] is None for r in skipped)
    assert "not started within 2s of its due time" in skipped[0]["reason"]
    # Nothing ever ran beside another run of the pool, and nothing waits long.
    assert sum(r["state"] in ("running", "assigned") for r in node.runs()) <= 1


def test_a_job_naming_an_unknown_pool_is_refused_at_its_line_and_column(node_factory):
    node = node_factory(pools={"db": {"slots": 2}})
    path = node.write_job("bad", 'schedule: "@daily"\ncommand: /bin/true\npool: dbb\n')
    node.write_job("big", 'schedule: "@daily"\ncommand: /bin/true\npool: db\n'
                          'pool_slots: 3\n')
    out = node.cli("validate")
    assert out.returncode == 1
    assert f"{path}:3:7: unknown pool 'dbb' (the daemon config defines: db); did you mean " \
           "'db'?" in out.stdout, out.stdout
    assert "big.yaml:4:13: pool_slots is 3 but pool 'db' has only 2 slots" in out.stdout
    node.start()
    status = wait_for(lambda: (s := node.call("status")) and len(s["problems"]) == 2 and s,
                      what="the daemon reports both files' problems")
    assert any(p.startswith(f"{path}:3:7: unknown pool 'dbb'") for p in status["problems"])
    assert node.call("jobs") == [] or all(j["name"] not in ("bad", "big")
                                          for j in node.call("jobs"))


def test_a_cluster_pool_stays_within_its_slots_across_leader_changes(cluster):
    import yaml
    c = cluster()
    for n in c:
        n.config["pools"] = {"db": {"slots": 1}}
        n.config_path.write_text(yaml.safe_dump(n.config))
    for name, prio in (("a", 0), ("b", 5), ("c", -5)):
        c.write_job(name, {"schedule": "* * * * * *", "command": "sleep 0.5", "pool": "db",
                           "priority": prio, "concurrency": "allow", "start_deadline": "3s"})
    c.start()
    done = 0
    for _ in range(3):
        lead = c.leader()
        # a few runs go through the pool under this leader, others waiting
        done += 3
        wait_for(lambda: sum(r["state"] == "succeeded" for r in lead.runs()) >= done
                 and any(r["state"] == "waiting" for r in lead.runs()), 30,
                 what=f"{done} runs done through the pool, more waiting")
        other = next(n for n in c if n is not lead)
        res = lead.cli("cluster", "transfer-leader", other.config["node_id"])
        assert res.returncode == 0, res.stderr
        wait_for(lambda: c.leader() is not lead, 15, what="a new leader")
    c.converged()
    runs = c["a"].runs(limit=100000)
    started = assert_one_at_a_time(runs)
    assert len(started) >= 9 and len({r["node"] for r in started}) >= 2, started
    assert all(n.call("pools")["pools"][0]["slots"] == 1 for n in c)

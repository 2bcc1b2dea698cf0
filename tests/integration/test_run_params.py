"""Integration: run parameters, idempotency keys and the workflow variables
through a real daemon. Each job prints its CRONRD_* environment
(`env | grep CRONRD_`) into a file named after its run id."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cronrd.schedule import iso_utc, parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def dump(out: Path) -> str:
    return f"env | grep ^CRONRD_ | sort > {out}/$CRONRD_RUN_ID.env"


def env_of(out: Path, run_id: int) -> dict[str, str]:
    path = out / f"{run_id}.env"
    wait_for(path.exists, what=f"{path}")
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


PARAMS = {"day": "today", "n": 5,
          "mode": {"type": "enum", "values": ["fast", "slow"], "default": "fast"}}


def test_a_scheduled_run_gets_its_key_interval_and_default_params(node):
    node.write_job("tick", {"schedule": "*/2 * * * * *", "concurrency": "allow",
                            "params": PARAMS, "command": dump(node.out)})
    node.start()
    runs = node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick",
                          what="a succeeded tick")
    run = next(r for r in runs if r["state"] == "succeeded")
    env = env_of(node.out, run["run_id"])
    fire = run["fire_time"]
    prev = iso_utc(parse_iso(fire) - 2)
    assert env["CRONRD_IDEMPOTENCY_KEY"] == f"tick/{fire}"
    assert env["CRONRD_ORIGIN"] == "schedule"
    assert env["CRONRD_PREV_FIRE_TIME"] == prev
    assert (env["CRONRD_INTERVAL_START"], env["CRONRD_INTERVAL_END"]) == (prev, fire)
    assert (env["CRONRD_PARAM_DAY"], env["CRONRD_PARAM_N"], env["CRONRD_PARAM_MODE"]) == (
        "today", "5", "fast")
    assert env["CRONRD_RUN_KEY"] == f"tick/{fire}/1"
    assert run["params"] == {} and run["key"] is None
    assert run["idempotency_key"] == f"tick/{fire}"


def test_a_retry_keeps_the_idempotency_key_and_changes_the_run_key(node):
    node.write_job("flaky", {"schedule": "*/3 * * * * *", "concurrency": "allow",
                             "retries": {"max": 1, "delay": "1s"},
                             "command": dump(node.out) + '; [ "$CRONRD_ATTEMPT" = 2 ]'})
    node.start()
    runs = node.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "succeeded"
                                         for r in rs), job="flaky", what="a retried run")
    second = next(r for r in runs if r["attempt"] == 2 and r["state"] == "succeeded")
    first = next(r for r in runs if r["attempt"] == 1 and r["fire_time"] == second["fire_time"])
    assert first["state"] == "failed"
    one, two = env_of(node.out, first["run_id"]), env_of(node.out, second["run_id"])
    assert one["CRONRD_IDEMPOTENCY_KEY"] == two["CRONRD_IDEMPOTENCY_KEY"] == \
        f"flaky/{second['fire_time']}"
    assert one["CRONRD_RUN_KEY"] != two["CRONRD_RUN_KEY"]
    assert (one["CRONRD_ATTEMPT"], two["CRONRD_ATTEMPT"]) == ("1", "2")
    assert one["CRONRD_INTERVAL_END"] == two["CRONRD_INTERVAL_END"] == second["fire_time"]


def test_run_now_with_params_and_a_key(node):
    # A daily hour twelve hours away: the schedule never fires during the test.
    hour = (time.gmtime().tm_hour + 12) % 24
    node.write_job("load", {"schedule": f"0 {hour} * * *", "timezone": "UTC", "params": PARAMS,
                            "command": dump(node.out)})
    node.start()
    res = node.cli("run-now", "load", "--param", "day=2026-01-01", "--param", "n=+7",
                   "--key", "load-2026-01-01", "--wait")
    assert res.returncode == 0, res.stderr
    [run] = node.runs("load")
    env = env_of(node.out, run["run_id"])
    assert env["CRONRD_ORIGIN"] == "manual"
    assert env["CRONRD_IDEMPOTENCY_KEY"] == "load/key:load-2026-01-01"
    assert (env["CRONRD_PARAM_DAY"], env["CRONRD_PARAM_N"], env["CRONRD_PARAM_MODE"]) == (
        "2026-01-01", "7", "fast")
    assert env["CRONRD_PREV_FIRE_TIME"] == ""
    # the interval of the schedule's last fire before the run
    end = parse_iso(env["CRONRD_INTERVAL_END"])
    assert env["CRONRD_INTERVAL_END"].endswith(f"T{hour:02d}:00:00Z")
    assert parse_iso(env["CRONRD_INTERVAL_START"]) == end - 86400
    assert end <= parse_iso(run["fire_time"]) < end + 86400
    # The same key again: the same run, no second one.
    again = node.cli("run-now", "load", "--key", "load-2026-01-01")
    assert again.returncode == 0, again.stderr
    assert f"run {run['run_id']} of load was already made with key load-2026-01-01 " \
           "(succeeded); no new run started" in again.stdout
    assert len(node.runs("load")) == 1
    data = json.loads(node.cli("runs", "load", "--json").stdout)
    assert data[0]["params"] == {"day": "2026-01-01", "n": "7"}
    assert data[0]["key"] == "load-2026-01-01"
    assert data[0]["idempotency_key"] == "load/key:load-2026-01-01"
    shown = json.loads(node.cli("show", "load", "--json").stdout)
    assert shown["recent_runs"][0]["params"] == {"day": "2026-01-01", "n": "7"}
    assert shown["spec"]["params"]["mode"] == {"type": "enum", "values": ["fast", "slow"],
                                               "default": "fast"}
    text = node.cli("runs", "load").stdout
    assert f"run {run['run_id']}: key load-2026-01-01; params day=2026-01-01 n=7" in text


@pytest.mark.parametrize("args,words", [
    (["--param", "nope=1"], "job 'load' has no parameter 'nope'; its parameters: day, mode, n"),
    (["--param", "n=seven"], "parameter 'n' of job 'load' is a whole number; give a whole "
                             "number such as 42"),
    (["--param", "mode=quick"], "is an enum (fast, slow); give one of fast, slow"),
    (["--param", "n"], "--param 'n': write NAME=VALUE"),
    (["--key", "two words"], "a key has no spaces or control characters"),
])
def test_run_now_refuses_bad_params_with_usage_errors(node, args, words):
    node.write_job("load", {"schedule": "@yearly", "params": PARAMS,
                            "command": dump(node.out)})
    node.start()
    res = node.cli("run-now", "load", *args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr
    assert node.runs("load") == []


def test_concurrent_run_now_with_one_key_makes_one_run(node):
    node.write_job("once", {"schedule": "@yearly", "concurrency": "allow",
                            "command": dump(node.out) + "; sleep 1"})
    node.start()
    cmd = [sys.executable, "-m", "cronrd", "--config", str(node.config_path), "run-now",
           "once", "--key", "batch-42"]
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = node.runs("once")
    assert len(runs) == 1, runs
    run_id = runs[0]["run_id"]
    started = [o for o, _ in outs if o.startswith(f"started run {run_id} ")]
    existing = [o for o, _ in outs if o.startswith(f"run {run_id} of once was already made")]
    assert len(started) == 1 and len(existing) == 3, outs
    node.wait_runs(lambda rs: rs[0]["state"] == "succeeded", job="once")
    assert env_of(node.out, run_id)["CRONRD_IDEMPOTENCY_KEY"] == "once/key:batch-42"
    assert len(node.runs("once")) == 1


def test_cluster_one_run_per_key_and_the_same_key_after_failover(cluster, tmp_path):
    """Three nodes: run-now with one key on every node at once makes one
    run; its node is killed mid-run, and the retry on another node gets the
    same idempotency key and parameters."""
    out = tmp_path / "env"
    out.mkdir()
    c = cluster(node_timeout="3s")
    c.start()
    lead = c.leader()
    fids = sorted(n.config["node_id"] for n in c.followers())
    c.write_job("long", {"schedule": "@yearly", "run_on": fids, "concurrency": "allow",
                         "params": PARAMS,
                         "command": f"env | grep ^CRONRD_ | sort > {out}/$CRONRD_RUN_ID.env; "
                                    "sleep 60"})
    wait_for(lambda: all([j for j in n.call("jobs") if j["name"] == "long"] for n in c),
             what="the job on every node")
    from concurrent.futures import ThreadPoolExecutor
    args = {"job": "long", "key": "nightly-7", "params": {"n": "7", "mode": "slow"}}
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda n: n.call("run_now", args, timeout=30), list(c)))
    assert len({a["run_id"] for a in answers}) == 1, answers
    assert sum(1 for a in answers if a.get("existing")) == 2, answers
    run_id = answers[0]["run_id"]
    run = lead.wait_runs(lambda rs: any(r["run_id"] == run_id and r["state"] == "running"
                                        for r in rs), job="long", what="running")[0]
    first = env_of(out, run_id)
    c[run["node"]].kill9()
    runs = lead.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "running"
                                         for r in rs), job="long", what="retried elsewhere",
                          timeout=40)
    assert len([r for r in runs if r["kind"] == "manual"]) == 1
    retry = next(r for r in runs if r["attempt"] == 2)
    assert retry["node"] != run["node"]
    second = env_of(out, retry["run_id"])
    for name in ("CRONRD_IDEMPOTENCY_KEY", "CRONRD_PARAM_N", "CRONRD_PARAM_MODE",
                 "CRONRD_PARAM_DAY", "CRONRD_INTERVAL_START", "CRONRD_INTERVAL_END",
                 "CRONRD_ORIGIN"):
        assert first[name] == second[name], name
    assert second["CRONRD_IDEMPOTENCY_KEY"] == "long/key:nightly-7"
    assert (second["CRONRD_PARAM_N"], second["CRONRD_PARAM_MODE"]) == ("7", "slow")
    assert first["CRONRD_RUN_KEY"] != second["CRONRD_RUN_KEY"]
    # the key now names the retry: asking again returns it
    again = lead.call("run_now", args)
    assert again == {"run_id": retry["run_id"], "state": "running", "existing": True}
    assert retry["params"] == {"n": "7", "mode": "slow"} and retry["key"] == "nightly-7"
    c.converged()


def test_an_explicit_rerun_gets_a_new_idempotency_key(node):
    node.write_job("daily", {"schedule": "*/3 * * * * *", "concurrency": "allow",
                             "catchup": "none", "command": dump(node.out)})
    node.start()
    runs = node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="daily",
                          what="a succeeded run")
    done = next(r for r in runs if r["state"] == "succeeded")
    assert node.cli("pause", "daily").returncode == 0   # nothing new meanwhile
    res = node.cli("rerun", "daily", "--at", done["fire_time"])
    assert res.returncode == 0, res.stderr
    runs = node.wait_runs(lambda rs: any(r["kind"] == "rerun" and r["state"] == "succeeded"
                                         for r in rs), job="daily", what="the rerun")
    again = next(r for r in runs if r["kind"] == "rerun")
    assert again["fire_time"] == done["fire_time"] and again["attempt"] == 2
    before, after = env_of(node.out, done["run_id"]), env_of(node.out, again["run_id"])
    assert before["CRONRD_IDEMPOTENCY_KEY"] == f"daily/{done['fire_time']}"
    assert after["CRONRD_IDEMPOTENCY_KEY"] == f"daily/{done['fire_time']}/rerun-2"
    assert after["CRONRD_INTERVAL_END"] == before["CRONRD_INTERVAL_END"] == done["fire_time"]
    assert again["idempotency_key"] == f"daily/{done['fire_time']}/rerun-2"

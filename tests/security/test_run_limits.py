"""Part 6 of issue 9 (descriptors and concurrent runs): the daemon raises its
open-file limit, and max_running caps concurrent runs on a node, globally and
per job; a run over a cap is skipped with the reason, never failed."""

from __future__ import annotations

import resource
from collections import Counter

import psutil
import pytest

from cronrd.config import parse_config
from cronrd.errors import ConfigError
from cronrd.jobspec import JobSpec, parse_job_text
from harness import wait_for

FINAL = ("succeeded", "failed", "timed_out", "lost", "cancelled", "skipped")


# -- validation ----------------------------------------------------------------------
def test_config_max_running_default_and_validation():
    assert parse_config({"node_id": "n1", "timezone": "UTC"}).max_running == 256
    assert parse_config({"node_id": "n1", "timezone": "UTC",
                         "max_running": 3}).max_running == 3
    for bad in (0, -1, "many", 2.5, True, None):
        with pytest.raises(ConfigError) as err:
            parse_config({"node_id": "n1", "timezone": "UTC", "max_running": bad}, "/c.yaml")
        assert "/c.yaml" in str(err.value) and "max_running" in str(err.value)
        assert "positive" in str(err.value)


def test_job_max_running_validation_and_round_trip(tmp_path):
    res = parse_job_text('schedule: "@hourly"\ncommand: "true"\nmax_running: 4\n', "/j/a.yaml")
    assert res.ok and res.jobs[0].max_running == 4
    spec = res.jobs[0]
    assert JobSpec.from_dict(spec.to_dict()).max_running == 4
    assert JobSpec(name="x", schedule="@hourly", command="true").max_running is None
    for bad in ("0", "-2", "lots", "1.5"):
        res = parse_job_text(f'schedule: "@hourly"\ncommand: "true"\nmax_running: {bad}\n',
                             "/j/a.yaml")
        assert not res.ok
        [p] = res.problems
        assert (p.line, p.col) == (3, 14) and "max_running" in p.message, str(p)


# -- the caps at work -------------------------------------------------------------------
def run_now_many(node, job: str, count: int) -> list[int]:
    return [node.call("run_now", {"job": job})["run_id"] for _ in range(count)]


def settled(node, job: str, ids: list[int], timeout: float = 60.0) -> list[dict]:
    return node.wait_runs(lambda rs: sum(r["run_id"] in ids and r["state"] in FINAL
                                         for r in rs) == len(ids),
                          job=job, timeout=timeout, what=f"{len(ids)} runs of {job} final")


@pytest.mark.integration
def test_per_job_max_running_skips_the_runs_over_the_cap(node):
    node.write_job("slow", {"schedule": "@yearly", "concurrency": "allow", "max_running": 2,
                            "command": "sleep 4"})
    node.write_job("other", {"schedule": "@yearly", "command": "echo fine"})
    node.start()
    ids = run_now_many(node, "slow", 6)
    assert node.cli("run-now", "other", "--wait").returncode == 0  # unrelated: unaffected
    runs = [r for r in settled(node, "slow", ids) if r["run_id"] in ids]
    states = Counter(r["state"] for r in runs)
    assert states == {"succeeded": 2, "skipped": 4}, runs
    for r in runs:
        if r["state"] == "skipped":
            assert r["reason"] == "max_running (2) of job slow reached on node n1", r
            assert r["started_at"] is None


@pytest.mark.integration
def test_global_max_running_skips_the_runs_over_the_cap(node_factory):
    node = node_factory(max_running=3)
    for name in ("a", "b"):
        node.write_job(name, {"schedule": "@yearly", "concurrency": "allow",
                              "command": "sleep 4"})
    node.start()
    ids = {"a": run_now_many(node, "a", 2), "b": run_now_many(node, "b", 3)}
    runs = [r for job in ("a", "b") for r in settled(node, job, ids[job])
            if r["run_id"] in ids[job]]
    states = Counter(r["state"] for r in runs)
    assert states == {"succeeded": 3, "skipped": 2}, runs
    assert {r["reason"] for r in runs if r["state"] == "skipped"} == {
        "max_running (3) reached on node n1"}


@pytest.mark.integration
def test_hundreds_of_concurrent_runs_under_1024_descriptors_fail_nothing(node):
    # The attack: 337 concurrent runs of one concurrency: allow job
    # under systemd's default of 1,024 open files. Nothing may fail with
    # "Too many open files": runs beyond max_running (default 256) are
    # skipped, and an unrelated job still runs.
    node.write_job("flood", {"schedule": "@yearly", "concurrency": "allow",
                             "command": "sleep 10"})
    node.write_job("other", {"schedule": "@yearly", "command": "echo fine"})
    node.start()
    psutil.Process(node.proc.pid).rlimit(psutil.RLIMIT_NOFILE, (1024, 1024))
    ids = run_now_many(node, "flood", 337)
    # While the node is full, another job's run is skipped with the reason
    # (not failed for want of descriptors)...
    res = node.cli("run-now", "other", "--wait")
    assert "max_running (256) reached on node n1" in res.stderr, res.stdout + res.stderr
    runs = [r for r in settled(node, "flood", ids, timeout=90) if r["run_id"] in ids]
    states = Counter(r["state"] for r in runs)
    assert states["failed"] == 0, [r["reason"] for r in runs if r["state"] == "failed"][:5]
    assert states["succeeded"] <= 256 and states["skipped"] >= 337 - 256, states
    assert states["succeeded"] + states["skipped"] == 337, states
    assert "Too many open files" not in node.daemon_log()
    # ...and once the flood is over it runs.
    res = node.cli("run-now", "other", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert node.call("status")["ready"]


@pytest.mark.integration
def test_daemon_raises_its_open_file_limit_and_jobs_keep_the_original(node):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 1024:
        pytest.skip(f"the hard open-file limit here is {hard}: nothing to raise to")
    node.write_job("limits", {"schedule": "@yearly",
                              "command": f"ulimit -n > {node.out}/nofile"})
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        node.start(wait=False)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    node.wait_ready()
    assert psutil.Process(node.proc.pid).rlimit(psutil.RLIMIT_NOFILE) == (hard, hard)
    assert f"event=nofile_limit soft={hard} hard={hard} was=1024" in node.daemon_log()
    assert node.cli("run-now", "limits", "--wait").returncode == 0
    wait_for(lambda: (node.out / "nofile").read_text().strip() == "1024",
             what="the job's own limit", timeout=5)


def test_unit_file_sets_the_open_file_limit():
    from harness import REPO
    lines = [ln.strip() for ln in (REPO / "systemd" / "cronrd.service").read_text().splitlines()]
    [limit] = [ln for ln in lines if ln.startswith("LimitNOFILE=")]
    soft, _, hard = limit.partition("=")[2].partition(":")
    assert int(soft) == 1024 and int(hard) >= 65536, limit

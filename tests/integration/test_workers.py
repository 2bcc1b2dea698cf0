"""Issue 34 (2): worker agents. A worker (`cronrd worker`) is no Raft member
and holds no replicated state; it dials the servers' worker port, and the
leader places runs on it exactly as on members: run_on tags, claims,
leases, node loss, logs read through its connection."""

from __future__ import annotations

import time
import urllib.request

import pytest

from cronrd.schedule import parse_iso
from cluster_harness import init_tls
from harness import wait_for

pytestmark = pytest.mark.integration

WORKERS = ("wk1", "wk2")


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    return init_tls(tmp_path_factory.mktemp("tls"), workers=",".join(WORKERS))


@pytest.fixture
def fleet(cluster, tls_dir):
    """Three servers with worker ports (not started)."""
    return cluster(tls_dir=tls_dir, worker_port=True, first_ip=101)


def test_a_tagged_job_runs_only_on_the_tagged_worker(fleet, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet.write_job("gpu", {"schedule": "* * * * * *", "run_on": {"tags": ["gpu"]},
                            "command": f"echo \"$CRONRD_NODE\" >> {out}/ran; "
                                       "echo hello from $CRONRD_NODE"})
    fleet.start()
    gpu = fleet.worker("wk1", tags=["gpu"]).start(wait=False)
    plain = fleet.worker("wk2").start(wait=False)
    gpu.wait_ready(30)
    plain.wait_ready(30)
    st = fleet.wait_worker("wk1")
    assert "gpu" in st["tags"] and st["capacity"] > 0
    lead = fleet.leader()
    runs = lead.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3,
                          job="gpu", timeout=30, what="three gpu runs done")
    done = [r for r in runs if r["state"] == "succeeded"]
    assert {r["node"] for r in done} == {"wk1"}, done
    assert set((out / "ran").read_text().split()) == {"wk1"}
    # its log is on the worker, and `cronrd logs` on any server reads it through the leader
    follower = fleet.followers()[0]
    res = follower.cli("logs", "gpu", "--run", str(done[0]["run_id"]))
    assert res.returncode == 0, res.stderr
    assert "hello from wk1" in res.stdout
    members = lead.call("status")["workers"]
    assert {w["node"] for w in members} == {"wk1", "wk2"}
    # followers list them too, from the replicated registration
    assert {w["node"] for w in follower.call("status")["workers"]} == {"wk1", "wk2"}
    # operators see them: status, cluster members, /metrics
    text = lead.cli("status").stdout
    assert "workers   2/2 connected" in text, text
    table = lead.cli("cluster", "members").stdout
    assert "worker agents" in table and any(
        ln.split()[:2] == ["wk1", "yes"] and "gpu" in ln for ln in table.splitlines()), table
    with urllib.request.urlopen(lead.call("status")["http"] + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'cronrd_worker_up{worker="wk1"} 1.0' in metrics
    assert any(ln.startswith('cronrd_worker_info{capacity="256",tags="') and "gpu" in ln
               and 'worker="wk1"' in ln for ln in metrics.splitlines()), metrics


def _long_job(out, **over):
    body = {"schedule": "@yearly", "run_on": {"tags": ["gpu"]},
            "command": f"echo \"$CRONRD_NODE $CRONRD_RUN_ID\" >> {out}/ran; "
                       f"touch {out}/started-$CRONRD_RUN_ID; sleep 6; echo finished"}
    body.update(over)
    return body


def _started_on(lead, job, timeout=30):
    return lead.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job=job,
                          timeout=timeout, what=f"{job} running")


@pytest.mark.parametrize("policy", ["retry", "fail"])
def test_a_killed_worker_has_its_run_replaced_or_failed_per_on_node_loss(fleet, tmp_path,
                                                                         policy):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet.write_job("long", _long_job(out, on_node_loss=policy))
    fleet.start()
    w1 = fleet.worker("wk1", tags=["gpu"]).start()
    fleet.wait_worker("wk1")
    lead = fleet.leader()
    res = lead.cli("run-now", "long")
    assert res.returncode == 0, res.stderr
    first = [r for r in _started_on(lead, "long") if r["state"] == "running"][0]
    assert first["node"] == "wk1"
    w2 = fleet.worker("wk2", tags=["gpu"]).start()
    fleet.wait_worker("wk2")
    # The worker's host dies: the agent and the run's processes with it.
    w1.kill9()
    w1.kill_detached_runs()
    if policy == "retry":
        runs = lead.wait_runs(lambda rs: any(r["node"] == "wk2" and r["state"] == "succeeded"
                                             for r in rs), job="long", timeout=40,
                              what="the run retried on wk2")
        lost = next(r for r in runs if r["run_id"] == first["run_id"])
        assert lost["state"] == "lost" and "wk1" in lost["reason"]
        assert [r["kind"] for r in runs if r["node"] == "wk2"] == ["retry"]
    else:
        runs = lead.wait_runs(lambda rs: all(r["state"] not in ("assigned", "running")
                                             for r in rs), job="long", timeout=40,
                              what="the run ended")
        assert [(r["run_id"], r["state"]) for r in runs] == [(first["run_id"], "lost")]
        assert "did not answer the leader" in runs[0]["reason"]
    assert w2.proc.poll() is None


def test_a_restarted_worker_keeps_its_running_job_and_reports_its_exit(fleet, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet.write_job("long", _long_job(out))
    fleet.start()
    w1 = fleet.worker("wk1", tags=["gpu"]).start()
    fleet.wait_worker("wk1")
    lead = fleet.leader()
    assert lead.cli("run-now", "long").returncode == 0
    first = [r for r in _started_on(lead, "long") if r["state"] == "running"][0]
    assert w1.terminate(30) == 0          # shutdown detach: the run goes on
    assert any(rec.job_alive() for rec in w1.supervised())
    w1.start()
    runs = lead.wait_runs(lambda rs: all(r["state"] == "succeeded" for r in rs), job="long",
                          timeout=40, what="the run done")
    assert [(r["run_id"], r["node"], r["exit_code"]) for r in runs] == \
        [(first["run_id"], "wk1", 0)]
    assert (out / "ran").read_text().count("wk1") == 1   # it ran once
    assert "adopted=1" in w1.log_file.read_text()


def test_logs_follow_a_workers_run_from_a_server(fleet, tmp_path):
    fleet.write_job("talk", {"schedule": "@yearly", "run_on": {"tags": ["gpu"]},
                             "command": "for i in 1 2 3 4; do echo line-$i; sleep 1; done"})
    fleet.start()
    fleet.worker("wk1", tags=["gpu"]).start()
    fleet.wait_worker("wk1")
    lead = fleet.leader()
    assert lead.cli("run-now", "talk").returncode == 0
    run = _started_on(lead, "talk")[0]
    follower = fleet.followers()[0]
    # (-f with --run follows that run to its end, then returns)
    res = follower.cli("logs", "talk", "--run", str(run["run_id"]), "-f", timeout=60)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("line-")] == \
        ["line-1", "line-2", "line-3", "line-4"]


def test_a_disconnected_workers_log_says_where_it_is(fleet, tmp_path):
    fleet.write_job("hello", {"schedule": "@yearly", "run_on": {"tags": ["gpu"]},
                              "command": "echo hi"})
    fleet.start()
    w1 = fleet.worker("wk1", tags=["gpu"]).start()
    fleet.wait_worker("wk1")
    lead = fleet.leader()
    assert lead.cli("run-now", "hello", "--wait").returncode == 0
    w1.terminate(30)
    wait_for(lambda: not fleet.worker_state("wk1")["connected"], 15)
    res = lead.cli("logs", "hello")
    assert res.returncode != 0
    assert "worker wk1 is not connected: its log is on it" in res.stderr


def test_a_removed_worker_is_cut_off_and_refused_from_then_on(fleet):
    fleet.start()
    w1 = fleet.worker("wk1", tags=["gpu"]).start()
    fleet.wait_worker("wk1")
    lead = fleet.leader()
    res = lead.cli("cluster", "remove", "wk1")
    assert res.returncode == 0, res.stderr
    wait_for(lambda: fleet.worker_state("wk1") is None, 15, what="wk1 unlisted")
    # its next hello is refused, and it is told why
    wait_for(lambda: "was removed from the cluster" in w1.log_file.read_text(), 15,
             what="its next hello refused")
    assert fleet.worker_state("wk1") is None and w1.proc.poll() is None


def test_a_dead_leader_host_costs_a_worker_nothing(fleet, tmp_path):
    """The leader's host freezes (no FIN, no RST): the worker must give up on
    it at once when its pings go unanswered and find the new leader well
    within node_timeout, or the new leader declares it lost (a TLS close
    waiting for the dead peer held it 30 s)."""
    import signal as sig
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet.write_job("tick", {"schedule": "* * * * * *", "run_on": {"tags": ["w"]},
                             "concurrency": "allow",
                             "command": f"echo $CRONRD_FIRE_TIME >> {out}/ran"})
    fleet.start()
    fleet.worker("wk1", tags=["w"]).start()
    fleet.wait_worker("wk1")
    old = fleet.leader()
    old.proc.send_signal(sig.SIGSTOP)
    try:
        frozen = time.time()
        new = wait_for(lambda: next((n for n in fleet.running() if n is not old and
                                     n.call("status", timeout=2)["role"] == "leader"), None),
                       20, what="a new leader")
        wait_for(lambda: any(w["node"] == "wk1" and w.get("connected")
                             for w in new.call("status")["workers"] or ()), 20,
                 what="wk1 connected to the new leader")
        assert time.time() - frozen < 10   # node_timeout is 3 s after the election
        later = int(time.time()) + 2
        runs = new.wait_runs(lambda rs: any(r["state"] == "succeeded" and r["node"] == "wk1"
                                            and parse_iso(r["fire_time"]) >= later
                                            for r in rs), job="tick", timeout=30)
        lost = [r for r in runs if r["state"] == "lost" and "did not answer" in
                (r["reason"] or "")]
        assert not lost, lost
    finally:
        old.proc.send_signal(sig.SIGCONT)

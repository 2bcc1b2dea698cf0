"""Issue 34 (done when): the record guarantees with workers in the cluster.
A worker killed (its host dies), cut off from the servers (its network
fails while it runs), and restarted: every fire time of a job that runs on
workers only has exactly one first attempt, none is missed, and no attempt
ran twice (the fences: a cut-off worker starts nothing once its lease is
out; a run the leader moved or retried elsewhere never starts there)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cluster_harness import check_exactly_once, cut_off, heal_all, iptables_usable, init_tls
from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    return init_tls(tmp_path_factory.mktemp("tls"), workers="wk1,wk2")


def _until(t: float) -> None:
    """Let the cluster run until wall time ``t`` (the faults' schedule)."""
    while time.time() < t:
        time.sleep(min(0.2, max(0.0, t - time.time())))


@pytest.mark.skipif(not iptables_usable(), reason="needs iptables (root) to cut a worker off")
def test_kill_cut_and_restart_workers_every_fire_time_once(cluster, tls_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet = cluster(tls_dir=tls_dir, worker_port=True, worker_bind="0.0.0.0", first_ip=121)
    fleet.write_job("tick", {
        # (allow: on a loaded host a run may outlast its second; forbid would then
        # skip the next fire time, by the job's own policy, not a fault's doing)
        "schedule": "* * * * * *", "run_on": {"tags": ["w"]}, "concurrency": "allow",
        "command": f"echo \"$CRONRD_FIRE_TIME $CRONRD_ATTEMPT $CRONRD_NODE\" >> {out}/exec; "
                   "sleep 0.4"})
    fleet.start()
    w1 = fleet.worker("wk1", tags=["w"], via="127.0.0.131").start()
    w2 = fleet.worker("wk2", tags=["w"], via="127.0.0.132").start()
    fleet.wait_worker("wk1")
    fleet.wait_worker("wk2")
    lead = fleet.leader()
    t0 = time.time()
    first = int(t0) + 2
    _until(t0 + 4)
    # 1. wk1's host dies: the agent and its runs
    w1.kill9()
    w1.kill_detached_runs()
    _until(t0 + 10)                     # node_timeout (3 s) and more
    w1.start()
    fleet.wait_worker("wk1")
    _until(t0 + 16)
    # 2. wk2's network fails while it goes on (its lease runs out; it is lost)
    cut_off("127.0.0.132")
    _until(t0 + 24)
    heal_all()
    fleet.wait_worker("wk2", timeout=40)
    _until(t0 + 28)
    # 3. wk2 restarts (detach: its runs go on and are adopted)
    assert w2.terminate(30) == 0
    w2.start()
    fleet.wait_worker("wk2")
    _until(t0 + 34)
    last = int(time.time()) - 3
    runs = wait_for(lambda: (rs := lead.runs("tick")) and all(
        r["state"] not in ("pending", "assigned", "running") or parse_iso(r["fire_time"]) > last
        for r in rs) and rs, 40, what="the window's runs ended")
    check_exactly_once(runs, "tick", first, last)
    window = [r for r in runs if first <= parse_iso(r["fire_time"]) <= last]
    done = Counter(parse_iso(r["fire_time"]) for r in window if r["state"] == "succeeded")
    missed = [t for t in range(first, last + 1) if done.get(t, 0) == 0]
    assert not missed, (f"fire times with no successful run: {missed}",
                        [(r["fire_time"], r["attempt"], r["state"], r["node"], r["reason"])
                         for r in window if parse_iso(r["fire_time"]) in missed])
    assert max(done.values()) == 1, "a fire time succeeded twice"
    assert {r["node"] for r in window} <= {"wk1", "wk2"}
    # no attempt ran twice: what ran is one line per (fire time, attempt)
    lines = [ln.split() for ln in (out / "exec").read_text().splitlines()]
    ran = Counter((fire, attempt) for fire, attempt, _ in lines
                  if first <= parse_iso(fire) <= last)
    twice = {k: n for k, n in ran.items() if n > 1}
    assert not twice, f"attempts that ran twice: {twice}"
    # the faults happened as meant: the leader saw wk1 go, and wk2 lost its link
    servers = "".join(n.log_file.read_text() for n in fleet)
    assert "event=worker_disconnected node=wk1" in servers
    assert "event=worker_link_lost" in w2.log_file.read_text().split("--- start 2 ---")[0]

"""Part 3 of issue 9: a pid and start time in the replicated state never make
a node signal a process that is not its run."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from forged_state import ForgedState
from harness import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def stranger():
    """A process that has nothing to do with cronrd, in its own session (as
    sshd's or a login shell's would be), with a child of its own."""
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 300 & wait"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait(10)


def test_forged_pid_and_start_time_do_not_make_reconcile_kill_a_stranger(node, stranger):
    node.write_job("j", {"schedule": "@yearly", "command": "true"})
    node.start()
    assert node.terminate() == 0
    forged = ForgedState(node.config["data_dir"] + "/state.db")
    # Exactly the pid and create time of the stranger, as a member could
    # learn them (or guess them for pid 1, sshd...).
    run = forged.running_run("j", pid=stranger.pid,
                             started_at=psutil.Process(stranger.pid).create_time(),
                             log_path="/dev/null")
    forged.close()
    node.start()
    runs = node.wait_runs(lambda rs: any(r["run_id"] == run.run_id and r["state"] == "lost"
                                         for r in rs), job="j", what="the forged run settled")
    [settled] = [r for r in runs if r["run_id"] == run.run_id]
    assert stranger.poll() is None, "the daemon killed a process that was not its run"
    assert psutil.Process(stranger.pid).children()  # its child is alive too
    assert str(stranger.pid) not in (settled["reason"] or "")


def test_run_process_requires_the_runs_identity(stranger):
    from cronrd.runtime.runs.processes import run_process
    started = psutil.Process(stranger.pid).create_time()
    assert run_process(stranger.pid, started, run_id=7, node="n1") is None
    me = subprocess.Popen(["sleep", "30"], env={"CRONRD_RUN_ID": "7", "CRONRD_NODE": "n1"})
    try:
        # Until its exec completes the child still has our environment.
        wait_for(lambda: psutil.Process(me.pid).environ().get("CRONRD_RUN_ID") == "7",
                 what="sleep's own environment")
        created = psutil.Process(me.pid).create_time()
        assert run_process(me.pid, created, run_id=7, node="n1").pid == me.pid
        assert run_process(me.pid, created, run_id=8, node="n1") is None  # another run
        assert run_process(me.pid, created, run_id=7, node="n2") is None  # another node
        assert run_process(me.pid, created - 60, run_id=7, node="n1") is None  # pid reused
    finally:
        me.kill()
        me.wait()


def test_an_adopted_runs_token_is_read_from_its_own_process_only(stranger):
    from cronrd.runtime.runs.processes import run_secret
    from cronrd.state.checkpoints import token_hash
    assert run_secret(psutil.Process(stranger.pid), 7, "n1") == ""
    assert run_secret(None, 7, "n1") == ""
    me = subprocess.Popen(["sleep", "30"], env={"CRONRD_RUN_ID": "7", "CRONRD_NODE": "n1",
                                                "CRONRD_RUN_TOKEN": "tok"})
    try:
        wait_for(lambda: psutil.Process(me.pid).environ().get("CRONRD_RUN_ID") == "7",
                 what="sleep's own environment")
        proc = psutil.Process(me.pid)
        assert run_secret(proc, 7, "n1") == token_hash("tok")
        assert run_secret(proc, 8, "n1") == "" and run_secret(proc, 7, "n2") == ""
    finally:
        me.kill()
        me.wait(10)

"""Integration: runs survive their daemon (kill -9, SIGTERM, an upgrade).

Each run has a supervisor process of its own that outlives the daemon; the
next daemon adopts runs that are still going and collects those that ended
meanwhile with their real exit code, as the same attempt. Only a run whose
supervisor is gone too is lost (and retried).
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


def gated_job(node, name: str, code: int, **extra) -> tuple:
    """A job that writes its pid, prints a line, waits for a release file
    (created by the test), prints another and exits with ``code``."""
    pid_file, release = node.out / f"{name}.pid", node.out / f"{name}.release"
    node.write_job(name, {"schedule": "@yearly", "command":
                          f"echo $$ > {pid_file}; echo before; "
                          f"while [ ! -e {release} ]; do sleep 0.05; done; "
                          f"echo after; exit {code}", **extra})
    return pid_file, release


def job_pid(pid_file) -> int:
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
             what="job started")
    return int(pid_file.read_text())


def running_job(node, name: str, code: int, **extra) -> tuple:
    """Start the daemon with a gated job, run it now and wait until it runs:
    (its pid, its release file)."""
    pid_file, release = gated_job(node, name, code, **extra)
    node.start()
    node.call("run_now", {"job": name})
    pid = job_pid(pid_file)
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job=name)
    return pid, release


def one_run(node, job: str) -> dict:
    runs = node.runs(job)
    assert len(runs) == 1, runs  # the same attempt: no retry, no second record
    return runs[0]


def test_kill9_of_the_daemon_keeps_the_run_and_reports_its_real_exit_code(node):
    pid_file, release = gated_job(node, "backup", 7)
    node.start()
    node.call("run_now", {"job": "backup"})
    pid = job_pid(pid_file)
    run = node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="backup")[0]
    node.kill9()
    assert psutil.pid_exists(pid)  # the job outlived its daemon
    node.start()
    adopted = one_run(node, "backup")
    assert adopted["state"] == "running" and adopted["run_id"] == run["run_id"]
    assert "event=run_adopted job=backup" in node.daemon_log()
    release.touch()
    done = node.wait_runs(lambda rs: rs and rs[0]["state"] == "failed", job="backup",
                          what="the adopted run's end")
    assert len(done) == 1 and done[0]["exit_code"] == 7 and done[0]["attempt"] == 1
    # Its output before and after the restart is in the one log.
    out = node.cli("logs", "backup")
    assert out.returncode == 0 and "before\n" in out.stdout and "after\n" in out.stdout


def test_run_that_ends_while_the_daemon_is_down_is_collected_with_its_exit_code(node):
    pid, release = running_job(node, "report", 0)
    node.kill9()
    release.touch()
    wait_for(lambda: not psutil.pid_exists(pid), what="the job ended while no daemon ran")
    node.start()
    done = node.wait_runs(lambda rs: rs and rs[0]["state"] == "succeeded", job="report",
                          what="the collected result")
    assert len(done) == 1 and done[0]["exit_code"] == 0
    assert "event=run_collected job=report" in node.daemon_log()
    # Committed: its record is gone.
    wait_for(lambda: not node.supervised(), what="record removed")


def test_a_signal_that_killed_the_job_meanwhile_is_reported_as_that_signal(node):
    pid_file, _ = gated_job(node, "killed", 0)
    node.start()
    node.call("run_now", {"job": "killed"})
    pid = job_pid(pid_file)
    node.kill9()
    os.kill(pid, signal.SIGUSR1)
    wait_for(lambda: not psutil.pid_exists(pid), what="the job died")
    node.start()
    done = node.wait_runs(lambda rs: rs and rs[0]["state"] == "failed", job="killed")
    assert done[0]["signal"] == signal.SIGUSR1 and done[0]["exit_code"] is None
    assert "SIGUSR1" in done[0]["reason"]


def test_sigterm_detaches_running_jobs_by_default(node):
    pid, release = running_job(node, "nightly", 3)
    assert node.terminate(30) == 0  # systemctl restart / apt upgrade
    assert "event=runs_detached count=1" in node.daemon_log()
    assert psutil.pid_exists(pid)
    node.start()
    assert one_run(node, "nightly")["state"] == "running"
    release.touch()
    done = node.wait_runs(lambda rs: rs and rs[0]["state"] == "failed", job="nightly")
    assert done[0]["exit_code"] == 3


def test_a_run_whose_supervisor_died_too_is_lost_and_retried(node):
    pid, release = running_job(node, "fragile", 0)
    node.kill9()
    (rec,) = node.supervised()
    assert rec.pid == pid and rec.supervisor_alive()
    os.kill(rec.sup, signal.SIGKILL)
    wait_for(lambda: not rec.supervisor_alive(), what="supervisor gone")
    node.start()
    runs = node.wait_runs(lambda rs: any(r["attempt"] == 2 for r in rs), job="fragile",
                          what="the retry")
    first = [r for r in runs if r["attempt"] == 1][0]
    assert first["state"] == "lost" and "supervisor is gone too" in first["reason"]
    # Its job, orphaned without a supervisor, was stopped (it could report nothing).
    wait_for(lambda: not psutil.pid_exists(pid) or
             psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="orphan stopped")
    release.touch()
    node.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "succeeded"
                                  for r in rs), job="fragile", what="the retry succeeds")


def test_supervisor_killed_under_a_live_daemon_is_lost_not_hung(node):
    pid, _ = running_job(node, "victim", 0, on_node_loss="fail")
    (rec,) = node.supervised()
    os.kill(rec.sup, signal.SIGKILL)
    run = node.wait_runs(lambda rs: rs and rs[0]["state"] == "lost", job="victim")[0]
    assert "supervisor" in run["reason"]
    wait_for(lambda: not psutil.pid_exists(pid) or
             psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="job stopped")


def test_timeout_still_applies_to_an_adopted_run(node):
    node.write_job("slow", {"schedule": "@yearly", "command": "sleep 300",
                            "timeout": "4s", "kill_grace": "1s"})
    node.start()
    node.call("run_now", {"job": "slow"})
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="slow")
    node.kill9()
    node.start()
    run = node.wait_runs(lambda rs: rs and rs[0]["state"] == "timed_out", job="slow",
                         timeout=30)[0]
    assert "timed out after 4s" in run["reason"]


def test_upgrade_from_a_daemon_without_supervisors_still_kills_and_retries(node):
    """Runs of an older daemon have no record: kill and retry, as before."""
    pid, _ = running_job(node, "legacy", 0)
    node.kill9()
    (rec,) = node.supervised()
    os.kill(rec.sup, signal.SIGKILL)  # as if no supervisor had ever existed
    os.unlink(rec.path)
    os.unlink(os.path.join(os.path.dirname(rec.path), "supervised-since"))
    node.start()
    runs = node.wait_runs(lambda rs: any(r["attempt"] == 2 for r in rs), job="legacy")
    first = [r for r in runs if r["attempt"] == 1][0]
    assert first["state"] == "lost" and "kill and retry" in first["reason"]
    wait_for(lambda: not psutil.pid_exists(pid) or
             psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="orphan stopped")


def test_a_run_without_a_record_is_never_searched_for_by_environment(node):
    """Once this data_dir has had supervisors, a run without a record never
    started here: nothing is killed for it, whoever else carries its run id
    (another daemon on the host with the same node id, in tests)."""
    pid, release = running_job(node, "stray", 0)
    node.kill9()
    (rec,) = node.supervised()
    os.unlink(rec.path)  # the record is gone; its job still runs (another daemon's, say)
    node.start()
    runs = node.wait_runs(lambda rs: any(r["attempt"] == 1 and r["state"] == "lost"
                                         for r in rs), job="stray")
    first = [r for r in runs if r["attempt"] == 1][0]
    assert "left no record" in first["reason"]
    assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    release.touch()
    wait_for(lambda: not psutil.pid_exists(pid) or
             psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="job ended")


def test_an_adopted_run_past_its_head_keeps_its_tail_and_streams(node):
    """The supervisor keeps writing the log, its index and its tail ring
    while the daemon is down; `logs -f` of the next daemon reads the ring,
    and the finished log is head + note + tail with the streams apart."""
    release, lines = node.out / "loud.release", node.out / "loud.lines"
    node.write_job("loud", {"schedule": "@yearly", "max_log_bytes": "1KiB", "command":
                            'i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done; '
                            f"touch {lines}; while [ ! -e {release} ]; do sleep 0.05; done; "
                            "echo after-restart >&2"})
    node.start()
    node.call("run_now", {"job": "loud"})
    wait_for(lines.exists, what="the job's lines")
    run = node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="loud")[0]
    node.kill9()
    node.start()
    # Running, past its head: the head, how much is dropped so far, the tail.
    live = node.cli("logs", "loud")
    assert live.returncode == 0, live.stderr
    assert live.stdout.startswith("line 0\n") and live.stdout.endswith("line 299\n")
    assert "bytes dropped here so far" in live.stdout
    release.touch()
    done = node.wait_runs(lambda rs: rs and rs[0]["state"] == "succeeded", job="loud",
                          what="the adopted run's end")
    assert done[0]["run_id"] == run["run_id"]
    log = node.base / "logs" / "loud" / os.path.basename(done[0]["log_path"])
    wait_for(lambda: not os.path.exists(f"{log}.tail"), what="the tail moved into the log")
    assert not os.path.exists(f"{log}.tidx") and os.path.exists(f"{log}.idx")
    text = log.read_text()
    assert text.startswith("line 0\n") and text.endswith("line 299\nafter-restart\n")
    assert "bytes dropped here (max_log_bytes 1KiB keeps the first 512 bytes" in text
    err = node.cli("logs", "loud", "--stderr")
    assert err.stdout.endswith("after-restart\n") and "line 299" not in err.stdout

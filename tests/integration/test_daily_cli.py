"""Integration: the operator's daily commands (issue 13) against a real
daemon in a temporary directory: runs with its columns and filters, show,
cancel, and the maintenance pause of every job."""

from __future__ import annotations

import json
import time

import psutil
import pytest

from cronrd.schedule import parse_iso
from cronrd.state.versions import APPLY_VERSION
from harness import wait_for

pytestmark = pytest.mark.integration


def lines_of(out: str, word: str) -> list[str]:
    return [ln for ln in out.splitlines() if word in ln]


def test_runs_shows_where_when_and_how_long_and_filters(node):
    node.write_job("ok", {"schedule": "@yearly", "command": "sleep 0.3"})
    node.write_job("bad", {"schedule": "@yearly", "command": "exit 3",
                           "retries": {"max": 1, "delay": "1h"}})
    node.start()
    assert node.cli("run-now", "ok", "--wait").returncode == 0
    assert node.cli("run-now", "bad").returncode == 0
    # the first attempt fails; its retry waits an hour
    node.wait_runs(lambda rs: any(r["kind"] == "retry" for r in rs), job="bad")

    res = node.cli("runs")
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[0].split()
    for column in ("RUN", "JOB", "KIND", "ATTEMPT", "NODE", "STATE", "STARTED", "DURATION",
                   "EXIT", "REASON"):
        assert column in header
    ok_line = lines_of(res.stdout, " ok ")[0]
    assert "succeeded" in ok_line and "n1" in ok_line
    assert any(u in ok_line for u in ("ms", "s "))  # a duration
    retry = [ln for ln in lines_of(res.stdout, " bad ") if " retry " in ln][0]
    assert "due " in retry and "(in " in retry  # when the waiting retry is due

    failed = json.loads(node.cli("runs", "--state", "failed", "--json").stdout)
    assert [r["job"] for r in failed] == ["bad"] and failed[0]["exit_code"] == 3
    manual = json.loads(node.cli("runs", "--kind", "manual", "--json").stdout)
    assert sorted(r["job"] for r in manual) == ["bad", "ok"]
    assert json.loads(node.cli("runs", "--node", "elsewhere", "--json").stdout) == []
    assert json.loads(node.cli("runs", "--since", "1h", "--json").stdout)
    assert json.loads(node.cli("runs", "--until", "2000-01-01T00:00:00Z", "--json").stdout) == []
    local = node.cli("runs", "ok", "--local", "--json")
    assert local.returncode == 0

    res = node.cli("runs", "nosuch")
    assert res.returncode == 1
    assert "no job named 'nosuch'" in res.stderr and "cronrd jobs" in res.stderr
    res = node.cli("runs", "--state", "nosuch")
    assert res.returncode == 2 and "unknown state" in res.stderr


def test_show_prints_state_next_fires_runs_and_the_definition(node):
    node.write_job("nightly", {"schedule": "30 2 * * *", "timezone": "Europe/Berlin",
                               "command": "echo hi", "description": "the nightly one"})
    node.start()
    assert node.cli("run-now", "nightly", "--wait").returncode == 0
    res = node.cli("show", "nightly")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "state      active" in out
    assert "the nightly one" in out and "echo hi" in out
    nxt = [ln for ln in out.splitlines() if "Europe/Berlin" in ln and "02:30:00" in ln]
    assert len(nxt) == 5  # five next fire times, UTC and the job's zone
    assert "succeeded" in out and "as written in" in out and "in force" in out
    data = json.loads(node.cli("show", "nightly", "--json").stdout)
    assert len(data["next_fires"]) == 5 and data["state"] == "active"
    assert data["recent_runs"][0]["state"] == "succeeded"
    assert all(parse_iso(t) > time.time() for t in data["next_fires"])

    assert node.cli("pause", "nightly", "--note", "disk swap until 14:00").returncode == 0
    out = node.cli("show", "nightly").stdout
    assert "paused by" in out and "disk swap until 14:00" in out
    assert "cronrd resume nightly" in out

    res = node.cli("show", "nosuch")
    assert res.returncode == 1 and "no job named" in res.stderr


def test_show_and_jobs_say_a_job_runs_its_last_good_version(node):
    node.write_job("keep", {"schedule": "@yearly", "command": "true"})
    node.start()
    path = node.jobs_dir / "keep.yaml"
    path.write_text("schedule: [unclosed\ncommand: true\n")
    node.call("reload")
    out = node.cli("show", "keep").stdout
    assert "last good version" in out and "keep.yaml" in out
    out = node.cli("jobs").stdout
    assert "(last good)" in lines_of(out, "keep")[0]
    assert "LAST GOOD" in out
    streamed = json.loads(node.cli("jobs", "--json").stdout)
    assert "keep.yaml" in streamed[0]["file_problem"]


def test_cancel_stops_the_tree_records_who_and_does_not_retry(node):
    node.write_job("long", {"schedule": "@yearly", "command": "sleep 300 & sleep 300; wait",
                            "retries": {"max": 3, "delay": "1s"}, "kill_grace": "2s"})
    node.start()
    run_id = node.call("run_now", {"job": "long"})["run_id"]
    runs = node.wait_runs(lambda rs: rs and rs[0]["state"] == "running" and rs[0]["pid"],
                          job="long")
    pid = runs[0]["pid"]
    res = node.cli("cancel", str(run_id))
    assert res.returncode == 0, res.stderr
    runs = node.wait_runs(lambda rs: rs and rs[0]["state"] == "cancelled", job="long")
    assert len(runs) == 1  # no retry
    assert "cancelled by" in runs[0]["reason"]
    wait_for(lambda: not psutil.pid_exists(pid), what="the run's process stopped")
    time.sleep(0)  # the retry would have been committed with the cancel: none was
    assert len(node.runs("long")) == 1

    # --job: every active run of a job
    node.write_job("long2", {"schedule": "@yearly", "command": "sleep 300",
                             "concurrency": "allow"})
    node.call("reload")
    for _ in range(2):
        node.call("run_now", {"job": "long2"})
    node.wait_runs(lambda rs: len(rs) == 2 and all(r["state"] == "running" for r in rs),
                   job="long2")
    res = node.cli("cancel", "--job", "long2")
    assert res.returncode == 0, res.stderr
    assert len(lines_of(res.stdout, "long2")) == 2
    node.wait_runs(lambda rs: all(r["state"] == "cancelled" for r in rs), job="long2")
    res = node.cli("cancel", "--job", "long2")
    assert "nothing to cancel" in res.stdout
    res = node.cli("cancel", str(run_id))
    assert res.returncode == 1 and "already cancelled" in res.stderr


def test_pause_all_for_maintenance_and_resume_all(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.write_job("own", {"schedule": "@yearly", "command": "true"})
    node.start()
    node.wait_runs(lambda rs: len(rs) >= 1, job="tick")
    assert node.cli("pause", "own").returncode == 0
    res = node.cli("pause", "--all", "--note", "kernel upgrade")
    assert res.returncode == 0, res.stderr
    status = node.cli("status").stdout
    assert "PAUSED" in status and "kernel upgrade" in status and "resume --all" in status
    runs = node.wait_runs(lambda rs: sum("maintenance" in (r["reason"] or "")
                                         for r in rs) >= 2, job="tick")
    skipped = [r for r in runs if "maintenance" in (r["reason"] or "")]
    assert all(r["state"] == "skipped" and "kernel upgrade" in r["reason"] for r in skipped)
    assert node.cli("resume", "--all").returncode == 0
    assert "PAUSED" not in node.cli("status").stdout
    last_skip = max(parse_iso(r["fire_time"]) for r in skipped)
    node.wait_runs(lambda rs: any(r["state"] == "succeeded"
                                  and parse_iso(r["fire_time"]) > last_skip for r in rs),
                   job="tick")
    # a job paused on its own stays paused
    assert json.loads(node.cli("show", "own", "--json").stdout)["state"] == "paused"
    res = node.cli("pause")
    assert res.returncode == 2 and "--all" in res.stderr


def test_history_reads_work_with_the_daemon_down(node):
    node.write_job("hello", {"schedule": "@yearly", "command": "echo out; echo err >&2"})
    node.write_job("other", {"schedule": "@yearly", "command": "true"})
    node.start()
    assert node.cli("run-now", "hello", "--wait").returncode == 0
    assert node.cli("pause", "other", "--note", "broken upstream").returncode == 0
    node.terminate()

    res = node.cli("status")
    assert res.returncode == 0, res.stderr
    assert "daemon not running; state as of" in res.stderr
    assert "NOT RUNNING" in res.stdout and "jobs      2 (1 paused)" in res.stdout
    # Issue 33 (6): a node started from a config file is no systemd service
    assert f"start it with `cronrd daemon --config {node.config_path}`" in res.stdout
    assert "systemctl" not in res.stdout + res.stderr
    # one host is every member: it took this code's cluster version when it ran
    assert f"cluster   version {APPLY_VERSION}\n" in res.stdout
    res = node.cli("jobs")
    assert res.returncode == 0 and "hello" in res.stdout and "other" in res.stdout
    runs = json.loads(node.cli("runs", "--json").stdout)
    assert [(r["job"], r["state"]) for r in runs] == [("hello", "succeeded")]
    res = node.cli("show", "other")
    assert res.returncode == 0 and "broken upstream" in res.stdout
    res = node.cli("logs", "hello")
    assert res.returncode == 0 and "out" in res.stdout and "err" in res.stdout
    assert node.cli("runs", "nosuch").returncode == 1
    # the offline reads parse a request as the daemon does (ops/requests.py)
    from cronrd.config import load_config
    from cronrd.errors import UsageError
    from cronrd.offline import Offline
    off = Offline(load_config(str(node.config_path)), "test")
    for cmd, args, message in (("job", {}, "missing argument 'name'"),
                               ("job", {"name": "other", "next": 101}, "next must be 0 to 100"),
                               ("run", {"run_id": "1"}, "argument 'run_id' must be an integer"),
                               ("jobs", {"limit": 0}, "limit must be 1 to"),
                               ("graph", {"job": 7}, "argument 'job' has the wrong type")):
        with pytest.raises(UsageError, match=message):
            getattr(off, "h_" + cmd)(args, None)
    # changes still need the daemon, and say how to start it
    res = node.cli("run-now", "hello")
    assert res.returncode == 1 and "cronrd daemon" in res.stderr


def test_a_daemon_on_another_socket_is_not_mistaken_for_none(node, tmp_path):
    node.write_job("hello", {"schedule": "@yearly", "command": "true"})
    node.start()
    res = node.cli("status", "--socket", str(tmp_path / "elsewhere.sock"))
    assert res.returncode == 1
    assert "a daemon holds" in res.stderr and "--socket" in res.stderr


def test_show_gives_the_job_file_as_written_and_the_values_in_force(node):
    """Issue 33 (3): `cronrd show` printed a normalised dump (timeout: 1800.0,
    nulls for every unset key); now the file's own lines, numbered, and
    every value in force with the defaults told apart. The UI's job page
    shows the same."""
    node.write_job("backup", "# ask the DB team before changing\nschedule: '0 3 * * *'\n"
                             "command: |\n  tar czf /tmp/etc.tgz /etc\n  echo done\n"
                             "timeout: 30m\n")
    node.start()
    res = node.cli("show", "backup")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"as written in {node.jobs_dir / 'backup.yaml'}" in out
    assert "  1  # ask the DB team before changing\n" in out
    assert "  6  timeout: 30m\n" in out
    assert "1800.0" not in out
    assert "* timeout" in out and "  kill_grace" in out and "10s" in out
    shown = json.loads(node.cli("show", "backup", "--json").stdout)
    assert shown["written"]["line"] == 2 and len(shown["written"]["lines"]) == 6
    assert ["timeout", "30m", False] in shown["effective"]
    # with the daemon down, the same from the state and the file
    node.terminate()
    offline = node.cli("show", "backup").stdout
    assert "  1  # ask the DB team before changing\n" in offline and "* timeout" in offline

"""Integration: a real daemon in a temporary directory, real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest

from cronrd.errors import UsageError
from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def fire_seconds(runs, job):
    return sorted(parse_iso(r["fire_time"]) for r in runs if r["job"] == job
                  and r["kind"] in ("scheduled", "catchup"))


def test_every_second_job_fires_once_per_second(node):
    stamp = node.out / "stamps"
    node.write_job("tick", {"schedule": "* * * * * *",
                            "command": f"echo $CRONRD_FIRE_TIME >> {stamp}"})
    node.start()
    runs = node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 5,
                          job="tick", what="5 succeeded ticks")
    done = [r for r in runs if r["state"] == "succeeded"]
    fires = sorted(parse_iso(r["fire_time"]) for r in done)
    # One record per second, consecutive, no duplicates.
    assert len(fires) == len(set(fires))
    assert fires == list(range(fires[0], fires[0] + len(fires)))
    for r in done:
        assert r["run_key"] == f"tick/{r['fire_time']}/1"
        assert r["exit_code"] == 0 and r["node"] == "n1" and r["pid"] > 0
        assert parse_iso(r["started_at"]) >= parse_iso(r["fire_time"])
    # The command itself saw each fire time exactly once.
    seen = Counter(stamp.read_text().split())
    assert all(n == 1 for n in seen.values())
    assert {r["fire_time"] for r in done} <= set(seen)


def test_run_now_wait_exits_with_job_exit_code_and_logs(node):
    node.write_job("answer", {"schedule": "@yearly",
                              "command": "echo out-$CRONRD_JOB; echo err >&2; exit 3"})
    node.start()
    res = node.cli("run-now", "answer", "--wait")
    assert res.returncode == 3, res.stderr
    logs = node.cli("logs", "answer")
    assert logs.returncode == 0
    assert "out-answer" in logs.stdout and "err" in logs.stdout
    runs = node.runs("answer")
    assert runs[0]["kind"] == "manual" and runs[0]["state"] == "failed"
    assert runs[0]["exit_code"] == 3
    # --json has the documented stable fields.
    data = json.loads(node.cli("runs", "answer", "--json").stdout)
    for field in ("run_id", "job", "kind", "fire_time", "attempt", "state", "node", "pid",
                  "exit_code", "signal", "started_at", "finished_at", "log_path", "reason"):
        assert field in data[0]
    assert data[0]["fire_time"].endswith("Z")


def test_logs_follow_streams_until_the_run_ends(node):
    gate = node.out / "gate"
    node.write_job("talk", {"schedule": "@yearly", "command":
                            f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; "
                            "echo second"})
    node.start()
    run_id = node.call("run_now", {"job": "talk"})["run_id"]
    follower = subprocess.Popen(
        [sys.executable, "-m", "cronrd", "--config", str(node.config_path), "logs", "talk",
         "--run", str(run_id), "--follow"], stdout=subprocess.PIPE, text=True)
    assert follower.stdout.readline() == "first\n"
    gate.touch()
    rest = follower.stdout.read()
    assert follower.wait(20) == 0
    assert rest == "second\n"


def test_timeout_kills_the_whole_tree_including_grandchildren(node):
    pids = node.out / "pids"
    node.write_job("stuck", {
        "schedule": "@yearly", "timeout": "1s", "kill_grace": "1s",
        # A grandchild in the group, and one that escaped into its own session.
        "command": f"sleep 300 & echo $! >> {pids}; setsid sleep 301 & "
                   f"sleep 0.2; pgrep -f 'sleep 301' -n >> {pids}; wait"})
    node.start()
    node.call("run_now", {"job": "stuck"})
    runs = node.wait_runs(lambda rs: rs and rs[0]["state"] == "timed_out", job="stuck",
                          what="timed_out run")
    assert "timed out after 1s" in runs[0]["reason"]
    victims = [int(p) for p in pids.read_text().split()]
    assert len(victims) == 2

    def dead(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    wait_for(lambda: all(dead(p) for p in victims), 10, what="grandchildren gone")


def test_kill9_mid_run_then_restart_adopts_and_duplicates_nothing(node):
    marker = node.out / "long.pid"
    # concurrency: allow, so that the caught-up fires (all due at once) all run.
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true",
                            "catchup": "all", "catchup_window": "1h",
                            "concurrency": "allow"})
    node.write_job("long", {"schedule": "@yearly", "command":
                            f"echo $$ >> {marker}; exec sleep 120"})
    node.start()
    node.call("run_now", {"job": "long"})
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what="long job started")
    node.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="long",
                   what="long run recorded running")
    node.wait_runs(lambda rs: len(rs) >= 2, job="tick")
    orphan = int(marker.read_text().split()[0])
    node.kill9()
    assert psutil.pid_exists(orphan)  # the job outlived the daemon
    down_since = time.time()
    # Fires are committed a second ahead: the outage must be longer than that.
    wait_for(lambda: time.time() - down_since > 4.5, what="an outage of a few fire times")
    node.start()
    # The run goes on under its supervisor: adopted, not lost, not retried.
    runs = node.runs("long")
    assert [(r["attempt"], r["state"]) for r in runs] == [(1, "running")], \
        (runs, node.daemon_log())
    assert psutil.pid_exists(orphan)
    # Every tick fire time from first to last has exactly one record: the outage
    # was caught up (catchup: all), nothing is duplicated, nothing is missing.
    ticks = node.wait_runs(
        lambda rs: any(r["kind"] == "catchup" for r in rs)
        and max(fire_seconds(rs, "tick")) > down_since + 5, job="tick", what="catch-up runs")
    fires = fire_seconds(ticks, "tick")
    assert fires[0] < down_since  # the window spans the outage
    assert all(r["state"] != "skipped" for r in ticks)  # catchup: all runs every one
    assert len(fires) == len(set(fires))
    assert fires == list(range(fires[0], fires[-1] + 1))


def test_catchup_latest_records_skips_with_reasons(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.start()
    node.wait_runs(lambda rs: len(rs) >= 2, job="tick")
    node.kill9()
    down = time.time()
    wait_for(lambda: time.time() - down > 4.5, what="outage")
    node.start()
    runs = node.wait_runs(lambda rs: any(r["state"] == "skipped" for r in rs), job="tick")
    skipped = [r for r in runs if r["state"] == "skipped"]
    # Missed fires are superseded by the latest; a fire that was committed before
    # the kill and starts late on restart may make its neighbour an overlap skip.
    reasons = [r["reason"] for r in skipped]
    assert all("superseded" in r or "overlap" in r for r in reasons), reasons
    assert any("superseded" in r for r in reasons), reasons
    fires = fire_seconds(node.runs("tick"), "tick")
    assert fires == list(range(fires[0], fires[-1] + 1))
    assert len(fires) == len(set(fires))


def test_broken_job_file_keeps_the_others_and_the_last_good_version(node):
    good = node.out / "good"
    node.write_job("good", {"schedule": "* * * * * *", "command": f"echo x >> {good}"})
    node.write_job("fragile", {"schedule": "@yearly", "command": "echo fragile"})
    node.start()
    assert {j["name"] for j in node.call("jobs")} == {"good", "fragile"}
    node.write_job("fragile", "schedule: '@yearly'\ncommand: [unclosed\n")
    st = wait_for(lambda: (s := node.call("status"))["problems"] and s, what="problem shown")
    assert any("fragile.yaml:" in p for p in st["problems"])
    # The broken file's job keeps its last good version; the good job keeps firing.
    assert {j["name"] for j in node.call("jobs")} == {"good", "fragile"}
    n = len(good.read_text().split()) if good.exists() else 0
    wait_for(lambda: good.exists() and len(good.read_text().split()) >= n + 2,
             what="good job still firing")
    assert node.cli("run-now", "fragile", "--wait").returncode == 0
    # A bad schedule is reported with file:line:col by validate.
    res = node.cli("validate", str(node.jobs_dir))
    assert res.returncode == 1
    assert f"{node.jobs_dir}/fragile.yaml:" in res.stdout


def test_job_file_changes_are_picked_up_without_restart(node):
    node.start()
    t0 = time.monotonic()
    node.write_job("late", {"schedule": "@hourly", "command": "true"})
    wait_for(lambda: any(j["name"] == "late" for j in node.call("jobs")), 5,
             what="new job picked up")
    assert time.monotonic() - t0 < 2.5
    (node.jobs_dir / "late.yaml").unlink()
    wait_for(lambda: not node.call("jobs"), 5, what="removed job dropped")


def test_sighup_reloads_at_once(node_factory):
    node = node_factory(watch_interval="60s")
    node.start()
    node.write_job("hup", {"schedule": "@hourly", "command": "true"})
    node.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: any(j["name"] == "hup" for j in node.call("jobs")), 5,
             what="job loaded after SIGHUP")


def test_a_fleet_of_job_files_loads_in_bulk_and_a_restart_parses_nothing(node):
    # 4,000 jobs (> 256 KiB): parsed by worker processes, committed in bulk;
    # restarted, the unchanged files are not parsed again; read in pages.
    for f in range(4):
        (node.jobs_dir / f"fleet{f}.yaml").write_text("jobs:\n" + "".join(
            f"  - name: f{f}j{i:04d}\n    schedule: '{i % 60} {i % 24} * * *'\n"
            f"    command: 'echo {i}'\n" for i in range(1000)))
    node.start()
    assert node.call("status")["jobs"] == 4000
    text = node.log_file.read_text()
    assert "event=job_parsers_started count=" in text and "job_parser_failed" not in text
    assert node.terminate() == 0
    text = node.log_file.read_text()
    node.start()
    restarted = node.log_file.read_text()[len(text):]
    assert "job_parsers_started" not in restarted and "event=job_added" not in restarted
    assert node.call("status")["jobs"] == 4000
    page = node.call("jobs", {"limit": 3, "after": "f1j0998"})
    assert [j["name"] for j in page["jobs"]] == ["f1j0999", "f2j0000", "f2j0001"]
    assert page["next"] == "f2j0001"
    for bad in ({"limit": 0}, {"limit": 10**6}, {"limit": "9"}, {"after": 5},
                {"stream": "yes"}, {"match": ["x"]}):
        with pytest.raises(UsageError):
            node.call("jobs", bad)
    listed = json.loads(node.cli("jobs", "--json", "f2*").stdout)
    assert len(listed) == 1000 and listed[0]["schedule"] == "0 0 * * *"
    every = json.loads(node.cli("jobs", "--json").stdout)  # pages read ahead by a thread
    assert [j["name"] for j in every] == sorted(f"f{f}j{i:04d}" for f in range(4)
                                                for i in range(1000))
    # a client that hangs up after the first page: the page read ahead is
    # dropped, the daemon goes on answering
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(node.socket)
    sock.sendall(json.dumps({"cmd": "jobs", "args": {"stream": True}}).encode() + b"\n")
    assert sock.makefile("rb").readline().startswith(b'{"data"')
    sock.close()
    assert node.call("status")["jobs"] == 4000
    res = node.cli("jobs")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 4001


def test_jobs_json_stream_has_the_fields_of_the_paged_views(node):
    node.write_job("plain", {"schedule": "*/5 * * * *", "command": "true"})
    node.write_job("argv", {"schedule": "@yearly", "command": ["/bin/echo", "a b"],
                            "timezone": "Europe/Berlin", "description": "d\u00e9j\u00e0",
                            "run_on": {"tags": ["ssd"]}, "concurrency": "allow",
                            "catchup": "all"})
    node.write_job("off", {"schedule": "@hourly", "command": "true", "enabled": False})
    node.write_job("ran", {"schedule": "@yearly", "command": "exit 3"})
    node.start()
    node.cli("pause", "plain")
    node.cli("run-now", "ran", "--wait")
    views = node.call("jobs")
    streamed = json.loads(node.cli("jobs", "--json").stdout)
    assert [j["name"] for j in streamed] == ["argv", "off", "plain", "ran"]
    assert streamed == views
    assert streamed[3]["last_run"]["exit_code"] == 3 and streamed[2]["paused"] is True


def test_group_writable_job_file_is_refused(node):
    node.write_job("loose", {"schedule": "@hourly", "command": "true"}, mode=0o664)
    node.write_job("tight", {"schedule": "@hourly", "command": "true"})
    node.start()
    st = node.call("status")
    assert [j["name"] for j in node.call("jobs")] == ["tight"]
    assert any("loose.yaml" in p and "writable" in p for p in st["problems"])


def test_retries_with_backoff_then_give_up(node):
    node.write_job("flaky", {"schedule": "@yearly", "command": "exit 7",
                             "retries": {"max": 2, "delay": "200ms", "backoff": 2}})
    node.start()
    res = node.cli("run-now", "flaky", "--wait")
    assert res.returncode == 7
    runs = sorted(node.runs("flaky"), key=lambda r: r["attempt"])
    assert [r["attempt"] for r in runs] == [1, 2, 3]
    assert [r["kind"] for r in runs] == ["manual", "retry", "retry"]
    assert len({r["fire_time"] for r in runs}) == 1  # a retry is the same fire time
    gap1 = parse_iso(runs[1]["started_at"][:19] + "Z") - parse_iso(runs[0]["finished_at"][:19] + "Z")
    assert gap1 >= 0


def test_concurrency_forbid_skips_overlap_with_reason(node):
    node.write_job("slow", {"schedule": "* * * * * *", "command": "sleep 2.5"})
    node.start()
    runs = node.wait_runs(lambda rs: sum(r["state"] == "skipped" for r in rs) >= 2,
                          job="slow")
    skipped = [r for r in runs if r["state"] == "skipped"]
    assert all("overlap" in r["reason"] for r in skipped)
    assert sum(r["state"] == "running" for r in runs) <= 1


def test_reboot_job_runs_once_per_boot_not_per_restart(node):
    node.write_job("boot", {"schedule": "@reboot", "command": "true"})
    node.start()
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "succeeded", job="boot")
    node.terminate()
    node.start()
    time_boot = [r for r in node.runs("boot")]
    assert len(time_boot) == 1


def test_pause_records_skips_and_resume_continues(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.start()
    node.wait_runs(lambda rs: len(rs) >= 1, job="tick")
    assert node.cli("pause", "tick").returncode == 0
    paused_at = time.time()
    wait_for(lambda: time.time() - paused_at > 2.5, what="paused for a few fires")
    assert node.cli("resume", "tick").returncode == 0
    runs = node.wait_runs(lambda rs: any("paused" in (r["reason"] or "") for r in rs)
                          and any(r["state"] == "succeeded"
                                  and parse_iso(r["fire_time"]) > paused_at + 3 for r in rs),
                          job="tick")
    fires = fire_seconds(runs, "tick")
    assert fires == list(range(fires[0], fires[-1] + 1))
    assert len(fires) == len(set(fires))


def test_control_socket_refuses_bad_requests_and_survives(node):
    node.start()
    mode = stat.S_IMODE(os.stat(node.socket).st_mode)
    assert mode == (0o660 if os.geteuid() == 0 else 0o600)
    replies = []
    for payload in (b"not json\n", b"[1,2]\n", b'{"cmd": 5}\n', b'{"cmd": "nope"}\n',
                    b'{"cmd": "runs", "args": {"limit": "x"}}\n', b"\xff\xfe\n",
                    b'{"cmd": "run", "args": {"run_id": 99999999999999999999999}}\n',
                    b"[" * 100000 + b"\n",
                    b"x" * (2 << 20) + b"\n"):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(node.socket)
            try:
                s.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            replies.append(json.loads(data))
    assert all(r["ok"] is False and r["error"] for r in replies)
    assert "larger than" in replies[-1]["error"]
    assert node.call("status")["node_id"] == "n1"


def test_cli_without_daemon_names_the_socket(node):
    res = node.cli("status")
    assert res.returncode == 1
    assert node.socket in res.stderr and "cronrd daemon" in res.stderr


def test_systemd_notifications_ready_and_stopping(node):
    addr = str(node.base / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(addr)
        s.settimeout(20)
        node.start(env={"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "2000000"}, wait=False)
        got = []
        while not any("READY=1" in m for m in got):
            got.append(s.recv(4096).decode())
        while not any("WATCHDOG=1" in m for m in got):
            got.append(s.recv(4096).decode())
        node.proc.send_signal(signal.SIGTERM)
        while not any("STOPPING=1" in m for m in got):
            got.append(s.recv(4096).decode())
    assert node.proc.wait(20) == 0


def test_sigterm_stop_mode_stops_runs_and_records_them(node_factory):
    node = node_factory(shutdown={"mode": "stop", "grace": "5s"})
    node.write_job("long", {"schedule": "@yearly", "command": "sleep 60",
                            "on_node_loss": "fail"})
    node.start()
    node.call("run_now", {"job": "long"})
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="long")
    assert node.terminate(30) == 0
    node.start()
    runs = node.runs("long")
    assert len(runs) == 1  # on_node_loss: fail -> no retry
    assert runs[0]["state"] == "lost" and "shutdown" in runs[0]["reason"]


def test_sigterm_wait_mode_lets_runs_finish(node_factory):
    node = node_factory(shutdown={"mode": "wait", "grace": "20s"})
    node.write_job("short", {"schedule": "@yearly", "command": "sleep 1; echo done"})
    node.start()
    node.call("run_now", {"job": "short"})
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="short")
    assert node.terminate(30) == 0
    node.start()
    runs = node.runs("short")
    assert runs[0]["state"] == "succeeded"


def test_job_edited_while_daemon_down_still_catches_up(node):
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true",
                            "concurrency": "allow"})
    node.start()
    node.wait_runs(lambda rs: len(rs) >= 2, job="tick")
    node.kill9()
    down = time.time()
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true",
                            "concurrency": "allow", "description": "edited while down"})
    wait_for(lambda: time.time() - down > 4.5, what="outage")
    node.start()
    runs = node.wait_runs(lambda rs: max(fire_seconds(rs, "tick")) > down + 5, job="tick")
    fires = fire_seconds(runs, "tick")
    # Every fire time across the outage has a record (run or skipped).
    assert fires == list(range(fires[0], fires[-1] + 1))
    assert any(r["state"] == "skipped" and "superseded" in r["reason"] for r in runs)


def test_schedule_change_takes_effect_at_once(node):
    node.write_job("slowly", {"schedule": "@yearly", "command": "true"})
    node.start()
    node.write_job("slowly", {"schedule": "* * * * * *", "command": "true"})
    node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 2, job="slowly",
                   what="new every-second schedule firing")


def test_run_now_wait_is_nonzero_for_a_timeout_even_if_the_job_exits_0(node):
    node.write_job("stubborn", {"schedule": "@yearly", "timeout": "500ms",
                                "command": "trap 'exit 0' TERM; sleep 30 & wait"})
    node.start()
    res = node.cli("run-now", "stubborn", "--wait")
    assert res.returncode != 0
    assert node.runs("stubborn")[0]["state"] == "timed_out"


def test_a_run_waiting_at_its_gate_never_starts_once_its_job_is_removed(node):
    out = node.out
    node.write_job("gone", {"schedule": "@every 3s", "command": f"touch {out}/ran-$CRONRD_RUN_ID"})
    node.start()
    # Wait until a run is assigned ahead of its fire time (its process is waiting).
    runs = node.wait_runs(lambda rs: any(r["state"] == "assigned" for r in rs), job="gone",
                          timeout=10)
    waiting = [r for r in runs if r["state"] == "assigned"][0]
    (node.jobs_dir / "gone.yaml").unlink()
    node.call("reload")
    node.wait_runs(lambda rs: any(r["run_id"] == waiting["run_id"]
                                        and r["state"] == "cancelled" for r in rs),
                         job="gone")
    wait_for(lambda: time.time() > parse_iso(waiting["fire_time"]) + 1.5, what="fire time passed")
    assert not (out / f"ran-{waiting['run_id']}").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_job_runs_as_its_user_with_that_users_groups_and_home(node):
    import pwd
    out = node.out
    os.chmod(node.base, 0o755)  # mkdtemp makes it 0700: nobody could not reach out/
    os.chmod(out, 0o777)
    nobody = pwd.getpwnam("nobody")
    node.write_job("whoami", {"schedule": "@yearly", "user": "nobody",
                              "working_dir": "/",
                              "command": f"echo $(id -u) $(id -g) $(id -G) $USER >> {out}/id"})
    node.start()
    res = node.cli("run-now", "whoami", "--wait")
    assert res.returncode == 0, res.stderr
    uid, gid, *rest = (out / "id").read_text().split()
    assert int(uid) == nobody.pw_uid and int(gid) == nobody.pw_gid
    assert rest[-1] == "nobody"
    groups = {int(g) for g in rest[:-1]}
    assert groups == set(os.getgrouplist("nobody", nobody.pw_gid))


def test_sigusr1_writes_every_threads_stack_to_the_log(node):
    """Where a daemon that does not answer or does not stop is stuck: `kill
    -USR1` dumps each thread's stack (the critical loop, the loop watch,
    the storage threads) and has its faces' process dump its own (the
    faces' loop); both go on."""
    node.start()
    node.proc.send_signal(signal.SIGUSR1)

    def whole() -> str:
        return node.log_file.read_text(errors="replace")
    wait_for(lambda: whole().count("Current thread") >= 2,
             what="the stacks of both processes in the log", on_fail=node.daemon_log)
    wait_for(lambda: "faces_child.py\", line" in whole() and "daemon.py\", line" in whole(),
             what="the stacks of the daemon's main thread and of the faces")
    assert whole().count("Thread 0x") >= 2  # the loop watch's, the storage threads'...
    assert node.call("status")["ready"] is True


def test_sigusr2_logs_every_task_and_what_it_waits_for(node):
    """Where a daemon whose threads are idle waits: `kill -USR2` logs the
    event loop's tasks, each with its chain of awaits (the leader's term,
    the Raft node's loop), and the daemon goes on."""
    node.start()
    node.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: "event=tasks" in node.daemon_log(), what="the tasks in the log")
    line = next(ln for ln in node.daemon_log().splitlines() if "event=tasks" in ln)
    assert "daemon:leadership: cronrd/runtime/tasks.py" in line
    assert "cronrd/runtime/log/raft_node.py" in line or "cronrd/runtime/log/local.py" in line \
        or "cronrd/runtime/leader/leadership.py" in line
    assert node.call("status")["ready"] is True

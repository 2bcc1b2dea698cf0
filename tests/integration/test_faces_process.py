"""The faces (control socket, HTTP) in a process of their own (issue 29):
a stopped, killed or busy faces' process holds no fire time, it is started
again, and it ends with the daemon."""

import datetime as dt
import os
import signal
import time
import urllib.request

import psutil

from harness import wait_for

EVERY_SECOND = {"schedule": "* * * * * *", "command": "true", "concurrency": "allow",
                "catchup": "all"}


def faces_of(node) -> psutil.Process:
    def find():
        kids = [p for p in psutil.Process(node.proc.pid).children()
                if any("faces" in part for part in p.cmdline())]
        return kids[0] if len(kids) == 1 else None
    return wait_for(find, 20, what="the faces' process", on_fail=node.daemon_log)


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def fire_times_started(node, job: str, since: float, until: float) -> dict[float, float]:
    """Fire time -> lateness of its first start, for the fire times in [since, until]."""
    out: dict[float, float] = {}
    for r in node.call("runs", {"job": job, "limit": 500})["runs"]:
        ft = ts(r["fire_time"])
        if since <= ft <= until and r["started_at"]:
            out[ft] = min(out.get(ft, 1e9), ts(r["started_at"]) - ft)
    return out


def test_a_stopped_faces_process_holds_no_fire_time(node):
    node.write_job("tick", EVERY_SECOND)
    node.start()
    faces = faces_of(node)
    assert faces.pid != node.proc.pid and faces.ppid() == node.proc.pid
    st = node.call("status")
    assert st["pid"] == node.proc.pid and st["faces"] == {"pid": faces.pid, "starts": 1}
    assert f"faces pid {faces.pid}" in node.cli("status").stdout
    node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick")
    start = time.time()
    faces.send_signal(signal.SIGSTOP)   # the faces hold nothing of the critical loop
    try:
        time.sleep(4)                   # (the fault's length, not a wait for a condition)
    finally:
        faces.send_signal(signal.SIGCONT)
    end = time.time()
    wait_for(lambda: node.call("status")["ready"], 20, what="status answers again")
    first, last = int(start) + 1, int(end) - 1
    started = wait_for(lambda: (lambda got: got if len(got) == last - first + 1 else None)(
        fire_times_started(node, "tick", first, last)), 20,
        what="every fire time of the stop started", on_fail=node.daemon_log)
    assert sorted(started) == list(range(first, last + 1))
    assert max(started.values()) < 1.0, started


def test_a_killed_faces_process_is_started_again_and_jobs_keep_running(node):
    node.write_job("tick", EVERY_SECOND)
    node.start()
    old = faces_of(node)
    killed = time.time()
    old.kill()
    wait_for(lambda: "event=faces_died" in node.daemon_log(), 20, what="faces_died logged")
    st = wait_for(lambda: node.call("status"), 20, what="the control socket again",
                  on_fail=node.daemon_log)
    new = faces_of(node)
    assert new.pid != old.pid and st["ready"] and st["faces"]["starts"] == 2
    assert "started 2 times: see event=faces_died" in node.cli("status").stdout
    url = wait_for(lambda: node.call("status")["http"], 20, what="HTTP again")
    with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
        assert resp.status == 200
    # the fire times from the kill on (no face served a while) all started
    first, last = int(killed) + 1, int(killed) + 4
    started = wait_for(lambda: (lambda got: got if len(got) == last - first + 1 else None)(
        fire_times_started(node, "tick", first, last)), 20,
        what="every fire time since the kill started", on_fail=node.daemon_log)
    assert max(started.values()) < 1.0, started


def test_the_faces_process_ends_with_the_daemon(node):
    node.start()
    faces = faces_of(node)
    node.kill9()   # it cannot tell its faces: the kernel does
    wait_for(lambda: not faces.is_running() or faces.status() == psutil.STATUS_ZOMBIE, 10,
             what="the faces' process gone")
    node.start()   # and the socket it held is served again at once
    assert faces_of(node).pid != faces.pid


def test_a_graceful_stop_stops_the_faces_and_removes_the_socket(node):
    node.start()
    faces = faces_of(node)
    assert node.terminate() == 0
    wait_for(lambda: not faces.is_running() or faces.status() == psutil.STATUS_ZOMBIE, 10,
             what="the faces' process gone")
    assert not os.path.exists(node.socket)

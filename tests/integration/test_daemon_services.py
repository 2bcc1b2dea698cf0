"""The daemon's services (daemon.py, tasks.py), in process: a service that
fails is logged with its name and either restarted or stops the daemon with
exit code 1; a stop cancels and awaits every task the daemon owns."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from cronrd.config import parse_config
from cronrd.ops.admin import Status
from cronrd.runtime.leader import leadership, scheduler
from cronrd.runtime.jobfiles import watcher
from cronrd.runtime.daemon import Daemon

DEADLINE = 30.0


@pytest.fixture
def cfg(tmp_path):
    os.chmod(tmp_path, 0o755)
    for d in ("jobs", "state", "logs"):
        (tmp_path / d).mkdir(mode=0o755)
    return parse_config({
        "node_id": "n1", "data_dir": str(tmp_path / "state"),
        "jobs_dir": str(tmp_path / "jobs"), "socket": str(tmp_path / "sock"),
        "log_dir": str(tmp_path / "logs"), "timezone": "UTC",
        "http": {"listen": "127.0.0.1:0"}},   # a free port: never a fixed one shared by tests
        str(tmp_path / "cronrd.yaml"))


def run_daemon(daemon: Daemon, while_running=None) -> tuple[int, set]:
    """Run ``daemon`` in this test's loop; ``while_running(daemon)`` (a
    coroutine) runs once it is ready, then the daemon is asked to stop
    (unless it stopped itself). Returns its exit code and the tasks still
    pending after it returned."""
    async def go():
        async with asyncio.timeout(DEADLINE):
            run = asyncio.ensure_future(daemon.run())
            while not daemon.ready and not run.done():
                await asyncio.sleep(0.01)
            if while_running is not None and not run.done():
                await while_running(daemon)
            daemon.request_stop()
            code = await run
            left = asyncio.all_tasks() - {asyncio.current_task()}
            return code, left
    return asyncio.run(go())


def test_a_stop_cancels_and_awaits_every_task_the_daemon_owns(cfg, caplog):
    seen = {}

    async def look(d):
        seen["services"] = d.services.running()
        seen["faces"] = d.faces_host.proc
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), look)
    assert code == 0
    # (one host: the members have no upkeep, their service returned at once)
    # ("faces": the faces' process's keeper, faces_host.py; it restarts them)
    assert seen["services"] == ["announce", "faces", "heap", "housekeeping", "leadership",
                                "loop_watch", "removal", "watcher"]
    assert left == set(), f"tasks left running after Daemon.run returned: {left}"
    assert seen["faces"].poll() is not None, "the faces' process outlived the daemon"
    assert "event=stopped" in caplog.text


def test_a_failing_vital_service_stops_the_daemon_with_exit_code_1(cfg, caplog, monkeypatch):
    async def broken(self):
        raise RuntimeError("leadership broke (injected)")
    monkeypatch.setattr(leadership.Leadership, "run", broken)

    async def wait_for_exit(d):
        await d.stop_event.wait()
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), wait_for_exit)
    assert code == 1
    assert left == set()
    assert "event=service_failed owner=daemon service=leadership" in caplog.text
    assert "leadership broke (injected)" in caplog.text
    assert "event=stopping_after_failure service=leadership" in caplog.text
    assert "event=stopped" in caplog.text  # the ordinary shutdown, not a crash


def test_a_failing_watcher_is_restarted_and_says_so(cfg, caplog, monkeypatch):
    calls = []
    original = watcher.Watcher.run

    async def flaky(self):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("watcher broke (injected)")
        restarted.set()
        await original(self)
    monkeypatch.setattr(watcher.Watcher, "run", flaky)
    restarted = None

    async def wait_for_restart(d):
        nonlocal restarted
        restarted = asyncio.Event()
        await asyncio.wait_for(restarted.wait(), 10)
        assert "watcher" in d.services.running()
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), wait_for_restart)
    assert code == 0 and left == set()
    assert len(calls) == 2
    assert "event=service_failed owner=daemon service=watcher" in caplog.text
    assert "action=restart" in caplog.text
    assert "event=service_restarted owner=daemon service=watcher restarts=1" in caplog.text


def test_a_failing_scheduler_is_logged_and_the_leader_starts_it_again(cfg, caplog,
                                                                      monkeypatch):
    starts = []
    original = scheduler.Scheduler.run

    async def flaky(self):
        starts.append(1)
        if len(starts) == 1:
            raise RuntimeError("scheduler broke (injected)")
        again.set()
        await original(self)
    monkeypatch.setattr(scheduler.Scheduler, "run", flaky)
    again = None

    async def wait_for_restart(d):
        nonlocal again
        again = asyncio.Event()
        await asyncio.wait_for(again.wait(), 10)
        assert d.leadership.scheduler is not None
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), wait_for_restart)
    assert code == 0 and left == set()
    assert "event=leader_duties_failed" in caplog.text
    assert "scheduler broke (injected)" in caplog.text
    assert "restart_in_s=" in caplog.text


def test_a_cluster_member_stops_with_nothing_left_running(tmp_path, caplog):
    from cluster_harness import free_port
    os.chmod(tmp_path, 0o755)
    for d in ("jobs", "state", "logs"):
        (tmp_path / d).mkdir(mode=0o755)
    addr = f"127.0.0.1:{free_port('127.0.0.1')}"
    cfg = parse_config({
        "node_id": "a", "data_dir": str(tmp_path / "state"),
        "jobs_dir": str(tmp_path / "jobs"), "socket": str(tmp_path / "sock"),
        "log_dir": str(tmp_path / "logs"), "timezone": "UTC",
        "cluster": {"listen": addr, "initial_members": {"a": addr}, "insecure": True}},
        str(tmp_path / "cronrd.yaml"))
    seen = {}

    async def look(d):
        seen["services"] = d.services.running()
        seen["leader"] = d.members.status()["leader"]
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), look)
    assert code == 0
    assert "members" in seen["services"] and seen["leader"] == "a"
    assert left == set(), f"tasks left running after Daemon.run returned: {left}"


def test_with_cronrd_faces_thread_the_faces_run_in_a_thread_stopped_with_the_daemon(
        cfg, caplog, monkeypatch):
    # CRONRD_FACES=thread: the layout before 0.3.0 (runtime/faces.py), kept
    # for hosts where a second process is not wanted
    import threading
    monkeypatch.setenv("CRONRD_FACES", "thread")
    seen = {}

    async def look(d):
        seen["services"] = d.services.running()
        seen["threads"] = [t.name for t in threading.enumerate()]
        seen["status"] = await d.handlers.h_status(Status())
    caplog.set_level(logging.INFO)
    code, left = run_daemon(Daemon(cfg), look)
    assert code == 0 and left == set()
    assert "http" in seen["services"] and "faces" not in seen["services"]
    assert "cronrd-faces" in seen["threads"] and seen["status"]["faces"] is None
    assert not [t for t in threading.enumerate() if t.name == "cronrd-faces"]

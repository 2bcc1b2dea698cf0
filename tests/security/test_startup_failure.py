"""A daemon whose Raft node dies while it waits for the cluster at start-up
exits with a message (issue 9: it used to wait in "starting up" for ever)."""

from __future__ import annotations

import asyncio
import logging
import os

from cluster_harness import free_port
from cronrd.config import parse_config
from cronrd.errors import StorageError
from cronrd.runtime.log import raft_node
from cronrd.runtime.daemon import Daemon


def test_raft_dying_during_start_up_stops_the_daemon(tmp_path, monkeypatch, caplog):
    os.chmod(tmp_path, 0o755)
    for d in ("jobs", "state", "logs"):
        (tmp_path / d).mkdir(mode=0o755)
    cfg = parse_config({
        "node_id": "j", "data_dir": str(tmp_path / "state"), "jobs_dir": str(tmp_path / "jobs"),
        "socket": str(tmp_path / "sock"), "log_dir": str(tmp_path / "logs"),
        "cluster": {"listen": f"127.0.0.1:{free_port('127.0.0.1')}", "join": True,
                    "initial_members": {"a": f"127.0.0.1:{free_port('127.0.0.1')}"},
                    "insecure": True}}, str(tmp_path / "cronrd.yaml"))

    async def broken_disk(self, rd, loop):
        raise StorageError("disk I/O error (injected)")
    monkeypatch.setattr(raft_node.RaftNode, "_handle", broken_disk)

    async def go():
        return await asyncio.wait_for(Daemon(cfg).run(), 30)
    caplog.set_level(logging.ERROR)
    try:
        code = asyncio.run(go())
    except StorageError as exc:  # run_daemon turns this into exit code 1
        assert "Raft node stopped while this daemon was starting" in str(exc)
    else:
        assert code == 1
    assert "raft_stopped" in caplog.text

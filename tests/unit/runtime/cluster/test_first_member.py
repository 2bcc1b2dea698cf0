"""`cronrd cluster init` in-process (runtime/cluster/first_member.py): what it checks,
and that the Raft node it prepares carries on from the one-host state."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from cronrd.config import parse_config
from cronrd.errors import CronrdError, StorageError, UsageError
from cronrd.raft.types import ConfState
from cronrd.runtime.cluster.first_member import init_first_member
from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.log.replicated import RaftLog, ReplicatedState
from cronrd.runtime.log.raft_node import RaftNode
from cronrd.runtime.log.raft_storage import RaftStorage
from cronrd.runtime.storage import DataDirLock, open_db
from cronrd.state import queries as Q
from cronrd.state.machine import StateMachine
from log_impls import NoPeers
from tests.unit.runtime.log.test_replicated import fire, put
from tests.unit.state.test_state import T0


def config(tmp_path, cluster=None):
    raw = {"node_id": "a", "data_dir": str(tmp_path / "state"), "jobs_dir": str(tmp_path),
           "socket": str(tmp_path / "s"), "log_dir": str(tmp_path / "logs")}
    if cluster is not None:
        raw["cluster"] = {"listen": "127.0.0.1:7001", "insecure": True, **cluster}
    return parse_config(raw, str(tmp_path / "c.yaml"))


def one_host_history(cfg) -> str:
    os.makedirs(cfg.data_dir)
    conn = open_db(cfg.state_db)

    async def main():
        log = LocalLog(StateMachine(conn))
        await log.propose(put())
        for i in range(1, 4):
            await log.propose(fire(T0 + i))
    asyncio.run(main())
    digest = StateMachine(conn).state_digest
    conn.close()
    return digest


def test_the_first_member_carries_on_from_the_one_host_state(tmp_path):
    cfg = config(tmp_path)
    digest = one_host_history(cfg)
    res = init_first_member(cfg)
    assert res["applied_index"] == 4 and res["state_digest"] == digest
    with open(os.path.join(cfg.data_dir, "bootstrap")) as f:
        assert f.read().split() == ["a"]

    async def main():
        conn = open_db(cfg.state_db)
        state = ReplicatedState(StateMachine(conn), cfg.data_dir)
        storage = RaftStorage(cfg.raft_db)
        node = RaftNode("a", ConfState(("a",)), storage, NoPeers(), state, tick_interval=0.01,
                        election_tick=3, rng=random.Random(1))
        await node.start()
        try:
            log = RaftLog(node, state)
            assert (await log.propose(fire(T0 + 4)))["run_id"] == 4
            assert node.raft.term >= 2 and node.raft.conf.voters == ("a",)
            return [r.run_id for r in Q.list_runs(conn)], state.applied_index
        finally:
            await node.stop()
            storage.close()
            conn.close()
    runs, applied = asyncio.run(asyncio.wait_for(main(), 20))
    assert sorted(runs) == [1, 2, 3, 4] and applied >= 5  # (and a new leader's empty entry)


def test_cluster_init_runs_once_and_never_beside_the_daemon(tmp_path):
    cfg = config(tmp_path)
    one_host_history(cfg)
    lock = DataDirLock(cfg.data_dir)
    lock.acquire()
    with pytest.raises(StorageError, match="another cronrd daemon is using"):
        init_first_member(cfg)
    lock.release()
    assert not os.path.exists(cfg.raft_db)
    init_first_member(cfg)
    with pytest.raises(CronrdError, match="already holds a Raft log"):
        init_first_member(cfg)


@pytest.mark.parametrize("cluster, message", [
    ({"initial_members": {"a": "127.0.0.1:7001", "b": "127.0.0.1:7002"}},
     "lists b; the first member starts alone"),
    ({"initial_members": {"b": "127.0.0.1:7002"}, "join": True}, "cluster.join is true")])
def test_a_cluster_section_must_make_this_node_the_only_initial_member(tmp_path, cluster,
                                                                         message):
    cfg = config(tmp_path, cluster)
    one_host_history(cfg)
    with pytest.raises(UsageError, match=message):
        init_first_member(cfg)
    assert not os.path.exists(cfg.raft_db)

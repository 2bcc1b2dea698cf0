"""``cronrd cluster init``: a one-host data_dir becomes the first member of
a cluster, with its jobs, runs and history.

A one-host node keeps its state in state.db and no Raft log (log/local.py).
A cluster member's state is what its Raft log says, so a state with history
but no log cannot simply start in cluster mode (Cluster refuses it). This
writes the log that state corresponds to: a Raft snapshot at the state's
applied index, whose membership is this node alone, and the bootstrap file
that fixes that membership. Started with a cluster: section, the node then
leads a cluster of one, carrying on from the same applied index and state
digest; other nodes join it with `cronrd cluster add` (and join: true).
"""

from __future__ import annotations

import os

from ...config import Config
from ...errors import CronrdError, UsageError
from ...raft.types import ConfState, HardState, Snapshot, SnapshotMeta
from ...state.machine import StateMachine
from ..log.raft_storage import RaftStorage
from ..storage import DataDirLock, open_db

BOOTSTRAP = "bootstrap"  # data_dir file: the voters the log starts with (see Cluster)
TERM = 1                 # the snapshot's term: the node's first election is term 2


def _write_atomically(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_cluster_section(config: Config) -> None:
    """If the config already has its cluster: section, it must make this
    node the first member: bootstrapping (not joining), itself the only
    initial member (the others join it)."""
    cc = config.cluster
    if cc is None:
        return
    if cc.join:
        raise UsageError(f"{config.path}: cluster.join is true, but `cronrd cluster init` makes "
                         "this node the first member of a new cluster; remove join (a node that "
                         "joins a running cluster starts from a fresh data_dir)")
    others = sorted(set(cc.members_dict()) - {config.node_id})
    if others:
        raise UsageError(f"{config.path}: cluster.initial_members lists {', '.join(others)}; "
                         f"the first member starts alone: list only {config.node_id} there, "
                         "and add the others with `cronrd cluster add` once it runs")


def init_first_member(config: Config) -> dict:
    """Turn ``config.data_dir`` (a one-host node's, daemon stopped) into the
    first member of a cluster. Returns what it found and wrote."""
    check_cluster_section(config)
    if not os.path.isdir(config.data_dir):
        raise CronrdError(f"data_dir {config.data_dir} does not exist: there is no one-host "
                          "state to convert (a new node needs no `cluster init`; start it "
                          "with a cluster: section)")
    if os.path.exists(config.raft_db):
        raise CronrdError(f"{config.data_dir} already holds a Raft log ({config.raft_db}): "
                          "this node is a cluster member already; `cronrd cluster members` "
                          "lists the members")
    lock = DataDirLock(config.data_dir)
    lock.acquire()  # refuses while the daemon runs
    try:
        conn = open_db(config.state_db)
        try:
            machine = StateMachine(conn, node_id=config.node_id)  # upgrades an old schema
            index = machine.applied_index
            digest = machine.state_digest
            voters = (config.node_id,)
            if index > 0:
                storage = RaftStorage(config.raft_db)
                try:
                    storage.save_snapshot(Snapshot(SnapshotMeta(index, TERM, ConfState(voters)),
                                                   conn.serialize("main")))
                    storage.save(HardState(term=TERM, vote="", commit=index), [])
                finally:
                    storage.close()
            _write_atomically(os.path.join(config.data_dir, BOOTSTRAP), "\n".join(voters) + "\n")
        finally:
            conn.close()
    finally:
        lock.release()
    return {"node": config.node_id, "data_dir": config.data_dir, "applied_index": index,
            "state_digest": digest, "raft_db": config.raft_db if index > 0 else None}

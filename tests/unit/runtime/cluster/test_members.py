"""One host is a cluster of one (runtime/cluster/members.py), and the daemon is
written once against the members and their log: it never asks which."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from cronrd.config import parse_config
from cronrd.errors import RequestError, StateError
from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.cluster.members import OneHost, open_members
from cronrd.runtime.storage import open_db
from cronrd.state import versions as V
from cronrd.state.machine import StateMachine

PKG = Path(__file__).resolve().parents[4] / "cronrd"


def one_host(tmp_path) -> OneHost:
    cfg = parse_config({"node_id": "solo", "data_dir": str(tmp_path), "jobs_dir": str(tmp_path),
                        "socket": str(tmp_path / "s"), "log_dir": str(tmp_path)})
    members = open_members(cfg, StateMachine(open_db(str(tmp_path / "state.db"))), None)
    assert isinstance(members, OneHost) and isinstance(members.log, LocalLog)
    return members


def test_one_host_leads_alone_with_a_fresh_lease(tmp_path):
    m = one_host(tmp_path)
    assert m.log.is_leader and m.lease_fresh()
    assert m.member_ids() == ["solo"]
    assert [(v.id, v.healthy, v.state) for v in m.node_views()] == [("solo", True, "up")]
    st = m.status()
    assert {k: st[k] for k in ("role", "leader", "term", "commit_index")} == {
        "role": "leader", "leader": "solo", "term": 0, "commit_index": 0}
    assert st["versions"]["cluster_version"] == 1 and not st["versions"]["mixed"]
    assert m.leader_duties() == [] and m.address() == "" and m.tags() == ()


def test_one_host_takes_the_newest_cluster_version_when_it_runs(tmp_path):
    """One host is every member: running this code is all it takes."""
    m = one_host(tmp_path)
    assert V.recorded(m.machine.conn) == 1
    asyncio.run(m.run())
    assert V.recorded(m.machine.conn) == V.APPLY_VERSION
    assert m.status()["versions"]["cluster_version"] == V.APPLY_VERSION
    asyncio.run(m.run())  # nothing more to raise
    assert m.machine.applied_index == 1


def test_a_cluster_members_data_dir_is_refused_without_a_cluster_section(tmp_path):
    """The mirror of the cluster's refusal of a one-host data_dir: a member's
    state run alone would fire the cluster's jobs a second time."""
    (tmp_path / "raft.db").write_bytes(b"")
    with pytest.raises(StateError, match="belongs to a cluster member.*restore the cluster:"):
        one_host(tmp_path)


def test_cluster_requests_on_one_host_say_how_to_get_a_cluster(tmp_path):
    m = one_host(tmp_path)
    with pytest.raises(RequestError, match="without a cluster: section.*cronrd cluster init"):
        m.members()
    with pytest.raises(RequestError, match="cronrd cluster init"):
        asyncio.run(m.admin("cluster_add", {"node": "b", "address": "h:1"}))
    with pytest.raises(RequestError, match="node b is not a member"):
        asyncio.run(m.call("b", "read_log", {}))


def test_the_daemon_has_no_mode_branches():
    """Issue "One runtime for one host and a cluster": no `cluster is None`,
    no scheduler of its own, no log chosen by mode."""
    text = (PKG / "runtime" / "daemon.py").read_text()
    for pattern in (r"cluster is (not )?None", r"self\.cluster\b", r"cfg\.cluster|config\.cluster",
                    r"LocalLog|RaftLog|Cluster\(", r"Scheduler\(", r"outbox is (not )?None"):
        assert not re.search(pattern, text), pattern

"""Raft across real OS processes on loopback with mutual TLS: kill -9 the
leader again and again while a client writes; no acknowledged write is lost
and a new leader is elected within 2 s each time."""

from __future__ import annotations

import threading
import time

import pytest

from raft_cluster import Cluster, KVClient

pytestmark = pytest.mark.integration

ROUNDS = 4


class Writer(threading.Thread):
    """Writes k0, k1, ... one at a time to whoever leads; records the acked."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: dict[str, str] = {}
        self.stop = threading.Event()
        self.errors = 0

    def run(self) -> None:
        client, i = None, 0
        while not self.stop.is_set():
            key, value = f"k{i}", f"v{i}"
            try:
                if client is None:
                    leader = self.cluster.leader()
                    if leader is None:
                        time.sleep(0.02)
                        continue
                    client = KVClient(self.cluster.client_port[leader], timeout=3.0)
                reply = client.request(f"put {key} {value}")
            except OSError:
                client, reply = None, "err connection"
            if reply.startswith("ok"):
                self.acked[key] = value
                i += 1
            else:
                self.errors += 1
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()


@pytest.fixture
def cluster():
    c = Cluster(tls=True, fsync=True)
    yield c
    c.stop()
    c.cleanup()


def test_kill_leader_repeatedly_loses_no_acknowledged_write(cluster):
    cluster.start_all()
    cluster.wait_leader()
    writer = Writer(cluster)
    writer.start()
    gaps = []
    try:
        for _ in range(ROUNDS):
            before = len(writer.acked)
            deadline = time.monotonic() + 10
            while len(writer.acked) < before + 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(writer.acked) >= before + 20, "writes are not progressing"
            victim = cluster.wait_leader()
            killed = time.monotonic()
            cluster.kill9(victim)
            others = [n for n in cluster.ids if n != victim]
            new = cluster.wait_leader(timeout=10, among=others, poll=0.01)
            gaps.append(time.monotonic() - killed)
            assert new != victim
            cluster.start(victim)  # it rejoins and catches up from its durable log
    finally:
        writer.stop.set()
        writer.join(15)
    print(f"failover gaps (kill -9 to new leader): {[round(g, 3) for g in gaps]}")
    assert max(gaps) <= 2.0, gaps
    # Every acknowledged write is there, read linearizably from the leader.
    leader = cluster.wait_leader()
    client = KVClient(cluster.client_port[leader])
    try:
        missing = [k for k, v in writer.acked.items()
                   if client.request(f"get {k}") != f"ok {v}"]
    finally:
        client.close()
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert len(writer.acked) > 80

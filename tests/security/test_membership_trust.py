"""Certificates with a life cycle and one-time join tokens, on a real
mutual-TLS cluster (issue 9): a host with a certificate from the cluster CA
joins only with the operator's word (and only with a cronrd that applies
the cluster's version), a removed node's certificate stays refused, and
`status` warns before a certificate expires."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cluster_harness import Cluster, free_port
from cronrd.runtime.cluster.versions import OLD_RELEASE
from cronrd.state import versions as V
from harness import REPO, Node, wait_for
from releases import extract_previous

pytestmark = pytest.mark.integration


def _init_tls(d, nodes: str, days: int = 2) -> None:
    subprocess.run([sys.executable, "-m", "cronrd", "cluster", "init-tls", str(d),
                    "--nodes", nodes, "--days", str(days), "--force"], check=True,
                   capture_output=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def tls_dir(tmp_path):
    _init_tls(tmp_path, "a,b,c,d")
    return str(tmp_path)


def _joiner(c: Cluster, tls_dir: str, join, host="127.0.0.89") -> Node:
    addr = f"{host}:{free_port(host)}"
    node = Node("d", cluster={
        "listen": addr, "initial_members": dict(c.addrs), "join": join,
        "election_timeout": c.election_timeout, "node_timeout": c.node_timeout,
        "tls": {"ca": f"{tls_dir}/ca.crt", "cert": f"{tls_dir}/d.crt",
                "key": f"{tls_dir}/d.key"}})
    node.addr = addr
    return node


def _members(node: Node) -> set[str]:
    return {m["id"] for m in node.call("cluster_members")["members"]}


def _serial(cert: str) -> str:
    out = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", cert],
                         capture_output=True, text=True, check=True).stdout
    return format(int(out.split("=", 1)[1], 16), "x")


def test_a_node_added_with_a_token_joins_only_with_that_token(cluster, tls_dir):
    c = cluster(tls_dir=tls_dir, first_ip=81).start()
    lead = c.leader()
    host = "127.0.0.89"
    probe = _joiner(c, tls_dir, True, host)  # only to learn the address d will use
    addr = probe.addr
    probe.cleanup()
    out = lead.cli("cluster", "add", "d", addr, "--token")
    assert out.returncode == 0, out.stderr
    token = next(line.strip() for line in out.stdout.splitlines()[1:] if line.strip())
    assert "join: {token:" in out.stdout

    # A CA-signed certificate without the token: refused, not added.
    bad = _joiner(c, tls_dir, {"token": "not-the-token"}, host)
    bad.config["cluster"]["listen"] = addr
    bad.config_path.write_text(json.dumps(bad.config))
    bad.start(wait=False)
    wait_for(lambda: "the token it gave is wrong" in lead.log_file.read_text(), 20,
             what="the wrong token refused", on_fail=c.logs)
    assert "d" not in _members(lead)
    bad.cleanup()

    good = _joiner(c, tls_dir, {"token": token}, host)
    good.config["cluster"]["listen"] = addr
    good.config_path.write_text(json.dumps(good.config))
    try:
        good.start(wait=False)
        wait_for(lambda: "d" in _members(lead), 30, what="d added as a learner",
                 on_fail=lambda: c.logs() + good.daemon_log())
        good.wait_ready(timeout=40)
        # The token was spent: it is gone from the replicated state.
        assert "event=joined_with_token node=d" in lead.log_file.read_text()
    finally:
        good.cleanup()


def test_a_joiner_too_old_for_the_cluster_version_is_refused_at_join(cluster, tls_dir,
                                                                     tmp_path):
    """The token is right, but the joiner runs the previous release, which
    cannot apply the cluster's version: the leader refuses to make it a
    learner, saying why and what to do; upgraded, the same node joins."""
    (tmp_path / "previous").mkdir()
    old = extract_previous(tmp_path / "previous")
    c = cluster(tls_dir=tls_dir, first_ip=101).start()
    wait_for(lambda: all(n.call("status")["versions"]["cluster_version"] == V.APPLY_VERSION
                         for n in c), 30, what="the cluster version raised", on_fail=c.logs)
    lead = c.leader()
    host = "127.0.0.109"
    probe = _joiner(c, tls_dir, True, host)
    addr = probe.addr
    probe.cleanup()
    out = lead.cli("cluster", "add", "d", addr, "--token")
    assert out.returncode == 0, out.stderr
    token = next(line.strip() for line in out.stdout.splitlines()[1:] if line.strip())
    d = _joiner(c, tls_dir, {"token": token}, host)
    d.config["cluster"]["listen"] = addr
    d.config_path.write_text(json.dumps(d.config))
    try:
        d.start(env={"PYTHONPATH": str(old)}, wait=False)
        said = (f"event=join_refused node=d error=\"node d runs cronrd {OLD_RELEASE}, which "
                "applies cluster versions up to 1; the cluster is at version "
                f"{V.APPLY_VERSION}: upgrade cronrd on d to {V.release_of(V.APPLY_VERSION)} "
                "or newer, then start it again to join\"")
        wait_for(lambda: said in lead.log_file.read_text(), 30, what="the old joiner refused",
                 on_fail=lambda: c.logs() + d.daemon_log())
        assert "d" not in _members(lead)
        d.proc.kill()
        d.proc.wait(10)
        d.start(wait=False)   # this code: the token was not spent
        wait_for(lambda: "d" in _members(lead), 30, what="d added once upgraded",
                 on_fail=lambda: c.logs() + d.daemon_log())
        d.wait_ready(timeout=40)
    finally:
        d.cleanup()


def test_a_removed_node_keeps_its_certificate_refused_until_it_gets_a_new_one(cluster,
                                                                           tls_dir):
    c = cluster(tls_dir=tls_dir, first_ip=91).start()
    lead = c.leader()
    victim = next(n for n in ("a", "b", "c") if n != lead.config["node_id"])
    old_serial = _serial(f"{tls_dir}/{victim}.crt")
    out = lead.cli("cluster", "remove", victim)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: c[victim].proc.poll() is not None, 30, what="the removed node stops")
    assert victim not in _members(lead)
    # Added again by the operator, but with the same (removed) certificate:
    # the peer port refuses it, naming the fix.
    out = lead.cli("cluster", "add", victim, c.addrs[victim])
    assert out.returncode == 0, out.stderr
    fresh = c.replace_with_joiner(victim)
    fresh.start(wait=False)
    wait_for(lambda: f"serial {old_serial}) is refused" in lead.log_file.read_text(), 30,
             what="the old certificate refused", on_fail=c.logs)
    fresh.proc.kill()
    fresh.proc.wait(10)
    # A new certificate (rotate-cert) is admitted.
    out = subprocess.run([sys.executable, "-m", "cronrd", "cluster", "rotate-cert", victim,
                          tls_dir], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert f"old serial {old_serial}" in out.stdout
    assert _serial(f"{tls_dir}/{victim}.crt") != old_serial
    fresh.start(wait=False)
    fresh.wait_ready(timeout=40)
    wait_for(lambda: fresh.call("status")["leader"] == lead.config["node_id"], 20,
             what="the node back with its new certificate", on_fail=c.logs)


def test_revoking_a_certificate_closes_its_connections(cluster, tls_dir):
    c = cluster(tls_dir=tls_dir, first_ip=101).start()
    lead = c.leader()
    victim = next(n for n in ("a", "b", "c") if n != lead.config["node_id"])
    serial = _serial(f"{tls_dir}/{victim}.crt")
    # Run on a follower (the operator may use any node): it is forwarded to
    # the leader. Refused as "unknown peer request" before the leader served
    # every membership request to peers.
    follower = next(n for n in c if n.config["node_id"] not in (victim, lead.config["node_id"]))
    out = follower.cli("cluster", "revoke-cert", serial.upper())
    assert out.returncode == 0, out.stderr
    wait_for(lambda: f"serial {serial}) is refused" in lead.log_file.read_text(), 20,
             what="the revoked certificate refused", on_fail=c.logs)
    # The others keep a leader.
    others = [n for n in c if n.config["node_id"] != victim]
    wait_for(lambda: all(n.call("status")["leader"] for n in others), 20, what="a leader")


def test_status_warns_before_the_certificate_expires(cluster, tls_dir):
    c = cluster(tls_dir=tls_dir, first_ip=111).start()  # certificates of 2 days
    out = c["a"].cli("status")
    assert out.returncode == 0, out.stderr
    assert "cert      serial" in out.stdout
    assert "WARNING" in out.stdout and "rotate-cert a" in out.stdout
    st = c["a"].call("status")
    assert st["certificate"]["days_left"] <= 2 and "warning" in st["certificate"]


def test_a_join_token_works_for_its_node_for_a_day(tmp_path):
    """The peer-port decision for a node added with --token, on a fake clock."""
    import hashlib
    import os

    import apsw

    from cronrd.config import parse_config
    from cronrd.runtime.cluster.raft_cluster import Cluster
    from cronrd.runtime.cluster.trust import JOIN_TOKEN_TTL
    from cronrd.state import commands as C
    from cronrd.state.machine import StateMachine

    class Clock:
        t = 1_800_000_000.0

        def now(self):
            return self.t

        def monotonic(self):
            return self.t
    os.chmod(tmp_path, 0o755)
    cfg = parse_config({
        "node_id": "a", "data_dir": str(tmp_path / "state"), "jobs_dir": str(tmp_path),
        "socket": str(tmp_path / "sock"), "log_dir": str(tmp_path / "logs"),
        "cluster": {"listen": "127.0.0.1:1", "initial_members": {"a": "127.0.0.1:1"},
                    "insecure": True}}, str(tmp_path / "c.yaml"))
    os.makedirs(cfg.data_dir)
    clock = Clock()
    machine = StateMachine(apsw.Connection(cfg.state_db))
    cl = Cluster(cfg, machine, clock)
    try:
        with machine.conn:
            machine.apply(1, C.JoinToken(node="d", token_hash=hashlib.sha256(b"tok").hexdigest(),
                                         addr="127.0.0.9:1", at=clock.t))
        assert cl.trust.authorize("d", {"token": "tok"}, ask=False) is None
        assert "wrong" in cl.trust.authorize("d", {"token": "nope"}, ask=False)
        assert "must present it" in cl.trust.authorize("d", {}, ask=False)
        assert "not a member" in cl.trust.authorize("e", {"token": "tok"}, ask=False)
        clock.t += JOIN_TOKEN_TTL + 1
        assert "expired" in cl.trust.authorize("d", {"token": "tok"}, ask=False)
    finally:
        cl.storage.close()


@pytest.mark.parametrize("join, ok", [
    ({"token": "abc"}, True), (True, True), ({"token": ""}, False), ({"token": 5}, False),
    ({"token": "x" * 300}, False), ({"token": "abc", "evil": 1}, False), ("yes", False)])
def test_join_takes_true_or_a_token_and_nothing_else(join, ok):
    from cronrd.config import parse_config
    from cronrd.errors import ConfigError
    raw = {"node_id": "d", "data_dir": "/x", "jobs_dir": "/x", "socket": "/x/s",
           "log_dir": "/x", "cluster": {"listen": "127.0.0.1:7000", "join": join,
                                        "initial_members": {"a": "127.0.0.1:7001"},
                                        "insecure": True}}
    if ok:
        cc = parse_config(raw).cluster
        assert cc.join and cc.join_token == (join["token"] if isinstance(join, dict) else None)
    else:
        with pytest.raises(ConfigError, match="cluster.join"):
            parse_config(raw)


@pytest.mark.parametrize("serial", ["", "zz", "0x", "12:zz", "-1; DROP"])
def test_revoke_cert_refuses_what_is_not_a_hex_serial(serial, tmp_path):
    import asyncio

    from cronrd.errors import UsageError
    from cronrd.runtime.cluster.admin import ClusterAdmin

    class Stub:  # only the parsing runs before anything is proposed
        clock = None
    with pytest.raises(UsageError, match="invalid certificate serial"):
        asyncio.run(ClusterAdmin.revoke_cert(Stub(), {"serial": serial}))

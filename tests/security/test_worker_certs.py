"""Issue 34 (2): a worker's certificate (`cluster init-tls --workers`) is
signed by the cluster CA but can never act as a member: the peer port
refuses it before its hello, whatever name it carries (a member's too), so
it sends no Raft message and proposes nothing; and no member serves the
peer port with one."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys

import pytest

from cluster_harness import free_port, init_tls
from cronrd.runtime.peers import tls as T
from cronrd.runtime.peers.rpc import PeerUnavailable
from harness import REPO, wait_for
from tests.security.test_peer_port import _addr, _flood, _propose_as, _put_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    return init_tls(tmp_path_factory.mktemp("tls"), workers="wk1")


@pytest.fixture(scope="module")
def forged_dir(tls_dir, tmp_path_factory):
    """The same CA, and workers' certificates carrying the members' names."""
    d = tmp_path_factory.mktemp("forged")
    for f in (T.CA_CERT, T.CA_KEY):
        shutil.copy(f"{tls_dir}/{f}", d / f)
    for name in "abc":
        T.issue_node_cert(d, name, days=2, worker=True)
    return str(d)


def test_a_worker_certificate_says_what_it_is_and_is_for_clients_only(tls_dir):
    text = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext",
                           "extendedKeyUsage", "-in", f"{tls_dir}/wk1.crt"],
                          capture_output=True, text=True, check=True).stdout
    assert f"OU = {T.WORKER_OU}" in text and "CN = wk1" in text
    assert "TLS Web Client Authentication" in text and "Server" not in text
    member = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                             f"{tls_dir}/a.crt"], capture_output=True, text=True,
                            check=True).stdout
    assert T.WORKER_OU not in member


def test_the_cli_refuses_a_name_that_is_both_a_node_and_a_worker(tmp_path):
    res = subprocess.run([sys.executable, "-m", "cronrd", "cluster", "init-tls",
                          str(tmp_path / "t"), "--nodes", "a,b", "--workers", "b"],
                         capture_output=True, text=True, env={"PYTHONPATH": str(REPO),
                                                              "PATH": "/usr/bin:/bin"})
    assert res.returncode != 0 and "a name is one node's or one worker's" in res.stderr


@pytest.fixture
def tls_cluster(cluster, tls_dir):
    return cluster(tls_dir=tls_dir, first_ip=81).start()


def test_a_worker_certificate_is_refused_on_the_peer_port(tls_cluster, tls_dir, tmp_path):
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    marker = tmp_path / "pwned"
    # its own name: refused at the hello (no answer at all), nothing proposed
    host = "127.0.0.90"
    res = _propose_as("wk1", host, free_port(host), tls_dir, lid,
                      _addr(tls_cluster.addrs[lid]), [_put_job("wk1", str(marker))])
    assert isinstance(res[0], PeerUnavailable), res
    wait_for(lambda: "may not speak the peer protocol" in lead.log_file.read_text(), 10,
             what="the refusal logged")


def test_a_worker_certificate_with_a_members_name_is_refused_and_moves_nothing(
        tls_cluster, forged_dir, tmp_path):
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    before = {n.config["node_id"]: n.call("status")["term"] for n in tls_cluster}
    marker = tmp_path / "pwned"
    # a member's name (a follower's, stopped), from its own address: refused all the same
    victim = next(n for n in "abc" if n != lid)
    tls_cluster[victim].terminate()
    host, port = _addr(tls_cluster.addrs[victim])
    res = _propose_as(victim, host, port, forged_dir, lid, _addr(tls_cluster.addrs[lid]),
                      [_put_job(victim, str(marker))])
    assert isinstance(res[0], PeerUnavailable), res

    # and no Raft message of any kind gets through
    _flood(victim, host, port, forged_dir,
           {n: _addr(a) for n, a in tls_cluster.addrs.items() if n != victim},
           before, rounds=10, ahead=50)
    alive = [n for n in tls_cluster if n.config["node_id"] != victim]
    assert all(n.call("status")["term"] == before[n.config["node_id"]] for n in alive)
    assert tls_cluster.leader() is lead
    assert all("pwn" not in {j["name"] for j in n.call("jobs")} for n in alive)
    assert not marker.exists()


def test_a_client_refuses_a_server_that_shows_a_worker_certificate(tls_dir):
    """A worker's certificate has no serverAuth: even a process holding one
    cannot pose as a member to the members that dial it."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(f"{tls_dir}/wk1.crt", f"{tls_dir}/wk1.key")
    client = T.client_context(T.TLSPaths(f"{tls_dir}/ca.crt", f"{tls_dir}/a.crt",
                                         f"{tls_dir}/a.key"))

    async def go() -> str:
        async def handle(reader, writer):
            writer.close()
        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server)
        port = srv.sockets[0].getsockname()[1]
        try:
            await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="")
            return "connected"
        except ssl.SSLError as exc:
            return str(exc)
        finally:
            srv.close()
            await srv.wait_closed()
    why = asyncio.run(go())
    assert "certificate verify failed" in why and "purpose" in why.lower(), why

"""Attacks on the peer port of a real mutual-TLS cluster (issue 9).

The rogue side speaks our protocol with cronrd's own transport and peer-request
classes, in this process, with certificates signed by the cluster CA: one made
for a node that is not a member (``evil``), and a member's own (``b``, stopped
first, impersonated on its address) to forge commands in its name.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import pytest

from cluster_harness import free_port
from cronrd.raft.types import Message, MsgType
from cronrd.runtime.peers.rpc import PeerError, PeerRPC, PeerUnavailable
from cronrd.runtime.peers.transport import TLSConfig, Transport
from cronrd.state import commands as C
from harness import REPO, wait_for

pytestmark = pytest.mark.integration

MARK = "/tmp/cronrd-rogue-was-here"


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run([sys.executable, "-m", "cronrd", "cluster", "init-tls", str(d),
                    "--nodes", "a,b,c,evil", "--days", "2"], check=True, capture_output=True,
                   env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return str(d)


@pytest.fixture
def tls_cluster(cluster, tls_dir):
    c = cluster(tls_dir=tls_dir, first_ip=61)
    return c.start()


def _rogue(node_id: str, host: str, port: int, tls_dir: str, peers: dict):
    tls = TLSConfig(f"{tls_dir}/ca.crt", f"{tls_dir}/{node_id}.crt", f"{tls_dir}/{node_id}.key")
    box = {}

    def on_message(m):
        box["rpc"].on_message(m) if m.type in (MsgType.RPC_REQ, MsgType.RPC_RESP) else None
    t = Transport(node_id, (host, port), peers, on_message, tls=tls)
    box["rpc"] = PeerRPC(node_id, t, {})
    return t, box["rpc"]


def _flood(rogue_id: str, host: str, port: int, tls_dir: str, targets: dict,
           terms: dict, rounds: int, ahead: int) -> None:
    """Send every Raft message type as ``rogue_id`` to each of ``targets``
    (id -> address), ``rounds`` times, with terms ``ahead`` of ``terms``."""
    async def go():
        t, rpc = _rogue(rogue_id, host, port, tls_dir, targets)
        await t.start()
        for _ in range(rounds):
            for nid in targets:
                for kind in MsgType:
                    t.send(Message(type=kind, to=nid, frm=rogue_id, term=terms[nid] + ahead,
                                   index=10 ** 6, log_term=terms[nid] + ahead,
                                   commit=10 ** 6))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        rpc.close()
        await t.close()
    asyncio.run(go())


def _addr(a: str) -> tuple[str, int]:
    host, port = a.rsplit(":", 1)
    return host, int(port)


def _call_as(rogue_id, host, port, tls_dir, to, addr, method, many_args, timeout=4.0,
             while_connected=None):
    """Make the peer request ``method`` once per args dict; each outcome
    (and, last, what ``while_connected()`` returns, asked before the rogue
    hangs up)."""
    async def go():
        t, rpc = _rogue(rogue_id, host, port, tls_dir, {to: addr})
        await t.start()
        out = []
        try:
            for args in many_args:
                try:
                    out.append(await rpc.call(to, method, args, timeout=timeout))
                except (PeerError, PeerUnavailable) as exc:
                    out.append(exc)
            if while_connected is not None:
                out.append(await asyncio.to_thread(while_connected))
        finally:
            rpc.close()
            await t.close()
        return out
    return asyncio.run(go())


def _propose_as(rogue_id, host, port, tls_dir, to, addr, cmds, timeout=4.0):
    """Send each command as a ``propose`` peer request; return each outcome."""
    return _call_as(rogue_id, host, port, tls_dir, to, addr, "propose",
                    [{"cmd": cmd.encode().decode()} for cmd in cmds], timeout)


def _impersonate(cluster):
    """Stop a follower (the victim) so that a rogue can speak as it from its
    own address: (leader, leader id, victim, the third node, host, port)."""
    lead = cluster.leader()
    lid = lead.config["node_id"]
    victim = "b" if lid != "b" else "c"
    other = next(n for n in "abc" if n not in (lid, victim))
    cluster[victim].terminate()
    host, port = _addr(cluster.addrs[victim])
    return lead, lid, victim, other, host, port


def _put_job(node: str, marker: str) -> C.PutJob:
    from cronrd.jobspec import parse_job_text
    (spec,) = parse_job_text(f"schedule: '* * * * * *'\ncommand: [touch, {marker}]\n"
                             "run_on: all\n", "/etc/cronrd.d/pwn.yaml").jobs
    return C.PutJob(name="pwn", spec=spec.to_dict(), digest=spec.digest(),
                    source="/etc/cronrd.d/pwn.yaml", at=time.time(), node=node)


def test_a_ca_signed_stranger_is_refused_and_runs_nothing(tls_cluster, tls_dir, tmp_path):
    marker = tmp_path / "pwned"
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    host = "127.0.0.70"
    res = _propose_as("evil", host, free_port(host), tls_dir, lid,
                      _addr(tls_cluster.addrs[lid]), [_put_job("evil", str(marker))])
    assert isinstance(res[0], PeerUnavailable)  # refused at the hello: no answer at all
    wait_for(lambda: "evil" in lead.log_file.read_text() and "not a member" in
             lead.log_file.read_text(), 10, what="the refusal logged")
    assert all("pwn" not in {j["name"] for j in n.call("jobs")} for n in tls_cluster)
    assert not marker.exists()
    assert tls_cluster.leader().config["node_id"] == lid  # still leading, nobody crashed
    assert all(n.proc.poll() is None for n in tls_cluster)


def test_messages_of_every_type_from_a_stranger_change_nothing(tls_cluster, tls_dir):
    lead = tls_cluster.leader()
    before = {n.config["node_id"]: n.call("status")["term"] for n in tls_cluster}
    host = "127.0.0.71"
    target = {n: _addr(a) for n, a in tls_cluster.addrs.items()}

    _flood("evil", host, free_port(host), tls_dir, target, before, rounds=20, ahead=100)
    after = {n.config["node_id"]: n.call("status")["term"] for n in tls_cluster}
    assert after == before
    assert tls_cluster.leader() is lead
    tls_cluster.converged()


def test_a_member_cannot_speak_for_another_node_or_for_the_leader(tls_cluster, tls_dir,
                                                                   tmp_path):
    lead, lid, victim, other, host, port = _impersonate(tls_cluster)
    forged = [
        C.RunStarted(run_id=1, token=1, node=other, pid=1, started_at=time.time(),
                     log_path="/etc/shadow"),
        _put_job(other, str(tmp_path / "x")),
        C.NodeInfo(node=other, state="draining", addr="127.0.0.1:1", tags=(), at=time.time()),
        C.Fire(job="pwn", fire_time=int(time.time()) + 5, kind="scheduled", node=victim,
               due_at=time.time(), at=time.time()),
        C.NodeLost(node=other, at=time.time(), reason="forged"),
        C.RemoveNode(node=other, at=time.time()),
        C.Prune(before=time.time() + 1e6, at=time.time()),
        C.ReplaceRuns(moves=[[1, 1, victim]], at=time.time(), reason="forged"),
        C.ClaimRuns(node=other, claims=[[1, 1]], at=time.time()),
    ]
    res = _propose_as(victim, host, port, tls_dir, lid, _addr(tls_cluster.addrs[lid]), forged)
    for cmd, r in zip(forged, res):
        assert isinstance(r, PeerError) and r.kind == "PermissionDenied", (cmd.op, r)
    log_text = lead.log_file.read_text()
    assert log_text.count("event=forwarded_refused") >= len(forged)
    members = {m["id"]: m for m in lead.call("cluster_members")["members"]}
    assert members[other]["state"] == "up"
    assert tls_cluster.leader() is lead


def test_out_of_range_terms_from_a_member_are_refused(tls_cluster, tls_dir):
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    victim = "b" if lid != "b" else "c"
    tls_cluster[victim].terminate()
    host, port = _addr(tls_cluster.addrs[victim])
    term = lead.call("status")["term"]

    async def go():
        t, rpc = _rogue(victim, host, port, tls_dir, {lid: _addr(tls_cluster.addrs[lid])})
        await t.start()
        for big in (2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 62):
            for kind in (MsgType.HEARTBEAT, MsgType.VOTE, MsgType.APP):
                t.send(Message(type=kind, to=lid, frm=victim, term=big, index=big, commit=big))
        await asyncio.sleep(1.0)
        rpc.close()
        await t.close()
    asyncio.run(go())
    assert lead.proc.poll() is None
    st = lead.call("status")
    assert st["term"] == term and st["role"] == "leader"
    assert "2**62" in lead.log_file.read_text()


def test_peer_port_exhaustion_does_not_keep_a_member_out(tls_cluster):
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    victim = "b" if lid != "b" else "c"
    vnode = tls_cluster[victim]
    vnode.terminate()
    lhost, lport = _addr(tls_cluster.addrs[lid])
    socks = []
    deadline = time.monotonic() + 60
    size_before = lead.log_file.stat().st_size
    try:
        for _ in range(300):  # idle, never authenticate
            s = socket.create_connection((lhost, lport), timeout=2)
            socks.append(s)
        vnode.start(wait=False)

        def rejoined():
            # keep the flood going: replace what the node closed
            for i, s in enumerate(socks):
                try:
                    s.setblocking(False)
                    if s.recv(1) == b"":
                        raise OSError
                except BlockingIOError:
                    continue
                except OSError:
                    s.close()
                    try:
                        socks[i] = socket.create_connection((lhost, lport), timeout=1)
                    except OSError:
                        pass
            st = vnode.call("status", timeout=2)
            return st["ready"] and st.get("leader") == lid
        wait_for(rejoined, max(5, deadline - time.monotonic()), interval=0.2,
                 what=f"{victim} back in the cluster during the flood",
                 on_fail=tls_cluster.logs)
    finally:
        for s in socks:
            s.close()
    grown = lead.log_file.stat().st_size - size_before
    refusals = lead.log_file.read_text()[size_before:].count("refused connection")
    assert refusals <= 40, f"{refusals} refusal lines logged one by one"
    assert grown < 200_000


def test_a_raw_raft_proposal_from_a_member_commits_nothing(tls_cluster, tls_dir, tmp_path):
    """Review: a member sent Raft PROPOSE messages straight to the leader
    (a PutJob in another node's name, a membership change adding a
    stranger): the leader appended them without any of the checks of the
    propose peer request."""
    from cronrd.raft.types import ConfChange, ConfChangeType, Entry, EntryType
    marker = tmp_path / "raw"
    lead, lid, victim, other, host, port = _impersonate(tls_cluster)
    entries = (Entry(0, 0, EntryType.NORMAL, _put_job(other, str(marker)).encode()),
               Entry(0, 0, EntryType.CONF, ConfChange(ConfChangeType.ADD_LEARNER,
                                                      "evil").encode()))

    async def go():
        t, rpc = _rogue(victim, host, port, tls_dir, {lid: _addr(tls_cluster.addrs[lid])})
        await t.start()
        term = lead.call("status")["term"]
        for _ in range(5):
            t.send(Message(type=MsgType.PROPOSE, to=lid, frm=victim, term=term,
                           entries=entries))
            await asyncio.sleep(0.2)
        rpc.close()
        await t.close()
    asyncio.run(go())
    wait_for(lambda: "event=raw_propose_refused" in lead.log_file.read_text(), 10,
             what="the raw proposal refused")
    assert "pwn" not in {j["name"] for j in lead.call("jobs")}
    assert "evil" not in {m["id"] for m in lead.call("cluster_members")["members"]}
    assert not marker.exists()


def test_a_forged_reboot_fire_is_refused(tls_cluster, tls_dir):
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    tls_cluster.write_job("hourly", {"schedule": "@hourly", "command": "true"})
    wait_for(lambda: "hourly" in {j["name"] for j in lead.call("jobs")}, 20, what="the job")
    victim = "b" if lid != "b" else "c"
    tls_cluster[victim].terminate()
    host, port = _addr(tls_cluster.addrs[victim])
    now = time.time()
    forged = [C.Fire(job="hourly", fire_time=int(now), kind="scheduled", node=victim,
                     due_at=now, at=now, boot=True, target=victim)]
    (res,) = _propose_as(victim, host, port, tls_dir, lid, _addr(tls_cluster.addrs[lid]),
                         forged)
    assert isinstance(res, PeerError) and res.kind == "PermissionDenied", res
    assert "not an @reboot job" in str(res)
    assert not [r for r in lead.runs("hourly")]


def test_a_member_lying_about_its_clock_harms_only_itself(tls_cluster, tls_dir):
    """The peer request ``clock`` (issue 11) from a member: nonsense values
    are refused, and a plausible lie (its clock 30 s off) marks only that
    member off; the others stay in bounds and the leader stays."""
    lead = tls_cluster.leader()
    lid = lead.config["node_id"]
    victim = "b" if lid != "b" else "c"

    def offsets():
        return {m["id"]: m["clock_offset_ms"] for m in lead.call("cluster_members")["members"]}
    wait_for(lambda: all(v is not None for v in offsets().values()), 20,
             what="every member's clock measured")
    tls_cluster[victim].terminate()
    host, port = _addr(tls_cluster.addrs[victim])  # speak as that member, on its address

    res = _call_as(victim, host, port, tls_dir, lid, _addr(tls_cluster.addrs[lid]), "clock", [
        {"offset": "30"}, {"offset": 1e12}, {"offset": True}, {"offset": float("inf")},
        {"offset": 0.0, "error": []}, {"offset": 0.0, "base": "x"},
        {"offset": 0.0, "base": 1e300}, {"offset": 30.0, "error": 0.001}],
        while_connected=offsets)
    assert all(isinstance(r, PeerError) and "clock:" in str(r) for r in res[:7]), res
    assert isinstance(res[7], dict) and isinstance(res[7]["wall"], float)
    members = res[8]
    assert members[victim] is not None and abs(members[victim] - 30000) < 1000, members
    assert all(abs(v) < 500 for n, v in members.items() if n != victim and v is not None)
    assert lead.call("status")["clock_off"] is False and tls_cluster.leader() is lead
    # Hung up, the lie is forgotten: its clock is measured again before it
    # gets runs (ClockWatch.forget), and nobody else moved.
    wait_for(lambda: offsets()[victim] is None, 10, what="the lie forgotten")
    assert all(abs(v) < 500 for n, v in offsets().items() if n != victim and v is not None)


def test_a_batch_of_proposals_is_checked_one_by_one_and_bad_batches_are_refused(
        tls_cluster, tls_dir, tmp_path):
    """Forwarded proposals travel in batches (runtime/log/forwarding.py): each
    command of a batch is checked as one alone would be, a forged one is
    refused without taking the others with it, and a malformed batch is
    refused whole, without harm to the leader."""
    lead, lid, victim, other, host, port = _impersonate(tls_cluster)
    good = C.Audit(node=victim, uid=0, user="root", pid=1, command="pause", target="x",
                   allowed=False, at=time.time(), detail="from a batch")
    forged_claim = C.ClaimRuns(node=other, claims=[[1, 1]], at=time.time())
    bad_claim = C.ClaimRuns(node=victim, claims="all of them", at=time.time())
    batch = [good.encode().decode(), forged_claim.encode().decode(),
             bad_claim.encode().decode(), "{not json", 42]
    res = _call_as(victim, host, port, tls_dir, lid, _addr(tls_cluster.addrs[lid]), "propose",
                   [{"cmds": batch}, {"cmds": "x"}, {"cmds": []},
                    {"cmds": [good.encode().decode()] * 65}])
    answer = res[0]
    assert isinstance(answer, dict) and len(answer["results"]) == 5, answer
    ok, forged, bad, garbage, number = answer["results"]
    assert "ok" in ok
    assert forged["kind"] == "PermissionDenied" and "speaks only for itself" in forged["error"]
    assert bad["kind"] == "Refused" and "non-empty list" in bad["error"]
    assert "error" in garbage and "error" in number
    for refused in res[1:]:
        assert isinstance(refused, PeerError) and refused.kind == "RequestError", refused
    wait_for(lambda: any(a["detail"] == "from a batch" for a in lead.call("audit")["records"]),
             10, what="the good command of the batch committed")
    assert tls_cluster.leader() is lead and lead.call("status")["ready"]

"""Issue 34 (2): the worker port, attacked. A worker certificate may claim
and report on its own runs and nothing else: no proposal of another kind,
no report on another worker's run, no member's certificate on this port,
no certificate from another CA; bad frames cost only the connection."""

from __future__ import annotations

import asyncio
import ssl

import apsw

import pytest

from cronrd.errors import NotLeader
from cronrd.runtime.peers import tls as T
from cronrd.runtime.peers import worker_wire as W
from cronrd.state import commands as C
from cluster_harness import init_tls
from harness import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    return init_tls(tmp_path_factory.mktemp("tls"), workers="wk1,wk2")


@pytest.fixture(scope="module")
def stranger_dir(tmp_path_factory):
    """Another CA, with a worker certificate of the same name."""
    d = tmp_path_factory.mktemp("stranger")
    T.init_tls(d, [], days=2, worker_ids=["wk1"])
    return str(d)


@pytest.fixture
def fleet(cluster, tls_dir):
    return cluster(tls_dir=tls_dir, worker_port=True, first_ip=111)


def _ctx(tls_dir: str, name: str) -> ssl.SSLContext:
    return T.client_context(T.TLSPaths(ca=f"{tls_dir}/ca.crt", cert=f"{tls_dir}/{name}.crt",
                                       key=f"{tls_dir}/{name}.key"))


class Raw:
    """A hand-driven worker connection: frames in, frames out."""

    def __init__(self, reader, writer):
        self.reader, self.writer, self.next = reader, writer, 0

    async def ask(self, op: str, **args):
        self.next += 1
        self.writer.write(W.encode({"op": op, "id": self.next, **args}))
        while True:
            msg = await asyncio.wait_for(W.read_frame(self.reader), 10)
            if msg.get("re") == self.next:
                return msg


async def _connect_leader(fleet, tls_dir: str, name: str) -> Raw:
    for addr in fleet.worker_addrs.values():
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port),
                                                       ssl=_ctx(tls_dir, name),
                                                       server_hostname="")
        raw = Raw(reader, writer)
        answer = await raw.ask("hello", version="0.3.0", capacity=2, tags=["gpu"])
        if "ok" in answer:
            return raw
        assert answer["kind"] == "NotLeader", answer
        writer.close()
    raise AssertionError("no server welcomed the worker")


def _run_hostile(coro):
    return asyncio.run(coro)


def test_a_worker_proposes_nothing_but_its_own_claims_and_reports(fleet, tls_dir, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    fleet.write_job("long", {"schedule": "@yearly", "run_on": {"tags": ["gpu"]},
                             "command": f"touch {out}/started; sleep 30"})
    fleet.start()
    honest = fleet.worker("wk2", tags=["gpu"]).start()
    fleet.wait_worker("wk2")
    lead = fleet.leader()
    assert lead.cli("run-now", "long").returncode == 0
    run = lead.wait_runs(lambda rs: any(r["state"] == "running" for r in rs), job="long",
                         timeout=30)[0]
    assert run["node"] == "wk2"
    # (the attempt's token is a log index: guessable; read here from the leader's state)
    db = apsw.Connection(f"{lead.config['data_dir']}/state.db", flags=apsw.SQLITE_OPEN_READONLY)
    (token,), = db.execute("SELECT token FROM runs WHERE run_id=?", (run["run_id"],))
    db.close()
    marker = tmp_path / "pwned"
    evil_spec = {"name": "evil", "schedule": "* * * * * *", "command": f"touch {marker}"}

    async def attack():
        raw = await _connect_leader(fleet, tls_dir, "wk1")
        answers = {}
        for name, cmd in {
            "put_job": C.PutJob(name="evil", spec=evil_spec, digest="d", source="/x",
                                at=0.0),
            "node_lost": C.NodeLost(node="wk2", at=0.0, reason="mine now"),
            "cancel": C.CancelRun(run_id=run["run_id"], at=0.0, reason="x"),
            "claim_as_other": C.ClaimRuns(node="wk2", at=0.0, claims=[[run["run_id"], 1]]),
            # in its own name, on wk2's running attempt, with its token
            "finish": C.RunFinished(
                run_id=run["run_id"], token=token, node="wk1", state="succeeded",
                exit_code=0, signal=None, started_at=0.0, finished_at=1.0, log_path=None,
                reason="forged"),
            "started": C.RunStarted(run_id=run["run_id"], token=token, node="wk1", pid=1,
                                    started_at=0.0, log_path="/etc/shadow"),
            # an older token is no one's attempt now: apply records a late report
            "stale": C.RunFinished(
                run_id=run["run_id"], token=token - 1, node="wk1", state="succeeded",
                exit_code=0, signal=None, started_at=0.0, finished_at=1.0, log_path=None,
                reason="forged"),
        }.items():
            answers[name] = await raw.ask("propose", cmd=cmd.encode().decode())
        answers["raft"] = await raw.ask("raft", msg="vote for me")
        raw.writer.close()
        return answers

    answers = _run_hostile(attack())
    for name in ("put_job", "node_lost", "cancel", "claim_as_other", "finish", "started"):
        assert answers[name]["kind"] == "PermissionDenied", (name, answers[name])
    assert answers["raft"]["kind"] == "RequestError"
    assert answers["stale"]["ok"] == {"state": "running", "late": True}
    assert {j["name"] for j in lead.call("jobs")} == {"long"}
    now = [r for r in lead.runs("long") if r["run_id"] == run["run_id"]][0]
    assert (now["state"], now["node"]) == ("running", "wk2")
    assert fleet.worker_state("wk2")["connected"]
    assert not marker.exists()
    assert "event=worker_refused" in lead.log_file.read_text()
    assert honest.proc.poll() is None


def test_the_port_takes_only_workers_of_this_cluster(fleet, tls_dir, stranger_dir):
    fleet.start()
    lead = fleet.leader()
    # (a worker is refused, and told why, until the members have raised the cluster
    # version to 2: they do so by themselves once all of them run this release)
    wait_for(lambda: lead.call("status")["versions"]["cluster_version"] >= 2, 30)
    addr = fleet.worker_addrs[lead.config["node_id"]]
    host, port = addr.rsplit(":", 1)

    async def member_cert():
        reader, writer = await asyncio.open_connection(host, int(port),
                                                       ssl=_ctx(tls_dir, "a"),
                                                       server_hostname="")
        writer.write(W.encode({"op": "hello", "id": 1, "version": "0.3.0", "capacity": 1,
                               "tags": []}))
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await asyncio.wait_for(W.read_frame(reader), 10)

    async def other_ca():
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=_ctx(stranger_dir, "wk1"), server_hostname="")
            writer.write(W.encode({"op": "hello", "id": 1}))
            await asyncio.wait_for(W.read_frame(reader), 10)

    async def garbage():
        reader, writer = await asyncio.open_connection(host, int(port),
                                                       ssl=_ctx(tls_dir, "wk1"),
                                                       server_hostname="")
        writer.write(W.HEADER.pack(W.MAX_FRAME + 1) + b"x" * 100)
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await asyncio.wait_for(W.read_frame(reader), 10)
        reader, writer = await asyncio.open_connection(host, int(port),
                                                       ssl=_ctx(tls_dir, "wk1"),
                                                       server_hostname="")
        writer.write(W.encode({"op": "hello", "id": 1, "capacity": "all", "tags": "x",
                               "version": 1}))
        answer = await asyncio.wait_for(W.read_frame(reader), 10)
        assert answer["kind"] == "RequestError"

    for attack in (member_cert, other_ca, garbage):
        _run_hostile(attack())
    text = lead.log_file.read_text()
    assert "is not a worker's (OU cronrd-worker)" in text
    assert lead.call("status")["ready"] and lead.proc.poll() is None
    # a follower sends a worker to the leader
    follower = next(n for n in fleet.followers())
    fhost, fport = fleet.worker_addrs[follower.config["node_id"]].rsplit(":", 1)

    async def to_follower():
        reader, writer = await asyncio.open_connection(fhost, int(fport),
                                                       ssl=_ctx(tls_dir, "wk1"),
                                                       server_hostname="")
        raw = Raw(reader, writer)
        return await raw.ask("hello", version="0.3.0", capacity=1, tags=[])

    answer = _run_hostile(to_follower())
    assert W.error_of(answer).__class__ is NotLeader
    assert answer["leader"] == lead.config["node_id"]

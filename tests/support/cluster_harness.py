"""Three (or more) real daemons on loopback, each on its own 127.0.0.x address
so that one node's peer traffic can be cut with a firewall rule."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections import Counter
from typing import Any

from harness import Node, wait_for


class Worker(Node):
    """One `cronrd worker` process in its own temporary directory."""

    command = "worker"

    def __init__(self, name: str, *, servers: list[str], tls_dir: str, tags=(),
                 **config: Any):
        self.name = name
        super().__init__(name, worker={
            "servers": servers, "tags": list(tags),
            "tls": {"ca": f"{tls_dir}/ca.crt", "cert": f"{tls_dir}/{name}.crt",
                    "key": f"{tls_dir}/{name}.key"}},
            shutdown={"mode": "detach", "grace": "5s"}, **config)

    def wait_ready(self, timeout: float = 20.0) -> None:
        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}\n"
                                     + self.daemon_log())
            return "event=worker_ready" in self.log_file.read_text(errors="replace")
        wait_for(up, timeout, what=f"worker {self.name} ready", on_fail=self.daemon_log)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, ids=("a", "b", "c"), node_timeout: str = "3s",
                 election_timeout: str = "0.5s", first_ip: int = 21,
                 tls_dir: str | None = None, addrs: dict[str, str] | None = None,
                 worker_port: bool = False, worker_bind: str | None = None):
        """``tls_dir``: a directory made by `cronrd cluster init-tls` holding a
        certificate for every id (mutual TLS instead of insecure: true).
        ``addrs``: node id -> "HOST:PORT" instead of 127.0.0.x with a free port
        (addresses that are not loopback are insecure: {allow_network: true})."""
        self.tls_dir = tls_dir
        if addrs is None:
            hosts = {nid: f"127.0.0.{first_ip + i}" for i, nid in enumerate(ids)}
            addrs = {nid: f"{h}:{free_port(h)}" for nid, h in hosts.items()}
        self.addrs = dict(addrs)
        self.hosts = {nid: a.rsplit(":", 1)[0] for nid, a in self.addrs.items()}
        # ``worker_port``: each member serves a worker port (needs tls_dir).
        # ``worker_bind`` (e.g. "0.0.0.0"): they listen there, so that each worker
        # can dial them through a loopback address of its own (``worker(via=)``),
        # which cut_off() can cut.
        self.worker_addrs = ({nid: f"{worker_bind or h}:{free_port(worker_bind or h)}"
                              for nid, h in self.hosts.items()} if worker_port else {})
        self.workers: list["Worker"] = []
        self.node_timeout = node_timeout
        self.election_timeout = election_timeout
        self.nodes: dict[str, Node] = {nid: self._node(nid, self.addrs) for nid in ids}

    def _node(self, nid: str, members: dict, join: bool = False) -> Node:
        cluster: dict[str, Any] = {
            "listen": self.addrs[nid], "initial_members": dict(members),
            "node_timeout": self.node_timeout, "election_timeout": self.election_timeout,
            "tags": [f"tag-{nid}"]}
        if self.tls_dir:
            cluster["tls"] = {"ca": f"{self.tls_dir}/ca.crt", "cert": f"{self.tls_dir}/{nid}.crt",
                              "key": f"{self.tls_dir}/{nid}.key"}
        elif self.hosts[nid].startswith("127."):
            cluster["insecure"] = True
        else:
            cluster["insecure"] = {"allow_network": True}
        if nid in self.worker_addrs:
            cluster["worker_listen"] = self.worker_addrs[nid]
        if join:
            cluster["join"] = True
        return Node(nid, cluster=cluster, shutdown={"mode": "wait", "grace": "5s"})

    def __getitem__(self, nid: str) -> Node:
        return self.nodes[nid]

    def __iter__(self):
        return iter(self.nodes.values())

    def running(self) -> list[Node]:
        return [n for n in self if n.proc is not None and n.proc.poll() is None]

    def write_job(self, name: str, body: dict) -> None:
        for n in self:
            n.write_job(name, body)

    def start(self) -> "Cluster":
        for n in self:
            n.start(wait=False)
        for n in self:
            n.wait_ready(timeout=40)
        self.leader()
        return self

    def leader(self, timeout: float = 20.0) -> Node:
        def find():
            seen = []
            for n in self.running():
                st = n.call("status", timeout=2)
                if st["role"] == "leader":
                    seen.append(n)
            return seen[0] if len(seen) == 1 else None
        return wait_for(find, timeout, what="one leader", on_fail=self.logs)

    def followers(self) -> list[Node]:
        lead = self.leader()
        return [n for n in self.running() if n is not lead]

    def converged(self, timeout: float = 20.0) -> str:
        """Wait until every running node has applied the same index with the
        same state digest; returns the digest."""
        def same():
            sts = [n.call("status", timeout=2) for n in self.running()]
            keys = {(s["applied_index"], s["state_digest"]) for s in sts}
            return sts[0]["state_digest"] if len(keys) == 1 else None
        return wait_for(same, timeout, what="equal state digests", on_fail=self.logs)

    def logs(self) -> str:
        return "\n".join(f"===== {n.config['node_id']} =====\n{n.daemon_log()[-4000:]}"
                         for n in self)

    def cleanup(self) -> None:
        heal_all()
        for w in self.workers:
            w.cleanup()
        for n in self:
            n.cleanup()

    def worker(self, name: str, tags=(), via: str | None = None, **config: Any) -> "Worker":
        """A worker agent (`cronrd worker`) of this cluster, not started;
        ``tls_dir`` must hold its worker certificate (init-tls --workers).
        ``via``: the address it dials the servers at (with ``worker_bind``)."""
        assert self.tls_dir and self.worker_addrs, "Cluster(tls_dir=..., worker_port=True)"
        servers = sorted(self.worker_addrs.values())
        if via is not None:
            servers = [f"{via}:{a.rsplit(':', 1)[1]}" for a in servers]
        w = Worker(name, servers=servers, tls_dir=self.tls_dir, tags=tags, **config)
        self.workers.append(w)
        return w

    def worker_state(self, name: str) -> dict | None:
        """The leader's view of worker ``name`` (status), or None."""
        for w in self.leader().call("status", timeout=5).get("workers") or ():
            if w["node"] == name:
                return w
        return None

    def wait_worker(self, name: str, timeout: float = 30.0) -> dict:
        """Until the leader has worker ``name`` connected."""
        def up():
            st = self.worker_state(name)
            return st if st and st.get("connected") and st.get("clock_offset_ms") \
                is not None else None
        return wait_for(up, timeout, what=f"worker {name} connected to the leader",
                        on_fail=lambda: self.logs() + "".join(
                            f"\n===== worker {w.name} =====\n{w.daemon_log()}"
                            for w in self.workers))

    # -- membership helpers -------------------------------------------------------
    def replace_with_joiner(self, nid: str) -> Node:
        """A fresh node with this id that joins the running cluster."""
        old = self.nodes[nid]
        old.cleanup()
        others = {k: v for k, v in self.addrs.items() if k != nid}
        node = self._node(nid, others, join=True)
        for f in old.jobs_dir.glob("*.yaml") if old.jobs_dir.exists() else []:
            shutil.copy(f, node.jobs_dir / f.name)
        self.nodes[nid] = node
        return node


def init_tls(d, nodes: str = "a,b,c", workers: str = "") -> str:
    """`cronrd cluster init-tls D --nodes NODES [--workers WORKERS]`, as an
    operator runs it (the CLI, with a bare PATH); returns D, its stdout
    checked for each worker."""
    import sys
    from harness import REPO
    argv = [sys.executable, "-m", "cronrd", "cluster", "init-tls", str(d), "--nodes", nodes,
            "--days", "2"] + (["--workers", workers] if workers else [])
    res = subprocess.run(argv, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    for w in filter(None, workers.split(",")):
        assert f"worker {w}:" in res.stdout, res.stdout
    return str(d)


_RULES: list[list[str]] = []


def iptables_usable() -> bool:
    if shutil.which("iptables") is None:
        return False
    probe = ["-s", "127.0.0.254", "-j", "DROP"]
    ok = subprocess.run(["iptables", "-A", "INPUT", *probe], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["iptables", "-D", "INPUT", *probe], capture_output=True)
    return ok


def cut_off(host: str) -> None:
    """Drop every packet from or to ``host`` (its peer traffic both ways)."""
    for rule in (["-s", host, "-j", "DROP"], ["-d", host, "-j", "DROP"]):
        subprocess.run(["iptables", "-I", "INPUT", *rule], check=True)
        _RULES.append(rule)


def heal_all() -> None:
    while _RULES:
        subprocess.run(["iptables", "-D", "INPUT", *_RULES.pop()], capture_output=True)


def fire_records(runs: list[dict], job: str) -> list[dict]:
    return [r for r in runs if r["job"] == job and r["kind"] in ("scheduled", "catchup")
            and r["attempt"] == 1]


def check_exactly_once(runs: list[dict], job: str, first: int, last: int) -> None:
    """Each fire time in [first, last] has exactly one attempt-1 record."""
    from cronrd.schedule import parse_iso
    fires = Counter(parse_iso(r["fire_time"]) for r in fire_records(runs, job))
    window = {t: fires.get(t, 0) for t in range(first, last + 1)}
    dup = {t: n for t, n in window.items() if n > 1}
    missing = [t for t, n in window.items() if n == 0]
    assert not dup, f"{job}: duplicated fire times {dup}"
    assert not missing, f"{job}: missing fire times {missing}"


def now() -> float:
    return time.time()

"""Three (or more) raft_kv_node.py processes on loopback, and a client.

Shared by tests/integration/test_raft_processes.py and bench/raft_bench.py.
"""

from __future__ import annotations

import shutil
import signal
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NODE_SCRIPT = HERE / "raft_kv_node.py"


def ephemeral_low() -> int:
    """The lowest port the kernel hands out as a connection's source port."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int) -> list[int]:
    """``n`` free loopback ports below the ephemeral range. A port the kernel
    gave out (bind to 0) is an ephemeral one: a peer dialling a node that
    does not listen yet may be given that very port as its connection's
    source, and the node then cannot listen on it ("Address already in
    use", seen in CI)."""
    rng = random.SystemRandom()
    low = ephemeral_low()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(10000, max(10001, low))
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


class KVClient:
    """A line-protocol client; ``request`` sends one and waits for its reply."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")
        self.seq = 0

    def send(self, text: str) -> int:
        self.seq += 1
        self.sock.sendall(f"{self.seq} {text}\n".encode())
        return self.seq

    def recv(self) -> tuple[int, str]:
        line = self.file.readline()
        if not line:
            raise ConnectionError("node closed the connection")
        rid, _, rest = line.decode().strip().partition(" ")
        return int(rid), rest

    def request(self, text: str) -> str:
        rid = self.send(text)
        while True:
            got, rest = self.recv()
            if got == rid:
                return rest

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Cluster:
    def __init__(self, ids=("a", "b", "c"), tls: bool = True, fsync: bool = True,
                 tick: float = 0.05):
        self.ids = list(ids)
        self.base = Path(tempfile.mkdtemp(prefix="crd-raft-", dir="/tmp"))
        ports = free_ports(2 * len(self.ids))
        self.raft_port = dict(zip(self.ids, ports[:len(self.ids)]))
        self.client_port = dict(zip(self.ids, ports[len(self.ids):]))
        self.tls_dir = None
        if tls:
            from cronrd.runtime.peers.tls import init_tls
            self.tls_dir = self.base / "tls"
            init_tls(self.tls_dir, self.ids)
        self.fsync = fsync
        self.tick = tick
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, node: str) -> None:
        peers = ",".join(f"{i}=127.0.0.1:{self.raft_port[i]}" for i in self.ids)
        cmd = [sys.executable, str(NODE_SCRIPT), "--id", node,
               "--listen", f"127.0.0.1:{self.raft_port[node]}",
               "--client", f"127.0.0.1:{self.client_port[node]}",
               "--peers", peers, "--data", str(self.base / node), "--tick", str(self.tick)]
        if self.tls_dir:
            cmd += ["--tls-dir", str(self.tls_dir)]
        if not self.fsync:
            cmd.append("--no-fsync")
        log = open(self.base / f"{node}.log", "ab")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"node {node} did not start: {self.log(node)}")
        self.procs[node] = proc

    def start_all(self) -> None:
        for node in self.ids:
            self.start(node)

    def kill9(self, node: str) -> None:
        proc = self.procs.pop(node)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def status(self, node: str) -> dict | None:
        try:
            c = KVClient(self.client_port[node], timeout=1.0)
            try:
                parts = c.request("status").split()
            finally:
                c.close()
        except OSError:
            return None
        if parts[0] != "ok":
            return None
        return {"role": parts[1], "leader": parts[2], "term": int(parts[3]),
                "commit": int(parts[4]), "applied": int(parts[5])}

    def leader(self, among=None) -> str | None:
        for node in among or list(self.procs):
            st = self.status(node)
            if st and st["role"] == "leader":
                return node
        return None

    def wait_leader(self, timeout: float = 10.0, among=None, poll: float = 0.02) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            node = self.leader(among)
            if node:
                return node
            time.sleep(poll)
        raise AssertionError(f"no leader within {timeout}s\n" +
                             "\n".join(self.log(n)[-1500:] for n in self.ids))

    def log(self, node: str) -> str:
        try:
            return (self.base / f"{node}.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        for node, proc in list(self.procs.items()):
            proc.send_signal(signal.SIGTERM)
        for node, proc in list(self.procs.items()):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(self.base, ignore_errors=True)

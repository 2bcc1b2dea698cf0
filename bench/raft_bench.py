#!/usr/bin/env python3
"""Raft commit throughput and latency: cronrd vs etcd vs PySyncObj.

Three local node processes per system, fsync on, a trivial replicated
key-value state machine. A load generator keeps K proposals in flight (K = 1,
16, 64 by default) for ``--duration`` seconds after a ``--warmup`` and records
the latency of every proposal (send -> commit acknowledged). Printed per
system and K: commits/s, p50, p99. The last line is

    RESULT k1_p50_ms=… k64_commits_s=… etcd_k64_commits_s=… ratio_vs_etcd_k64=…

The client shapes (see bench/README.md for the full discussion):

* cronrd: ``tests/support/raft_kv_node.py`` x 3 (``tests/support/raft_cluster.py``, TLS between
  peers, fsync on). The client is a separate process (this script re-invoked
  with ``--client-mode``): one TCP connection to the leader, K ``put``
  requests in flight on it (the line protocol answers out of order).
* etcd: ``etcd-server`` (Debian), 3 members on loopback, defaults (fsync on,
  plain HTTP between peers). The client is the same separate process with K
  HTTP/1.1 keep-alive connections to the leader's JSON gateway
  (``POST /v3/kv/put``), each with one request outstanding; HTTP/1.1 has no
  out-of-order replies, so K connections is how K requests stay in flight.
* PySyncObj: 3 processes, each a SyncObj with a ``@replicated`` dict and a
  ``journalFile`` (PySyncObj writes it through mmap and never msyncs/fsyncs
  it while running, so this is NOT fsync on; it is as close as it offers).
  PySyncObj has no network client, so the load generator runs inside the
  leader's process (K calls with callbacks in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

VALUE = "v" * 16          # every system writes 16-byte values
NKEYS = 1000              # over 1000 keys: k0 .. k999


# ---------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------
def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


class Recorder:
    """Counts completions inside [t0, t1) and keeps their latencies."""

    def __init__(self, warmup: float, duration: float):
        now = time.monotonic()
        self.t0 = now + warmup
        self.t1 = self.t0 + duration
        self.lat: list[float] = []
        self.errors = 0
        self.error_sample = ""

    def done(self, sent: float, ok: bool = True, why: str = "") -> None:
        now = time.monotonic()
        if self.t0 <= now < self.t1:
            if ok:
                self.lat.append(now - sent)
            else:
                self.errors += 1
                self.error_sample = self.error_sample or why

    def sending(self) -> bool:
        return time.monotonic() < self.t1

    def result(self, k: int) -> dict:
        lat = sorted(self.lat)
        dur = self.t1 - self.t0
        return {"k": k, "commits": len(lat), "commits_s": len(lat) / dur,
                "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
                "errors": self.errors, "error_sample": self.error_sample}


def fdatasync_probe(n: int = 100) -> str:
    """p50/p99 of a 4 KiB overwrite + fdatasync in /tmp (where all clusters live)."""
    fd, name = tempfile.mkstemp(prefix="crd-fsync-", dir="/tmp")
    try:
        os.write(fd, b"\0" * (1 << 20))
        os.fsync(fd)
        ts = []
        for i in range(n):
            os.pwrite(fd, b"x" * 4096, (i * 4096) % (1 << 20))
            t = time.perf_counter()
            os.fdatasync(fd)
            ts.append(time.perf_counter() - t)
        ts.sort()
        return f"fdatasync in /tmp p50 {percentile(ts, 50) * 1e3:.2f} ms p99 {percentile(ts, 99) * 1e3:.2f} ms"
    finally:
        os.close(fd)
        os.unlink(name)


def loadavg() -> str:
    try:
        return "load average " + " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "load average ?"


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------
# client process: cronrd line protocol
# ---------------------------------------------------------------------------
class LineLoad(asyncio.Protocol):
    def __init__(self, rec: Recorder, k: int, finished: asyncio.Future):
        self.rec, self.k, self.finished = rec, k, finished
        self.buf = b""
        self.seq = 0
        self.inflight: dict[int, float] = {}

    def connection_made(self, transport):
        self.tr = transport
        self.tr.write(b"".join(self._req() for _ in range(self.k)))

    def _req(self) -> bytes:
        self.seq += 1
        self.inflight[self.seq] = time.monotonic()
        return f"{self.seq} put k{self.seq % NKEYS} {VALUE}\n".encode()

    def data_received(self, data):
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for line in lines:
            rid, _, rest = line.partition(b" ")
            sent = self.inflight.pop(int(rid))
            ok = rest.startswith(b"ok")
            self.rec.done(sent, ok, rest.decode(errors="replace"))
            if self.rec.sending():
                out.append(self._req())
        if out:
            self.tr.write(b"".join(out))
        if not self.inflight and not self.finished.done():
            self.finished.set_result(None)

    def connection_lost(self, exc):
        if not self.finished.done():
            self.finished.set_exception(ConnectionError(f"node closed the connection: {exc}"))


async def run_cronrd_client(port: int, k: int, warmup: float, duration: float) -> dict:
    loop = asyncio.get_running_loop()
    rec = Recorder(warmup, duration)
    fin = loop.create_future()
    tr, _ = await loop.create_connection(lambda: LineLoad(rec, k, fin), "127.0.0.1", port)
    tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.wait_for(fin, warmup + duration + 30)
    tr.close()
    return rec.result(k)


# ---------------------------------------------------------------------------
# client process: etcd v3 JSON gateway, K keep-alive HTTP/1.1 connections
# ---------------------------------------------------------------------------
def etcd_put_body(i: int) -> bytes:
    key = base64.b64encode(f"k{i % NKEYS}".encode()).decode()
    val = base64.b64encode(VALUE.encode()).decode()
    return json.dumps({"key": key, "value": val}).encode()


class HTTPLoad(asyncio.Protocol):
    """One connection, one request outstanding at a time (HTTP/1.1 keep-alive)."""

    def __init__(self, rec: Recorder, port: int, counter: list, finished: asyncio.Future):
        self.rec, self.counter, self.finished = rec, counter, finished
        self.host = f"127.0.0.1:{port}"
        self.buf = b""
        self.sent = 0.0

    def connection_made(self, transport):
        self.tr = transport
        self._send()

    def _send(self):
        self.counter[0] += 1
        body = etcd_put_body(self.counter[0])
        self.sent = time.monotonic()
        self.tr.write(b"POST /v3/kv/put HTTP/1.1\r\nHost: " + self.host.encode() +
                      b"\r\nContent-Type: application/json\r\nContent-Length: " +
                      str(len(body)).encode() + b"\r\n\r\n" + body)

    def data_received(self, data):
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, val = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(val)
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4:head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length:]
            ok = head.startswith("HTTP/1.1 200") and b'"header"' in body
            self.rec.done(self.sent, ok, head.split("\r\n")[0] + " " + body[:200].decode())
            if self.rec.sending():
                self._send()
            else:
                self.tr.close()
                if not self.finished.done():
                    self.finished.set_result(None)

    def connection_lost(self, exc):
        if not self.finished.done():
            self.finished.set_exception(ConnectionError(f"etcd closed the connection: {exc}"))


async def run_etcd_client(port: int, k: int, warmup: float, duration: float) -> dict:
    loop = asyncio.get_running_loop()
    rec = Recorder(warmup, duration)
    counter = [0]
    futs = []
    for _ in range(k):
        fin = loop.create_future()
        futs.append(fin)
        tr, _ = await loop.create_connection(lambda f=fin: HTTPLoad(rec, port, counter, f),
                                             "127.0.0.1", port)
        tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.wait_for(asyncio.gather(*futs), warmup + duration + 30)
    return rec.result(k)


def client_main(args) -> None:
    """--client-mode: run every K against one endpoint, print one JSON line per K."""
    fn = {"cronrd": run_cronrd_client, "etcd": run_etcd_client}[args.client_mode]
    for k in args.ks:
        c0, w0 = cpu_seconds(), time.monotonic()
        res = asyncio.run(fn(args.port, k, args.warmup, args.duration))
        res["client_cpu"] = (cpu_seconds() - c0) / (time.monotonic() - w0)
        print(json.dumps(res), flush=True)


def spawn_client(mode: str, port: int, ks: list[int], warmup: float, duration: float):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--client-mode", mode,
           "--port", str(port), "--ks", ",".join(map(str, ks)),
           "--warmup", str(warmup), "--duration", str(duration)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def collect_client(proc: subprocess.Popen, timeout: float) -> list[dict]:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"client exited with {proc.returncode}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


# ---------------------------------------------------------------------------
# process CPU sampling (to see who saturates the machine)
# ---------------------------------------------------------------------------
def proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


# ---------------------------------------------------------------------------
# cronrd
# ---------------------------------------------------------------------------
def bench_cronrd(args) -> dict:
    from raft_cluster import Cluster
    cl = Cluster(tls=True, fsync=True)
    try:
        cl.start_all()
        leader = cl.wait_leader(timeout=20)
        # a few writes so the leader has committed an entry of its term
        for _ in range(50):
            try:
                from raft_cluster import KVClient
                c = KVClient(cl.client_port[leader])
                r = c.request("put warm up")
                c.close()
                if r.startswith("ok"):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        pids = {n: p.pid for n, p in cl.procs.items()}
        cpu0 = {n: proc_cpu(p) for n, p in pids.items()}
        t0 = time.monotonic()
        client = spawn_client("cronrd", cl.client_port[leader], args.ks, args.warmup,
                              args.duration)
        prof = None
        if args.profile:
            prof = start_profile(pids[leader], args, len(args.ks))
        rows = collect_client(client, timeout=len(args.ks) * (args.duration + args.warmup + 60))
        wall = time.monotonic() - t0
        cpu = {n: (proc_cpu(p) - cpu0[n]) / wall for n, p in pids.items()}
        after = cl.leader()
        note = f"leader {leader} (pid {pids[leader]}); node CPU " + ", ".join(
            f"{n}{'*' if n == leader else ''}={c * 100:.0f}%" for n, c in cpu.items())
        if after != leader:
            note += f"; WARNING leader changed to {after} during the run"
        if prof:
            finish_profile(prof)
        return {"rows": rows, "note": note}
    finally:
        cl.stop()
        if args.keep:
            print(f"# cronrd cluster dir kept: {cl.base}")
        else:
            cl.cleanup()


# ---------------------------------------------------------------------------
# optional py-spy profile of the cronrd leader
# ---------------------------------------------------------------------------
def start_profile(pid: int, args, nks: int):
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):
        print("# --profile: py-spy not found (pip install py-spy); not profiling")
        return None
    out = Path(tempfile.mkdtemp(prefix="crd-prof-", dir="/tmp")) / "leader.txt"
    dur = int(nks * (args.duration + args.warmup) + 1)
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250", "--threads", "--idle",
                             "--duration", str(dur), "--nonblocking", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, out


def finish_profile(prof) -> None:
    proc, out = prof
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(10)
    if not out.exists():
        print("# --profile: py-spy wrote nothing:", proc.stderr.read().decode()[-500:])
        return
    summarize_profile(out)


def summarize_profile(path: Path, top: int = 15) -> None:
    """Per thread: share of wall-clock samples, self time by source line, and
    inclusive time of cronrd functions (py-spy --threads --idle raw stacks)."""
    per_thread: dict[str, dict] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        n = int(n)
        frames = stack.split(";")
        label = []
        while frames and ".py:" not in frames[0]:
            label.append(frames.pop(0))
        thread = " ".join(label) or "?"
        t = per_thread.setdefault(thread, {"n": 0, "self": {}, "incl": {}, "root": ""})
        t["n"] += n
        total += n
        names = []
        for fr in frames:
            fn, _, loc = fr.partition(" (")
            loc = loc.rstrip(")")
            if "cronrd/" in loc:
                loc = "cronrd/" + loc.split("cronrd/", 1)[1]
            else:
                loc = os.path.basename(loc)
            names.append((fn, loc))
        if not names:
            continue
        t["root"] = t["root"] or names[min(len(names) - 1, 3)][0]
        leaf = f"{names[-1][0]} ({names[-1][1]})"
        t["self"][leaf] = t["self"].get(leaf, 0) + n
        for fn, loc in set(names):
            if loc.startswith("cronrd/") or "raft_kv_node" in loc:
                key = f"{fn} ({loc.split(':')[0]})"
                t["incl"][key] = t["incl"].get(key, 0) + n
    print(f"\n# py-spy profile of the cronrd leader: {total} samples at 250 Hz over all "
          f"threads, idle included (raw stacks: {path})")
    for thread, t in sorted(per_thread.items(), key=lambda x: -x[1]["n"]):
        if t["n"] * 50 < total:
            continue
        print(f"# thread {thread} (root {t['root']}): {t['n']} samples")
        print("#   self time by line (% of this thread's samples):")
        for name, n in sorted(t["self"].items(), key=lambda x: -x[1])[:top]:
            print(f"#     {n * 100 / t['n']:5.1f}%  {name}")
        print("#   inclusive time, cronrd functions:")
        for name, n in sorted(t["incl"].items(), key=lambda x: -x[1])[:top]:
            print(f"#     {n * 100 / t['n']:5.1f}%  {name}")


# ---------------------------------------------------------------------------
# etcd
# ---------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    from raft_cluster import free_ports as fp
    return fp(n)


def ensure_etcd() -> tuple[str | None, str]:
    etcd = shutil.which("etcd")
    if etcd:
        return etcd, ""
    if os.geteuid() != 0:
        return None, "etcd is not installed and we are not root (apt-get install etcd-server)"
    if not shutil.which("apt-get"):
        return None, "etcd is not installed and there is no apt-get"
    print("# installing etcd-server with apt-get ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "etcd-server"], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True)
        r = subprocess.run(["apt-get", "install", "-y", "etcd-server"], env=env,
                           capture_output=True, text=True)
    etcd = shutil.which("etcd")
    if not etcd:
        return None, "apt-get install etcd-server failed: " + (r.stderr or r.stdout)[-300:]
    return etcd, ""


def http_json(url: str, body: dict | None = None, timeout: float = 2.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def bench_etcd(args) -> dict:
    etcd, why = ensure_etcd()
    if not etcd:
        return {"skipped": why}
    base = Path(tempfile.mkdtemp(prefix="crd-etcd-", dir="/tmp"))
    names = ["e1", "e2", "e3"]
    ports = free_ports(6)
    client = dict(zip(names, ports[:3]))
    peer = dict(zip(names, ports[3:]))
    initial = ",".join(f"{n}=http://127.0.0.1:{peer[n]}" for n in names)
    procs: dict[str, subprocess.Popen] = {}
    try:
        for n in names:
            cmd = [etcd, "--name", n, "--data-dir", str(base / n),
                   "--listen-client-urls", f"http://127.0.0.1:{client[n]}",
                   "--advertise-client-urls", f"http://127.0.0.1:{client[n]}",
                   "--listen-peer-urls", f"http://127.0.0.1:{peer[n]}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer[n]}",
                   "--initial-cluster", initial, "--initial-cluster-state", "new",
                   "--initial-cluster-token", f"bench-{os.getpid()}",
                   "--logger", "zap", "--log-level", "warn"]
            log = open(base / f"{n}.log", "ab")
            procs[n] = subprocess.Popen(cmd, stdout=log, stderr=log,
                                        env=dict(os.environ, ETCD_UNSUPPORTED_ARCH=""))
            log.close()
        deadline = time.monotonic() + 30
        leader_name = None
        while time.monotonic() < deadline and leader_name is None:
            for n in names:
                if procs[n].poll() is not None:
                    return {"skipped": f"etcd member {n} exited: " +
                            (base / f"{n}.log").read_text()[-400:]}
            try:
                ids = {}
                for n in names:
                    st = http_json(f"http://127.0.0.1:{client[n]}/v3/maintenance/status", {})
                    ids[st["header"]["member_id"]] = n
                    lead = st.get("leader")
                health = http_json(f"http://127.0.0.1:{client[names[0]]}/health")
                if str(health.get("health")) == "true" and lead in ids:
                    leader_name = ids[lead]
            except (OSError, ValueError, KeyError):
                pass
            if leader_name is None:
                time.sleep(0.2)
        if leader_name is None:
            return {"skipped": "etcd cluster not healthy within 30 s: " +
                    (base / "e1.log").read_text()[-400:]}
        pids = {n: p.pid for n, p in procs.items()}
        cpu0 = {n: proc_cpu(p) for n, p in pids.items()}
        t0 = time.monotonic()
        cl = spawn_client("etcd", client[leader_name], args.ks, args.warmup, args.duration)
        rows = collect_client(cl, timeout=len(args.ks) * (args.duration + args.warmup + 60))
        wall = time.monotonic() - t0
        cpu = {n: (proc_cpu(p) - cpu0[n]) / wall for n, p in pids.items()}
        ver = subprocess.run([etcd, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        note = (f"{ver}; leader {leader_name}; node CPU " + ", ".join(
            f"{n}{'*' if n == leader_name else ''}={c * 100:.0f}%" for n, c in cpu.items()))
        return {"rows": rows, "note": note}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if args.keep:
            print(f"# etcd dir kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------
# PySyncObj
# ---------------------------------------------------------------------------
PSO_NODE = textwrap.dedent(r'''
    import json, sys, threading, time
    from pysyncobj import SyncObj, SyncObjConf, replicated
    sys.path.insert(0, sys.argv[4])
    from raft_bench import Recorder, NKEYS, VALUE

    class KV(SyncObj):
        def __init__(self, me, others, conf):
            super().__init__(me, others, conf)
            self.data = {}

        @replicated
        def put(self, key, value):
            self.data[key] = value
            return True

    me, others, datadir = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    conf = SyncObjConf(journalFile=f"{datadir}/journal", fullDumpFile=f"{datadir}/dump")
    obj = KV(me, others, conf)

    def bench(k, warmup, duration):
        rec = Recorder(warmup, duration)
        done = threading.Event()
        state = {"seq": 0, "inflight": 0}
        lock = threading.Lock()

        def issue():
            with lock:
                state["seq"] += 1
                state["inflight"] += 1
                seq = state["seq"]
            sent = time.monotonic()
            obj.put(f"k{seq % NKEYS}", VALUE,
                    callback=lambda res, err, sent=sent: finished(sent, res, err))

        def finished(sent, res, err):
            rec.done(sent, err == 0, f"FAIL_REASON {err}")
            with lock:
                state["inflight"] -= 1
            if rec.sending():
                issue()
            elif state["inflight"] == 0:
                done.set()

        for _ in range(k):
            issue()
        done.wait(warmup + duration + 60)
        return rec.result(k)

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "status":
            st = obj.getStatus()
            leader = st.get("leader")
            print(json.dumps({"leader": str(leader) if leader else None,
                              "self": str(st.get("self")), "state": st.get("state")}),
                  flush=True)
        elif cmd[0] == "bench":
            k, warmup, duration = int(cmd[1]), float(cmd[2]), float(cmd[3])
            print(json.dumps(bench(k, warmup, duration)), flush=True)
        elif cmd[0] == "quit":
            break
    obj.destroy()
''')


def ensure_pysyncobj() -> str:
    try:
        import pysyncobj  # noqa: F401
        return ""
    except ImportError:
        pass
    print("# installing pysyncobj with pip ...", flush=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pysyncobj"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "pip install pysyncobj failed: " + (r.stderr or r.stdout)[-300:]
    return ""


def bench_pysyncobj(args) -> dict:
    why = ensure_pysyncobj()
    if why:
        return {"skipped": why}
    base = Path(tempfile.mkdtemp(prefix="crd-pso-", dir="/tmp"))
    script = base / "pso_node.py"
    script.write_text(PSO_NODE)
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs = []
    try:
        for i, a in enumerate(addrs):
            d = base / f"n{i}"
            d.mkdir()
            others = ",".join(x for x in addrs if x != a)
            log = open(base / f"n{i}.log", "ab")
            procs.append(subprocess.Popen([sys.executable, str(script), a, others, str(d), str(HERE)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=log, text=True))
            log.close()
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                return {"skipped": "a PySyncObj node did not start: " +
                        (base / "n0.log").read_text()[-400:]}

        def ask(p, cmd):
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())

        deadline = time.monotonic() + 30
        leader = None
        while leader is None and time.monotonic() < deadline:
            for p in procs:
                st = ask(p, "status")
                if st["leader"] and st["leader"] == st["self"]:
                    leader = p
            if leader is None:
                time.sleep(0.2)
        if leader is None:
            return {"skipped": "PySyncObj elected no leader within 30 s"}
        pids = [p.pid for p in procs]
        cpu0 = [proc_cpu(p) for p in pids]
        t0 = time.monotonic()
        rows = [ask(leader, f"bench {k} {args.warmup} {args.duration}") for k in args.ks]
        wall = time.monotonic() - t0
        cpu = [(proc_cpu(p) - c) / wall for p, c in zip(pids, cpu0)]
        import pysyncobj.version
        note = (f"pysyncobj {pysyncobj.version.VERSION}; load generator inside the leader; "
                "journalFile without fsync; node CPU " + ", ".join(
                    f"n{i}{'*' if procs[i] is leader else ''}={c * 100:.0f}%"
                    for i, c in enumerate(cpu)))
        return {"rows": rows, "note": note}
    finally:
        for p in procs:
            try:
                p.stdin.write("quit\n")
                p.stdin.flush()
            except OSError:
                pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if args.keep:
            print(f"# pysyncobj dir kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
def fmt_row(system: str, r: dict) -> str:
    err = f"{r['errors']}" + (f" ({r['error_sample'][:60]})" if r["errors"] else "")
    cpu = f"{r['client_cpu'] * 100:.0f}%" if "client_cpu" in r else "-"
    return (f"{system:<10} {r['k']:>4} {r['commits_s']:>11.0f} {r['p50_ms']:>9.2f} "
            f"{r['p99_ms']:>9.2f} {r['commits']:>9} {cpu:>7}  {err}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 s per K instead of 10 s")
    ap.add_argument("--duration", type=float, help="seconds measured per K (default 10, --quick 3)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring (1)")
    ap.add_argument("--ks", default="1,16,64", help="proposals in flight, comma separated")
    ap.add_argument("--systems", default="cronrd,etcd,pysyncobj",
                    help="which to run, comma separated (default all three)")
    ap.add_argument("--profile", action="store_true",
                    help="record the cronrd leader with py-spy during its run and summarize")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    ap.add_argument("--client-mode", choices=["cronrd", "etcd"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.ks = [int(k) for k in args.ks.split(",")]
    if args.duration is None:
        args.duration = 3.0 if args.quick else 10.0
    if args.client_mode:
        client_main(args)
        return 0

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    print(f"# raft_bench: K={args.ks}, {args.duration:g} s per K after {args.warmup:g} s warm-up, "
          f"{os.cpu_count()} CPUs, 3 nodes on loopback, fsync on (PySyncObj: see note)", flush=True)
    print(f"# before: {loadavg()}; {fdatasync_probe()}", flush=True)
    results: dict[str, dict] = {}
    runners = {"cronrd": bench_cronrd, "etcd": bench_etcd, "pysyncobj": bench_pysyncobj}
    for s in systems:
        print(f"# running {s} ...", flush=True)
        try:
            results[s] = runners[s](args)
        except Exception as exc:  # report and carry on with the others
            results[s] = {"skipped": f"{type(exc).__name__}: {exc}"}
        if "skipped" in results[s]:
            print(f"# {s} skipped: {results[s]['skipped']}", flush=True)

    print()
    print(f"{'system':<10} {'K':>4} {'commits/s':>11} {'p50 ms':>9} {'p99 ms':>9} "
          f"{'commits':>9} {'clntCPU':>7}  errors")
    for s in systems:
        res = results[s]
        if "skipped" in res:
            print(f"{s:<10} skipped: {res['skipped'][:200]}")
            continue
        for r in res["rows"]:
            print(fmt_row(s, r))
    print()
    print(f"# after: {loadavg()}; {fdatasync_probe()}")
    for s in systems:
        if "note" in results.get(s, {}):
            print(f"# {s}: {results[s]['note']}")

    def row(system, k):
        for r in results.get(system, {}).get("rows", []):
            if r["k"] == k:
                return r
        return None

    c1, c64, e64 = row("cronrd", 1), row("cronrd", 64), row("etcd", 64)
    k1_p50 = f"{c1['p50_ms']:.2f}" if c1 else "skipped"
    k64 = f"{c64['commits_s']:.0f}" if c64 else "skipped"
    e64s = f"{e64['commits_s']:.0f}" if e64 else "skipped"
    ratio = (f"{c64['commits_s'] / e64['commits_s']:.2f}"
             if c64 and e64 and e64["commits_s"] > 0 else "skipped")
    if c1 and c64:
        ok1 = c1["p50_ms"] <= 2.0
        ok64 = e64 is not None and c64["commits_s"] >= e64["commits_s"]
        print(f"# targets: K=1 p50 <= 2 ms: {'met' if ok1 else 'MISSED'}; "
              f"K=64 commits/s >= etcd: {'met' if ok64 else ('MISSED' if e64 else 'n/a')}")
    print(f"RESULT k1_p50_ms={k1_p50} k64_commits_s={k64} etcd_k64_commits_s={e64s} "
          f"ratio_vs_etcd_k64={ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Network namespaces for the fault-injection suite.

One namespace per node and one for the switch: the bridge lives in its own
namespace too, so nothing is added to the host's namespace (no interface, no
firewall rule, no route) and the host's br_netfilter settings do not apply.
Every name starts with ``cfx<pid>-``: parallel runs do not collide, and a
later run removes what a dead one left (``sweep_leftovers``). Deleting the
namespaces removes the veths, the bridge and every rule in them.

    node ns  cfx<pid>-a   eth0 10.77.0.1/24 ──┐
    node ns  cfx<pid>-b   eth0 10.77.0.2/24 ──┼── br0 in cfx<pid>-sw
    node ns  cfx<pid>-c   eth0 10.77.0.3/24 ──┘
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

PREFIX = "cfx"
SUBNET = "10.77.0"
MAX_NODES = 9
_NAME = re.compile(rf"^{PREFIX}(\d+)-")


def sh(*argv: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    return res


def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_all_in(ns: str) -> None:
    """SIGKILL every process in ``ns`` (a daemon, its supervisors, its jobs):
    all started by this suite. A stopped process is continued so it dies now."""
    pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()
            if p.isdigit()]
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def sweep_leftovers() -> list[str]:
    """Remove the namespaces of suite runs whose process is gone."""
    removed = []
    for ns in namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m[1])):
            kill_all_in(ns)
            sh("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    return removed


def missing_tools() -> list[str]:
    """What this machine lacks for the suite (empty: it can run)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root (namespaces, iptables and tc need root)")
    for tool in ("ip", "iptables", "tc"):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not installed (apt-get install "
                            f"{'iptables' if tool == 'iptables' else 'iproute2'})")
    if problems:
        return problems
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        res = sh("ip", "netns", "add", probe, check=False)
        if res.returncode != 0:
            return [f"ip netns add failed: {res.stderr.strip()}"]
        res = sh("ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-s", "10.77.0.254",
                 "-j", "DROP", check=False)
        if res.returncode != 0:
            problems.append(f"iptables in a namespace failed: {res.stderr.strip()}")
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return problems


class Lab:
    """The switch and ``n`` node namespaces; ``close()`` removes all of it
    (also after a partial setup)."""

    def __init__(self, node_ids: list[str]):
        if not 1 <= len(node_ids) <= MAX_NODES:
            raise ValueError(f"1..{MAX_NODES} nodes")
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.ns = {nid: f"{self.tag}-{nid}" for nid in node_ids}
        self.ip = {nid: f"{SUBNET}.{i + 1}" for i, nid in enumerate(node_ids)}
        self._made: list[str] = []

    def __enter__(self) -> "Lab":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        sweep_leftovers()
        for ns in [self.switch, *self.ns.values()]:
            if ns in namespaces():     # this pid's own, from an earlier Lab
                kill_all_in(ns)
                sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        sw = ("ip", "-n", self.switch)
        sh(*sw, "link", "add", "br0", "type", "bridge")
        sh(*sw, "link", "set", "br0", "up")
        for nid, ns in self.ns.items():
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            port = f"p-{nid}"
            sh(*sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh(*sw, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip[nid]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        for ns in reversed(self._made):
            kill_all_in(ns)
            sh("ip", "netns", "del", ns, check=False)
        self._made.clear()

    def run(self, nid: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A command inside node ``nid``'s namespace."""
        return sh("ip", "netns", "exec", self.ns[nid], *argv, check=check)

    def wrap(self, nid: str) -> list[str]:
        """The words that start a process in node ``nid``'s namespace (``ip
        netns exec`` execs the command itself: the pid is the daemon's)."""
        return ["ip", "netns", "exec", self.ns[nid]]

    # -- faults ---------------------------------------------------------------------
    def drop(self, nid: str, peer: str, direction: str = "both",
             probability: float | None = None) -> None:
        """Drop packets between ``nid`` and ``peer``, in ``nid``'s firewall:
        'in' (from the peer), 'out' (to the peer) or 'both'; with a
        probability, a random share of them (loss)."""
        stat = [] if probability is None else [
            "-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}"]
        if direction in ("in", "both"):
            self.run(nid, "iptables", "-I", "INPUT", "-s", self.ip[peer], *stat, "-j", "DROP")
        if direction in ("out", "both"):
            self.run(nid, "iptables", "-I", "OUTPUT", "-d", self.ip[peer], *stat, "-j", "DROP")

    def tc(self, nid: str, *qdisc: str) -> None:
        """Replace the root qdisc of ``nid``'s eth0 (netem, tbf, ...)."""
        self.run(nid, "tc", "qdisc", "replace", "dev", "eth0", "root", *qdisc)

    def heal(self, nid: str) -> None:
        """No firewall rule and the default qdisc on ``nid``'s eth0."""
        self.run(nid, "iptables", "-F", "INPUT", check=False)
        self.run(nid, "iptables", "-F", "OUTPUT", check=False)
        self.run(nid, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)

    def heal_all(self) -> None:
        for nid in self.ns:
            self.heal(nid)

    def qdisc_works(self, *qdisc: str) -> str | None:
        """None if this qdisc can be set up here, else why not (the kernel may
        lack sch_netem: ``modprobe sch_netem``)."""
        nid = next(iter(self.ns))
        res = self.run(nid, "tc", "qdisc", "replace", "dev", "eth0", "root", *qdisc, check=False)
        self.run(nid, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        return None if res.returncode == 0 else (res.stderr.strip() or f"exit {res.returncode}")

"""The cluster under test: cluster_harness.Cluster with each daemon in its
own network namespace, plus the per-node knobs the faults turn.

- Clock: a node that gets a clock fault runs under libfaketime with a
  timestamp file (``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``,
  monotonic clock untouched); writing an offset into the file moves its wall
  clock at once, without a restart. Jobs do not inherit it: the daemon
  builds a job's environment from scratch (cronrd/runtime/runs/launch.py),
  and the job command also runs ``date`` through ``env -u LD_PRELOAD``.
- Slow fsync: preload.c, preloaded, waits the milliseconds written in a
  control file before each fsync/fdatasync (needs gcc). Preloaded before
  libfaketime, it also works around libfaketime's EINVAL from an absolute
  CLOCK_MONOTONIC clock_nanosleep (Python's time.sleep).
- Disk full: the node's data_dir is a small tmpfs; a filler file takes all
  of its free space.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import yaml

from cluster_harness import Cluster

from .net import Lab

PEER_PORT = 7000
HERE = Path(__file__).resolve().parent
DATA_TMPFS_SIZE = "256m"
RESTART_SEC = 5.0    # systemd/cronrd.service: Restart=on-failure, RestartSec=5s


def faketime_lib() -> str | None:
    if shutil.which("faketime") is None:
        return None
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
                   + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


def build_preload(into: Path) -> tuple[str | None, str | None]:
    """(path of the suite's preload library, None) or (None, why it cannot be built)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None, "no C compiler (apt-get install gcc)"
    out = into / "preload.so"
    res = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out),
                          str(HERE / "preload.c"), "-ldl"], capture_output=True, text=True)
    if res.returncode != 0:
        return None, f"gcc failed: {res.stderr.strip()[:200]}"
    return str(out), None


class FaultCluster(Cluster):
    """Nodes named by ``lab``'s ids, listening on their namespace addresses.

    ``clock_nodes`` run under faketime, ``fsync_nodes`` with the slow-fsync
    library, ``disk_nodes`` with a tmpfs data_dir (decided before the start:
    the seed's schedule says which nodes get which faults)."""

    def __init__(self, lab: Lab, work: Path, *, node_timeout: str, election_timeout: str,
                 clock_nodes=(), fsync_nodes=(), disk_nodes=(), preload: str | None = None,
                 log_level: str = "info"):
        super().__init__(ids=tuple(lab.ns), node_timeout=node_timeout,
                         election_timeout=election_timeout,
                         addrs={nid: f"{ip}:{PEER_PORT}" for nid, ip in lab.ip.items()})
        self.lab = lab
        self.work = work
        self.env: dict[str, dict[str, str]] = {nid: {} for nid in self.nodes}
        self.clock_file: dict[str, Path] = {}
        self.fsync_file: dict[str, Path] = {}
        self.mounts: list[Path] = []
        self.fill_file: dict[str, Path] = {}
        ft = faketime_lib()
        for nid, node in self.nodes.items():
            node.wrap = lab.wrap(nid)
            node.config["log_level"] = log_level
            node.config_path.write_text(yaml.safe_dump(node.config))
            libs = []
            if nid in fsync_nodes and preload:
                self.fsync_file[nid] = work / f"fsync-{nid}"
                self.fsync_file[nid].write_text("0\n")
                self.env[nid]["CRONRD_FAULT_FSYNC_FILE"] = str(self.fsync_file[nid])
            if nid in clock_nodes and ft:
                self.clock_file[nid] = work / f"clock-{nid}"
                self.set_clock(nid, 0.0)
                libs.append(ft)
                self.env[nid].update({"FAKETIME_TIMESTAMP_FILE": str(self.clock_file[nid]),
                                      "FAKETIME_NO_CACHE": "1",
                                      "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
            if preload and (libs or nid in self.fsync_file):
                libs.insert(0, preload)
            if libs:
                self.env[nid]["LD_PRELOAD"] = ":".join(libs)
            if nid in disk_nodes:
                data = Path(node.config["data_dir"])
                data.mkdir(mode=0o700)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DATA_TMPFS_SIZE},mode=0700",
                                f"cfx-{nid}", str(data)], check=True)
                self.mounts.append(data)
                self.fill_file[nid] = data / "fault-filler"
        # A daemon that exits on its own (it does on a storage error, for
        # systemd to restart it) is started again RESTART_SEC later, as
        # systemd would; one killed on purpose is not.
        self._lock = threading.RLock()
        self._down: set[str] = set()            # killed by a fault, on purpose
        self._restart_at: dict[str, float] = {}
        self.exits: list[tuple[str, float, int | None]] = []   # (node, when, exit code)
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="restarter", daemon=True)

    # -- processes --------------------------------------------------------------------
    def start_node(self, nid: str) -> None:
        with self._lock:
            self._down.discard(nid)
            self._restart_at.pop(nid, None)
            self.nodes[nid].start(env=self.env[nid], wait=False)

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                now = time.time()
                for nid, node in self.nodes.items():
                    if nid in self._down or node.proc is None or node.proc.poll() is None:
                        continue
                    if nid not in self._restart_at:
                        self.exits.append((nid, now, node.proc.returncode))
                        self._restart_at[nid] = now + RESTART_SEC
                    elif now >= self._restart_at[nid]:
                        self.start_node(nid)

    def stop_restarting(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join(5)

    def take_exits(self) -> list[tuple[str, float, int | None]]:
        with self._lock:
            out, self.exits = self.exits, []
            return out

    def start(self) -> "FaultCluster":
        for nid in self.nodes:
            self.start_node(nid)
        self._watcher.start()
        for n in self:
            n.wait_ready(timeout=60)
        self.leader(timeout=30)
        return self

    def alive(self, nid: str) -> bool:
        proc = self.nodes[nid].proc
        return proc is not None and proc.poll() is None

    def signal(self, nid: str, sig: int) -> None:
        if self.alive(nid):
            self.nodes[nid].proc.send_signal(sig)

    def kill9(self, nid: str) -> None:
        with self._lock:
            self._down.add(nid)
            if self.alive(nid):
                self.signal(nid, signal.SIGCONT)   # a stopped process dies as well
                self.nodes[nid].kill9()

    def role(self, nid: str) -> str | None:
        try:
            return self.nodes[nid].call("status", timeout=1)["role"]
        except Exception:
            return None

    # -- clocks, fsync, disk ---------------------------------------------------------------
    def set_clock(self, nid: str, offset: float) -> None:
        """Move ``nid``'s wall clock to true time + ``offset`` s (faketime nodes)."""
        path = self.clock_file[nid]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.3f}\n")
        os.replace(tmp, path)

    def set_fsync_delay(self, nid: str, ms: int) -> None:
        path = self.fsync_file[nid]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{int(ms)}\n")
        os.replace(tmp, path)

    def fill_disk(self, nid: str) -> int:
        """Take every free byte of ``nid``'s data_dir; returns how many."""
        path = self.fill_file[nid]
        st = os.statvfs(path.parent)
        with open(path, "ab") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, max(st.f_bavail * st.f_frsize, 1))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
            chunk = b"\0" * 65536
            while True:   # what fallocate left (tmpfs rounds to pages)
                try:
                    f.write(chunk)
                    f.flush()
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        return path.stat().st_size

    def free_disk(self, nid: str) -> None:
        self.fill_file[nid].unlink(missing_ok=True)

    # -- the end ----------------------------------------------------------------------------
    def heal_processes(self) -> list[str]:
        """SIGCONT every daemon, start the ones that are not running; returns
        the ids started (their daemon had been killed or had exited)."""
        started = []
        with self._lock:
            for nid in self.nodes:
                if self.alive(nid):
                    self.signal(nid, signal.SIGCONT)
                else:
                    self.start_node(nid)
                    started.append(nid)
        return started

    def wait_all_ready(self, timeout: float = 60.0) -> None:
        for n in self:
            n.wait_ready(timeout=timeout)

    def cleanup(self) -> None:
        """Stop everything; a tmpfs data_dir survives Node.cleanup's rmtree as
        an empty mount point: unmount it, then remove the rest."""
        self.stop_restarting()
        for nid in self.nodes:
            self.signal(nid, signal.SIGCONT)
        for n in self:
            n.cleanup()
        for data in self.mounts:
            subprocess.run(["umount", "-l", str(data)], capture_output=True)
        self.mounts.clear()
        for n in self:
            shutil.rmtree(n.base, ignore_errors=True)

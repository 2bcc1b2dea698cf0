"""Real daemons in temporary directories, driven through the real CLI/socket.

Nothing here sleeps for correctness: every wait polls a condition against a
deadline and fails with the daemon's log when the deadline passes.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from cronrd.client import Client
from cronrd.runtime.runs import records
from cronrd.errors import CronrdError

REPO = Path(__file__).resolve().parents[2]


def wait_for(pred: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05,
             what: str = "condition", on_fail: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except (CronrdError, OSError) as exc:
            last_exc = exc
        time.sleep(interval)
    extra = on_fail() if on_fail else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} "
                         f"(last error: {last_exc})\n{extra}")



def cli_ok(res: subprocess.CompletedProcess) -> str:
    """A CLI call's standard output, once it exited 0 (else its output says why)."""
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def at_cluster_version(node: "Node", version: int = 2, timeout: float = 30.0) -> None:
    """Wait until the node's cluster runs by ``version``'s rules (a new
    cluster raises its version soon after it starts)."""
    wait_for(lambda: node.call("status")["versions"]["cluster_version"] >= version, timeout,
             what=f"cluster version {version}")

class Node:
    """One cronrd daemon in its own short temporary directory."""

    command = "daemon"   # (cluster_harness.Worker: "worker")

    def __init__(self, node_id: str = "n1", **config: Any):
        # Short base path: Unix socket addresses are limited to 107 bytes.
        self.base = Path(tempfile.mkdtemp(prefix="crd-", dir="/tmp"))
        self.jobs_dir = self.base / "jobs"
        self.jobs_dir.mkdir(mode=0o755)
        self.out = self.base / "out"
        self.out.mkdir()
        self.config_path = self.base / "cronrd.yaml"
        cfg = {"node_id": node_id, "data_dir": str(self.base / "state"),
               "jobs_dir": str(self.jobs_dir), "socket": str(self.base / "sock"),
               "log_dir": str(self.base / "logs"), "timezone": "UTC",
               "log_level": "debug",
               # A free port each (many daemons on one host): status["http"] tells it.
               "http": {"listen": "127.0.0.1:0"}}
        cfg.update(config)
        self.config = cfg
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.proc: subprocess.Popen | None = None
        self.log_file = self.base / "daemon.log"
        self.starts = 0
        # Words put before the daemon's command line, e.g. ``ip netns exec NS``
        # (tests/support/faults runs each node in its own network namespace).
        self.wrap: list[str] = []

    # -- files -------------------------------------------------------------------
    def write_job(self, name: str, body: dict | str, mode: int = 0o644) -> Path:
        path = self.jobs_dir / f"{name}.yaml"
        text = body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        return path

    # -- process -------------------------------------------------------------------
    def start(self, env: dict | None = None, wait: bool = True,
              nofile: int | None = None) -> "Node":
        """``nofile``: the daemon's soft and hard RLIMIT_NOFILE (e.g. systemd's 1024)."""
        self.starts += 1
        logf = open(self.log_file, "ab")
        logf.write(f"--- start {self.starts} ---\n".encode())
        logf.flush()
        full_env = dict(os.environ)
        full_env.pop("NOTIFY_SOCKET", None)
        # The daemon must run the source under test, whatever is installed.
        full_env["PYTHONPATH"] = str(REPO)
        # Any use of the state's connection off the critical loop's thread
        # is logged (storage.guard_thread), and cleanup() fails the test.
        full_env["CRONRD_CHECK_THREADS"] = "1"
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [*self.wrap, sys.executable, "-m", "cronrd", "--config", str(self.config_path),
             self.command],
            stdout=logf, stderr=subprocess.STDOUT, env=full_env, cwd=str(self.base),
            preexec_fn=None if nofile is None else
            (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))))
        logf.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}\n"
                                     + self.daemon_log())
            return self.call("status")["ready"]
        wait_for(ready, timeout, what="daemon ready", on_fail=self.daemon_log)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Where is it stuck? The daemon dumps every thread's stack on
            # SIGUSR1 (faulthandler) into its log.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            raise AssertionError(f"daemon did not stop within {timeout:g}s of SIGTERM; its "
                                 f"log ends:\n{self.daemon_log()[-20000:]}") from None

    def daemon_log(self) -> str:
        try:
            return self.log_file.read_text()[-6000:]
        except OSError:
            return ""

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.kill_detached_runs()
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            text = ""
        shutil.rmtree(self.base, ignore_errors=True)
        strays = [ln for ln in text.splitlines() if "event=conn_off_thread" in ln]
        if strays:
            raise AssertionError("the daemon used its state connection off the critical "
                                 "loop's thread (apsw stops it when both meet):\n"
                                 + "\n".join(strays[:5]))

    def supervised(self) -> list:
        """The run records of this node's supervisors (cronrd/runtime/runs/)."""
        found = records.scan(str(Path(self.config["data_dir"]) / "runs"))
        return [rec for recs in found.values() for rec in recs]

    def kill_detached_runs(self) -> None:
        """Runs go on after their daemon stops (they are adopted by the next
        one): a test that ends must not leave them behind."""
        for rec in self.supervised():
            if rec.job_alive():
                try:
                    os.killpg(rec.pid, signal.SIGKILL)
                except OSError:
                    pass
            if rec.supervisor_alive():
                try:
                    os.kill(rec.sup, signal.SIGKILL)
                except OSError:
                    pass

    # -- talking to it -----------------------------------------------------------------
    @property
    def socket(self) -> str:
        return self.config["socket"]

    def call(self, cmd: str, args: dict | None = None, timeout: float = 10.0) -> Any:
        return Client(self.socket, timeout=timeout).call(cmd, args)

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cronrd", "--config", str(self.config_path), *args],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(REPO)})

    def runs(self, job: str | None = None, state: str | None = None,
             limit: int = 10000) -> list[dict]:
        return self.call("runs", {"job": job, "state": state, "limit": limit})["runs"]

    def wait_runs(self, pred: Callable[[list[dict]], bool], job: str | None = None,
                  timeout: float = 20.0, what: str = "runs") -> list[dict]:
        box = {}

        def check():
            box["runs"] = self.runs(job)
            return pred(box["runs"])
        wait_for(check, timeout, what=what,
                 on_fail=lambda: json.dumps(box.get("runs", [])[:20], indent=1)
                 + "\n" + self.daemon_log())
        return box["runs"]

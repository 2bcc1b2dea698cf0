"""Smoke tests of the self-contained binary (packaging/build-binary).

Skipped unless CRONRD_BINARY names the executable to test, e.g.

    packaging/build-binary && CRONRD_BINARY=dist/cronrd .venv/bin/python -m pytest \
        tests/integration/test_binary_smoke.py

Everything here runs the binary, never the source: the daemon, and every CLI
command. The test process only talks to the daemon's socket (through
tests/support/harness.py) to wait for conditions. PYTHONPATH and PYTHONHOME are removed
from the binary's environment, so it cannot borrow modules from this checkout.
Each test gets an empty unpacking cache (CRONRD_CACHE_DIR), so the binary's
first-run unpacking is exercised again and again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from cronrd import __version__
from cronrd.schedule import parse_iso
from harness import Node, wait_for

REPO = Path(__file__).resolve().parents[2]
_binary = os.environ.get("CRONRD_BINARY")
BINARY = str((REPO / _binary).resolve()) if _binary else ""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not _binary, reason="set CRONRD_BINARY=dist/cronrd (built by "
                       "packaging/build-binary) to test the binary"),
]


def binary_env(cache: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "NOTIFY_SOCKET", "CRONRD_CONFIG")}
    env["CRONRD_CACHE_DIR"] = str(cache)
    env.update(extra)
    return env


def run_bin(*args: str, cache: Path, timeout: float = 60, **env: str):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout,
                          env=binary_env(cache, **env))


class BinaryNode(Node):
    """harness.Node, but the daemon and the CLI are the binary."""

    def __init__(self, **config):
        super().__init__(**config)
        self.cache = self.base / "cache"

    def start(self, env: dict | None = None, wait: bool = True) -> "BinaryNode":
        self.starts += 1
        with open(self.log_file, "ab") as logf:
            logf.write(f"--- start {self.starts} (binary) ---\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(
                [BINARY, "--config", str(self.config_path), "daemon"],
                stdout=logf, stderr=subprocess.STDOUT, cwd=str(self.base),
                env=binary_env(self.cache, **(env or {})))
        if wait:
            self.wait_ready()
        return self

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return run_bin("--config", str(self.config_path), *args, cache=self.cache,
                       timeout=timeout)


@pytest.fixture
def bnode():
    n = BinaryNode(node_id="b1")
    yield n
    n.cleanup()


def test_binary_is_one_self_contained_executable(tmp_path):
    path = Path(BINARY)
    assert path.is_file() and os.access(path, os.X_OK), f"{BINARY} is not an executable file"
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    res = run_bin("--version", cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    # built from a git checkout (CI clones one): the commit is named too
    assert re.fullmatch(rf"cronrd, version {re.escape(__version__)} \(commit [0-9a-f]{{12}}\)",
                        res.stdout.strip()), res.stdout
    assert res.stderr == ""


def test_first_runs_in_parallel_all_succeed(tmp_path):
    # Many CLIs started at once against an empty cache (e.g. a config-management
    # run right after an upgrade) must each get a complete unpacked copy.
    cache = tmp_path / "cache"

    def one(_):
        return run_bin("--version", cache=cache)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for res in results:
        assert res.returncode == 0 and "version" in res.stdout, res.stderr
    assert run_bin("--version", cache=cache).returncode == 0


def test_validate_the_examples_and_report_problems(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for src in sorted((REPO / "examples" / "jobs").glob("*.yaml")):
        dst = jobs / src.name
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)
    res = run_bin("validate", str(jobs), cache=tmp_path / "cache")
    count = len(list(jobs.glob("*.yaml")))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{count} job(s) valid" in res.stderr
    bad = jobs / "bad.yaml"
    bad.write_text('schedule: "61 * * * *"\ncommand: "true"\nretires: 3\n')
    os.chmod(bad, 0o644)
    res = run_bin("validate", str(bad), cache=tmp_path / "cache")
    assert res.returncode == 1
    assert f"{bad}:1:" in res.stdout and f"{bad}:3:1" in res.stdout, res.stdout
    assert "did you mean 'retries'" in res.stdout


def test_offline_commands_with_bundled_time_zones(tmp_path):
    # PYTHONTZPATH pointing nowhere hides the host's /usr/share/zoneinfo: the
    # zones must come from the tzdata bundled into the binary.
    res = run_bin("next", "30 2 * * *", "--timezone", "Europe/Berlin", "--after",
                  "2026-03-28T12:00:00Z", "-n", "2", cache=tmp_path / "cache",
                  PYTHONTZPATH="/nonexistent")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # The DST rule: 02:30 does not exist on 2026-03-29 in Berlin; it runs at 03:00.
    assert lines[0].startswith("2026-03-29T01:00:00Z"), res.stdout
    assert lines[1].startswith("2026-03-30T00:30:00Z"), res.stdout
    crontab = tmp_path / "crontab"
    crontab.write_text("SHELL=/bin/sh\n*/5 * * * * root echo hi\n")
    res = run_bin("import-crontab", "--system", str(crontab), cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    assert "*/5 * * * *" in res.stdout and "1 job(s) converted" in res.stderr


def test_cli_without_daemon_says_so(tmp_path):
    res = run_bin("--socket", str(tmp_path / "none.sock"), "status",
                  cache=tmp_path / "cache")
    assert res.returncode == 1
    assert str(tmp_path / "none.sock") in res.stderr
    res = run_bin("no-such-command", cache=tmp_path / "cache")
    assert res.returncode == 2


def test_daemon_schedules_runs_now_logs_and_stops(bnode):
    stamp = bnode.out / "stamps"
    bnode.write_job("tick", {"schedule": "* * * * * *",
                             "command": f"echo $CRONRD_RUN_KEY >> {stamp}"})
    bnode.write_job("answer", {"schedule": "@yearly",
                               "command": "echo out-$CRONRD_JOB; echo err >&2; exit 3"})
    bnode.start()
    daemon = psutil.Process(bnode.proc.pid)

    # status, from the binary CLI, names this daemon.
    res = bnode.cli("status", "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert st["node_id"] == "b1" and st["version"] == __version__
    assert st["jobs"] == 2 and st["ready"] is True
    # the bundled aiohttp and prometheus_client serve the HTTP side
    import urllib.request
    with urllib.request.urlopen(st["http"] + "/metrics", timeout=10) as r:
        assert r.status == 200 and b'cronrd_job_runs_total{job_name="answer"' in r.read()
    # and the web UI's templates and static files came along (jinja2 renders them)
    with urllib.request.urlopen(st["http"] + "/login", timeout=10) as r:
        assert r.status == 200 and b'name="token"' in r.read()
    with urllib.request.urlopen(st["http"] + "/ui/static/ui.css", timeout=10) as r:
        assert r.status == 200

    # A scheduled job fires, once per second, one record per fire time.
    runs = bnode.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3,
                           job="tick", what="3 succeeded ticks")
    done = [r for r in runs if r["state"] == "succeeded"]
    fires = [parse_iso(r["fire_time"]) for r in done]
    assert len(fires) == len(set(fires))
    assert {r["run_key"] for r in done} <= set(stamp.read_text().split())

    # run-now --wait exits with the job's exit code; logs shows its output.
    res = bnode.cli("run-now", "answer", "--wait")
    assert res.returncode == 3, res.stdout + res.stderr
    res = bnode.cli("logs", "answer")
    assert res.returncode == 0, res.stderr
    assert "out-answer" in res.stdout and "err" in res.stdout
    res = bnode.cli("runs", "answer", "--json")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)[0]
    assert (run["kind"], run["state"], run["exit_code"]) == ("manual", "failed", 3)

    # jobs, pause, resume go through the socket too.
    res = bnode.cli("jobs")
    assert res.returncode == 0 and "tick" in res.stdout and "answer" in res.stdout
    assert bnode.cli("pause", "tick").stdout.strip() == "tick paused"
    assert bnode.cli("resume", "tick").stdout.strip() == "tick resumed"

    # Jobs are plain children of the daemon, via /bin/sh -- never the binary
    # re-executing itself.
    assert all(c.exe() != os.path.realpath(BINARY)
               for c in daemon.children(recursive=True) if c.is_running())
    # The supervisors' zygote is the small C program the binary ships, not a
    # copy of the frozen interpreter (setup.py says why).
    zygotes = [c for c in daemon.children(recursive=True)
               if c.is_running() and c.name() == "cronrd-zygote"]
    assert zygotes and os.path.basename(zygotes[0].exe()) == "cronrd-zygote", zygotes

    # SIGTERM: a clean exit.
    assert bnode.terminate() == 0, bnode.daemon_log()


def test_daemon_is_the_started_process_and_notifies_systemd(bnode, tmp_path):
    # The launcher exec()s in place: the PID systemd starts is the daemon, so
    # Type=notify with NotifyAccess=main, the watchdog and `kill -HUP
    # $MAINPID` work. READY=1 must come from that very PID.
    addr = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(addr)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.settimeout(30)
    envfile = bnode.out / "env"
    bnode.write_job("env", {"schedule": "@yearly", "command": f"env > {envfile}"})
    try:
        bnode.start(env={"NOTIFY_SOCKET": addr}, wait=False)
        ready_from = None
        deadline = time.monotonic() + 30
        while ready_from is None and time.monotonic() < deadline:
            data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(12))
            for level, kind, cred in anc:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS) \
                        and b"READY=1" in data.split(b"\n"):
                    ready_from = struct.unpack("iII", cred[:12])[0]
    finally:
        sock.close()
    assert ready_from == bnode.proc.pid, f"READY=1 from {ready_from}, started {bnode.proc.pid}"
    bnode.wait_ready()
    assert bnode.call("status")["pid"] == bnode.proc.pid

    # SIGHUP (ExecReload) reaches the daemon and re-reads the job files.
    bnode.write_job("late", {"schedule": "@yearly", "command": "true"})
    bnode.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: bnode.call("status")["jobs"] == 2, 10, what="reload on SIGHUP",
             on_fail=bnode.daemon_log)
    assert bnode.proc.poll() is None

    # Jobs get cron's clean environment: nothing of the frozen runtime
    # (LD_LIBRARY_PATH, _MEIPASS2, ...) leaks into them.
    res = bnode.cli("run-now", "env", "--wait")
    assert res.returncode == 0, res.stderr
    names = {line.split("=", 1)[0] for line in envfile.read_text().splitlines() if "=" in line}
    leaked = {n for n in names if n.startswith(("LD_", "_MEI", "_PYI", "PYINSTALLER",
                                                "PYTHON", "NOTIFY_SOCKET"))}
    assert not leaked, leaked


def test_daemon_enforces_timeouts_on_process_trees(bnode):
    # psutil inside the binary: a timed-out run's grandchildren are killed too.
    pids = bnode.out / "pids"
    bnode.write_job("stuck", {"schedule": "@yearly", "timeout": "1s", "kill_grace": "1s",
                              "command": f"sleep 300 & echo $! >> {pids}; wait"})
    bnode.start()
    bnode.call("run_now", {"job": "stuck"})
    runs = bnode.wait_runs(lambda rs: rs and rs[0]["state"] == "timed_out", job="stuck",
                           what="timed_out run")
    assert "timed out after 1s" in runs[0]["reason"]
    victim = int(pids.read_text().split()[0])

    def gone():
        try:
            return psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    wait_for(gone, 10, what="grandchild killed")


def test_restart_keeps_the_state(bnode):
    # apsw's SQLite in the binary: the state survives a restart (and a kill -9).
    bnode.write_job("once", {"schedule": "@yearly", "command": "echo hi"})
    bnode.start()
    res = bnode.cli("run-now", "once", "--wait")
    assert res.returncode == 0, res.stderr
    bnode.kill9()
    start = time.monotonic()
    bnode.start()
    assert time.monotonic() - start < 20
    runs = bnode.runs("once")
    assert [(r["kind"], r["state"]) for r in runs] == [("manual", "succeeded")]


def test_a_big_load_is_parsed_by_the_binarys_worker_processes(bnode):
    # More than 256 KiB of job files: the watcher starts `cronrd __parse-jobs`
    # workers (the binary has no `python -m`).
    for f in range(4):
        (bnode.jobs_dir / f"fleet{f}.yaml").write_text("jobs:\n" + "".join(
            f"  - name: f{f}j{i:04d}\n    schedule: '{i % 60} {i % 24} * * *'\n"
            f"    command: 'echo {i}'\n" for i in range(1000)))
    bnode.start()
    res = bnode.cli("status", "--json")
    assert json.loads(res.stdout)["jobs"] == 4000
    text = bnode.log_file.read_text()
    assert "event=job_parsers_started count=" in text
    assert "job_parser_failed" not in text and "job_parsers_unavailable" not in text
    res = bnode.cli("jobs", "--json", "f3j00*")
    assert [j["name"] for j in json.loads(res.stdout)] == [f"f3j{i:04d}" for i in range(100)]


# -- the launcher's unpacking cache ------------------------------------------------
def test_cache_must_be_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    res = run_bin("--version", cache=shared)
    assert res.returncode == 1
    assert "CRONRD_CACHE_DIR" in res.stderr and "only this user can write" in res.stderr
    assert not any(shared.iterdir())


def test_damaged_cache_is_unpacked_again(tmp_path):
    cache = tmp_path / "cache"
    assert run_bin("--version", cache=cache).returncode == 0
    [bundle] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    (bundle / ".complete").unlink()
    shutil.rmtree(bundle / "_internal")
    res = run_bin("--version", cache=cache)
    assert res.returncode == 0, res.stderr
    assert (bundle / ".complete").exists() and (bundle / "_internal").is_dir()
    assert [p.name for p in cache.iterdir()] == [bundle.name]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as nobody")
def test_unprivileged_user_without_a_home():
    # nobody's home is /nonexistent: the launcher falls back to $TMPDIR/cronrd-UID.
    import pwd
    import tempfile
    nobody = pwd.getpwnam("nobody")
    base = Path(tempfile.mkdtemp(prefix="crb-nobody-", dir="/tmp"))  # pytest's tmp is 0700
    try:
        os.chmod(base, 0o755)
        binary = base / "cronrd"
        shutil.copyfile(BINARY, binary)
        os.chmod(binary, 0o755)
        tmp = base / "tmp"
        tmp.mkdir()
        os.chown(tmp, nobody.pw_uid, nobody.pw_gid)
        env = {"PATH": "/usr/bin:/bin", "HOME": nobody.pw_dir, "TMPDIR": str(tmp)}
        res = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             env=env, user=nobody.pw_uid, group=nobody.pw_gid,
                             extra_groups=[], timeout=60, cwd="/")
        assert res.returncode == 0, res.stderr
        cache = tmp / f"cronrd-{nobody.pw_uid}"
        assert cache.is_dir() and cache.stat().st_uid == nobody.pw_uid
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_binary_makes_certificates_and_runs_a_tls_cluster_node(tmp_path):
    # The cluster path (TLS transport, Raft, peer requests) from the binary:
    # init-tls writes the certificates, and a one-member cluster elects
    # itself over mutual TLS and runs a job.
    tls = tmp_path / "tls"
    res = run_bin("cluster", "init-tls", str(tls), "--nodes", "b1,b2", cache=tmp_path / "c")
    assert res.returncode == 0, res.stdout + res.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = BinaryNode(node_id="b1", cluster={
        "listen": f"127.0.0.1:{port}", "initial_members": {"b1": f"127.0.0.1:{port}"},
        "tls": {"ca": str(tls / "ca.crt"), "cert": str(tls / "b1.crt"),
                "key": str(tls / "b1.key")}})
    try:
        n.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
        n.start()
        st = json.loads(n.cli("status", "--json").stdout)
        assert st["role"] == "leader" and st["leader"] == "b1" and st["term"] >= 1
        members = n.cli("cluster", "members", "--json")
        assert members.returncode == 0, members.stderr
        assert [m["id"] for m in json.loads(members.stdout)["members"]] == ["b1"]
        n.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="tick",
                    what="a run in the TLS cluster")
        assert n.terminate() == 0
    finally:
        n.cleanup()

"""Attacks on the control socket by the users who can reach it.

A member of ``socket_group`` is a real unprivileged process here: the test
(root) starts a Python process that loads cronrd, switches to ``nobody`` with
a temporary group as its socket group, and then runs the CLI or opens
connections. The daemon runs as root, as it does in production.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import select
import socket
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from harness import REPO, wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates a group "
                                 "and switches a client to nobody")]

NOBODY = pwd.getpwnam("nobody") if os.geteuid() == 0 else None

# Runs as root until the switch: the interpreter and cronrd are loaded first
# (nobody cannot read the virtualenv), then the process becomes nobody with
# the socket group as its only supplementary group.
AS_NOBODY = """
import os, sys, json, socket, time
import cronrd.cli, cronrd.client, cronrd.config, cronrd.errors, cronrd.runtime.peers.tls
import importlib, cronrd.cli.base as B  # every command's module, before the uid changes
for m in {w[0] for w in B.COMMANDS.values()}: importlib.import_module('cronrd.cli.' + m)
uid, gid, group = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
os.setgroups([group]); os.setgid(gid); os.setuid(uid)
mode, rest = sys.argv[4], sys.argv[5:]
if mode == "cli":
    sys.argv = ["cronrd"] + rest
    cronrd.cli.main()
elif mode == "idle":  # hold N idle connections open until stdin closes
    path, n = rest[0], int(rest[1])
    held = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)  # blocking: waits while the listen backlog is full
        held.append(s)
    print(len(held), flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def socket_group():
    name = "crdt" + uuid.uuid4().hex[:8]
    subprocess.run(["groupadd", name], check=True, capture_output=True)
    try:
        yield grp.getgrnam(name)
    finally:
        subprocess.run(["groupdel", name], capture_output=True)


@pytest.fixture
def shared(node_factory, socket_group):
    """A daemon whose socket nobody reaches through socket_group."""
    node = node_factory(socket_group=socket_group.gr_name)
    os.chmod(node.base, 0o711)  # mkdtemp makes it 0700: nobody could not reach the socket
    node.gid = socket_group.gr_gid
    return node


def as_nobody(node, mode: str, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", AS_NOBODY, str(NOBODY.pw_uid), str(NOBODY.pw_gid),
         str(node.gid), mode, *args], text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd="/", **popen)


class Result:
    def __init__(self, proc: subprocess.Popen, timeout: float):
        self.pid = proc.pid
        self.stdout, self.stderr = proc.communicate(timeout=timeout)
        self.returncode = proc.returncode


def cli_as_nobody(node, *args: str, timeout: float = 30.0) -> Result:
    return Result(as_nobody(node, "cli", "--socket", node.socket, *args), timeout)


def audit(node) -> list[dict]:
    res = node.cli("audit", "--json", "--limit", "1000")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_socket_group_member_reads_everything_but_acts_only_on_its_own_jobs(shared):
    node = shared
    node.write_job("backup", {"schedule": "@yearly", "command": "echo root-secret"})
    node.write_job("mine", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                            "command": "echo nobody-output"})
    node.start()
    root_run = node.call("run_now", {"job": "backup"})["run_id"]
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "succeeded", job="backup")

    # Read-only views work for a socket group member.
    for args in (("status",), ("jobs",), ("runs",), ("runs", "backup"), ("audit",),
                 ("notifications",), ("cluster", "members")):
        res = cli_as_nobody(node, *args)
        if args[0] == "cluster":  # a one-node daemon: answered, not refused
            assert "permission denied" not in res.stderr, res.stderr
            continue
        assert res.returncode == 0, (args, res.stderr)

    # Root's job: refused with who is needed and who asked; exit code 1.
    who = f"you are uid {NOBODY.pw_uid} (nobody)"
    refused = {}
    for cmd, args in (("pause", ("pause", "backup")), ("resume", ("resume", "backup")),
                      ("run_now", ("run-now", "backup")),
                      ("logs", ("logs", "backup")),
                      ("cancel", ("cancel", str(root_run))),
                      ("reload", ("reload",)),
                      ("cluster_add", ("cluster", "add", "evil", "127.0.0.1:9")),
                      ("cluster_remove", ("cluster", "remove", "n1")),
                      ("cluster_transfer_leader", ("cluster", "transfer-leader")),
                      ("notify_test", ("notify", "test", "chat"))):
        res = cli_as_nobody(node, *args)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert "permission denied" in res.stderr and who in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
        refused[cmd] = res.pid
    res = cli_as_nobody(node, "pause", "backup")
    assert res.stderr.strip() == ("cronrd: permission denied: `cronrd pause backup` needs "
                                  f"root; {who}")
    res = cli_as_nobody(node, "cluster", "add", "evil", "127.0.0.1:9")
    assert "`cronrd cluster add evil` needs root" in res.stderr
    assert "root-secret" not in cli_as_nobody(node, "logs", "backup", "--run",
                                              str(root_run)).stdout
    assert node.call("job", {"name": "backup"})["paused"] is False

    # Its own job (user: nobody): pause, resume, run-now --wait, logs.
    allowed = {}
    for cmd, args in (("pause", ("pause", "mine")), ("resume", ("resume", "mine")),
                      ("run_now", ("run-now", "mine", "--wait"))):
        res = cli_as_nobody(node, *args)
        assert res.returncode == 0, (args, res.stderr)
        allowed[cmd] = res.pid
    res = cli_as_nobody(node, "logs", "mine")
    assert res.returncode == 0 and "nobody-output" in res.stdout, res.stderr

    # Root may do everything to every job.
    assert node.cli("pause", "mine").returncode == 0
    assert node.cli("resume", "mine").returncode == 0

    # Every change, and every refusal, is in the replicated audit table with
    # the caller's uid and pid and the node it came in on.
    def recorded():
        recs = audit(node)
        mine = {(r["command"], r["pid"], r["allowed"]) for r in recs
                if r["uid"] == NOBODY.pw_uid}
        want = {(c, p, False) for c, p in refused.items() if c != "logs"} | \
               {(c, p, True) for c, p in allowed.items()}
        return want <= mine and recs
    recs = wait_for(recorded, 10, what="audit records of nobody's requests",
                    on_fail=lambda: json.dumps(audit(node), indent=1))
    for r in recs:
        assert r["node"] == "n1" and r["at"].endswith("Z")
        if r["uid"] == NOBODY.pw_uid:
            assert r["user"] == "nobody"
            assert r["allowed"] or "permission denied" in r["detail"]
    pause_backup = [r for r in recs if r["pid"] == refused["pause"]]
    assert [(r["command"], r["target"]) for r in pause_backup] == [("pause", "backup")]
    root_pauses = [r for r in recs if r["uid"] == 0 and r["command"] == "pause"]
    assert root_pauses and root_pauses[0]["target"] == "mine" and root_pauses[0]["allowed"]
    # Reads are not audited; the table shows as a table too.
    assert not any(r["command"] in ("status", "jobs", "runs") for r in recs)
    table = node.cli("audit", "--limit", "3")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == [
        "ID", "TIME", "NODE"]
    assert len(table.stdout.splitlines()) == 4


def test_idle_connections_beyond_the_file_limit_do_not_stop_the_daemon(shared):
    """1,100 idle connections under a 1,024 file limit: status answers at once,
    runs still start, and the daemon's log stays short."""
    node = shared
    node.write_job("work", {"schedule": "@yearly", "command": "echo worked"})
    node.start(nofile=1024)
    attacker = as_nobody(node, "idle", node.socket, "1100", stdin=subprocess.PIPE)
    try:
        line = attacker.stdout.readline()
        assert line.strip() == "1100", attacker.stderr.read()
        t0 = time.monotonic()
        res = node.cli("status", "--json", timeout=10)
        latency = time.monotonic() - t0
        assert res.returncode == 0, res.stderr
        assert latency < 3.0
        # The same member's next client gets a clear refusal, not a hang.
        res = cli_as_nobody(node, "status")
        assert res.returncode == 1 and "too many connections" in res.stderr, res.stderr
        assert node.cli("run-now", "work", "--wait", timeout=20).returncode == 0
        assert psutil.Process(node.proc.pid).num_fds() < 200
    finally:
        attacker.stdin.close()
        attacker.wait(10)
    log = node.log_file.read_text()
    assert log.count("Traceback") == 0, log[-3000:]
    assert log.count("control_connections_refused") <= 3
    assert "Too many open files" not in log
    # Once the attacker is gone, the member is served again.
    wait_for(lambda: cli_as_nobody(node, "status").returncode == 0, 10,
             what="status as nobody after the idle connections closed")


def _flood(path: str, conns: int, size: int, stop: threading.Event, sent: list) -> None:
    """``conns`` connections each sending ``size`` bytes without a newline."""
    socks = []
    for _ in range(conns):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)  # blocking: waits while the listen backlog is full
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        socks.append(s)
    left = {s: size for s in socks}
    chunk = b"x" * 65536
    while left and not stop.is_set():
        _, writable, _ = select.select([], list(left), [], 0.2)
        for s in writable:
            try:
                n = s.send(chunk[:left[s]])
            except OSError:  # refused or answered and closed: done with it
                del left[s]
                continue
            sent[0] += n
            left[s] -= n
            if not left[s]:
                del left[s]
    stop.wait()
    for s in socks:
        s.close()


def test_megabyte_requests_without_newline_do_not_grow_the_daemon(node):
    """400 connections x 1 MB without a newline: today 41 MB -> 450 MB."""
    node.start()
    daemon = psutil.Process(node.proc.pid)
    base = daemon.memory_info().rss
    stop, sent = threading.Event(), [0]
    flood = threading.Thread(target=_flood, args=(node.socket, 400, 1 << 20, stop, sent))
    flood.start()
    peak = base
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            peak = max(peak, daemon.memory_info().rss)
            time.sleep(0.02)
        t0 = time.monotonic()
        assert node.call("status", timeout=5)["node_id"] == "n1"
        assert time.monotonic() - t0 < 3.0
    finally:
        stop.set()
        flood.join(30)
    grown = (peak - base) / 2**20
    assert grown < 40, f"RSS grew by {grown:.0f} MiB ({sent[0] / 2**20:.0f} MiB sent)"
    # An oversized request is answered, with the limit in the message.
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(node.socket)
        try:
            s.sendall(b"x" * (1 << 20))
        except OSError:
            pass
        reply = json.loads(s.makefile("rb").readline())
    from cronrd.runtime.control.server import MAX_REQUEST
    assert MAX_REQUEST == 128 * 1024  # a 64 KiB checkpoint, base64, fits
    assert reply["ok"] is False and f"larger than {MAX_REQUEST} bytes" in reply["error"]
    assert node.log_file.read_text().count("Traceback") == 0


def test_a_change_made_on_a_follower_is_audited_on_every_node(cluster):
    c = cluster()
    c.write_job("tick", {"schedule": "@yearly", "command": "true"})
    c.start()
    follower = c.followers()[0]
    fid = follower.config["node_id"]
    assert follower.cli("pause", "tick").returncode == 0
    for n in c:
        recs = wait_for(lambda: [r for r in audit(n) if r["command"] == "pause"], 10,
                        what=f"the pause in node {n.config['node_id']}'s audit table")
        assert [(r["node"], r["uid"], r["target"], r["allowed"]) for r in recs] == [
            (fid, 0, "tick", True)]


def test_cancel_stops_a_running_run_and_records_who_asked(node):
    node.write_job("long", {"schedule": "@yearly", "command": "sleep 60"})
    node.start()
    run_id = node.call("run_now", {"job": "long"})["run_id"]
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "running", job="long")
    res = node.cli("cancel", str(run_id))
    assert res.returncode == 0, res.stderr
    runs = node.wait_runs(lambda rs: rs[0]["state"] == "cancelled", job="long",
                          what="the run cancelled")
    assert "cancelled by uid 0 (root)" in runs[0]["reason"]
    again = node.cli("cancel", str(run_id))
    assert again.returncode == 1 and "already cancelled" in again.stderr
    assert node.cli("cancel", "99999").returncode == 1
    # (a refusal's record is replicated on the side: waited for)
    recs = wait_for(lambda: (lambda rs: rs if len(rs) >= 2 else None)(
        [r for r in audit(node) if r["command"] == "cancel"]), what="cancel's records")
    assert {(r["target"], r["uid"], r["allowed"]) for r in recs} == {
        (str(run_id), 0, True), (str(run_id), 0, False)}
    # the second cancel was allowed, then refused: both are recorded
    (refused,) = [r for r in recs if not r["allowed"]]
    assert "refused after it was allowed" in refused["detail"]
    assert "already cancelled" in refused["detail"]


def test_new_commands_refuse_a_socket_group_member_and_bad_arguments(shared):
    """pause --all, cancel --job, backfill and rerun act only for those
    allowed; malformed arguments of the new requests are refused and the
    daemon keeps answering."""
    node = shared
    node.write_job("backup", {"schedule": "* * * * *", "command": "true"})
    node.start()
    who = f"you are uid {NOBODY.pw_uid} (nobody)"
    for args in (("pause", "--all", "--note", "mine now"), ("resume", "--all"),
                 ("cancel", "--job", "backup"),
                 ("backfill", "backup", "--from", "10m"),
                 ("rerun", "backup", "--at", "2026-01-01T00:00:00Z")):
        res = cli_as_nobody(node, *args)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert "permission denied" in res.stderr and who in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr
    assert node.call("status")["maintenance"] is None
    assert node.call("backfills")["backfills"] == []

    from cronrd.errors import UsageError
    for cmd, args in (("pause", {"all": True, "note": "x" * 5000}),
                      ("pause", {"job": "backup", "note": ["not", "text"]}),
                      ("cancel", {"job": 7}),
                      ("runs", {"state": [1, 2]}), ("runs", {"since": True}),
                      ("runs", {"kind": "cron"}), ("job", {"name": "backup", "next": 10**6}),
                      ("run_now", {"job": "backup", "params": "not a mapping"}),
                      ("explain", {"job": "backup", "at": "not a time"})):
        with pytest.raises(UsageError):
            node.call(cmd, args)
    assert node.call("status")["node_id"] == "n1"
    assert node.call("job", {"name": "backup"})["paused"] is False

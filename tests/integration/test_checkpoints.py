"""Integration: checkpoints and heartbeats from inside a job, through a real
daemon and the real CLI. A job saves a checkpoint and fails; its retry
starts with it in CRONRD_CHECKPOINT. A token that is not the attempt's, or
the token of an attempt a newer one replaced, is refused without harm. A
job with heartbeat_timeout that stops heartbeating is ended timed_out and
its process is killed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cronrd.schedule import parse_iso
from harness import REPO, wait_for

pytestmark = pytest.mark.integration

CLI = f"{sys.executable} -m cronrd"
ENV = {"PYTHONPATH": str(REPO)}
RETRY = {"max": 1, "delay": "1s"}


def inside(node, run_id: int, token: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI as a job would call it, with a run's id and token."""
    env = {**os.environ, **ENV, "CRONRD_RUN_ID": str(run_id), "CRONRD_RUN_TOKEN": token,
           "CRONRD_SOCKET": node.socket}
    return subprocess.run([sys.executable, "-m", "cronrd", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def read(path: Path) -> str:
    wait_for(path.exists, what=str(path))
    return path.read_text()


def test_a_retry_starts_from_the_checkpoint_its_failed_attempt_saved(node):
    out = node.out
    node.write_job("ck", {
        "schedule": "@yearly", "env": ENV, "retries": RETRY,
        "command": f"env | grep ^CRONRD_CHECKPOINT > {out}/$CRONRD_RUN_ID.env; "
                   f'{CLI} checkpoint save "rows=${{CRONRD_ATTEMPT}}00" && '
                   f"{CLI} checkpoint get > {out}/$CRONRD_RUN_ID.get && "
                   '[ "$CRONRD_ATTEMPT" = 2 ]'})
    node.start()
    assert node.cli("run-now", "ck").returncode == 0
    runs = node.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "succeeded"
                                         for r in rs), job="ck", what="the retry succeeded")
    first = next(r for r in runs if r["attempt"] == 1)
    second = next(r for r in runs if r["attempt"] == 2)
    assert first["state"] == "failed"
    assert read(out / f"{first['run_id']}.env") == ""
    assert read(out / f"{first['run_id']}.get") == "rows=100"
    env = dict(line.split("=", 1) for line in
               read(out / f"{second['run_id']}.env").splitlines())
    assert env == {"CRONRD_CHECKPOINT": "rows=100", "CRONRD_CHECKPOINT_ATTEMPT": "1"}
    assert read(out / f"{second['run_id']}.get") == "rows=200"
    # a save counts as a sign of life: the run shows when it was last heard of
    assert second["heartbeat_at"] is not None


def test_a_wrong_or_stale_token_is_refused_and_the_daemon_goes_on(node):
    out = node.out
    # attempt 1 keeps its id and token and fails; attempt 2 saves and stays running
    node.write_job("stale", {
        "schedule": "@yearly", "env": ENV, "retries": RETRY, "kill_grace": "1s",
        "command": f"echo $CRONRD_RUN_ID $CRONRD_RUN_TOKEN > {out}/$CRONRD_ATTEMPT.tok; "
                   f'[ "$CRONRD_ATTEMPT" = 2 ] || exit 3; '
                   f"{CLI} checkpoint save newer && touch {out}/saved && exec sleep 60"})
    node.start()
    assert node.cli("run-now", "stale").returncode == 0
    read(out / "saved")
    old_id, old_token = read(out / "1.tok").split()
    new_id, new_token = read(out / "2.tok").split()
    assert old_token != new_token
    # the replaced attempt, with its own valid token
    res = inside(node, int(old_id), old_token, "checkpoint", "save", "older")
    assert res.returncode == 1
    assert "refused" in res.stderr and "attempt 2 has replaced it" in res.stderr
    res = inside(node, int(old_id), old_token, "heartbeat", "--progress", "0.9")
    assert res.returncode == 1 and "replaced" in res.stderr
    # a token that is not the run's
    res = inside(node, int(new_id), "f" * 64, "checkpoint", "save", "forged")
    assert res.returncode == 1 and "token does not belong to run" in res.stderr
    res = inside(node, int(new_id), old_token, "checkpoint", "get")
    assert res.returncode == 1 and "token does not belong" in res.stderr
    # no such run
    res = inside(node, 99999, new_token, "checkpoint", "get")
    assert res.returncode == 1 and "no run with id 99999" in res.stderr
    # the newest attempt reads its checkpoint, untouched by the others
    res = inside(node, int(new_id), new_token, "checkpoint", "get")
    assert (res.returncode, res.stdout) == (0, "newer"), res.stderr
    # too big a value is refused with the limit, before anything is sent
    res = inside(node, int(new_id), new_token, "checkpoint", "save", "x" * 70000)
    assert res.returncode == 2 and "64 KiB" in res.stderr
    big = node.base / "big"
    big.write_text("y" * 65536)
    res = inside(node, int(new_id), new_token, "checkpoint", "save", "--file", str(big))
    assert res.returncode == 0, res.stderr
    assert node.call("status")["ready"]
    refused = [a for a in node.call("audit")["records"] if not a["allowed"]]
    assert any(a["command"] == "checkpoint_save" for a in refused)
    assert node.cli("cancel", new_id).returncode == 0


def test_a_job_that_stops_heartbeating_is_ended_and_killed(node):
    out = node.out
    node.write_job("beat", {
        "schedule": "@yearly", "env": ENV, "heartbeat_timeout": "2s", "kill_grace": "1s",
        "command": f"{CLI} heartbeat --progress 0.25 --message 'table 1 of 4' && "
                   f"echo $$ > {out}/pid && exec sleep 60"})
    node.start()
    assert node.cli("run-now", "beat").returncode == 0
    pid = int(read(out / "pid"))
    [run] = node.wait_runs(lambda rs: rs and rs[0]["state"] == "timed_out", job="beat",
                           timeout=30, what="the silent run ended")
    assert run["reason"] == "heartbeat_timeout: no heartbeat for 2s"
    assert (run["progress"], run["heartbeat_message"]) == (0.25, "table 1 of 4")

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    wait_for(gone, timeout=15, what=f"the job's process {pid} killed")
    shown = node.cli("runs", "beat")
    assert "progress 25%" in shown.stdout and "table 1 of 4" in shown.stdout
    assert node.call("status")["ready"]



# The job's side of the protocol with nothing but the standard library: the
# interpreter under test may live where another user cannot read it.
RAW_CLIENT = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["CRONRD_SOCKET"])
args = {"run_id": int(os.environ.get("CRONRD_RUN_ID", "0")),
        "token": os.environ.get("CRONRD_RUN_TOKEN", "-"), **json.loads(sys.argv[2])}
s.sendall(json.dumps({"cmd": sys.argv[1], "args": args}).encode() + b"\\n")
reply = json.loads(s.makefile().readline())
print(json.dumps(reply))
sys.exit(0 if reply["ok"] else 1)
"""
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root (to run a job as nobody) and /usr/bin/python3")
def test_a_job_of_another_user_is_authorised_by_its_token_alone(node_factory):
    import grp
    import pwd
    nobody = pwd.getpwnam("nobody")
    node = node_factory(socket_group=grp.getgrgid(nobody.pw_gid).gr_name)
    os.chmod(node.base, 0o755)       # mkdtemp's 0700 would keep nobody from the socket
    os.chmod(node.out, 0o777)
    out = node.out
    (out / "client.py").write_text(RAW_CLIENT)
    client = f"{SYSTEM_PYTHON} {out}/client.py"
    node.write_job("theirs", {
        "schedule": "@yearly", "user": "nobody", "working_dir": "/tmp", "retries": RETRY,
        "command": f"env | grep ^CRONRD_CHECKPOINT= > {out}/$CRONRD_ATTEMPT.env; "
                   f"{client} heartbeat '{{\"progress\": 0.5}}' > {out}/$CRONRD_ATTEMPT.beat "
                   f"&& {client} checkpoint_save '{{\"value\": \"from-'$(id -u)'\"}}' "
                   f'> {out}/$CRONRD_ATTEMPT.save && [ "$CRONRD_ATTEMPT" = 2 ]'})
    node.write_job("roots", {"schedule": "@yearly", "command": "true"})
    node.start()
    assert node.cli("run-now", "theirs").returncode == 0
    node.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "succeeded"
                                  for r in rs), job="theirs", what="the retry succeeded",
                   timeout=30)
    assert read(out / "2.env").strip() == f"CRONRD_CHECKPOINT=from-{nobody.pw_uid}"
    assert '"ok": true' in read(out / "1.save")
    # nobody may still not act on root's job
    res = subprocess.run([SYSTEM_PYTHON, str(out / "client.py"), "pause",
                          '{"job": "roots"}'], capture_output=True, text=True, timeout=60,
                         env={"CRONRD_SOCKET": node.socket}, user=nobody.pw_uid,
                         group=nobody.pw_gid, cwd="/tmp")
    assert res.returncode == 1 and "permission denied" in res.stdout


def test_a_retry_on_another_node_after_node_loss_gets_the_checkpoint(cluster, tmp_path):
    c = cluster(node_timeout="3s")
    c.start()
    lead = c.leader()
    fids = sorted(n.config["node_id"] for n in c.followers())
    seen = tmp_path / "seen"
    # a follower's save is forwarded to the leader and committed before it sleeps
    c.write_job("long", {
        "schedule": "@yearly", "run_on": fids, "env": ENV,
        "command": f'echo "$CRONRD_ATTEMPT $CRONRD_NODE ${{CRONRD_CHECKPOINT:-none}} '
                   f'${{CRONRD_CHECKPOINT_ATTEMPT:-none}}" >> {seen}; '
                   f'{CLI} checkpoint save "done-on-$CRONRD_NODE" && exec sleep 60'})
    wait_for(lambda: [j for j in lead.call("jobs") if j["name"] == "long"], what="job")
    lead.call("run_now", {"job": "long"})
    wait_for(lambda: seen.exists() and seen.read_text(), what="attempt 1 started")
    first_node = seen.read_text().split()[1]
    # its checkpoint is in the replicated state (the leader's too)
    wait_for(lambda: lead.runs("long")[0]["heartbeat_at"] is not None,
             what="the save committed")
    c[first_node].kill9()
    runs = lead.wait_runs(lambda rs: any(r["attempt"] == 2 and r["state"] == "running"
                                         for r in rs), job="long", timeout=30,
                          what="lost and retried elsewhere")
    retry = next(r for r in runs if r["attempt"] == 2)
    assert retry["node"] != first_node
    wait_for(lambda: len(seen.read_text().splitlines()) == 2, what="attempt 2 started")
    assert seen.read_text().splitlines()[1].split() == [
        "2", retry["node"], f"done-on-{first_node}", "1"]
    lead.cli("cancel", str(retry["run_id"]))


def test_a_job_that_keeps_heartbeating_runs_past_its_heartbeat_timeout(node):
    node.write_job("alive", {
        "schedule": "@yearly", "env": ENV, "heartbeat_timeout": "4s",
        "command": f"for i in 1 2 3 4 5 6 7 8; do {CLI} heartbeat --progress 0.$i || exit 9; "
                   "sleep 0.7; done"})
    node.start()
    assert node.cli("run-now", "alive", "--wait").returncode == 0
    # The last beat may be one held back (one a second is sent): it is
    # recorded after the end, made before it.
    wait_for(lambda: node.runs("alive")[0]["progress"] == 0.8, timeout=10,
             what="the last heartbeat's progress")
    [run] = node.runs("alive")
    assert (run["state"], run["progress"]) == ("succeeded", 0.8)
    # it ran longer than its heartbeat_timeout
    assert parse_iso(run["finished_at"]) - parse_iso(run["started_at"]) > 4

"""Part 3 of issue 9: a run's log path is derived on the node that reads it,
never taken from the replicated state; run logs are opened without
following symlinks; the daemon refuses directories that others can write."""

from __future__ import annotations

import base64
import os
import pwd
import stat

import pytest
import yaml

from cronrd.config import parse_config
from cronrd.errors import CronrdError
from cronrd.runtime.daemon import Daemon
from cronrd.runtime.control.logs import read_log_chunk
from cronrd.runtime.runs.executor import Executor
from cronrd.runtime.runs.outbox import Outbox
from cronrd.runtime.runs.logs import log_file_name, safe_dir_name
from forged_state import ForgedState
from harness import wait_for

SECRET = b"TOP SECRET: root's private data\n"


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    os.chmod(path, 0o600)
    return path


def bare_daemon(tmp_path):
    """A Daemon with its state and executor but no event loop: enough for
    the code that serves ``cronrd logs`` (locally and to peers)."""
    base = tmp_path / "node"
    base.mkdir(mode=0o700)
    cfg = parse_config({"node_id": "n1", "data_dir": str(base / "state"),
                        "jobs_dir": str(base / "jobs"), "socket": str(base / "sock"),
                        "log_dir": str(base / "logs"), "timezone": "UTC"},
                       str(base / "cronrd.yaml"))
    os.makedirs(cfg.data_dir, mode=0o700)
    os.makedirs(cfg.log_dir, mode=0o750)
    d = Daemon(cfg)
    forged = ForgedState(cfg.state_db)
    d.conn, d.machine = forged.conn, forged.machine
    d.executor = Executor(cfg, None, d.conn, d.clock, fence=lambda: None,
                          outbox=Outbox(cfg.local_db))
    return d, forged


def derived_path(d, run) -> str:
    return os.path.join(d.config.log_dir, safe_dir_name(run.job), log_file_name(run))


def read_all(d, run_id) -> bytes:
    out, offset = b"", 0
    while True:
        # What the daemon serves, to its own `logs` and to peers (read_log;
        # Daemon._read_log_chunk runs it on the faces' loop).
        chunk = read_log_chunk(d.config, d.conn, run_id, offset)
        out += base64.b64decode(chunk["data"])
        offset = chunk["offset"]
        if not chunk["more"]:
            return out


def test_read_log_ignores_a_forged_log_path(tmp_path, secret):
    # A member commits RunStarted/RunFinished(log_path=/some/secret): what
    # this node serves for that run (to its CLI and to peers asking for
    # read_log) is the file its own log_dir holds for the run, never the path.
    d, forged = bare_daemon(tmp_path)
    forged.put_job("j")
    run = forged.finished_run("j", log_path=str(secret))
    assert run.log_path == str(secret)  # the state holds the forged path...
    real = derived_path(d, run)
    os.makedirs(os.path.dirname(real), mode=0o750)
    with open(real, "wb") as f:
        f.write(b"the run's own output\n")
    data = read_all(d, run.run_id)
    assert data == b"the run's own output\n"  # ...and it is never opened
    forged.close()


def test_read_log_with_a_forged_path_and_no_local_log_serves_nothing(tmp_path, secret):
    d, forged = bare_daemon(tmp_path)
    forged.put_job("j")
    run = forged.finished_run("j", log_path=str(secret))
    try:
        data = read_all(d, run.run_id)
    except CronrdError as exc:  # "gone from node n1": fine, as long as it says so
        assert str(secret) not in str(exc) or "gone" in str(exc)
        data = b""
    assert SECRET not in data
    forged.close()


def test_read_log_does_not_follow_a_symlink_in_place_of_the_log(tmp_path, secret):
    d, forged = bare_daemon(tmp_path)
    forged.put_job("j")
    run = forged.finished_run("j", log_path="whatever")
    link = derived_path(d, run)
    os.makedirs(os.path.dirname(link), mode=0o750)
    os.symlink(secret, link)
    try:
        data = read_all(d, run.run_id)
    except CronrdError as exc:
        assert "symlink" in str(exc) or "not a regular file" in str(exc), str(exc)
        data = b""
    assert SECRET not in data
    forged.close()


@pytest.mark.integration
def test_cronrd_logs_does_not_print_a_file_named_by_a_forged_record(node, secret):
    node.write_job("j", {"schedule": "@yearly", "command": "echo real-output"})
    node.start()
    res = node.cli("run-now", "j", "--wait")
    assert res.returncode == 0, res.stderr
    good = node.runs("j")[0]["run_id"]
    assert node.terminate() == 0
    forged = ForgedState(node.config["data_dir"] + "/state.db")
    bad = forged.finished_run("j", log_path=str(secret)).run_id
    forged.close()
    node.start()
    for args in (("logs", "j", "--run", str(bad)), ("logs", "j")):
        res = node.cli(*args)
        assert "TOP SECRET" not in res.stdout + res.stderr, args
    res = node.cli("logs", "j", "--run", str(good))
    assert res.returncode == 0 and "real-output" in res.stdout, res.stdout + res.stderr


@pytest.mark.integration
def test_a_symlinked_job_log_directory_is_not_written_through(node, tmp_path):
    # Whoever plants log_dir/JOB -> /elsewhere must not make the daemon
    # create files there: the run fails with the reason, nothing is written.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    node.write_job("j", {"schedule": "@yearly", "command": "echo hello"})
    node.start()
    os.symlink(elsewhere, os.path.join(node.config["log_dir"], "j"))
    res = node.cli("run-now", "j", "--wait")
    assert res.returncode != 0
    [run] = node.runs("j")
    assert run["state"] == "failed", run
    assert "log" in run["reason"] and "symlink" in run["reason"], run["reason"]
    assert list(elsewhere.iterdir()) == []


# -- directories others can write -------------------------------------------------
def reconfigure(n, **kw) -> None:
    n.config.update(kw)
    n.config_path.write_text(yaml.safe_dump(n.config))


def refused(n) -> str:
    n.start(wait=False)
    rc = n.proc.wait(30)
    out = n.daemon_log()
    assert rc == 1, out
    return out


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="the checks apply to a daemon running as root")
@pytest.mark.parametrize("key", ["log_dir", "data_dir", "jobs_dir", "socket"])
def test_daemon_refuses_a_directory_others_can_write(node, key):
    d = node.base / f"open-{key}"
    d.mkdir()
    os.chmod(d, 0o777)
    value = str(d / "sock") if key == "socket" else str(d)
    if key == "jobs_dir":
        node.write_job("j", {"schedule": "@yearly", "command": "true"})
        for f in node.jobs_dir.iterdir():
            os.rename(f, d / f.name)
    reconfigure(node, **{key: value})
    out = refused(node)
    assert str(d) in out and "writable by group and others" in out, out
    assert "0777" in out and f"chmod go-w {d}" in out, out
    assert not os.path.exists(d / "sock")


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="the checks apply to a daemon running as root")
def test_daemon_refuses_a_directory_owned_by_another_user(node):
    nobody = pwd.getpwnam("nobody")
    d = node.base / "logs-of-nobody"
    d.mkdir(mode=0o755)
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    reconfigure(node, log_dir=str(d))
    out = refused(node)
    assert str(d) in out and "owned by uid" in out and "nobody" in out, out
    assert f"chown root:root {d}" in out, out


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="the checks apply to a daemon running as root")
def test_daemon_refuses_a_directory_inside_one_others_can_write(node):
    # Whoever can write the parent can rename log_dir away and put their own.
    parent = node.base / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    (parent / "logs").mkdir(mode=0o755)
    reconfigure(node, log_dir=str(parent / "logs"))
    out = refused(node)
    assert str(parent) in out and f"chmod go-w {parent}" in out, out


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="the checks apply to a daemon running as root")
def test_daemon_accepts_dirs_inside_a_sticky_shared_parent(node):
    # /tmp-like parents (sticky, world-writable) are fine: nobody else can
    # rename or replace root's entries in them.
    parent = node.base / "tmp-like"
    parent.mkdir()
    os.chmod(parent, 0o1777)
    reconfigure(node, log_dir=str(parent / "logs"))
    node.write_job("j", {"schedule": "@yearly", "command": "echo ok"})
    node.start()
    assert node.cli("run-now", "j", "--wait").returncode == 0
    mode = stat.S_IMODE(os.stat(parent / "logs").st_mode)
    assert mode & 0o022 == 0
    wait_for(lambda: any((parent / "logs" / "j").iterdir()), what="the run's log")

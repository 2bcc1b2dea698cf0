"""The container executor (runtime/runs/executors.py) with real podman and
an image built here (`podman import` of a root filesystem with Debian's
busybox-static): no registry is reachable, and none is needed. A container
job runs with its environment and output, times out, is cancelled, is
adopted across a daemon restart, and a container no record holds is
removed at the next start."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration

IMAGE = "localhost/cronrd-test-busybox:1"
PODMAN = shutil.which("podman")
BUSYBOX = shutil.which("busybox")
APPLETS = ("sh", "echo", "sleep", "true", "false", "cat", "env", "id", "pwd", "ls")


def _podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    assert PODMAN is not None
    return subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The test image: busybox and its applets, imported into podman."""
    if not (PODMAN and BUSYBOX):
        if os.environ.get("CI"):
            pytest.fail("CI must have podman and busybox-static: .ci/run installs them",
                        pytrace=False)
        pytest.skip("needs podman and busybox-static (apt-get install podman runc "
                    "catatonit busybox-static; .ci/run does, with the containers.conf.d "
                    "drop-in of docs/executors.md)")
    root = tmp_path_factory.mktemp("rootfs")
    (root / "bin").mkdir()
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for applet in APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    (root / "tmp").mkdir()
    tar = root.parent / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(root, arcname=".")
    res = _podman("import", str(tar), IMAGE, timeout=120)
    assert res.returncode == 0, res.stderr
    probe = _podman("run", "--rm", "--pull", "never", "--network", "none", IMAGE,
                    "/bin/true")
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1:] or ["no error text"]
        if os.environ.get("CI"):
            pytest.fail(f"podman cannot run a container here: {why[0]} (.ci/run sets up "
                        "runc and default ulimits: docs/executors.md)", pytrace=False)
        pytest.skip(f"podman cannot run a container here: {why[0]}")
    return IMAGE


def container_job(command: str, **kw) -> dict:
    return {"schedule": "@yearly", "command": command,
            "executor": {"type": "container", "image": IMAGE}, **kw}


def containers(node_label: str = "") -> list[str]:
    args = ["ps", "--all", "--format", "{{.Names}}"]
    if node_label:
        args[2:2] = ["--filter", f"label=cronrd.node={node_label}"]
    return [n for n in _podman(*args).stdout.split() if n.startswith("cronrd-")]


@pytest.fixture
def node_id():
    """A node name of its own: the containers of one test are told apart
    from another's (and from a real cronrd's on this host)."""
    return "ct" + uuid.uuid4().hex[:8]


def test_a_container_job_runs_with_its_environment_and_output(node_factory, image, node_id):
    node = node_factory(node_id=node_id)
    node.write_job("inbox", container_job(
        'echo "job=$CRONRD_JOB run=$CRONRD_RUN_ID greeting=$GREETING"; id -u; '
        '[ -e /usr ] && echo "on the host" || echo "in the image"; exit 3',
        env={"GREETING": "hello from the job file"}, user="65534"))
    node.start()
    res = node.cli("run-now", "inbox", "--wait")
    run = node.runs("inbox")[0]
    assert run["state"] == "failed" and run["exit_code"] == 3, (run, res.stderr)
    out = Path(run["log_path"]).read_text()
    assert f"job=inbox run={run['run_id']} greeting=hello from the job file" in out
    assert "65534" in out.splitlines() and "in the image" in out.splitlines()
    wait_for(lambda: not containers(node_id), what="the container removed (--rm)")


def test_a_container_run_times_out_and_is_cancelled_by_stopping_its_container(
        node_factory, image, node_id):
    node = node_factory(node_id=node_id)
    node.write_job("slow", container_job("echo started; sleep 60; echo never",
                                         timeout="2s", kill_grace="3s"))
    node.write_job("manual", container_job("echo started; sleep 60; echo never"))
    node.start()
    node.cli("run-now", "slow", "--wait")
    run = node.runs("slow")[0]
    assert run["state"] == "timed_out", run
    assert "timed out after 2s" in run["reason"]
    out = Path(run["log_path"]).read_text()
    assert "started" in out and "never" not in out
    wait_for(lambda: not containers(node_id), what="the timed-out container removed")

    rid = node.call("run_now", {"job": "manual"})["run_id"]
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "running" and
             f"cronrd-{rid}-" in " ".join(containers(node_id)), what="the container running")
    res = node.cli("cancel", str(rid))
    assert res.returncode == 0, res.stderr
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "cancelled", timeout=20,
             what="the run cancelled")
    wait_for(lambda: not containers(node_id), what="the cancelled container removed")
    assert "event=run_stopping" in node.log_file.read_text()


def test_a_stop_reaches_the_containers_processes_as_sigterm_first(node_factory, image,
                                                                   node_id):
    """Review: the tests above pass even if only the SIGKILL after kill_grace
    ends the container. Here the job traps SIGTERM and says so, and the run
    ends well before its kill_grace."""
    node = node_factory(node_id=node_id)
    node.write_job("polite", container_job(
        "trap 'echo got TERM; exit 0' TERM; echo started; sleep 60 & wait",
        kill_grace="30s"))
    node.start()
    rid = node.call("run_now", {"job": "polite"})["run_id"]
    run = {}
    wait_for(lambda: "started" in _log_of(node, rid), what="the job started")
    t0 = time.monotonic()
    assert node.cli("cancel", str(rid)).returncode == 0
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "cancelled", timeout=20,
             what="the run cancelled")
    assert time.monotonic() - t0 < 15            # not the 30 s kill_grace
    assert "got TERM" in _log_of(node, rid), run
    wait_for(lambda: not containers(node_id), what="the container removed")


def _log_of(node, rid: int) -> str:
    path = node.call("run", {"run_id": rid}).get("log_path")
    try:
        return Path(path).read_text() if path else ""
    except OSError:
        return ""


def test_a_container_whose_supervisor_died_is_removed_before_its_run_is_reported_lost(
        node_factory, image, node_id):
    """Review: a lost run's container kept running while its retry ran: the
    job ran twice. At the next start it is removed before the loss is
    reported."""
    node = node_factory(node_id=node_id)
    node.write_job("orphan", container_job("echo started; sleep 120", on_node_loss="fail"))
    node.start()
    rid = node.call("run_now", {"job": "orphan"})["run_id"]
    wait_for(lambda: "started" in _log_of(node, rid), what="the job started")
    node.kill9()
    (rec,) = node.supervised()
    os.kill(rec.sup, signal.SIGKILL)           # its supervisor goes too
    wait_for(lambda: not rec.supervisor_alive(), what="the supervisor gone")
    try:
        os.killpg(rec.pid, signal.SIGKILL)      # and the podman client: the container lives
    except OSError:
        pass
    assert any(n.startswith(f"cronrd-{rid}-") for n in containers(node_id))
    node.start()
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "lost", timeout=30,
             what="the run lost")
    assert not any(n.startswith(f"cronrd-{rid}-") for n in containers(node_id))


def test_a_container_run_goes_on_across_a_daemon_restart_and_is_adopted(
        node_factory, image, node_id, tmp_path):
    node = node_factory(node_id=node_id)
    node.write_job("long", container_job("echo first; sleep 4; echo second; exit 0"))
    node.start()
    rid = node.call("run_now", {"job": "long"})["run_id"]
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "running", what="running")
    assert node.terminate(30) == 0
    assert "event=runs_detached count=1" in node.daemon_log()
    assert any(n.startswith(f"cronrd-{rid}-") for n in containers(node_id))
    node.start()
    assert "event=run_adopted" in node.log_file.read_text()
    wait_for(lambda: node.call("run", {"run_id": rid})["state"] == "succeeded", timeout=30,
             what="the adopted run's end")
    out = Path(node.call("run", {"run_id": rid})["log_path"]).read_text()
    assert out.split() == ["first", "second"]


def test_a_container_no_record_holds_is_removed_at_the_start(node_factory, image, node_id):
    node = node_factory(node_id=node_id)
    stray = f"cronrd-99-{uuid.uuid4().hex[:12]}"
    res = _podman("create", "--name", stray, "--label", f"cronrd.node={node_id}",
                  "--label", "cronrd.key=99.gone", IMAGE, "/bin/sleep", "60")
    assert res.returncode == 0, res.stderr
    other = f"cronrd-98-{uuid.uuid4().hex[:12]}"   # another node's: not ours to remove
    res = _podman("create", "--name", other, "--label", "cronrd.node=someone-else",
                  "--label", "cronrd.key=98.x", IMAGE, "/bin/true")
    assert res.returncode == 0, res.stderr
    try:
        node.write_job("idle", {"schedule": "@yearly", "command": "true"})
        node.start()
        wait_for(lambda: stray not in containers(), what="the stray container removed")
        assert other in containers()
        assert "event=containers_removed count=1" in node.log_file.read_text()
    finally:
        _podman("rm", "--force", stray, other)


def test_a_container_job_needs_a_node_that_offers_it(node_factory, image, node_id):
    """The node announces executor:container; explain says where it runs."""
    node = node_factory(node_id=node_id)
    node.write_job("boxed", container_job("true"))
    node.start()
    text = node.cli("explain", "boxed", "--next").stdout
    assert f"eligible now: {node_id}" in text, text

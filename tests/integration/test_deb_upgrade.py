"""`apt install ./new.deb` over the previous release on one node of a
running cluster (issue 31): the node runs the package under a real systemd
(a container booted with systemd-nspawn over this host's /usr, /etc and
/var, each behind a writable overlay), the other two members run this
checkout; a run in flight on that node when the package is upgraded goes
on under its supervisor (the unit's KillMode=process), the new daemon
adopts it and rejoins, and the cluster version rises once it runs the new
release.

Skipped unless CRONRD_DEB names this checkout's package and CRONRD_OLD_DEB
the previous release's (`.ci/run` builds both), and without root or
systemd-nspawn (package systemd-container).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from cluster_harness import Cluster
from cronrd import __version__
from cronrd.schedule import parse_iso
from cronrd.state import versions as V
from harness import REPO, wait_for

pytestmark = pytest.mark.integration

NEW = os.environ.get("CRONRD_DEB", "")
OLD = os.environ.get("CRONRD_OLD_DEB", "")
needs = pytest.mark.skipif(
    not (NEW and OLD) or os.geteuid() != 0 or shutil.which("systemd-nspawn") is None
    or shutil.which("nsenter") is None,
    reason="set CRONRD_DEB and CRONRD_OLD_DEB (this checkout's package and the previous "
           "release's), as root, with systemd-nspawn (apt-get install systemd-container)")


class NspawnFailed(Exception):
    """systemd-nspawn exited before the container's systemd started."""


class Container:
    """A systemd booted in a container: this host's /usr, /etc and /var
    under writable overlays (nothing of the host changes), the host's
    network (the cluster's other members listen on loopback)."""

    def __init__(self, base: Path):
        self.base = base
        root = base / "root"
        for d in ("usr", "etc", "var"):
            (root / d).mkdir(parents=True)
            (base / "upper" / d).mkdir(parents=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                os.symlink(os.readlink(f"/{link}"), root / link)
        shutil.copy("/etc/os-release", root / "etc" / "os-release")
        self.share = base / "share"
        self.share.mkdir()
        self.log = base / "boot.log"
        overlays = [f"--overlay=/{d}:{base}/upper/{d}:/{d}" for d in ("usr", "etc", "var")]
        with open(self.log, "wb") as out:
            # basic.target: none of the host's own services (databases, ...)
            self.proc = subprocess.Popen(
                ["systemd-nspawn", "-D", str(root), "--register=no", "--keep-unit", "-q",
                 *overlays, f"--bind={self.share}:/mnt/share", "--machine=cronrd-deb-test",
                 "-b", "systemd.unit=basic.target"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            self.init = wait_for(self._init_pid, 30, what="the container's systemd",
                                 on_fail=self.boot_log)
        except NspawnFailed as exc:
            # This host cannot run a container (no privileges for it): not
            # cronrd's doing, and nothing of cronrd has run yet.
            pytest.skip(f"systemd-nspawn cannot boot a container here: {exc}")
        wait_for(lambda: self.run("systemctl", "is-system-running", check=False).stdout
                 .strip() in ("running", "degraded"), 60, what="the container booted",
                 on_fail=self.boot_log)

    def _init_pid(self) -> int | None:
        if self.proc.poll() is not None:
            raise NspawnFailed(self.boot_log())
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            if child.name() in ("systemd", "init"):
                return child.pid
        return None

    def boot_log(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def run(self, *cmd: str, check: bool = True, timeout: float = 180,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        res = subprocess.run(
            ["nsenter", "-t", str(self.init), "-m", "-u", "-i", "-p", "-r", "-w", "--",
             "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive",
             *cmd], input=stdin, capture_output=True, text=True, timeout=timeout)
        if check:
            assert res.returncode == 0, f"{' '.join(cmd)}: {res.stdout}{res.stderr}"
        return res

    def journal(self) -> str:
        return self.run("journalctl", "-u", "cronrd", "--no-pager", "-n", "80",
                        check=False).stdout

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()   # nspawn powers the container off
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def container(tmp_path):
    box = Container(tmp_path / "box")
    yield box
    box.stop()


@needs
def test_apt_install_of_the_new_package_over_the_old_keeps_the_running_job_and_rejoins(
        container, tmp_path):
    c = Cluster(ids=("a", "b", "c"), first_ip=121)
    try:
        _upgrade_one_packaged_node(c, container)
    finally:
        c.cleanup()


def _upgrade_one_packaged_node(c: Cluster, box: Container) -> None:
    # a and b run this checkout; c is the packaged node in the container
    long_job = {"schedule": "*/8 * * * * *", "command": "sleep 5", "concurrency": "forbid",
                "run_on": "c"}
    for nid in ("a", "b"):
        c[nid].write_job("long", long_job)
        c[nid].start(wait=False)
    for nid in ("a", "b"):
        c[nid].wait_ready(timeout=40)
    a = c["a"]
    config = {"node_id": "c", "timezone": "UTC", "log_level": "debug",
              "cluster": c["c"].config["cluster"]}
    box.run("sh", "-c", "mkdir -p /etc/cronrd && cat > /etc/cronrd/cronrd.yaml",
            stdin=json.dumps(config))
    for deb, name in ((OLD, "old.deb"), (NEW, "new.deb")):
        shutil.copy(REPO / deb, box.share / name)
    # A container image's policy-rc.d (exit 101: start no service) would
    # stop the postinst from starting the daemon, as on no real host.
    box.run("rm", "-f", "/usr/sbin/policy-rc.d")
    # The previous release: installed and started by its postinst.
    box.run("dpkg", "-i", "--force-confold", "/mnt/share/old.deb")
    old = box.run("cronrd", "--version").stdout
    assert __version__ not in old, old

    def member_c():
        return next((m for m in a.call("cluster_members")["members"] if m["id"] == "c"), None)
    wait_for(lambda: (m := member_c()) and m["reachable"] and m["version"]
             and m["version"]["release"] not in (None, __version__), 60,
             what="c (the old package) a member", on_fail=lambda: c.logs() + box.journal())
    assert a.call("status")["versions"]["cluster_version"] < V.APPLY_VERSION

    in_flight = wait_for(lambda: next((r for r in a.runs("long") if r["state"] == "running"
                                       and r["node"] == "c"), None),
                         40, what="a run of long in flight on c",
                         on_fail=lambda: c.logs() + box.journal())
    daemon_before = box.run("systemctl", "show", "-p", "MainPID", "--value", "cronrd").stdout
    # The upgrade, as an operator (or unattended-upgrades) does it.
    out = box.run("apt-get", "install", "-y", "-o", "Dpkg::Options::=--force-confold",
                  "/mnt/share/new.deb")
    assert "Setting up cronrd" in out.stdout, out.stdout
    assert __version__ in box.run("cronrd", "--version").stdout
    daemon_after = box.run("systemctl", "show", "-p", "MainPID", "--value", "cronrd").stdout
    assert daemon_after.strip() not in ("", "0", daemon_before.strip()), \
        (daemon_before, daemon_after, box.journal())
    # The run in flight ends as itself (its supervisor outlived the old daemon).
    done = wait_for(lambda: next((r for r in a.runs("long") if r["run_id"] ==
                                  in_flight["run_id"] and r["state"] not in
                                  ("running", "assigned")), None),
                    40, what="the run in flight to end", on_fail=lambda: c.logs() + box.journal())
    assert done["state"] == "succeeded" and done["attempt"] == in_flight["attempt"], done
    # c rejoined on the new release, and the cluster version rose.
    wait_for(lambda: (m := member_c()) and m["reachable"] and m["version"]
             and m["version"]["release"] == __version__, 60, what="c on the new release",
             on_fail=lambda: c.logs() + box.journal())
    wait_for(lambda: a.call("status")["versions"]["cluster_version"] == V.APPLY_VERSION, 30,
             what="the new cluster version", on_fail=lambda: c.logs() + box.journal())
    st = json.loads(box.run("cronrd", "status", "--json").stdout)
    assert st["ready"] and st["version"] == __version__
    # c goes on running its job after the upgrade, once per fire time.
    after = time.time()
    wait_for(lambda: any(r["state"] == "succeeded" and r["node"] == "c" and r.get("started_at")
                         and parse_iso(r["started_at"]) > after for r in a.runs("long")), 40,
             what="a run of long started by the new daemon", on_fail=c.logs)
    keys = Counter((r["fire_time"], r["attempt"]) for r in a.runs("long"))
    assert not [k for k, n in keys.items() if n > 1], keys

"""Run cgroups (cronrd/runtime/runs/cgroups.py) on a stand-in cgroup tree:
what is read, written, refused and rolled back. (The kernel's side, limits
biting, is tests/integration/test_process_controls.py on a host with cgroup
v2 controllers.)"""

from __future__ import annotations

import os

import pytest

from cronrd.runtime.runs import cgroups as CG

MOUNTINFO = """\
25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw
41 31 0:38 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate
"""
INTERFACE = ("cgroup.procs", "cgroup.subtree_control", "cgroup.controllers", "memory.max",
             "pids.max", "cpu.max", "memory.events")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A directory that behaves like cgroupfs where it matters here: a new
    cgroup comes with its interface files."""
    real = os.mkdir

    def mkdir(path, mode=0o777, **kw):
        real(path, mode, **kw)
        for name in INTERFACE:
            open(os.path.join(path, name), "w").close()
    monkeypatch.setattr(CG.os, "mkdir", mkdir)
    service = tmp_path / "system.slice" / "cronrd.service"
    os.makedirs(service)
    (service / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for name in ("cgroup.procs", "cgroup.subtree_control"):
        (service / name).write_text("")
    return tmp_path, service


def test_the_v2_mount_and_own_cgroup_are_read():
    assert CG.cgroup2_mount(MOUNTINFO) == "/sys/fs/cgroup"
    assert CG.cgroup2_mount(MOUNTINFO.replace("cgroup2 cgroup2", "cgroup cgroup")) is None
    assert CG.own_cgroup("12:pids:/x\n0::/system.slice/cronrd.service\n") == \
        "/system.slice/cronrd.service"
    assert CG.own_cgroup("4:memory:/x\n") is None


OWN = "/system.slice/cronrd.service/daemon"   # systemd's DelegateSubgroup=daemon


def test_setup_turns_the_controllers_on_and_moves_nobody(tree):
    mount, service = tree
    cgs, why = CG.RunCgroups.setup(str(mount), OWN)
    assert why == "" and cgs.root == str(service)
    assert cgs.controllers == {"cpu", "memory", "pids"}
    assert (service / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (service / "runs" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (service / "cgroup.procs").read_text() == ""
    # A daemon started again finds it all there.
    assert CG.RunCgroups.setup(str(mount), OWN)[1] == ""


@pytest.mark.parametrize("own, controllers, why", [
    ("/", "cpu memory pids", "the daemon runs in cgroup /, not in a 'daemon' sub-cgroup"),
    ("/daemon", "cpu memory pids", "not in a 'daemon' sub-cgroup of a cgroup delegated to it"),
    ("/system.slice/cronrd.service", "cpu memory pids",
     "the daemon runs in cgroup /system.slice/cronrd.service, not in a 'daemon' sub-cgroup of "
     "a cgroup delegated to it (Delegate= and DelegateSubgroup=daemon in cronrd.service, "
     "systemd 254 or later)"),
    (OWN, "io cpuset", "has none of the memory, pids, cpu controllers"),
])
def test_setup_refuses_what_it_must_not_touch(tree, own, controllers, why):
    mount, service = tree
    (service / "cgroup.controllers").write_text(controllers)
    cgs, got = CG.RunCgroups.setup(str(mount), own)
    assert cgs is None and why in got, got
    assert (service / "cgroup.subtree_control").read_text() == ""
    assert not (service / "runs").exists()


def test_setup_without_cgroup_v2(tmp_path):
    cgs, why = CG.RunCgroups.setup(None, None, proc=str(tmp_path))
    assert cgs is None and "cannot read" in why
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(MOUNTINFO.splitlines()[0] + "\n")
    (tmp_path / "self" / "cgroup").write_text("0::/\n")
    assert CG.RunCgroups.setup(proc=str(tmp_path)) == (None, "this host has no cgroup v2 "
                                                              "hierarchy")


def test_other_processes_in_the_delegated_cgroup_mean_no_run_cgroups(tree, monkeypatch):
    mount, service = tree
    real = CG._write

    def write(path, text):
        if path.endswith("cronrd.service/cgroup.subtree_control"):
            raise OSError(16, "Device or resource busy")  # what the kernel says then
        real(path, text)
    monkeypatch.setattr(CG, "_write", write)
    cgs, why = CG.RunCgroups.setup(str(mount), OWN)
    assert cgs is None and why == (f"cannot set up run cgroups under {service}: processes "
                                   f"other than the daemon's are in {service}")


def test_a_run_cgroup_carries_its_limits(tree):
    mount, service = tree
    cgs, _ = CG.RunCgroups.setup(str(mount), OWN)
    path = cgs.create("7.abc", 512 << 20, 50.0, 100)
    assert path == str(service / "runs" / "7.abc")
    assert (service / "runs" / "7.abc" / "memory.max").read_text() == str(512 << 20)
    assert (service / "runs" / "7.abc" / "pids.max").read_text() == "100"
    assert (service / "runs" / "7.abc" / "cpu.max").read_text() == "50000 100000"
    # Only the controllers it has: without cpu, no cpu.max is written.
    only = CG.RunCgroups(str(service), frozenset({"memory"}))
    only.create("8.abc", None, 200.0, 5)
    assert (service / "runs" / "8.abc" / "cpu.max").read_text() == ""
    assert (service / "runs" / "8.abc" / "pids.max").read_text() == ""


def test_oom_kills_are_counted_and_said(tree):
    mount, service = tree
    cgs, _ = CG.RunCgroups.setup(str(mount), OWN)
    cgs.create("9.abc", 1 << 30, None, None)
    assert cgs.oom_killed("9.abc") == 0
    (service / "runs" / "9.abc" / "memory.events").write_text(
        "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n")
    assert cgs.oom_killed("9.abc") == 1
    assert cgs.oom_killed("no.such") == 0
    assert CG.oom_reason(1, 512 << 20) == ("the memory limit (limits.memory 512MiB) killed 1 "
                                          "of its process (out of memory in the run's cgroup)")
    assert "killed 3 of its processes" in CG.oom_reason(3, None)


def test_host_controllers(tmp_path):
    (tmp_path / "self").mkdir()
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "self" / "mountinfo").write_text(
        f"41 31 0:38 / {cg} rw - cgroup2 cgroup2 rw\n")
    assert CG.host_controllers(str(tmp_path)) == (str(cg), {"cpu", "memory"})
    (tmp_path / "self" / "mountinfo").write_text("")
    assert CG.host_controllers(str(tmp_path)) == (None, frozenset())

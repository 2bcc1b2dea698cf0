"""A cgroup (v2) per run, where the host gives cronrd one: ``limits:``
enforced by the kernel for the job's whole process tree.

The no-internal-processes rule of cgroup v2 lets a cgroup hand
controllers to its children only while it holds no process itself. So the
daemon uses run cgroups only when it starts in a leaf named ``daemon`` of a
cgroup delegated to it, ROOT: systemd 254 and later do that for
cronrd.service (``Delegate=`` and ``DelegateSubgroup=daemon``), and an
operator can do it by hand. The daemon moves no process, not even itself:
its fork server and the runs' supervisors are born in ``ROOT/daemon`` with
it. It turns the controllers on for ``ROOT`` and ``ROOT/runs``; each run
that has limits gets ``ROOT/runs/KEY``, which its job's process joins just
before its exec (the ``cgroup`` control, see launch.controls), so
everything the job starts is counted and limited there. Anywhere else (no
cgroup v2, an older systemd, controllers not delegated, other processes in
ROOT) limits fall back to rlimits and cpu is not enforced; ``cronrd
validate`` says so.

Only the standard library and plain files: this runs in the daemon.
"""

from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger("cronrd.executor")

CONTROLLERS = ("memory", "pids", "cpu")   # what limits: can use
CPU_PERIOD = 100_000                        # microseconds, cpu.max's default period
LEAF = "daemon"
RUNS = "runs"


def cgroup2_mount(mountinfo: str) -> str | None:
    """The mount point of the cgroup v2 hierarchy in /proc/self/mountinfo text."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if sep and right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            if len(fields) >= 5:
                return fields[4].replace("\\040", " ")
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's path in the v2 hierarchy (the ``0::PATH`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _read(path: str, limit: int = 65536) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode(errors="replace")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def host_controllers(proc: str = "/proc") -> tuple[str | None, frozenset[str]]:
    """(mount point, controllers the v2 hierarchy offers at its root): what
    ``cronrd validate`` can say about this host without a daemon."""
    try:
        mount = cgroup2_mount(_read(f"{proc}/self/mountinfo", 1 << 20))
        if mount is None:
            return None, frozenset()
        return mount, frozenset(_read(os.path.join(mount, "cgroup.controllers")).split())
    except OSError:
        return None, frozenset()


def oom_reason(killed: int, memory: int | None) -> str:
    """What a run's reason says when the memory limit killed ``killed`` of
    its processes (memory.events ``oom_kill``)."""
    size = f" {memory / (1 << 20):g}MiB" if memory else ""
    return (f"the memory limit (limits.memory{size}) killed {killed} of its "
            f"process{'es' if killed != 1 else ''} (out of memory in the run's cgroup)")


class RunCgroups:
    """The runs' cgroups under ``root`` with ``controllers`` on."""

    def __init__(self, root: str, controllers: frozenset[str]):
        self.root = root
        self.runs = os.path.join(root, RUNS)
        self.controllers = controllers

    # -- at the daemon's start ----------------------------------------------------------
    @classmethod
    def setup(cls, mount: str | None = None, own: str | None = None,
              proc: str = "/proc") -> tuple["RunCgroups | None", str]:
        """Set the tree up; (RunCgroups, "") or (None, why not)."""
        try:
            if mount is None:
                mount = cgroup2_mount(_read(f"{proc}/self/mountinfo", 1 << 20))
            if own is None:
                own = own_cgroup(_read(f"{proc}/self/cgroup"))
        except OSError as exc:
            return None, f"cannot read this process's cgroup: {exc.strerror}"
        if mount is None or own is None:
            return None, "this host has no cgroup v2 hierarchy"
        parent, leaf = os.path.split(own.rstrip("/"))
        if leaf != LEAF or parent in ("", "/"):
            return None, (f"the daemon runs in cgroup {own or '/'}, not in a {LEAF!r} "
                          "sub-cgroup of a cgroup delegated to it (Delegate= and "
                          f"DelegateSubgroup={LEAF} in cronrd.service, systemd 254 or later)")
        root = os.path.join(mount, parent.lstrip("/"))
        try:
            offered = frozenset(_read(os.path.join(root, "cgroup.controllers")).split())
        except OSError as exc:
            return None, f"cannot read {root}/cgroup.controllers: {exc.strerror}"
        wanted = frozenset(CONTROLLERS) & offered
        if not wanted:
            return None, (f"the daemon's cgroup {root} has none of the "
                          f"{', '.join(CONTROLLERS)} controllers (Delegate=?)")
        enable = " ".join(f"+{c}" for c in sorted(wanted))
        runs = os.path.join(root, RUNS)
        try:
            _write(os.path.join(root, "cgroup.subtree_control"), enable)
            if not os.path.isdir(runs):
                os.mkdir(runs, 0o755)
            _write(os.path.join(runs, "cgroup.subtree_control"), enable)
        except OSError as exc:
            why = (f"processes other than the daemon's are in {root}"
                   if exc.errno == errno.EBUSY else exc.strerror)
            return None, f"cannot set up run cgroups under {root}: {why}"
        return cls(root, wanted), ""

    def prune(self, keep: set[str]) -> None:
        """Remove the empty cgroups of runs that are over (an earlier daemon's)."""
        try:
            names = os.listdir(self.runs)
        except OSError:
            return
        for name in names:
            if name not in keep and os.path.isdir(os.path.join(self.runs, name)):
                self.remove(name)

    # -- per run ----------------------------------------------------------------------
    def create(self, key: str, memory: int | None, cpu: float | None,
               tasks: int | None) -> str:
        """The run's cgroup with its limits (OSError if the kernel refuses)."""
        path = os.path.join(self.runs, key)
        os.mkdir(path, 0o755)
        try:
            if memory is not None and "memory" in self.controllers:
                _write(os.path.join(path, "memory.max"), str(memory))  # as systemd's MemoryMax=
            if tasks is not None and "pids" in self.controllers:
                _write(os.path.join(path, "pids.max"), str(tasks))
            if cpu is not None and "cpu" in self.controllers:
                quota = max(1000, int(CPU_PERIOD * cpu / 100))
                _write(os.path.join(path, "cpu.max"), f"{quota} {CPU_PERIOD}")
        except OSError:
            self.remove(key)
            raise
        return path

    def oom_killed(self, key: str) -> int:
        """How many of the run's processes the memory limit killed."""
        try:
            text = _read(os.path.join(self.runs, key, "memory.events"))
        except OSError:
            return 0
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self, key: str) -> bool:
        """Remove the run's cgroup once its processes are gone."""
        try:
            os.rmdir(os.path.join(self.runs, key))
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False  # processes left (pruned at a later start)

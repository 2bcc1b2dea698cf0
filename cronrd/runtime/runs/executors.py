"""Executors: what runs a run's command once it is due on this node.

The seam sits below the run's life (state/run_life.py) and its supervisor
(supervisor.py): whichever executor a job names (``executor:``), its run is
one supervised process, with the same gate, claim, log capture, exit
record, adoption by the next daemon and reports. An executor decides three
things, and nothing above this module knows which one ran a run:

* ``command``: what the supervisor executes in place of the job's bare
  command (its argv, the environment it needs, the directory to start in);
* ``stop`` and ``kill``: how a timeout or a cancel ends the run (a signal
  to the process tree for ``local``; ``podman stop -t kill_grace`` for a
  container, whose processes are not our children);
* ``sweep``: at the daemon's start, what a run of a previous daemon left
  behind that no record accounts for (a container named after a run).

``local`` is today's fork. ``container`` runs the command inside a podman
container named after the run (``cronrd-KEY``, labelled with the node and
run), so a daemon that restarts finds it again by name: the supervisor that
holds ``podman run`` outlives the daemon as it does for a local run, and a
container whose supervisor is gone is removed. Kubernetes Jobs fit the same
seam (docs/executors.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import psutil

from ...errors import CronrdError
from ...jobspec import JobSpec
from ..tasks import wait_within

log = logging.getLogger("cronrd.executor")

CONTAINER_PREFIX = "cronrd-"     # a container's name: this and the run's spawn key
PODMAN_TIMEOUT = 30.0            # seconds a podman housekeeping command may take


@dataclass(frozen=True)
class Command:
    """What the supervisor starts for a run: ``argv`` (the job's command,
    wrapped as the executor needs), the names of the environment variables
    it must pass on, and where to start (None: the job's working_dir)."""
    argv: list[str]
    cwd: str | None = None
    on_host: bool = True    # the job's user, limits and controls apply to this process


class RunExecutor(Protocol):
    name: str

    def command(self, spec: JobSpec, key: str, command: list[str],
                env_names: Iterable[str]) -> Command: ...

    def stop(self, key: str, kill_grace: float) -> bool:
        """Ask the run to end (kill_grace to go), besides the SIGTERM to its
        process tree the caller sends (unless this returns True)."""
        ...

    def kill(self, key: str) -> None:
        """The run's kill_grace is over: end what is left of it."""
        ...

    def ended(self, key: str) -> None:
        """The run is over: nothing of it may go on."""
        ...

    def remove_now(self, key: str) -> bool:
        """As ``ended``, done before the caller goes on."""
        ...

    def sweep(self, node_id: str, has_record: Callable[[str], bool]) -> list[str]:
        """What runs of earlier daemons left behind without a record
        (``has_record(spawn key)``, asked just before a removal): removed;
        their names."""
        ...


class LocalExecutor:
    """The job's command, forked under the run's supervisor."""
    name = "local"

    def command(self, spec: JobSpec, key: str, command: list[str],
                env_names: Iterable[str]) -> Command:
        return Command(list(command))

    def stop(self, key: str, kill_grace: float) -> bool:
        return False   # the executor signals the process tree

    def kill(self, key: str) -> None:
        pass

    def ended(self, key: str) -> None:
        pass

    def remove_now(self, key: str) -> bool:
        return True

    def sweep(self, node_id: str, has_record: Callable[[str], bool]) -> list[str]:
        return []


def container_name(key: str) -> str:
    return CONTAINER_PREFIX + key.replace(".", "-")


class ContainerExecutor:
    """The command inside a podman container of the job's image.

    ``podman run --rm --name cronrd-KEY`` attached (its output is the run's
    log, its exit status the run's; 125 to 127 are podman's own: the image
    is missing, the command not found...). The job's environment goes in by
    name (``--env NAME``: values never on a command line; the job file
    refuses variables that would change podman itself, and env_file),
    ``user``/``group`` as ``--user`` inside the
    container, ``working_dir`` as ``--workdir``, ``limits`` as podman's
    ``--memory``, ``--cpus``, ``--pids-limit`` and ``--ulimit nofile``;
    ``network: none`` (the default) gives it no network. ``--init`` makes
    the container's first process one that passes signals on, so a stop
    reaches the job. The podman client itself runs as the daemon's user,
    without the job's limits (they are the container's)."""
    name = "container"

    def __init__(self, podman: str, node_id: str):
        self.podman = podman
        self.node_id = node_id
        self._tasks: set[asyncio.Task] = set()   # podman commands in flight

    def command(self, spec: JobSpec, key: str, command: list[str],
                env_names: Iterable[str]) -> Command:
        ex = spec.executor
        assert ex is not None and ex.image  # validated with the job file
        name = container_name(key)
        argv = [self.podman, "run", "--rm", "--init", "--name", name,
                "--label", f"cronrd.node={self.node_id}", "--label", f"cronrd.key={key}",
                "--pull", ex.pull, "--network", ex.network,
                "--stop-timeout", str(max(1, int(round(spec.kill_grace))))]
        for volume in ex.volumes:
            argv += ["--volume", volume]
        if spec.user:
            argv += ["--user", spec.user + (f":{spec.group}" if spec.group else "")]
        if spec.working_dir:
            argv += ["--workdir", spec.working_dir]
        lim = spec.limits
        if lim is not None:
            if lim.memory is not None:
                argv += ["--memory", str(lim.memory)]
            if lim.cpu is not None:
                argv += ["--cpus", f"{lim.cpu / 100:g}"]
            if lim.tasks is not None:
                argv += ["--pids-limit", str(lim.tasks)]
            if lim.open_files is not None:
                argv += ["--ulimit", f"nofile={lim.open_files}:{lim.open_files}"]
        for env_name in sorted(env_names):
            argv += ["--env", env_name]
        argv += ["--", ex.image, *command]
        return Command(argv, cwd="/", on_host=False)

    def _podman(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.podman, *args], capture_output=True, text=True,
                              timeout=PODMAN_TIMEOUT, check=False)

    def _background(self, what: str, key: str, *args: str) -> None:
        """Run ``podman ARGS`` off the event loop's way (an asyncio child,
        reaped by it); a failure is logged with what it leaves."""
        async def run() -> None:
            try:
                proc = await asyncio.create_subprocess_exec(
                    self.podman, *args, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _out, err = await wait_within(proc.communicate(), PODMAN_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                log.error("event=container_%s_failed key=%s error=\"%s\"", what, key, exc)
                return
            text = (err or b"").decode(errors="replace").strip()
            if proc.returncode and "no such container" not in text.lower():
                log.error("event=container_%s_failed key=%s status=%s error=\"%s\" "
                          "action=\"the next start removes what no run record holds\"",
                          what, key, proc.returncode, text[-300:])
        try:
            task = asyncio.get_running_loop().create_task(run())
        except RuntimeError:   # no loop (a tool, a test): at once
            self._podman(*args)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self, key: str, kill_grace: float) -> bool:
        # SIGTERM to the podman client (the caller's signal to the run's tree)
        # reaches the container too (podman run proxies signals); this stops
        # one whose client is gone. podman sends SIGKILL after kill_grace.
        self._background("stop", key, "stop", "--time", str(max(1, int(round(kill_grace)))),
                         container_name(key))
        return False

    def kill(self, key: str) -> None:
        self._background("kill", key, "rm", "--force", "--ignore", "--time", "0",
                         container_name(key))

    def ended(self, key: str) -> None:
        """The run is over: its container must be gone (--rm removes it,
        unless its client died first): removed, if it is not."""
        self._background("remove", key, "rm", "--force", "--ignore", "--time", "0",
                         container_name(key))

    def remove_now(self, key: str) -> bool:
        """Remove the run's container before going on (a run settled lost
        at a start, whose retry may run elsewhere: it must not run twice)."""
        try:
            res = self._podman("rm", "--force", "--ignore", "--time", "0", container_name(key))
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.error("event=container_remove_failed key=%s error=\"%s\"", key, exc)
            return False
        if res.returncode:
            log.error("event=container_remove_failed key=%s status=%d error=\"%s\"", key,
                      res.returncode, res.stderr.strip()[-300:])
        return res.returncode == 0

    def sweep(self, node_id: str, has_record: Callable[[str], bool]) -> list[str]:
        try:
            res = self._podman("ps", "--all", "--filter", f"label=cronrd.node={node_id}",
                               "--format", "{{.Names}} {{.Labels}}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("event=container_sweep_failed error=\"%s\"", exc)
            return []
        gone = []
        for line in res.stdout.splitlines():
            name = line.split(" ", 1)[0]
            if not name.startswith(CONTAINER_PREFIX):
                continue
            key = next((part.split(":", 1)[1] for part in line.replace("map[", " ")
                        .replace("]", " ").split() if part.startswith("cronrd.key:")), None)
            if key is None or has_record(key):
                continue
            try:
                self._podman("rm", "--force", "--time", "0", name)
            except (OSError, subprocess.TimeoutExpired):
                continue
            gone.append(name)
        if gone:
            log.warning("event=containers_removed count=%d names=%s reason=\"no run record "
                        "holds them: their runs ended while no daemon watched\"", len(gone),
                        ",".join(gone[:5]))
        return gone


@functools.cache
def find_podman() -> str | None:
    """podman on this host's PATH (looked for once per process)."""
    return shutil.which("podman")


def offered_tags() -> tuple[str, ...]:
    """The tags that say which executors beyond local this node offers
    (``executor:container`` where podman is installed): announced with the
    node's own tags, read by placement (decisions/placement.fits)."""
    return ("executor:container",) if find_podman() else ()


def started_with(pid: int | None, key: str) -> str:
    """Which executor a run of an earlier daemon was started with, from its
    process: ``podman run ... --name cronrd-KEY`` is a container run's (the
    job's definition may have changed since)."""
    if pid:
        try:
            if container_name(key) in psutil.Process(pid).cmdline():
                return "container"
        except psutil.Error:
            pass
    return "local"


def host_side(spec: JobSpec) -> JobSpec:
    """What of a container job applies to the process on the host (the
    podman client): not the job's user, directory, environment file, limits
    or process controls, which are the container's (ContainerExecutor)."""
    import dataclasses
    return dataclasses.replace(spec, user=None, group=None, working_dir=None, env_file=None,
                               limits=None, nice=None, ioclass=None, ioprio=None, umask=None)


class Executors:
    """The executors this node offers, by name: ``local`` always,
    ``container`` where podman is installed."""

    def __init__(self, node_id: str, podman: str | None = None):
        self.by_name: dict[str, RunExecutor] = {"local": LocalExecutor()}
        self.podman = podman if podman is not None else find_podman()
        if self.podman:
            self.by_name["container"] = ContainerExecutor(self.podman, node_id)

    def named(self, name: str) -> RunExecutor:
        """The executor a run was started with (local if this node has no
        such one any more: its process tree is what there is to signal)."""
        return self.by_name.get(name) or self.by_name["local"]

    def of(self, spec: JobSpec | None) -> RunExecutor:
        """The executor of ``spec``'s runs; CronrdError when this node has
        none of that type (the run fails here, saying what to install)."""
        kind = spec.executor_type if spec is not None else "local"
        found = self.by_name.get(kind)
        if found is None:
            raise CronrdError(f"this node has no {kind} executor: install podman "
                              "(apt-get install podman) and restart cronrd, or pin the job "
                              "to nodes that have it")
        return found

    def tags(self) -> tuple[str, ...]:
        """What placement reads of this node: ``executor:NAME`` per
        executor beyond local (decisions/placement.fits)."""
        return tuple(f"executor:{n}" for n in sorted(self.by_name) if n != "local")

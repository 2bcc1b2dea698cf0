"""Starting a run here: may it start (max_running, accept_jobs_from), and
asking for its supervisor, whose shell then waits at the gate of its due time."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Sequence

from ...errors import CronrdError
from ...jobspec import JobSpec
from ...state import queries as Q
from ...state import run_life as L
from ...model.run import Run
from .active import ActiveRun, InFlight
from .cgroups import RunCgroups
from .executors import Executors, host_side
from .gates import Gates
from .launch import Identities, env_memfd, launch
from .logs import open_run_log, run_log_path, say
from .spawner import Spawner, new_key

log = logging.getLogger("cronrd.executor")


@dataclass(frozen=True)
class NotStarted:
    """Why a run could not be handed to a supervisor (it failed)."""
    reason: str
    log_path: str | None = None
    exit_code: int | None = None


def over_cap(flight: InFlight, run: Run, spec: JobSpec, node_id: str,
             node_max: int) -> str | None:
    """max_running: the reason ``run`` may not start now, or None. Runs
    waiting at a gate count: each holds a process and descriptors."""
    if spec.max_running is not None and flight.job_slots.get(run.job, 0) >= spec.max_running:
        return (f"max_running ({spec.max_running}) of job {run.job} reached on node "
                f"{node_id}")
    if flight.slots >= node_max:
        return f"max_running ({node_max}) reached on node {node_id}"
    return None


def refused_source(conn, node_id: str, accept: Sequence[str] | None, job: str) -> str | None:
    """accept_jobs_from: why this node will not run ``job`` (defined only
    by nodes it does not take jobs from), or None."""
    if accept is None:
        return None
    # The definition in force must be one of theirs: being one of the
    # job's sources is not enough (another node's conflicting definition
    # may be the one in force).
    if Q.in_force_from(conn, job, accept):
        return None
    sources = Q.job_source_nodes(conn, job)
    return (f"node {node_id} runs only jobs defined by {', '.join(accept)} "
            f"(accept_jobs_from); the definition of {job} in force comes from "
            f"{', '.join(n for n in sources if n not in accept) or 'another node'}: pin it "
            "to other nodes with run_on, or define it the same way here")


def run_cgroup(cgroups: RunCgroups | None, key: str, spec: JobSpec) -> str | None:
    """The run's cgroup, made with its limits, or None (no limits a cgroup
    enforces, or none to be had: rlimits then, and no cpu limit)."""
    lim = spec.limits
    if cgroups is None or lim is None or (lim.memory, lim.cpu, lim.tasks) == (None,) * 3:
        return None
    try:
        return cgroups.create(key, lim.memory, lim.cpu, lim.tasks)
    except OSError as exc:
        log.warning("event=run_cgroup_failed job=%s key=%s error=\"%s\" action=\"limits "
                    "enforced with rlimits; cpu not enforced\"", spec.name, key,
                    exc.strerror or exc)
        return None


def spawn(run: Run, spec: JobSpec, now: float, log_dir: str, runs_dir: str, *,
          node_id: str, identities: Identities, job_nofile: int, gates: Gates,
          spawner: Spawner, claimed: bool,
          cgroups: RunCgroups | None = None,
          workflow: dict[str, str] | None = None,
          executors: Executors | None = None) -> ActiveRun | NotStarted:
    """Ask for the run's supervisor: the run, waiting at its gate (not yet on
    it: the caller registers it), or why it could not be asked for.
    ``claimed``: it needs no claim (one host: nobody else could start it).
    ``cgroups``: where runs with limits get a cgroup of their own.
    ``workflow``: the run's workflow variables (decisions/run_env.py).
    ``executors``: what runs the command (executors.py; None: local)."""
    log_path = run_log_path(log_dir, run)
    try:
        logfd, dirfd = open_run_log(log_dir, run, create=True, with_dir=True)
    except (OSError, CronrdError) as exc:
        why = str(exc) if isinstance(exc, CronrdError) else \
            f"{exc.strerror}; check log_dir permissions"
        return NotStarted(f"cannot open log file {log_path}: {why}")
    envfd = -1
    key = new_key(run.run_id)
    cgroup = None
    executor_name = "local"
    try:
        executor = executors.of(spec) if executors is not None else None
        host, wrap = spec, None
        if executor is not None and executor.name != "local":
            executor_name = executor.name
            host = host_side(spec)

            def wrap(command: list[str], names) -> list[str]:
                assert executor is not None  # (bound above)
                return executor.command(spec, key, command, names).argv
        ident = identities(host)
        cgroup = run_cgroup(cgroups, key, host)
        how = launch(run, host, ident, node_id=node_id, log_path=log_path,
                     job_nofile=job_nofile, cgroup=cgroup,
                     controllers=cgroups.controllers if cgroups else frozenset(),
                     workflow=workflow, wrap=wrap)
        if how.env_script is not None:
            envfd = env_memfd(how.env_script)
    except (CronrdError, OSError) as exc:
        msg = str(exc) if isinstance(exc, CronrdError) else \
            f"cannot prepare the run: {exc.strerror}"
        say(logfd, f"cronrd: run not started: {msg}\n")
        os.close(logfd)
        os.close(dirfd)
        if cgroup is not None:
            assert cgroups is not None  # run_cgroup() made it there
            cgroups.remove(key)
        return NotStarted(msg, log_path)
    gate = gates.at(run.due_at or now)
    req = {"key": key, "argv": how.argv, "env": how.env, "cwd": how.cwd,
           "cap": spec.max_log_bytes, "switch": how.switch, "ids": how.ids,
           "controls": list(how.controls),
           "record": os.path.join(runs_dir, key), "log_name": os.path.basename(log_path)}
    try:
        spawner.spawn(req, [gate.rfd, logfd, dirfd] + ([envfd] if envfd >= 0 else []))
    except CronrdError as exc:
        msg = f"cannot start the run: {exc}"
        say(logfd, f"cronrd: {msg}\n")
        if cgroup is not None:
            assert cgroups is not None  # run_cgroup() made it there
            cgroups.remove(key)
        return NotStarted(msg, log_path, exit_code=127)
    finally:
        os.close(logfd)
        os.close(dirfd)
        if envfd >= 0:
            os.close(envfd)
    return ActiveRun(run=run, spec=spec, key=key, log_path=log_path,
                     kill_grace=spec.kill_grace, user=how.user, gate=gate,
                     life=L.Life(switch=how.switch, claim="won" if claimed else "none"),
                     executor=executor_name)

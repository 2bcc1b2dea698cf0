"""How a run is launched: as whom, with which environment, through which gate.

``Identities`` resolves (and caches) the user a job runs as; ``launch`` turns
a run and its job into the argv, environment and working directory its
supervisor execs. Nothing here forks: see supervisor.py.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import re
import shlex
import shutil
from dataclasses import dataclass

from ...errors import CronrdError
from ...jobspec import JobSpec
from ...schedule import iso_utc
from ...state.run import Run

log = logging.getLogger("cronrd.executor")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The run's process is spawned ahead of its fire time and waits at a gate
# (its stdin, a pipe shared by every run due at the same instant); at the
# fire time the daemon writes one byte per admitted run and closes the pipe,
# and each waiting shell execs the job's command at once. Spawning is the
# slow part (fork/exec and our bookkeeping, ~1 ms per run in Python); doing
# it early means 300 runs due in the same second all start within the time
# the kernel needs to exec them, not one after the other. If the daemon dies
# before the gate opens, the pipe closes without bytes and the shells exit
# (status 75) without running anything: the run is still "assigned" and
# starts when the daemon is back.
#
# The gate shell first puts the job's soft open-file limit back to what the
# daemon had before it raised its own ($1), so jobs see the limit cron would
# give them.
#
# Past its gate it prints one STARTED byte (not logged) before the exec: the
# run's supervisor then knows, and records, that the job's command runs.
GATE_SCRIPT = ('ulimit -S -n "$1" 2>/dev/null; shift; read _ || exit 75; printf "\\002"; '
               'exec </dev/null; exec "$@"')
LEGACY_GATE_SCRIPTS = (  # older daemons'
    'read _ || exit 75; exec </dev/null; exec "$@"',
    'ulimit -S -n "$1" 2>/dev/null; shift; read _ || exit 75; exec </dev/null; exec "$@"')
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")

# A run as another user: the helper that switches identity (setpriv, root
# until it execs) gets this environment and nothing else, and "/" as its
# working directory. What the job defines (env:, working_dir:) is applied by
# the shell it starts, which already runs as the job's user: it enters the
# working directory, reads the job's environment (``export`` lines the daemon
# wrote into a memfd given as its stdout), points stdout at the run's stdout
# pipe (given as descriptor 3) and execs the gate shell. So LD_PRELOAD & co.
# are never seen by a root process, and a directory the user may not enter
# fails the run instead of hosting it.
# Done, it writes one READY byte (not logged) to the stdout pipe; a gate opens
# only once each such run said ready or exited (its reason is what it wrote),
# so a run that could not be prepared is never counted as started.
CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
DROP_SCRIPT = (
    'cd -- "$1" 2>/dev/null || { if [ -e "$1" ]; then '
    'echo "cronrd: run not started: user $2 may not enter working_dir $1 (permission denied)"; '
    'else echo "cronrd: run not started: working_dir $1 does not exist for user $2"; fi >&2; '
    'exit 126; }; unset OLDPWD; . /proc/self/fd/1; exec >&3 3>&-; printf "\\001"; shift 2; '
    'exec "$@"')
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_script(env: dict[str, str]) -> bytes:
    """The job's environment as ``export`` lines for the shell that runs as
    the job's user (every value single-quoted: nothing is expanded)."""
    lines = []
    for key, value in env.items():
        if not ENV_NAME_RE.fullmatch(key) or "\0" in value:
            raise CronrdError(f"environment variable {key!r} cannot be passed to the job: "
                              "names are letters, digits and '_', values have no NUL")
        lines.append(f"export {key}={shlex.quote(value)}\n")
    return "".join(lines).encode()


class Identities:
    """Who a job's runs run as, resolved once per (user, group)."""

    def __init__(self, node_id: str):
        self.node_id = node_id
        self.is_root = os.geteuid() == 0
        self._identities: dict[tuple, dict] = {}
        self._warned_user: set[str] = set()
        me = pwd.getpwuid(os.geteuid())
        self._me = {"uid": me.pw_uid, "gid": os.getegid(), "home": me.pw_dir,
                    "user": me.pw_name,
                    "groups": frozenset(os.getgroups()) | {os.getegid()}}

    def __call__(self, spec: JobSpec) -> dict:
        """Who the run runs as. Popen gets user/group arguments only when they
        differ from the daemon's own: with them CPython cannot use vfork and
        copies the whole daemon for every run."""
        key = (spec.user, spec.group)
        ident = self._identities.get(key)
        if ident is None:
            ident = self._resolve(spec)
            self._identities[key] = ident
        return ident

    def _resolve(self, spec: JobSpec) -> dict:
        me = self._me
        if not self.is_root:
            if spec.user and spec.name not in self._warned_user:
                self._warned_user.add(spec.name)
                log.warning("event=user_ignored job=%s user=%s reason=\"daemon is not root; "
                            "the job runs as %s\"", spec.name, spec.user, me["user"])
            return {"ids": None, "prefix": [], "home": me["home"], "user": me["user"],
                    "switch": False}
        name = spec.user or "root"
        try:
            ent = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except KeyError:
            raise CronrdError(f"user {name!r} does not exist on node {self.node_id}; create "
                              f"it or fix user: in {spec.source}") from None
        gid = ent.pw_gid
        if spec.group:
            try:
                gid = (int(spec.group) if spec.group.isdigit()
                       else grp.getgrnam(spec.group).gr_gid)
            except KeyError:
                raise CronrdError(f"group {spec.group!r} does not exist on node "
                                  f"{self.node_id}; fix group: in {spec.source}") from None
        groups = os.getgrouplist(ent.pw_name, gid)
        ids: dict | None = None
        prefix: list[str] = []
        # The primary group counts as a member group on both sides.
        if (ent.pw_uid, gid, frozenset(groups) | {gid}) != \
                (me["uid"], me["gid"], me["groups"]):
            if SETPRIV:
                # util-linux's setpriv switches identity after the exec, so the
                # daemon still spawns with vfork; Popen's own user/group
                # arguments would copy the whole daemon for every run.
                prefix = [SETPRIV, f"--reuid={ent.pw_uid}", f"--regid={gid}",
                          f"--groups={','.join(str(g) for g in groups)}" if groups
                          else "--clear-groups", "--"]
            else:
                # The job's process switches itself before its exec.
                ids = {"uid": ent.pw_uid, "gid": gid, "groups": list(groups)}
        return {"ids": ids, "prefix": prefix, "home": ent.pw_dir, "user": ent.pw_name,
                "switch": bool(ids or prefix)}


@dataclass(frozen=True)
class Launch:
    argv: list
    env: dict
    cwd: str
    user: str
    switch: bool                   # runs as another user (READY handshake)
    ids: dict | None               # uid/gid/groups the job's process takes itself
    env_script: bytes | None       # the job's environment, for the switching shell


def launch(run: Run, spec: JobSpec, ident: dict, *, node_id: str, log_path: str,
           job_nofile: int) -> Launch:
    """What the supervisor execs for ``run``. Raises CronrdError when the run
    cannot be prepared here (its working directory is missing...)."""
    fire_iso = iso_utc(run.fire_time)
    env = {"PATH": DEFAULT_PATH, "SHELL": "/bin/sh", "HOME": ident["home"],
           "USER": ident["user"], "LOGNAME": ident["user"]}
    if "LANG" in os.environ:
        env["LANG"] = os.environ["LANG"]
    env.update(dict(spec.env))
    env.update({
        "CRONRD_JOB": run.job, "CRONRD_RUN_ID": str(run.run_id),
        "CRONRD_FIRE_TIME": fire_iso, "CRONRD_ATTEMPT": str(run.attempt),
        "CRONRD_RUN_KEY": run.key,
        "CRONRD_NODE": node_id, "CRONRD_LOG_PATH": log_path,
    })
    command = (["/bin/sh", "-c", spec.command] if isinstance(spec.command, str)
               else list(spec.command))
    argv = ["/bin/sh", "-c", GATE_SCRIPT, "cronrd-run", str(job_nofile), *command]
    cwd = spec.working_dir or ident["home"]
    if not os.path.isdir(cwd):
        cwd_hint = "fix working_dir" if spec.working_dir else "create it"
        raise CronrdError(f"working directory {cwd} does not exist on node "
                          f"{node_id}; {cwd_hint} in {spec.source}")
    if not ident["switch"]:
        return Launch(argv, env, cwd, ident["user"], False, None, None)
    script = env_script(env)
    argv = [*ident["prefix"], "/bin/sh", "-c", DROP_SCRIPT, "cronrd-start", cwd,
            ident["user"], *argv]
    return Launch(argv, {"PATH": CLEAN_PATH}, "/", ident["user"], True, ident["ids"], script)


def env_memfd(script: bytes) -> int:
    """A memfd holding the job's environment script, read from its start
    (the switching shell's stdout; see ``env_script``)."""
    fd = os.memfd_create("cronrd-env", os.MFD_CLOEXEC)
    try:
        view = memoryview(script)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd

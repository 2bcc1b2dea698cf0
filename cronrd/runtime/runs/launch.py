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
import resource
import secrets
import shlex
import shutil
from typing import Callable, Iterable
from dataclasses import dataclass

from ...errors import CronrdError
from ...jobspec import JobSpec
from ...schedule import iso_utc
from ...state import checkpoints as CK
from ...model.run import Run

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

# env_file: read by the same shell, as the job's user (so a job cannot read
# through it what its user may not), after the defaults (PATH, HOME...) and
# before env: and CRONRD_*, which win. A subset of systemd's
# EnvironmentFile=: NAME=VALUE lines, blank lines, comments (# or ;),
# whitespace around NAME and VALUE dropped, a value in one pair of "..." or
# '...' taken literally; no escapes, no line continuations, nothing expanded.
# A bad line fails the run with FILE:LINE and what is wrong; "-/path" is a
# file that may be missing. The read is bounded (256 KiB, 10,000 lines).
ENV_FILE_FUNCTION = """\
_cronrd_env_file() {
  __cr_f=$1 __cr_n=0 __cr_b=0
  if [ ! -e "$__cr_f" ]; then
    [ -n "$2" ] && return 0
    echo "cronrd: run not started: env_file $__cr_f does not exist or user $USER may not reach it" >&2; exit 126
  fi
  if [ ! -f "$__cr_f" ] || [ ! -r "$__cr_f" ]; then
    if [ -f "$__cr_f" ]; then __cr_w="user $USER may not read it (permission denied)"; else __cr_w="it is not a regular file"; fi
    echo "cronrd: run not started: cannot read env_file $__cr_f: $__cr_w" >&2; exit 126
  fi
  while IFS= read -r __cr_l || [ -n "$__cr_l" ]; do
    __cr_n=$((__cr_n + 1)) __cr_b=$((__cr_b + ${#__cr_l} + 1))
    if [ "$__cr_b" -gt 262144 ] || [ "$__cr_n" -gt 10000 ]; then
      echo "cronrd: run not started: $__cr_f:$__cr_n: env_file is over 256 KiB or 10000 lines" >&2; exit 126
    fi
    __cr_l=${__cr_l#"${__cr_l%%[![:space:]]*}"}
    case $__cr_l in ""|"#"*|";"*) continue ;; *=*) ;; *)
      echo "cronrd: run not started: $__cr_f:$__cr_n: expected NAME=VALUE" >&2; exit 126 ;; esac
    __cr_k=${__cr_l%%=*} __cr_v=${__cr_l#*=}
    __cr_k=${__cr_k%"${__cr_k##*[![:space:]]}"}
    __cr_v=${__cr_v#"${__cr_v%%[![:space:]]*}"} __cr_v=${__cr_v%"${__cr_v##*[![:space:]]}"}
    case $__cr_k in ""|[0-9]*|*[!A-Za-z0-9_]*)
      echo "cronrd: run not started: $__cr_f:$__cr_n: invalid variable name '$__cr_k': use letters, digits and '_', not starting with a digit" >&2; exit 126 ;;
    CRONRD_*)
      echo "cronrd: run not started: $__cr_f:$__cr_n: variable $__cr_k is reserved: cronrd sets CRONRD_* variables itself" >&2; exit 126 ;; esac
    case $__cr_v in
      \\"*\\"|\\'*\\') [ "${#__cr_v}" -ge 2 ] || { echo "cronrd: run not started: $__cr_f:$__cr_n: unterminated quote in the value of $__cr_k" >&2; exit 126; }
        __cr_v=${__cr_v#?} __cr_v=${__cr_v%?} ;;
      \\"*|\\'*) echo "cronrd: run not started: $__cr_f:$__cr_n: unterminated quote in the value of $__cr_k (values are one line)" >&2; exit 126 ;;
    esac
    export "$__cr_k=$__cr_v"
  done < "$__cr_f"
  unset __cr_f __cr_n __cr_b __cr_l __cr_k __cr_v __cr_w
}
"""


def env_file_lines(env_file: str) -> str:
    """The lines of the environment script that read ``env_file``."""
    path, optional = env_file.removeprefix("-"), env_file.startswith("-")
    return (f"{ENV_FILE_FUNCTION}_cronrd_env_file {shlex.quote(path)} "
            f"{'optional' if optional else chr(39) * 2}\n")


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
    switch: bool                   # prepared by a shell as the job's user (READY handshake)
    ids: dict | None               # uid/gid/groups the job's process takes itself
    env_script: bytes | None       # the job's environment, for the preparing shell
    controls: tuple = ()           # applied by the job's process before its exec (controls())


DEFAULT_SHELL = "/bin/sh"
IOCLASS_NUMBERS = {"none": 0, "realtime": 1, "best-effort": 2, "idle": 3}
IOPRIO_DEFAULT_LEVEL = 4  # what the kernel gives best-effort by default


def controls(spec: JobSpec, cgroup: str | None = None,
             controllers: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The process controls of ``spec`` as the supervisors apply them to the
    job's process, in order, just before it execs (so, for a job of
    another user, before the switch: a negative nice, the realtime I/O
    class and limits above the daemon's need root, as they do in
    systemd). One string each: ``cgroup DIR`` (the run's cgroup, whose
    ``controllers`` then enforce memory, tasks and cpu),
    ``rlimit RESOURCE SOFT HARD LABEL`` (what no cgroup enforces),
    ``nice N``, ``ioprio VALUE``, ``umask MODE`` (numbers in decimal)."""
    out: list[str] = []
    if cgroup is not None:
        out.append(f"cgroup {cgroup}")
    lim = spec.limits
    if lim is not None:
        for value, res, label, ctl in (
                (lim.memory, resource.RLIMIT_AS, "limits.memory", "memory"),
                (lim.tasks, resource.RLIMIT_NPROC, "limits.tasks", "pids"),
                (lim.open_files, resource.RLIMIT_NOFILE, "limits.open_files", None)):
            if value is not None and not (cgroup is not None and ctl in controllers):
                out.append(f"rlimit {res} {value} {value} {label}")
    if spec.nice is not None:
        out.append(f"nice {spec.nice}")
    if spec.ioclass is not None or spec.ioprio is not None:
        cls = IOCLASS_NUMBERS[spec.ioclass or "best-effort"]
        level = spec.ioprio if spec.ioprio is not None else (
            IOPRIO_DEFAULT_LEVEL if cls in (1, 2) else 0)
        out.append(f"ioprio {(cls << 13) | level}")
    if spec.umask is not None:
        out.append(f"umask {spec.umask}")
    return tuple(out)


def launch(run: Run, spec: JobSpec, ident: dict, *, node_id: str, log_path: str,
           job_nofile: int, cgroup: str | None = None,
           controllers: frozenset[str] = frozenset(),
           workflow: dict[str, str] | None = None,
           wrap: Callable[[list[str], Iterable[str]], list[str]] | None = None) -> Launch:
    """What the supervisor execs for ``run``. Raises CronrdError when the run
    cannot be prepared here (its working directory or shell is missing...).
    ``workflow``: the run's idempotency key, interval and parameters
    (decisions/run_env.py). ``wrap(command, env names)``: the command as
    the run's executor runs it (runtime/runs/executors.py; None: as is);
    the shell is then not this host's to check."""
    fire_iso = iso_utc(run.fire_time)
    shell = spec.shell or DEFAULT_SHELL
    base = {"PATH": DEFAULT_PATH, "SHELL": shell, "HOME": ident["home"],
            "USER": ident["user"], "LOGNAME": ident["user"]}
    if "LANG" in os.environ:
        base["LANG"] = os.environ["LANG"]
    own = dict(spec.env)
    own.update({
        "CRONRD_JOB": run.job, "CRONRD_RUN_ID": str(run.run_id),
        "CRONRD_FIRE_TIME": fire_iso, "CRONRD_ATTEMPT": str(run.attempt),
        "CRONRD_RUN_KEY": run.key,
        "CRONRD_NODE": node_id, "CRONRD_LOG_PATH": log_path,
    })
    if workflow:
        own.update(workflow)
    env = {**base, **own}
    if isinstance(spec.command, str):
        if spec.shell is not None and wrap is None and not os.access(shell, os.X_OK):
            raise CronrdError(f"shell {shell} does not exist or is not executable on node "
                              f"{node_id}; install it there or fix shell: in {spec.source}")
        command = [shell, "-c", spec.command]
    else:
        command = list(spec.command)
    if wrap is not None:
        command = wrap(command, own.keys())
    ctl = controls(spec, cgroup, controllers)
    if spec.limits is not None and spec.limits.open_files is not None:
        job_nofile = spec.limits.open_files  # the gate shell sets the soft limit to it
    argv = ["/bin/sh", "-c", GATE_SCRIPT, "cronrd-run", str(job_nofile), *command]
    cwd = spec.working_dir or ident["home"]
    if not os.path.isdir(cwd):
        cwd_hint = "fix working_dir" if spec.working_dir else "create it"
        raise CronrdError(f"working directory {cwd} does not exist on node "
                          f"{node_id}; {cwd_hint} in {spec.source}")
    if not ident["switch"] and spec.env_file is None:
        return Launch(argv, env, cwd, ident["user"], False, None, None, ctl)
    # Prepared by a shell that runs as the job's user (DROP_SCRIPT): the
    # environment, with env_file read there, between the defaults and env:.
    script = env_script(base)
    if spec.env_file is not None:
        script += env_file_lines(spec.env_file).encode()
    script += env_script(own)
    argv = [*ident["prefix"], "/bin/sh", "-c", DROP_SCRIPT, "cronrd-start", cwd,
            ident["user"], *argv]
    return Launch(argv, {"PATH": CLEAN_PATH}, "/", ident["user"], True, ident["ids"], script,
                  ctl)


def host_warnings(spec: JobSpec, controllers: frozenset[str] | None = None) -> list[str]:
    """What this host will not do as ``spec`` asks (for ``cronrd validate``):
    a missing shell or env_file, limits no cgroup v2 controller enforces.
    ``controllers``: the host's cgroup v2 controllers (default: read them)."""
    out = []
    if spec.executor_type == "container":
        # the shell, user and limits are the image's and podman's, not this host's
        from .executors import find_podman
        if not find_podman():
            out.append("executor: container needs podman, which this host does not have; "
                       "the job runs only on members that have it (apt-get install podman "
                       "here to run it here too)")
        ignored = [k for k in ("nice", "ioclass", "ioprio", "umask")
                   if getattr(spec, k) is not None]
        if ignored:
            out.append(f"{', '.join(ignored)}: not applied to a container job (they would "
                       "hold for the podman client, not the container's processes)")
        return out
    if spec.shell is not None and isinstance(spec.command, str) and \
            not os.access(spec.shell, os.X_OK):
        out.append(f"shell {spec.shell} does not exist or is not executable on this host; "
                   "the job's runs fail here until it is installed")
    if spec.env_file is not None and not spec.env_file.startswith("-") and \
            not os.path.exists(spec.env_file):
        out.append(f"env_file {spec.env_file} does not exist on this host; the job's runs "
                   f"fail here until it does (env_file: -{spec.env_file} for a file that may "
                   "be missing)")
    lim = spec.limits
    if lim is None:
        return out
    if controllers is None:
        from .cgroups import host_controllers
        controllers = host_controllers()[1]
    user = spec.user or "root"
    for value, ctl, key, instead in (
            (lim.memory, "memory", "limits.memory",
             "it is enforced as RLIMIT_AS instead (address space: memory reserved but never "
             "used counts too)"),
            (lim.tasks, "pids", "limits.tasks",
             "the limit is not enforced (RLIMIT_NPROC, the fallback, does not hold for root)"
             if user in ("root", "0") else
             f"it is enforced as RLIMIT_NPROC instead, which counts every process of user "
             f"{user}, not only this job's"),
            (lim.cpu, "cpu", "limits.cpu", "the limit is not enforced")):
        if value is not None and ctl not in controllers:
            out.append(f"{key}: this host has no cgroup v2 {ctl} controller to delegate to "
                       f"cronrd; {instead}")
    return out


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


def attempt_env(conn, run: Run, socket: str) -> tuple[dict[str, str], str]:
    """The variables an attempt of ``run`` gets for its checkpoints and
    heartbeats, and the hash of its new token (for RunStarted)."""
    token = secrets.token_hex(32)
    env = {"CRONRD_RUN_TOKEN": token, "CRONRD_SOCKET": socket}
    env.update(CK.env(conn, run))
    return env, CK.token_hash(token)

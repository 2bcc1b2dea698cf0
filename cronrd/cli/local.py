"""Commands that work on this host's files without the daemon: daemon,
check-config, validate, import-crontab, next, completion."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import CronrdError, UsageError
from ..runtime.clock import Clock
from .base import Ctx, complete_jobs, main

if TYPE_CHECKING:
    from ..jobspec import JobSpec


# -- daemon ------------------------------------------------------------------------------
@click.command()
@click.pass_obj
def daemon(obj: Ctx):
    """Run the daemon in the foreground (systemd starts it this way)."""
    from ..config import config_path, load_config
    from ..errors import ConfigError
    from ..runtime.daemon import run_daemon
    path = config_path(obj.config_arg)
    try:
        cfg = load_config(path, daemon_files=True)
    except ConfigError as exc:
        _print_config_problems(exc)
        them = "them" if len(exc.problems) > 1 else "it"
        click.echo(f"cronrd: {_count_problems(exc)} in {path}; the daemon did not start. Fix "
                   f"{them}, then check again with `cronrd check-config {path}`", err=True)
        sys.exit(1)
    sys.exit(run_daemon(cfg))


@click.command("worker")
@click.pass_obj
def worker(obj: Ctx):
    """Run a worker agent in the foreground: it runs the runs the cluster's
    leader places on it, without being a cluster member (its config has a
    worker: section; see `man 8 cronrd`, WORKERS)."""
    from ..config import config_path, load_config
    from ..errors import ConfigError
    from ..runtime.worker.agent import run_worker
    path = config_path(obj.config_arg)
    try:
        cfg = load_config(path, daemon_files=True)
        if cfg.worker is None:
            raise ConfigError(f"{path}: `cronrd worker` needs a worker: section (servers, "
                              "tls, tags); a config with cluster: is a member's, started "
                              "with `cronrd daemon`")
    except ConfigError as exc:
        if not exc.problems:
            click.echo(f"cronrd: {exc}", err=True)
            sys.exit(1)
        _print_config_problems(exc)
        click.echo(f"cronrd: {_count_problems(exc)} in {path}; the worker did not start. Fix "
                   f"them, then check again with `cronrd check-config {path}`", err=True)
        sys.exit(1)
    sys.exit(run_worker(cfg))


@click.command("check-config")
@click.argument("file", required=False, type=click.Path())
@click.pass_obj
def check_config(obj: Ctx, file):
    """Check the daemon config FILE (default: the one the daemon reads: --config,
    $CRONRD_CONFIG or /etc/cronrd/cronrd.yaml) and the directories and certificate
    files it names; print every problem as FILE:LINE:COL: message. Exit 1 on any
    problem."""
    from ..config import config_path, format_address, load_config
    from ..errors import ConfigError
    path = file or config_path(obj.config_arg)
    try:
        cfg = load_config(path, daemon_files=True, jobs_dir_exists=True)
    except ConfigError as exc:
        _print_config_problems(exc)
        click.echo(f"{_count_problems(exc)} in {path}", err=True)
        sys.exit(1)
    if cfg.cluster is None:
        where = "single host (no cluster section)"
    else:
        c = cfg.cluster
        members = ", ".join(c.initial_members)
        where = (f"cluster node listening on {format_address(c.listen)}, "
                 f"{'joining' if c.join else 'initial members'} {members}, "
                 f"{'mutual TLS' if c.tls else 'INSECURE (no TLS)'}")
    n = cfg.notifications
    notes = (f"; notifiers {', '.join(f'{k} ({v.type})' for k, v in n.notifiers.items())}"
             + (f", default notify: {', '.join(r.to for r in n.default)}" if n.default else "")
             if n.notifiers else "")
    click.echo(f"{path}: ok: node {cfg.node_id}, jobs_dir {cfg.jobs_dir}, data_dir "
               f"{cfg.data_dir}, {where}{notes}")


def _print_config_problems(exc) -> None:
    """The problems of a config, one line each (FILE:LINE:COL: message) on stdout."""
    for line in str(exc).splitlines():
        click.echo(line)


def _count_problems(exc) -> str:
    n = len(exc.problems) or 1
    return f"{n} problem{'s' if n != 1 else ''}"


# -- offline commands ---------------------------------------------------------------------
@click.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--no-permissions", is_flag=True,
              help="Skip the ownership and mode checks (for files not yet installed).")
@click.pass_obj
def validate(obj: Ctx, paths, no_permissions):
    """Check job files (default: the configured jobs_dir); exit 1 on any problem.

    A daemon config among the files is named as one (not checked as a job
    file: `cronrd check-config FILE` checks it) and also makes the exit code 1."""
    from ..config import daemon_config_jobs_dir
    from ..jobspec import Problem, load_job_file, load_jobs_dir
    try:
        cfg = obj.try_config()
    except CronrdError:
        cfg = None  # (paths given: the jobs are checked without the config's pools)
        if not paths:
            raise
    if not paths:
        paths = (cfg.jobs_dir if cfg else "/etc/cronrd.d",)
    # A job's pool must be one of the daemon config's (when there is a config).
    pools = None if cfg is None else {p.name: p.slots for p in cfg.pools}
    uids = None
    problems: list[Problem] = []
    seen: dict[str, JobSpec] = {}
    jobs = configs = 0
    hinted: set[str] = set()  # directories a line has pointed at already
    for path in paths:
        if os.path.isdir(path):
            res = load_jobs_dir(path, allowed_uids=uids, pools=pools) if not no_permissions \
                else _load_dir_unchecked(path, pools)
            files = res.files
        else:
            if not os.path.exists(path):
                raise UsageError(f"{path}: no such file or directory")
            fr = load_job_file(path, allowed_uids=uids, pools=pools) if not no_permissions \
                else _load_file_unchecked(path, pools)
            files = (fr,)
        for fr in files:
            # A config never parses as a job (it has no schedule): only files
            # with problems are looked at again.
            jobs_dir = daemon_config_jobs_dir(fr.path) if fr.problems else None
            if jobs_dir is not None:
                configs += 1
                click.echo(_not_a_job_file(fr.path, jobs_dir, paths + tuple(hinted)))
                hinted.add(jobs_dir)
                continue
            problems.extend(fr.problems)
            for job in fr.jobs:
                missing = [n for n in (job.calendar.names if job.calendar else ())
                           if cfg is not None and n not in {c.name for c in cfg.calendars}]
                if missing:
                    problems.append(Problem(
                        job.source, job.calendar.names_line if job.calendar else job.line, 0,
                        f"job {job.name!r}: calendar names {', '.join(map(repr, missing))}, "
                        "which the daemon config does not define (it defines: "
                        f"{', '.join(c.name for c in cfg.calendars) if cfg else 'none'}); "
                        "add it under calendars: in the daemon config or fix the name"))
                if job.name in seen:
                    problems.append(_dup(job, seen[job.name]))
                else:
                    seen[job.name] = job
                    jobs += 1
        if os.path.isdir(path):
            for sub in _subdirs_with_job_files(path, paths + tuple(hinted)):
                click.echo(f"{sub}: a subdirectory with YAML files, which neither validate "
                           f"nor the daemon reads; check them with `cronrd validate {sub}`")
    # depends_on across every file given: parents must exist, no cycles
    from ..jobspec.dependencies import check_dependencies
    problems.extend(check_dependencies(seen))
    for p in problems:
        click.echo(str(p))
    # What this host will not do as a valid job asks (not problems: the file
    # may be meant for other hosts too).
    from ..runtime.runs.launch import host_warnings
    from ..runtime.runs.cgroups import host_controllers
    controllers = host_controllers()[1]
    warnings = [f"{job.source}:{job.line}:1: warning: job {job.name}: {w}"
                for job in seen.values() for w in host_warnings(job, controllers)]
    warnings += _notify_warnings(obj, seen.values())
    warnings += _past_at_warnings(obj, seen.values())
    for w in warnings:
        click.echo(w)
    noted = f", {len(warnings)} warning(s) about this host" if warnings else ""
    skipped = f"{configs} daemon config(s) not checked; " if configs else ""
    if problems or configs:
        click.echo(f"{len(problems)} problem(s); {skipped}{jobs} job(s) valid{noted}",
                   err=True)
        sys.exit(1)
    click.echo(f"{jobs} job(s) valid{noted}", err=True)


def _past_at_warnings(obj: Ctx, jobs) -> list[str]:
    """Jobs whose `@at` time has passed: loaded now, they never fire (a
    job's schedule starts when it is first loaded)."""
    from ..schedule import iso_utc, make_trigger, parse_schedule
    out = []
    for job in jobs:
        if not job.schedule.lstrip().lower().startswith("@at"):
            continue
        try:
            cfg = obj.try_config()
        except CronrdError:
            cfg = None
        at = make_trigger(parse_schedule(job.schedule),
                          job.timezone or (cfg.timezone if cfg else "UTC")).next_after(-1)
        if at is not None and at <= Clock().now():
            out.append(f"{job.source}:{job.line}:1: warning: job {job.name}: its @at time "
                       f"({iso_utc(at)}) has passed: a job loaded now never fires (its "
                       "schedule starts when it is first loaded); a one-off run now is "
                       f"`cronrd run-now {job.name}`")
    return out


def _notify_warnings(obj: Ctx, jobs) -> list[str]:
    """Jobs whose notify names a notifier this host's daemon config does not
    define (a warning: its events would reach nobody there)."""
    if not any(job.notify for job in jobs):
        return []
    try:
        cfg = obj.try_config()
    except CronrdError:
        return []  # `cronrd check-config` says what is wrong with it
    if cfg is None:
        return []
    known = cfg.notifications.notifiers
    return [f"{job.source}:{job.line}:1: warning: job {job.name}: notify names {r.to!r}, which "
            f"the daemon config {cfg.path} does not define under notifiers: (defined: "
            f"{', '.join(known) or 'none'}); its events would reach nobody there"
            for job in jobs for r in job.notify or () if r.to not in known]


def _subdirs_with_job_files(path: str, checked: tuple[str, ...]) -> list[str]:
    """The subdirectories of ``path`` (not hidden, not among ``checked``) that
    hold files with job-file names."""
    from ..jobspec import is_job_file_name
    given = {os.path.abspath(p) for p in checked}
    out = []
    try:
        entries = sorted(e.name for e in os.scandir(path)
                         if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return []
    for name in entries:
        sub = os.path.join(path, name)
        if os.path.abspath(sub) in given:
            continue
        try:
            if any(is_job_file_name(e.name) for e in os.scandir(sub)):
                out.append(sub)
        except OSError:
            continue
    return out


def _not_a_job_file(path: str, jobs_dir: str, checked: tuple[str, ...]) -> str:
    """The line validate prints for a daemon config found among job files
    (pointing at its jobs_dir unless that is being checked already)."""
    line = (f"{path}: this is a daemon config, not a job file; check it with "
            f"`cronrd check-config {path}`")
    if os.path.isdir(jobs_dir) and jobs_dir not in {os.path.abspath(p) for p in checked}:
        rel = os.path.relpath(jobs_dir)
        shown = rel if not rel.startswith("..") else jobs_dir
        line += f"; its jobs_dir is {shown}: `cronrd validate {shown}`"
    return line


def _dup(job, first):
    from ..jobspec import Problem
    return Problem(job.source, job.line, 1, f"duplicate job name {job.name!r} (first defined "
                   f"at {first.source}:{first.line}); rename one of them")


def _load_file_unchecked(path, pools=None):
    from ..jobspec import parse_job_text
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_job_text(f.read(), path, pools)


def _load_dir_unchecked(path, pools=None):
    from ..jobspec import load_jobs_dir
    return load_jobs_dir(path, allowed_uids=None, check_permissions=False, pools=pools)


@click.command("import-crontab")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--system/--user", "system", default=None,
              help="Whether FILE has a user column (/etc/crontab, /etc/cron.d). Default: "
                   "system for /etc/crontab and /etc/cron.d/*, user for cron's spool files, "
                   "otherwise decided from the lines (stderr says which and why).")
@click.option("--owner", metavar="USER", help="For a user crontab: the user its jobs run "
              "as (default: from the spool path, e.g. /var/spool/cron/crontabs/USER).")
@click.option("--include-commented", is_flag=True, help="Convert commented-out job lines "
              "too, as jobs with enabled: false.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the YAML here.")
@click.option("--watch", is_flag=True, help="Make watches instead of jobs: the lines keep "
              "running where they are and ping cronrd (each watch's comment gives its line's "
              "change, `&& cronrd ping NAME`); cronrd alerts when one does not.")
@click.option("--grace", default="1h", show_default=True, metavar="DURATION",
              help="With --watch: how long after its fire time a line's ping may come.")
@click.option("--url", metavar="URL", help="With --watch: the lines ping through this cronrd "
              "node's API (a host that runs no cronrd).")
def import_crontab(file, system, owner, include_commented, output, watch, grace, url):
    """Convert a crontab (FILE, or - for stdin) into cronrd job YAML.

    Exit 0 when every line was converted (warnings allowed), 1 when a line
    could not be (each is named), 2 for usage errors."""
    from ..crontab_import import convert_crontab
    if system and owner:
        raise UsageError("--owner is for a user crontab; a system crontab (--system) names "
                         "the user on each line: drop --owner or --system")
    if file == "-":
        path, text = "<stdin>", sys.stdin.buffer.read().decode("utf-8", errors="replace")
    else:
        path = file
        with open(file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    res = convert_crontab(text, path=path, system=system, user=owner,
                          include_commented=include_commented)
    if (grace != "1h" or url) and not watch:
        raise UsageError("--grace and --url go with --watch")
    if watch:
        from ..crontab_import import watches_from
        from ..schedule import parse_duration
        try:
            parse_duration(grace)
        except CronrdError as exc:
            raise UsageError(f"--grace {grace!r}: {exc}") from None
        res.yaml_text = watches_from(res, text, path, grace, url)
    if res.system and owner:
        raise UsageError(f"{path} is read as a system crontab ({res.format_why}), which names "
                         f"the user on each line, so --owner does not apply: drop --owner, or "
                         f"pass --user to read it as {owner}'s crontab")
    if res.format_note:
        click.echo(res.format_note, err=True)
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(res.yaml_text)
        except OSError as e:
            raise CronrdError(f"{output}: cannot write the job file ({e.strerror}); check that "
                              "its directory exists and is writable, or leave out -o to print "
                              "it") from None
    else:
        click.echo(res.yaml_text, nl=False)
    for p in res.warnings:
        where = f"{p.path}:{p.line}:{p.col}" if p.line else p.path
        click.echo(f"{where}: warning: {p.message}", err=True)
    for p in res.problems:
        click.echo(str(p), err=True)
    click.echo(f"{len(res.jobs)} job(s) converted, {len(res.problems)} line(s) not converted, "
               f"{len(res.warnings)} warning(s)", err=True)
    if res.problems:
        sys.exit(1)


@click.command("next")
@click.argument("what", shell_complete=complete_jobs)
@click.option("--count", "-n", default=5, show_default=True, type=click.IntRange(1, 10000))
@click.option("--timezone", "tz", metavar="TZ", help="IANA zone (default: the job's, else "
              "the daemon's).")
@click.option("--after", metavar="ISO-TIME", help="Start after this time (default: now).")
@click.pass_obj
def next_cmd(obj: Ctx, what, count, tz, after):
    """Print the next fire times of a schedule expression or a job, and a
    job's planned runs (`run-now --at`)."""
    from ..schedule import format_fire, host_timezone, make_trigger, parse_iso, parse_schedule
    expr, job_tz, plans = _schedule_of(obj, what)
    cfg = obj.try_config()
    zone = tz or job_tz or (cfg.timezone if cfg else host_timezone())
    sched = parse_schedule(expr)
    t = parse_iso(after) if after else int(Clock().now())
    view = plans if isinstance(plans, dict) else None
    if view is not None:
        plans = view.get("planned") or []
    lines: list[tuple[int, str]] = [
        (parse_iso(p["due"]), f"  planned run {p['plan_id']} (run-now --at, by {p['by']}; "
                              f"`cronrd cancel --plan {p['plan_id']}` removes it)")
        for p in plans if parse_iso(p["due"]) > t]
    if view is not None:   # a job with a calendar: the daemon's fire times
        for fire in view["next_fires"]:
            why = view["next_skips"].get(fire)
            lines.append((parse_iso(fire), f"  skipped: {why}" if why else ""))
    elif sched.kind == "reboot":
        click.echo("@reboot fires once when cronrd starts after the host boots")
    elif sched.kind == "after":
        click.echo("@after has no time of its own: the job runs once its parents' runs "
                   "(depends_on) allow; `cronrd graph` shows them")
    else:
        trigger = make_trigger(sched, zone)
        f = t
        for _ in range(count):
            fire = trigger.next_after(f)
            if fire is None:
                break
            f = fire
            lines.append((fire, ""))
        if sched.kind == "at" and not any(not note for _, note in lines):
            at = trigger.next_after(-1)
            click.echo(f"{expr}: its one fire time ({format_fire(at, zone) if at else '-'}) "
                       f"is not after {format_fire(t, zone)}: the job is done")
    for fire, note in sorted(lines)[:count]:
        click.echo(format_fire(fire, zone) + note)


def _schedule_of(obj: Ctx, what: str) -> tuple[str, str | None, Any]:
    """(expression, timezone, planned runs) for an expression or a job name
    (for a job with a calendar, the daemon's view of it instead of the
    planned runs: its next fire times under the calendar)."""
    if what.startswith("@") or " " in what.strip():
        return what, None, []
    try:
        job = obj.client(timeout=5).call("job", {"name": what})
        if job["spec"].get("calendar") is not None:
            # (only the daemon knows the calendars in force; --after and
            # --timezone do not apply: its next fire times from now)
            return job["schedule"], job["spec"].get("timezone"), obj.client(timeout=5).call(
                "job", {"name": what, "next": 100})
        return job["schedule"], job["spec"].get("timezone"), job.get("planned") or []
    except CronrdError:
        pass
    cfg = obj.try_config()
    jobs_dir = cfg.jobs_dir if cfg else "/etc/cronrd.d"
    from ..jobspec import load_jobs_dir
    res = load_jobs_dir(jobs_dir, allowed_uids=None, check_permissions=False) \
        if os.path.isdir(jobs_dir) else None
    if res is not None and what in res.jobs:
        spec = res.jobs[what]
        if spec.calendar is not None:
            click.echo(f"warning: {what}'s calendar is not applied here: only a running "
                       "daemon knows the calendars in force; these are its schedule's fire "
                       "times", err=True)
        return spec.schedule, spec.timezone, []
    raise UsageError(f"{what!r} is neither a schedule expression nor a known job; quote "
                     "an expression, e.g. cronrd next '*/5 * * * *'")


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the completion script for SHELL (commands, options, job names).

    bash: eval "$(cronrd completion bash)" in ~/.bashrc; zsh: eval "$(cronrd
    completion zsh)" in ~/.zshrc; fish: cronrd completion fish >
    ~/.config/fish/completions/cronrd.fish. The Debian package installs all
    three."""
    from click.shell_completion import get_completion_class
    cls = get_completion_class(shell)
    click.echo(cls(main, {}, "cronrd", "_CRONRD_COMPLETE").source())

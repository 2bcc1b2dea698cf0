"""The cronrd command line: parse, ask the daemon, print. Exit 1 on errors,
2 on usage errors."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import CronrdError, UsageError

if TYPE_CHECKING:
    from .client import Client

# The CLI is interactive: modules a command does not need are imported lazily
# (`cronrd --version` must not load YAML, SQLite or croniter).
DEFAULT_CONFIG_PATH = "/etc/cronrd/cronrd.yaml"  # = config.DEFAULT_CONFIG_PATH

DEFAULT_SOCKET = "/run/cronrd/cronrd.sock"


class Ctx:
    def __init__(self, config: str | None, socket: str | None):
        self.config_arg = config
        self.socket_arg = socket

    def config(self):
        from .config import config_path, load_config
        return load_config(config_path(self.config_arg))

    def try_config(self):
        """The config if one is there; None when the default path is absent."""
        from .config import config_path, load_config
        path = config_path(self.config_arg)
        if path == DEFAULT_CONFIG_PATH and not os.path.exists(path):
            return None
        return load_config(path)

    def socket(self) -> str:
        if self.socket_arg:
            return self.socket_arg
        cfg = self.try_config()
        return cfg.socket if cfg is not None else DEFAULT_SOCKET

    def client(self, timeout: float | None = 30.0) -> "Client":
        from .client import Client
        return Client(self.socket(), timeout=timeout)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def table(rows: list[list[Any]], headers: list[str]) -> None:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


class Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            click.echo(f"cronrd: {exc}", err=True)
            sys.exit(2)
        except CronrdError as exc:
            click.echo(f"cronrd: {exc}", err=True)
            sys.exit(1)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cronrd")
@click.option("--config", "-c", metavar="FILE", help="Daemon config (default: $CRONRD_CONFIG "
              f"or {DEFAULT_CONFIG_PATH}).")
@click.option("--socket", metavar="PATH", help="Control socket (default: from the config).")
@click.pass_context
def main(ctx, config, socket):
    """cronrd: a fault-tolerant cron replacement."""
    ctx.obj = Ctx(config, socket)


# -- daemon ------------------------------------------------------------------------------
@main.command()
@click.pass_obj
def daemon(obj: Ctx):
    """Run the daemon in the foreground (systemd starts it this way)."""
    from .runtime.daemon import run_daemon
    sys.exit(run_daemon(obj.config()))


# -- status / jobs / runs -----------------------------------------------------------------
@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Ctx, as_json):
    """Show this node's role, jobs and running runs."""
    st = obj.client().call("status")
    if as_json:
        emit_json(st)
        return
    starting = "" if st.get("ready", True) else ", starting up"
    click.echo(f"node      {st['node_id']} ({st['role']}, leader {st['leader']}{starting})")
    click.echo(f"version   {st['version']}, pid {st['pid']}, up {st['uptime_s']:.0f}s")
    click.echo(f"jobs      {st['jobs']} ({st['paused']} paused), {st['running']} running, "
               f"{st['assigned']} about to start")
    click.echo(f"state     applied index {st['applied_index']}, digest "
               f"{st['state_digest'][:16]}")
    click.echo(f"paths     socket {st['socket']}\n          data {st['data_dir']}\n"
               f"          logs {st['log_dir']}\n          jobs {st['jobs_dir']}")
    if st["problems"]:
        click.echo(f"problems  {len(st['problems'])} in job files (`cronrd validate`):")
        for p in st["problems"]:
            click.echo(f"  {p}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def jobs(obj: Ctx, as_json):
    """List jobs with their next fire time and last run."""
    rows = obj.client().call("jobs")
    if as_json:
        emit_json(rows)
        return
    out = []
    for j in rows:
        state = "paused" if j["paused"] else ("disabled" if not j["enabled"] else "active")
        last = j["last_run"]
        out.append([j["name"], j["schedule"], state, j["next_fire"],
                    f"{last['state']} {last['fire_time']}" if last else None])
    table(out, ["job", "schedule", "state", "next fire", "last run"])


@main.command()
@click.argument("job", required=False)
@click.option("--state", "state", metavar="STATE", help="Only runs in this state.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def runs(obj: Ctx, job, state, limit, as_json):
    """List recent runs (newest first), with skip and failure reasons."""
    res = obj.client().call("runs", {"job": job, "state": state, "limit": limit})
    if as_json:
        emit_json(res["runs"])
        return
    table([[r["run_id"], r["job"], r["kind"], r["fire_time"], r["attempt"], r["state"],
            r["exit_code"] if r["signal"] is None else f"sig {r['signal']}", r["reason"]]
           for r in res["runs"]],
          ["id", "job", "kind", "fire time", "try", "state", "exit", "reason"])
    for g in res["gaps"]:
        click.echo(f"gap: {g['job']} skipped {g['count']} fire times from {g['first']} to "
                   f"{g['last']}: {g['reason']}")


@main.command()
@click.argument("job")
@click.option("--run", "run_id", type=int, metavar="ID", help="This run (default: latest).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@click.pass_obj
def logs(obj: Ctx, job, run_id, follow):
    """Print the output of a job's latest run (or --run ID)."""
    def show(msg):
        if "data" in msg:
            sys.stdout.write(msg["data"])
            sys.stdout.flush()
    obj.client(timeout=None if follow else 30.0).call(
        "logs", {"job": job, "run_id": run_id, "follow": follow}, on_message=show)


@main.command("run-now")
@click.argument("job")
@click.option("--wait", is_flag=True, help="Wait for the run (and its retries); exit with "
              "its exit code.")
@click.pass_obj
def run_now(obj: Ctx, job, wait):
    """Start a job now, outside its schedule."""
    def show(msg):
        if "event" in msg:
            r = msg["event"]
            click.echo(f"run {r['run_id']} attempt {r['attempt']}: {r['state']}"
                       + (f" ({r['reason']})" if r["reason"] else ""), err=True)
    res = obj.client(timeout=None if wait else 30.0).call(
        "run_now", {"job": job, "wait": wait}, on_message=show)
    if not wait:
        click.echo(f"started run {res['run_id']} of {job}; `cronrd logs {job} --run "
                   f"{res['run_id']} --follow` shows its output")
        return
    sys.exit(wait_exit_code(res))


def wait_exit_code(run: dict) -> int:
    """The exit code of `run-now --wait`: the job's own, and never 0 unless
    the run succeeded (a job that traps SIGTERM on timeout and exits 0 still
    timed out)."""
    if run["state"] == "succeeded":
        return 0
    if run["signal"]:
        return 128 + run["signal"]
    return run["exit_code"] or 1


@main.command()
@click.argument("job")
@click.pass_obj
def pause(obj: Ctx, job):
    """Stop scheduling a job; its fire times are recorded as skipped."""
    res = obj.client().call("pause", {"job": job})
    click.echo(f"{job} paused" if res["changed"] else f"{job} was already paused")


@main.command()
@click.argument("job")
@click.pass_obj
def resume(obj: Ctx, job):
    """Schedule a paused job again (missed fires stay skipped)."""
    res = obj.client().call("resume", {"job": job})
    click.echo(f"{job} resumed" if res["changed"] else f"{job} was not paused")


@main.command()
@click.pass_obj
def reload(obj: Ctx):
    """Re-read the job files now (as SIGHUP does)."""
    res = obj.client().call("reload")
    click.echo(f"{res['jobs']} jobs, {res['changes']} changed")
    for p in res["problems"]:
        click.echo(p, err=True)
    if res["problems"]:
        sys.exit(1)


# -- offline commands ---------------------------------------------------------------------
@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--no-permissions", is_flag=True,
              help="Skip the ownership and mode checks (for files not yet installed).")
@click.pass_obj
def validate(obj: Ctx, paths, no_permissions):
    """Check job files (default: the configured jobs_dir); exit 1 on any problem."""
    from .jobspec import DirResult, load_job_file, load_jobs_dir
    if not paths:
        cfg = obj.try_config()
        paths = (cfg.jobs_dir if cfg else "/etc/cronrd.d",)
    uids = None
    problems, jobs, seen = [], 0, {}
    for path in paths:
        if os.path.isdir(path):
            res = load_jobs_dir(path, allowed_uids=uids) if not no_permissions else \
                _load_dir_unchecked(path)
            files = res.files
            problems.extend(res.problems)
        else:
            if not os.path.exists(path):
                raise UsageError(f"{path}: no such file or directory")
            fr = load_job_file(path, allowed_uids=uids) if not no_permissions else \
                _load_file_unchecked(path)
            files = (fr,)
            problems.extend(fr.problems)
        for fr in files:
            for job in fr.jobs:
                if job.name in seen:
                    problems.append(_dup(job, seen[job.name]))
                else:
                    seen[job.name] = job
                    jobs += 1
    for p in problems:
        click.echo(str(p))
    if problems:
        click.echo(f"{len(problems)} problem(s); {jobs} job(s) valid", err=True)
        sys.exit(1)
    click.echo(f"{jobs} job(s) valid", err=True)


def _dup(job, first):
    from .jobspec import Problem
    return Problem(job.source, job.line, 1, f"duplicate job name {job.name!r} (first defined "
                   f"at {first.source}:{first.line}); rename one of them")


def _load_file_unchecked(path):
    from .jobspec import parse_job_text
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_job_text(f.read(), path)


def _load_dir_unchecked(path):
    from .jobspec import load_jobs_dir
    return load_jobs_dir(path, allowed_uids=None, check_permissions=False)


@main.command("import-crontab")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--system/--user", "system", default=None,
              help="Whether FILE has a user column (/etc/crontab, /etc/cron.d). Default: "
                   "system for /etc/crontab and /etc/cron.d/*, user otherwise.")
@click.option("--owner", metavar="USER", help="For a user crontab: the user its jobs run "
              "as (default: from the spool path, e.g. /var/spool/cron/crontabs/USER).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the YAML here.")
def import_crontab(file, system, owner, output):
    """Convert a crontab into cronrd job YAML; name what cannot be converted."""
    from .crontab_import import convert_crontab
    with open(file, encoding="utf-8", errors="replace") as f:
        text = f.read()
    res = convert_crontab(text, path=file, system=system, user=owner)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(res.yaml_text)
    else:
        click.echo(res.yaml_text, nl=False)
    for p in res.problems:
        click.echo(str(p), err=True)
    click.echo(f"{len(res.jobs)} job(s) converted, {len(res.problems)} line(s) need "
               "attention", err=True)
    if res.problems:
        sys.exit(1)


@main.command("next")
@click.argument("what")
@click.option("--count", "-n", default=5, show_default=True, type=click.IntRange(1, 10000))
@click.option("--timezone", "tz", metavar="TZ", help="IANA zone (default: the job's, else "
              "the daemon's).")
@click.option("--after", metavar="ISO-TIME", help="Start after this time (default: now).")
@click.pass_obj
def next_cmd(obj: Ctx, what, count, tz, after):
    """Print the next fire times of a schedule expression or a job."""
    from .schedule import format_fire, host_timezone, make_trigger, parse_iso, parse_schedule
    expr, job_tz = _schedule_of(obj, what)
    cfg = obj.try_config()
    zone = tz or job_tz or (cfg.timezone if cfg else host_timezone())
    sched = parse_schedule(expr)
    if sched.kind == "reboot":
        click.echo("@reboot fires once when cronrd starts after the host boots")
        return
    trigger = make_trigger(sched, zone)
    t = parse_iso(after) if after else int(time.time())
    for _ in range(count):
        t = trigger.next_after(t)
        if t is None:
            break
        click.echo(format_fire(t, zone))


def _schedule_of(obj: Ctx, what: str) -> tuple[str, str | None]:
    """(expression, timezone) for an expression or a job name."""
    if what.startswith("@") or " " in what.strip():
        return what, None
    try:
        job = obj.client(timeout=5).call("job", {"name": what})
        return job["schedule"], job["spec"].get("timezone")
    except CronrdError:
        pass
    cfg = obj.try_config()
    jobs_dir = cfg.jobs_dir if cfg else "/etc/cronrd.d"
    from .jobspec import load_jobs_dir
    res = load_jobs_dir(jobs_dir, allowed_uids=None, check_permissions=False) \
        if os.path.isdir(jobs_dir) else None
    if res is not None and what in res.jobs:
        spec = res.jobs[what]
        return spec.schedule, spec.timezone
    raise UsageError(f"{what!r} is neither a schedule expression nor a known job; quote "
                     "an expression, e.g. cronrd next '*/5 * * * *'")


if __name__ == "__main__":
    main()

"""Runs: runs, logs, run-now, cancel, rerun."""

from __future__ import annotations

import sys

import click

from ..errors import CronrdError, UsageError
from ..ops.requests import RUN_KINDS
from ..runtime.clock import Clock
from .base import (Ctx, RUN_HEADERS, _echo_inputs, _when, complete_jobs, consistent_option,
                   emit_json, read_args, run_row, table)


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--state", "states", metavar="STATE", multiple=True,
              help="Only runs in this state (repeat, or a comma list: failed,lost).")
@click.option("--kind", "kinds", metavar="KIND", multiple=True,
              help=f"Only runs of this kind: {', '.join(RUN_KINDS)} (repeat, or a comma "
              "list).")
@click.option("--node", metavar="NODE", help="Only runs placed on this node.")
@click.option("--since", metavar="TIME", help="Fire times from TIME on (ISO 8601, or back "
              "from now: 90m, 2h, 1d).")
@click.option("--until", metavar="TIME", help="Fire times before TIME.")
@click.option("--before", type=int, metavar="RUN", help="Only runs older than run id RUN "
              "(page back from the last id shown).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--local", is_flag=True, help="Times in each job's time zone, not UTC.")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def runs(obj: Ctx, job, states, kinds, node, since, until, before, limit, local, consistent,
         as_json):
    """List runs, newest first: where and when each ran, how long, how it
    ended and why (a waiting retry shows when it is due)."""
    now = Clock().now()
    args = {"job": job, "limit": limit, "node": node, "before": before,
            "since": _when(since, now, "--since"), "until": _when(until, now, "--until")}
    for name, values in (("state", states), ("kind", kinds)):
        flat = [v.strip() for value in values for v in value.split(",") if v.strip()]
        if flat:
            args[name] = flat
    args = {k: v for k, v in args.items() if v is not None}
    res = obj.client().call("runs", read_args(consistent, args))
    if as_json:
        emit_json(res["runs"])
        return
    table([run_row(r, now, local) for r in res["runs"]], RUN_HEADERS)
    _echo_inputs(res["runs"])
    for g in res["gaps"]:
        click.echo(f"gap: {g['job']} skipped {g['count']} fire times from {g['first']} to "
                   f"{g['last']}: {g['reason']}")
    if len(res["runs"]) == limit:
        click.echo(f"(the newest {limit}; `--before {res['runs'][-1]['run_id']}` shows older "
                   "ones, --limit more at once)", err=True)


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--run", "run_id", type=int, metavar="ID",
              help="This run (default: the latest that started); JOB may then be left out.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing: the run until it ends, then (without --run) the job's next "
              "runs, until interrupted.")
@click.option("--since", metavar="TIME",
              help="The runs that started since TIME (ISO 8601, or ago: 30m, 1h, 2d).")
@click.option("-n", "--lines", type=click.IntRange(0), metavar="N",
              help="Only the last N lines (of the first run shown).")
@click.option("--timestamps", is_flag=True, help="Start each line with when it came (UTC).")
@click.option("--stdout", "only", flag_value="stdout", help="Only what the job wrote to stdout.")
@click.option("--stderr", "only", flag_value="stderr", help="Only what the job wrote to stderr.")
@click.pass_obj
def logs(obj: Ctx, job, run_id, follow, since, lines, timestamps, only):
    """Print the output of a job's latest run (or --run ID, or --since TIME).
    With --run ID the job may be left out: `cronrd logs --run 42`.

    stdout and stderr come interleaved in the order they came; a log over
    max_log_bytes shows its head, a line saying how much was dropped, and
    its tail."""
    import time
    if run_id is not None and since is not None:
        raise UsageError("--run and --since choose runs two ways: give one of them")
    if job is None:
        if run_id is None:
            raise UsageError("name the job (`cronrd logs JOB`), or a run (`cronrd logs --run "
                             "ID`; `cronrd runs` lists them)")
        job = obj.client().call("run", {"run_id": run_id})["job"]
    args = {"job": job, "run_id": run_id, "follow": follow, "since": _when(since, Clock().now(), "--since"),
            "lines": lines}
    state = {"many": (follow and run_id is None) or since is not None, "output": False,
             "bol": True}

    def show(msg):
        if "run" in msg:
            r = msg["run"]
            state["output"] = False
            if state["many"]:
                _end_line(state)
                click.echo(f"-- run {r['run_id']} (attempt {r['attempt']}), "
                           + (f"started {r['started_at']} on node {r['node']} --"
                              if r["started_at"] else f"{r['state']} --"))
        elif "data" in msg:
            stream = msg.get("stream", "output")
            # Output of an older log (not told apart) and cronrd's own
            # lines show under either filter.
            if only and stream not in (only, "output", "cronrd"):
                return
            state["output"] = True
            text = msg["data"]
            if timestamps:
                t = msg.get("time")
                when = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                        + f".{int(t % 1 * 1000):03d}Z" if t is not None else "-" * 24)
                out = []
                for line in text.splitlines(keepends=True):
                    out.append((f"{when} " if state["bol"] else "") + line)
                    state["bol"] = line.endswith("\n")
                text = "".join(out)
            else:
                state["bol"] = text.endswith("\n")
            sys.stdout.write(text)
            sys.stdout.flush()
        elif "end" in msg and not state["output"]:
            r = msg["end"]
            what = f" on {only}" if only else ""
            if r["started_at"] is None:
                how = "never started" if r["finished_at"] else "has not started yet"
                click.echo(f"run {r['run_id']} {how} ({r['state']}"
                           + (f": {r['reason']}" if r["reason"] else "") + ")", err=True)
            elif r["finished_at"]:
                click.echo(f"run {r['run_id']} {r['state']} at {r['finished_at']}, "
                           f"no output{what}", err=True)
            else:
                click.echo(f"run {r['run_id']} {r['state']} since {r['started_at']}, "
                           f"no output{what} yet", err=True)
    try:
        res = obj.client(timeout=None if follow else 30.0).call("logs", args, on_message=show)
    except KeyboardInterrupt:
        _end_line(state)
        return
    if since is not None and res is None:
        click.echo(f"no run of {job} started since {since}", err=True)


def _end_line(state: dict) -> None:
    if not state["bol"]:
        sys.stdout.write("\n")
        state["bol"] = True


@click.command("run-now")
@click.argument("job", shell_complete=complete_jobs)
@click.option("--wait", is_flag=True, help="Wait for the run (and its retries); exit with "
              "its exit code.")
@click.option("--param", "params", metavar="NAME=VALUE", multiple=True,
              help="A value for one of the job's params: (repeatable); the run gets it as "
              "CRONRD_PARAM_<NAME>.")
@click.option("--key", metavar="KEY", help="Idempotency key: if the job already has a run "
              "made with KEY, that run is returned and no new one starts.")
@click.option("--at", "at", metavar="TIME", help="Run it once, later: at TIME (ISO 8601; "
              "without an offset, in the job's time zone) or +DURATION (+90m). The planned "
              "run survives failover; `cronrd next JOB` lists it, `cronrd cancel --plan ID` "
              "removes it.")
@click.pass_obj
def run_now(obj: Ctx, job, wait, params, key, at):
    """Start a job now (or --at a later time), outside its schedule."""
    def show(msg):
        if "event" in msg:
            r = msg["event"]
            click.echo(f"run {r['run_id']} attempt {r['attempt']}: {r['state']}"
                       + (f" ({r['reason']})" if r["reason"] else ""), err=True)
    args = {"job": job, "wait": wait, "params": param_pairs(params)}
    if key is not None:
        args["key"] = key
    if at is not None:
        args["at"] = at
        res = obj.client().call("run_now", args)
        click.echo(f"planned run {res['plan_id']} of {job} at {res['due']}; `cronrd next {job}` "
                   f"lists it, `cronrd cancel --plan {res['plan_id']}` removes it")
        return
    res = obj.client(timeout=None if wait else 30.0).call("run_now", args, on_message=show)
    if not wait and not res.get("existing") and res.get("state") == "waiting" and \
            (res.get("reason") or "").startswith("pool "):
        click.echo(f"run {res['run_id']} of {job} waits for its pool ({res['reason']}): it "
                   f"starts when a slot frees; `cronrd pools` shows the pools")
        return
    if not wait and not res.get("existing") and res.get("state") == "waiting":
        click.echo(f"queued run {res['run_id']} of {job} (concurrency: queue): it starts when "
                   f"the run ahead of it ends; `cronrd runs {job} --state waiting` shows the "
                   "queue")
        return
    if not wait:
        if res.get("existing"):
            click.echo(f"run {res['run_id']} of {job} was already made with key {key} "
                       f"({res['state']}); no new run started; `cronrd logs {job} --run "
                       f"{res['run_id']}` shows its output")
            return
        click.echo(f"started run {res['run_id']} of {job}; `cronrd logs {job} --run "
                   f"{res['run_id']} --follow` shows its output")
        return
    sys.exit(wait_exit_code(res))


def param_pairs(pairs) -> dict[str, str]:
    """`--param NAME=VALUE` options as a mapping (each name once)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise UsageError(f"--param {pair!r}: write NAME=VALUE, e.g. --param day=2026-01-01")
        if name in out:
            raise UsageError(f"--param {name} is given twice; give each parameter once")
        out[name] = value
    return out


def wait_exit_code(run: dict) -> int:
    """The exit code of `run-now --wait`: the job's own, and never 0 unless
    the run succeeded (a job that traps SIGTERM on timeout and exits 0 still
    timed out)."""
    if run["state"] == "succeeded":
        return 0
    if run["signal"]:
        return 128 + run["signal"]
    return run["exit_code"] or 1


@click.command()
@click.argument("run_id", metavar="[RUN_ID]", type=int, required=False)
@click.option("--job", metavar="JOB", shell_complete=complete_jobs,
              help="Cancel every run of JOB that has not ended.")
@click.option("--plan", "plan", metavar="ID", type=int,
              help="Remove a planned run (`run-now --at`) before it starts.")
@click.pass_obj
def cancel(obj: Ctx, run_id, job, plan):
    """Cancel a run that has not ended: its processes get SIGTERM, then
    SIGKILL after the job's kill_grace; it ends `cancelled` and is not retried.
    With --plan, remove a planned run before it starts."""
    if plan is not None:
        if run_id is not None or job is not None:
            raise UsageError("give --plan ID alone")
        res = obj.client().call("cancel", {"plan": plan})
        click.echo(f"planned run {plan} of {res['job']} at {res['due']}: cancelled")
        return
    if (run_id is None) == (job is None):
        raise UsageError("give a RUN_ID (`cronrd runs` lists them), --job JOB or --plan ID")
    if job is not None:
        res = obj.client().call("cancel", {"job": job})
        if not res["runs"]:
            click.echo(f"{job} has no run in progress; nothing to cancel")
            return
        for r in res["runs"]:
            click.echo(f"run {r['run_id']} of {job}: " + (
                "cancelled" if r["state"] == "cancelled" else f"{r['state']}, asked to stop"))
        return
    res = obj.client().call("cancel", {"run_id": run_id})
    click.echo(f"run {run_id} of {res['job']}: "
               + ("cancelled" if res["state"] == "cancelled" else
                  f"{res['state']}, asked to stop"))


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--at", "at", required=True, metavar="TIME",
              help="The fire time to run again (ISO 8601, as `cronrd runs` shows it).")
@click.option("--downstream", is_flag=True, help="Then rerun the records of other jobs that "
              "consumed it (and theirs), each once, after all its parents in the set.")
@click.option("--dry-run", is_flag=True, help="Print what would be rerun, change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def rerun(obj: Ctx, job, at, downstream, dry_run, as_json):
    """Run the fire time TIME of JOB again: a new attempt (kind rerun) of its
    record, which keeps its key (job, fire time). With --downstream, the
    records that consumed it follow, each once its parents have ended, if
    its trigger rule passes (`cronrd explain CHILD --at T` says why not)."""
    from ..schedule import parse_iso
    try:
        t = parse_iso(at)
    except CronrdError:
        raise UsageError(f"--at {at!r}: give the fire time in ISO 8601 "
                         "(2026-12-01T06:00:00Z), as `cronrd runs` shows it") from None
    res = obj.client().call("rerun", {"job": job, "at": int(t), "downstream": downstream,
                                      "dry_run": dry_run})
    if as_json:
        emit_json(res)
        return
    if dry_run:
        click.echo(f"{res['fire_time']}  {job}  rerun")
        for child, when in res["downstream"]:
            click.echo(f"{when}  {child}  rerun after its parents, if its trigger rule passes")
        click.echo(f"{1 + len(res['downstream'])} record(s); nothing changed (--dry-run)")
        return
    click.echo(f"run {res['run_id']}: attempt {res['attempt']} of {job} at "
               f"{res['fire_time']}; `cronrd logs {job} --run {res['run_id']} --follow` shows "
               "its output")
    if res.get("downstream"):
        click.echo("then, downstream: " + ", ".join(f"{c}@{w}" for c, w in res["downstream"])
                   + " (`cronrd runs --kind rerun` shows them)")
    elif downstream:
        click.echo("nothing downstream consumed it (no record's lineage holds it)")


@click.command()
@click.argument("name", shell_complete=complete_jobs)
@click.option("--start", "what", flag_value="start", help="The job started (its end ping "
              "follows).")
@click.option("--fail", "what", flag_value="fail", help="The job failed.")
@click.option("--exit", "exit_code", type=click.IntRange(0, 255), metavar="CODE",
              help="The job's exit code: 0 a success, anything else a failure "
              "(`cronrd ping NAME --exit $?`).")
@click.option("--url", metavar="URL", help="Ping through the HTTP API of a cronrd node "
              "(https://HOST:8177) instead of the local daemon: from a host that runs no "
              "cronrd.")
@click.option("--token", metavar="TOKEN", envvar="CRONRD_PING_TOKEN",
              help="With --url: a token of role ping for this watch (`cronrd token create "
              "--role ping --jobs NAME`); or set CRONRD_PING_TOKEN.")
@click.pass_obj
def ping(obj: Ctx, name, what, exit_code, url, token):
    """Tell a watch its job ran: a success by default, or --start, --fail or
    --exit CODE. A job that runs elsewhere (a legacy cron line, a
    Kubernetes CronJob) ends with `&& cronrd ping NAME`, and cronrd alerts
    when a fire time of the watch passes its grace with no ping."""
    what = what or ("fail" if exit_code else "success")
    args: dict = {"job": name, "what": what}
    if exit_code is not None:
        args["exit_code"] = exit_code
    if url is None:
        res = obj.client().call("ping", args)
    else:
        if not token:
            raise UsageError("--url needs --token TOKEN (or CRONRD_PING_TOKEN): a token of "
                             f"role ping for this watch (`cronrd token create --name {name}-ping"
                             f" --role ping --jobs {name}` on a cronrd node)")
        res = _http_ping(url, name, token, args)
    state = res.get("state")
    note = " (no fire time waited for it: recorded on its own)" if res.get("stray") else ""
    click.echo(f"{name}: {what} recorded, run {res.get('run_id')} {state}{note}")


def _http_ping(url: str, name: str, token: str, args: dict) -> dict:
    import json as _json
    import ssl
    import urllib.error
    import urllib.parse
    import urllib.request
    body = {k: v for k, v in args.items() if k != "job"}
    req = urllib.request.Request(
        url.rstrip("/") + "/api/v1/pings/" + urllib.parse.quote(name, safe=""),
        data=_json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ssl.create_default_context()) as r:
            return _json.loads(r.read())
    except urllib.error.HTTPError as exc:
        try:
            doc = _json.loads(exc.read())
            why = doc.get("detail") or doc.get("title") or str(exc)
        except ValueError:
            why = str(exc)
        raise CronrdError(f"ping {name} at {url}: {exc.code}: {why}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CronrdError(f"ping {name} at {url}: cannot reach it ({getattr(exc, 'reason', exc)}"
                          "); check the URL and that the node's HTTP API listens there") from None

"""Alerts and notifications: alerts, dead-letter, audit, notifications,
notify test."""

from __future__ import annotations

import sys

import click

from ..errors import CronrdError, UsageError
from .base import Ctx, _id_arg, complete_jobs, consistent_option, emit_json, read_args, table


@click.command()
@click.argument("args", nargs=-1, metavar="[ack ID... | ack --job JOB]")
@click.option("--note", default="", metavar="TEXT", help="With ack: why, or what was done.")
@click.option("--all", "show_all", is_flag=True, help="Also acked and resolved alerts.")
@click.option("--job", default=None, metavar="JOB", help="Only this job's alerts.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100000))
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def alerts(obj: Ctx, args, note, show_all, job, limit, consistent, as_json):
    """Open alerts, newest first: SLA misses and runs that failed their last
    retry. `cronrd alerts ack ID --note TEXT` acknowledges one, `ack ID ID
    ...` several, and `ack --job JOB` every open alert of a job."""
    if args:
        if args[0] != "ack" or (len(args) == 1 and job is None):
            raise UsageError("use `cronrd alerts` to list, or `cronrd alerts ack ID [ID...] "
                             "--note TEXT`, or `cronrd alerts ack --job JOB` for all of a "
                             "job's open alerts")
        ids = [_id_arg(a, "alerts ack takes alert ids (`cronrd alerts` lists them)")
               for a in args[1:]]
        client = obj.client()
        if job is not None:
            ids += [a["alert_id"] for a in client.call("alerts", {"job": job,
                                                                  "limit": 100000})["alerts"]
                    if a["alert_id"] not in ids]
        results, failed = [], []
        for alert_id in ids:
            try:
                results.append(client.call("alert_ack", {"id": alert_id, "note": note}))
            except CronrdError as exc:
                failed.append(f"alert {alert_id}: {exc}")
        if as_json:
            emit_json(results if len(args) > 2 or job is not None else
                      (results[0] if results else {}))
        elif len(ids) == 1 and results and job is None:
            click.echo(f"alert {ids[0]} acked")
        elif ids:
            click.echo(f"{len(results)} alerts acked" + (f" ({len(failed)} not)" if failed
                                                         else ""))
        else:
            click.echo(f"no open alert of {job}")
        for line in failed:
            click.echo(line, err=True)
        if failed:
            sys.exit(1)
        return
    res = obj.client().call("alerts", read_args(consistent, {
        "all": show_all, "job": job, "limit": limit}))
    if as_json:
        emit_json(res["alerts"])
        return
    if not res["alerts"]:
        click.echo("no open alerts" if not show_all else "no alerts")
        return
    table([[a["alert_id"], a["job"], a["kind"], a["fire_time"], a["opened_at"],
            a["state"], a["detail"] + (f" [{a['note']}]" if a["note"] else "")]
           for a in res["alerts"]],
          ["id", "job", "kind", "fire_time", "opened", "state", "detail"])


@click.command("dead-letter")
@click.argument("args", nargs=-1, metavar="[list | requeue RUN | discard RUN]")
@click.option("--note", default="", metavar="TEXT", help="Why (required to discard).")
@click.option("--all", "show_all", is_flag=True, help="list: also requeued and discarded.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100000))
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def dead_letter(obj: Ctx, args, note, show_all, limit, consistent, as_json):
    """Runs that failed their last retry under `on_final_failure:
    dead_letter`: list them, requeue one (a new attempt of the same job and
    fire time) or discard it with a note."""
    action = args[0] if args else "list"
    if action == "list" and len(args) <= 1:
        res = obj.client().call("dead_letter", read_args(consistent, {
            "all": show_all, "limit": limit}))
        if as_json:
            emit_json(res["dead_letter"])
            return
        if not res["dead_letter"]:
            click.echo("the dead letter is empty")
            return
        table([[d["run_id"], d["job"], d["fire_time"], d["at"], d["state"],
                (d["run"] or {}).get("state"), (d["run"] or {}).get("exit_code"),
                d["note"] or None] for d in res["dead_letter"]],
              ["run", "job", "fire_time", "since", "state", "run_state", "exit", "note"])
        return
    if action not in ("requeue", "discard") or len(args) != 2:
        raise UsageError("use `cronrd dead-letter list`, `cronrd dead-letter requeue RUN` or "
                         "`cronrd dead-letter discard RUN --note TEXT`")
    run_id = _id_arg(args[1], f"dead-letter {action} takes a run id (`cronrd dead-letter "
                     "list` shows them)")
    if action == "discard" and not note.strip():
        raise UsageError("discarding needs --note TEXT: why this run may stay failed")
    res = obj.client().call("dead_letter_action", {"run_id": run_id, "action": action,
                                                   "note": note})
    if as_json:
        emit_json(res)
        return
    if action == "requeue":
        click.echo(f"run {run_id} requeued as run {res['new_run_id']} (attempt "
                   f"{res['attempt']}); `cronrd logs {res['job']} --run {res['new_run_id']} --follow` "
                   "shows its output")
    else:
        click.echo(f"run {run_id} discarded")


@click.command()
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100000))
@click.option("--before", type=int, metavar="ID", help="Only records older than audit id ID "
              "(page back from the last ID shown).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def audit(obj: Ctx, limit, before, consistent, as_json):
    """Who asked for which change over a control socket (newest first)."""
    res = obj.client().call("audit", read_args(consistent, {"limit": limit,
                                                             "before": before}))
    if as_json:
        emit_json(res["records"])
        return
    table([[r["audit_id"], r["at"], r["node"],
            f"{r['uid']} ({r['user']})" if r["user"] else r["uid"], r["pid"],
            r["command"].replace("cluster_", "cluster ").replace("_", "-"),
            r["target"] or None, "yes" if r["allowed"] else "REFUSED"]
           for r in res["records"]],
          ["id", "time", "node", "uid", "pid", "command", "target", "allowed"])


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000),
              help="Events, newest first.")
@click.option("--before", type=int, metavar="ID", help="Only events older than event id ID "
              "(page back from the last ID shown).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def notifications(obj: Ctx, job, limit, before, consistent, as_json):
    """Events (of JOB) and every attempt to deliver them, newest first: who
    was tried, when, and how it went (the same on every node)."""
    res = obj.client().call("notifications", read_args(consistent, {
        "job": job, "limit": limit, "before": before}))
    if as_json:
        emit_json(res)
        return
    rows = []
    for e in res["events"]:
        what = f"{e['kind']} {e['job']}" + (f" run {e['run_id']}" if e["run_id"] else "")
        if not e["attempts"]:
            rows.append([e["event_id"], e["at"], what, None, None,
                         "delivered (no recipient)" if e["delivered"] else "pending"])
        for a in e["attempts"]:
            result = "sent" if a["ok"] else ("gave up: " if a["final"] else "failed: ") \
                + a["error"]
            rows.append([e["event_id"], a["at"], what, a["notifier"], a["attempt"], result])
    if not rows:
        click.echo("no events" + (f" of job {job}" if job else "")
                   + ("" if res["notifiers"] else "; no notifiers: in the daemon config "
                      "(`man 8 cronrd`, NOTIFICATIONS)"))
        return
    table(rows, ["event", "time", "event of", "notifier", "attempt", "result"])


@click.group()
def notify():
    """Notifiers of the daemon config."""


@notify.command("test")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def notify_test(obj: Ctx, name, as_json):
    """Send a test event through notifier NAME now (from this node; nothing is
    recorded). Exit status 1 when it could not be delivered."""
    res = obj.client(timeout=330.0).call("notify_test", {"name": name})
    if as_json:
        emit_json(res)
    elif res["ok"]:
        click.echo(f"{name} ({res['type']}, {res['to']}): delivered test event "
                   f"{res['event_id']} in {res['seconds']:g}s: {res['result']}")
    else:
        click.echo(f"{name} ({res['type']}, {res['to']}): not delivered: {res['error']}",
                   err=True)
    if not res["ok"]:
        sys.exit(1)

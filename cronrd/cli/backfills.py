"""Backfills and pools: backfill, backfills, pools."""

from __future__ import annotations


import click

from ..errors import UsageError
from ..runtime.clock import Clock
from .base import Ctx, _id_arg, _when, consistent_option, emit_json, read_args, table


# -- backfill and rerun ---------------------------------------------------------------------
BACKFILL_ACTIONS = {"pause": "paused", "resume": "running", "cancel": "cancelled"}


@click.command()
@click.argument("args", nargs=-1, metavar="JOB | pause|resume|cancel ID")
@click.option("--from", "first", metavar="TIME", help="First instant of the range (ISO 8601, "
              "or a duration back from now: 6h, 7d).")
@click.option("--to", "last", metavar="TIME", help="Last instant of the range (default: now).")
@click.option("--reprocess", type=click.Choice(["missing", "failed", "all"]),
              default="missing", show_default=True,
              help="Which fire times with a record run again (as a new attempt): missing "
              "runs only those without one (or skipped), failed also failed ones, all every "
              "one that is not running.")
@click.option("--parallel", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Runs of the backfill at once, at most (one under concurrency forbid or "
              "replace: its runs queue).")
@click.option("--order", type=click.Choice(["oldest", "newest"]), default="oldest",
              show_default=True, help="Which fire times run first.")
@click.option("--dry-run", is_flag=True, help="Print what each fire time would get, change "
              "nothing.")
@click.option("--note", default="", metavar="TEXT", help="Why (shown by `cronrd backfills`).")
@click.option("--force", is_flag=True, help="Take more than 10,000 fire times (up to "
              "1,000,000; root, or an admin token for every job).")
@click.option("--downstream", is_flag=True, help="After each reprocessed fire time, rerun "
              "the records of other jobs that consumed it (and theirs), in dependency order.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def backfill(obj: Ctx, args, first, last, reprocess, parallel, order, dry_run, note, force,
             downstream, as_json):
    """Run JOB for the fire times of its schedule between --from and --to
    that have no record (or, with --reprocess, failed or all of them: a new
    attempt of the same record). `cronrd backfill pause|resume|cancel ID`
    controls a backfill that is going on."""
    if len(args) == 2 and args[0] in BACKFILL_ACTIONS and first is None:
        bid = _id_arg(args[1], f"backfill {args[0]} takes a backfill id (`cronrd backfills` "
                      "lists them)")
        res = obj.client().call("backfill_state", {"id": bid,
                                                   "state": BACKFILL_ACTIONS[args[0]]})
        if as_json:
            emit_json(res)
            return
        word = {"paused": "paused", "running": "resumed", "cancelled": "cancelled"}[res["state"]]
        click.echo(f"backfill {bid} {word}" if res["changed"] else
                   f"backfill {bid} was already {res['state']}")
        return
    if len(args) != 1:
        raise UsageError("give one JOB and --from TIME (`cronrd backfill JOB --from 2d "
                         "--dry-run`), or `cronrd backfill pause|resume|cancel ID`")
    job = args[0]
    if first is None:
        raise UsageError(f"--from TIME is required: where the backfill starts (`cronrd "
                         f"backfill {job} --from 2d --dry-run`)")
    import math
    now = Clock().now()
    lo = math.ceil(_when(first, now, "--from"))
    hi = math.floor(_when(last, now, "--to") if last is not None else now)
    res = obj.client(timeout=120.0).call("backfill", {
        "job": job, "from": lo, "to": hi, "reprocess": reprocess, "parallel": parallel,
        "order": order, "dry_run": dry_run, "note": note, "force": force,
        "downstream": downstream})
    if as_json:
        emit_json(res)
        return
    if dry_run:
        # The daemon answers the first and last lines and the count of those
        # left out between them (an older one: every line, no counts).
        omitted = res.get("omitted") or 0
        gap = res.get("omitted_after", len(res["lines"]))
        for when, line in res["lines"][:gap]:
            click.echo(f"{when}  {line}")
        if omitted:
            click.echo(f"... {omitted:,} more fire time{'s' if omitted != 1 else ''} ...")
        for when, line in res["lines"][gap:]:
            click.echo(f"{when}  {line}")
        counts = res.get("counts")
        if counts is None:
            counts = {}
            for _t, line in res["lines"]:
                word = line.split(" ", 1)[0].rstrip(":")
                counts[word] = counts.get(word, 0) + 1
        click.echo(f"{res['total']} fire time(s) of {job}: " + ", ".join(
            f"{n} {w}" for w, n in sorted(counts.items()) if n) + f"; at most "
            f"{res['limit']} at once (concurrency: {res['concurrency']}); nothing changed "
            "(--dry-run)")
        return
    todo = res["total"] - res["skipped"]
    click.echo(f"backfill {res['backfill']} of {job}: {res['total']} fire time(s), {todo} to "
               f"run, {res['skipped']} skipped, at most {res['limit']} at once; "
               f"`cronrd backfills {res['backfill']}` shows its progress")


@click.command()
@click.argument("backfill_id", metavar="[ID]", type=int, required=False)
@click.option("--items", is_flag=True, help="With ID: every fire time and what it got.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100000))
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def backfills(obj: Ctx, backfill_id, items, limit, consistent, as_json):
    """Backfills, newest first, with their progress (or one, by ID)."""
    if items and backfill_id is None:
        raise UsageError("--items needs a backfill ID (`cronrd backfills` lists them)")
    res = obj.client().call("backfills", read_args(consistent, {
        "id": backfill_id, "limit": limit, "items": items}))
    if as_json:
        emit_json(res)
        return
    from ..schedule import iso_utc
    rows = []
    for b in res["backfills"]:
        c = b["counts"]
        failed = sum(n for o, n in b["outcomes"].items() if o != "succeeded")
        rows.append([b["id"], b["job"], b["state"], iso_utc(b["from"]), iso_utc(b["to"]),
                     f"{c['done']}/{b['total'] - c['skipped']}", c["released"],
                     c["waiting"], c["skipped"], failed, b["parallel"],
                     "; ".join(filter(None, [b["note"], b.get("held") and
                                             f"held: {b['held']}"])) or None])
    if not rows:
        click.echo("no backfills")
        return
    table(rows, ["id", "job", "state", "from", "to", "done", "running", "waiting",
                 "skipped", "failed", "parallel", "note"])
    for when, state, note, run_id, outcome in res.get("items", []):
        click.echo(f"{when}  {state}" + (f" run {run_id}" if run_id else "")
                   + (f" {outcome}" if outcome else "") + (f": {note}" if note else ""))


@click.command()
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def pools(obj: Ctx, consistent, as_json):
    """The pools in force (the leader's daemon config), their slots in use
    and the runs waiting for them."""
    res = obj.client().call("pools", read_args(consistent, {}))
    if as_json:
        emit_json(res)
        return
    rows = []
    for p in res["pools"]:
        slots = "-" if p["slots"] is None else str(p["slots"])
        use = f"{p['in_use']}/{slots}"
        if p.get("by_node"):
            use += " (" + ", ".join(f"{n}: {u}" for n, u in p["by_node"].items()) + ")"
        note = []
        if not p["defined"]:
            note.append("not in force: the leader's config does not define it")
        if "this_node_config" in p:
            here = p["this_node_config"]
            note.append("this node's config: " + ("no such pool" if here is None else
                                                  f"{here['slots']} slots, {here['scope']}"))
        rows.append([p["pool"], p["scope"] or "-", use, p["waiting"],
                     ",".join(str(r) for r in p["runs"]) or "-", "; ".join(note) or None])
    if not rows:
        click.echo("no pools (define them under pools: in the daemon config)")
        return
    table(rows, ["pool", "scope", "in use", "waiting", "runs", "note"])

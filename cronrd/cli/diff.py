"""`cronrd diff OLD NEW`: what a change to job files does, before it is
merged (decisions/impact.py). Each side is a directory of job files, one
job file, or ``cluster``: the definitions in force in the running cluster,
read from this node's copy of the replicated state (read-only, like the
commands that answer with the daemon down). Exit 0: no change; 1: changes;
2: an error (a side that cannot be read, a job file with problems, bad
usage), so a CI step can tell them apart."""

from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
import sys
from typing import Any

import click

from ..errors import CronrdError
from .base import Ctx

CLUSTER = "cluster"
RECENT = 20   # successes a job's typical duration is the median of


class DiffError(Exception):
    """An error of `cronrd diff`: exit status 2."""


@click.command("diff")
@click.argument("old")
@click.argument("new")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 366),
              help="The window of fire times compared, from --from.")
@click.option("--from", "start", metavar="TIME", help="Start of the window (ISO 8601; "
              "default: now).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def diff(obj: Ctx, old, new, days, start, as_json):
    """Compare two sets of job files: OLD and NEW are each a directory, a job
    file, or `cluster` (the definitions in force, from this node's state).
    For each job: fire times added, removed or moved over the window,
    daylight-saving changes in it, new overlaps with itself, dependencies
    that no longer resolve, SLAs its recorded durations cannot meet; and
    pools with more runs at once than slots. Exit 0 when nothing changes, 1
    when something does, 2 on errors."""
    try:
        code = _diff(obj, old, new, days, start, as_json)
    except (DiffError, CronrdError) as exc:
        click.echo(f"cronrd diff: {exc}", err=True)
        sys.exit(2)
    sys.exit(code)


def _diff(obj: Ctx, old: str, new: str, days: int, start: str | None, as_json: bool) -> int:
    from ..decisions.impact import Context, impact
    from ..runtime.clock import now
    from ..schedule import parse_iso
    cfg = _config(obj)
    state = _state(cfg) if CLUSTER in (old, new) else None
    old_jobs, old_problems = _side(old, cfg, state)
    new_jobs, new_problems = _side(new, cfg, state)
    problems = old_problems + new_problems
    try:
        t0 = parse_iso(start) if start else int(now())
    except CronrdError as exc:
        raise DiffError(f"--from: {exc}") from None
    ctx = Context(**_context(cfg, state, set(old_jobs) | set(new_jobs)))
    report = impact(old_jobs, new_jobs, ctx, t0, t0 + days * 86400)
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "problems": problems}, indent=1))
    else:
        _print(report, problems)
    if problems:
        return 2
    return 1 if report.changed else 0


# -- the two sides ------------------------------------------------------------------------
def _config(obj: Ctx):
    try:
        return obj.try_config()
    except CronrdError:
        return None


def _side(what: str, cfg, state) -> tuple[dict, list[str]]:
    """(jobs by name, problems) of a directory, a file or the cluster."""
    if what == CLUSTER:
        return state["jobs"], []
    from ..jobspec import load_job_file, load_jobs_dir
    pools = None if cfg is None else {p.name: p.slots for p in cfg.pools}
    if os.path.isdir(what):
        res = load_jobs_dir(what, allowed_uids=None, check_permissions=False, pools=pools)
        return dict(res.jobs), [str(p) for fr in res.files for p in fr.problems]
    if os.path.isfile(what):
        fr = load_job_file(what, allowed_uids=None, check_permissions=False, pools=pools)
        return {j.name: j for j in fr.jobs}, [str(p) for p in fr.problems]
    raise DiffError(f"{what}: no such directory or job file (give a directory of job files, "
                    f"a job file, or `{CLUSTER}` for the definitions in force)")


def _state(cfg) -> dict[str, Any]:
    """The definitions, pools, calendars and durations in force, from this
    node's copy of the replicated state."""
    if cfg is None:
        raise DiffError(f"`{CLUSTER}` reads this node's state: give --config (or set "
                        "CRONRD_CONFIG) to name the daemon's config")
    import apsw

    from ..state import calendars as CAL
    from ..state import pools as PL
    from ..state import queries as Q
    path = cfg.state_db
    try:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        conn.setbusytimeout(2000)
        jobs = {j["name"]: j["spec"] for j in Q.jobs(conn)}
        pools = {name: slots for name, slots, _scope in PL.in_force(conn)}
        calendars = CAL.in_force(conn)
        durations = _durations(conn, set(jobs))
    except apsw.Error as exc:
        raise DiffError(f"cannot read the cluster's state at {path} ({exc}): run it as root "
                        "or the daemon's user, on a node of the cluster") from None
    return {"jobs": jobs, "pools": pools, "calendars": calendars, "durations": durations}


def _durations(conn, names: set[str]) -> dict[str, float]:
    """Each job's median duration over its last RECENT successes."""
    out: dict[str, float] = {}
    for name in sorted(names):
        took = [f - s for s, f in conn.execute(
            "SELECT started_at, finished_at FROM runs WHERE job=? AND state='succeeded' "
            "AND started_at IS NOT NULL AND finished_at IS NOT NULL "
            "ORDER BY run_id DESC LIMIT ?", (name, RECENT))]
        if took:
            out[name] = round(statistics.median(took), 3)
    return out


def _context(cfg, state, names: set[str]) -> dict[str, Any]:
    from ..config.calendars import resolve
    kw: dict[str, Any] = {"default_tz": cfg.timezone if cfg else "UTC"}
    if state is not None:
        kw.update(pools=state["pools"], calendars=state["calendars"],
                  durations={n: d for n, d in state["durations"].items() if n in names})
        return kw
    if cfg is not None:
        kw["pools"] = {p.name: p.slots for p in cfg.pools}
        try:
            kw["calendars"] = resolve(cfg.calendars,
                                      _dt.datetime.now(_dt.timezone.utc).year)
        except CronrdError as exc:
            raise DiffError(f"the config's calendars: {exc}") from None
        if os.path.exists(cfg.state_db):   # durations, where this host has a history
            try:
                kw["durations"] = _state(cfg)["durations"]
            except DiffError:
                pass
    return kw


# -- text ---------------------------------------------------------------------------------
def _times(ts: list[int], limit: int = 5) -> str:
    from ..schedule import iso_utc
    text = ", ".join(str(iso_utc(t)) for t in ts[:limit])
    return text + (f" (and {len(ts) - limit} more)" if len(ts) > limit else "")


def _print(report, problems: list[str]) -> None:
    from ..schedule import iso_utc
    for p in problems:
        click.echo(p)
    shown = [j for j in report.jobs if j.noteworthy]
    click.echo(f"window {iso_utc(report.start)} to {iso_utc(report.end)}")
    for j in shown:
        head = {"added": f"added, {j.new_fires} fire time(s)",
                "removed": f"removed, {j.old_fires} fire time(s) no longer run",
                "changed": f"changed ({', '.join(j.keys)})",
                "unchanged": "definition unchanged"}[j.change]
        click.echo(f"job {j.name}: {head}")
        if j.change in ("changed", "unchanged") and (j.added or j.removed or j.moved):
            click.echo(f"  fire times: {j.old_fires} -> {j.new_fires}")
        if j.moved:
            click.echo("  moved: " + ", ".join(f"{iso_utc(a)} -> {iso_utc(b)}"
                                               for a, b in j.moved[:5])
                       + (f" (and {len(j.moved) - 5} more)" if len(j.moved) > 5 else ""))
        if j.added and j.change != "added":
            click.echo(f"  added: {_times(j.added)}")
        if j.removed and j.change != "removed":
            click.echo(f"  removed: {_times(j.removed)}")
        for kind, text in j.notes:
            click.echo(f"  {kind}: {text}")
    for text in report.pools:
        click.echo(text)
    changed = sum(1 for j in shown)
    click.echo(f"{changed} job(s) changed, {len(report.jobs) - changed} unchanged"
               + (f", {len(report.pools)} pool conflict(s)" if report.pools else ""))

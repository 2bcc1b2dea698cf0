"""API tokens: token create | list | revoke."""

from __future__ import annotations


import click

from ..errors import UsageError
from .base import Ctx, emit_json, table


# -- tokens of the HTTP API ------------------------------------------------------------
@click.group()
def token():
    """Tokens of the HTTP API (`Authorization: Bearer TOKEN`), stored hashed in
    the replicated state: made on any node, valid on every node. Root only."""


@token.command("create")
@click.option("--name", required=True, help="A name for it (who or what uses it), unique.")
@click.option("--role", required=True, type=click.Choice(["viewer", "operator", "admin", "ping"]),
              help="viewer reads; operator also runs, pauses, cancels, backfills, acks; "
                   "admin also manages tokens and nodes and forces backfills; ping only "
                   "pings the watches --jobs names (for a host that runs no cronrd).")
@click.option("--jobs", "jobs", metavar="GLOB", default="",
              help="Only the jobs whose names match this glob (default: every job).")
@click.option("--expires", metavar="DURATION", default=None,
              help="Valid for this long, e.g. 90d (default: until revoked).")
@click.pass_obj
def token_create(obj: Ctx, name, role, jobs, expires):
    """Make a token and print it, alone on standard output, this once: it is
    stored only as its sha256 and cannot be shown again."""
    seconds = None
    if expires is not None:
        from ..errors import ScheduleError
        from ..schedule import parse_duration
        try:
            seconds = parse_duration(expires)
        except ScheduleError as exc:
            raise UsageError(f"--expires: {exc.message}") from None
    res = obj.client().call("token_create", {"name": name, "role": role, "jobs": jobs,
                                             "expires": seconds})
    click.echo(res["token"])
    click.echo(f"token {res['name']} ({res['role']}"
               + (f", jobs {res['jobs']}" if res.get("jobs") else "")
               + (f", expires {res['expires_at']}" if res.get("expires_at") else "")
               + "): keep it now, it is not shown again", err=True)


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def token_list(obj: Ctx, as_json):
    """The tokens: name, role, jobs, expiry (never the secrets)."""
    res = obj.client().call("token_list")
    if as_json:
        emit_json(res["tokens"])
        return
    if not res["tokens"]:
        click.echo("no tokens; `cronrd token create --name NAME --role viewer` makes one")
        return
    rows = []
    for t in res["tokens"]:
        expires = t["expires_at"] or "never"
        if t.get("expired"):
            expires += " (expired)"
        rows.append([t["name"], t["role"], t["jobs"] or "*", expires,
                     f"{t['created_at']} on {t['node']}"])
    # Columns as wide as their widest cell: a long name or an expired
    # token's note no longer runs into the next column.
    table(rows, ["name", "role", "jobs", "expires", "created"])


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Ctx, name):
    """Revoke the token NAME at once, on every node."""
    obj.client().call("token_revoke", {"name": name})
    click.echo(f"token {name} revoked")

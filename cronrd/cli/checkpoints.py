"""From inside a job: checkpoint save | get, heartbeat."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from ..errors import UsageError
from .base import Ctx

if TYPE_CHECKING:
    from ..client import Client


# -- from inside a job: checkpoints and heartbeats ------------------------------------------
def _run_client(obj: Ctx) -> tuple["Client", dict]:
    """The daemon that started this run (--socket, else $CRONRD_SOCKET, which
    every run gets) and the run's id and token from the environment."""
    from ..client import Client
    run_id, token = os.environ.get("CRONRD_RUN_ID", ""), os.environ.get("CRONRD_RUN_TOKEN", "")
    if not run_id.isdigit() or not token:
        raise UsageError("this command works inside a run of a cronrd job: CRONRD_RUN_ID and "
                         "CRONRD_RUN_TOKEN are not set (keep them in the job's environment)")
    path = obj.socket_arg or os.environ.get("CRONRD_SOCKET") or obj.socket()
    return Client(path, timeout=30), {"run_id": int(run_id), "token": token}


@click.group()
def checkpoint():
    """Save or read the checkpoint of the running job's fire time (from inside
    the job). A retry of the fire time, on any node, gets the last one saved in
    CRONRD_CHECKPOINT (and the attempt that saved it in CRONRD_CHECKPOINT_ATTEMPT)."""


@checkpoint.command("save")
@click.argument("value", required=False)
@click.option("--file", "path", type=click.Path(dir_okay=False, allow_dash=True),
              help="Save the contents of this file ('-': standard input) instead.")
@click.pass_obj
def checkpoint_save(obj: Ctx, value, path):
    """Save VALUE (text, at most 64 KiB) as this fire time's checkpoint. Refused
    for an attempt that a newer one has replaced."""
    import base64
    if (value is None) == (path is None):
        raise UsageError("give the value or --file FILE (one of them)")
    if path is not None:
        try:
            if path == "-":
                data = sys.stdin.buffer.read(256 * 1024)
            else:
                with open(path, "rb") as f:
                    data = f.read(256 * 1024)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    else:
        data = value.encode("utf-8", "surrogateescape")
    from ..state.checkpoints import value_problem
    try:
        problem = value_problem(data.decode("utf-8"))
    except UnicodeDecodeError:
        problem = ("the checkpoint value is not UTF-8 text; encode binary data, e.g. with "
                   "base64")
    if problem is not None:
        raise UsageError(problem)
    client, args = _run_client(obj)
    args["value_b64"] = base64.b64encode(data).decode()
    client.call("checkpoint_save", args)


@checkpoint.command("get")
@click.option("--json", "as_json", is_flag=True, help="Value, attempt and time as JSON.")
@click.pass_obj
def checkpoint_get(obj: Ctx, as_json):
    """Print the last checkpoint of this fire time as saved (nothing if none)."""
    client, args = _run_client(obj)
    res = client.call("checkpoint_get", args)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    elif res.get("value"):
        sys.stdout.write(res["value"])


@click.command()
@click.option("--progress", type=click.FloatRange(0, 1), help="How far the run is, 0 to 1.")
@click.option("--message", help="A short note on what it is doing (shown by `runs`, `show`).")
@click.pass_obj
def heartbeat(obj: Ctx, progress, message):
    """Tell the cluster the running job is alive (from inside the job); a job
    with heartbeat_timeout is ended timed_out when it stays silent that long."""
    client, args = _run_client(obj)
    if progress is not None:
        args["progress"] = progress
    if message is not None:
        args["message"] = message
    client.call("heartbeat", args)

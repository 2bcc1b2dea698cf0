"""What every command shares: the context (config, socket, client), the
top-level group with its lazily loaded command table, output (tables,
--json, printable text) and the arguments many commands take."""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, overload

import click

from ..errors import CronrdError, UsageError
from ..runtime.clock import Clock


if TYPE_CHECKING:
    from ..offline import ReadClient


# The CLI is interactive: modules a command does not need are imported lazily
# (`cronrd --version` must not load YAML or SQLite).
DEFAULT_CONFIG_PATH = "/etc/cronrd/cronrd.yaml"  # = config.DEFAULT_CONFIG_PATH


DEFAULT_SOCKET = "/run/cronrd/cronrd.sock"


class Ctx:
    def __init__(self, config: str | None, socket: str | None):
        self.config_arg = config
        self.socket_arg = socket

    def config(self):
        from ..config import config_path, load_config
        return load_config(config_path(self.config_arg))

    def try_config(self):
        """The config if one is there; None when the default path is absent."""
        from ..config import config_path, load_config
        path = config_path(self.config_arg)
        if path == DEFAULT_CONFIG_PATH and not os.path.exists(path):
            return None
        return load_config(path)

    def socket(self) -> str:
        if self.socket_arg:
            return self.socket_arg
        cfg = self.try_config()
        return cfg.socket if cfg is not None else DEFAULT_SOCKET

    def client(self, timeout: float | None = 30.0, quiet: bool = False) -> "ReadClient":
        """The daemon's control socket; with the daemon down, its read
        commands are answered from the state database (offline.py), which
        is said on stderr unless ``quiet``."""
        from ..client import Client
        from ..offline import ReadClient
        return ReadClient(Client(self.socket(), timeout=timeout), self.try_config,
                          (lambda text: None) if quiet else
                          (lambda text: click.echo(f"cronrd: {text}", err=True)))


def complete_jobs(ctx, param, incomplete: str):
    """Job names for shell completion, from the daemon (or, with the daemon
    down, its state database); nothing when neither answers quickly."""
    from click.shell_completion import CompletionItem
    root = ctx.find_root()
    obj = Ctx(root.params.get("config"), root.params.get("socket"))
    pattern = "".join(f"[{c}]" if c in "*?[]" else c for c in incomplete) + "*"
    try:
        page = obj.client(timeout=2.0, quiet=True).call(
            "jobs", {"limit": 200, "match": pattern})
    except Exception:  # noqa: BLE001 - completion must never print a traceback
        return []
    return [CompletionItem(j["name"]) for j in page.get("jobs", [])]


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): a job
    name, note or audit target someone sent must not move the cursor or
    talk to the terminal of whoever lists it."""
    return _CONTROL.sub(lambda m: {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(
        m.group(), f"\\x{ord(m.group()):02x}"), text)


def table(rows: list[list[Any]], headers: list[str], widths: list[int] | None = None,
          header: bool = True) -> list[int]:
    """Print rows in columns; ``widths``: the columns of the page before
    (a later page keeps them, so its columns line up with the first's)."""
    cells = [[("-" if v is None else printable(str(v))) for v in row] for row in rows]
    if widths is None:
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if header:
        click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return widths


# Options of the whole CLI that an operator may also type after the
# subcommand (`cronrd status --config FILE`), as most tools accept them.
GLOBAL_VALUE_OPTIONS = ("--config", "-c", "--socket")


def hoist_global_options(args: list[str], subcommands) -> list[str]:
    """``args`` with --config/--socket moved in front of the subcommand and a
    --json typed before it moved behind it: `cronrd status --config F`,
    `cronrd --config F status` and `cronrd --json status` all mean the same.
    Nothing after a ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    json_first = False
    seen_command = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest.extend(args[i:])
            break
        name = a.split("=", 1)[0]
        if name in GLOBAL_VALUE_OPTIONS:
            if "=" in a or i + 1 >= len(args):
                front.append(a)
                i += 1
            else:
                front.extend(args[i:i + 2])
                i += 2
            continue
        if a == "--json" and not seen_command:
            json_first = True
            i += 1
            continue
        if not seen_command and a in subcommands:
            seen_command = True
        rest.append(a)
        i += 1
    if json_first:
        try:
            end = rest.index("--")
        except ValueError:
            end = len(rest)
        rest.insert(end, "--json")
    return front + rest


# Every command: its module under cronrd/cli/ and its function there. A
# command's module is imported when the command runs (or help lists it):
# `cronrd status` loads neither the cluster's commands nor the validator's.
COMMANDS = {
    "alerts": ("alerts", "alerts"),
    "audit": ("alerts", "audit"),
    "backfill": ("backfills", "backfill"),
    "backfills": ("backfills", "backfills"),
    "cancel": ("runs", "cancel"),
    "check-config": ("local", "check_config"),
    "checkpoint": ("checkpoints", "checkpoint"),
    "cluster": ("cluster", "cluster"),
    "completion": ("local", "completion"),
    "daemon": ("local", "daemon"),
    "dead-letter": ("alerts", "dead_letter"),
    "diff": ("diff", "diff"),
    "explain": ("jobs", "explain"),
    "graph": ("jobs", "graph"),
    "heartbeat": ("checkpoints", "heartbeat"),
    "import-crontab": ("local", "import_crontab"),
    "jobs": ("jobs", "jobs"),
    "logs": ("runs", "logs"),
    "next": ("local", "next_cmd"),
    "notifications": ("alerts", "notifications"),
    "notify": ("alerts", "notify"),
    "pause": ("jobs", "pause"),
    "ping": ("runs", "ping"),
    "pools": ("backfills", "pools"),
    "reload": ("jobs", "reload"),
    "rerun": ("runs", "rerun"),
    "resume": ("jobs", "resume"),
    "run-now": ("runs", "run_now"),
    "runs": ("runs", "runs"),
    "show": ("jobs", "show"),
    "status": ("jobs", "status"),
    "token": ("tokens", "token"),
    "validate": ("local", "validate"),
    "worker": ("local", "worker"),
}


class Group(click.Group):
    """The top-level group: its commands come from COMMANDS, loaded lazily;
    global options may follow the subcommand; errors print as one line."""

    def list_commands(self, ctx):
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx, name):
        if name in self.commands:
            return self.commands[name]
        where = COMMANDS.get(name)
        if where is None:
            return None
        module = importlib.import_module(f"{__package__}.{where[0]}")
        return getattr(module, where[1])

    def parse_args(self, ctx, args):
        if ctx.parent is None:
            args = hoist_global_options(list(args), set(self.list_commands(ctx)))
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            click.echo(f"cronrd: {exc}", err=True)
            sys.exit(2)
        except CronrdError as exc:
            click.echo(f"cronrd: {exc}", err=True)
            sys.exit(1)


def _print_version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .. import release  # (only here: it may ask git)
    click.echo(f"cronrd, version {release.describe()}")
    ctx.exit()


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, param, value: _print_version(ctx, value),
              help="Show the version and the commit it was built from, and exit.")
@click.option("--config", "-c", metavar="FILE", help="Daemon config (default: $CRONRD_CONFIG "
              f"or {DEFAULT_CONFIG_PATH}).")
@click.option("--socket", metavar="PATH", help="Control socket (default: from the config).")
@click.pass_context
def main(ctx, config, socket):
    """cronrd: a fault-tolerant cron replacement."""
    ctx.obj = Ctx(config, socket)


# -- status / jobs / runs -----------------------------------------------------------------
CONSISTENT_HELP = ("Answer only after this node has applied everything the leader had "
                   "committed when the request arrived (a ReadIndex round trip to the "
                   "leader); fails while no leader is known.")


def consistent_option(f):
    return click.option("--consistent", is_flag=True, help=CONSISTENT_HELP)(f)


def _id_arg(text: str, what: str) -> int:
    """A numeric id given as an argument, or a usage error saying ``what``."""
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{what}, not {text!r}") from None


def read_args(consistent: bool, args: dict | None = None) -> dict:
    """The args of a read request; {"consistent": true} asks for a ReadIndex first."""
    args = dict(args or {})
    if consistent:
        args["consistent"] = True
    return args


@overload
def _when(text: str, now: float, what: str) -> float: ...
@overload
def _when(text: str | None, now: float, what: str) -> float | None: ...
def _when(text: str | None, now: float, what: str) -> float | None:
    """--since/--until: ISO 8601 (UTC unless it says otherwise) or a
    duration back from now (90m, 2h, 1d)."""
    if text is None:
        return None
    from ..schedule import parse_duration, parse_iso
    try:
        return now - parse_duration(text)
    except CronrdError:
        pass
    try:
        return float(parse_iso(text))
    except CronrdError:
        raise UsageError(f"{what} {text!r}: give an ISO time (2026-12-01T06:00:00Z) or a "
                         "duration back from now (90m, 2h, 1d)") from None


def _time_text(iso: str | None, tz: str | None, local: bool) -> str | None:
    """A time as listings show it: ISO UTC, or with --local in the job's zone."""
    if iso is None or not local or not tz:
        return iso
    import datetime as dt
    from ..schedule import resolve_timezone
    t = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return t.astimezone(resolve_timezone(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


def _seconds(iso: str | None) -> float | None:
    if iso is None:
        return None
    import datetime as dt
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _short_duration(seconds: float) -> str:
    """A run's duration for a table: 0.4s, 9.9s, 12s, 1m15s, 2h3m (never
    `1s100ms`)."""
    from ..schedule import human_duration
    seconds = max(0.0, seconds)
    if round(seconds, 1) < 10:
        return f"{seconds:.1f}s"
    return human_duration(round(seconds))


def run_row(r: dict, now: float, local: bool) -> list:
    """One line of `cronrd runs`."""
    tz = r.get("timezone")
    started, finished = _seconds(r.get("started_at")), _seconds(r.get("finished_at"))
    duration = None
    if started is not None:
        duration = _short_duration((finished if finished is not None else now) - started)
        if finished is None:
            duration += "+"   # still running
    exit_text = f"sig {r['signal']}" if r.get("signal") else r.get("exit_code")
    reason = r.get("reason")
    due = _seconds(r.get("due_at"))
    if r["state"] in ("pending", "assigned") and due is not None and started is None:
        when = _time_text(r["due_at"], tz, local)
        due_text = f"due {when}" + (f" (in {_short_duration(due - now)})" if due > now else "")
        reason = f"{due_text}; {reason}" if reason else due_text
    return [r["run_id"], r["job"], _time_text(r["fire_time"], tz, local), r["kind"],
            r["attempt"], r.get("node"), r["state"], _time_text(r.get("started_at"), tz, local),
            duration, exit_text, reason]


RUN_HEADERS = ["run", "job", "fire time", "kind", "attempt", "node", "state", "started",
               "duration", "exit", "reason"]


def _echo_inputs(runs: list[dict]) -> None:
    """Below a table of runs: the key and parameters of those that have them."""
    for r in runs:
        if r.get("key") or r.get("params"):
            parts = ([f"key {r['key']}"] if r.get("key") else []) + (
                ["params " + " ".join(f"{k}={v}" for k, v in sorted(r["params"].items()))]
                if r.get("params") else [])
            click.echo(f"run {r['run_id']}: " + "; ".join(parts))
    _echo_heartbeats(runs)


def _echo_heartbeats(runs: list[dict], now: float | None = None) -> None:
    """Below a table of runs: the progress and last heartbeat of those that
    sent one (`cronrd heartbeat`)."""
    from ..schedule import parse_iso
    now = Clock().now() if now is None else now
    for r in runs:
        if r.get("heartbeat_at") is None:
            continue
        parts = []
        if r.get("progress") is not None:
            parts.append(f"progress {r['progress'] * 100:.0f}%")
        parts.append(f"last heartbeat {r['heartbeat_at']} "
                     f"({_ago(now - parse_iso(r['heartbeat_at']))})")
        if r.get("heartbeat_message"):
            parts.append(r["heartbeat_message"])
        click.echo(f"run {r['run_id']}: " + "; ".join(parts))


def _ago(seconds: Any) -> str | None:
    if not isinstance(seconds, (int, float)):
        return None
    if seconds < 60:
        return f"{seconds:.1f}s ago"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s ago"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m ago"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h ago"


def every_command() -> dict[str, click.Command]:
    """Every top-level command by name, each module loaded (for checks of
    the help and the man page: ``main.commands`` holds only those loaded)."""
    ctx = click.Context(main)
    found = {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}
    return {name: cmd for name, cmd in found.items() if cmd is not None}

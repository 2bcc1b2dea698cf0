"""The cronrd command line: parse, ask the daemon, print. Exit 1 on errors,
2 on usage errors."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import CronrdError, UsageError
from .runtime.clock import Clock

if TYPE_CHECKING:
    from .client import Client

# The CLI is interactive: modules a command does not need are imported lazily
# (`cronrd --version` must not load YAML or SQLite).
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

    def client(self, timeout: float | None = 30.0, quiet: bool = False) -> "Client":
        """The daemon's control socket; with the daemon down, its read
        commands are answered from the state database (offline.py), which
        is said on stderr unless ``quiet``."""
        from .client import Client
        from .offline import ReadClient
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


class Group(click.Group):
    def parse_args(self, ctx, args):
        if ctx.parent is None:
            args = hoist_global_options(list(args), self.commands)
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
    from .config import config_path, load_config
    from .errors import ConfigError
    from .runtime.daemon import run_daemon
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


@main.command("check-config")
@click.argument("file", required=False, type=click.Path())
@click.pass_obj
def check_config(obj: Ctx, file):
    """Check the daemon config FILE (default: the one the daemon reads: --config,
    $CRONRD_CONFIG or /etc/cronrd/cronrd.yaml) and the directories and certificate
    files it names; print every problem as FILE:LINE:COL: message. Exit 1 on any
    problem."""
    from .config import config_path, format_address, load_config
    from .errors import ConfigError
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


def _conflict_text(value: Any) -> str:
    """One line for a job's conflict entry (a string, or a structure the daemon sends)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("message", "text", "reason"):
            if isinstance(value.get(key), str):
                return value[key]
    return json.dumps(value, sort_keys=True)


def _clock_text(offset_ms, error_ms=None) -> str:
    """'12ms ahead of the cluster's clock (+-1ms)', '1.5s behind ...', 'in step
    with ...', 'not measured yet against ...'."""
    if not isinstance(offset_ms, (int, float)):
        return "not measured yet against the cluster's clock"
    a = abs(offset_ms)
    size = f"{a / 1000:.1f}s" if a >= 1000 else f"{a:.0f}ms"
    err = f" (+-{error_ms:.0f}ms)" if isinstance(error_ms, (int, float)) and error_ms >= 1 else ""
    if a < 0.5:
        return f"in step with the cluster's clock{err}"
    return f"{size} {'ahead of' if offset_ms > 0 else 'behind'} the cluster's clock{err}"


@main.command()
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Ctx, consistent, as_json):
    """Show this node's role, the leader, jobs, running runs and conflicts."""
    st = obj.client().call("status", read_args(consistent))
    if as_json:
        emit_json(st)
        return
    starting = "" if st.get("ready", True) else " (starting up)"
    click.echo(f"node      {st.get('node_id', '?')}{starting}")
    if st.get("offline"):
        click.echo(f"daemon    NOT RUNNING: the state below is this node's copy as of "
                   f"{st.get('state_as_of')}; start it with `systemctl start cronrd`")
    role = st.get("role") or "unknown"
    term = st.get("term")
    leader = st.get("leader")
    click.echo(f"role      {role}" + (f", term {term}" if term is not None else ""))
    if not st.get("offline"):
        click.echo(f"leader    {leader}" if leader else
                   "leader    none known (an election is running, or no majority of the "
                   "members can reach each other)")
    cert = st.get("certificate")
    if isinstance(cert, dict):
        click.echo(f"cert      serial {cert.get('serial')}, valid until {cert.get('not_after')}"
                   f" ({cert.get('days_left')} days)")
        if cert.get("warning"):
            click.echo(f"WARNING   {cert['warning']}")
    if "max_clock_offset_ms" in st:
        click.echo("clock     " + _clock_text(st.get("clock_offset_ms"), st.get("clock_error_ms")))
        if st.get("clock_off"):
            click.echo(f"WARNING   this node's clock is beyond cluster.max_clock_offset "
                       f"({st['max_clock_offset_ms']:g}ms): check its time sync "
                       "(timedatectl, chronyc tracking)")
    if st.get("peer_transport") == "insecure":
        click.echo("peer transport: INSECURE (no TLS, anyone reaching the port can impersonate "
                   "a node" + ("; allow_network: reachable beyond loopback)"
                               if st.get("insecure_network") else "; loopback only)"))
    if "version" in st:
        up = st.get("uptime_s")
        click.echo(f"version   {st['version']}, pid {st.get('pid', '?')}"
                   + (f", up {up:.0f}s" if isinstance(up, (int, float)) else ""))
    m = st.get("maintenance")
    if m:
        click.echo(f"PAUSED    every job is paused for maintenance{_pause_text(m)}; fire "
                   "times are recorded as skipped until `cronrd resume --all`")
    for d in st.get("down") or []:
        click.echo(f"DOWN      member {d['id']}: " + (
            "never reached from this node" if d.get("last_contact_s") is None else
            f"last heard from {_ago(d['last_contact_s'])}"))
    if "jobs" in st:
        click.echo(f"jobs      {st['jobs']} ({st.get('paused', 0)} paused), "
                   f"{st.get('running', 0)} running, {st.get('assigned', 0)} about to start")
    if st.get("pools"):
        click.echo("pools     " + ", ".join(
            f"{p['pool']} {p['in_use']}/{'-' if p['slots'] is None else p['slots']}"
            + (" per node" if p.get("scope") == "node" else "")
            + (f" ({p['waiting']} waiting)" if p["waiting"] else "") for p in st["pools"])
            + "; `cronrd pools` for more")
    idx = []
    if st.get("commit_index") is not None:
        idx.append(f"commit index {st['commit_index']}")
    if st.get("applied_index") is not None:
        idx.append(f"applied index {st['applied_index']}")
    digest = st.get("state_digest")
    if idx or digest:
        click.echo("state     " + ", ".join(idx + ([f"digest {digest[:16]}"] if digest else [])))
    if st.get("http"):
        click.echo(f"http      {st['http']} (web UI and API, /metrics)")
    if "socket" in st:
        click.echo(f"paths     socket {st['socket']}\n          data {st.get('data_dir')}\n"
                   f"          logs {st.get('log_dir')}\n          jobs {st.get('jobs_dir')}")
    conflicts = st.get("conflicts") or []
    if conflicts:
        click.echo(f"conflicts {len(conflicts)} job(s) defined differently on different "
                   "nodes:")
        for c in conflicts:
            click.echo(f"  {_conflict_text(c)}")
    problems = st.get("problems") or []
    if problems:
        click.echo(f"problems  {len(problems)} in job files (`cronrd validate`):")
        for p in problems:
            click.echo(f"  {p}")


JOBS_PAGE = 1000  # jobs asked for at once: the first page prints while the next is read


def job_pages(client, consistent: bool, match: str | None):
    """Every job, a page at a time (the daemon's `jobs` with limit/after)."""
    after = None
    while True:
        page = client.call("jobs", read_args(consistent, {"limit": JOBS_PAGE, "after": after,
                                                          "match": match}))
        yield page["jobs"]
        after = page["next"]
        if after is None:
            return
        consistent = False  # the first page waited for the cluster already


@main.command()
@click.argument("pattern", required=False)
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def jobs(obj: Ctx, pattern, consistent, as_json):
    """List jobs with their next fire time and last run (PATTERN: only the
    names it matches, shell-style, e.g. 'backup-*'). Printed a page at a
    time: the first lines come at once however many jobs there are."""
    if as_json:
        # One JSON list, a job per line, written as the daemon streams it:
        # its text is not decoded and encoded again here.
        out = sys.stdout
        first = [True]

        def write(msg: dict) -> None:
            if msg.get("data"):
                out.write(("[\n" if first[0] else ",\n") + msg["data"])
                out.flush()
                first[0] = False
        obj.client().call("jobs", read_args(consistent, {"stream": True, "match": pattern}),
                          on_message=write)
        out.write("[]\n" if first[0] else "\n]\n")
        return
    pages = job_pages(obj.client(), consistent, pattern)
    headers = ["job", "schedule", "state", "next fire", "last run"]
    widths: list[int] | None = None
    conflicts: list[str] = []
    last_good: list[str] = []
    for page in pages:
        out = []
        for j in page:
            state = "paused" if j["paused"] else ("disabled" if not j["enabled"] else "active")
            if j.get("file_problem"):
                state += " (last good)"
                last_good.append(f"{j['name']}: {j['file_problem']}")
            if j.get("conflict") is not None:
                state += " CONFLICT"
                text = _conflict_text(j["conflict"])
                conflicts.append(text if j["name"] in text else f"{j['name']}: {text}")
            last = j["last_run"]
            out.append([j["name"], j["schedule"], state, j["next_fire"],
                        f"{last['state']} {last['fire_time']}" if last else None])
        widths = table(out, headers, widths, header=widths is None)
    if widths is None:
        table([], headers)
    if conflicts:
        click.echo("\nCONFLICT: defined differently on different nodes; the job keeps its "
                   "last agreed version until the job files agree:")
        for c in conflicts:
            click.echo(f"  {c}")
    if last_good:
        click.echo("\nLAST GOOD: these jobs keep running their last good version because "
                   "their file has a problem (`cronrd validate`):")
        for c in last_good:
            click.echo(f"  {c}")


def _when(text: str | None, now: float, what: str) -> float | None:
    """--since/--until: ISO 8601 (UTC unless it says otherwise) or a
    duration back from now (90m, 2h, 1d)."""
    if text is None:
        return None
    from .schedule import parse_duration, parse_iso
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
    from .schedule import resolve_timezone
    t = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return t.astimezone(resolve_timezone(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


def _seconds(iso: str | None) -> float | None:
    if iso is None:
        return None
    import datetime as dt
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _short_duration(seconds: float) -> str:
    from .schedule import human_duration
    return human_duration(round(seconds) if seconds >= 10 else round(seconds, 1))


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


@main.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--state", "states", metavar="STATE", multiple=True,
              help="Only runs in this state (repeat, or a comma list: failed,lost).")
@click.option("--kind", "kinds", metavar="KIND", multiple=True,
              help="Only scheduled, catchup, manual, retry, backfill or rerun runs "
              "(repeatable).")
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


@main.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--next", "count", default=5, show_default=True, type=click.IntRange(0, 100),
              help="How many next fire times to show.")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def show(obj: Ctx, job, count, consistent, as_json):
    """Everything about one job: state, definition, source file(s), next
    fire times, running runs and the last runs."""
    j = obj.client().call("job", read_args(consistent, {"name": job, "next": count}))
    if as_json:
        emit_json(j)
        return
    print_job(j, Clock().now())


@main.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--dot", is_flag=True, help="Graphviz DOT (pipe it to `dot -Tsvg`).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def graph(obj: Ctx, job, dot, consistent, as_json):
    """The dependency graph (depends_on), each job with its last run; with
    JOB, only its ancestors and descendants."""
    g = obj.client().call("graph", read_args(consistent, {"job": job}))
    if as_json:
        emit_json(g)
    elif dot:
        click.echo(graph_dot(g))
    else:
        click.echo(graph_text(g, job))


def _graph_label(j: dict) -> str:
    if j["missing"]:
        return "(no such job)"
    last = j["last_run"]
    state = "never ran" if last is None else f"{last['state']} {last['fire_time']}"
    if last is not None and last["state"] in ("skipped", "waiting", "failed") and last["reason"]:
        state += f" ({last['reason']})"
    rule = f", {j['trigger_rule']}" if j["trigger_rule"] else ""
    return f"[{j['schedule']}{rule}] {state}"


def graph_text(g: dict, focus: str | None = None) -> str:
    """The graph as indented trees from the jobs without parents; a job
    reached again (a fan-in) is named with "(see above)"."""
    by_name = {j["name"]: j for j in g["jobs"]}
    children: dict[str, list[str]] = {}
    has_parent: set[str] = set()
    for parent, child in g["edges"]:
        children.setdefault(parent, []).append(child)
        has_parent.add(child)
    if not by_name:
        return "no job has depends_on"
    lines: list[str] = []
    shown: set[str] = set()

    def walk(name: str, prefix: str, last: bool, top: bool) -> None:
        mark = "" if top else ("`-- " if last else "|-- ")
        here = " <" if name == focus else ""
        if name in shown:
            lines.append(f"{prefix}{mark}{name}{here} (see above)")
            return
        shown.add(name)
        lines.append(f"{prefix}{mark}{name}{here}  {_graph_label(by_name[name])}")
        kids = sorted(children.get(name, ()))
        inner = prefix + ("" if top else ("    " if last else "|   "))
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    roots = [n for n in sorted(by_name) if n not in has_parent]
    for root in roots or sorted(by_name)[:1]:
        walk(root, "", True, True)
    for name in sorted(by_name):  # in a cycle only
        if name not in shown:
            walk(name, "", True, True)
    if g.get("truncated"):
        lines.append("... more jobs not shown; name one: cronrd graph JOB")
    return "\n".join(lines)


def graph_dot(g: dict) -> str:
    """The graph in Graphviz DOT: an edge from each parent to its child."""
    colours = {"succeeded": "palegreen", "failed": "salmon", "timed_out": "salmon",
               "lost": "salmon", "cancelled": "lightgrey", "skipped": "lightgrey",
               "running": "lightblue", "waiting": "khaki", "pending": "khaki",
               "assigned": "khaki"}

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace(
            "\n", "\\n") + '"'

    out = ["digraph cronrd {", "  rankdir=LR;", "  node [shape=box, style=filled];"]
    for j in g["jobs"]:
        last = j["last_run"]
        state = "missing" if j["missing"] else (last["state"] if last else "never ran")
        label = f"{j['name']}\n{j['schedule'] or 'no such job'}\n{state}"
        out.append(f"  {q(j['name'])} [label={q(label)}, fillcolor="
                   f"{colours.get(state, 'white')}];")
    within = {(p["job"], j["name"]): p.get("within") for j in g["jobs"] for p in j["parents"]}
    for parent, child in g["edges"]:
        w = within.get((parent, child))
        attr = f' [label="within {w:g}s", style=dashed]' if w else ""
        out.append(f"  {q(parent)} -> {q(child)}{attr};")
    out.append("}")
    return "\n".join(out)
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
    from .schedule import parse_iso
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


def _pause_text(p: dict | None) -> str:
    if not p:
        return ""
    by = f" by {p['by']}" if p.get("by") else ""
    note = f": {p['note']}" if p.get("note") else ""
    return printable(f"{by} at {p.get('at')}{note}")


def print_job(j: dict, now: float) -> None:
    import yaml
    state = j.get("state") or ("paused" if j["paused"] else "active")
    if state == "paused":
        state += _pause_text(j.get("pause")) + "; `cronrd resume " + j["name"] + "` ends it"
    elif state == "disabled":
        state += " (enabled: false in its job file)"
    elif state.startswith("paused (maintenance)"):
        state = "paused for maintenance" + _pause_text(j.get("maintenance")) + \
            "; `cronrd resume --all` ends it"
    if j.get("file_problems"):
        state += ", running its last good version because its file has problems:"
    click.echo(f"job        {j['name']}")
    click.echo(f"state      {state}")
    for p in j.get("file_problems") or []:
        click.echo(f"             {p}")
    if j.get("conflict") is not None:
        click.echo(f"CONFLICT   {_conflict_text(j['conflict'])}")
    if j.get("description"):
        click.echo(f"about      {j['description']}")
    click.echo(f"schedule   {j['schedule']}  ({j['timezone']})")
    cmd = j["command"]
    text = cmd.rstrip("\n") if isinstance(cmd, str) else json.dumps(cmd)
    click.echo("command    " + text.replace("\n", "\n           "))
    sources = j.get("sources") or []
    if sources:
        click.echo("source     " + "\n           ".join(
            f"{s.get('node')}: {s.get('source')}" + ("" if s.get("digest") == j.get("digest")
                                                     else " (a different definition)")
            for s in sources))
    elif j.get("source"):
        click.echo(f"source     {j['source']}")
    nxt = j.get("next_fires") or []
    if nxt:
        from .schedule import format_fire, parse_iso
        click.echo("next       " + "\n           ".join(
            format_fire(parse_iso(t), j["timezone"]) for t in nxt))
    else:
        click.echo("next       none (" + ("not scheduled while " + state.split(" ")[0]
                                          if not state.startswith("active") else
                                          "the schedule fires no more, or only at boot")
                   + ")")
    active = j.get("active_runs") or []
    if active:
        click.echo(f"active     {len(active)} run(s):")
        table([run_row(r, now, False) for r in active], RUN_HEADERS)
        _echo_heartbeats(active, now)
    recent = j.get("recent_runs") or []
    click.echo(f"\nlast {len(recent)} run(s):" if recent else "\nno runs yet")
    if recent:
        table([run_row(r, now, False) for r in recent], RUN_HEADERS)
        _echo_inputs(recent)
    click.echo("\ndefinition:")
    text = yaml.safe_dump(j.get("spec") or {}, sort_keys=False, default_flow_style=False)
    click.echo("  " + text.rstrip("\n").replace("\n", "\n  "))


@main.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--at", "at", metavar="TIME", help="The fire time to explain: ISO 8601, UTC "
              "unless it has an offset (2026-03-29T01:00:00Z, 2026-03-29T03:00+02:00).")
@click.option("--next", "next_", is_flag=True, help="Explain the next fire time: what would "
              "happen to it now.")
@click.option("--local", is_flag=True, help="--at is the wall clock of the job's time zone "
              "(2026-03-29T02:30).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def explain(obj: Ctx, job, at, next_, local, consistent, as_json):
    """Why JOB did (not) run at a fire time, or what will happen at one: the
    schedule and its daylight-saving rule, the job's definition, pauses (who,
    why), catch-up, overlap, a child's parents and trigger rule, placement and
    every attempt, then a verdict. Without --at or --next: its latest fire
    time. An @after child: --at T is the fire time of one of its records (the
    newest parent fire time it consumed); --next is its gate now (which
    parents it waits for)."""
    if at is not None and next_:
        raise UsageError("give --at TIME or --next, not both")
    if local and at is None:
        raise UsageError("--local says how to read --at TIME: give --at too")
    args: dict[str, Any] = {"job": job}
    if at is not None:
        args["at"] = at
    if local:
        args["local"] = True
    if next_:
        args["next"] = True
    res = obj.client().call("explain", read_args(consistent, args))
    if as_json:
        emit_json(res)
        return
    if res.get("at") is None:   # an @after child's next generation: no time yet
        click.echo(f"{'explain':<11} {res['job']}: its next generation (now {res['now']}, "
                   f"{res['timezone']}) - still to come")
    else:
        click.echo(f"{'explain':<11} {res['job']} at {res['at']} ({res['local']}, "
                   f"{res['timezone']})" + (" - still to come" if res.get("future") else ""))
    for step in res["steps"]:
        click.echo(f"{step['step']:<11} {step['text']}")
    click.echo(f"{'verdict':<11} {res['verdict']['text']}")


@main.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--run", "run_id", type=int, metavar="ID",
              help="This run (default: the latest that started).")
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

    stdout and stderr come interleaved in the order they came; a log over
    max_log_bytes shows its head, a line saying how much was dropped, and
    its tail."""
    import time
    if run_id is not None and since is not None:
        raise UsageError("--run and --since choose runs two ways: give one of them")
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


@main.command("run-now")
@click.argument("job", shell_complete=complete_jobs)
@click.option("--wait", is_flag=True, help="Wait for the run (and its retries); exit with "
              "its exit code.")
@click.option("--param", "params", metavar="NAME=VALUE", multiple=True,
              help="A value for one of the job's params: (repeatable); the run gets it as "
              "CRONRD_PARAM_<NAME>.")
@click.option("--key", metavar="KEY", help="Idempotency key: if the job already has a run "
              "made with KEY, that run is returned and no new one starts.")
@click.pass_obj
def run_now(obj: Ctx, job, wait, params, key):
    """Start a job now, outside its schedule."""
    def show(msg):
        if "event" in msg:
            r = msg["event"]
            click.echo(f"run {r['run_id']} attempt {r['attempt']}: {r['state']}"
                       + (f" ({r['reason']})" if r["reason"] else ""), err=True)
    args = {"job": job, "wait": wait, "params": param_pairs(params)}
    if key is not None:
        args["key"] = key
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


def _job_or_all(job: str | None, all_jobs: bool, command: str) -> None:
    if all_jobs and job:
        raise UsageError(f"give a JOB or --all, not both (`cronrd {command} --all`)")
    if not all_jobs and not job:
        raise UsageError(f"name the job to {command} (`cronrd jobs` lists them), or pass "
                         f"--all for every job")


@main.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--all", "all_jobs", is_flag=True, help="Every job, for maintenance (root): "
              "`cronrd resume --all` ends it; jobs paused on their own stay paused.")
@click.option("--note", default="", metavar="TEXT", help="Why (shown by show and status).")
@click.pass_obj
def pause(obj: Ctx, job, all_jobs, note):
    """Stop scheduling a job (or --all); its fire times are recorded as skipped."""
    _job_or_all(job, all_jobs, "pause")
    res = obj.client().call("pause", {"job": job, "all": all_jobs, "note": note})
    if all_jobs:
        click.echo("every job paused for maintenance; `cronrd resume --all` ends it"
                   if res["changed"] else "already paused for maintenance (note updated)")
        return
    click.echo(f"{job} paused" if res["changed"] else f"{job} was already paused")


@main.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--all", "all_jobs", is_flag=True, help="End the maintenance pause of every job.")
@click.pass_obj
def resume(obj: Ctx, job, all_jobs):
    """Schedule a paused job again, or end `pause --all` (missed fires stay skipped)."""
    _job_or_all(job, all_jobs, "resume")
    res = obj.client().call("resume", {"job": job, "all": all_jobs})
    if all_jobs:
        click.echo("maintenance pause ended; jobs are scheduled again" if res["changed"]
                   else "there was no maintenance pause")
        return
    click.echo(f"{job} resumed" if res["changed"] else f"{job} was not paused")


@main.command()
@click.argument("run_id", metavar="[RUN_ID]", type=int, required=False)
@click.option("--job", metavar="JOB", shell_complete=complete_jobs,
              help="Cancel every run of JOB that has not ended.")
@click.pass_obj
def cancel(obj: Ctx, run_id, job):
    """Cancel a run that has not ended: its processes get SIGTERM, then
    SIGKILL after the job's kill_grace; it ends `cancelled` and is not retried."""
    if (run_id is None) == (job is None):
        raise UsageError("give a RUN_ID (`cronrd runs` lists them) or --job JOB")
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


# -- backfill and rerun ---------------------------------------------------------------------
BACKFILL_ACTIONS = {"pause": "paused", "resume": "running", "cancel": "cancelled"}


@main.command()
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


@main.command()
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
    from .schedule import iso_utc
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


@main.command()
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


@main.command()
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
    from .schedule import parse_iso
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


@main.command()
@click.argument("args", nargs=-1, metavar="[ack ID]")
@click.option("--note", default="", metavar="TEXT", help="With ack: why, or what was done.")
@click.option("--all", "show_all", is_flag=True, help="Also acked and resolved alerts.")
@click.option("--job", default=None, metavar="JOB", help="Only this job's alerts.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100000))
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def alerts(obj: Ctx, args, note, show_all, job, limit, consistent, as_json):
    """Open alerts, newest first: SLA misses and runs that failed their last
    retry. `cronrd alerts ack ID --note TEXT` acknowledges one."""
    if args:
        if len(args) != 2 or args[0] != "ack":
            raise UsageError("use `cronrd alerts` to list, or `cronrd alerts ack ID --note "
                             "TEXT`")
        alert_id = _id_arg(args[1], "alerts ack takes an alert id (`cronrd alerts` lists "
                           "them)")
        res = obj.client().call("alert_ack", {"id": alert_id, "note": note})
        if as_json:
            emit_json(res)
            return
        click.echo(f"alert {alert_id} acked")
        return
    res = obj.client().call("alerts", read_args(consistent, {
        "all": show_all, "job": job, "limit": limit}))
    if as_json:
        emit_json(res["alerts"])
        return
    if not res["alerts"]:
        click.echo("no open alerts" if not show_all else "no alerts")
        return
    from .schedule import iso_utc
    table([[a["alert_id"], a["job"], a["kind"], a["fire_time"], iso_utc(a["opened_at"]),
            a["state"], a["detail"] + (f" [{a['note']}]" if a["note"] else "")]
           for a in res["alerts"]],
          ["id", "job", "kind", "fire_time", "opened", "state", "detail"])


@main.command("dead-letter")
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
        from .schedule import iso_utc
        table([[d["run_id"], d["job"], d["fire_time"], iso_utc(d["at"]), d["state"],
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


@main.command()
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


@main.command()
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


@main.group()
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


@main.command()
@click.pass_obj
def reload(obj: Ctx):
    """Re-read the job files now (as SIGHUP does)."""
    res = obj.client().call("reload")
    click.echo(f"{res['jobs']} jobs, {res['changes']} changed")
    if res.get("waiting"):
        click.echo(f"from {res['waiting']} on, waiting for another node that reads the same "
                   "bytes: their jobs are copied from it when it is done (`cronrd status` "
                   "shows the count)", err=True)
    for p in res["problems"]:
        click.echo(p, err=True)
    if res["problems"]:
        sys.exit(1)


# -- tokens of the HTTP API ------------------------------------------------------------
@main.group()
def token():
    """Tokens of the HTTP API (`Authorization: Bearer TOKEN`), stored hashed in
    the replicated state: made on any node, valid on every node. Root only."""


@token.command("create")
@click.option("--name", required=True, help="A name for it (who or what uses it), unique.")
@click.option("--role", required=True, type=click.Choice(["viewer", "operator", "admin"]),
              help="viewer reads; operator also runs, pauses, cancels, backfills, acks; "
                   "admin also manages tokens and nodes and forces backfills.")
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
        from .errors import ScheduleError
        from .schedule import parse_duration
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
    click.echo(f"{'NAME':<24} {'ROLE':<9} {'JOBS':<16} {'EXPIRES':<21} CREATED")
    for t in res["tokens"]:
        expires = t["expires_at"] or "never"
        if t.get("expired"):
            expires += " (expired)"
        click.echo(f"{t['name']:<24} {t['role']:<9} {t['jobs'] or '*':<16} {expires:<21} "
                   f"{t['created_at']} on {t['node']}")


@token.command("revoke")
@click.argument("name")
@click.pass_obj
def token_revoke(obj: Ctx, name):
    """Revoke the token NAME at once, on every node."""
    obj.client().call("token_revoke", {"name": name})
    click.echo(f"token {name} revoked")


# -- cluster ------------------------------------------------------------------------------
@main.group()
def cluster():
    """Certificates and membership of a cluster of cronrd nodes."""


def _node_id_arg(value: str, what: str = "node id") -> str:
    from .ids import node_id_problem
    problem = node_id_problem(value, what)
    if problem:
        raise UsageError(problem)
    return value


@cluster.command("init-tls")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--nodes", required=True, metavar="ID,ID,...",
              help="Node ids to issue a certificate and key for, comma-separated.")
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 36500),
              help="Validity of new node certificates (renew with `cluster rotate-cert`; "
                   "status warns 30 days ahead).")
@click.option("--force", is_flag=True,
              help="Re-issue certificates of nodes that already have one in DIR.")
def cluster_init_tls(directory, nodes, days, force):
    """Create the cluster CA and node certificates in DIR.

    The CA (ca.crt, ca.key) is created unless DIR already has one, which is then
    used to sign the new certificates; each node id gets ID.crt and ID.key. The
    openssl command does the cryptography."""
    from .runtime.peers import tls
    ids: list[str] = []
    for n in nodes.split(","):
        n = n.strip()
        if not n:
            continue
        _node_id_arg(n)
        if n in ids:
            raise UsageError(f"--nodes lists {n!r} twice")
        ids.append(n)
    if not ids:
        raise UsageError("--nodes needs at least one node id, e.g. --nodes a,b,c")
    d = os.path.abspath(directory)
    if os.path.exists(d) and not os.path.isdir(d):
        raise UsageError(f"{d} exists and is not a directory")
    ca_crt, ca_key = os.path.join(d, tls.CA_CERT), os.path.join(d, tls.CA_KEY)
    have_crt, have_key = os.path.exists(ca_crt), os.path.exists(ca_key)
    if have_crt and not have_key:
        raise CronrdError(
            f"{ca_crt} exists but {ca_key} does not: new node certificates must be signed "
            f"by the cluster's CA key; copy ca.key back into {d} from where you keep it "
            "offline (a new CA would not be trusted by the existing nodes), or pass a new, "
            "empty DIR to start a new cluster")
    if have_key and not have_crt:
        raise CronrdError(f"{ca_key} exists but {ca_crt} does not; restore ca.crt (every node "
                          f"has a copy) or move {ca_key} away to create a new CA")
    existing = [n for n in ids
                if os.path.exists(os.path.join(d, f"{n}.crt"))
                or os.path.exists(os.path.join(d, f"{n}.key"))]
    if existing and not force:
        raise CronrdError(
            f"{d} already has a certificate or key for {', '.join(existing)}; leave "
            f"{'it' if len(existing) == 1 else 'them'} out of --nodes, or pass --force to "
            "issue new ones (then copy them to those hosts again)")
    paths = tls.init_tls(d, ids, days=days)
    click.echo(f"{'kept the existing' if have_crt else 'created the'} cluster CA: {ca_crt}"
               f"{'' if have_crt else ' and ' + ca_key}")
    for n, p in paths.items():
        click.echo(f"node {n}: {p.cert} {p.key}")
    click.echo(
        "\nnext steps:\n"
        f"  1. copy ca.crt, NODE.crt and NODE.key to each node, e.g. to /etc/cronrd/tls/\n"
        "     (keys mode 0600, owned by root)\n"
        "  2. in each node's config (relative paths are relative to the config file):\n"
        "       cluster:\n"
        "         tls: {ca: tls/ca.crt, cert: tls/NODE.crt, key: tls/NODE.key}\n"
        f"  3. keep {tls.CA_KEY} offline, not on the nodes: it is needed only to issue\n"
        f"     certificates for new nodes (`cronrd cluster init-tls {directory} --nodes NEW`)")


@cluster.command("init")
@click.pass_obj
def cluster_init(obj: Ctx):
    """Make this one-host node the first member of a cluster.

    Run it with the daemon stopped. The data_dir keeps its jobs, runs and
    history: it gets a Raft log that starts where the one-host state stands,
    with this node as the only member. Then give the config a cluster:
    section listing only this node in initial_members, start cronrd, and add
    the other nodes with `cronrd cluster add` (they start with join: true)."""
    from .runtime.cluster.first_member import init_first_member
    cfg = obj.config()
    res = init_first_member(cfg)
    click.echo(f"node {res['node']}: {res['data_dir']} is the first member of a cluster now "
               f"(applied index {res['applied_index']}, state {res['state_digest'][:12]}); "
               "its jobs, runs and history are kept")
    steps = []
    if cfg.cluster is None:
        steps.append(
            "add a cluster: section to " + (cfg.path or "the config") + ":\n"
            "       cluster:\n"
            "         listen: HOST:PORT\n"
            f"         initial_members: {{{res['node']}: HOST:PORT}}   # only this node\n"
            "         tls: {ca: tls/ca.crt, cert: tls/" + res['node'] + ".crt, key: tls/"
            + res['node'] + ".key}   # `cronrd cluster init-tls`")
    steps.append("start cronrd; `cronrd status` shows it leading a cluster of one")
    steps.append("for each new node: `cronrd cluster add NODE HOST:PORT` here, then start it "
                 "with cluster.join: true and initial_members listing this node")
    click.echo("\nnext steps:\n" + "\n".join(f"  {i}. {t}" for i, t in enumerate(steps, 1)))


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


def _clock_column(offset_ms) -> str | None:
    """A member's clock against the cluster's median: '+12ms', '-1.5s'."""
    if not isinstance(offset_ms, (int, float)):
        return None
    a = abs(offset_ms)
    if a < 0.5:
        return "0ms"
    return ("+" if offset_ms >= 0 else "-") + (f"{a / 1000:.1f}s" if a >= 1000 else f"{a:.0f}ms")


@cluster.command("members")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def cluster_members(obj: Ctx, as_json):
    """List members: role, reachability, last contact, leader, clock offset.

    The clock column is each member's offset from the members' median clock,
    known for every member on the leader (for this node elsewhere)."""
    res = obj.client().call("cluster_members")
    if as_json:
        emit_json(res)
        return
    rows = []
    for m in res.get("members", []):
        role = m.get("role") or "-"
        if m.get("state") and m["state"] != "up":
            role += f" ({m['state']})"
        if m.get("drained"):
            role += " (drained)"
        reach = m.get("reachable")
        rows.append([f"{m['id']}{' *' if m.get('self') else ''}", m.get("address"), role,
                     None if reach is None else ("yes" if reach else "NO"),
                     "-" if m.get("self") else _ago(m.get("last_contact_s")),
                     "yes" if m.get("leader") else "no",
                     _clock_column(m.get("clock_offset_ms")),
                     ",".join(m.get("tags") or []) or None])
    table(rows, ["id", "address", "role", "reachable", "last-contact", "leader", "clock",
                 "tags"])
    leader = res.get("leader")
    click.echo(f"\n* this node; leader: {leader}" if leader else
               "\n* this node; no leader known (an election is running, or no majority of "
               "the voters can reach each other)")


@cluster.command("add")
@click.argument("node")
@click.argument("address", metavar="ADDR")
@click.option("--token", is_flag=True,
              help="Admit NODE only when it presents a one-time join token (printed here).")
@click.pass_obj
def cluster_add(obj: Ctx, node, address, token):
    """Add NODE at ADDR (HOST:PORT) as a learner.

    ADDR is where the other members dial NODE. The leader promotes it to voter
    once it has caught up, while that keeps the number of voters odd and at most 5.
    With --token, NODE is admitted only when it connects with the one-time token
    printed here (cluster: {join: {token: ...}} in its config): a certificate from
    the cluster CA alone does not make a member."""
    from .config import format_address, parse_address
    _node_id_arg(node)
    try:
        address = format_address(parse_address(address))
    except ValueError as exc:
        raise UsageError(f"ADDR {exc}") from None
    res = obj.client().call("cluster_add", {"node": node, "address": address,
                                            "token": token}) or {}
    if isinstance(res, dict) and res.get("token"):
        click.echo(f"expecting {node} at {address}; its one-time join token:\n\n"
                   f"  {res['token']}\n")
        click.echo(f"next: on {node}, set in the config\n  cluster:\n    join: {{token: "
                   f"{res['token']}}}\n    initial_members: {{...the current members...}}\n"
                   "and start cronrd; it becomes a learner when it connects (the token works "
                   "once and only for this node)")
        return
    role = res.get("role", "learner") if isinstance(res, dict) else "learner"
    click.echo(f"added {node} at {address} as {role}")
    hint = _hint(res)
    click.echo(hint or "it becomes a voter once it has caught up with the log, as long as "
               "the cluster has fewer than 5 voters and the voter count stays odd")
    click.echo(f"next: start cronrd on {node} with cluster.join: true and "
               "cluster.initial_members listing the current members")


@cluster.command("revoke-cert")
@click.argument("serial")
@click.option("--reason", default="revoked by the operator", show_default=True)
@click.pass_obj
def cluster_revoke_cert(obj: Ctx, serial, reason):
    """Refuse the certificate with SERIAL on every node's peer port.

    SERIAL is hex, as `openssl x509 -noout -serial -in NODE.crt` prints it.
    Connections using it are closed; the node needs a new certificate
    (`cronrd cluster rotate-cert`)."""
    res = obj.client().call("cluster_revoke_cert", {"serial": serial, "reason": reason}) or {}
    click.echo(f"revoked certificate serial {res.get('revoked', serial)} on every node")


@cluster.command("rotate-cert")
@click.argument("node")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, exists=True))
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 36500),
              help="Validity of the new certificate.")
def cluster_rotate_cert(node, directory, days):
    """Issue NODE a new key and certificate, signed by the CA in DIR.

    Run it where the CA key is kept. It prints the old and the new serial:
    copy the new NODE.crt and NODE.key to NODE, restart cronrd there, then
    revoke the old serial with `cronrd cluster revoke-cert OLD` on a member."""
    from .runtime.peers import tls
    _node_id_arg(node)
    d = os.path.abspath(directory)
    old = tls.cert_info(os.path.join(d, f"{node}.crt"))
    paths = tls.issue_node_cert(d, node, days=days)
    new = tls.cert_info(paths.cert)
    click.echo(f"node {node}: new certificate {paths.cert} and key {paths.key}")
    click.echo(f"  new serial {new['serial']}, valid until {new['not_after']}")
    if old:
        click.echo(f"  old serial {old['serial']} (valid until {old['not_after']})")
    click.echo("next steps:\n"
               f"  1. copy {paths.cert} and {paths.key} to {node} (key mode 0600, owned by root)\n"
               f"  2. restart cronrd on {node} (systemctl restart cronrd)\n"
               + (f"  3. on a member: cronrd cluster revoke-cert {old['serial']}"
                  if old else "  3. nothing to revoke: NODE had no certificate in DIR"))


def _hint(res: Any) -> str | None:
    if isinstance(res, dict):
        for key in ("hint", "message", "note"):
            if isinstance(res.get(key), str) and res[key]:
                return res[key]
    return None


@cluster.command("remove")
@click.argument("node")
@click.pass_obj
def cluster_remove(obj: Ctx, node):
    """Remove NODE; its job definitions go with it.

    Jobs that no other node defines disappear. Stop cronrd on NODE afterwards."""
    res = obj.client().call("cluster_remove", {"node": node})
    click.echo(f"removed {node}; jobs only {node} defined are gone; stop cronrd on it now")
    hint = _hint(res)
    if hint:
        click.echo(hint)


@cluster.command("transfer-leader")
@click.argument("node", required=False)
@click.pass_obj
def cluster_transfer_leader(obj: Ctx, node):
    """Make NODE (default: any other voter) the leader."""
    res = obj.client().call("cluster_transfer_leader", {"node": node}) or {}
    leader = res.get("leader") if isinstance(res, dict) else None
    click.echo(f"the leader is now {leader}" if leader else
               "leadership transfer started; `cronrd cluster members` shows the new leader")


@cluster.command("drain")
@click.argument("node")
@click.option("--note", default="", help="Why (shown in `cronrd cluster members` and the UI).")
@click.pass_obj
def cluster_drain(obj: Ctx, node, note):
    """Place no new runs on NODE; its running runs finish (for maintenance).

    It stays drained across restarts until `cronrd cluster undrain NODE`."""
    obj.client().call("node_drain", {"node": node, "drained": True, "note": note})
    click.echo(f"drained {node}: no new runs go there (its running runs finish); "
               f"`cronrd cluster undrain {node}` takes it back")


@cluster.command("undrain")
@click.argument("node")
@click.pass_obj
def cluster_undrain(obj: Ctx, node):
    """Let NODE take new runs again."""
    obj.client().call("node_drain", {"node": node, "drained": False})
    click.echo(f"undrained {node}: it takes new runs again")


# -- offline commands ---------------------------------------------------------------------
@main.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--no-permissions", is_flag=True,
              help="Skip the ownership and mode checks (for files not yet installed).")
@click.pass_obj
def validate(obj: Ctx, paths, no_permissions):
    """Check job files (default: the configured jobs_dir); exit 1 on any problem.

    A daemon config among the files is named as one (not checked as a job
    file: `cronrd check-config FILE` checks it) and also makes the exit code 1."""
    from .config import daemon_config_jobs_dir
    from .jobspec import load_job_file, load_jobs_dir
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
    problems, jobs, seen, configs = [], 0, {}, 0
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
    from .jobspec.dependencies import check_dependencies
    problems.extend(check_dependencies(seen))
    for p in problems:
        click.echo(str(p))
    # What this host will not do as a valid job asks (not problems: the file
    # may be meant for other hosts too).
    from .runtime.runs.launch import host_warnings
    from .runtime.runs.cgroups import host_controllers
    controllers = host_controllers()[1]
    warnings = [f"{job.source}:{job.line}:1: warning: job {job.name}: {w}"
                for job in seen.values() for w in host_warnings(job, controllers)]
    warnings += _notify_warnings(obj, seen.values())
    for w in warnings:
        click.echo(w)
    noted = f", {len(warnings)} warning(s) about this host" if warnings else ""
    skipped = f"{configs} daemon config(s) not checked; " if configs else ""
    if problems or configs:
        click.echo(f"{len(problems)} problem(s); {skipped}{jobs} job(s) valid{noted}",
                   err=True)
        sys.exit(1)
    click.echo(f"{jobs} job(s) valid{noted}", err=True)


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
    from .jobspec import is_job_file_name
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
    from .jobspec import Problem
    return Problem(job.source, job.line, 1, f"duplicate job name {job.name!r} (first defined "
                   f"at {first.source}:{first.line}); rename one of them")


def _load_file_unchecked(path, pools=None):
    from .jobspec import parse_job_text
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_job_text(f.read(), path, pools)


def _load_dir_unchecked(path, pools=None):
    from .jobspec import load_jobs_dir
    return load_jobs_dir(path, allowed_uids=None, check_permissions=False, pools=pools)


@main.command("import-crontab")
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
def import_crontab(file, system, owner, include_commented, output):
    """Convert a crontab (FILE, or - for stdin) into cronrd job YAML.

    Exit 0 when every line was converted (warnings allowed), 1 when a line
    could not be (each is named), 2 for usage errors."""
    from .crontab_import import convert_crontab
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


@main.command("next")
@click.argument("what", shell_complete=complete_jobs)
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
    if sched.kind == "after":
        click.echo("@after has no time of its own: the job runs once its parents' runs "
                   "(depends_on) allow; `cronrd graph` shows them")
        return
    trigger = make_trigger(sched, zone)
    t = parse_iso(after) if after else int(Clock().now())
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


# -- from inside a job: checkpoints and heartbeats ------------------------------------------
def _run_client(obj: Ctx) -> tuple["Client", dict]:
    """The daemon that started this run (--socket, else $CRONRD_SOCKET, which
    every run gets) and the run's id and token from the environment."""
    from .client import Client
    run_id, token = os.environ.get("CRONRD_RUN_ID", ""), os.environ.get("CRONRD_RUN_TOKEN", "")
    if not run_id.isdigit() or not token:
        raise UsageError("this command works inside a run of a cronrd job: CRONRD_RUN_ID and "
                         "CRONRD_RUN_TOKEN are not set (keep them in the job's environment)")
    path = obj.socket_arg or os.environ.get("CRONRD_SOCKET") or obj.socket()
    return Client(path, timeout=30), {"run_id": int(run_id), "token": token}


@main.group()
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
    from .state.checkpoints import value_problem
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


@main.command()
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


@main.command()
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


if __name__ == "__main__":
    main()

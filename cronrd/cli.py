"""The cronrd command line: parse, ask the daemon, print. Exit 1 on errors,
2 on usage errors."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import CronrdError, UsageError
from .runtime.clock import Clock

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


def table(rows: list[list[Any]], headers: list[str], widths: list[int] | None = None,
          header: bool = True) -> list[int]:
    """Print rows in columns; ``widths``: the columns of the page before
    (a later page keeps them, so its columns line up with the first's)."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    if widths is None:
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if header:
        click.echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return widths


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
CONSISTENT_HELP = ("Answer only after this node has applied everything the leader had "
                   "committed when the request arrived (a ReadIndex round trip to the "
                   "leader); fails while no leader is known.")


def consistent_option(f):
    return click.option("--consistent", is_flag=True, help=CONSISTENT_HELP)(f)


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
    role = st.get("role") or "unknown"
    term = st.get("term")
    leader = st.get("leader")
    click.echo(f"role      {role}" + (f", term {term}" if term is not None else ""))
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
    if "jobs" in st:
        click.echo(f"jobs      {st['jobs']} ({st.get('paused', 0)} paused), "
                   f"{st.get('running', 0)} running, {st.get('assigned', 0)} about to start")
    idx = []
    if st.get("commit_index") is not None:
        idx.append(f"commit index {st['commit_index']}")
    if st.get("applied_index") is not None:
        idx.append(f"applied index {st['applied_index']}")
    digest = st.get("state_digest")
    if idx or digest:
        click.echo("state     " + ", ".join(idx + ([f"digest {digest[:16]}"] if digest else [])))
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
        out = click.get_text_stream("stdout")
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
    for page in pages:
        out = []
        for j in page:
            state = "paused" if j["paused"] else ("disabled" if not j["enabled"] else "active")
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


@main.command()
@click.argument("job", required=False)
@click.option("--state", "state", metavar="STATE", help="Only runs in this state.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def runs(obj: Ctx, job, state, limit, consistent, as_json):
    """List recent runs (newest first), with skip and failure reasons."""
    res = obj.client().call("runs", read_args(consistent,
                                              {"job": job, "state": state, "limit": limit}))
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
    args = {"job": job, "run_id": run_id, "follow": follow, "since": _since(since),
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


def _since(text: str | None) -> float | None:
    """--since: ISO 8601, or a duration ago (30m, 1h)."""
    if text is None:
        return None
    from .errors import ScheduleError
    from .schedule import parse_duration, parse_iso
    try:
        return Clock().now() - parse_duration(text)
    except ScheduleError:
        pass
    try:
        return float(parse_iso(text))
    except ScheduleError:
        raise UsageError(f"--since {text}: use an ISO 8601 time such as 2026-12-01T10:00:00Z "
                         "or a duration ago such as 30m or 1h") from None


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
@click.argument("run_id", metavar="RUN_ID", type=int)
@click.pass_obj
def cancel(obj: Ctx, run_id):
    """Cancel a run that has not finished (its process is stopped)."""
    res = obj.client().call("cancel", {"run_id": run_id})
    click.echo(f"run {run_id} of {res['job']}: "
               + ("cancelled" if res["state"] == "cancelled" else
                  f"{res['state']}, asked to stop"))


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
    from .runtime import tls
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
    from .runtime.first_member import init_first_member
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
    from .runtime import tls
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


if __name__ == "__main__":
    main()

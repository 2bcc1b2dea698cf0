"""The cluster: cluster init-tls | init | members | add | revoke-cert |
rotate-cert | remove | transfer-leader | drain | undrain."""

from __future__ import annotations

import os
from typing import Any

import click

from ..errors import CronrdError, UsageError
from .base import Ctx, _ago, emit_json, table


# -- cluster ------------------------------------------------------------------------------
@click.group()
def cluster():
    """Certificates and membership of a cluster of cronrd nodes."""


def _node_id_arg(value: str, what: str = "node id") -> str:
    from ..ids import node_id_problem
    problem = node_id_problem(value, what)
    if problem:
        raise UsageError(problem)
    return value


@cluster.command("init-tls")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--nodes", default="", metavar="ID,ID,...",
              help="Node ids to issue a certificate and key for, comma-separated.")
@click.option("--workers", default="", metavar="NAME,NAME,...",
              help="Worker names to issue a worker's certificate and key for (cronrd "
                   "worker: a client of the servers, never a member; its certificate is "
                   "refused on the peer port).")
@click.option("--days", default=365, show_default=True, type=click.IntRange(1, 36500),
              help="Validity of new node certificates (renew with `cluster rotate-cert`; "
                   "status warns 30 days ahead).")
@click.option("--force", is_flag=True,
              help="Re-issue certificates of nodes that already have one in DIR.")
def cluster_init_tls(directory, nodes, workers, days, force):
    """Create the cluster CA and node (and worker) certificates in DIR.

    The CA (ca.crt, ca.key) is created unless DIR already has one, which is then
    used to sign the new certificates; each node id gets ID.crt and ID.key, each
    worker name NAME.crt and NAME.key (a worker's: client use only, refused on
    the peer port). The openssl command does the cryptography."""
    from ..runtime.peers import tls
    ids: list[str] = []
    worker_ids: list[str] = []
    for option, text, into in (("--nodes", nodes, ids), ("--workers", workers, worker_ids)):
        for n in text.split(","):
            n = n.strip()
            if not n:
                continue
            _node_id_arg(n)
            if n in ids or n in worker_ids:
                raise UsageError(f"{option} lists {n!r} twice (or --nodes and --workers "
                                 "both do): a name is one node's or one worker's")
            into.append(n)
    if not ids and not worker_ids:
        raise UsageError("--nodes needs at least one node id, e.g. --nodes a,b,c (or "
                         "--workers NAME,... for workers' certificates)")
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
    existing = [n for n in ids + worker_ids
                if os.path.exists(os.path.join(d, f"{n}.crt"))
                or os.path.exists(os.path.join(d, f"{n}.key"))]
    if existing and not force:
        raise CronrdError(
            f"{d} already has a certificate or key for {', '.join(existing)}; leave "
            f"{'it' if len(existing) == 1 else 'them'} out of --nodes, or pass --force to "
            "issue new ones (then copy them to those hosts again)")
    paths = tls.init_tls(d, ids, days=days, worker_ids=worker_ids)
    click.echo(f"{'kept the existing' if have_crt else 'created the'} cluster CA: {ca_crt}"
               f"{'' if have_crt else ' and ' + ca_key}")
    for n, p in paths.items():
        click.echo(f"{'worker' if n in worker_ids else 'node'} {n}: {p.cert} {p.key}")
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
    from ..runtime.cluster.first_member import init_first_member
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


def _clock_column(offset_ms) -> str | None:
    """A member's clock against the cluster's median: '+12ms', '-1.5s'."""
    if not isinstance(offset_ms, (int, float)):
        return None
    a = abs(offset_ms)
    if a < 0.5:
        return "0ms"
    return ("+" if offset_ms >= 0 else "-") + (f"{a / 1000:.1f}s" if a >= 1000 else f"{a:.0f}ms")


def _version_column(v: object) -> str:
    """``0.3.0 (2)``: a member's release and the cluster version it applies."""
    if not isinstance(v, dict) or not v.get("release"):
        return "?"
    applies = v.get("applies")
    return f"{v['release']}" + (f" ({applies})" if applies is not None else " (?)")


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
                     _version_column(m.get("version")),
                     ",".join(m.get("tags") or []) or None])
    table(rows, ["id", "address", "role", "reachable", "last-contact", "leader", "clock",
                 "version", "tags"])
    workers = res.get("workers") or []
    if workers:
        click.echo("\nworker agents" + ("" if any(w.get("connected") is not None
                                                   for w in workers)
                                         else " (connections: ask the leader)"))
        table([[w["node"], {True: "yes", False: "NO", None: "?"}[w.get("connected")],
                "-" if not w.get("connected") else _ago(w.get("last_contact_s")),
                "-" if w.get("running") is None else str(w["running"]), str(w.get("capacity")),
                _clock_column(w.get("clock_offset_ms")), w.get("version"),
                ",".join(w.get("tags") or []) or None] for w in workers],
              ["worker", "connected", "last-contact", "running", "capacity", "clock",
               "version", "tags"])
    if res.get("cluster_version") is not None:
        click.echo(f"\ncluster version {res['cluster_version']}" + (
            ": MIXED releases; it rises once every member runs the newest"
            if res.get("mixed") else ""))
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
    from ..config import format_address, parse_address
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
    from ..runtime.peers import tls
    _node_id_arg(node)
    d = os.path.abspath(directory)
    old = tls.cert_info(os.path.join(d, f"{node}.crt"))
    paths = tls.issue_node_cert(d, node, days=days)
    new = tls.cert_info(paths.cert)
    assert new is not None  # the certificate openssl has just written
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

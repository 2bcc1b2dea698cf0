"""The ``cluster:`` section -> ``ClusterConfig``: listen address, members, join,
TLS or the insecure mode (loopback only unless allowed), tags, timeouts."""

from __future__ import annotations

import os
import stat
from typing import Mapping

from cronrd import ids
from cronrd.errors import ScheduleError
from cronrd.ids import is_node_id, node_id_problem
from cronrd.schedule import parse_duration

from .addresses import format_address, is_loopback, parse_address
from .model import (CLUSTER_KEYS, MAX_CLOCK_OFFSET, MAX_ELECTION_TIMEOUT, MIN_CLOCK_OFFSET,
                    MIN_ELECTION_TIMEOUT, MIN_NODE_TIMEOUT,
                    TLS_KEYS, Address, ClusterConfig, TLSPaths)
from .problems import ConfigProblems


def parse_cluster(raw: object, path: str, base: str, node_id: str,
                  report: ConfigProblems | None = None, *,
                  load_tls: bool = False) -> ClusterConfig | None:
    """Validate the ``cluster:`` section; ``base`` is the config file's directory.

    Every problem goes to ``report`` (then the result is None); without one,
    the problems are raised at the end as one ConfigError. ``load_tls``: also
    load the TLS files as the peer transport will (PEM, key matching cert)."""
    if report is None:
        report = ConfigProblems(path)
        cluster = parse_cluster(raw, path, base, node_id, report, load_tls=load_tls)
        report.raise_if_any()
        return cluster
    before = len(report.problems)
    C = ("cluster",)
    if not isinstance(raw, dict):
        report.add(C, "cluster must be a mapping with at least listen, initial_members "
                      "and tls (or insecure); see `man cronrd`")
        return None
    for key in raw:
        if key not in CLUSTER_KEYS:
            report.unknown(C, key, CLUSTER_KEYS)
    if not is_node_id(node_id):
        report.add(("node_id",), f"node_id {node_id!r} cannot name a cluster node: it goes "
                                 f"into certificates and host names, so {ids.RULE}; set "
                                 "node_id explicitly")

    # listen
    listen = None
    if raw.get("listen") is None:
        report.add(C + ("listen",), "cluster.listen is required: the \"HOST:PORT\" this node "
                                    "accepts peer connections on, e.g. listen: \"0.0.0.0:7000\"")
    else:
        try:
            listen = parse_address(raw["listen"])
        except ValueError as exc:
            report.add(C + ("listen",), f"cluster.listen {exc}")

    # join (None: invalid, reported)
    join = raw.get("join", False)
    join_token = None
    if isinstance(join, dict):
        extra = sorted(set(join) - {"token"})
        token = join.get("token")
        if extra or not isinstance(token, str) or not token.strip() or len(token) > 255:
            report.add(C + ("join",), "cluster.join must be true, false, or {token: TOKEN} with "
                                      "the token that `cronrd cluster add NODE ADDR --token` "
                                      "printed" + (f" (unknown keys {extra})" if extra else ""))
            join = None
        else:
            join, join_token = True, token.strip()
    if join is not None and not isinstance(join, bool):
        report.add(C + ("join",), f"cluster.join must be true or false (got {join!r}); true "
                                  "means this node joins an existing cluster instead of "
                                  "bootstrapping one")
        join = None

    # initial_members (None: missing or not a mapping, reported)
    members_raw = raw.get("initial_members")
    M = C + ("initial_members",)
    members: dict[str, Address] | None = None
    named: set[str] = set()  # valid node ids, whether or not their address is
    if members_raw is None or members_raw == {}:
        report.add(M, "cluster.initial_members is required: a mapping of node id to the "
                      "\"HOST:PORT\" this node dials for it, including this node "
                      f"({node_id}: ...) unless join: true")
    elif not isinstance(members_raw, dict):
        report.add(M, "cluster.initial_members must be a mapping of node id to "
                      "\"HOST:PORT\", e.g. {a: \"10.0.0.1:7000\", b: \"10.0.0.2:7000\"}")
    else:
        members = {}
        seen: dict[Address, str] = {}
        for member, addr in members_raw.items():
            if not isinstance(member, str):
                report.add(M + (member,), f"cluster.initial_members: node id {member!r} must be "
                                          "a string; quote it", at_key=True)
                continue
            if not is_node_id(member):
                report.add(M + (member,), f"cluster.initial_members: {node_id_problem(member)}",
                           at_key=True)
                continue
            named.add(member)
            try:
                members[member] = parse_address(addr)
            except ValueError as exc:
                report.add(M + (member,), f"cluster.initial_members.{member}: address {exc}")
                continue
            if members[member] in seen:
                report.add(M + (member,), f"cluster.initial_members: {seen[members[member]]} "
                                          f"and {member} have the same address "
                                          f"{format_address(members[member])}; give each node "
                                          "its own")
            seen[members[member]] = member
        if join is False and node_id not in named:
            report.add(M, f"cluster.initial_members must list this node ({node_id!r}) with its "
                          "address; or, if this node joins a running cluster, set join: true "
                          "and run `cronrd cluster add "
                          f"{node_id} HOST:PORT` on one of its members")
        if join is True and not named - {node_id}:
            report.add(M, "with cluster.join: true, cluster.initial_members must list the "
                          "members of the running cluster this node should contact")

    # tls / insecure (insecure None: invalid, reported)
    insecure, insecure_network = _parse_insecure(raw.get("insecure", False), report)
    tls_raw = raw.get("tls")
    tls = None
    if tls_raw is not None and insecure:
        report.add(C + ("insecure",), "cluster has both tls and insecure: true; remove insecure "
                                      "to use mutual TLS (or remove tls for an unauthenticated "
                                      "test cluster)")
    elif tls_raw is None and insecure is False:
        report.add(C, "cluster needs tls: {ca: FILE, cert: FILE, key: FILE} (create the "
                      "files with `cronrd cluster init-tls DIR --nodes ...`), or "
                      "insecure: true, which lets anyone who can reach the listen port "
                      "impersonate a node and run commands on every host: use it only on "
                      "a loopback or isolated test network (insecure: true is accepted "
                      "only on loopback addresses)")
    elif insecure and not insecure_network:
        _check_loopback(listen, members or {}, report)
    if tls_raw is not None:
        tls = _parse_tls(tls_raw, base, report)
        if tls is not None and load_tls:
            _load_tls(tls, report)

    # tags
    tags_raw = raw.get("tags", [])
    if tags_raw is None:
        tags_raw = []
    tags: list[str] = []
    if not isinstance(tags_raw, list):
        report.add(C + ("tags",), f"cluster.tags must be a list of strings, e.g. tags: "
                                  f"[ssd, eu-west] (got {tags_raw!r})")
        tags_raw = []
    for i, tag in enumerate(tags_raw):
        if not isinstance(tag, str) or not tag.strip():
            report.add(C + ("tags", i), f"each entry of cluster.tags must be a non-empty string "
                                        f"(got {tag!r}); quote it")
        elif tag in tags:
            report.add(C + ("tags", i), f"cluster.tags lists {tag!r} twice; remove one")
        elif tag.startswith("executor:"):
            report.add(C + ("tags", i), f"cluster.tags: {tag!r} is announced by the node "
                                        "itself when it offers that executor (podman "
                                        "installed, for executor:container); remove it")
        else:
            tags.append(tag)

    # timeouts (None: invalid, reported)
    def duration(key: str, default: str, bounds: tuple[str, str, float, float] | None = None,
                 hint: str = "") -> float | None:
        """``bounds``: (low, high) as written in the message, then as seconds."""
        try:
            value = parse_duration(raw.get(key, default))
        except ScheduleError as exc:
            report.add(C + (key,), f"cluster.{key}: {exc.message}")
            return None
        if bounds is not None and not bounds[2] <= value <= bounds[3]:
            report.add(C + (key,), f"cluster.{key} must be between {bounds[0]} and "
                                   f"{bounds[1]} (got {value:g}s); the default {default} {hint}")
            return None
        return value

    election = duration("election_timeout", "500ms", (
        f"{MIN_ELECTION_TIMEOUT:g}s", f"{MAX_ELECTION_TIMEOUT:g}s", MIN_ELECTION_TIMEOUT,
        MAX_ELECTION_TIMEOUT), "suits a LAN, raise it for slow or distant links")
    node_timeout = duration("node_timeout", "10s")
    # A node stops starting runs once it has not heard from a leader for one
    # lease (election_timeout). A follower cut off together with the old
    # leader still hears it until CheckQuorum deposes it (up to two election
    # timeouts), then one lease more: the leader may declare a node's runs
    # lost only after all that, or a run could be retried while it starts.
    if election is not None and node_timeout is not None:
        need = max(MIN_NODE_TIMEOUT, 3 * election + 1.0)
        if node_timeout < need:
            report.add(C + ("node_timeout",),
                       f"cluster.node_timeout must be at least {need:g}s (got "
                       f"{node_timeout:g}s): three election timeouts and a margin must pass "
                       "before the leader declares a silent node's runs lost, or it could "
                       "retry them elsewhere while that node still starts them; raise "
                       "node_timeout" + (" or lower election_timeout" if election > 1 else ""))
    max_offset = duration("max_clock_offset", "500ms", (
        f"{MIN_CLOCK_OFFSET * 1000:g}ms", f"{MAX_CLOCK_OFFSET:g}s", MIN_CLOCK_OFFSET,
        MAX_CLOCK_OFFSET), "suits hosts kept in sync by NTP or chrony")
    worker_listen = None
    if raw.get("worker_listen") is not None:
        try:
            worker_listen = parse_address(raw["worker_listen"])
        except ValueError as exc:
            report.add(C + ("worker_listen",), f"cluster.worker_listen {exc}")
        else:
            if insecure:
                report.add(C + ("worker_listen",), (
                    "cluster.worker_listen needs cluster.tls: a worker is known by its "
                    "certificate (`cronrd cluster init-tls DIR --nodes ... --workers ...`); "
                    "remove worker_listen or configure tls"))
            elif worker_listen == listen:
                report.add(C + ("worker_listen",), (
                    "cluster.worker_listen must differ from cluster.listen (the peer port); "
                    "pick another port, e.g. 7100"))
    if len(report.problems) > before:
        return None
    # each of these is None only when a problem went to report (returned above)
    assert listen is not None and members is not None and insecure is not None
    assert node_timeout is not None and election is not None and max_offset is not None
    return ClusterConfig(listen=listen, initial_members=members, join=join,
                         join_token=join_token, tls=tls,
                         insecure=insecure, insecure_network=insecure_network,
                         tags=tuple(tags), node_timeout=node_timeout,
                         election_timeout=election, max_clock_offset=max_offset,
                         worker_listen=worker_listen)


def _parse_insecure(value: object, report: ConfigProblems) -> tuple[bool | None, bool]:
    """``cluster.insecure`` -> (insecure, allowed on the network); None if invalid."""
    key = ("cluster", "insecure")
    if isinstance(value, bool):
        return value, False
    if isinstance(value, dict):
        suggested = set()
        for name in value:
            if name != "allow_network":
                suggested.add(report.unknown(key, name, ("allow_network",)))
        allow = value.get("allow_network")
        if allow is not True:
            if "allow_network" in value or "allow_network" not in suggested:
                report.add(key + ("allow_network",),
                           "cluster.insecure.allow_network must be true (got "
                           f"{allow!r}); it is the explicit word that this insecure cluster "
                           "may use non-loopback addresses; for loopback only, write "
                           "insecure: true")
            return None, False
        return (True, True) if not suggested else (None, False)
    report.add(key, f"cluster.insecure must be true, false or {{allow_network: true}} "
                    f"(got {value!r})")
    return None, False


def _check_loopback(listen: Address | None, members: Mapping[str, Address],
                    report: ConfigProblems) -> None:
    """``insecure: true`` only where nobody else can reach the port (the first
    address that is not loopback is reported: the fix is the same for all)."""
    found = ([(("cluster", "listen"), listen)] if listen is not None else []) + [
        (("cluster", "initial_members", m), a) for m, a in members.items()]
    for key, addr in found:
        if not is_loopback(addr[0]):
            report.add(key, f"cluster.insecure: true is refused because {'.'.join(key)} is "
                            f"{format_address(addr)}, which is not a loopback address "
                            "(127.0.0.0/8, ::1, localhost): without TLS anyone who can reach "
                            "the peer port can impersonate a node and run commands as root "
                            "on every host. Configure tls: {ca, cert, key} (create the files "
                            "with `cronrd cluster init-tls DIR --nodes ...`), or, only if "
                            "this network is isolated, write insecure: {allow_network: true}")
            return


def _parse_tls(raw: object, base: str, report: ConfigProblems,
               section: str = "cluster") -> TLSPaths | None:
    T = (section, "tls")
    if not isinstance(raw, dict):
        report.add(T, f"{section}.tls must be a mapping {{ca: FILE, cert: FILE, key: FILE}}")
        return None
    before = len(report.problems)
    for key in raw:
        if key not in TLS_KEYS:
            report.unknown(T, key, TLS_KEYS)
    what = {"ca": "the cluster CA certificate (ca.crt)",
            "cert": "this node's certificate (NODE.crt)",
            "key": "this node's private key (NODE.key)"}
    files: dict[str, str] = {}
    for key in TLS_KEYS:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            report.add(T + (key,), f"{section}.tls.{key} is required: the path of {what[key]}; "
                                   "`cronrd cluster init-tls DIR --nodes ...` creates them")
            continue
        full = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
        try:
            st = os.stat(full)
        except (FileNotFoundError, NotADirectoryError):
            report.add(T + (key,), f"{section}.tls.{key}: {full} does not exist; create the "
                                   "cluster certificates with `cronrd cluster init-tls DIR "
                                   "--nodes a,b,c` and copy ca.crt, NODE.crt and NODE.key to "
                                   "this host (relative paths are relative to the config "
                                   "file's directory)")
            continue
        except PermissionError:
            st = None  # e.g. a CLI user outside the key's directory; the daemon checks it
        if st is not None and not stat.S_ISREG(st.st_mode):
            report.add(T + (key,), f"{section}.tls.{key}: {full} is not a regular file; point "
                                   f"{key} at {what[key]}")
            continue
        files[key] = full
    if len(report.problems) > before:
        return None
    return TLSPaths(ca=files["ca"], cert=files["cert"], key=files["key"])


def _load_tls(tls: TLSPaths, report: ConfigProblems, section: str = "cluster") -> None:
    """Load the CA, then the certificate with its key, as the peer transport
    does at start; a file this user may not read is left to the daemon."""
    import ssl
    T = (section, "tls")
    hint = "`cronrd cluster init-tls DIR --nodes ...` creates them"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for key, path in (("ca", tls.ca), ("cert", tls.cert)):
        try:
            ctx.load_verify_locations(cafile=path)
        except PermissionError:
            return
        except (OSError, ssl.SSLError) as exc:
            report.add(T + (key,), f"{section}.tls.{key}: {path} is not a PEM certificate "
                                   f"({getattr(exc, 'reason', None) or exc}); {hint}")
            return
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except PermissionError:
        return
    except (OSError, ssl.SSLError) as exc:
        report.add(T + ("key",), f"{section}.tls.key: {tls.key} is not the private key of "
                                 f"{tls.cert}, or not a PEM key "
                                 f"({getattr(exc, 'reason', None) or exc}); {hint}")

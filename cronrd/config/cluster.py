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
from .model import (CLUSTER_KEYS, MAX_ELECTION_TIMEOUT, MIN_ELECTION_TIMEOUT, MIN_NODE_TIMEOUT,
                    TLS_KEYS, Address, ClusterConfig, TLSPaths)
from .problems import _err, _unknown


def parse_cluster(raw: object, path: str, base: str, node_id: str) -> ClusterConfig:
    """Validate the ``cluster:`` section; ``base`` is the config file's directory."""
    if not isinstance(raw, dict):
        raise _err(path, "cluster must be a mapping with at least listen, initial_members "
                         "and tls (or insecure); see `man cronrd`")
    for key in raw:
        if key not in CLUSTER_KEYS:
            raise _unknown(path, "cluster", key, CLUSTER_KEYS)
    if not is_node_id(node_id):
        raise _err(path, f"node_id {node_id!r} cannot name a cluster node: it goes into "
                         f"certificates and host names, so {ids.RULE}; set node_id "
                         "explicitly")

    # listen
    if raw.get("listen") is None:
        raise _err(path, "cluster.listen is required: the \"HOST:PORT\" this node accepts "
                         "peer connections on, e.g. listen: \"0.0.0.0:7000\"")
    try:
        listen = parse_address(raw["listen"])
    except ValueError as exc:
        raise _err(path, f"cluster.listen {exc}") from None

    # join
    join = raw.get("join", False)
    join_token = None
    if isinstance(join, dict):
        extra = sorted(set(join) - {"token"})
        token = join.get("token")
        if extra or not isinstance(token, str) or not token.strip() or len(token) > 255:
            raise _err(path, "cluster.join must be true, false, or {token: TOKEN} with the "
                             "token that `cronrd cluster add NODE ADDR --token` printed"
                             + (f" (unknown keys {extra})" if extra else ""))
        join, join_token = True, token.strip()
    if not isinstance(join, bool):
        raise _err(path, f"cluster.join must be true or false (got {join!r}); true means this "
                         "node joins an existing cluster instead of bootstrapping one")

    # initial_members
    members_raw = raw.get("initial_members")
    if members_raw is None or members_raw == {}:
        raise _err(path, "cluster.initial_members is required: a mapping of node id to the "
                         "\"HOST:PORT\" this node dials for it, including this node "
                         f"({node_id}: ...) unless join: true")
    if not isinstance(members_raw, dict):
        raise _err(path, "cluster.initial_members must be a mapping of node id to "
                         "\"HOST:PORT\", e.g. {a: \"10.0.0.1:7000\", b: \"10.0.0.2:7000\"}")
    members: dict[str, Address] = {}
    seen: dict[Address, str] = {}
    for member, addr in members_raw.items():
        if not isinstance(member, str):
            raise _err(path, f"cluster.initial_members: node id {member!r} must be a string; "
                             "quote it")
        if not is_node_id(member):
            raise _err(path, f"cluster.initial_members: {node_id_problem(member)}")
        try:
            members[member] = parse_address(addr)
        except ValueError as exc:
            raise _err(path, f"cluster.initial_members.{member}: address {exc}") from None
        if members[member] in seen:
            raise _err(path, f"cluster.initial_members: {seen[members[member]]} and {member} "
                             f"have the same address {format_address(members[member])}; "
                             "give each node its own")
        seen[members[member]] = member
    if not join and node_id not in members:
        raise _err(path, f"cluster.initial_members must list this node ({node_id!r}) with its "
                         "address; or, if this node joins a running cluster, set join: true "
                         "and run `cronrd cluster add "
                         f"{node_id} HOST:PORT` on one of its members")
    if join and not set(members) - {node_id}:
        raise _err(path, "with cluster.join: true, cluster.initial_members must list the "
                         "members of the running cluster this node should contact")

    # tls / insecure
    insecure, insecure_network = _parse_insecure(raw.get("insecure", False), path)
    tls_raw = raw.get("tls")
    tls = None
    if tls_raw is not None and insecure:
        raise _err(path, "cluster has both tls and insecure: true; remove insecure to use "
                         "mutual TLS (or remove tls for an unauthenticated test cluster)")
    if tls_raw is None and not insecure:
        raise _err(path, "cluster needs tls: {ca: FILE, cert: FILE, key: FILE} (create the "
                         "files with `cronrd cluster init-tls DIR --nodes ...`), or "
                         "insecure: true, which lets anyone who can reach the listen port "
                         "impersonate a node and run commands on every host: use it only on "
                         "a loopback or isolated test network (insecure: true is accepted "
                         "only on loopback addresses)")
    if insecure and not insecure_network:
        _check_loopback(listen, members, path)
    if tls_raw is not None:
        tls = _parse_tls(tls_raw, path, base)

    # tags
    tags_raw = raw.get("tags", [])
    if tags_raw is None:
        tags_raw = []
    if not isinstance(tags_raw, list):
        raise _err(path, f"cluster.tags must be a list of strings, e.g. tags: [ssd, eu-west] "
                         f"(got {tags_raw!r})")
    tags: list[str] = []
    for tag in tags_raw:
        if not isinstance(tag, str) or not tag.strip():
            raise _err(path, f"each entry of cluster.tags must be a non-empty string (got "
                             f"{tag!r}); quote it")
        if tag in tags:
            raise _err(path, f"cluster.tags lists {tag!r} twice; remove one")
        tags.append(tag)

    # timeouts
    def duration(key: str, default: str) -> float:
        try:
            return parse_duration(raw.get(key, default))
        except ScheduleError as exc:
            raise _err(path, f"cluster.{key}: {exc.message}") from None

    election = duration("election_timeout", "500ms")
    if not MIN_ELECTION_TIMEOUT <= election <= MAX_ELECTION_TIMEOUT:
        raise _err(path, f"cluster.election_timeout must be between {MIN_ELECTION_TIMEOUT:g}s "
                         f"and {MAX_ELECTION_TIMEOUT:g}s (got {election:g}s); the default 500ms "
                         "suits a LAN, raise it for slow or distant links")
    node_timeout = duration("node_timeout", "10s")
    # A node stops starting runs once it has not heard from a leader for one
    # lease (election_timeout). A follower cut off together with the old
    # leader still hears it until CheckQuorum deposes it (up to two election
    # timeouts), then one lease more: the leader may declare a node's runs
    # lost only after all that, or a run could be retried while it starts.
    need = max(MIN_NODE_TIMEOUT, 3 * election + 1.0)
    if node_timeout < need:
        raise _err(path, f"cluster.node_timeout must be at least {need:g}s (got "
                         f"{node_timeout:g}s): three election timeouts and a margin must pass "
                         "before the leader declares a silent node's runs lost, or it could "
                         "retry them elsewhere while that node still starts them; raise "
                         "node_timeout" + (" or lower election_timeout" if election > 1 else ""))
    return ClusterConfig(listen=listen, initial_members=members, join=join,
                         join_token=join_token, tls=tls,
                         insecure=insecure, insecure_network=insecure_network,
                         tags=tuple(tags), node_timeout=node_timeout,
                         election_timeout=election)


def _parse_insecure(value: object, path: str) -> tuple[bool, bool]:
    """``cluster.insecure`` -> (insecure, allowed on the network)."""
    if isinstance(value, bool):
        return value, False
    if isinstance(value, dict):
        for key in value:
            if key != "allow_network":
                raise _unknown(path, "cluster.insecure", key, ("allow_network",))
        allow = value.get("allow_network")
        if allow is not True:
            raise _err(path, "cluster.insecure.allow_network must be true (got "
                             f"{allow!r}); it is the explicit word that this insecure cluster "
                             "may use non-loopback addresses; for loopback only, write "
                             "insecure: true")
        return True, True
    raise _err(path, f"cluster.insecure must be true, false or {{allow_network: true}} "
                     f"(got {value!r})")


def _check_loopback(listen: Address, members: Mapping[str, Address], path: str) -> None:
    """``insecure: true`` only where nobody else can reach the port."""
    found = [("cluster.listen", listen)] + [
        (f"cluster.initial_members.{m}", a) for m, a in members.items()]
    for key, addr in found:
        if not is_loopback(addr[0]):
            raise _err(path, f"cluster.insecure: true is refused because {key} is "
                             f"{format_address(addr)}, which is not a loopback address "
                             "(127.0.0.0/8, ::1, localhost): without TLS anyone who can reach "
                             "the peer port can impersonate a node and run commands as root "
                             "on every host. Configure tls: {ca, cert, key} (create the files "
                             "with `cronrd cluster init-tls DIR --nodes ...`), or, only if "
                             "this network is isolated, write insecure: {allow_network: true}")


def _parse_tls(raw: object, path: str, base: str) -> TLSPaths:
    if not isinstance(raw, dict):
        raise _err(path, "cluster.tls must be a mapping {ca: FILE, cert: FILE, key: FILE}")
    for key in raw:
        if key not in TLS_KEYS:
            raise _unknown(path, "cluster.tls", key, TLS_KEYS)
    what = {"ca": "the cluster CA certificate (ca.crt)",
            "cert": "this node's certificate (NODE.crt)",
            "key": "this node's private key (NODE.key)"}
    for key in TLS_KEYS:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise _err(path, f"cluster.tls.{key} is required: the path of {what[key]}; "
                             "`cronrd cluster init-tls DIR --nodes ...` creates them")
    files: dict[str, str] = {}
    for key in TLS_KEYS:
        full = os.path.normpath(os.path.join(base, os.path.expanduser(raw[key])))
        try:
            st = os.stat(full)
        except (FileNotFoundError, NotADirectoryError):
            raise _err(path, f"cluster.tls.{key}: {full} does not exist; create the cluster "
                             "certificates with `cronrd cluster init-tls DIR --nodes a,b,c` "
                             "and copy ca.crt, NODE.crt and NODE.key to this host (relative "
                             "paths are relative to the config file's directory)") from None
        except PermissionError:
            st = None  # e.g. a CLI user outside the key's directory; the daemon checks it
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _err(path, f"cluster.tls.{key}: {full} is not a regular file; point "
                             f"{key} at {what[key]}")
        files[key] = full
    return TLSPaths(ca=files["ca"], cert=files["cert"], key=files["key"])

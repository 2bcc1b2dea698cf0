"""Daemon configuration: YAML file -> frozen Config, validated at the edge."""

from __future__ import annotations

import difflib
import ipaddress
import os
import socket as _socket
import stat
import types
from dataclasses import dataclass, field
from typing import Mapping

import yaml

from .bounded_yaml import (MAX_FILE_BYTES, FileTooLarge, YAMLLimitError, read_bounded,
                           safe_load)
from . import ids
from .errors import ConfigError, ScheduleError
from .ids import is_node_id, node_id_problem
from .schedule import host_timezone, parse_duration, parse_size, resolve_timezone


DEFAULT_CONFIG_PATH = "/etc/cronrd/cronrd.yaml"


# detach: running jobs go on under their supervisors (adopted at the next
# start); wait: let them finish within grace, then stop them; stop: at once.
SHUTDOWN_MODES = ("detach", "wait", "stop")


@dataclass(frozen=True)
class TLSPaths:
    """PEM files for mutual TLS on the peer port: the cluster CA, this node's
    certificate and its key (the one type for them; the transport uses it)."""
    ca: str
    cert: str
    key: str

KNOWN_KEYS = ("node_id", "data_dir", "jobs_dir", "socket", "socket_group", "timezone",
              "log_dir", "log_retention", "history_retention", "shutdown", "log_level",
              "watch_interval", "max_running", "accept_jobs_from", "cluster")

CLUSTER_KEYS = ("listen", "initial_members", "join", "tls", "insecure", "tags",
                "node_timeout", "election_timeout")
TLS_KEYS = ("ca", "cert", "key")

DEFAULT_MAX_RUNNING = 256  # concurrent runs on one node

MIN_NODE_TIMEOUT = 2.0
MIN_ELECTION_TIMEOUT, MAX_ELECTION_TIMEOUT = 0.2, 60.0

Address = tuple[str, int]


@dataclass(frozen=True)
class ClusterConfig:
    """The ``cluster:`` section: how this node finds and authenticates its peers.

    ``initial_members`` is a read-only mapping node id -> (host, port), sorted
    by node id; ``members_dict()`` returns a plain copy.
    """
    listen: Address
    initial_members: Mapping[str, Address] = field(
        default_factory=lambda: types.MappingProxyType({}))
    join: bool = False
    join_token: str | None = None    # join: {token: ...}: the one-time token of `cluster add --token`
    tls: TLSPaths | None = None
    insecure: bool = False           # no TLS: anyone who reaches the port is believed
    insecure_network: bool = False   # insecure: {allow_network: true}: on any address
    tags: tuple[str, ...] = ()
    node_timeout: float = 10.0       # leader declares a silent node's runs lost after this
    election_timeout: float = 0.5    # base Raft election timeout, seconds

    def __post_init__(self):  # a private sorted copy: nobody can change it afterwards
        object.__setattr__(self, "initial_members", types.MappingProxyType(
            dict(sorted(dict(self.initial_members).items()))))
        object.__setattr__(self, "tags", tuple(self.tags))

    def members_dict(self) -> dict[str, Address]:
        return dict(self.initial_members)

    def __hash__(self) -> int:  # MappingProxyType is not hashable; its items are
        return hash((self.listen, tuple(self.initial_members.items()), self.join, self.tls,
                     self.insecure, self.insecure_network, self.tags, self.node_timeout,
                     self.election_timeout))


@dataclass(frozen=True)
class Config:
    node_id: str
    data_dir: str
    jobs_dir: str
    socket: str
    log_dir: str
    timezone: str
    socket_group: str | None = None
    log_max_age: float = 30 * 86400.0       # delete run logs older than this
    log_max_files_per_job: int = 500        # and keep at most this many per job
    history_retention: float = 30 * 86400.0  # run records kept in the state
    shutdown_mode: str = "detach"           # detach | wait | stop
    shutdown_grace: float = 30.0
    log_level: str = "info"
    watch_interval: float = 1.0
    max_running: int = DEFAULT_MAX_RUNNING  # runs at once on this node; more are skipped
    # Node ids whose job files this node runs (None: every member's). "self"
    # is replaced by node_id when the config is read.
    accept_jobs_from: tuple[str, ...] | None = None
    path: str = ""
    cluster: ClusterConfig | None = None    # None: a one-node cluster without a network

    @property
    def state_db(self) -> str:
        return os.path.join(self.data_dir, "state.db")

    @property
    def raft_db(self) -> str:
        return os.path.join(self.data_dir, "raft.db")

    @property
    def local_db(self) -> str:
        return os.path.join(self.data_dir, "local.db")


def config_path(explicit: str | None) -> str:
    return explicit or os.environ.get("CRONRD_CONFIG") or DEFAULT_CONFIG_PATH


def _err(path: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {msg}")


def load_config(path: str) -> Config:
    """Read, parse and validate the config file; every failure is a ConfigError.

    Reading is bounded like the job files' (``bounded_yaml``): at most 1 MiB,
    64 levels of nesting, no alias bomb."""
    try:
        with open(path, "rb") as f:
            data = read_bounded(f.fileno(), MAX_FILE_BYTES)
        text = data.decode("utf-8-sig")
        raw = safe_load(text, fast=False) or {}  # a few lines: the pure parser's messages
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} not found; pass --config FILE, set CRONRD_CONFIG, or "
            f"create {DEFAULT_CONFIG_PATH} (see `man cronrd`)") from None
    except FileTooLarge as exc:
        raise ConfigError(f"{path}: refusing the config file: it is larger than "
                          f"{exc.limit} bytes (1 MiB); a cronrd config is a few lines, "
                          "check that --config names the right file") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: the config file is not valid UTF-8 (byte "
                          f"0x{data[exc.start]:02x}); save it as UTF-8") from None
    except YAMLLimitError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: refusing the config file: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    return parse_config(raw, path)


def parse_config(raw: object, path: str = "<config>") -> Config:
    if not isinstance(raw, dict):
        raise _err(path, "the config must be a mapping of keys such as node_id, data_dir")
    for key in raw:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise _err(path, f"unknown key {key!r}{hint}")
    base = os.path.dirname(os.path.abspath(path)) if path != "<config>" else os.getcwd()

    def text(key: str, default: str | None) -> str | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise _err(path, f"{key} must be a non-empty string")
        return value

    def directory(key: str, default: str) -> str:
        value = text(key, default)
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))

    node_id = text("node_id", None) or _socket.gethostname().split(".")[0]
    data_dir = directory("data_dir", "/var/lib/cronrd")
    jobs_dir = directory("jobs_dir", "/etc/cronrd.d")
    log_dir = directory("log_dir", "/var/log/cronrd")
    sock = directory("socket", "/run/cronrd/cronrd.sock")
    tz = text("timezone", None) or host_timezone()
    try:
        resolve_timezone(tz)
        retention = raw.get("log_retention") or {}
        if not isinstance(retention, dict):
            raise _err(path, "log_retention must be a mapping {max_age, max_files_per_job}")
        for key in retention:
            if key not in ("max_age", "max_files_per_job"):
                raise _err(path, f"unknown log_retention key {key!r}; use max_age or "
                                 "max_files_per_job")
        max_age = parse_duration(retention.get("max_age", "30d"))
        max_files = retention.get("max_files_per_job", 500)
        if not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 1:
            raise _err(path, "log_retention.max_files_per_job must be a positive integer")
        history = parse_duration(raw.get("history_retention", "30d"))
        shutdown = raw.get("shutdown") or {}
        if not isinstance(shutdown, dict):
            raise _err(path, "shutdown must be a mapping "
                             "{mode: detach|wait|stop, grace: DURATION}")
        mode = shutdown.get("mode", "detach")
        if mode not in SHUTDOWN_MODES:
            raise _err(path, f"shutdown.mode must be 'detach', 'wait' or 'stop' (got {mode!r})")
        grace = parse_duration(shutdown.get("grace", "30s"))
        watch = parse_duration(raw.get("watch_interval", "1s"))
    except ScheduleError as exc:
        raise _err(path, exc.message) from None
    max_running = raw.get("max_running", DEFAULT_MAX_RUNNING)
    if not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1:
        raise _err(path, f"max_running must be a positive whole number, the most runs this "
                         f"node runs at once (got {max_running!r}); the default is "
                         f"{DEFAULT_MAX_RUNNING}")
    accept = raw.get("accept_jobs_from")
    if accept is not None:
        if isinstance(accept, str):
            accept = [accept]
        if not isinstance(accept, list) or not accept or not all(
                isinstance(a, str) and a.strip() for a in accept):
            raise _err(path, "accept_jobs_from must be a list of node ids (self for this node), "
                             f"e.g. [self] (got {accept!r}); leave it out to run the jobs "
                             "every member defines")
        accept = tuple(sorted({node_id if a.strip() == "self" else a.strip() for a in accept}))
    level = raw.get("log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        raise _err(path, f"log_level must be debug, info, warning or error (got {level!r})")
    cluster = None
    if raw.get("cluster") is not None:
        cluster = parse_cluster(raw["cluster"], path, base, node_id)
    return Config(node_id=node_id, data_dir=data_dir, jobs_dir=jobs_dir, socket=sock,
                  log_dir=log_dir, timezone=tz, socket_group=text("socket_group", None),
                  log_max_age=max_age, log_max_files_per_job=max_files,
                  history_retention=history, shutdown_mode=mode, shutdown_grace=grace,
                  log_level=level, watch_interval=min(max(watch, 0.1), 60.0), path=path,
                  max_running=max_running, accept_jobs_from=accept, cluster=cluster)


# -- cluster: ---------------------------------------------------------------------------
def parse_address(value: object) -> Address:
    """``"host:port"`` or ``"[v6addr]:port"`` -> (host, port); ValueError says why."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a string \"HOST:PORT\" such as \"10.0.0.1:7000\" "
                         f"(got {value!r})")
    text = value.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{value!r} is not \"[IPV6]:PORT\", e.g. \"[::1]:7000\"")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in {value!r} is not an IPv6 address") from None
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"{value!r} has no port; write \"HOST:PORT\", e.g. "
                             f"\"{text}:7000\"")
        if ":" in host:
            raise ValueError(f"{value!r}: write an IPv6 address in brackets, e.g. "
                             f"\"[{host}]:{port_text}\"")
        if not host:
            raise ValueError(f"{value!r} has no host; write \"HOST:PORT\" (use 0.0.0.0 "
                             "or [::] to listen on every interface)")
        if any(c.isspace() or c in "/@[]" for c in host):
            raise ValueError(f"{host!r} in {value!r} is not a host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} in {value!r} must be a number from 1 to 65535")
    return host, int(port_text)


def format_address(addr: Address) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _unknown(path: str, where: str, key: object, known: tuple[str, ...]) -> ConfigError:
    near = difflib.get_close_matches(str(key), known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return _err(path, f"unknown key {where}.{key}{hint}; known keys: {', '.join(known)}")


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


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (also as ::ffff:127.x.y.z); no DNS."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # another host name: it may resolve to anything
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


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


# -- directories the daemon trusts ------------------------------------------------------
def _owner(uid: int) -> str:
    import pwd
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _dir_refusal(what: str, path: str, st: os.stat_result, allowed: set[int],
                 parent: bool) -> str | None:
    """Why a daemon running as root may not trust this directory, or None.

    The directory itself must be owned by root (or the daemon's uid) and not
    writable by group or others. A parent may be writable by others only
    with the sticky bit (as /tmp is): then nobody else can rename or replace
    the entries root owns in it."""
    found, fixes = [], []
    if st.st_uid not in allowed:
        found.append(f"owned by {_owner(st.st_uid)}")
        fixes.append(f"chown root:root {path}")
    mode = stat.S_IMODE(st.st_mode)
    writers = [w for bit, w in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others"))
               if mode & bit]
    if writers and not (parent and mode & stat.S_ISVTX):
        found.append(f"writable by {' and '.join(writers)} (mode {mode:04o})")
        fixes.append(f"chmod go-w {path}")
    if not found:
        return None
    where = f"{what} is inside {path}, which is" if parent else f"{what} {path} is"
    return (f"refusing to start: {where} {' and '.join(found)}; whoever can change it could "
            f"replace the daemon's files or plant symlinks in them, and cronrd runs as root. "
            f"Fix: {' && '.join(fixes)}")


def check_directories(config: Config) -> None:
    """At daemon start, as root: refuse a data_dir, log_dir, jobs_dir or
    control-socket directory (or a parent of one) that a user other than
    root, or the daemon's own uid, could change. Raises ConfigError naming
    the directory, what was found and the command that fixes it."""
    if os.geteuid() != 0:
        return
    allowed = {0, os.geteuid()}
    for what, path in (("data_dir", config.data_dir), ("log_dir", config.log_dir),
                       ("jobs_dir", config.jobs_dir),
                       ("the control socket's directory", os.path.dirname(config.socket))):
        path = os.path.abspath(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None  # created later, or reported by whoever needs it
        except OSError as exc:
            raise ConfigError(f"cannot check {what} {path}: {exc.strerror}") from None
        if st is not None:
            msg = _dir_refusal(what, path, st, allowed, parent=False)
            if msg:
                raise ConfigError(msg)
        # The parents, as written and as resolved (a symlinked parent counts).
        seen = set()
        for start in (path, os.path.realpath(path)):
            parent = os.path.dirname(start)
            while parent not in seen:
                seen.add(parent)
                try:
                    pst = os.stat(parent)
                except OSError:
                    pst = None
                if pst is not None:
                    msg = _dir_refusal(what, parent, pst, allowed, parent=True)
                    if msg:
                        raise ConfigError(msg)
                if parent == os.path.dirname(parent):
                    break
                parent = os.path.dirname(parent)

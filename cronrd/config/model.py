"""The daemon configuration as values: ``Config``, ``ClusterConfig``, ``TLSPaths``,
their defaults and the keys a config file may hold."""

from __future__ import annotations

import os
import types
from dataclasses import dataclass, field
from typing import Mapping

from .calendars import CalendarConfig
from .notifiers import Notifications


DEFAULT_CONFIG_PATH = "/etc/cronrd/cronrd.yaml"


@dataclass(frozen=True)
class TLSPaths:
    """PEM files for mutual TLS on the peer port: the cluster CA, this node's
    certificate and its key (the one type for them; the transport uses it)."""
    ca: str
    cert: str
    key: str

@dataclass(frozen=True)
class HttpTLS:
    """PEM files for the HTTP server: its certificate and key, and optionally
    the CA whose client certificates it asks for (mutual TLS)."""
    cert: str
    key: str
    client_ca: str | None = None
    # certificate name (subject CN or a DNS subjectAltName) -> (role, jobs
    # glob or ""): a client certificate from client_ca with one of these
    # names acts with that role without a token (http/certs.py)
    client_roles: tuple[tuple[str, str, str], ...] = ()


DEFAULT_HTTP_LISTEN = "127.0.0.1:8177"


@dataclass(frozen=True)
class HttpConfig:
    """The ``http:`` section: where the web UI, API and /metrics listen
    (``listen`` None: off), with TLS or, off loopback, the explicit insecure word."""
    listen: tuple[str, int] | None = ("127.0.0.1", 8177)
    tls: HttpTLS | None = None
    insecure_network: bool = False   # insecure: {allow_network: true}
    # /metrics gives per-job histograms while there are at most this many jobs
    # (each job's two are 26 samples: 100,000 jobs would be 2.6 million, a 24 s
    # render and a 230 MB page: bench/api.py)
    job_histograms: int = 10_000
    # who may read /metrics: "open" (whoever reaches the port, the default)
    # or "token" (a viewer token or client certificate, as the API)
    metrics_auth: str = "open"


KNOWN_KEYS = ("node_id", "data_dir", "jobs_dir", "socket", "socket_group", "timezone",
              "log_dir", "log_retention", "history_retention", "history_max_runs_per_job",
              "shutdown", "log_level",
              "watch_interval", "max_running", "accept_jobs_from", "cluster", "worker",
              "notifiers", "notify", "pools", "http", "hooks", "calendars")
HTTP_KEYS = ("enabled", "listen", "tls", "insecure", "job_histograms", "metrics_auth")
HTTP_TLS_KEYS = ("cert", "key", "client_ca", "client_roles")
HOOK_KEYS = ("secret_file", "dedupe", "replay_window")


@dataclass(frozen=True)
class HookConfig:
    """One of ``hooks:`` (config/hooks.py): a webhook that starts the jobs
    listing it under ``triggers:``."""
    name: str
    secret_file: str | None
    secret: bytes | None = field(default=None, repr=False)  # read by the daemon at start
    dedupe: tuple[str, ...] | None = None   # the body's field naming a delivery
    replay_window: float = 300.0            # seconds a signed timestamp stays good


CLUSTER_KEYS = ("listen", "initial_members", "join", "tls", "insecure", "tags",
                "node_timeout", "election_timeout", "max_clock_offset", "worker_listen")
WORKER_KEYS = ("servers", "tls", "tags")
TLS_KEYS = ("ca", "cert", "key")

DEFAULT_MAX_RUNNING = 256  # concurrent runs on one node

MIN_NODE_TIMEOUT = 2.0
MIN_ELECTION_TIMEOUT, MAX_ELECTION_TIMEOUT = 0.2, 60.0
MIN_CLOCK_OFFSET, MAX_CLOCK_OFFSET = 0.01, 3600.0

Address = tuple[str, int]

POOL_KEYS = ("slots", "scope")
POOL_SCOPES = ("cluster", "node")
MAX_POOL_SLOTS = 100_000
MAX_POOLS = 1000


@dataclass(frozen=True)
class PoolConfig:
    """One of ``pools:``: ``slots`` runs of its jobs at once (a job takes
    ``pool_slots`` of them), across the cluster or on each node (``scope``)."""
    name: str
    slots: int
    scope: str = "cluster"   # cluster | node


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
    max_clock_offset: float = 0.5    # a clock further than this from the cluster's is "off"
    worker_listen: Address | None = None  # the worker port (runtime/cluster/worker_hub.py)

    def __post_init__(self):  # a private sorted copy: nobody can change it afterwards
        object.__setattr__(self, "initial_members", types.MappingProxyType(
            dict(sorted(dict(self.initial_members).items()))))
        object.__setattr__(self, "tags", tuple(self.tags))

    def members_dict(self) -> dict[str, Address]:
        return dict(self.initial_members)

    def __hash__(self) -> int:  # MappingProxyType is not hashable; its items are
        return hash((self.listen, tuple(self.initial_members.items()), self.join, self.tls,
                     self.insecure, self.insecure_network, self.tags, self.node_timeout,
                     self.election_timeout, self.max_clock_offset, self.worker_listen))


@dataclass(frozen=True)
class WorkerConfig:
    """The ``worker:`` section of a worker agent (``cronrd worker``): the
    servers it dials (any of them; it follows the leader), its certificate
    (its name is the certificate's), and its tags."""
    servers: tuple[Address, ...]
    tls: TLSPaths
    tags: tuple[str, ...] = ()


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
    history_max_runs_per_job: int = 10_000    # and at most this many per job
    # detach: running jobs go on under their supervisors (adopted at the next
    # start); wait: let them finish within grace, then stop them; stop: at once.
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
    worker: WorkerConfig | None = None      # a worker agent's config (cronrd worker)
    pools: tuple[PoolConfig, ...] = ()      # sorted by name; the leader's are in force
    # notifiers: and notify: (the cluster default of the jobs' notify)
    notifications: Notifications = field(default_factory=Notifications)
    http: HttpConfig = field(default_factory=HttpConfig)  # the web UI, API and /metrics
    hooks: tuple[HookConfig, ...] = ()      # webhooks (POST /api/v1/hooks/NAME), by name
    # calendars: (config/calendars.py), by name, built-ins included; the leader's are in force
    calendars: tuple[CalendarConfig, ...] = ()

    def pool_map(self) -> dict[str, PoolConfig]:
        return {p.name: p for p in self.pools}

    @property
    def state_db(self) -> str:
        return os.path.join(self.data_dir, "state.db")

    @property
    def raft_db(self) -> str:
        return os.path.join(self.data_dir, "raft.db")

    @property
    def local_db(self) -> str:
        return os.path.join(self.data_dir, "local.db")

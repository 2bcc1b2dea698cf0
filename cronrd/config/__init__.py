"""Daemon configuration: YAML file -> frozen Config, validated at the edge.

Modules: ``model`` (the values and their defaults), ``load`` (finding and
reading the file), ``parse`` (the top-level keys), ``cluster`` (the
``cluster:`` section), ``addresses`` (HOST:PORT), ``problems`` (how problems
are reported), ``directories`` (the start-up check of the daemon's directories), ``http``
(the ``http:`` section: the web UI, API and /metrics).
"""

from __future__ import annotations

from .addresses import format_address, is_loopback, parse_address
from .cluster import parse_cluster
from .directories import check_directories
from .load import config_path, daemon_config_jobs_dir, load_config, start_hint
from .model import (CLUSTER_KEYS, DEFAULT_CONFIG_PATH, DEFAULT_MAX_RUNNING, KNOWN_KEYS,
                    MAX_ELECTION_TIMEOUT, MIN_ELECTION_TIMEOUT, MIN_NODE_TIMEOUT, TLS_KEYS,
                    Address, ClusterConfig, Config, HttpConfig, HttpTLS, PoolConfig,
                    TLSPaths)
from .parse import parse_config

__all__ = [
    "Address", "ClusterConfig", "Config", "HttpConfig", "HttpTLS", "PoolConfig", "TLSPaths",
    "CLUSTER_KEYS", "DEFAULT_CONFIG_PATH", "DEFAULT_MAX_RUNNING", "KNOWN_KEYS",
    "MAX_ELECTION_TIMEOUT", "MIN_ELECTION_TIMEOUT", "MIN_NODE_TIMEOUT", "TLS_KEYS",
    "check_directories", "config_path", "daemon_config_jobs_dir", "format_address",
    "is_loopback", "load_config",
    "parse_address", "parse_cluster", "parse_config", "start_hint",
]

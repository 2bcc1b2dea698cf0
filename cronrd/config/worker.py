"""The ``worker:`` section of a worker agent's config -> ``WorkerConfig``.

A worker agent (``cronrd worker``, runtime/worker/) is not a cluster
member: it dials the servers' worker ports with a certificate the cluster
CA issued for the worker role, and runs the runs the leader gives it.
"""

from __future__ import annotations

from .addresses import parse_address
from .cluster import _load_tls, _parse_tls
from .model import WORKER_KEYS, Address, WorkerConfig
from .problems import ConfigProblems

MAX_SERVERS = 16


def parse_worker(raw: object, base: str, report: ConfigProblems, *,
                 load_tls: bool = False) -> WorkerConfig | None:
    """Validate the ``worker:`` section (``base``: the config file's
    directory); None once a problem has gone to ``report``."""
    W = ("worker",)
    if not isinstance(raw, dict):
        report.add(W, "worker must be a mapping {servers: [HOST:PORT, ...], tls: {ca, cert, "
                      "key}, tags: [...]}; see `man 8 cronrd` (WORKERS)")
        return None
    before = len(report.problems)
    for key in raw:
        if key not in WORKER_KEYS:
            report.unknown(W, key, WORKER_KEYS)
    servers: list[Address] = []
    listed = raw.get("servers")
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_SERVERS:
        report.add(W + ("servers",), f"worker.servers must list 1 to {MAX_SERVERS} servers' "
                                     "worker ports (their cluster.worker_listen), e.g. "
                                     "servers: [\"10.0.0.1:7100\", \"10.0.0.2:7100\"]")
    else:
        for i, value in enumerate(listed):
            try:
                addr = parse_address(value)
            except ValueError as exc:
                report.add(W + ("servers", i), f"worker.servers[{i}] {exc}")
                continue
            if addr in servers:
                report.add(W + ("servers", i), f"worker.servers lists {value!r} twice; "
                                               "remove one")
            else:
                servers.append(addr)
    tls = None
    if raw.get("tls") is None:
        report.add(W + ("tls",), "worker.tls is required: {ca: ca.crt, cert: NAME.crt, key: "
                                 "NAME.key}, made by `cronrd cluster init-tls DIR --nodes ... "
                                 "--workers NAME`")
    else:
        tls = _parse_tls(raw["tls"], base, report, "worker")
        if tls is not None and load_tls:
            _load_tls(tls, report, "worker")
    tags: list[str] = []
    listed_tags = raw.get("tags") or []
    if not isinstance(listed_tags, list):
        report.add(W + ("tags",), f"worker.tags must be a list of strings, e.g. tags: [gpu] "
                                  f"(got {listed_tags!r})")
        listed_tags = []
    for i, tag in enumerate(listed_tags):
        if not isinstance(tag, str) or not tag.strip() or len(tag) > 200:
            report.add(W + ("tags", i), f"each entry of worker.tags must be a non-empty string "
                                        f"of at most 200 characters (got {tag!r}); quote it")
        elif tag.startswith("executor:"):
            report.add(W + ("tags", i), f"worker.tags: {tag!r} is announced by the worker "
                                        "itself when it offers that executor; remove it")
        elif tag not in tags:
            tags.append(tag)
    if len(report.problems) > before or tls is None:
        return None
    return WorkerConfig(servers=tuple(servers), tls=tls, tags=tuple(tags))

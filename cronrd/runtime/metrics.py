"""Prometheus ``/metrics``: the official client renders a registry of our
own (never the process-global one), filled at scrape time from the
replicated state and this node's Raft view.

Each family is one query (cronrd/state/metric_reads.py), not one per job,
and a rendered page is reused for ``CACHE_SECONDS`` so that several
scrapers (or a scraper and a dashboard) cost one render. Job labels are
``job_name`` (Prometheus' own ``job`` label is the scrape job's); no run id
is ever a label.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from .. import __version__
from ..state import metric_reads as R
from ..state import queries as Q

CACHE_SECONDS = 1.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StateCollector:
    """A prometheus_client collector over one daemon's state. ``status()``
    is the members' status (role, leader, term, commit index, down)."""

    def __init__(self, conn, node_id: str, status: Callable[[], dict],
                 applied_index: Callable[[], int], is_leader: Callable[[], bool]):
        self.conn = conn
        self.node_id = node_id
        self.status = status
        self.applied_index = applied_index
        self.is_leader = is_leader

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("cronrd_build", "The running cronrd's version.")
        info.add_metric([], {"version": __version__, "node": self.node_id})
        yield info
        st = self.status()
        yield _gauge("cronrd_raft_is_leader", "1 if this node leads the cluster.",
                     1 if self.is_leader() else 0)
        yield _gauge("cronrd_raft_term", "This node's current Raft term.", st.get("term") or 0)
        yield _gauge("cronrd_raft_commit_index", "The highest log index this node knows "
                     "is committed.", st.get("commit_index") or 0)
        yield _gauge("cronrd_raft_applied_index", "The highest log index applied to this "
                     "node's state.", self.applied_index())
        down = {d.get("node") for d in st.get("down") or () if isinstance(d, dict)}
        up = GaugeMetricFamily("cronrd_node_up", "1 if the node is up as this node sees "
                               "it (announced up and reachable), else 0.",
                               labels=["node"])
        for row in Q.nodes(self.conn):
            up.add_metric([row["node"]], 1 if row["state"] == "up" and
                          row["node"] not in down else 0)
        yield up
        names = R.job_names(self.conn)
        running = R.running_by_job(self.conn)
        fam = GaugeMetricFamily("cronrd_job_running", "Runs of the job running now.",
                                labels=["job_name"])
        for name in names:
            fam.add_metric([name], running.get(name, 0))
        yield fam
        fam = GaugeMetricFamily("cronrd_job_last_success_timestamp_seconds",
                                "When the job's newest successful run ended (Unix time).",
                                labels=["job_name"])
        for name, at in sorted(R.last_success_by_job(self.conn).items()):
            fam.add_metric([name], at)
        yield fam


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class Metrics:
    """The rendered exposition page, cached for ``CACHE_SECONDS``."""

    def __init__(self, collector: StateCollector, monotonic: Callable[[], float] = time.monotonic):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.monotonic = monotonic
        self._page: bytes | None = None
        self._at = 0.0

    def render(self) -> bytes:
        now = self.monotonic()
        if self._page is None or now - self._at >= CACHE_SECONDS:
            self._page = generate_latest(self.registry)
            self._at = now
        return self._page

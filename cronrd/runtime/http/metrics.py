"""Prometheus ``/metrics``: the official client renders families of our
own (never the process-global registry's), one at a time, made at scrape
time from the replicated state and this node's Raft view.

Each family is one query (cronrd/state/metric_reads.py), not one per job,
all in one read transaction on a read-only connection of its own, in a
thread of its own: a scrape of 100,000 jobs neither blocks the event loop
nor sees a batch half applied (the state is in WAL mode). A rendered page
is reused for ``CACHE_SECONDS``, and for ``CACHE_FACTOR`` times its render
time when that is longer, so several scrapers cost one render and a big
state costs a bounded share of a core. Job
labels are ``job_name`` (Prometheus' own ``job`` label is the scrape
job's); no run id is ever a label.
"""

from __future__ import annotations

import asyncio
import fnmatch
import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar

from prometheus_client import ProcessCollector, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily, Metric)
from prometheus_client.utils import floatToGoString

from ... import __version__
from ...state import metric_reads as R
from ...state import pools as P
from ..clock import monotonic as clock_monotonic
from ...state import queries as Q
from ...state.schema import HISTOGRAM_BUCKETS

if TYPE_CHECKING:
    import apsw

CACHE_SECONDS = 1.0
# A page is reused for at least this many times as long as it took to render,
# so that scraping costs at most about a tenth of one core: the official client
# renders some 30,000 samples a second, and 100,000 jobs are about 300,000.
CACHE_FACTOR = 10.0
# The outcomes every job has a series of from its load (at 0), for origin
# "schedule"; the other outcomes and origins get one when they first happen.
ZERO_OUTCOMES = ("succeeded", "failed")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def live_view(node_id: str, status: dict, applied_index: int, is_leader: bool,
              next_fires: dict[str, int] | None = None,
              loop_stalls: tuple[list[tuple[float, int]], float, int] | None = None,
              pid: int | None = None) -> dict:
    """What the page needs from the daemon's objects, taken on the loop
    (``next_fires``: the leader's scheduler's next fire time of each job;
    ``loop_stalls``: LoopWatch.histogram(); ``pid``: the daemon's process,
    whose process_* metrics the page shows)."""
    return {"next_fires": next_fires or {},"node": node_id, "term": status.get("term") or 0,
            "pid": os.getpid() if pid is None else pid,
            "commit_index": status.get("commit_index") or 0,
            "applied_index": applied_index, "is_leader": bool(is_leader),
            "down": sorted({d.get("id") or d.get("node") for d in status.get("down") or ()
                            if isinstance(d, dict)} - {None}),
            "leader_changes": status.get("leader_changes", 0),
            "workers": [w for w in status.get("workers") or () if isinstance(w, dict)],
            "loop_stalls": loop_stalls}


def _worker_families(workers: list[dict], leading: bool) -> Iterator[Metric]:
    """The worker agents (runtime/cluster/worker_hub.py): known on every
    server; connected, running and last contact as the leader sees them
    (a follower leaves those out: it does not talk to workers)."""
    if not workers:
        return
    info = InfoMetricFamily("cronrd_worker", "A registered worker agent: its version, "
                            "tags and capacity.", labels=["worker"])
    for w in workers:
        info.add_metric([w["node"]], {"version": str(w.get("version")),
                                      "tags": ",".join(w.get("tags") or ()),
                                      "capacity": str(w.get("capacity"))})
    yield info
    if not leading:
        return
    up = GaugeMetricFamily("cronrd_worker_up", "1 if the worker agent is connected to "
                           "this leader, else 0.", labels=["worker"])
    running = GaugeMetricFamily("cronrd_worker_running", "Runs running on the worker "
                                "agent, as it last said.", labels=["worker"])
    contact = GaugeMetricFamily("cronrd_worker_last_contact_seconds", "Seconds since the "
                                "worker agent's last frame (absent while it is not "
                                "connected).", labels=["worker"])
    for w in workers:
        up.add_metric([w["node"]], 1 if w.get("connected") else 0)
        if w.get("connected"):
            running.add_metric([w["node"]], w.get("running") or 0)
            contact.add_metric([w["node"]], w.get("last_contact_s") or 0.0)
    yield from (up, running, contact)


# The most jobs /metrics gives per-job histograms for (config: http.job_histograms).
JOB_HISTOGRAMS = 10_000


class StateCollector:
    """One scrape's families over ``conn`` and ``live`` (see live_view);
    per-job histograms while there are at most ``job_histograms`` jobs."""

    def __init__(self, conn: apsw.Connection, live: dict, job_histograms: int = JOB_HISTOGRAMS):
        self.conn = conn
        self.live = live
        self.job_histograms = job_histograms

    def collect(self) -> Iterator[Metric]:
        live = self.live
        info = InfoMetricFamily("cronrd_build", "The running cronrd's version.")
        info.add_metric([], {"version": __version__, "node": live["node"]})
        yield info
        yield _gauge("cronrd_raft_is_leader", "1 if this node leads the cluster.",
                     1 if live["is_leader"] else 0)
        yield _gauge("cronrd_raft_term", "This node's current Raft term.", live["term"])
        yield _gauge("cronrd_raft_commit_index", "The highest log index this node knows "
                     "is committed.", live["commit_index"])
        yield _gauge("cronrd_raft_applied_index", "The highest log index applied to this "
                     "node's state.", live["applied_index"])
        yield _gauge("cronrd_raft_apply_lag", "Log entries this node knows are committed "
                     "and has not applied yet.",
                     max(0, live["commit_index"] - live["applied_index"]))
        yield CounterMetricFamily("cronrd_raft_leader_changes", "Times this node saw the "
                                  "leader change since it started.",
                                  value=live["leader_changes"])
        if live.get("loop_stalls") is not None:
            buckets, total, _count = live["loop_stalls"]
            stalls = HistogramMetricFamily(
                "cronrd_loop_stall_seconds", "Stalls of this node's critical event loop "
                "(Raft, clocks, claims, gates) over 100 ms, by how long it was held; each "
                "is also logged as event=loop_stalled with the stack that held it.")
            stalls.add_metric([], [(floatToGoString(b), n) for b, n in buckets],
                              sum_value=total)
            yield stalls
        down = set(live["down"])
        up = GaugeMetricFamily("cronrd_node_up", "1 if the node is up as this node sees "
                               "it (announced up and reachable), else 0.", labels=["node"])
        for row in Q.nodes(self.conn):
            up.add_metric([row["node"]], 1 if row["state"] == "up" and
                          row["node"] not in down else 0)
        yield up
        yield from _worker_families(live.get("workers") or [], live["is_leader"])
        conn = self.conn
        jobs = R.job_count(conn)
        yield from _chunked(lambda: CounterMetricFamily(
            "cronrd_job_runs", "Runs of the job that ended, by origin (schedule | manual) "
            "and outcome (the final state; skipped fire times are counted in "
            "cronrd_job_skips_total, not here).", labels=["job_name", "origin", "outcome"]),
            R.run_counts(conn, ZERO_OUTCOMES), lambda fam, row: fam.add_metric(row[:3], row[3]))
        yield from _chunked(lambda: CounterMetricFamily(
            "cronrd_job_skips", "Fire times of the job recorded skipped, by the reason's "
            "leading word.", labels=["job_name", "reason"]),
            R.skip_counts(conn), lambda fam, row: fam.add_metric(row[:2], row[2]))
        yield from _chunked(lambda: GaugeMetricFamily(
            "cronrd_job_running", "Runs of the job running now (every job, 0 included).",
            labels=["job_name"]), R.running_of_every_job(conn),
            lambda fam, row: fam.add_metric(row[:1], row[1]))
        yield from _chunked(lambda: GaugeMetricFamily(
            "cronrd_job_last_success_timestamp_seconds",
            "When the job's newest successful run ended (Unix time).", labels=["job_name"]),
            R.last_successes(conn), lambda fam, row: fam.add_metric(row[:1], row[1]))
        yield from _histograms(conn, per_job=jobs <= self.job_histograms)
        fam = GaugeMetricFamily("cronrd_job_alerts_open", "Open (unacknowledged, unresolved) "
                                "alerts of the job, by kind: failed, or an SLA kind "
                                "(only jobs with one).", labels=["job_name", "kind"])
        for job, kind, n in R.open_alerts(self.conn):
            fam.add_metric([job, kind], n)
        yield fam
        fam = GaugeMetricFamily("cronrd_job_dead_letter", "Open dead-letter entries of the "
                                "job: runs that failed their last retry, neither requeued "
                                "nor discarded (only jobs with one).", labels=["job_name"])
        for job, n in R.dead_letter_open(self.conn):
            fam.add_metric([job], n)
        yield fam
        yield from _pools(self.conn)
        sent = CounterMetricFamily("cronrd_notifications", "Delivery attempts of "
                                   "notifications by notifier and outcome: sent, failed "
                                   "(another attempt follows) or given_up (the last one "
                                   "failed).", labels=["notifier", "outcome"])
        for notifier, outcome, n in R.notify_outcomes(self.conn):
            sent.add_metric([notifier, outcome], n)
        yield sent
        yield from _chunked(lambda: GaugeMetricFamily(
            "cronrd_job_next_fire_timestamp_seconds", "The job's next fire time (Unix time), "
            "as the leader's scheduler has it (reported by the leader only).",
            labels=["job_name"]), sorted(live["next_fires"].items()),
            lambda fam, row: fam.add_metric(row[:1], row[1]))


HISTOGRAMS = (
    ("duration", "run_duration_seconds",
     "How long {whose} runs took, start to end (runs that started)."),
    ("delay", "schedule_delay_seconds",
     "How long after its fire time each scheduled run of {whose} started (first "
     "attempts of kind scheduled: not catch-up, backfill, retry or manual runs)."),
)


def _histograms(conn: apsw.Connection, per_job: bool) -> Iterator[Metric]:
    """The histograms of every job together (cronrd_run_duration_seconds,
    cronrd_schedule_delay_seconds), and per job (cronrd_job_...: only jobs
    with an observation; only when ``per_job``), from job_histograms'
    cumulative bucket counts."""
    for metric, name, doc in HISTOGRAMS:
        bounds = [floatToGoString(b) for b in HISTOGRAM_BUCKETS[metric]] + ["+Inf"]
        row = R.histogram_total(conn, metric)
        fam = HistogramMetricFamily(f"cronrd_{name}", doc.format(whose="all jobs'") +
                                    " Every job together, removed jobs included.")
        fam.add_metric([], list(zip(bounds, (*row[:10], row[11]))), sum_value=row[10])
        yield fam
        if not per_job:
            continue
        yield from _chunked(
            lambda: HistogramMetricFamily(f"cronrd_job_{name}", doc.format(
                whose="the job's") + " Only while there are at most http.job_histograms "
                "jobs.", labels=["job_name"]),
            R.histograms(conn, metric), lambda fam, row: fam.add_metric(
                [row[0]], list(zip(bounds, (*row[1:11], row[12]))), sum_value=row[11]))


def _pools(conn: apsw.Connection) -> Iterator[Metric]:
    """Each pool's slots, in use and waiting (state/pools.py usage)."""
    rows = P.usage(conn)
    total = GaugeMetricFamily("cronrd_pool_slots", "Slots of the pool in force (of a "
                              "node-scoped pool: on each node).", labels=["pool"])
    used = GaugeMetricFamily("cronrd_pool_slots_in_use", "Slots of the pool held by runs "
                             "(of a node-scoped pool: on all nodes together).",
                             labels=["pool"])
    waiting = GaugeMetricFamily("cronrd_pool_waiting_runs", "Runs waiting for slots of "
                                "the pool.", labels=["pool"])
    for row in rows:
        if row["slots"] is not None:
            total.add_metric([row["pool"]], row["slots"])
        used.add_metric([row["pool"]], row["in_use"])
        waiting.add_metric([row["pool"]], row["waiting"])
    yield total
    yield used
    yield waiting


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


# Samples per piece of a family (see _chunked).
CHUNK = 10_000


Family = TypeVar("Family", bound=Metric)
Row = TypeVar("Row")


def _chunked(make: Callable[[], Family], rows: Iterable[Row], add: Callable[[Family, Row], None],
             size: int | None = None) -> Iterator[Family]:
    """One family whose samples are ``add(family, row)`` of each of ``rows``,
    yielded in pieces of ``size`` rows: render() writes the pieces after the
    first without their HELP and TYPE lines, so the page has one family, and
    only one piece's samples and lines are in memory at once (100,000 jobs'
    run counter is 200,000 samples: made whole, with the page's lines, a
    scrape cost the daemon some 200 MB more peak RSS)."""
    size = size or CHUNK
    fam, n, first = make(), 0, True
    for row in rows:
        add(fam, row)
        n += 1
        if n == size:
            setattr(fam, "continued", not first)  # (read by render(); no Metric attribute)
            yield fam
            fam, n, first = make(), 0, False
    if n or first:
        setattr(fam, "continued", not first)
        yield fam


class _One:
    """One family (or piece of one: _chunked) as a collector: the official
    client renders the page a piece at a time, so only one piece's samples
    and text lines live at once."""

    def __init__(self, family: Metric):
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def render(conn: apsw.Connection, live: dict, job_histograms: int = JOB_HISTOGRAMS) -> bytes:
    """The exposition page, from one read transaction on ``conn``."""
    parts: list[bytes] = []
    conn.execute("BEGIN")
    try:
        families = itertools.chain(
            StateCollector(conn, live, job_histograms).collect(),
            # The daemon's process (not this one, in the faces' process):
            # CPU, memory, open files, start time (process_*).
            ProcessCollector(namespace="", pid=lambda: live["pid"], registry=None).collect())
        for family in families:
            text = generate_latest(_One(family))
            if getattr(family, "continued", False):  # a piece after the first (_chunked)
                text = text.split(b"\n", 2)[2]  # without its HELP and TYPE lines
            parts.append(text)
            del family, text
        return b"".join(parts)
    finally:
        conn.execute("COMMIT")


class Metrics:
    """The page, rendered in one worker thread on ``connect()``'s connection
    (opened there, used only there) and cached for ``CACHE_SECONDS``."""

    def __init__(self, connect: Callable[[], apsw.Connection], live: Callable[[], dict],
                 monotonic: Callable[[], float] = clock_monotonic,
                 job_histograms: int = JOB_HISTOGRAMS):
        self.connect = connect
        self.live = live
        self.job_histograms = job_histograms
        self.monotonic = monotonic
        self._conn: apsw.Connection | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cronrd-metrics")
        self._lock = asyncio.Lock()
        self._page: bytes | None = None
        self._at = 0.0
        self._keep = CACHE_SECONDS  # how long the page in hand is reused

    def _render(self, live: dict) -> bytes:
        if self._conn is None:
            self._conn = self.connect()
        return render(self._conn, live, self.job_histograms)

    async def page(self) -> bytes:
        async with self._lock:  # scrapes at once share one render
            now = self.monotonic()
            if self._page is None or now - self._at >= self._keep:
                live = self.live()
                self._page = await asyncio.get_running_loop().run_in_executor(
                    self._pool, self._render, live)
                self._at = self.monotonic()
                self._keep = max(CACHE_SECONDS, CACHE_FACTOR * (self._at - now))
            return self._page

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_JOB_LABEL = b'job_name="'


def only_jobs(page: bytes, glob: str) -> bytes:
    """``page`` without the samples of jobs outside ``glob`` (a token
    limited to some jobs scrapes /metrics: it learns no other job's name).
    Comment lines and samples without a job_name stay."""
    out = []
    for line in page.split(b"\n"):
        at = line.find(_JOB_LABEL)
        if at < 0 or line.startswith(b"#"):
            out.append(line)
            continue
        i, value = at + len(_JOB_LABEL), bytearray()
        while i < len(line) and line[i:i + 1] != b'"':   # the text format's escapes: \\ \" \n
            if line[i:i + 1] == b"\\" and i + 1 < len(line):
                nxt = line[i + 1:i + 2]
                value += b"\n" if nxt == b"n" else nxt
                i += 2
                continue
            value += line[i:i + 1]
            i += 1
        if fnmatch.fnmatchcase(value.decode("utf-8", "replace"), glob):
            out.append(line)
    return b"\n".join(out)

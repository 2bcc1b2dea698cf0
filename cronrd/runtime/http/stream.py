"""Server-Sent Events of API v1: a run's log as it grows, and the state
changes this node applies.

``GET /api/v1/runs/{run_id}/log/stream``
    The run's output from the node that ran it (this one or another, as
    ``cronrd logs -f`` reads it: Handlers.log_chunk). Events: ``run`` (the
    run's record, first), ``log`` (``{"stream", "time", "text"}``, one per
    stretch of one stream) and ``end`` (the record once the run is over; the
    server then closes). A ``log`` event's id is the output position (bytes
    of the job's output) after it, so a client that reconnects with
    ``Last-Event-ID`` (or ``?offset=``) gets the output from there on, no byte
    twice. (A stretch after one of cronrd's own notes, such as the "dropped"
    line of a log past max_log_bytes, may carry no id: a reconnect then
    repeats it.)

``GET /api/v1/events``
    What changed in the replicated state as this node applies it (looked
    at after each batch with effects, and every POLL_INTERVAL):
    ``run_started``, ``run_ended`` (with its outcome and exit code),
    ``job_paused``, ``job_resumed`` (job "" is ``pause --all``),
    ``alert_raised``, ``alert_acked``, ``alert_resolved``, ``notice`` (the
    notification outbox's events: failed, retrying, skipped, recovered,
    dead_lettered, sla_*), ``leader_changed``, and ``reset`` (events were
    missed: re-read the state through the other routes, then follow on).
    An event's id is the Raft index of the applied batch it came from (the
    last event of a batch carries it): the same index space on every node,
    so a client that moves to another node resumes with its
    ``Last-Event-ID`` there too, at least once (a batch may be sent again,
    never skipped). The node keeps the last FEED_SIZE events in one ring
    shared by all clients; each client reads the ring at its own pace (a
    write waits for the client's socket), so a slow client costs no memory:
    one that falls behind the ring gets ``reset`` and continues at the
    newest. The feed starts with the HTTP server: events from before the
    daemon's start are not kept.

Both need a viewer token; a token limited to some jobs (``--jobs GLOB``)
sees only their runs and events (leader changes and ``pause --all`` are
everyone's). A comment line is sent every KEEPALIVE seconds of quiet, after
checking the token again: a stream whose token was revoked or expired ends.
A node serves at most MAX_STREAMS streams at once (503 beyond).
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import fnmatch
import itertools
import json
import logging
from collections import deque
from typing import TYPE_CHECKING, Callable

from aiohttp import web

from ...errors import CronrdError, PermissionDenied, UsageError
from ...schedule import iso_utc
from ...state import queries as Q
from ...model import run_states
from ...model.run import Run
from .api import Route, whole_number
from ..runs import output as O
from ..tasks import Changes
from ...state.effects import RunDone, StateRestored

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler

log = logging.getLogger("cronrd.http")

FOLLOW_INTERVAL = 0.2  # seconds between looks at a running run's log
KEEPALIVE = 15.0       # seconds between comment lines on a quiet stream
FEED_SIZE = 10_000     # events the node keeps for clients to catch up from
POLL_INTERVAL = 0.25   # seconds between looks at the state besides the effects
MAX_STREAMS = 256      # streams (both routes) one node serves at once; more get 503
RETRY_MS = 2000        # the reconnect delay the server suggests to EventSource
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


def sse(event: str, data, event_id: str | int | None = None) -> bytes:
    """One event; ``data`` as JSON on one line (JSON escapes every newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return (f"{head}event: {event}\ndata: "
            f"{json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n").encode()


def _last_id(request: web.Request, query_key: str) -> str | None:
    value = request.headers.get("Last-Event-ID")
    if value is None or not value.strip():
        value = request.query.get(query_key)
    return value.strip() if value and value.strip() else None


def _glob(token: dict) -> str | None:
    return token.get("jobs") or None


class _Slot:
    """One of the node's MAX_STREAMS, held while a stream is served."""

    def __init__(self, routes: "StreamRoutes"):
        if routes.open >= MAX_STREAMS:
            raise web.HTTPServiceUnavailable(
                text=f"this node serves {MAX_STREAMS} streams already; close one, or "
                     "connect to another node of the cluster")
        self.routes = routes

    def __enter__(self):
        self.routes.open += 1

    def __exit__(self, *exc):
        self.routes.open -= 1


async def _open(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    await resp.write(f"retry: {RETRY_MS}\n\n".encode())
    return resp


# -- a run's log ---------------------------------------------------------------------
def log_events(chunk: dict, decoders: dict) -> list[tuple[dict, int | None]]:
    """A read_log chunk (handlers.read_log_chunk) as ``log``
    events and the output position each ends at (None where unknown: before
    one of cronrd's notes, whose length in output positions is not the
    note's). A position is given only where no decoder holds part of a
    character, so that a resume from it decodes the same text."""
    data = base64.b64decode(chunk["data"])
    parts = chunk.get("parts") or ([[O.ALL, None, len(data)]] if data else [])
    ends: list[int | None] = [None] * len(parts)
    pos: int | None = chunk["offset"]
    for i in range(len(parts) - 1, -1, -1):  # from the end back, through plain stretches
        ends[i] = pos
        stream, _, length = parts[i]
        pos = None if pos is None or stream == O.CRONRD else pos - length
    out, at = [], 0
    for (stream, when, length), end in zip(parts, ends):
        name = O.STREAM_NAMES.get(stream, "output")
        dec = decoders.setdefault(name, codecs.getincrementaldecoder("utf-8")("replace"))
        text = dec.decode(data[at:at + length])
        at += length
        pending = sum(len(d.getstate()[0]) for d in decoders.values())
        if end is not None:
            held = len(dec.getstate()[0])
            end = end - held if pending == held else None
        if text:
            out.append(({"stream": name, "time": when, "text": text}, end))
    return out


class StreamRoutes:
    """The two SSE routes over ``reads`` (the daemon's Handlers: conn,
    machine, members, log, log_chunk)."""

    def __init__(self, reads, token_of: Callable[[web.Request], dict],
                 token_ok: Callable[[web.Request], bool] = lambda request: True):
        self.reads = reads
        self.token_of = token_of
        self.token_ok = token_ok  # the request's token is still valid (not revoked, expired)
        self.open = 0  # streams being served
        # Filled from the start, so that a client moving here from another
        # node resumes with its Last-Event-ID (the server is made once the
        # state is open; FakeReads in unit tests have no log).
        self.feed: EventFeed | None = None
        if getattr(reads, "log", None) is not None:
            self.feed = EventFeed(reads.conn, self._leader, lambda: Q.applied_index(reads.conn))
            reads.log.subscribe(self.feed.on_effects)

    def _leader(self) -> str | None:
        """The leader this node knows of (a one-node cluster: itself)."""
        log_ = self.reads.log
        return (log_.leader or None) if hasattr(log_, "leader") else self.reads.config.node_id

    def routes(self) -> list[tuple[Route, Handler]]:
        return [
            (Route("GET", "/api/v1/runs/{run_id}/log/stream", "A run's log as Server-Sent Events "
                   "as it grows (events run, log, end; a log event's id is the output byte "
                   "position after it: reconnect with Last-Event-ID to resume).", "viewer",
                   (("offset", "output position to start at (as Last-Event-ID)"),),
                   {"200": {"description": "text/event-stream",
                            "content": {"text/event-stream": {}}}}),
             self.log_stream),
            (Route("GET", "/api/v1/events", "State changes as Server-Sent Events (run_started,"
                   " run_ended, job_paused, job_resumed, alert_raised, alert_acked, "
                   "alert_resolved, notice, leader_changed, reset); resume with "
                   "Last-Event-ID on any node.", "viewer",
                   (("last_event_id", "resume after this id (as Last-Event-ID)"),),
                   {"200": {"description": "text/event-stream",
                            "content": {"text/event-stream": {}}}}),
             self.events),
        ]

    # -- GET /api/v1/runs/{run_id}/log/stream ------------------------------------------
    async def log_stream(self, request: web.Request) -> web.StreamResponse:
        run, offset = self._log_request(request)
        with _Slot(self):
            resp = await _open(request)
            try:
                await self._follow_log(request, resp, run, offset)
            except ConnectionError:  # the client went away
                pass
        return resp

    def _log_request(self, request: web.Request) -> tuple[Run, int]:
        text = request.match_info["run_id"]
        if not whole_number(text):
            raise UsageError(f"run id {text!r} must be a whole number (the run_id of "
                             "GET /api/v1/runs)")
        run_id = int(text)
        start = _last_id(request, "offset") or "0"
        if not whole_number(start):
            raise UsageError(f"Last-Event-ID (or offset) {start!r} must be an output position "
                             "(the id of a log event), a whole number")
        conn = self.reads.conn
        run = Q.get_run(conn, run_id)
        if run is None:
            raise web.HTTPNotFound(text=f"no run with id {run_id}; GET /api/v1/runs lists "
                                        "the runs")
        glob = _glob(self.token_of(request))
        if glob and not fnmatch.fnmatchcase(run.job, glob):
            raise PermissionDenied(f"this token may read only the jobs matching {glob!r}")
        return run, int(start)

    async def _follow_log(self, request: web.Request, resp: web.StreamResponse, run: Run,
                          offset: int) -> None:
        conn, run_id = self.reads.conn, run.run_id
        await resp.write(sse("run", run.view()))
        decoders: dict[str, codecs.IncrementalDecoder] = {}
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            run = Q.get_run(conn, run_id) or run
            active = run.state in run_states.ACTIVE
            while run.started_at is not None or run.log_path:
                try:
                    chunk = await self.reads.log_chunk(run, offset)
                except CronrdError as exc:
                    # Over (its log gone): the end, so that EventSource does not
                    # come back for it. Running (its node unreachable): a close,
                    # and the client reconnects from its Last-Event-ID.
                    await resp.write(sse("problem", {"detail": str(exc)}))
                    if not active:
                        await resp.write(sse("end", run.view()))
                    return
                for data, end in log_events(chunk, decoders):
                    await resp.write(sse("log", data, end))
                    quiet_since = loop.time()
                offset = chunk["offset"]
                if not chunk["more"]:
                    break
            if not active:
                tail = [{"stream": n, "time": None, "text": t} for n, d in decoders.items()
                        if (t := d.decode(b"", final=True))]
                for data in tail:
                    await resp.write(sse("log", data, offset))
                await resp.write(sse("end", run.view()))
                return
            if loop.time() - quiet_since >= KEEPALIVE:
                if not self.token_ok(request):
                    return  # revoked or expired: the reconnect gets its 401
                await resp.write(b": keepalive\n\n")
                quiet_since = loop.time()
            await asyncio.sleep(FOLLOW_INTERVAL)  # a file has no "grew" event: look again

    # -- GET /api/v1/events --------------------------------------------------------------
    async def events(self, request: web.Request) -> web.StreamResponse:
        glob = _glob(self.token_of(request))
        after = _last_id(request, "last_event_id")
        if after is not None and not whole_number(after):
            raise UsageError(f"Last-Event-ID {after!r} must be the id of an event of this "
                             "stream (a whole number)")
        if self.feed is None:
            raise web.HTTPServiceUnavailable(text="this server has no event feed")
        with _Slot(self):
            resp = await _open(request)
            try:
                await self._follow_events(request, resp, self.feed, glob, after)
            except ConnectionError:  # the client went away
                pass
        return resp

    async def _follow_events(self, request: web.Request, resp: web.StreamResponse,
                             feed: "EventFeed", glob: str | None, after: str | None) -> None:
        seq = feed.position_after(int(after)) if after is not None else feed.newest_seq()
        if seq is None:
            await resp.write(sse("reset", {
                "detail": f"the events after {after} are no longer kept on this node (it "
                          f"keeps the last {feed.size}): re-read the state (GET /api/v1/runs,"
                          " /api/v1/jobs, /api/v1/alerts), then follow on",
                "index": feed.applied_index()}))
            seq = feed.newest_seq()
        while True:
            events, seq, lost = feed.read(seq)
            if lost:
                await resp.write(sse("reset", {
                    "detail": "this client fell behind the node's last "
                              f"{feed.size} events: re-read the state, then follow on",
                    "index": feed.applied_index()}))
            for index, last_of_batch, kind, data in events:
                job = data.get("job")
                if glob and job and not fnmatch.fnmatchcase(job, glob):
                    if last_of_batch:  # the id still moves on
                        await resp.write(f"id: {index}\n: skipped\n\n".encode())
                    continue
                await resp.write(sse(kind, data, index if last_of_batch else None))
            if not await feed.changes.wait(KEEPALIVE):
                if not self.token_ok(request):
                    return  # revoked or expired: the reconnect gets its 401
                await resp.write(b": keepalive\n\n")


class EventFeed:
    """The ring of state-change events of this node (see the module's
    docstring), filled after each applied batch (``on_effects``, a log
    listener) from the effects and from the replicated tables that hold
    changes by growing ids (pause_log, alerts, events) or a small indexed set
    (the running runs, the open alerts)."""

    def __init__(self, conn, leader: Callable[[], str | None],
                 applied_index: Callable[[], int], size: int = FEED_SIZE):
        self.conn = conn
        self.leader_of = leader
        self.applied_index = applied_index
        self.size = size
        # (seq, applied index, last of its batch, kind, data); seq counts every event made
        self.ring: deque = deque(maxlen=size)
        self.seq = 0
        self.floor = applied_index()  # events of batches up to here were never kept
        self.changes = Changes()
        self._start_cursors()

    def _start_cursors(self) -> None:
        one = self._one
        self.pause_id = one("SELECT COALESCE(MAX(event_id), 0) FROM pause_log")
        self.alert_id = one("SELECT COALESCE(MAX(alert_id), 0) FROM alerts")
        self.event_id = one("SELECT COALESCE(MAX(event_id), 0) FROM events")
        self.open_alerts = {r[0] for r in self.conn.execute(
            "SELECT alert_id FROM alerts WHERE state='open'")}
        self.running = self._running()
        self.leader = self.leader_of()

    def _one(self, sql: str, *args) -> int:
        return next(iter(self.conn.execute(sql, args)))[0]

    def _running(self) -> set[int]:
        return {r[0] for r in self.conn.execute(
            f"SELECT run_id FROM runs WHERE state IN {run_states.sql_in(run_states.ACTIVE)} "
            "AND state='running'")}

    # -- reading -------------------------------------------------------------------------
    def newest_seq(self) -> int:
        return self.seq

    def position_after(self, index: int) -> int | None:
        """The seq to read after for a client whose last id was ``index``;
        None when events after it are gone."""
        if index < self.floor:
            return None
        for seq, idx, *_ in self.ring:
            if idx > index:
                return seq - 1
        return self.seq

    def read(self, after: int, most: int = 500) -> tuple[list, int, bool]:
        """Events after seq ``after`` (at most ``most``): (events as (index,
        last of batch, kind, data), the seq read up to, whether events were
        lost: the client fell behind the ring)."""
        first = self.ring[0][0] if self.ring else self.seq + 1
        lost = after + 1 < first and after < self.seq
        after = max(after, first - 1)
        start = after + 1 - first
        out = [(idx, last, kind, data) for _, idx, last, kind, data in
               itertools.islice(self.ring, start, start + most)]
        return out, after + len(out), lost

    # -- filling -------------------------------------------------------------------------
    async def run(self, interval: float = POLL_INTERVAL) -> None:
        """Look again every ``interval``: a batch without effects (an alert
        raised or acked, a leader's first entry) calls no listener."""
        while True:
            await asyncio.sleep(interval)
            self.on_effects([])

    def on_effects(self, effects) -> None:
        try:
            batch = self._collect(effects)
        except Exception:  # a listener must not fail the log
            log.exception("event=event_feed_failed")
            return
        if not batch:
            return
        index = self.applied_index()
        for i, (kind, data) in enumerate(batch):
            self.seq += 1
            if len(self.ring) == self.ring.maxlen:
                self.floor = max(self.floor, self.ring[0][1])
            self.ring.append((self.seq, index, i == len(batch) - 1, kind, data))
        self.changes.notify()

    def _collect(self, effects) -> list[tuple[str, dict]]:
        out: list[tuple[str, dict]] = []
        if any(isinstance(e, StateRestored) for e in effects):  # a snapshot replaced the state
            self._start_cursors()
            self.floor = self.applied_index()  # what came before it is not told
            return [("reset", {"detail": "this node installed a snapshot of the state: "
                               "re-read it, then follow on"})]
        leader = self.leader_of()
        if leader != self.leader:
            out.append(("leader_changed", {"leader": leader, "was": self.leader}))
            self.leader = leader
        running = self._running()
        ended = {e.run.run_id: e.run for e in effects if isinstance(e, RunDone) and e.run}
        for rid in sorted(running - self.running):
            run = Q.get_run(self.conn, rid)
            if run is not None:
                out.append(("run_started", _run_data(run)))
        for rid in sorted((self.running - running) | (set(ended) - self.running)):
            run = Q.get_run(self.conn, rid)
            if run is None or run.state in run_states.ACTIVE:
                continue  # pruned, or back to pending (lost: placed again)
            if rid not in self.running and run.started_at is not None:
                out.append(("run_started", _run_data(run)))  # started and ended in a batch
            out.append(("run_ended", _run_data(run)))
        self.running = running
        for eid, name, paused, note, by, at in self.conn.execute(
                "SELECT event_id, name, paused, note, by, at FROM pause_log WHERE event_id > ? "
                "ORDER BY event_id", (self.pause_id,)):
            self.pause_id = eid
            out.append(("job_paused" if paused else "job_resumed",
                        {"job": name, "note": note, "by": by, "at": iso_utc(at)}))
        for row in self.conn.execute(
                f"{_ALERTS} WHERE alert_id > ? ORDER BY alert_id", (self.alert_id,)):
            self.alert_id = row[0]
            view = _alert(row)
            out.append(("alert_raised", view))
            if view["state"] == "open":
                self.open_alerts.add(row[0])
            else:
                out.append((f"alert_{view['state']}", view))
        now_open = {r[0] for r in self.conn.execute(
            "SELECT alert_id FROM alerts WHERE state='open'")}
        for aid in sorted(self.open_alerts - now_open):
            for row in self.conn.execute(f"{_ALERTS} WHERE alert_id=?", (aid,)):
                view = _alert(row)
                out.append((f"alert_{view['state']}", view))
        self.open_alerts = now_open
        for eid, kind, job, ft, rid, at, data in self.conn.execute(
                "SELECT event_id, kind, job, fire_time, run_id, at, data FROM events "
                "WHERE event_id > ? ORDER BY event_id", (self.event_id,)):
            self.event_id = eid
            out.append(("notice", {"event_id": eid, "kind": kind, "job": job,
                                   "fire_time": iso_utc(ft), "run_id": rid,
                                   "at": iso_utc(at), "data": json.loads(data)}))
        return out


_ALERTS = ("SELECT alert_id, job, fire_time, kind, detail, opened_at, state, note, by, "
           "closed_at FROM alerts")


def _alert(row) -> dict:
    aid, job, ft, kind, detail, opened, state, note, by, closed = row
    return {"alert_id": aid, "job": job, "fire_time": iso_utc(ft), "kind": kind,
            "detail": detail, "opened_at": iso_utc(opened), "state": state, "note": note,
            "by": by, "closed_at": iso_utc(closed)}


def _run_data(run: Run) -> dict:
    v = run.view()
    return {k: v[k] for k in ("run_id", "job", "kind", "fire_time", "attempt", "state",
                              "node", "exit_code", "signal", "started_at", "finished_at",
                              "reason")}


"""Run logs: `logs` (one run's, the latest, following one), reading a
chunk of a log here or from the node that ran it, and the log's
messages (the CLI's offline reads use them too)."""

from __future__ import annotations

import asyncio
import base64
import codecs
from typing import TYPE_CHECKING


from ...config import Config
from ...errors import CronrdError, RequestError
from ...model import run_states
from ...state import queries as Q
from ...model.run import Run
from ...ops import admin as A
from .access import Caller
from .server import Stream
from ..runs import output as O
from ..runs.logs import LOG_CHUNK as LOG_CHUNK, read_run_chunk

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged




FOLLOW_INTERVAL = 0.2   # seconds between looks at a followed log file (`logs --follow`)


def read_log_chunk(config: Config, conn, run_id: int, offset: int) -> dict:
    """Up to LOG_CHUNK bytes of a run's log on this node, from ``offset``
    (also served to other nodes: ``cronrd logs`` on any node).

    The file is the one this node's log_dir holds for the run; the
    log_path in the run's record is never opened (whoever can commit a
    record could name any file)."""
    run = Q.get_run(conn, run_id)
    if run is None:
        raise RequestError(f"no run with id {run_id} on node {config.node_id}")
    return read_run_chunk(config, run, offset)




def chunk_messages(chunk: dict, decoders: dict) -> list[dict]:
    """A read_log chunk as `logs` messages ({"data", "stream", "time"}),
    text decoded per stream (``decoders`` carries partial characters over)."""
    data = base64.b64decode(chunk["data"])
    # A node without an index (an older one) sends the bytes alone.
    parts = chunk.get("parts") or ([[O.ALL, None, len(data)]] if data else [])
    out, at = [], 0
    for stream, when, length in parts:
        name = O.STREAM_NAMES.get(stream, "output")
        dec = decoders.setdefault(name, codecs.getincrementaldecoder("utf-8")("replace"))
        text = dec.decode(data[at:at + length])
        at += length
        if text:
            out.append({"data": text, "stream": name, "time": when})
    return out


def flush_messages(decoders: dict) -> list[dict]:
    """What the decoders still hold (a run's output ended mid-character)."""
    out = []
    for name, dec in decoders.items():
        tail = dec.decode(b"", final=True)
        if tail:
            out.append({"data": tail, "stream": name, "time": None})
    return out


def last_lines(msgs: list[dict], n: int) -> list[dict]:
    """The messages holding the last ``n`` lines, the first one cut at its
    line's start."""
    if n == 0:
        return []
    text = "".join(m["data"] for m in msgs)
    cut = len(text) - 1 if text.endswith("\n") else len(text)
    for _ in range(n):
        cut = text.rfind("\n", 0, cut)
        if cut < 0:
            return msgs
    start, at, out = cut + 1, 0, []
    for msg in msgs:
        end = at + len(msg["data"])
        if end > start:
            out.append({**msg, "data": msg["data"][max(0, start - at):]})
        at = end
    return out


class LogRequests(_Host):
    """The logs part of Handlers (handlers.py): its state, log and guard."""

    def _find_log_run(self, job: str, run_id: int | None) -> Run:
        """--run ID, or the job's latest run that has started (a retry still
        waiting for its time has nothing to show)."""
        if run_id is not None:
            run = Q.get_run(self.conn, run_id)
            if run is None or run.job != job:
                raise RequestError(f"job {job!r} has no run {run_id}; `cronrd runs {job}` "
                                   "lists its runs")
            return run
        for run in Q.list_runs(self.conn, job, None, 200):
            if run.started_at is not None or run.log_path:
                return run
        self._job_or_error(job)
        raise RequestError(f"job {job!r} has no run that started yet; `cronrd run-now {job}` "
                           "starts one")

    def _started_runs(self, job: str, after_id: int, since: float | None,
                      newest: int = 1000) -> list[Run]:
        """The job's runs after run ``after_id`` that started (at or after
        ``since``), oldest first, among its ``newest`` runs."""
        runs = [r for r in Q.list_runs(self.conn, job, None, newest)
                if r.run_id > after_id and (r.started_at is not None or r.log_path)
                and (since is None or (r.started_at or 0) >= since)]
        return sorted(runs, key=lambda r: r.run_id)

    async def h_logs(self, req: A.ShowLogs, caller: Caller) -> Stream:
        job, run_id, since, lines, follow = req.job, req.run_id, req.since, req.lines, req.follow
        if since is None:
            try:
                first = [self._find_log_run(job, run_id)]
            except RequestError:
                if not follow or run_id is not None:
                    raise
                self._job_or_error(job)  # an unknown job stays an error
                first = []  # -f: wait for the job's first run
        else:
            self._job_or_error(job)
            first = self._started_runs(job, 0, since)
        # Reading a run's output is for root, the daemon's uid and the job's user.
        await self._authorize_job(caller, "logs", job, job, change=False)
        # --follow follows --run ID to its end; otherwise the job's next
        # runs too, until the caller goes away.
        return Stream(self._stream_logs(job, first, follow, follow and run_id is None, since,
                                        lines))

    async def _stream_logs(self, job: str, runs: list[Run], follow: bool, follow_next: bool,
                           since: float | None, lines: int | None):
        """Each run: {"run": view}, its output ({"data", "stream", "time"}),
        {"end": view}; then, with ``follow_next``, the job's next runs as
        they start; else {"result": the last run's view}."""
        last = runs[-1] if runs else None
        queue = list(runs)
        while True:
            while queue:
                run = queue.pop(0)
                last = run
                async for msg in self._stream_log(run, follow, lines):
                    yield msg
                lines = None  # -n: the first run's last lines, then everything
            if not follow_next:
                yield {"result": last.view() if last else None}
                return
            await asyncio.sleep(FOLLOW_INTERVAL)
            queue = self._started_runs(job, last.run_id if last else 0, since, newest=100)

    def read_log_chunk(self, run_id: int, offset: int) -> dict:
        return read_log_chunk(self.config, self.conn, run_id, offset)

    async def log_chunk(self, run: Run, offset: int) -> dict:
        """A chunk of ``run``'s log from output position ``offset``, read on
        the node that ran it: this one, or asked over the peer port (`logs`
        and the HTTP log stream on any node)."""
        node = run.node
        if node in (None, self.config.node_id):
            return self.read_log_chunk(run.run_id, offset)
        try:
            return await self.members.call(node, "read_log", {"run_id": run.run_id,
                                                              "offset": offset})
        except CronrdError as exc:
            raise RequestError(
                f"run {run.run_id} ran on node {node}, whose log could not be read: "
                f"{exc}; the file is {run.log_path or 'in its log_dir'} on "
                f"that host") from None

    async def _stream_log(self, run: Run, follow: bool, lines: int | None = None):
        run_id = run.run_id
        offset = 0
        decoders: dict[str, codecs.IncrementalDecoder] = {}
        yield {"run": run.view()}
        held: list[dict] | None = [] if lines is not None else None  # -n: until caught up
        while True:
            run = Q.get_run(self.conn, run_id) or run
            active = run.state in run_states.ACTIVE
            while run.started_at is not None or run.log_path:
                chunk = await self.log_chunk(run, offset)
                offset = chunk["offset"]
                for msg in chunk_messages(chunk, decoders):
                    if held is not None:
                        held.append(msg)
                    else:
                        yield msg
                if not chunk["more"]:
                    break
            if held is not None:
                assert lines is not None  # held is kept for -n only
                for msg in last_lines(held + (flush_messages(decoders)
                                              if not (follow and active) else []), lines):
                    yield msg
                held = None
            if not follow or not active:
                for msg in flush_messages(decoders):
                    yield msg
                yield {"end": run.view()}
                return
            await asyncio.sleep(FOLLOW_INTERVAL)  # a file has no "grew" event: look again

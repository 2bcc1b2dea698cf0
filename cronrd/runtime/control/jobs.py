"""The control commands about jobs and the daemon: status, jobs (paged or
streamed), job, explain, graph, pause, resume, reload."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from typing import TYPE_CHECKING, Any

import apsw

from ... import __version__
from ...errors import CronrdError, UsageError
from ...schedule import iso_utc
from ...state import commands as C
from ...state import queries as Q
from ...model.run import Run
from ...ops import requests as R
from ...ops import admin as A
from .access import Caller, check_admin
from .server import Stream
from .reads import as_written, job_details, job_view, pools_brief
from ...jobspec.as_written import effective

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged


UNPAGED_JOBS = 10_000   # jobs in one unpaged `jobs` answer




STREAM_PAGE = 1_000     # jobs in one message of a streamed listing


class _Pages:
    """The pages of a streamed listing (``queries.job_view_texts``), each
    read by a worker thread on a read-only connection of its own while the
    loop sends the one before: SQLite builds the JSON without the
    interpreter lock, so reading and sending overlap. A state in memory
    (tests) is read on the loop."""

    def __init__(self, conn, tz: str, match: str | None):
        self.tz, self.match = tz, match
        self.reader = None
        if conn.filename:
            try:
                self.reader = apsw.Connection(conn.filename, flags=apsw.SQLITE_OPEN_READONLY)
                self.reader.setbusytimeout(5000)
            except apsw.Error:
                self.reader = None
        self.conn = self.reader or conn
        self.next: asyncio.Future | None = None

    def _read(self, after: str | None) -> list:
        return Q.job_view_texts(self.conn, self.tz, after=after, glob=self.match,
                                limit=STREAM_PAGE)

    def _ask(self, after: str | None) -> None:
        if self.reader is None:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(self._read(after))
        else:
            fut = asyncio.get_running_loop().run_in_executor(None, self._read, after)
        self.next = fut

    def __aiter__(self):
        self._ask(None)
        return self

    async def __anext__(self) -> list:
        if self.next is None:
            raise StopAsyncIteration
        rows = await self.next
        self.next = None
        if len(rows) == STREAM_PAGE:
            self._ask(rows[-1][0])  # the next page while this one is sent
        elif not rows:
            raise StopAsyncIteration
        await asyncio.sleep(0)  # the loop's other work between pages
        return rows

    def close(self) -> None:
        reader, self.reader = self.reader, None
        if reader is None:
            return
        if self.next is not None and not self.next.done():
            self.next.add_done_callback(lambda _f: reader.close())  # after its last read
        else:
            reader.close()


class JobRequests(_Host):
    """The jobs part of Handlers (handlers.py): its state, log and guard."""

    async def h_status(self, req: A.Status) -> dict[str, Any]:
        await self._barrier(req.consistent)
        active = Q.count_active(self.conn)
        jobs, paused = Q.count_jobs(self.conn)
        return {
            "node_id": self.config.node_id, **self.members.status(),
            "ready": self.is_ready(),
            "version": __version__, "pid": os.getpid(),
            "started_at": iso_utc(round(self.started_at, 3)),
            "uptime_s": round(self.clock.now() - self.started_at, 3),
            "jobs": jobs, "paused": paused,
            "running": active.get("running", 0),
            "assigned": active.get("assigned", 0), "pending": active.get("pending", 0),
            "running_here": self.executor.running_here(),
            "conflicts": Q.conflicts(self.conn),
            "maintenance": Q.pause_note(self.conn, ""),
            "applied_index": self.machine.applied_index,
            "state_digest": self.machine.state_digest,
            "problems": [p for p in [self.http_problem()] if p]
                        + [str(p) for p in self.watcher.problems],
            "pools": pools_brief(self.conn),
            "socket": self.config.socket, "data_dir": self.config.data_dir,
            "log_dir": self.config.log_dir, "jobs_dir": self.config.jobs_dir,
            "timezone": self.config.timezone,
            "http": self.http_url(),
            "faces": self.faces_info(),
        }

    def _job_view(self, job: dict, last: Run | None,
                  leader_fires: dict[str, int | None] | None = None) -> dict:
        if leader_fires is None:
            leader_fires = self.leadership.next_fires([job["name"]])
        return job_view(job, last, self.config.timezone,
                        functools.partial(self._next_fire, leader_fires=leader_fires))

    def _broken_files(self) -> dict[str, str]:
        """This node's job files with problems: path -> the first problem.
        Their jobs keep running their last good version."""
        broken: dict[str, str] = {}
        for p in self.watcher.problems:
            broken.setdefault(p.path, str(p))
        return broken

    def _broken_jobs(self) -> dict[str, str]:
        """Job name -> the problem of its file here (few: only broken files)."""
        broken = self._broken_files()
        return {name: broken[source] for name, source in Q.jobs_of_sources(
            self.conn, list(broken))}

    def _page_views(self, rows: list[dict]) -> list[dict]:
        names = [j["name"] for j in rows]
        last = Q.last_runs(self.conn, names)
        fires = self.leadership.next_fires(names)  # one question per page (faces_child.py)
        broken = self._broken_files()
        views = []
        for j in rows:
            view = self._job_view(j, last.get(j["name"]), fires)
            # its file here is broken: it keeps running its last good version
            view["file_problem"] = broken.get(j["source"])
            views.append(view)
        return views

    async def _stream_jobs(self, match: str | None):
        """`jobs --json`: the same fields as a page's views, as JSON text that
        SQLite builds (queries.job_view_texts), next_fire and last_run added."""
        count = 0
        broken = self._broken_jobs()
        pages = _Pages(self.conn, self.config.timezone, match)
        try:
            async for rows in pages:
                count += len(rows)
                names = [r[0] for r in rows]
                last = Q.last_runs(self.conn, names)
                fires = self.leadership.next_fires(names)
                texts = []
                for name, text, schedule, timezone, enabled, paused, cursor, cal in rows:
                    run = last.get(name)
                    nxt = self._next_fire({"name": name, "paused": paused, "cursor": cursor},
                                          {"enabled": enabled, "schedule": schedule,
                                           "timezone": timezone,
                                           "calendar": None if cal is None else json.loads(cal)},
                                          leader_fires=fires)
                    texts.append(f'{text[:-1]},"next_fire":{json.dumps(iso_utc(nxt))},'
                                 f'"file_problem":{json.dumps(broken.get(name))},'
                                 f'"last_run":{json.dumps(run.view()) if run else "null"}}}')
                yield {"data": ",\n".join(texts)}
        finally:
            pages.close()
        yield {"result": {"jobs": count}}

    def _next_fire(self, job: dict, d: dict, *,
                   leader_fires: dict[str, int | None]) -> int | None:
        """``leader_fires``: the scheduler's next fire of the jobs it has
        (Leadership.next_fires: empty unless this node leads)."""
        if job["name"] in leader_fires:
            return leader_fires[job["name"]]
        # a follower works it out from the replicated cursor
        if job["paused"] or not d["enabled"]:
            return None
        try:
            cal = d.get("calendar")
            trig = self._triggers.get(d["schedule"], d["timezone"],
                                      None if cal is None else json.dumps(cal, sort_keys=True))
            return self._triggers.next_after(trig, max(job["cursor"], int(self.clock.now())))
        except CronrdError:
            return None

    async def h_jobs(self, req: R.ListJobs) -> Any:
        """The jobs by name. Paged (``limit``, and ``after``: the last name of
        the page before; the answer is ``{"jobs": [...], "next": name or
        null}``), optionally only the names matching ``match`` (shell
        pattern). ``stream``: every job as JSON text, a page per ``data``
        message (jobs separated by ",\\n"; `jobs --json` writes them as they
        come), then ``{"jobs": count}``. Without ``limit`` or ``stream``: the
        list of every job, up to UNPAGED_JOBS (more is refused: page)."""
        await self._barrier(req.consistent)
        self._triggers.forget_calendars()   # (the calendars in force may have changed)
        limit, match = req.limit, req.match
        if req.stream:
            return Stream(self._stream_jobs(match))
        if limit is None:
            rows = Q.jobs(self.conn, glob=match, limit=UNPAGED_JOBS + 1, as_dicts=True)
            if len(rows) > UNPAGED_JOBS:
                raise UsageError(f"more than {UNPAGED_JOBS} jobs: ask for pages (limit, after), "
                                 "as `cronrd jobs` does")
            return self._page_views(rows)
        rows = Q.jobs(self.conn, after=req.after, glob=match, limit=limit, as_dicts=True)
        return {"jobs": self._page_views(rows),
                "next": rows[-1]["name"] if len(rows) == limit else None}

    async def h_job(self, req: R.ShowJob) -> dict[str, Any]:
        """One job as `cronrd show` prints it: the listing's fields, the
        definition, why it is paused, the problems of its file here (it runs
        its last good version), its next fire times, last and active runs."""
        await self._barrier(req.consistent)
        job = self._job_or_error(req.name)
        view = self._job_view(job, Q.last_run(self.conn, job["name"]))
        view["spec"] = job["spec"].to_dict()
        view.update(job_details(self.conn, job, view, self.clock.now(), req.next,
                                [str(p) for p in self.watcher.problems
                                 if p.path == job["source"]]))
        view["written"] = as_written(view, self.config.node_id, self.config.jobs_dir)
        view["effective"] = [list(e) for e in effective(job["spec"])]
        return view

    async def h_explain(self, req: A.Explain) -> dict[str, Any]:
        """`cronrd explain JOB [--at T | --next]`: the decision trail of one
        fire time (explain/explain.py). The members' health is the leader's view; a
        follower gives them as last announced in the state."""
        await self._barrier(req.consistent)
        from ...explain.explain import FOLLOWER_NODES, explain, nodes_from_state
        if self.log.is_leader:
            nodes, note = self.members.node_views(), ""
        else:
            nodes, note = nodes_from_state(self.conn), FOLLOWER_NODES
        return explain(self.conn, req, now=self.clock.now(), default_tz=self.config.timezone,
                       nodes=nodes, nodes_note=note)

    async def h_graph(self, req: R.Graph) -> dict[str, Any]:
        await self._barrier(req.consistent)
        from .reads import dependency_graph
        return dependency_graph(self.conn, req.job)

    async def _set_paused(self, req: R.PauseJob, caller: Caller, paused: bool) -> dict[str, Any]:
        command = "pause" if paused else "resume"
        note = req.note
        if req.all:
            # Every job: for root and the daemon's uid.
            what = f"cronrd {command} --all"
            await self._authorize(caller, command, "--all", what,
                                  lambda: check_admin(caller, what), change=True)
            return await self.log.propose(C.SetPaused(
                name="", paused=paused, at=self.clock.now(), note=note,
                by=caller.describe()))
        name = req.job
        if name is None:
            raise UsageError("missing argument 'job'")
        await self._job_for(caller, command, name)
        await self._authorize_job(caller, command, name, name, change=True)
        return await self.log.propose(C.SetPaused(name=name, paused=paused,
                                                  at=self.clock.now(), note=note,
                                                  by=caller.describe()))

    async def h_pause(self, req: R.PauseJob, caller: Caller) -> dict[str, Any]:
        return await self._set_paused(req, caller, True)

    async def h_resume(self, req: R.ResumeJob, caller: Caller) -> dict[str, Any]:
        return await self._set_paused(req, caller, False)

    async def h_reload(self, req: A.Reload) -> dict[str, Any]:
        return await self.watcher.reload()

"""API v1 beyond the job and run lists (http/api.py): the cluster and its
nodes, one job (detail, explain, graph, pause, resume, run now, rerun), one
run (detail, cancel, its log as a byte range), backfills, alerts, the dead
letter, pools, the audit log, tokens, and job file validation.

Every route calls the control socket's handler (control/handlers.py) as the token's
caller (access.Caller.of_token): the same checks, the same replicated
writes, each write audited with the user ``token:NAME``. The server checks
the route's least role first (http_server._auth); the handlers check a
token's role and ``jobs`` glob again per job (an operator token limited to
``db-*`` cannot pause ``web``), and the reads here hide or refuse the jobs
outside its glob. Times are RFC 3339 UTC; a job's views carry its zone
(``timezone``) alongside. POST routes honour ``Idempotency-Key``
(http/idempotency.py).
"""

from __future__ import annotations

import base64
import json
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...decisions import backfill as BD
from ...errors import CronrdError, RequestError, UsageError
from ...jobspec import parse_job_text
from ...schedule import iso_utc, parse_iso
from ...state import planned as PLN
from ...state import alerts as AL
from ...state import backfill as BF
from ...state import queries as Q
from ...state import tokens as T
from ...state.node_drains import drained
from ...model.run import SELECT as RUN_SELECT, Run
from ...ops import requests as R
from ...ops import typed
from ...ops import admin as A
from ...ops.requests import PauseJob, Ping, ResumeJob, RunNow, ShowJob
from ...ops import workflows as W
from ...state.tokens import job_allowed
from ..control.access import Caller, check_token_sees
from ..control.logs import LOG_CHUNK, read_log_chunk
from .api import (MAX_LIMIT, Route, cursor_before, decode_cursor, encode_cursor,
                  only_seen_lineage, page_limit, whole_number)
from .idempotency import IdempotencyCache

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler

API = "/api/v1"
MAX_LOG_LENGTH = 4 * 1024 * 1024   # bytes of a run's log in one answer
LAST_TIME = 253402300799            # 9999-12-31T23:59:59Z: the last time a request may name
MAX_VALIDATE = 256 * 1024          # bytes of a job file to validate

_PAGE = (("limit", f"page size, 1 to {MAX_LIMIT} (default 100)"),
         ("cursor", "next_cursor of the previous page"))
_PROBLEM: dict[str, dict] = {"application/problem+json": {}}
_JSON_BODY = {"200": {"description": "OK"},
              "400": {"description": "bad input", "content": _PROBLEM}}
# The statuses the writes answer other than 200 (the OpenAPI document says
# what the server does: a run-now is 202, not 200).
_STARTED = {"202": {"description": "Accepted: the run is recorded and placed; it starts "
                                   "on its node"},
            "400": _JSON_BODY["400"],
            "404": {"description": "no such job", "content": _PROBLEM},
            "409": {"description": "the job's concurrency refuses a run now (one runs), or "
                                   "too many manual runs wait", "content": _PROBLEM}}
_PLANNED = {"200": {"description": "a dry run: the plan"},
            "202": {"description": "Accepted: the runs are recorded"},
            "400": _JSON_BODY["400"],
            "404": {"description": "no such job", "content": _PROBLEM}}
_CREATED = {"201": {"description": "Created: the answer holds the token's secret, once"},
            "400": _JSON_BODY["400"]}


def json_param(value: Any) -> Any:
    """A run parameter's value from a JSON body as the text the job's param
    types read: a number or a boolean as its JSON text (``5``, ``0.5``,
    ``true``); anything else as it came (a string, or a wrong type that
    the request's check refuses)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return value

class NotFound(RequestError):
    http_status = 404


def _json(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status)


async def _body(request: web.Request) -> tuple[bytes, dict]:
    raw = await request.read()
    if not raw.strip():
        return raw, {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"the body is not JSON ({exc}); send a JSON object, e.g. "
                         '{"note": "disk full"}') from None
    if not isinstance(value, dict):
        raise UsageError("the body must be a JSON object")
    return raw, value


def _time_arg(value: Any, name: str) -> int:
    """RFC 3339 text or Unix seconds -> whole Unix seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not 0 <= value <= LAST_TIME:  # (NaN is in no range)
            raise UsageError(f"{name} must be a time between the years 1970 and 9999 "
                             f"(got {value!r})")
        return int(value)
    if isinstance(value, str):
        try:
            return parse_iso(value)
        except CronrdError as exc:
            raise UsageError(f"{name}: {exc}") from None
    raise UsageError(f"{name} must be an RFC 3339 time (2026-03-29T01:00:00Z) or Unix "
                     "seconds")


def _int_id(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    if not whole_number(text):
        raise UsageError(f"{name} must be a whole number (got {text!r})")
    return int(text)


def _bool(value: Any, name: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise UsageError(f"{name} must be true or false")


def _str(value: Any, name: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string")
    return value


async def audit_refused(handlers, token: dict, request: web.Request, detail: str) -> None:
    """A write refused for the token's role (http_server._auth): audited like
    the socket's refusals (the first few per caller and minute)."""
    if not hasattr(handlers, "_audit"):
        return
    resource = request.match_info.route.resource
    command = f"{request.method} {resource.canonical if resource else request.path}"
    target = next(iter(request.match_info.values()), "")
    await handlers._audit(Caller.of_token(token), command, target, False, detail)


class ApiRoutes:
    """The routes over ``handlers`` (the daemon's Handlers); ``token_of``:
    request -> its token row (http_server.TOKEN)."""

    def __init__(self, handlers, token_of):
        self.h = handlers
        self.token_of = token_of
        self._guarded: dict | None = None
        self.idempotency = IdempotencyCache()

    # -- helpers ---------------------------------------------------------------------
    @property
    def guarded(self) -> dict:
        """The control commands as the socket serves them (handlers.table():
        the ADMIN ones check and audit the caller)."""
        if self._guarded is None:
            self._guarded = self.h.table()
        return self._guarded

    def caller(self, request: web.Request) -> Caller:
        return Caller.of_token(self.token_of(request))

    async def consistent(self, request: web.Request) -> None:
        """``?consistent=true``: wait until this node has every committed write."""
        if request.query.get("consistent", "").lower() in ("1", "true", "yes"):
            await self.h.log.read_barrier()

    def glob(self, request: web.Request) -> str:
        return self.token_of(request).get("jobs") or ""

    def sees(self, request: web.Request, job: str | None, what: str) -> None:
        """403 unless the token's glob covers ``job`` (reads)."""
        check_token_sees(self.caller(request), what, job)

    def post(self, fn, json_body: bool = True):
        """A POST route: JSON body (else the raw bytes), Idempotency-Key."""
        async def route(request: web.Request) -> web.Response:
            raw, body = await _body(request) if json_body else (await request.read(), {})
            t = self.token_of(request)  # a token made again under its name: new keys
            return await self.idempotency.run(
                f"{t['name']}@{t.get('created_at')}", request, raw,
                lambda: fn(request, body))
        return route

    def _job_zone(self, job: str) -> str:
        spec = Q.job_spec(self.h.conn, job)
        return (spec.timezone if spec is not None else None) or self.h.config.timezone

    def routes(self) -> list[tuple[Route, Handler]]:
        J = API + "/jobs/{name}"
        R = API + "/runs/{run_id}"
        p = self.post
        return [
            (Route("GET", API + "/cluster", "This node, the leader, the term and commit "
                   "index, jobs and runs in numbers.", "viewer"), self.cluster),
            (Route("GET", API + "/nodes", "The cluster's nodes: state, address, tags, "
                   "drained or not.", "viewer"), self.nodes),
            (Route("POST", API + "/nodes/{node}/drain", "Drain a node: it gets no new runs "
                   "(its running ones finish). Body: {note}.", "admin", (), _JSON_BODY,
                   request=A.DrainNode, body=("note",)), p(self.drain)),
            (Route("POST", API + "/nodes/{node}/undrain", "Undo a drain.", "admin", (),
                   _JSON_BODY, request=A.DrainNode, body=("note",)), p(self.undrain)),
            (Route("GET", J, "One job: its spec, source file and line, state, next fire "
                   "times (?next=N, default 5), recent and active runs.", "viewer",
                   (("next", "how many next fire times, 0 to 100"),), request=ShowJob),
             self.job),
            (Route("GET", J + "/explain", "Why the job fired or not at a time.", "viewer",
                   (("at", "the fire time (RFC 3339); default: the last one"),
                    ("next", "true: its next fire time"))), self.explain),
            (Route("POST", J + "/pause", "Pause the job. Body: {note}.", "operator", (),
                   _JSON_BODY, request=PauseJob, body=("note",)), p(self.pause)),
            (Route("POST", J + "/resume", "Resume the job.", "operator", (), _JSON_BODY,
                   request=ResumeJob, body=("note",)), p(self.resume)),
            (Route("GET", J + "/graph", "The job's ancestors and descendants.", "viewer"),
             self.job_graph),
            (Route("GET", API + "/graph", "The dependency graph (the token's jobs).",
                   "viewer"), self.graph),
            (Route("POST", J + "/run", "Run the job now, or plan a run for later (at: RFC "
                   "3339, or +DURATION; the answer is the plan, with its plan_id). Body: "
                   "{params: {NAME: VALUE}, key, at}.", "operator", (), _STARTED,
                   request=RunNow, body=("params", "key", "at")), p(self.run_now)),
            (Route("POST", API + "/pings/{name}", "A watch's ping: its job ran elsewhere "
                   "and says so. Body (optional): {what: start|success|fail, exit_code}. A "
                   "token of role ping whose jobs glob names the watch is enough.", "ping",
                   (), {"200": {"description": "the ping, recorded on the watch's run"},
                        "400": _JSON_BODY["400"],
                        "404": {"description": "no such watch", "content": _PROBLEM}},
                   request=Ping, body=("what", "exit_code")), p(self.ping)),
            (Route("POST", API + "/plans/{plan_id}/cancel", "Remove a planned run (run "
                   "with at) before it starts.", "operator", (),
                   {**_JSON_BODY, "404": {"description": "no such planned run (it started "
                                                         "or was cancelled)",
                                          "content": _PROBLEM}}),
             p(self.cancel_plan)),
            (Route("POST", J + "/rerun", "A new attempt of the fire time at. Body: {at, "
                   "downstream, dry_run}.", "operator", (), _PLANNED, request=W.Rerun,
                   body=("downstream", "dry_run")), p(self.rerun)),
            (Route("GET", R, "One run: its attempts, parameters, lineage.", "viewer"),
             self.run),
            (Route("POST", R + "/cancel", "Cancel the run.", "operator", (), _JSON_BODY),
             p(self.cancel)),
            (Route("GET", R + "/log", "A byte range of the run's output (text/plain); "
                   "X-Cronrd-Next-Offset and X-Cronrd-More say where to go on.", "viewer",
                   (("offset", "first byte, default 0"),
                    ("length", f"bytes, 1 to {MAX_LOG_LENGTH} (default {LOG_CHUNK})")),
                   {"200": {"description": "the bytes of the output from offset",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}}),
             self.run_log),
            (Route("GET", API + "/backfills", "Backfills, newest first.", "viewer", _PAGE),
             self.backfills),
            (Route("POST", API + "/backfills", "Start a backfill, or plan one (dry_run). "
                   "Body: {job, from, to, reprocess, order, parallel, note, downstream, "
                   f"force, dry_run}}. At most {BD.MAX_FIRES} fire times; force (an admin "
                   f"token for every job) takes up to {BD.HARD_MAX_FIRES}. One open "
                   "backfill per job. A dry run answers {total, counts, lines, omitted, "
                   f"omitted_after}}: lines are the first and last {BD.DRY_RUN_LINES} fire "
                   "times, omitted how many lie between them.", "operator", (), _PLANNED,
                   request=W.Backfill, body=("job", "reprocess", "order", "parallel", "note",
                                             "downstream", "force", "dry_run")),
             p(self.backfill)),
            *[(Route("POST", API + "/backfills/{id}/" + verb, f"{verb.capitalize()} the "
                     "backfill.", "operator", (), _JSON_BODY), p(self.backfill_state(state)))
              for verb, state in (("pause", "paused"), ("resume", "running"),
                                  ("cancel", "cancelled"))],
            (Route("GET", API + "/alerts", "Alerts, newest first (?all=true: closed too; "
                   "?job=).", "viewer", _PAGE + (("all", "true: closed ones too"),
                                                  ("job", "one job's"))), self.alerts),
            (Route("POST", API + "/alerts/{id}/ack", "Acknowledge the alert. Body: {note}.",
                   "operator", (), _JSON_BODY, request=W.AckAlert, body=("note",)),
             p(self.alert_ack)),
            (Route("GET", API + "/dead-letter", "The dead letter, newest first.", "viewer",
                   _PAGE + (("all", "true: closed ones too"),)), self.dead_letter),
            *[(Route("POST", API + "/dead-letter/{run_id}/" + action, f"{action.capitalize()}"
                     " the dead run. Body: {note}.", "operator", (), _JSON_BODY,
                     request=W.DeadLetterAction, body=("note",)),
               p(self.dead_letter_action(action))) for action in ("requeue", "discard")],
            (Route("GET", API + "/pools", "The pools: slots in use, runs waiting.", "viewer"),
             self.pools),
            (Route("GET", API + "/audit", "The audit log, newest first.", "admin", _PAGE),
             self.audit),
            (Route("POST", API + "/tokens", "Create a token; the answer holds its secret, "
                   "once. Body: {name, role, jobs, expires (seconds)}.", "admin", (),
                   _CREATED, request=A.CreateToken, body=("name", "role", "jobs", "expires")),
             p(self.token_create)),
            (Route("DELETE", API + "/tokens/{name}", "Revoke the token.", "admin"),
             self.token_revoke),
            (Route("POST", API + "/validate", "Check a job file (the body, YAML): its "
                   "problems with line numbers. Nothing is stored.", "viewer", (),
                   _JSON_BODY), p(self.validate, json_body=False)),
        ]

    # -- cluster and nodes -------------------------------------------------------------
    async def cluster(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        st = await self.h.h_status(A.Status())
        keep = ("node_id", "role", "leader", "term", "commit_index", "ready", "version",
                "jobs", "paused", "running", "assigned", "pending", "applied_index",
                "maintenance", "timezone", "http")
        return _json({k: st.get(k) for k in keep})

    async def nodes(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        drains = drained(self.h.conn)
        rows = Q.nodes(self.h.conn)
        if not rows:  # one host: it never announces itself
            rows = [{"node": self.h.config.node_id, "state": "up", "addr": None, "tags": [],
                     "since": self.h.started_at}]
        return _json({"items": [{**r, "since": iso_utc(r["since"]),
                                 "drained": drains.get(r["node"])} for r in rows]})

    async def drain(self, request: web.Request, body: dict) -> web.Response:
        return await self._drain(request, body, True)

    async def undrain(self, request: web.Request, body: dict) -> web.Response:
        return await self._drain(request, body, False)

    async def _drain(self, request, body, drained: bool) -> web.Response:
        # (the handler checks the caller, an admin, and audits: control/membership.py)
        res = await self.h.h_node_drain(A.DrainNode(
            node=request.match_info["node"], drained=drained,
            note=_str(body.get("note"), "note")), self.caller(request))
        return _json(res)

    # -- jobs --------------------------------------------------------------------------
    async def job(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        name = request.match_info["name"]
        self.sees(request, name, f"GET /api/v1/jobs/{name}")
        text = request.query.get("next", "5")
        if not whole_number(text):
            raise UsageError(f"next must be a whole number 0 to 100 (got {text!r})")
        self._exists(name)
        view = await self.h.h_job(typed.parse(R.ShowJob, {"name": name, "next": int(text)}))
        # the line of the job in its file, when this node has the file
        # (control/reads.as_written read it, from this node's jobs_dir only)
        view["source_line"] = (view.get("written") or {}).get("line")
        return _json(view)

    def _exists(self, name: str) -> None:
        if not any(Q.jobs(self.h.conn, name=name)):
            raise NotFound(f"no job named {name!r}; GET /api/v1/jobs lists the jobs")

    def _exists_for(self, request: web.Request, name: str) -> None:
        """A write's 404 for a missing job, only for a job the token's glob
        covers: outside it the handler refuses (403, audited) whether the
        job exists or not, so the answer tells nothing of jobs the token
        may not see (issue 32 point 6)."""
        glob = self.glob(request)
        if glob and not job_allowed(glob, name):
            return
        self._exists(name)

    async def explain(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        name = request.match_info["name"]
        self.sees(request, name, f"GET /api/v1/jobs/{name}/explain")
        self._exists(name)
        # (the time is explain's to read: explain/subject.py resolve_time)
        return _json(await self.h.h_explain(A.Explain(
            job=name, at=request.query.get("at") or None,
            next=request.query.get("next") == "true")))

    async def pause(self, request: web.Request, body: dict) -> web.Response:
        return await self._pause(request, body, self.h.h_pause, R.PauseJob)

    async def resume(self, request: web.Request, body: dict) -> web.Response:
        return await self._pause(request, body, self.h.h_resume, R.ResumeJob)

    async def _pause(self, request, body, fn, request_type: type) -> web.Response:
        name = request.match_info["name"]
        self._exists_for(request, name)
        res = await fn(typed.parse(request_type, {"job": name, "note": _str(body.get("note"),
                                                                             "note")}),
                       self.caller(request))
        return _json({"job": name, **(res if isinstance(res, dict) else {})})

    async def job_graph(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        name = request.match_info["name"]
        self.sees(request, name, f"GET /api/v1/jobs/{name}/graph")
        return _json(self._only_seen(request, await self.h.h_graph(R.Graph(job=name))))

    async def graph(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        return _json(self._only_seen(request, await self.h.h_graph(R.Graph())))

    def _only_seen(self, request, graph: dict) -> dict:
        glob = self.glob(request)
        if not glob:
            return graph
        jobs = [j for j in graph["jobs"] if job_allowed(glob, j["name"])]
        names = {j["name"] for j in jobs}
        return {**graph, "jobs": jobs,
                "edges": [e for e in graph["edges"] if e[0] in names and e[1] in names]}

    async def run_now(self, request: web.Request, body: dict) -> web.Response:
        """(Params may come as JSON numbers and booleans, as a JSON client
        sends an int or bool param; the job's param types check them.)"""
        name = request.match_info["name"]
        self._exists_for(request, name)
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise UsageError('params must be an object of NAME: "VALUE"')
        args = {"job": name, "params": {k: json_param(v) for k, v in params.items()}}
        if body.get("key") is not None:
            args["key"] = _str(body.get("key"), "key")
        if body.get("at") is not None:
            args["at"] = _str(body.get("at"), "at")
        res = await self.h.h_run_now(typed.parse(R.RunNow, args), self.caller(request))
        return _json({"job": name, **res}, status=202)

    async def rerun(self, request: web.Request, body: dict) -> web.Response:
        name = request.match_info["name"]
        self._exists_for(request, name)
        if body.get("at") is None:
            raise UsageError("at is required: the fire time to run again (RFC 3339)")
        res = await self.h.h_rerun(typed.parse(W.Rerun, {
            "job": name, "at": _time_arg(body["at"], "at"),
            "downstream": _bool(body.get("downstream"), "downstream"),
            "dry_run": _bool(body.get("dry_run"), "dry_run")}), self.caller(request))
        return _json(res, status=200 if res.get("dry_run") else 202)

    # -- runs --------------------------------------------------------------------------
    def _run_of(self, request: web.Request, what: str):
        run_id = _int_id(request, "run_id")
        run = Q.get_run(self.h.conn, run_id)
        if run is None:
            raise NotFound(f"no run with id {run_id}; GET /api/v1/runs lists the runs")
        self.sees(request, run.job, what)
        return run

    async def run(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        run = self._run_of(request, f"GET {request.path}")
        view = await self.h.h_run(R.ShowRun(run_id=run.run_id))
        view["timezone"] = self._job_zone(run.job)
        # every attempt of its fire time (the run and its retries), first first
        view["attempts"] = [Run.from_row(row).view() for row in self.h.conn.execute(
            f"{RUN_SELECT} WHERE job=? AND origin=? AND fire_time=? AND target=? "
            "ORDER BY attempt, run_id LIMIT 100",
            (run.job, run.origin, run.fire_time, run.target))]
        return _json(only_seen_lineage(view, self.glob(request) or None))

    async def cancel(self, request: web.Request, body: dict) -> web.Response:
        run_id = _int_id(request, "run_id")
        if Q.get_run(self.h.conn, run_id) is None:
            raise NotFound(f"no run with id {run_id}; GET /api/v1/runs lists the runs")
        return _json(await self.h.h_cancel(R.CancelRun(run_id=run_id), self.caller(request)))

    async def ping(self, request: web.Request, body: dict) -> web.Response:
        name = request.match_info["name"]
        self.sees(request, name, f"POST {request.path}")   # (before saying what it is)
        spec = Q.job_spec(self.h.conn, name)
        if spec is None or spec.watch is None:
            raise NotFound(f"no watch named {name!r}" + (" (it is a job cronrd runs)"
                                                        if spec is not None else "")
                           + "; GET /api/v1/jobs lists the jobs and watches")
        args: dict[str, Any] = {"job": name}
        if body.get("what") is not None:
            args["what"] = _str(body["what"], "what")
        if body.get("exit_code") is not None:
            args["exit_code"] = body["exit_code"]
        return _json(await self.h.h_ping(typed.parse(R.Ping, args), self.caller(request)))

    async def cancel_plan(self, request: web.Request, body: dict) -> web.Response:
        plan_id = _int_id(request, "plan_id")
        plan = PLN.get(self.h.conn, plan_id)
        if plan is None:
            raise NotFound(f"no planned run {plan_id}: it started or was cancelled; GET "
                           "/api/v1/jobs/NAME lists a job's planned runs")
        self.sees(request, plan.job, f"POST {request.path}")
        return _json(await self.h.h_cancel(R.CancelRun(plan=plan_id), self.caller(request)))

    async def run_log(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        offset, length = (request.query.get(k, d) for k, d in (("offset", "0"),
                                                                  ("length", str(LOG_CHUNK))))
        if not whole_number(offset) or not whole_number(length) or \
                not 1 <= int(length) <= MAX_LOG_LENGTH:
            raise UsageError(f"offset must be a whole number >= 0 and length 1 to "
                             f"{MAX_LOG_LENGTH} (got offset={offset!r} length={length!r})")
        run = self._run_of(request, f"GET {request.path}")
        at, want = int(offset), int(length)
        data, more, me = b"", False, self.h.config.node_id
        while len(data) < want:
            if run.node in (None, me):
                chunk = read_log_chunk(self.h.config, self.h.conn, run.run_id, at)
            else:
                chunk = await self.h.members.call(run.node, "read_log",
                                                  {"run_id": run.run_id, "offset": at})
            got = base64.b64decode(chunk["data"])
            data += got
            at = chunk["offset"]
            more = chunk["more"]
            if not more or not got:
                break
        if len(data) > want:
            at -= len(data) - want
            data, more = data[:want], True
        return web.Response(body=data, content_type="text/plain", charset="utf-8", headers={
            "X-Cronrd-Offset": offset, "X-Cronrd-Next-Offset": str(at),
            "X-Cronrd-More": "true" if more else "false",
            "X-Cronrd-Run-State": run.state.value})

    # -- backfills ---------------------------------------------------------------------
    async def backfills(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        limit, before = page_limit(request), self._before(request)
        rows = BF.listing(self.h.conn, None, limit, before=before)
        return self._page(request, rows, "id", limit, times=("from", "to", "created_at",
                                                               "updated_at"))

    def _before(self, request) -> int | None:
        return cursor_before(decode_cursor(request.query.get("cursor")))

    def _page(self, request, rows: list[dict], key: str, limit: int,
              times: tuple[str, ...] = ()) -> web.Response:
        glob = self.glob(request)
        items, zones = [], {}
        for r in rows:
            job = r.get("job") or ""
            if glob and not job_allowed(glob, job):
                continue
            if job not in zones:
                zones[job] = self._job_zone(job)
            items.append({**r, **{t: iso_utc(r[t]) if isinstance(r.get(t), (int, float))
                                  else r.get(t) for t in times if t in r},
                          "timezone": zones[job]})
        return _json({"items": items, "next_cursor": encode_cursor({"before": rows[-1][key]})
                      if len(rows) == limit else None})

    async def backfill(self, request: web.Request, body: dict) -> web.Response:
        job = _str(body.get("job"), "job")
        if not job:
            raise UsageError("job is required: the job to backfill")
        self._exists_for(request, job)
        for k in ("from", "to"):
            if body.get(k) is None:
                raise UsageError(f"{k} is required (RFC 3339 time)")
        req = typed.parse(W.Backfill, {
            "job": job, "from": _time_arg(body["from"], "from"),
            "to": _time_arg(body["to"], "to"),
            **{k: body[k] for k in ("reprocess", "order", "note", "parallel")
               if body.get(k) is not None},
            **{k: _bool(body.get(k), k) for k in ("dry_run", "downstream", "force")}})
        res = await self.h.h_backfill(req, self.caller(request))
        return _json(res, status=200 if req.dry_run else 202)

    def backfill_state(self, state: str):
        async def route(request: web.Request, body: dict) -> web.Response:
            bid = _int_id(request, "id")
            if not BF.listing(self.h.conn, bid, 1):
                raise NotFound(f"no backfill with id {bid}; GET /api/v1/backfills lists them")
            return _json(await self.h.h_backfill_state(W.BackfillState(id=bid, state=state),
                                                       self.caller(request)))
        return route

    # -- alerts, dead letter, pools ----------------------------------------------------
    async def alerts(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        limit, before = page_limit(request), self._before(request)
        job = request.query.get("job") or None
        if job:
            self.sees(request, job, "GET /api/v1/alerts")
        rows = AL.alerts(self.h.conn, include_closed=request.query.get("all") == "true",
                         job=job, limit=limit, before=before)
        return self._page(request, rows, "alert_id", limit,
                          ("fire_time", "opened_at", "closed_at", "acked_at"))

    async def alert_ack(self, request: web.Request, body: dict) -> web.Response:
        alert_id = _int_id(request, "id")
        if not any(self.h.conn.execute("SELECT 1 FROM alerts WHERE alert_id=?", (alert_id,))):
            raise NotFound(f"no alert with id {alert_id}; GET /api/v1/alerts?all=true "
                           "lists them")
        return _json(await self.h.h_alert_ack(typed.parse(W.AckAlert, {
            "id": alert_id, "note": _str(body.get("note"), "note")}), self.caller(request)))

    async def dead_letter(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        limit, before = page_limit(request), self._before(request)
        rows = AL.dead_letters(self.h.conn, include_closed=request.query.get("all") == "true",
                               limit=limit, before=before)
        for r in rows:
            run = Q.get_run(self.h.conn, r["run_id"])
            r["run"] = run.view() if run is not None else None
        return self._page(request, rows, "run_id", limit, ("fire_time", "at", "closed_at"))

    def dead_letter_action(self, action: str):
        async def route(request: web.Request, body: dict) -> web.Response:
            run_id = _int_id(request, "run_id")
            if not any(self.h.conn.execute("SELECT 1 FROM dead_letter WHERE run_id=?",
                                           (run_id,))):
                raise NotFound(f"run {run_id} is not in the dead letter; GET "
                               "/api/v1/dead-letter lists what is")
            return _json(await self.h.h_dead_letter_action(typed.parse(W.DeadLetterAction, {
                "run_id": run_id, "action": action, "note": _str(body.get("note"), "note")}),
                self.caller(request)))
        return route

    async def pools(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        view = await self.h.h_pools(W.Pools())
        glob = self.glob(request)
        if glob:   # the runs holding slots: only those of the token's jobs are named
            ids = {rid for p in view["pools"] for rid in p.get("runs") or ()}
            jobs = dict(self.h.conn.execute(
                f"SELECT run_id, job FROM runs WHERE run_id IN ({','.join('?' * len(ids))})",
                sorted(ids))) if ids else {}
            for p in view["pools"]:
                p["runs"] = [rid for rid in p.get("runs") or ()
                             if job_allowed(glob, jobs.get(rid, ""))]
        return _json(view)

    # -- audit, tokens, validate -------------------------------------------------------
    async def audit(self, request: web.Request) -> web.Response:
        await self.consistent(request)
        limit, before = page_limit(request), self._before(request)
        rows = Q.audit(self.h.conn, limit, before, job_glob=self.glob(request))
        return _json({"items": rows, "next_cursor": encode_cursor(
            {"before": rows[-1]["audit_id"]}) if len(rows) == limit else None})

    async def token_create(self, request: web.Request, body: dict) -> web.Response:
        args = {k: body[k] for k in ("name", "role", "jobs", "expires")
                if body.get(k) is not None}
        for k in ("name", "role"):
            if not isinstance(args.get(k), str) or not args[k]:
                raise UsageError(f"{k} is required (a string)")
        req = typed.parse(A.CreateToken, args)
        # through the socket's guard: the caller checked (an admin) and audited
        res = await self.guarded[A.CreateToken.OP](typed.as_args(req), self.caller(request))
        # as GET /api/v1/tokens shows a token: no glob is null, times are RFC 3339
        res = {**res, "jobs": res.get("jobs") or None}
        if isinstance(res.get("expires_at"), (int, float)):
            res["expires_at"] = iso_utc(res["expires_at"])
        return _json(res, status=201)

    async def token_revoke(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if not any(t["name"] == name for t in T.listing(self.h.conn)):
            raise NotFound(f"no token named {name!r}; GET /api/v1/tokens lists them")
        return _json(await self.guarded[A.RevokeToken.OP](
            typed.as_args(A.RevokeToken(name=name)), self.caller(request)))

    async def validate(self, request: web.Request, body: dict) -> web.Response:
        raw = await request.read()
        if len(raw) > MAX_VALIDATE:
            raise UsageError(f"the job file is larger than {MAX_VALIDATE} bytes; split it")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise UsageError("the job file is not UTF-8 text") from None
        name = request.query.get("name") or "job.yaml"
        if "/" in name or not name.endswith((".yaml", ".yml")):
            raise UsageError("name is a file name ending in .yaml (it names the job when "
                             "the file has no name:)")
        res = parse_job_text(text, name, {p.name: p.slots for p in self.h.config.pools})
        return _json({"valid": res.ok, "jobs": [j.name for j in res.jobs],
                      "problems": [{"line": p.line, "col": p.col, "message": p.message,
                                    "text": str(p)} for p in res.problems]})

"""The web UI: server-rendered pages (jinja2 templates in templates,
autoescaped; a small script in static) on every node's HTTP server.

Login: ``GET /login`` shows a form whose input is named ``token``; ``POST
/login`` checks the token and sets the session cookie (http/session.py);
``POST /logout`` clears it. Every page needs a session (else: to /login);
every write is a form POST carrying the session's CSRF token (field
``csrf`` or header X-CSRF-Token), refused with 403 without it.

Writes call the daemon's Handlers (control/handlers.py), as the control socket
does, after this module's own check: the token's role (operator for the
job actions, admin for the audit page) and its ``jobs`` glob. The Handlers
see a token caller (name "token:NAME", uid -1), so each write is audited
with the token's name; a refused one is audited as refused.

Every list pages: jobs by name (``after``), runs and the audit log by id
(``before``), alerts, the dead letter and backfills by id.
"""

from __future__ import annotations

import base64
import datetime
import fnmatch
import functools
import logging
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web

from ...errors import CronrdError, PermissionDenied
from ...jobspec.model import JobSpec
from ...schedule import iso_utc, parse_iso
from ...schedule.calendars import CalendarTrigger
from ...state import activity
from ...state.calendars import job_trigger
from ...state import queries as Q
from ...model import run_states
from ...ops import requests as R
from ...ops import typed
from ...ops import admin as A
from ...ops import workflows as W
from ...state.events import SLA_KINDS
from ...state import commands as C
from ...state.tokens import job_allowed, role_allows, sql_glob, token_hash
from ..control.access import Caller
from .api import MAX_PATTERN, Route, whole_number
from .session import (CSRF_FIELD, CSRF_HEADER, cookie_name, cookie_options, csrf_ok,
                           csrf_token, from_another_site, new_secret, session_cookie,
                           session_ends)

log = logging.getLogger("cronrd.http")

UI_DIR = Path(__file__).parent  # templates/ and static/ beside this file
PAGE = 50          # rows of a list page
LOG_CHUNKS = 8     # log chunks one poll of the live log reads at most
_STATE_CLASS = {"succeeded": "ok", "failed": "bad", "lost": "bad", "timed_out": "bad",
                "cancelled": "warn", "skipped": "muted", "running": "run",
                "assigned": "run", "pending": "muted"}


def token_caller(token: dict) -> Caller:
    """The Handlers' caller for a session's token: its role and job glob
    decide there too (control/access.py), audited as "token:NAME"."""
    return Caller.of_token(token)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(UI_DIR / "templates")),
                             autoescape=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["state_class"] = lambda s: _STATE_CLASS.get(s or "", "muted")
    env.filters["short_time"] = _short_time
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return env


def _short_time(text: str | None) -> str:
    """An ISO time as "2026-12-03 11:12:35Z" (the page shows UTC)."""
    if not text:
        return "-"
    return text.replace("T", " ")



# The pages that show state, and so follow /api/v1/events in the browser.
LIVE_PAGES = frozenset({"overview.html", "jobs.html", "job.html", "runs.html", "run.html",
                        "alerts.html", "nodes.html", "backfills.html", "graph.html",
                        "timeline.html"})

class UiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Session:
    token: dict
    secret: str

    @property
    def csrf(self) -> str:
        return csrf_token(self.secret)

    @property
    def glob(self) -> str:
        return self.token.get("jobs") or ""

    def can(self, role: str) -> bool:
        return role_allows(self.token["role"], role)


def page(role: str = "viewer"):
    """A GET page: a session of at least ``role``; errors as an HTML page."""
    def wrap(fn):
        @functools.wraps(fn)
        async def handler(self: "UiPages", request: web.Request):
            sess = self.session(request)
            if sess is None:
                raise web.HTTPSeeOther("/login?" + urlencode({"next": request.rel_url.raw_path_qs}))
            async def go():
                if not sess.can(role):
                    raise UiError(403, f"this page needs the role {role}; token "
                                       f"{sess.token['name']!r} is {sess.token['role']}")
                self.need_reads()
                return await fn(self, request, sess)
            return await _as_page(self, request, sess, go)
        return handler
    return wrap


async def _as_page(pages: "UiPages", request: web.Request, sess, go):
    """``go()``, with a refusal or bad input shown as the error page."""
    try:
        return await go()
    except UiError as exc:
        return pages.render(request, "error.html", sess, status=exc.status,
                            message=str(exc))
    except CronrdError as exc:
        status = 403 if isinstance(exc, PermissionDenied) else 400
        return pages.render(request, "error.html", sess, status=status, message=str(exc))


def action(role: str = "operator"):
    """A POST from a page: a session, its CSRF token (403 without), a role
    of at least ``role`` (403, audited as refused)."""
    def wrap(fn):
        @functools.wraps(fn)
        async def handler(self: "UiPages", request: web.Request):
            sess = self.session(request)
            if sess is None:
                return self.render(request, "error.html", None, status=401,
                                   message="log in first: your session has ended")
            form = await request.post()
            presented = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
            if not csrf_ok(sess.secret, presented if isinstance(presented, str) else None):
                return self.render(request, "error.html", sess, status=403,
                                   message="this form has no valid CSRF token: reload the "
                                           "page and try again")
            async def go():
                self.need_reads()
                if not sess.can(role):
                    what = fn.__name__.removeprefix("act_")
                    await self.refuse(sess, what, request.match_info.get("name", ""),
                                      f"needs the role {role}")
                    raise UiError(403, f"token {sess.token['name']!r} has the role "
                                       f"{sess.token['role']}; this needs {role} or higher")
                return await fn(self, request, sess, form)
            return await _as_page(self, request, sess, go)
        return handler
    return wrap


class UiPages:
    def __init__(self, server):
        self.server = server  # the HttpServer: find_token, now, reads, config
        self.env = _env()

    @property
    def reads(self):
        return self.server.reads

    def install(self, app: web.Application) -> list[Route]:
        """Add the pages to ``app``; their Routes, for the OpenAPI document
        (role None there: the pages check the session cookie themselves)."""
        html = {"200": {"description": "an HTML page", "content": {"text/html": {}}}}
        post = {"303": {"description": "done: to the next page"},
                "403": {"description": "no CSRF token, or the role is too low"}}
        table = [
            ("GET", "/", "Overview page.", self.overview),
            ("GET", "/login", "The login form (input `token`).", self.login_form),
            ("POST", "/login", "Log in: sets the session cookie.", self.login),
            ("POST", "/logout", "Log out: clears the session cookie.", self.logout),
            ("GET", "/jobs", "Jobs page (q, state, user, after).", self.jobs),
            ("GET", "/jobs/{name}", "Job page.", self.job),
            ("POST", "/jobs/{name}/run", "Run now (operator).", self.act_run),
            ("POST", "/jobs/{name}/pause", "Pause with a note (operator).", self.act_pause),
            ("POST", "/jobs/{name}/resume", "Resume (operator).", self.act_resume),
            ("POST", "/jobs/{name}/backfill", "Backfill, or its dry run (operator).",
             self.act_backfill),
            ("POST", "/jobs/{name}/rerun", "Rerun a fire time (operator).", self.act_rerun),
            ("GET", "/runs", "Runs page (job, state, node, before).", self.runs),
            ("GET", "/runs/{id}", "Run page with its live log.", self.run),
            ("GET", "/runs/{id}/log", "The live log's poll (offset): JSON.", self.run_log),
            ("POST", "/runs/{id}/cancel", "Cancel the run (operator).", self.act_cancel),
            ("GET", "/graph", "Dependency graph page (job).", self.graph),
            ("GET", "/timeline", "Timeline of runs across nodes (span, or start and end).",
             self.timeline),
            ("GET", "/backfills", "Backfills page (before).", self.backfills),
            ("POST", "/backfills/{id}/{state}", "Pause, resume or cancel a backfill "
             "(operator).", self.act_backfill_state),
            ("GET", "/alerts", "Alerts and dead letter page.", self.alerts),
            ("POST", "/alerts/{id}/ack", "Acknowledge an alert (operator).", self.act_ack),
            ("POST", "/dead-letter/{id}/{what}", "Requeue or discard (operator).",
             self.act_dead_letter),
            ("GET", "/nodes", "Nodes page.", self.nodes),
            ("GET", "/audit", "Audit page (admin).", self.audit),
        ]
        out = []
        for method, path, summary, handler in table:
            app.router.add_route(method, path, handler)
            out.append(Route(method, path, summary, None,
                             responses=dict(html if method == "GET" else post)))
        app.router.add_static("/ui/static", str(UI_DIR / "static"))
        out.append(Route("GET", "/ui/static", "The UI's stylesheet and script.", None))
        return out

    # -- sessions ---------------------------------------------------------------------
    def session(self, request: web.Request) -> Session | None:
        secret = session_cookie(request.cookies, self.tls)
        if secret is None:
            return None
        token = self.server.find_session(secret, self.server.now())
        if token is None or (token.get("expires_at") is not None
                             and token["expires_at"] <= self.server.now()):
            return None
        return Session(token, secret)

    @property
    def tls(self) -> bool:
        return self.server.config.tls is not None

    def need_reads(self) -> None:
        if self.reads is None:
            raise UiError(503, "this server has no daemon state to show")

    def render(self, request: web.Request, template: str, sess: Session | None, *,
               status: int = 200, **ctx) -> web.Response:
        tpl = self.env.get_template(template)
        # Pages that show state follow the event stream (ui.js): a page of one
        # job (or of one of its runs) only that job's events.
        ctx["live"] = template in LIVE_PAGES and sess is not None and ctx.pop("follow", True)
        ctx["live_job"] = (ctx["job"].get("name") if template == "job.html"
                           and isinstance(ctx.get("job"), dict) else
                           ctx["run"].get("job") if template == "run.html"
                           and isinstance(ctx.get("run"), dict) else None)
        ctx.setdefault("title", {"login.html": "Log in", "error.html": "Error"}.get(
            template, "cronrd"))
        html = tpl.render(sess=sess, path=request.path, csrf=sess.csrf if sess else "",
                          can_act=bool(sess and sess.can("operator")),
                          is_admin=bool(sess and sess.can("admin")), **ctx)
        resp = web.Response(text=html, status=status, content_type="text/html")
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Content-Security-Policy"] = (
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'; form-action 'self'")
        return resp

    def check_job(self, sess: Session, job: str) -> None:
        if not job_allowed(sess.glob, job):
            raise UiError(403, f"token {sess.token['name']!r} may see and act on only the "
                               f"jobs matching {sess.glob!r}")

    async def refuse(self, sess: Session, command: str, target: str, why: str) -> None:
        """Audit a refused write (the Handlers' record of refusals)."""
        try:
            await self.reads._audit(token_caller(sess.token), command, target, False,
                                    f"refused: {why}")
        except Exception:  # the refusal is answered whatever the audit does
            log.exception("event=ui_refusal_audit_failed")

    async def members(self, st: dict) -> dict:
        """The cluster's members; a node without a cluster: itself alone."""
        try:
            return await self.reads.h_cluster_members(A.ClusterMembers())
        except CronrdError:
            me = st["node_id"]
            return {"leader": st.get("leader") or me, "members": [{
                "id": me, "address": None, "role": "voter", "reachable": True,
                "last_contact": None, "leader": True, "self": True, "state": "up",
                "tags": [], "clock_offset_ms": None}]}

    # -- login ----------------------------------------------------------------------------
    async def login_form(self, request: web.Request) -> web.Response:
        return self.render(request, "login.html", None, next=_safe_next(
            request.query.get("next")), message="")

    async def login(self, request: web.Request) -> web.Response:
        if from_another_site(request.headers, request.scheme, request.host):
            return self.render(request, "login.html", None, status=403, next="/",
                               message="a login from another site is refused")
        form = await request.post()
        secret = str(form.get("token", "")).strip()
        nxt = _safe_next(str(form.get("next", "")))
        token = self.server.find_token(secret) if secret else None
        if token is None or (token.get("expires_at") is not None
                             and token["expires_at"] <= self.server.now()):
            # audited (never the secret), as the refusals are: the first few a
            # minute, then counted (handlers._audit)
            await self._audit_login(Caller(uid=-1, gid=-1, pid=0,
                                           name=f"http:{request.remote or '?'}"),
                                    "", False, "unknown, revoked or expired token")
            return self.render(request, "login.html", None, status=401, next=nxt,
                               message="unknown, revoked or expired token; `cronrd token "
                                       "create --name NAME --role viewer` (as root) makes one")
        if self.reads is None:
            return self.render(request, "login.html", None, status=503, next=nxt,
                               message="this server has no daemon state to keep sessions in")
        # A session of its own: the cookie never holds the token (other
        # services on this host name see cookies too), and it ends at logout,
        # with its token, or SESSION_TTL from now (http/session.py).
        now = self.server.now()
        session = new_secret()
        ends = session_ends(token, now)
        try:
            await self.reads.log.propose(C.StartSession(
                node=self.reads.config.node_id, name=token["name"],
                token_hash=token_hash(secret), session_hash=token_hash(session),
                expires_at=ends, at=now))
        except CronrdError as exc:
            log.warning("event=ui_login_failed token=%s error=\"%s\"", token["name"], exc)
            return self.render(request, "login.html", None, status=503, next=nxt,
                               message=f"could not start a session: {exc}")
        resp = _redirect(nxt)
        resp.set_cookie(cookie_name(self.tls), session,
                        **cookie_options(self.tls, max_age=ends - now))
        log.info("event=ui_login token=%s role=%s", token["name"], token["role"])
        await self._audit_login(token_caller(token), token["name"], True,
                                f"from {request.remote or '?'}")
        return resp

    async def _audit_login(self, caller: Caller, target: str, allowed: bool,
                           detail: str) -> None:
        if self.reads is None:
            return
        try:
            await self.reads._audit(caller, "login", target, allowed, detail)
        except Exception:  # a login is answered whatever the audit does
            log.exception("event=ui_login_audit_failed")

    async def logout(self, request: web.Request) -> web.Response:
        """End the session on every node (EndSession), then clear the cookie."""
        sess = self.session(request)
        form = await request.post()
        if sess is not None and not csrf_ok(sess.secret, str(form.get(CSRF_FIELD, ""))):
            return self.render(request, "error.html", sess, status=403,
                               message="this form has no valid CSRF token: reload the page")
        if sess is not None and self.reads is not None:
            try:
                await self.reads.log.propose(C.EndSession(
                    node=self.reads.config.node_id, session_hash=token_hash(sess.secret),
                    at=self.server.now()))
            except CronrdError as exc:
                log.warning("event=ui_logout_failed token=%s error=\"%s\"",
                            sess.token["name"], exc)
                return self.render(request, "error.html", sess, status=503,
                                   message=f"could not end the session: {exc}; try again")
            log.info("event=ui_logout token=%s", sess.token["name"])
        resp = _redirect("/login")
        resp.del_cookie(cookie_name(self.tls), path="/")
        return resp

    # -- pages ----------------------------------------------------------------------------
    @page()
    async def overview(self, request, sess):
        st = await self.reads.h_status(A.Status())
        members = await self.members(st)
        now = self.reads.clock.now()
        running = (await self.reads.h_runs(R.ListRuns(state=["running"], limit=PAGE)))["runs"]
        failed = (await self.reads.h_runs(R.ListRuns(
            state=["failed", "lost", "timed_out"], limit=100, since=now - 86400)))["runs"]
        running = [r for r in running if job_allowed(sess.glob, r["job"])]
        failed = [r for r in failed if job_allowed(sess.glob, r["job"])
                  and not self._retried(r["run_id"])]
        alerts = [a for a in (await self.reads.h_alerts(W.ListAlerts(limit=100)))["alerts"]
                  if job_allowed(sess.glob, a["job"])]
        late = [a for a in alerts if a.get("kind") in SLA_KINDS]
        dead = [d for d in (await self.reads.h_dead_letter(W.ListDeadLetter(limit=100)))["dead_letter"]
                if job_allowed(sess.glob, d["job"])]
        upcoming, partial = await self.next_fires(sess)
        span = request.query.get("span", "1h")
        if span not in activity.SPANS:
            raise UiError(400, f"span {span!r}: pick one of {', '.join(activity.SPANS)}")
        pictures = activity.fleet_activity(self.reads.conn, now, span, self._allowed(sess))
        return self.render(request, "overview.html", sess, st=st, members=members["members"],
                           leader=members["leader"], running=running, failed=failed,
                           failed_more=len(failed) >= 100, alerts=alerts, late=late,
                           dead=dead, upcoming=upcoming, upcoming_partial=partial,
                           activity=pictures, spans=list(activity.SPANS), title="Overview")

    @staticmethod
    def _allowed(sess: Session):
        """The filter of jobs a session's token may see (None: all)."""
        return None if not sess.glob else functools.partial(job_allowed, sess.glob)

    @page()
    async def timeline(self, request, sess):
        now = self.reads.clock.now()
        q = request.query
        if q.get("start") or q.get("end"):
            end = _time(q["end"], "end") if q.get("end") else now
            start = _time(q["start"], "start") if q.get("start") else end - 3600
        else:
            span = q.get("span", "1h")
            if span not in TIMELINE_SPANS:
                raise UiError(400, f"span {span!r}: pick one of {', '.join(TIMELINE_SPANS)}, "
                                   "or give start and end")
            start, end = now - TIMELINE_SPANS[span], now
        if not end > start:
            raise UiError(400, f"the window starts ({iso_utc(start)}) after it ends "
                               f"({iso_utc(end)}): give start before end")
        if end - start > 7 * 86400:
            raise UiError(400, "a timeline shows at most 7 days: give a shorter window")
        t = activity.timeline(self.reads.conn, start, end, now, self._allowed(sess))
        width = end - start
        mid = (start + end) / 2

        def at(a: float, b: float) -> str:
            return "/timeline?" + urlencode({"start": iso_utc(int(a)),
                                             "end": iso_utc(int(min(b, now + 60)))})
        links = {"in": at(mid - width / 4, mid + width / 4) if width >= 4 else None,
                 "out": at(mid - width, mid + width) if width < 3.5 * 86400 else None,
                 "earlier": at(start - width / 2, end - width / 2),
                 "later": at(start + width / 2, end + width / 2) if end < now else None}
        past = end < now - 60   # a window that ended does not change: not followed live
        return self.render(request, "timeline.html", sess, t=t, svg=layout_timeline(t),
                           links=links, spans=list(TIMELINE_SPANS), title="Timeline",
                           start=iso_utc(int(start)), end=iso_utc(int(end)), past=past,
                           follow=not past)

    def _retried(self, run_id: int) -> bool:
        """Has this attempt a later one (a retry)? The overview counts the
        fire times that failed for good, not attempts a retry made good."""
        run = Q.get_run(self.reads.conn, run_id)
        return run is not None and Q.next_attempt(self.reads.conn, run) is not None

    async def next_fires(self, sess: Session, count: int = 10) -> tuple[list[dict], bool]:
        """The next ``count`` fire times of all jobs, from the leader's
        scheduler; elsewhere those of the first jobs by name (True: partial)."""
        sched = getattr(getattr(self.reads, "leadership", None), "scheduler", None)
        if sched is not None:
            soon = sched.soonest(count, lambda n: job_allowed(sess.glob, n))
            return [{"name": n, "next_fire": iso_utc(t)} for t, n in soon], False
        jobs = await self.reads.h_jobs(R.ListJobs(limit=200, match=sql_glob(sess.glob)))
        return sorted((j for j in jobs["jobs"] if j["next_fire"] and
                       job_allowed(sess.glob, j["name"])),
                      key=lambda j: j["next_fire"])[:count], jobs["next"] is not None

    @page()
    async def jobs(self, request, sess):
        q = request.query.get("q", "").strip()
        if len(q) > MAX_PATTERN:
            raise UiError(400, f"search for at most {MAX_PATTERN} characters")
        state = request.query.get("state", "")
        user = request.query.get("user", "").strip()
        after = request.query.get("after") or None
        match = q if any(c in q for c in "*?[") else (f"*{q}*" if q else None)
        # (checked here: a search of MAX_PATTERN characters is matched as *q*)
        res = await self.reads.h_jobs(R.ListJobs(
            limit=PAGE, after=after, match=sql_glob(sess.glob) if sess.glob else match))
        items = res["jobs"]
        if sess.glob:
            items = [j for j in items if job_allowed(sess.glob, j["name"]) and
                     (not match or fnmatch.fnmatchcase(j["name"], match))]
        for j in items:
            spec = Q.job_spec(self.reads.conn, j["name"])
            j["user"] = (spec.user if spec is not None else None) or "root"
            j["state"] = ("paused" if j["paused"] else "disabled" if not j["enabled"]
                          else "failing" if j["last_run"] and j["last_run"]["state"] in
                          ("failed", "lost", "timed_out") else "active")
        if state:
            items = [j for j in items if j["state"] == state]
        if user:
            items = [j for j in items if j["user"] == user]
        nxt = None
        if res["next"]:
            nxt = "/jobs?" + urlencode({k: v for k, v in (("q", q), ("state", state),
                                                            ("user", user),
                                                            ("after", res["next"])) if v})
        return self.render(request, "jobs.html", sess, jobs=items, q=q, state=state,
                           user=user, next_url=nxt, first=after is not None, title="Jobs")

    @page()
    async def job(self, request, sess):
        name = request.match_info["name"]
        self.check_job(sess, name)
        job = await self.reads.h_job(R.ShowJob(name=name, next=10))
        before = _int(request.query.get("before"))
        runs = (await self.reads.h_runs(R.ListRuns(job=name, limit=200, before=before)))["runs"]
        grid: dict[str, dict[int, dict]] = {}
        for r in runs:
            grid.setdefault(r["fire_time"], {})[r["attempt"]] = r
        attempts = max((r["attempt"] for r in runs), default=1)
        older = f"/jobs/{quote(name, safe='')}?before={runs[-1]['run_id']}" \
            if len(runs) == 200 else None
        at = request.query.get("explain_at", "").strip()
        try:
            explained = await self.reads.h_explain(A.Explain(job=name, at=at or None))
            explain_error = None
        except CronrdError as exc:
            explained, explain_error = None, str(exc)
        spec_text = _yaml(job["spec"])
        chart = job_chart(runs)
        tz = job.get("timezone") or "UTC"
        today = datetime.datetime.fromtimestamp(self.reads.clock.now(),
                                                zoneinfo.ZoneInfo(tz)).date()
        calendar = layout_calendar(
            activity.job_calendar(self.reads.conn, name, tz, today)
            + upcoming_days(self.reads.conn, job["spec"], tz, today, self.reads.clock.now()))
        preview = None
        return self.render(request, "job.html", sess, job=job, grid=grid,
                           attempts=list(range(1, attempts + 1)), older=older,
                           explained=explained, explain_error=explain_error, explain_at=at,
                           spec_text=spec_text, preview=preview, title=name, chart=chart,
                           calendar=calendar, tz=tz,
                           params=job["spec"].get("params") or {})

    @page()
    async def runs(self, request, sess):
        args = {k: request.query[k] for k in ("job", "state", "node")
                if request.query.get(k)}
        if "job" in args:
            self.check_job(sess, args["job"])
        before = _int(request.query.get("before"))
        res = await self.reads.h_runs(typed.parse(R.ListRuns, {**args, "limit": PAGE,
                                                               "before": before}))
        runs = res["runs"]
        items = [r for r in runs if job_allowed(sess.glob, r["job"])]
        nxt = "/runs?" + urlencode({**args, "before": runs[-1]["run_id"]}) \
            if len(runs) == PAGE else None
        return self.render(request, "runs.html", sess, runs=items, f=args, next_url=nxt,
                           title="Runs", states=run_states.ALL)

    @page()
    async def run(self, request, sess):
        run_id = _id(request)
        run = await self.reads.h_run(R.ShowRun(run_id=run_id))
        self.check_job(sess, run["job"])
        attempts = (await self.reads.h_runs(R.ListRuns(job=run["job"], limit=100)))["runs"]
        attempts = sorted((r for r in attempts if r["fire_time"] == run["fire_time"]),
                          key=lambda r: r["attempt"])
        return self.render(request, "run.html", sess, run=run, attempts=attempts,
                           active=run["state"] in run_states.ACTIVE,
                           title=f"Run {run_id}")

    async def run_log(self, request: web.Request) -> web.Response:
        """The live log's poll: text from ``offset`` on, the next offset, and
        the run's state (JSON)."""
        sess = self.session(request)
        if sess is None:
            return web.json_response({"error": "log in first"}, status=401)
        self.need_reads()
        run_id = _id(request)
        run = Q.get_run(self.reads.conn, run_id)
        if run is None:
            return web.json_response({"error": f"no run {run_id}"}, status=404)
        if not job_allowed(sess.glob, run.job):
            return web.json_response({"error": "not this token's job"}, status=403)
        offset = _int(request.query.get("offset")) or 0
        data, error = b"", None
        me = self.reads.config.node_id
        if run.started_at is not None or run.log_path:
            try:
                for _ in range(LOG_CHUNKS):
                    if run.node in (None, me):
                        chunk = self.reads.read_log_chunk(run_id, offset)
                    else:
                        chunk = await self.reads.members.call(run.node, "read_log", {
                            "run_id": run_id, "offset": offset})
                    data += base64.b64decode(chunk["data"])
                    offset = chunk["offset"]
                    if not chunk["more"]:
                        break
            except CronrdError as exc:
                error = str(exc)
        return web.json_response({
            "text": data.decode("utf-8", "replace"), "offset": offset, "error": error,
            "state": run.state.value, "active": run.state in run_states.ACTIVE,
            "exit_code": run.exit_code}, headers={"Cache-Control": "no-store"})

    @page()
    async def graph(self, request, sess):
        job = request.query.get("job") or None
        if job:
            self.check_job(sess, job)
        g = await self.reads.h_graph(R.Graph(job=job))
        jobs = [j for j in g["jobs"] if job_allowed(sess.glob, j["name"])]
        names = {j["name"] for j in jobs}
        edges = [e for e in g["edges"] if e[0] in names and e[1] in names]
        svg = layout_graph(jobs, edges)
        return self.render(request, "graph.html", sess, g=g, jobs=jobs, edges=edges,
                           svg=svg, job=job or "", title="Graph")

    @page()
    async def backfills(self, request, sess):
        before = _int(request.query.get("before"))
        ids = [i for (i,) in self.reads.conn.execute(
            "SELECT id FROM backfills WHERE id < ? ORDER BY id DESC LIMIT ?",
            (before if before is not None else 2 ** 62, PAGE))]
        rows = []
        for i in ids:
            rows += (await self.reads.h_backfills(W.ListBackfills(id=i)))["backfills"]
        rows = [b for b in rows if job_allowed(sess.glob, b["job"])]
        for b in rows:
            b["from"], b["to"] = iso_utc(b["from"]), iso_utc(b["to"])
        nxt = f"/backfills?before={ids[-1]}" if len(ids) == PAGE else None
        return self.render(request, "backfills.html", sess, backfills=rows, next_url=nxt,
                           title="Backfills")

    @page()
    async def alerts(self, request, sess):
        show_all = request.query.get("all") == "1"
        before = _int(request.query.get("before"))
        a_rows = _keyset(self.reads.conn, "alerts", "alert_id", before, show_all)
        alerts = [a for a in a_rows if job_allowed(sess.glob, a["job"])]
        dbefore = _int(request.query.get("dl_before"))
        d_rows = _keyset(self.reads.conn, "dead_letter", "run_id", dbefore, show_all)
        dead = [d for d in d_rows if job_allowed(sess.glob, d["job"])]
        for r in alerts + dead:
            r["fire_time"] = iso_utc(r["fire_time"])
        extra = {"all": "1"} if show_all else {}
        return self.render(
            request, "alerts.html", sess, alerts=alerts, dead=dead, show_all=show_all,
            next_url="/alerts?" + urlencode({**extra, "before": a_rows[-1]["alert_id"]})
            if len(a_rows) == PAGE else None,
            dl_next_url="/alerts?" + urlencode({**extra, "dl_before": d_rows[-1]["run_id"]})
            if len(d_rows) == PAGE else None, title="Alerts")

    @page()
    async def nodes(self, request, sess):
        members = await self.members(await self.reads.h_status(A.Status()))
        drain = ("POST", "/api/v1/nodes/{node}/drain") in self.server.roles
        return self.render(request, "nodes.html", sess, members=members["members"],
                           workers=members.get("workers") or [],
                           leader=members["leader"], drain=drain, title="Nodes")

    @page(role="admin")
    async def audit(self, request, sess):
        before = _int(request.query.get("before"))
        # (a token limited to some jobs reads only their records)
        recs = Q.audit(self.reads.conn, PAGE, before, job_glob=sess.glob)
        nxt = f"/audit?before={recs[-1]['audit_id']}" if len(recs) == PAGE else None
        return self.render(request, "audit.html", sess, records=recs, next_url=nxt,
                           title="Audit")

    # -- actions (operator) -------------------------------------------------------------
    def _job_target(self, request, sess) -> str:
        """The job an action names. Whether the session's token may act on it
        is the handler's to say (refused outside its glob, 403, and audited
        as the API's refusals are; before, the UI refused on its own and no
        record was left)."""
        return request.match_info["name"]

    @action()
    async def act_run(self, request, sess, form):
        name = self._job_target(request, sess)
        params = {}
        for line in str(form.get("params", "")).splitlines():
            if line.strip():
                key, eq, value = line.partition("=")
                if not eq:
                    raise UiError(400, f"parameter line {line!r} is not NAME=VALUE")
                params[key.strip()] = value.strip()
        res = await self.reads.h_run_now(R.RunNow(job=name, params=params),
                                         token_caller(sess.token))
        raise web.HTTPSeeOther(f"/runs/{res['run_id']}")

    @action()
    async def act_pause(self, request, sess, form):
        name = self._job_target(request, sess)
        await self.reads.h_pause(typed.parse(R.PauseJob, {"job": name,
                                                          "note": str(form.get("note", ""))}),
                                 token_caller(sess.token))
        raise web.HTTPSeeOther(f"/jobs/{quote(name, safe='')}")

    @action()
    async def act_resume(self, request, sess, form):
        name = self._job_target(request, sess)
        await self.reads.h_resume(R.ResumeJob(job=name), token_caller(sess.token))
        raise web.HTTPSeeOther(f"/jobs/{quote(name, safe='')}")

    @action()
    async def act_backfill(self, request, sess, form):
        name = self._job_target(request, sess)
        req = typed.parse(W.Backfill, {"job": name, "from": _time(form.get("from"), "from"),
                                       "to": _time(form.get("to"), "to"),
                                       "reprocess": str(form.get("reprocess") or "missing"),
                                       "note": str(form.get("note", "")),
                                       "dry_run": form.get("go") != "start"})
        res = await self.reads.h_backfill(req, token_caller(sess.token))
        if req.dry_run:
            return self.render(request, "backfill_preview.html", sess, job=name, res=res,
                               form=dict(form), title=f"Backfill {name}")
        raise web.HTTPSeeOther("/backfills")

    @action()
    async def act_rerun(self, request, sess, form):
        name = self._job_target(request, sess)
        res = await self.reads.h_rerun(typed.parse(W.Rerun, {
            "job": name, "at": _time(form.get("at"), "at"),
            "downstream": form.get("downstream") == "on"}), token_caller(sess.token))
        run_id = res.get("run_id")
        raise web.HTTPSeeOther(f"/runs/{run_id}" if run_id else
                               f"/jobs/{quote(name, safe='')}")

    @action()
    async def act_cancel(self, request, sess, form):
        run_id = _id(request)
        run = Q.get_run(self.reads.conn, run_id)
        if run is not None:
            self.check_job(sess, run.job)
        await self.reads.h_cancel(R.CancelRun(run_id=run_id), token_caller(sess.token))
        raise web.HTTPSeeOther(f"/runs/{run_id}")

    @action()
    async def act_backfill_state(self, request, sess, form):
        bid = _id(request)
        for (job,) in self.reads.conn.execute("SELECT job FROM backfills WHERE id=?", (bid,)):
            self.check_job(sess, job)
        await self.reads.h_backfill_state(typed.parse(W.BackfillState, {
            "id": bid, "state": request.match_info["state"]}), token_caller(sess.token))
        raise web.HTTPSeeOther("/backfills")

    @action()
    async def act_ack(self, request, sess, form):
        aid = _id(request)
        for (job,) in self.reads.conn.execute("SELECT job FROM alerts WHERE alert_id=?",
                                              (aid,)):
            self.check_job(sess, job)
        await self.reads.h_alert_ack(typed.parse(W.AckAlert, {
            "id": aid, "note": str(form.get("note", ""))}), token_caller(sess.token))
        raise web.HTTPSeeOther("/alerts")

    @action()
    async def act_dead_letter(self, request, sess, form):
        run_id = _id(request)
        for (job,) in self.reads.conn.execute("SELECT job FROM dead_letter WHERE run_id=?",
                                              (run_id,)):
            self.check_job(sess, job)
        await self.reads.h_dead_letter_action(typed.parse(W.DeadLetterAction, {
            "run_id": run_id, "action": request.match_info["what"],
            "note": str(form.get("note", ""))}), token_caller(sess.token))
        raise web.HTTPSeeOther("/alerts")


# -- helpers ------------------------------------------------------------------------------
def _redirect(url: str) -> web.Response:
    return web.Response(status=303, headers={"Location": url})


def _safe_next(text: str | None) -> str:
    """A local path to go to after login (never another site; a browser
    drops tabs and newlines from a URL, so "/<TAB>/x" would be "//x")."""
    if not text or not text.startswith("/") or text.startswith("//") or "\\" in text \
            or any(c <= " " or c == "\x7f" for c in text):
        return "/"
    return text


def _int(text: str | None) -> int | None:
    return int(text) if whole_number(text) else None


def _id(request: web.Request, key: str = "id") -> int:
    """A numeric path part (404 otherwise)."""
    value = _int(request.match_info[key])
    if value is None:
        raise web.HTTPNotFound(text=f"{key} must be a number")
    return value


def _time(value, what: str) -> int:
    """A form's time (ISO 8601, or a datetime-local value, UTC) as epoch seconds."""
    text = str(value or "").strip()
    if not text:
        raise UiError(400, f"give the {what} time (UTC), e.g. 2026-03-29T01:00")
    try:
        return parse_iso(text)
    except CronrdError as exc:
        raise UiError(400, str(exc)) from None


def _keyset(conn, table: str, key: str, before: int | None, show_all: bool) -> list[dict]:
    """A page of alerts or dead letters, newest first, below ``before``."""
    where = [f"{key} < ?"] + ([] if show_all else ["state='open'"])
    cols = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    return [dict(zip(cols, row)) for row in conn.execute(
        f"SELECT {', '.join(cols)} FROM {table} WHERE {' AND '.join(where)} "
        f"ORDER BY {key} DESC LIMIT ?", (before if before is not None else 2 ** 62, PAGE))]


def _yaml(spec: dict) -> str:
    import yaml
    clean = {k: v for k, v in spec.items() if v not in (None, [], {}, "")}
    return yaml.safe_dump(clean, sort_keys=False, default_flow_style=False)


# The outcomes the job page's charts colour apart (the rest: "other").
CHART_OUTCOMES = ("succeeded", "failed")


def job_chart(runs: list[dict]) -> dict:
    """A job page's chart data, from its runs (views, any order): per fire
    time that has a run that started, oldest first, the duration of its
    last attempt that ran, the start lateness of its first (started at
    minus fire time), and its outcome (the last attempt's state), as
    uPlot's columns: x (Unix seconds) and one series per outcome, null
    where the fire time had another."""
    by_fire: dict[str, list[dict]] = {}
    for r in runs:
        if r.get("started_at"):
            by_fire.setdefault(r["fire_time"], []).append(r)
    def at(iso: str) -> float:   # with its milliseconds (parse_iso keeps whole seconds)
        return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    xs, dur, late, outcome = [], [], [], []
    for fire in sorted(by_fire, key=at):
        tries = sorted(by_fire[fire], key=lambda r: r["attempt"])
        first, last = tries[0], tries[-1]
        start, fire_at = at(last["started_at"]), at(fire)
        end = at(last["finished_at"]) if last.get("finished_at") else None
        xs.append(fire_at)
        dur.append(None if end is None else round(end - start, 3))
        late.append(round(at(first["started_at"]) - fire_at, 3))
        outcome.append(last["state"] if last["state"] in CHART_OUTCOMES else "other")
    series = {}
    for name, values in (("duration", dur), ("lateness", late)):
        series[name] = {o: [v if oc == o else None for v, oc in zip(values, outcome)]
                        for o in (*CHART_OUTCOMES, "other")}
    return {"x": xs, "series": series}


def layout_graph(jobs: list[dict], edges: list) -> dict:
    """Boxes and arrows of the dependency graph: each job in the column of its
    longest path from a root, rows in name order (no drawing library). A box
    names the job, its schedule and its latest run's state. An arrow runs
    only through the gaps between columns and between rows, so it never
    passes under a box: out of its parent into the gap after the parent's
    column, along the gap above the child's row (when it has columns to
    cross, or goes back), down the gap before the child's column, into it."""
    parents: dict[str, list[str]] = {}
    for p, c in edges:
        parents.setdefault(c, []).append(p)
    depth: dict[str, int] = {}

    def d(name: str, seen: frozenset = frozenset()) -> int:
        if name in depth:
            return depth[name]
        if name in seen:  # a cycle: cut it
            return 0
        depth[name] = v = 1 + max((d(p, seen | {name}) for p in parents.get(name, [])),
                                  default=-1)
        return v
    cols: dict[int, list[str]] = {}
    for j in sorted(jobs, key=lambda j: j["name"]):
        cols.setdefault(d(j["name"]), []).append(j["name"])
    W, H, BW, BH = 210, 70, 170, 46
    col_of = {n: c for c, names in cols.items() for n in names}
    pos = {n: (20 + c * W, 20 + i * H) for c, names in cols.items()
           for i, n in enumerate(names)}
    by_name = {j["name"]: j for j in jobs}
    boxes = []
    for n, (x, y) in pos.items():
        j = by_name.get(n, {})
        state = (j.get("last_run") or {}).get("state")
        detail = "no such job" if j.get("missing") else \
            f"{j.get('schedule') or ''} · {state or 'never ran'}"
        boxes.append({"name": n, "x": x, "y": y, "w": BW, "h": BH, "state": state,
                      "missing": bool(j.get("missing")), "detail": detail})
    gap_x, gap_y = (W - BW) / 2, (H - BH) / 2
    paths = []
    for p, c in edges:
        if p not in pos or c not in pos:
            continue
        (px, py), (cx, cy) = pos[p], pos[c]
        start, end = (px + BW, py + BH / 2), (cx, cy + BH / 2)
        out_x, in_x = px + BW + gap_x, cx - gap_x      # the gaps beside the two columns
        if col_of[c] == col_of[p] + 1:               # neighbours: one bend in their gap
            points = [start, (out_x, start[1]), (out_x, end[1]), end]
        else:                                        # across columns, or back: a row gap
            lane = cy - gap_y
            points = [start, (out_x, start[1]), (out_x, lane), (in_x, lane), (in_x, end[1]),
                      end]
        paths.append({"d": "M " + " L ".join(f"{x:g} {y:g}" for x, y in points),
                      "points": points, "from": p, "to": c})
    width = max((x for x, _ in pos.values()), default=0) + BW + 40
    height = max((y for _, y in pos.values()), default=0) + BH + 40
    return {"boxes": boxes, "paths": paths, "width": width, "height": height}


# The timeline's time ticks: the first step giving at most 10 ticks.
_TICKS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600,
          12 * 3600, 86400, 7 * 86400)
TIMELINE_SPANS = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "1d": 86400}


def layout_timeline(t: dict, width: int = 1000) -> dict:
    """Bars of the timeline (state/activity.timeline) as an SVG's geometry:
    a row per node, split in lanes so that runs overlapping in time on one
    node never draw over each other (each bar in the first lane free at its
    start; at most 6 lanes, the rest share the last); x from the window's
    start to its end over ``width`` pixels right of the names; a tick per
    round step of time."""
    LABEL, LANE, GAP, MAX_LANES = 130, 16, 10, 6
    start, end = t["start"], t["end"]
    scale = width / max(end - start, 1e-9)
    rows, y = [], 24
    bars_of: dict[str, list[dict]] = {}
    for b in t["bars"]:
        bars_of.setdefault(b["node"], []).append(b)
    out_bars = []
    for node in t["nodes"]:
        lane_end: list[float] = []
        for b in bars_of.get(node, []):     # by start (activity.timeline's order)
            lane = next((i for i, e in enumerate(lane_end) if e <= b["start"]), None)
            if lane is None:
                lane = min(len(lane_end), MAX_LANES - 1)
                if lane == len(lane_end):
                    lane_end.append(b["end"])
            lane_end[lane] = max(lane_end[lane], b["end"])
            x0 = LABEL + max(0.0, b["start"] - start) * scale
            x1 = LABEL + min(end - start, b["end"] - start) * scale
            out_bars.append({**b, "x": round(x0, 1), "w": round(max(x1 - x0, 1.5), 1),
                             "y": y + lane * LANE, "h": LANE - 3,
                             "title": f"{b['job']} · run {b['run_id']} · {b['state']} · "
                                      f"{iso_utc(b['start'])} → "
                                      f"{'running' if b['running'] else iso_utc(b['end'])}"})
        lanes = max(len(lane_end), 1)
        rows.append({"node": node, "y": y, "h": lanes * LANE})
        y += lanes * LANE + GAP
    step = next((s for s in _TICKS if (end - start) / s <= 10), _TICKS[-1])
    ticks = []
    tick = (int(start) // step + 1) * step
    while tick < end:
        label = (iso_utc(tick)[11:19] if step < 60 else iso_utc(tick)[11:16]
                 if step < 86400 else iso_utc(tick)[:10])
        ticks.append({"x": round(LABEL + (tick - start) * scale, 1), "label": label})
        tick += step
    return {"rows": rows, "bars": out_bars, "ticks": ticks, "width": LABEL + width + 10,
            "height": max(y + 4, 40), "left": LABEL, "plot": width}


UPCOMING_DAYS = 28      # days after today the job page's calendar shows ahead
MAX_UPCOMING = 5000     # fire times it counts there


def upcoming_days(conn, spec: dict, tz: str, today: datetime.date,
                  now: float) -> list[dict]:
    """The next UPCOMING_DAYS days after ``today`` for the job page's
    calendar: its fire times by day (``planned``, or ``skipped`` where its
    calendar skips them), and the days its calendar excludes (``note``)."""
    try:
        job = JobSpec.from_dict(spec)
        trigger = job_trigger(conn, job, zone=tz)
    except (CronrdError, KeyError, TypeError, ValueError):
        return []
    zone = zoneinfo.ZoneInfo(tz)
    days = [today + datetime.timedelta(days=i + 1) for i in range(UPCOMING_DAYS)]
    out: list[dict[str, Any]] = [{"day": d.isoformat(), "counts": {}, "note": ""}
                                 for d in days]
    end = datetime.datetime.combine(days[-1] + datetime.timedelta(days=1), datetime.time(),
                                    tzinfo=zone).timestamp()
    start = datetime.datetime.combine(days[0], datetime.time(), tzinfo=zone).timestamp()
    calendar = trigger if isinstance(trigger, CalendarTrigger) else None
    for fire in trigger.fires_between(int(max(start, now)) - 1, int(end) - 1, MAX_UPCOMING):
        i = (datetime.datetime.fromtimestamp(fire, zone).date() - days[0]).days
        if not 0 <= i < len(out):
            continue
        skip = calendar.skip_reason(fire) if calendar is not None else None
        key = "skipped" if skip else "planned"
        out[i]["counts"][key] = out[i]["counts"].get(key, 0) + 1
    if calendar is not None:
        for i, d in enumerate(days):
            why = calendar.why_not(d)
            if why:
                out[i]["note"] = f"excluded: {why}"
                if not out[i]["counts"]:
                    out[i]["counts"]["excluded"] = 1
    return out


def layout_calendar(days: list[dict]) -> dict:
    """A job's calendar (state/activity.job_calendar) as cells of a heat
    map: a column per week (Monday first), a row per weekday; a day's
    colour class is its worst outcome (failed, else succeeded, else
    running, else pending, else skipped), its depth the share of its fire times
    that had it; its title the counts."""
    CELL, PAD, TOP, LEFT = 13, 3, 16, 30
    cells: list[dict] = []
    months: list[dict] = []
    if not days:
        return {"cells": cells, "months": months, "width": 0, "height": 0}
    first = datetime.date.fromisoformat(days[0]["day"])
    offset = first.weekday()
    for i, d in enumerate(days):
        day = datetime.date.fromisoformat(d["day"])
        col, row = (i + offset) // 7, (i + offset) % 7
        counts = d["counts"]
        total = sum(counts.values())
        worst = next((k for k in ("failed", "succeeded", "running", "pending", "skipped",
                                  "other", "planned", "excluded") if counts.get(k)), "none")
        share = counts.get(worst, 0) / total if total else 0
        level = 0 if not total else 1 + min(3, int(share * 4 - 1e-9))   # 1-4
        text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if k != "excluded") \
            or "no fire time"
        if d.get("note"):
            text += f"; {d['note']}"
        cells.append({"x": LEFT + col * (CELL + PAD), "y": TOP + row * (CELL + PAD),
                      "size": CELL, "day": d["day"], "cls": worst, "level": level,
                      "title": f"{d['day']} ({day.strftime('%a')}): {text}"})
        if day.day == 1 or i == 0:
            months.append({"x": LEFT + col * (CELL + PAD), "label": day.strftime("%b")})
    cols = (len(days) + offset + 6) // 7
    return {"cells": cells, "months": months, "width": LEFT + cols * (CELL + PAD) + 4,
            "height": TOP + 7 * (CELL + PAD) + 4,
            "weekdays": [{"y": TOP + r * (CELL + PAD) + CELL - 2, "label": lbl}
                         for r, lbl in ((0, "Mon"), (2, "Wed"), (4, "Fri"))]}

"""The HTTP server of the web UI, the API and ``/metrics``, inside the
daemon's event loop (aiohttp).

So far: ``GET /healthz`` (the process answers), ``GET /readyz`` (ready as
``cronrd status`` says: job files loaded, the scheduler running), ``GET
/metrics`` (http/metrics.py), open to whoever reaches the port; and ``/api/v1/``,
where every route needs ``Authorization: Bearer TOKEN`` (`cronrd token
create`) of a role at least the route's (401 without a valid token, 403 for
a role too low). Errors are RFC 9457 ``application/problem+json``.

Every request is bounded (body size, header sizes, a handler that fails is
a 500 with the error logged), so no request can stop the daemon. The daemon
runs :meth:`HttpServer.run` as a restartable service: a port that cannot be
bound is logged (``event=http_failed``) and tried again with back-off while
the jobs keep running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import TYPE_CHECKING, Callable

from aiohttp import web

from ... import __version__
from ...config import HttpConfig, format_address
from ...errors import CronrdError
from ..clock import monotonic
from ..tasks import ServiceDown
from .api import ReadRoutes, Route, error_response, openapi
from ..control.access import Caller, check_admin
from .certs import principal
from .ui import UiPages
from ...schedule import iso_utc
from ...state.tokens import role_allows
from .metrics import only_jobs, CONTENT_TYPE, Metrics
from .session import CSRF_HEADER, SAFE_METHODS, csrf_ok, from_another_site, session_cookie

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler

log = logging.getLogger("cronrd.http")

MAX_BODY = 1024 * 1024     # bytes in one request body
SHUTDOWN_TIMEOUT = 2.0     # seconds open requests get when the daemon stops
IDLE_TIMEOUT = 75.0        # seconds a connection is kept without a whole request
MAX_CONNECTIONS = 256      # open at once; one more is closed at once
PER_ADDRESS = 64           # open at once from one client address
LOCAL_RESERVE = 16         # more, for 127.0.0.1 and ::1 only (the host's own curl and UI)
BODY_TIMEOUT = 10.0        # seconds a request's body has to arrive whole (then 408)
LOGIN_BODY = 4096          # bytes of POST /login's body (a form with one token)
LOCAL = frozenset({"127.0.0.1", "::1"})


def problem(status: int, title: str, detail: str = "", **extra) -> web.Response:
    """An RFC 9457 problem document."""
    body = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    body.update(extra)
    return web.Response(status=status, text=json.dumps(body),
                        content_type="application/problem+json")


@web.middleware
async def _problems(request: web.Request, handler):
    """Every error as problem+json; an unexpected one is logged, never raised
    into the server."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return problem(exc.status, exc.reason, exc.text if exc.text and
                       not exc.text.startswith(f"{exc.status}:") else "")
    except asyncio.CancelledError:
        raise
    except CronrdError as exc:  # a refused request: what was wrong, what to do
        status, title = error_response(exc)
        return problem(status, title, str(exc))
    except ConnectionError as exc:
        # The client went away in the middle (a slow body dropped): no
        # traceback, no ERROR line each (an attacker's log flood).
        log.debug("event=http_client_gone method=%s path=%s error=\"%s\"", request.method,
                  request.path, exc)
        return problem(400, "Bad Request", "the connection was lost before the request "
                       "was read whole")
    except Exception as exc:
        log.exception("event=http_handler_failed method=%s path=%s", request.method,
                      request.path)
        return problem(500, "Internal Server Error", f"{type(exc).__name__}; see the "
                       "daemon's log (event=http_handler_failed)")


async def _no_sniffing(request: web.Request, response: web.StreamResponse) -> None:
    """No browser reads an answer as another type than it says: a run's log
    (text/plain, what the job wrote) is never rendered as HTML."""
    response.headers["X-Content-Type-Options"] = "nosniff"


def _cap_connections(server: web.Server) -> None:
    """Close a connection as soon as it is made when MAX_CONNECTIONS are
    open, or PER_ADDRESS from its address: each holds a file descriptor of
    the faces (a flood from one address, slow bodies say, must not take
    every slot). 127.0.0.1 and ::1 get LOCAL_RESERVE more, so the host's
    own operator still gets in."""
    made = server.connection_made
    lost = server.connection_lost
    refused = {"at": 0.0}
    by_address: dict[str, int] = {}

    def address(transport) -> str:
        peer = transport.get_extra_info("peername")
        return str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""

    def connection_made(handler, transport) -> None:
        made(handler, transport)
        addr = address(transport)
        by_address[addr] = by_address.get(addr, 0) + 1
        cap = MAX_CONNECTIONS + (LOCAL_RESERVE if addr in LOCAL else 0)
        if len(server.connections) > cap or by_address[addr] > PER_ADDRESS:
            transport.close()
            now = monotonic()
            if now - refused["at"] >= 60:  # logged once a minute at most
                refused["at"] = now
                log.warning("event=http_connections_full max=%d per_address=%d address=%s "
                            "hint=\"a client holds many connections open; new ones are "
                            "closed\"", MAX_CONNECTIONS, PER_ADDRESS, addr)

    def connection_lost(handler, exc) -> None:
        transport = getattr(handler, "transport", None)
        addr = address(transport) if transport is not None else ""
        left = by_address.get(addr, 0) - 1
        if left > 0:
            by_address[addr] = left
        else:
            by_address.pop(addr, None)
        lost(handler, exc)
    server.connection_made = connection_made  # type: ignore[method-assign]  # wrapped: the cap
    server.connection_lost = connection_lost  # type: ignore[method-assign,assignment]


async def _answer_and_close(request: web.Request, resp: web.Response) -> web.Response:
    """Send ``resp`` and close the connection at once: the rest of a body
    that is not wanted is not waited for (aiohttp would linger for it)."""
    resp.force_close()
    await resp.prepare(request)
    await resp.write_eof()
    if request.transport is not None:
        request.transport.close()
    return resp


@web.middleware
async def _body_in_time(request: web.Request, handler):
    """A request body must arrive whole within BODY_TIMEOUT (IDLE_TIMEOUT
    covers the headers only): a client that sends a byte now and then holds
    its connection no longer than that. POST /login takes LOGIN_BODY bytes."""
    if request.body_exists:
        too_big = problem(413, "Payload Too Large", f"a login form is at most {LOGIN_BODY} "
                          "bytes")
        if request.path == "/login" and (request.content_length or 0) > LOGIN_BODY:
            return await _answer_and_close(request, too_big)
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                body = await request.read()   # (kept: the handler reads it again)
        except TimeoutError:
            return await _answer_and_close(request, problem(
                408, "Request Timeout", f"the body did not arrive within {BODY_TIMEOUT:g}s"))
        if request.path == "/login" and len(body) > LOGIN_BODY:
            return too_big
    return await handler(request)


def tls_context(config: HttpConfig) -> ssl.SSLContext | None:
    if config.tls is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(config.tls.cert, config.tls.key)
    if config.tls.client_ca:
        ctx.load_verify_locations(cafile=config.tls.client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a token still works without a certificate
    return ctx


API = "/api/v1/"
# The request's token (a state/tokens.py row), once _auth has checked it.
TOKEN = web.RequestKey("token", dict) if hasattr(web, "RequestKey") else "token"


def _unauthorized(detail: str) -> web.Response:
    resp = problem(401, "Unauthorized", detail)
    resp.headers["WWW-Authenticate"] = 'Bearer realm="cronrd"'
    return resp


def _json_answer(schema: str) -> dict:
    """A route's 200 answer: JSON of the named schema (http/schemas.py)."""
    from .schemas import ref
    return {"200": {"description": "OK", "content": {"application/json": {
        "schema": ref(schema)}}}}


class HttpServer:
    def __init__(self, config: HttpConfig, *, is_ready: Callable[[], bool],
                 status: Callable[[], dict], metrics: Metrics,
                 find_token: Callable[[str], dict | None] = lambda secret: None,
                 find_session: Callable[[str, float], dict | None] = lambda secret, now: None,
                 list_tokens: Callable[[], list[dict]] = list,
                 now: Callable[[], float] = lambda: 0.0, reads=None,
                 on_url: Callable[[str | None], None] = lambda url: None):
        self.config = config
        self.on_url = on_url            # told the URL once it listens, None when it fails or stops
        self.problem: str | None = None  # why it cannot listen, while it cannot
        self.is_ready = is_ready
        self.status = status
        self.metrics = metrics
        self.find_token = find_token    # the token whose secret this is (state/tokens.py)
        # the token of the live web session whose secret this is, at a time
        self.find_session = find_session
        self.list_tokens = list_tokens
        self.now = now
        self.reads = reads              # the control socket's reads (control/handlers.py)
        # (method, path) -> the least role (viewer | operator | admin) of each
        # route, None for the open ones; every route, for the OpenAPI document
        self.roles: dict[tuple[str, str], str | None] = {}
        self.routes: list[Route] = []       # the API's (the OpenAPI document)
        self.ui_routes: list[Route] = []    # the web UI's pages (?ui=true)
        self.address: tuple[str, int] | None = None  # bound, while serving
        self.app = self.make_app()

    @property
    def url(self) -> str | None:
        if self.address is None:
            return None
        scheme = "https" if self.config.tls else "http"
        return f"{scheme}://{format_address(self.address)}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY,
                              middlewares=[_problems, _body_in_time, self._auth],
                              handler_args={"max_field_size": 8190, "max_line_size": 8190})
        routes: list[tuple[Route, Handler]] = [
            (Route("GET", "/healthz", "200 while the process answers.", None,
                   responses=_json_answer("Health")), self.healthz),
            (Route("GET", "/readyz", "200 once the node is ready (job files loaded, the "
                   "scheduler running), else 503.", None, responses={
                       **_json_answer("Ready"), "503": {
                           "description": "not ready yet: the detail says what it waits for",
                           "content": {"application/problem+json": {
                               "schema": {"$ref": "#/components/schemas/Problem"}}}}}),
             self.readyz),
            (Route("GET", "/metrics", "Prometheus metrics (http.metrics_auth: token asks "
                   "for a viewer token).", "viewer" if self.config.metrics_auth == "token"
                   else None, responses={"200": {
                       "description": "the Prometheus text format",
                       "content": {"text/plain": {"schema": {"type": "string"}}}}}),
             self.get_metrics),
            (Route("GET", API + "openapi.json", "This document (?ui=true: the web UI's "
                   "pages instead).", None, (("ui", "true: the web UI's pages"),),
                   responses=_json_answer("Object")), self.get_openapi),
            (Route("GET", API + "whoami", "The token's name, role, jobs and expiry.",
                   "viewer"), self.whoami),
            (Route("GET", API + "tokens", "The API tokens (never their secrets).", "admin"),
             self.tokens),
        ]
        if self.reads is not None:
            routes += ReadRoutes(self.reads, lambda request: request[TOKEN]).routes()
            from .writes import ApiRoutes  # the rest of API v1 (the "api" part)
            routes += ApiRoutes(self.reads, lambda request: request[TOKEN]).routes()
            # Server-Sent Events and webhook triggers (http/stream.py, http/hooks.py)
            from .hooks import HookRoutes
            from .stream import StreamRoutes
            self.streams = StreamRoutes(self.reads, lambda request: request[TOKEN],
                                        self._token_still_valid)
            routes += self.streams.routes()
            hooks = getattr(getattr(self.reads, "config", None), "hooks", ())
            routes += HookRoutes(self.reads, hooks, self.now).routes()
        for route, handler in routes:
            app.router.add_route(route.method, route.path, handler)
            self.routes.append(route)
            self.roles[(route.method, route.path)] = route.role
        # the web UI (http/ui.py): its pages check the session cookie themselves
        self.ui_routes = UiPages(self).install(app)
        app.on_response_prepare.append(_no_sniffing)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        """/api/v1/: a valid bearer token (401) of a role high enough (403).
        The browser's session cookie counts as the token; its writes need the
        CSRF header (403)."""
        resource = request.match_info.route.resource
        needed = self.roles.get((request.method, resource.canonical if resource else ""), "")
        if needed is None or not needed and not request.path.startswith(API):  # open to all
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, secret = header.partition(" ")
        cookie = None if header else session_cookie(request.cookies, self.tls)
        if not header and cookie is None and self.config.tls is not None \
                and self.config.tls.client_roles:
            cert = principal(request.transport.get_extra_info("peercert")
                             if request.transport is not None else None,
                             self.config.tls.client_roles)
            if cert is not None:  # a verified client certificate with a role
                # a browser sends it with any site's request, as a cookie: no
                # write from another site's page (CSRF)
                if request.method not in SAFE_METHODS and from_another_site(
                        request.headers, request.scheme, request.host):
                    return problem(403, "Forbidden", "a write with a client certificate "
                                   "from another site's page is refused; send it from a "
                                   "client that is not a browser, or with Authorization: "
                                   "Bearer TOKEN")
                return await self._as(request, handler, cert, needed)
        if cookie is not None:  # the browser's session (http/session.py)
            token = self.find_session(cookie, self.now())
            if token is None:
                return _unauthorized("your web session has ended (logged out, expired, or "
                                     "its token was revoked): log in again at /login, or "
                                     "send Authorization: Bearer TOKEN")
        else:
            if scheme.lower() != "bearer" or not secret.strip():
                return _unauthorized("send Authorization: Bearer TOKEN; `cronrd token create "
                                     "--name NAME --role viewer` (as root) makes a token")
            token = self.find_token(secret.strip())
            if token is None:
                return _unauthorized("unknown or revoked token; `cronrd token list` shows "
                                     "the tokens, `cronrd token create` makes a new one")
        if token.get("expires_at") is not None and token["expires_at"] <= self.now():
            return _unauthorized(f"token {token['name']!r} has expired; create a new one "
                                 "with `cronrd token create`")
        if cookie is not None and request.method not in SAFE_METHODS and not csrf_ok(
                cookie, request.headers.get(CSRF_HEADER)):
            return problem(403, "Forbidden", f"a write from a browser session needs the "
                           f"{CSRF_HEADER} header of its page (or send Authorization: Bearer "
                           "TOKEN instead of the cookie)")
        return await self._as(request, handler, token, needed)

    async def _as(self, request: web.Request, handler, token: dict, needed: str):
        """Serve ``request`` as ``token`` (a token, a session's token, or a
        certificate's role)."""
        if needed and not role_allows(token["role"], needed):
            detail = (f"token {token['name']!r} has the role {token['role']}; this needs "
                      f"{needed} or higher")
            if self.reads is not None and request.method != "GET":  # a refused write
                from .writes import audit_refused
                await audit_refused(self.reads, token, request, detail)
            return problem(403, "Forbidden", detail, role=token["role"], needed=needed)
        request[TOKEN] = token
        return await handler(request)

    @property
    def tls(self) -> bool:
        return self.config.tls is not None

    def _token_still_valid(self, request: web.Request) -> bool:
        """The request's token (bearer, or its web session's) is still known
        and unexpired, and the session has not ended (a long stream checks
        again now and then)."""
        header = request.headers.get("Authorization", "")
        cookie = None if header else session_cookie(request.cookies, self.tls)
        if header:
            secret = header.partition(" ")[2].strip()
            token = self.find_token(secret) if secret else None
        elif cookie is not None:
            token = self.find_session(cookie, self.now())
        else:  # a client certificate's role, checked by TLS when it connected
            return True
        return token is not None and (token.get("expires_at") is None
                                      or token["expires_at"] > self.now())

    async def run(self) -> None:
        """Serve until cancelled (the daemon's service ``http``)."""
        assert self.config.listen is not None  # the daemon serves only with one
        host, port = self.config.listen
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               shutdown_timeout=SHUTDOWN_TIMEOUT,
                               keepalive_timeout=IDLE_TIMEOUT)
        await runner.setup()
        assert runner.server is not None  # setup() made it
        _cap_connections(runner.server)
        try:
            site = web.TCPSite(runner, host, port, ssl_context=tls_context(self.config),
                               backlog=128, reuse_address=True)
            try:
                await site.start()
            except OSError as exc:
                where = format_address((host, port))
                self.problem = (
                    f"http: cannot listen on {where} ({exc.strerror or exc}): another "
                    "program, or another cronrd node on this host, holds the port; give "
                    "this node a port of its own (http: {listen: \"127.0.0.1:PORT\"} in its "
                    "config) or turn the server off (http: {enabled: false}); jobs keep "
                    "running and the port is tried again with back-off")
                log.error("event=http_failed listen=%s error=\"%s\" hint=\"another program or "
                          "another cronrd node on this host holds the port: set http.listen "
                          "in this node's config (http: {enabled: false} turns the server "
                          "off); jobs keep running; tried again with back-off\"", where,
                          exc.strerror or exc)
                self.on_url(None)
                raise ServiceDown(self.problem) from None
            self.problem = None
            bound = runner.addresses  # the socket names: the port, when listen's was 0
            self.address = (host, bound[0][1]) if bound else (host, port)
            log.info("event=http_listening url=%s", self.url)
            self.on_url(self.url)
            feed = getattr(getattr(self, "streams", None), "feed", None)
            await (feed.run() if feed is not None else asyncio.Event().wait())
        finally:
            if self.address is not None:
                self.address = None
                self.on_url(None)
            await runner.cleanup()

    # -- routes ------------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        st = self.status()
        body = {"ready": bool(self.is_ready()), "role": st.get("role"),
                "leader": st.get("leader")}
        if not body["ready"]:
            return problem(503, "Not Ready", "the daemon is starting: job files not loaded "
                           "or not caught up with the cluster yet", **body)
        return web.json_response(body)

    async def whoami(self, request: web.Request) -> web.Response:
        t = request[TOKEN]
        return web.json_response({"name": t["name"], "role": t["role"],
                                  "jobs": t["jobs"] or None,
                                  "expires_at": iso_utc(t["expires_at"])})

    async def tokens(self, request: web.Request) -> web.Response:
        check_admin(Caller.of_token(request[TOKEN]), "GET /api/v1/tokens")
        return web.json_response({"tokens": [
            {**t, "jobs": t["jobs"] or None, "expires_at": iso_utc(t["expires_at"]),
             "created_at": iso_utc(t["created_at"])} for t in self.list_tokens()]})

    async def get_openapi(self, request: web.Request) -> web.Response:
        """The API's OpenAPI document; ``?ui=true``: the web UI's pages
        instead (HTML and forms, kept apart: a client generated from the
        API's document sees only the API)."""
        ui = request.query.get("ui") == "true"
        return web.json_response(openapi(self.ui_routes if ui else self.routes, __version__))

    async def get_metrics(self, request: web.Request) -> web.Response:
        page = await self.metrics.page()
        token = request.get(TOKEN) if self.config.metrics_auth == "token" else None
        if token and token.get("jobs"):  # a token limited to some jobs sees only theirs
            page = await asyncio.get_running_loop().run_in_executor(
                None, only_jobs, page, token["jobs"])
        return web.Response(body=page, headers={"Content-Type": CONTENT_TYPE})

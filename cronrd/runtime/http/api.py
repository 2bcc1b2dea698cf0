"""The read routes of API v1 (/api/v1/jobs, /api/v1/runs) and the OpenAPI
document that lists every route of the HTTP server.

The reads are the control socket's (control/handlers.py, control/reads.py): the same
filters, the same views, the same indexes. Lists page with an opaque
cursor: ``?limit=N`` (1 to MAX_LIMIT, default 100) and ``?cursor=`` from
the previous page's ``next_cursor`` (null on the last page). A token
limited to some jobs (``--jobs GLOB``) sees only those; its pages may then
hold fewer than ``limit`` items, so follow ``next_cursor`` until it is null.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from aiohttp import web

from . import schemas
from ...errors import CronrdError, PermissionDenied, UsageError
from ...ops import requests as R
from ...ops import typed
from ...state.tokens import job_allowed, sql_glob

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_PATTERN = 200   # characters of a job name pattern (as a token's --jobs)


@dataclass(frozen=True)
class Route:
    """One route, as the server serves it and the OpenAPI document lists it."""
    method: str
    path: str
    summary: str
    role: str | None            # None: no token needed
    params: tuple[tuple[str, str], ...] = ()   # (query parameter, description)
    responses: dict = field(default_factory=lambda: {"200": {"description": "OK"}})
    auth: str | None = None     # role None but authenticated otherwise: "hmac" (http/hooks.py)
    # The typed request (ops/requests.py) the route builds: the schemas of its
    # query parameters, and of the JSON body's fields named in ``body``.
    request: type | None = None
    body: tuple[str, ...] = ()


def encode_cursor(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()
                                    ).decode().rstrip("=")


def decode_cursor(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, UnicodeDecodeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise UsageError("cursor is not one this server made: pass next_cursor from the "
                         "previous page unchanged, or leave it out for the first page")
    return value


def whole_number(text: str | None) -> TypeGuard[str]:
    """ASCII digits SQLite's integer holds ("²".isdigit() is True, and
    int() refuses it)."""
    if not text:
        return False
    return text.isascii() and text.isdigit() and len(text) <= 18


def cursor_before(cur: dict) -> int | None:
    """A cursor's ``before`` (an id), None on the first page."""
    before = cur.get("before")
    if before is not None and (not isinstance(before, int) or isinstance(before, bool)
                               or not 0 <= before < 2 ** 63):
        raise UsageError("cursor is not one this server made")
    return before


def page_limit(request: web.Request) -> int:
    text = request.query.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not whole_number(text) or not 1 <= int(text) <= MAX_LIMIT:
        raise UsageError(f"limit must be a whole number from 1 to {MAX_LIMIT} (got {text!r})")
    return int(text)


def consistent(request: web.Request) -> bool:
    return request.query.get("consistent", "").lower() in ("1", "true", "yes")


class ReadRoutes:
    """GET /api/v1/jobs and /api/v1/runs over ``reads`` (the daemon's
    Handlers: ``h_jobs(args)``, ``h_runs(args)``)."""

    JOB_PARAMS = (("limit", f"page size, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"),
                  ("cursor", "next_cursor of the previous page"),
                  ("match", "only job names matching this shell pattern"),
                  ("consistent", "true: wait until this node has every committed write"))
    RUN_PARAMS = (("limit", f"page size, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"),
                  ("cursor", "next_cursor of the previous page"),
                  ("job", "only this job's runs"),
                  ("state", "states, comma-separated (e.g. failed,lost)"),
                  ("kind", "kinds, comma-separated (scheduled, catchup, manual, retry, "
                           "backfill, rerun, upstream)"),
                  ("node", "only runs placed on this node"),
                  ("since", "fire times from this time on (RFC 3339 or Unix seconds)"),
                  ("until", "fire times before this time"),
                  ("consistent", "true: wait until this node has every committed write"))

    def __init__(self, reads, token_of):
        self.reads = reads
        self.token_of = token_of  # request -> its token (a state/tokens.py row)

    def routes(self) -> list[tuple[Route, Handler]]:
        return [
            (Route("GET", "/api/v1/jobs", "The jobs by name, a page at a time.", "viewer",
                   self.JOB_PARAMS, request=R.ListJobs), self.jobs),
            (Route("GET", "/api/v1/runs", "The runs, newest first, a page at a time, "
                   "with filters.", "viewer", self.RUN_PARAMS, request=R.ListRuns),
             self.runs),
        ]

    async def jobs(self, request: web.Request) -> web.Response:
        glob = self.token_of(request).get("jobs") or None
        limit = page_limit(request)
        cur = decode_cursor(request.query.get("cursor"))
        after = cur.get("after")
        if after is not None and not isinstance(after, str):
            raise UsageError("cursor is not one this server made")
        match = request.query.get("match") or None
        if match is not None and len(match) > MAX_PATTERN:
            raise UsageError(f"match is a pattern of at most {MAX_PATTERN} characters")
        # (values checked here already: the request is built, not parsed)
        res = await self.reads.h_jobs(R.ListJobs(limit=limit, after=after,
                                                 match=sql_glob(glob) if glob else match,
                                                 consistent=consistent(request)))
        items = res["jobs"]
        if glob:  # the token's (narrowed in SQL if it can be), the caller's here
            items = [j for j in items if job_allowed(glob, j["name"]) and
                     (not match or fnmatch.fnmatchcase(j["name"], match))]
        return web.json_response({"items": items, "next_cursor": encode_cursor(
            {"after": res["next"]}) if res["next"] else None})

    async def runs(self, request: web.Request) -> web.Response:
        glob = self.token_of(request).get("jobs") or None
        limit = page_limit(request)
        cur = decode_cursor(request.query.get("cursor"))
        before = cursor_before(cur)
        args: dict[str, Any] = {k: request.query[k] for k in ("job", "state", "kind", "node",
                                                              "since", "until")
                                if request.query.get(k)}
        for k in ("since", "until"):  # Unix seconds as numbers
            if k in args and re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", args[k]):
                args[k] = float(args[k])
        if glob and "job" in args and not fnmatch.fnmatchcase(args["job"], glob):
            raise PermissionDenied(f"this token may read only the jobs matching {glob!r}")
        res = await self.reads.h_runs(typed.parse(R.ListRuns, {
            **args, "limit": limit, "before": before, "consistent": consistent(request)}))
        runs = res["runs"]
        items = [only_seen_lineage(r, glob) for r in runs
                 if not glob or fnmatch.fnmatchcase(r["job"], glob)]
        return web.json_response({
            "items": items, "gaps": res.get("gaps", []),
            "next_cursor": encode_cursor({"before": runs[-1]["run_id"]})
            if len(runs) == limit else None})


def only_seen_lineage(view: dict, glob: str | None) -> dict:
    """A run's view without the parent runs of jobs outside ``glob`` (a
    token limited to some jobs learns no other job's name through a
    dependency); ``lineage_hidden`` counts those left out."""
    lineage = view.get("lineage")
    if not glob or not lineage:
        return view
    seen = [p for p in lineage if fnmatch.fnmatchcase(p["job"], glob)]
    if len(seen) == len(lineage):
        return view
    return {**view, "lineage": seen, "lineage_hidden": len(lineage) - len(seen)}


def openapi(routes: list[Route], version: str) -> dict:
    """An OpenAPI 3.1 document of ``routes``."""
    paths: dict = {}
    problem = {"application/problem+json": {"schema": schemas.ref("Problem")}}
    for r in routes:
        op: dict[str, Any] = {"summary": r.summary, "responses": {}}
        api = r.path.startswith("/api/")
        in_path = re.findall(r"{(\w+)}", r.path)
        for status, resp in r.responses.items():
            resp = dict(resp)
            if status.startswith("2") and api and "content" not in resp:
                resp["content"] = {"application/json": {"schema": schemas.ref(
                    schemas.success_schema(r.method, r.path))}}
            elif status[0] in "45" and "content" in resp:
                resp["content"] = problem
            op["responses"][status] = resp
        if api:   # every API route refuses bad input, and names the missing thing
            op["responses"].setdefault("400", {"description": "bad input: detail says what to "
                                                              "send instead",
                                               "content": problem})
            op["responses"].setdefault("503", {
                "description": "unavailable for now (starting, no leader reachable, or at a "
                               "limit such as the streams a node serves): retry after a while",
                "content": problem})
            if r.method in ("POST", "DELETE"):
                for status, why in (
                        ("408", "the body did not arrive in time"),
                        ("409", "a request with this Idempotency-Key is still being answered, "
                                "or its answer was too big to keep for a replay"),
                        ("413", "the body is larger than the server takes"),
                        ("422", "this Idempotency-Key came with another request")):
                    op["responses"].setdefault(status, {"description": why,
                                                        "content": problem})
            if in_path:
                op["responses"].setdefault("404", {"description": "no such "
                                                   + " or ".join(in_path),
                                                   "content": problem})
        if r.role is not None:
            op["security"] = [{"bearer": []}]
            op["x-cronrd-role"] = r.role
            op["responses"].update({
                "401": {"description": "no valid token", "content": problem},
                "403": {"description": f"the token's role is below {r.role}",
                        "content": problem}})
        elif r.auth == "hmac":
            op["security"] = [{"hmac": []}]
        typed_fields = {name: schema for name, schema, _ in typed.fields(r.request)} \
            if r.request is not None else {}
        if r.params or in_path:
            op["parameters"] = [{"name": name, "in": "path", "required": True,
                                 "schema": {"type": "string"}} for name in in_path] + \
                [{"name": name, "in": "query", "required": False, "description": doc,
                  "schema": _query_schema(name, typed_fields)} for name, doc in r.params]
        if r.method == "POST":
            body = ({"application/yaml": {"schema": {"type": "string"}}}
                    if r.path.endswith("/validate") else
                    {"application/json": {"schema": {"type": "object", "properties": {
                        name: typed_fields[name] for name in r.body}} if r.body else
                        {"type": "object"}}})
            op["requestBody"] = {"required": False, "content": body}
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {"openapi": "3.1.0",
            "info": {"title": "cronrd API", "version": version},
            "components": {"schemas": schemas.COMPONENTS, "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "hmac": {"type": "apiKey", "in": "header", "name": "X-Cronrd-Signature",
                         "description": "sha256=HEX: HMAC-SHA256 of X-Cronrd-Timestamp + '.' "
                                        "+ the body with the hook's key (webhooks)"}}},
            "paths": paths}


# The paging parameters of the API's lists (not the socket's: it pages by name
# or id, the API by an opaque cursor).
_PAGING: dict[str, dict[str, Any]] = {
    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    "cursor": {"type": "string"}}


def _query_schema(name: str, typed_fields: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema: the paging one, or its typed request
    field's (a query carries text, so of a field that takes a list or a
    number too, the text form), else a string."""
    if name in _PAGING:
        return _PAGING[name]
    schema = typed_fields.get(name)
    if schema is None:
        return {"type": "string"}
    text = next((alt for alt in schema.get("oneOf", ()) if alt.get("type") == "string"), None)
    out = dict(text if text is not None else schema)
    out.pop("description", None)  # the parameter's own says it
    return out


def error_response(exc: CronrdError):
    """The status of a refused request: 403 for a permission, the error's
    own ``http_status`` (404, 409 for a ``Conflict``, 422...), else 400."""
    status = getattr(exc, "http_status", None)
    if status is not None:
        return status, {404: "Not Found", 409: "Conflict",
                        422: "Unprocessable Content"}.get(status, "Bad Request")
    return (403, "Forbidden") if isinstance(exc, PermissionDenied) else (400, "Bad Request")

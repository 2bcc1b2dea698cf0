"""Webhook triggers: ``POST /api/v1/hooks/NAME`` starts every job that lists
NAME under ``triggers:`` (a run now, as ``cronrd run-now`` makes it).

A hook authenticates by HMAC, not by token: the sender signs
``TIMESTAMP + "." + BODY`` with the hook's key (the daemon config's
``hooks: {NAME: {secret_file}}``, config/hooks.py) and sends

    X-Cronrd-Timestamp: 1767225600            (Unix seconds)
    X-Cronrd-Signature: sha256=HEX            (HMAC-SHA256, lower-case hex)

The signature is compared in constant time (hmac.compare_digest); a
timestamp further than the hook's replay_window (default 5 min) from this
node's clock is refused, so a captured request cannot be sent again later.

Within the window a delivery is deduplicated by its key: the body's field
named by ``dedupe: $.FIELD`` (a JSON body), else the signature itself (the
same signed request again). The key becomes each started run's idempotency
key (``hook:NAME:KEY``), which the replicated state holds per job
(state/run_params.py): the same key never starts a job twice, on any node,
across a change of leader (as long as the run's record is kept,
history_retention). A repeat answers 200 with the first delivery's runs
(``"existing": true``); a first one 202.

Every delivery that passes the signature is audited (user ``hook:NAME``).
Refusals: 404 unknown hook, 401 bad or missing signature or timestamp out
of the window, 400 a body without the dedupe field, 503 when the cluster
cannot commit now (no leader): sending again is safe. A job that refuses the
run (paused, a required param, its concurrency) is named under "errors".

The signing is the webhook notifiers' (notify/senders.py): a cronrd webhook
notifier with the same key can call a hook.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import TYPE_CHECKING, Callable

from aiohttp import web

from ...config.model import HookConfig
from ...errors import CronrdError, RequestError, StateError, UsageError
from ...jobspec.params import check_run_params
from ...state import commands as C
from ...state import queries as Q
from ...state.triggers import jobs_triggered_by
from ...state import run_params
from .api import Route
from ..control.runs import check_manual_queue
from ..control.server import SUMMARY_INTERVAL, Summary
# The X-Cronrd-Signature value of a delivery: the scheme of the webhook
# notifiers, so that one cluster's notifier can call another's hook.
from ..notify.senders import sign

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler

log = logging.getLogger("cronrd.http")

TIMESTAMP = "X-Cronrd-Timestamp"
SIGNATURE = "X-Cronrd-Signature"
MAX_KEY_TEXT = 200  # characters of a dedupe value used as they are (longer: hashed)


def _problem(status: int, detail: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 404: web.HTTPNotFound,
           503: web.HTTPServiceUnavailable}[status]
    return cls(text=detail)


def _unavailable(exc: Exception) -> web.HTTPException:
    return _problem(503, f"the cluster could not take the delivery now ({exc}); send it "
                         "again: the same key starts nothing twice")


def dedupe_value(body: bytes, fields: tuple[str, ...]) -> str:
    """The value at ``$.a.b`` of a JSON body, as text; UsageError if absent."""
    path = "$." + ".".join(fields)
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"the body is not JSON, so its dedupe field {path} cannot be read; "
                         "send the event as application/json") from None
    for name in fields:
        if not isinstance(value, dict) or name not in value:
            raise UsageError(f"the body has no {path} (the hook's dedupe field); send it, or "
                             "change hooks.NAME.dedupe in the daemon config")
        value = value[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        raise UsageError(f"the body's {path} must be a non-empty string or a number "
                         f"(got {type(value).__name__})")
    return str(value)


def run_key(hook: str, value: str) -> str:
    """A run's idempotency key for the delivery ``value`` of ``hook``."""
    key = f"hook:{hook}:{value}"
    if len(value) > MAX_KEY_TEXT or run_params.key_problem(key):
        key = f"hook:{hook}:sha256:{hashlib.sha256(value.encode()).hexdigest()}"
    return key


class HookRoutes:
    """``POST /api/v1/hooks/{name}`` over ``reads`` (the daemon's Handlers:
    conn, log, clock, config)."""

    def __init__(self, reads, hooks: tuple[HookConfig, ...], now: Callable[[], float],
                 refusal_interval: float = SUMMARY_INTERVAL):
        self.reads = reads
        self.hooks = {h.name: h for h in hooks}
        self.now = now
        self.refusal_interval = refusal_interval
        # Refusals need no login to cause: the first of each hook is logged,
        # then one line per SUMMARY_INTERVAL with their count (a flood of
        # badly signed requests is not a flood of log lines).
        self.refusals: dict[str, Summary] = {}
        self.last_refusal: dict[str, tuple[int, str | None]] = {}

    def _refused(self, name: str, status: int, remote: str | None) -> None:
        self.last_refusal[name] = (status, remote)
        summary = self.refusals.get(name)
        if summary is None:
            def emit(count: int, name: str = name) -> None:
                last_status, last_remote = self.last_refusal[name]
                log.warning("event=hook_refused hook=%s count=%d status=%d remote=%s "
                            "hint=\"badly signed or stale requests; one line per %gs "
                            "with their count\"", name, count, last_status, last_remote,
                            self.refusal_interval)
            summary = self.refusals[name] = Summary(emit, self.refusal_interval)
        summary.note()

    def routes(self) -> list[tuple[Route, Handler]]:
        return [(Route("POST", "/api/v1/hooks/{name}", "A webhook: starts every job listing "
                       "the hook under triggers:. Authenticated by HMAC-SHA256 of "
                       f"'TIMESTAMP.BODY' ({SIGNATURE}: sha256=HEX, {TIMESTAMP}: Unix "
                       "seconds), not by token; deduplicated by the hook's dedupe field.",
                       None, (), {"202": {"description": "the jobs started"},
                                  "200": {"description": "a repeated delivery: its runs"},
                                  "401": {"description": "bad signature or timestamp",
                                          "content": {"application/problem+json": {}}},
                                  "404": {"description": "no such hook",
                                          "content": {"application/problem+json": {}}}},
                       auth="hmac"),
                 self.deliver)]

    def _verify(self, hook: HookConfig, request: web.Request, body: bytes) -> str:
        """The signature after checking it and the timestamp (401 otherwise)."""
        if hook.secret is None:
            raise _problem(503, f"hook {hook.name!r} has no key loaded; check "
                                f"hooks.{hook.name}.secret_file and restart the daemon")
        stamp = request.headers.get(TIMESTAMP, "").strip()
        given = request.headers.get(SIGNATURE, "").strip()
        if not stamp or not given:
            raise _problem(401, f"send {TIMESTAMP}: UNIX_SECONDS and {SIGNATURE}: sha256=HEX, "
                                "the HMAC-SHA256 of TIMESTAMP.BODY with the hook's key")
        expected = sign(hook.secret, stamp, body)
        if not hmac.compare_digest(expected.encode(), given.encode()):
            raise _problem(401, "the signature does not match: sign TIMESTAMP + '.' + the body "
                                "exactly as sent, with the key in the hook's secret_file")
        try:
            when = float(stamp)
        except ValueError:
            when = float("nan")
        skew = abs(self.now() - when)
        if not skew <= hook.replay_window:  # (a NaN fails too)
            raise _problem(401, f"{TIMESTAMP} {stamp} is more than {hook.replay_window:g}s "
                                "from this node's clock: sign with the current time (a "
                                "delivery cannot be sent again later)")
        return given

    async def deliver(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        hook = self.hooks.get(name)
        if hook is None:
            raise _problem(404, f"no hook named {name!r}: define it under hooks: in the "
                                "daemon config of every node")
        body = await request.read()
        try:
            signature = self._verify(hook, request, body)
        except web.HTTPException as exc:
            self._refused(name, exc.status, request.remote)
            raise
        value = dedupe_value(body, hook.dedupe) if hook.dedupe else signature
        key = run_key(name, value)
        conn, log_ = self.reads.conn, self.reads.log
        found = jobs_triggered_by(conn, name)
        jobs = [job for job, paused in found if not paused]
        try:
            await log_.propose(C.Audit(node=self.reads.config.node_id, uid=-1,
                                       user=f"hook:{name}", pid=0, command="hook", target=name,
                                       allowed=True, at=self.now(), detail=f"key {key}; jobs "
                                       f"{', '.join(jobs) or '(none)'}"))
        except CronrdError as exc:
            raise _unavailable(exc) from None
        runs = []
        errors = [{"job": job, "detail": f"job {job!r} is paused; `cronrd resume {job}` lets "
                   "this hook start it"} for job, paused in found if paused]
        for job in jobs:
            try:
                for row in Q.jobs(conn, name=job):  # a required param has no value here
                    check_run_params(job, row["spec"].params, {})
                check_manual_queue(conn, job, key)
                res = await log_.propose(C.ManualRun(job=job, node="", at=self.now(), key=key))
            except (StateError, UsageError, RequestError) as exc:  # this job refused it
                errors.append({"job": job, "detail": str(exc)})
                continue
            except CronrdError as exc:  # no leader now: the sender sends again, same key
                raise _unavailable(exc) from None
            runs.append({"job": job, "run_id": res["run_id"], "state": res["state"],
                         **({"existing": True} if res.get("existing") else {})})
        repeat = bool(runs) and all(r.get("existing") for r in runs)
        log.info("event=hook_delivered hook=%s key=%s jobs=%d started=%d repeat=%s", name, key,
                 len(jobs), sum(not r.get("existing") for r in runs), repeat)
        doc = {"hook": name, "key": key, "runs": runs, "errors": errors}
        if not found:
            doc["detail"] = f"no job lists {name!r} under triggers:"
        return web.json_response(doc, status=200 if repeat else 202)

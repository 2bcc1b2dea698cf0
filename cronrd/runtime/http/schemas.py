"""The JSON Schemas of the API's answers, for its OpenAPI document
(``components.schemas``): what a generated client can rely on.

Each names the fields every answer of its kind has (``required``) and their
types; an answer may carry more fields than a schema names (a newer server
adds some: ``additionalProperties`` stays open), never fewer, and never a
field of another type. tests/security/test_api_fuzz.py checks every answer
of a live daemon against them.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None,
        description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "required": sorted(required),
                   "properties": {**required, **(optional or {})}}
    if description:
        out["description"] = description
    return out


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def page(item: str, **extra: Schema) -> Schema:
    return obj({"items": array(ref(item)), "next_cursor": nullable(STR), **extra},
               description=f"A page of {item} values: next_cursor (null on the last page) "
                           "is the cursor parameter of the next")


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
ANY_OBJ: Schema = {"type": "object"}
TIME: Schema = {"type": "string", "format": "date-time",
                "description": "RFC 3339, UTC (Z), milliseconds where they matter"}
TIME_OR_NULL: Schema = nullable(TIME)
STR_OR_NULL: Schema = nullable(STR)
INT_OR_NULL: Schema = nullable(INT)
RUN_STATE: Schema = {"type": "string", "enum": [
    "pending", "assigned", "running", "succeeded", "failed", "timed_out", "lost",
    "cancelled", "skipped", "waiting"]}
ROLE: Schema = {"type": "string", "enum": ["viewer", "operator", "admin"]}

_RUN_FIELDS: dict[str, Schema] = {
    "run_id": INT, "job": STR, "kind": STR, "fire_time": TIME, "attempt": INT,
    "state": RUN_STATE, "node": STR_OR_NULL, "exit_code": INT_OR_NULL,
    "signal": INT_OR_NULL, "started_at": TIME_OR_NULL, "finished_at": TIME_OR_NULL,
    "reason": STR_OR_NULL, "run_key": STR}

COMPONENTS: dict[str, Schema] = {
    "Problem": obj({"title": STR, "status": INT, "detail": STR}, {"type": STR},
                   description="RFC 9457 problem details: detail says what to do next"),
    "Run": obj(_RUN_FIELDS, {
        "pid": INT_OR_NULL, "log_path": STR_OR_NULL, "due_at": TIME_OR_NULL,
        "claimed_at": TIME_OR_NULL, "moved_from": array(STR), "timezone": STR,
        "params": ANY_OBJ, "key": STR_OR_NULL, "idempotency_key": STR_OR_NULL,
        "heartbeat_at": TIME_OR_NULL, "progress": nullable(NUM),
        "heartbeat_message": STR_OR_NULL,
        "lineage": array(obj({"job": STR, "run_id": INT})),
        "lineage_hidden": INT}, description="One attempt of a fire time"),
    "RunDetail": {"allOf": [ref("Run"), obj({"attempts": array(ref("Run"))})],
                  "description": "A run with every attempt of its fire time"},
    "Gap": obj({"job": STR}, description="Fire times a catch-up left out, recorded"),
    "Job": obj({"name": STR, "schedule": STR, "timezone": STR,
                "command": {"anyOf": [STR, array(STR)],
                            "description": "a shell command, or an argv list"},
                "enabled": BOOL, "paused": BOOL, "next_fire": TIME_OR_NULL,
                "last_run": nullable(ref("Run"))},
               {"description": STR, "source": STR_OR_NULL, "conflict": STR_OR_NULL,
                "sources": array(obj({"node": STR, "digest": STR, "source": STR})),
                "last_fire": TIME_OR_NULL, "concurrency": STR, "catchup": STR,
                "run_on": ANY_OBJ, "digest": STR, "file_problem": STR_OR_NULL,
                "watch": BOOL}),
    "JobDetail": {"allOf": [ref("Job"), obj(
        {"spec": ANY_OBJ, "next_fires": array(TIME)},
        {"source_line": INT_OR_NULL, "written": nullable(ANY_OBJ),
         "effective": array(array({})), "runs": array(ref("Run")),
         "active": array(ref("Run")), "planned": array(ref("Plan"))})],
        "description": "A job: its definition (spec: the values in force; written: its "
                       "file as written), state and next fire times"},
    "Explain": obj({"job": STR, "at": TIME, "steps": array(obj({"step": STR, "text": STR})),
                    "verdict": {"description": "the outcome: a {outcome, text} object, or a "
                                               "sentence"}},
                   {"local": STR, "timezone": STR, "future": BOOL, "now": TIME}),
    "Graph": obj({"jobs": array(obj({"name": STR, "missing": BOOL},
                                    {"schedule": STR_OR_NULL, "trigger_rule": STR_OR_NULL,
                                     "parents": array(ANY_OBJ),
                                     "last_run": nullable(obj({"run_id": INT,
                                                               "state": RUN_STATE}))})),
                  "edges": array({"type": "array", "items": STR, "minItems": 2,
                                  "maxItems": 2}),
                  "truncated": BOOL}),
    "Alert": obj({"alert_id": INT, "job": STR, "kind": STR, "state": STR,
                  "opened_at": TIME},
                 {"fire_time": TIME_OR_NULL, "detail": STR, "note": STR_OR_NULL,
                  "by": STR_OR_NULL, "closed_at": TIME_OR_NULL, "event_id": INT_OR_NULL,
                  "timezone": STR}),
    "DeadLetter": obj({"run_id": INT, "job": STR, "state": STR, "fire_time": TIME,
                       "at": TIME},
                      {"note": STR, "by": STR, "closed_at": TIME_OR_NULL,
                       "requeue_run_id": INT_OR_NULL, "run": nullable(ref("Run"))}),
    "Backfill": obj({"id": INT, "job": STR, "state": STR, "from": TIME, "to": TIME},
                    {"reprocess": STR, "parallel": INT, "order": STR, "note": STR,
                     "who": STR, "created_at": TIME, "updated_at": TIME, "total": INT}),
    "AuditEntry": obj({"audit_id": INT, "at": TIME, "command": STR, "allowed": BOOL},
                      {"node": STR_OR_NULL, "uid": INT_OR_NULL, "user": STR_OR_NULL,
                       "pid": INT_OR_NULL, "target": STR_OR_NULL, "detail": STR_OR_NULL}),
    "Node": obj({"node": STR, "state": STR},
                {"addr": STR_OR_NULL, "tags": array(STR), "since": TIME_OR_NULL,
                 "drained": nullable(ANY_OBJ)}),
    "Cluster": obj({"node_id": STR, "role": STR, "leader": STR_OR_NULL, "ready": BOOL,
                    "version": STR},
                   {"term": INT, "commit_index": INT, "applied_index": INT, "jobs": INT,
                    "paused": INT, "running": INT, "assigned": INT, "pending": INT,
                    "maintenance": nullable(ANY_OBJ), "timezone": STR,
                    "http": STR_OR_NULL, "workers": array(ref("Worker"))}),
    "Worker": obj({"node": STR, "tags": array(STR), "capacity": INT, "version": STR},
                  {"since": {"type": "number"}, "connected": nullable(BOOL),
                   "running": INT_OR_NULL, "last_contact_s": nullable({"type": "number"}),
                   "clock_offset_ms": nullable({"type": "number"})},
                  "A worker agent (cronrd worker); connected, running, last contact and "
                  "clock as the leader sees them (null on a follower)."),
    "Pools": obj({"pools": array(obj({"name": STR}))}),
    "Token": obj({"name": STR, "role": ROLE, "jobs": STR_OR_NULL,
                  "expires_at": TIME_OR_NULL}, {"created_at": TIME_OR_NULL,
                                                "node": STR_OR_NULL}),
    "TokenCreated": {"allOf": [ref("Token"), obj({"token": STR})],
                     "description": "The new token with its secret: shown this once"},
    "Tokens": obj({"tokens": array(ref("Token"))}),
    "Revoked": obj({"revoked": STR}),
    "JobChanged": obj({"job": STR, "changed": BOOL, "paused": BOOL}),
    "RunAccepted": obj({"job": STR, "run_id": INT, "state": RUN_STATE},
                       description="The run is recorded; GET /api/v1/runs/{run_id} follows "
                                   "it"),
    "Plan": obj({"plan_id": INT, "job": STR, "due": TIME, "params": ANY_OBJ, "key": STR,
                 "by": STR, "created_at": TIME},
                description="A run planned for later (run with at); it starts at due"),
    "RunPlanned": {"allOf": [ref("Plan"), obj({"state": {"const": "planned"}})]},
    "RunAcceptedOrPlanned": {"anyOf": [ref("RunAccepted"), ref("RunPlanned")]},
    "PlanCancelled": {"allOf": [ref("Plan"), obj({"state": {"const": "cancelled"}})]},
    "PingRecorded": obj({"job": STR, "run_id": INT, "state": RUN_STATE}, {"stray": BOOL},
                        description="The ping, on the watch's run (stray: no fire time "
                                    "waited for it; recorded on a run of its own)"),
    "Validation": obj({"valid": BOOL, "jobs": array(STR),
                       "problems": array(obj({"line": INT_OR_NULL, "message": STR},
                                             {"col": INT_OR_NULL}))}),
    "Health": obj({"status": STR}),
    "Ready": obj({"ready": BOOL}, {"role": STR_OR_NULL, "leader": STR_OR_NULL}),
    "Object": {"type": "object", "description": "an answer of its own shape (see the "
                                                "operation's summary)"},
}


# The schema of each route's successful answer (2xx), by "METHOD path"; a
# route not named answers an Object (its summary says what).
SUCCESS: dict[str, str] = {
    "GET /healthz": "Health", "GET /readyz": "Ready",
    "GET /api/v1/whoami": "Token", "GET /api/v1/tokens": "Tokens",
    "POST /api/v1/tokens": "TokenCreated", "DELETE /api/v1/tokens/{name}": "Revoked",
    "GET /api/v1/cluster": "Cluster", "GET /api/v1/nodes": "NodePage",
    "GET /api/v1/jobs": "JobPage", "GET /api/v1/jobs/{name}": "JobDetail",
    "GET /api/v1/jobs/{name}/explain": "Explain", "GET /api/v1/jobs/{name}/graph": "Graph",
    "GET /api/v1/graph": "Graph", "POST /api/v1/jobs/{name}/pause": "JobChanged",
    "POST /api/v1/jobs/{name}/resume": "JobChanged", "POST /api/v1/jobs/{name}/run":
        "RunAcceptedOrPlanned", "POST /api/v1/plans/{plan_id}/cancel": "PlanCancelled",
    "POST /api/v1/pings/{name}": "PingRecorded",
    "GET /api/v1/runs": "RunPage", "GET /api/v1/runs/{run_id}": "RunDetail",
    "GET /api/v1/backfills": "BackfillPage", "GET /api/v1/alerts": "AlertPage",
    "GET /api/v1/dead-letter": "DeadLetterPage", "GET /api/v1/pools": "Pools",
    "GET /api/v1/audit": "AuditPage", "POST /api/v1/validate": "Validation",
}

COMPONENTS.update({
    "JobPage": page("Job"), "RunPage": page("Run", gaps=array(ref("Gap"))),
    "NodePage": obj({"items": array(ref("Node"))}),
    "BackfillPage": page("Backfill"), "AlertPage": page("Alert"),
    "DeadLetterPage": page("DeadLetter"), "AuditPage": page("AuditEntry")})


def success_schema(method: str, path: str) -> str:
    return SUCCESS.get(f"{method} {path}", "Object")

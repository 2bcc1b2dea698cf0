"""Events for notifications, in the replicated state: the outbox.

``apply`` records an event when something an operator may want to hear of
happens (a run failed after its last retry, is retried, was skipped, could
not be launched, a job recovered, a run was dead-lettered, an SLA was
missed). The event id is the row id, the same on every node: receivers
dedupe on it. Delivery (who receives which event, sending it, retrying) is
the runtime's (the leader's) and is recorded back through the log, so a
change of leader neither loses an event nor, past the receiver's dedupe,
doubles it: at least once.

Kinds: ``failed``, ``retrying``, ``skipped``, ``launch_failed``,
``recovered``, ``dead_lettered`` and ``sla_<kind>`` (``sla_start_within``,
``sla_finish_within``, ``sla_finish_by``, ``sla_max_runtime``,
``sla_stale_after``, ``sla_failure_tolerance``).
"""

from __future__ import annotations

import json
from typing import Any

import apsw

from . import seq as SEQ

RUN_KINDS = ("failed", "retrying", "skipped", "launch_failed", "recovered", "dead_lettered")
SLA_KINDS = ("start_within", "finish_within", "finish_by", "max_runtime", "stale_after",
             "failure_tolerance")
KINDS = RUN_KINDS + tuple(f"sla_{k}" for k in SLA_KINDS)


def emit(conn: apsw.Connection, kind: str, *, job: str, at: float, fire_time: int | None = None,
         run_id: int | None = None, data: dict[str, Any] | None = None) -> int:
    """Record one event (inside apply: deterministic); its id."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    # Ids only grow, even once the newest events were pruned (a bare rowid
    # would be given again: receivers dedupe on it and would drop the new
    # event). The last id given is kept in meta, replicated with the rest.
    event_id = SEQ.peek(conn, "event_seq", "events", "event_id")
    conn.execute("INSERT INTO events(event_id, kind, job, fire_time, run_id, at, data) "
                 "VALUES(?,?,?,?,?,?,?)",
                 (event_id, kind, job, fire_time, run_id, at,
                  json.dumps(data or {}, sort_keys=True, separators=(",", ":"))))
    SEQ.taken(conn, "event_seq", event_id)
    return event_id


def get(conn: apsw.Connection, event_id: int) -> dict[str, Any] | None:
    for row in conn.execute("SELECT event_id, kind, job, fire_time, run_id, at, data, "
                            "delivered FROM events WHERE event_id=?", (event_id,)):
        return _view(row)
    return None


def undelivered(conn: apsw.Connection, limit: int = 100) -> list[dict[str, Any]]:
    """Events whose delivery is not done yet, oldest first."""
    return [_view(r) for r in conn.execute(
        "SELECT event_id, kind, job, fire_time, run_id, at, data, delivered FROM events "
        "WHERE delivered=0 ORDER BY event_id LIMIT ?", (limit,))]


def _view(row: tuple[Any, ...]) -> dict[str, Any]:
    eid, kind, job, ft, rid, at, data, delivered = row
    return {"event_id": eid, "kind": kind, "job": job, "fire_time": ft, "run_id": rid,
            "at": at, "data": json.loads(data), "delivered": bool(delivered)}


def prune(conn: apsw.Connection, before
: float) -> None:
    """Delivered events older than ``before`` (with the run history)."""
    conn.execute("DELETE FROM events WHERE delivered=1 AND at < ?", (before,))

"""Delivery attempts of events (state/events.py), as the leader recorded them
through the log (``DeliveryResult``): who was tried, which attempt, when, how
it went. An event is ``delivered`` once the leader says every recipient is
settled (sent, or given up). A leader change loses at most the attempts in
flight: the next leader sends them again (receivers dedupe on the event id).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import apsw

from ..decisions.delivery import Attempt

MAX_ERROR = 500     # characters of an error kept per attempt
MAX_BATCH = 1000    # attempts or events in one DeliveryResult


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def well_formed(attempts: object, done: object) -> bool:
    """A DeliveryResult's lists have the shapes ``record`` reads."""
    return (isinstance(attempts, list) and isinstance(done, list)
            and len(attempts) <= MAX_BATCH and len(done) <= MAX_BATCH
            and all(_int(e) for e in done)
            and all(isinstance(a, list) and len(a) == 6 and _int(a[0])
                    and isinstance(a[1], str) and _int(a[2]) and isinstance(a[3], bool)
                    and isinstance(a[4], bool) and isinstance(a[5], str) for a in attempts))


def record(conn: apsw.Connection, at: float, leader: str, attempts: list[Any],
           done: list[Any]) -> dict[str, int]:
    """Apply one DeliveryResult: ``attempts`` as [event_id, notifier, attempt,
    ok, final, error]; ``done``: event ids now delivered. An attempt already
    recorded (a proposal retried) is kept as it was."""
    added = 0
    for event_id, notifier, attempt, ok, final, error in attempts[:MAX_BATCH]:
        if not _event_exists(conn, event_id):
            continue  # pruned meanwhile
        conn.execute("INSERT OR IGNORE INTO deliveries(event_id, notifier, attempt, at, ok, "
                     "final, error, leader) VALUES(?,?,?,?,?,?,?,?)",
                     (int(event_id), str(notifier), int(attempt), at, int(bool(ok)),
                      int(bool(ok) or bool(final)), str(error or "")[:MAX_ERROR], leader))
        added += conn.changes()  # this row only (not the trigger's notify_outcomes)
    marked = 0
    for event_id in done[:MAX_BATCH]:
        before = conn.total_changes()
        conn.execute("UPDATE events SET delivered=1 WHERE event_id=? AND delivered=0",
                     (int(event_id),))
        marked += conn.total_changes() - before
    return {"attempts": added, "delivered": marked}


def _event_exists(conn: apsw.Connection, event_id: Any) -> bool:
    for _ in conn.execute("SELECT 1 FROM events WHERE event_id=?", (int(event_id),)):
        return True
    return False


def attempts_of(conn: apsw.Connection, event_ids: Iterable[int]) -> dict[int, list[Attempt]]:
    out: dict[int, list[Attempt]] = {}
    ids = [int(e) for e in event_ids]
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        marks = ",".join("?" * len(chunk))
        for eid, notifier, attempt, at, ok, final in conn.execute(
                f"SELECT event_id, notifier, attempt, at, ok, final FROM deliveries "
                f"WHERE event_id IN ({marks}) ORDER BY event_id, notifier, attempt", chunk):
            out.setdefault(eid, []).append(Attempt(notifier, attempt, at, bool(ok),
                                                   bool(final)))
    return out


def listing(conn: apsw.Connection, *, job: str | None = None, limit: int = 50,
            before: int | None = None) -> list[dict[str, Any]]:
    """The newest events (before event id ``before``), each with its attempts."""
    where: list[str] = []
    params: list[Any] = []
    if job is not None:
        where.append("job=?")
        params.append(job)
    if before is not None:
        where.append("event_id<?")
        params.append(before)
    sql = ("SELECT event_id, kind, job, fire_time, run_id, at, data, delivered FROM events"
           + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY event_id DESC LIMIT ?")
    out: list[dict[str, Any]] = []
    for eid, kind, j, ft, rid, at, data, delivered in list(conn.execute(sql, params + [limit])):
        out.append({"event_id": eid, "kind": kind, "job": j, "fire_time": ft, "run_id": rid,
                    "at": at, "data": json.loads(data), "delivered": bool(delivered),
                    "attempts": [
                        {"notifier": n, "attempt": a, "at": t, "ok": bool(ok),
                         "final": bool(fin), "error": err, "leader": ldr}
                        for n, a, t, ok, fin, err, ldr in conn.execute(
                            "SELECT notifier, attempt, at, ok, final, error, leader FROM "
                            "deliveries WHERE event_id=? ORDER BY at, notifier, attempt",
                            (eid,))]})
    return out


def prune(conn: apsw.Connection) -> None:

    """The attempts of events pruned (events.prune)."""
    conn.execute("DELETE FROM deliveries WHERE event_id NOT IN (SELECT event_id FROM events)")

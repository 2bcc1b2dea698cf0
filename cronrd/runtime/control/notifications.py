"""The control socket's notification requests (control/handlers.py routes them):
``notifications`` (events and their delivery attempts, from the replicated
state: the same on every node) and ``notify_test`` (a test event sent at once
through this node's notifier, nothing recorded)."""

from __future__ import annotations

import secrets

from ...config import Config
from ...errors import RequestError
from ...schedule import iso_utc
from ...state import deliveries as DL
from ...ops import workflows as W
from ..clock import Clock
from ..notify import senders as N


def notifications(conn, config: Config, req: W.Notifications) -> dict:
    rows = DL.listing(conn, job=req.job, limit=req.limit, before=req.before)
    for r in rows:
        r["at"] = iso_utc(r["at"])
        r["fire_time"] = None if r["fire_time"] is None else iso_utc(r["fire_time"])
        for a in r["attempts"]:
            a["at"] = iso_utc(a["at"])
    n = config.notifications
    return {"events": rows,
            "notifiers": {name: {"type": x.type, "to": x.describe()}
                          for name, x in n.notifiers.items()},
            "default": [r.to_dict() for r in n.default]}


async def notify_test(config: Config, clock: Clock, req: W.NotifyTest) -> dict:
    name = req.name
    notifier = config.notifications.notifiers.get(name)
    if notifier is None:
        known = ", ".join(config.notifications.notifiers) or "none"
        raise RequestError(f"no notifier named {name!r} in {config.path or 'the config'} "
                           f"(defined: {known}); add it under notifiers: and restart the "
                           "daemon")
    now = clock.now()
    event = {"event_id": f"test-{secrets.token_hex(6)}", "kind": "failed",
             "job": req.job, "fire_time": int(now),
             "run_id": None, "at": now,
             "data": {"state": "failed", "reason": "a test of the notifier (cronrd notify "
                                                   "test): nothing failed"}}
    start = clock.monotonic()
    out = {"notifier": name, "type": notifier.type, "to": notifier.describe(),
           "event_id": event["event_id"]}
    try:
        note = await N.send(notifier, event, config.node_id, now, test=True)
    except N.SendError as exc:
        return {**out, "ok": False, "error": str(exc),
                "seconds": round(clock.monotonic() - start, 3)}
    return {**out, "ok": True, "result": note, "seconds": round(clock.monotonic() - start, 3)}

"""The calendars in force (``SetCalendars``): the SQL of ``calendars``.

The leader replicates its daemon config's calendars resolved to days
(config/calendars.py), so every node, and every later leader, judges a
fire time by the same days: ``next`` and ``explain`` on a follower say
what the leader does."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

import apsw

from ..schedule import Schedule, Trigger, make_trigger, parse_schedule
from ..schedule.calendars import Calendar, CalendarTrigger

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from ..jobspec.model import JobSpec

MAX_CALENDARS = 100
MAX_BODY = 1 << 20   # bytes of one calendar's days


def canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def check(calendars: object) -> dict[str, dict[str, Any]] | None:
    """``calendars`` as a SetCalendars carries them, or None if malformed."""
    if not isinstance(calendars, dict) or len(calendars) > MAX_CALENDARS:
        return None
    out = {}
    for name, body in calendars.items():
        if not isinstance(name, str) or not isinstance(body, dict) or \
                len(canonical(body)) > MAX_BODY:
            return None
        try:
            Calendar.from_dict(name, body)
        except (TypeError, ValueError, IndexError):
            return None
        out[name] = body
    return out


def bodies(conn: apsw.Connection) -> dict[str, str]:
    """name -> canonical JSON body."""
    return {name: body for name, body in conn.execute(
        "SELECT name, body FROM calendars ORDER BY name")}


def set_all(conn: apsw.Connection, calendars: Mapping[str, Mapping[str, Any]]) -> bool:
    """Replace the calendars; whether anything changed."""
    new = {name: canonical(body) for name, body in calendars.items()}
    if new == bodies(conn):
        return False
    conn.execute("DELETE FROM calendars")
    for name in sorted(new):
        conn.execute("INSERT INTO calendars(name, body) VALUES(?,?)", (name, new[name]))
    return True


def in_force(conn: apsw.Connection) -> dict[str, Calendar]:
    return {name: Calendar.from_dict(name, json.loads(body))
            for name, body in bodies(conn).items()}


def job_trigger(conn: apsw.Connection, spec: "JobSpec", schedule: Schedule | None = None,
                zone: "str | ZoneInfo | None" = None, default_tz: str = "UTC") -> Trigger:
    """The trigger of a job's fire times: its schedule in its zone, under
    its calendar (the calendars in force) if it has one. ScheduleError for
    a schedule that does not parse."""
    schedule = schedule or parse_schedule(spec.schedule)
    trigger = make_trigger(schedule, zone or spec.timezone or default_tz)
    if spec.calendar is None:
        return trigger
    return CalendarTrigger(trigger, spec.calendar, in_force(conn))

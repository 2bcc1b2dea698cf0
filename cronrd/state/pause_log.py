"""The history of pauses (the ``pause_log`` table): every pause and resume
of a job, and of the maintenance pause of every job (name ""), kept after
the resume so that "why did it not run at T?" names who paused it and why
for a past T too (the ``pauses`` table holds only the pauses in force).

``record`` and ``prune`` are called by ``apply`` (machine.py), inside its
transaction, with the command's own time; ``in_force_at`` is a read.
"""

from __future__ import annotations

from typing import Any

import apsw

from ..schedule import iso_utc


def record(conn: apsw.Connection, name: str, paused: bool, note: str, by: str,
           at: float) -> None:
    """Log a pause (``paused``) or a resume of job ``name`` at ``at``."""
    conn.execute("INSERT INTO pause_log(name, paused, note, by, at) VALUES(?,?,?,?,?)",
                 (name, int(bool(paused)), str(note), str(by), at))


def prune(conn: apsw.Connection, before: float) -> None:
    """Forget events older than ``before``, except each name's newest one:
    a job paused a year ago and still paused keeps the record of who did."""
    conn.execute("DELETE FROM pause_log WHERE at < ? AND event_id NOT IN "
                 "(SELECT MAX(event_id) FROM pause_log GROUP BY name)", (before,))


def _event(row: tuple[Any, ...]) -> dict[str, Any]:
    paused, note, by, at = row
    return {"paused": bool(paused), "note": note, "by": by, "at": iso_utc(at)}


def in_force_at(conn: apsw.Connection, name: str, t: float) -> dict[str, Any] | None:
    """The pause of ``name`` in force at ``t``: {note, by, at (when it was
    paused), until (when it was resumed, or None)}; None when it was not
    paused then (or the log does not reach back that far)."""
    last = None
    for row in conn.execute("SELECT paused, note, by, at FROM pause_log WHERE name=? AND "
                            "at <= ? ORDER BY at DESC, event_id DESC LIMIT 1", (name, t)):
        last = _event(row)
    if last is None or not last["paused"]:
        return None
    until = None
    for (at,) in conn.execute("SELECT at FROM pause_log WHERE name=? AND at > ? AND paused=0 "
                              "ORDER BY at, event_id LIMIT 1", (name, t)):
        until = iso_utc(at)
    return {"note": last["note"], "by": last["by"], "at": last["at"], "until": until}


def history(conn: apsw.Connection, name: str, limit: int = 20) -> list[dict[str, Any]]:

    """The newest ``limit`` pause events of ``name``, newest first."""
    return [_event(row) for row in conn.execute(
        "SELECT paused, note, by, at FROM pause_log WHERE name=? ORDER BY at DESC, "
        "event_id DESC LIMIT ?", (name, limit))]

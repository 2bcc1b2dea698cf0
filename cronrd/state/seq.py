"""Ids that only grow: runs, alerts and events are named by an integer id
that operators and receivers act on (`cronrd cancel 42`, `cronrd alerts
ack 7`, a webhook's event id). SQLite gives a bare INTEGER PRIMARY KEY the
largest id plus one, so once the newest rows were pruned an id would be given
again, to another run or alert. The last id given of each kind is kept in
``meta`` (replicated with the state, deterministic inside apply)."""

from __future__ import annotations

import apsw


def peek(conn: apsw.Connection, key: str, table: str, column: str) -> int:
    """The id the next row of ``table`` gets (``key``: its meta counter)."""
    (largest,), = conn.execute(f"SELECT COALESCE(MAX({column}), 0) FROM {table}")
    given = next(iter(conn.execute("SELECT value FROM meta WHERE key=?", (key,))), (0,))[0]
    return max(int(largest), int(given or 0)) + 1


def taken(conn: apsw.Connection, key: str, value: int) -> None:
    """Record that id ``value`` was given."""
    conn.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET value=MAX(excluded.value, COALESCE(value, 0))", (key, value))

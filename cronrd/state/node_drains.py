"""Nodes an admin drained (table node_drains; the API's POST
/api/v1/nodes/NODE/drain): placement gives them no new runs until undrained;
their running runs finish. Unlike a node's own ``draining`` (announced while
it stops), a drain outlives restarts of the node. Pure: the command says when."""

from __future__ import annotations

from typing import Any

import apsw

from . import commands as C

MAX_NOTE = 1000


def apply(conn: apsw.Connection, cmd: C.DrainNode) -> str | None:
    """Drain or undrain; or the reason it is refused (nothing changed)."""
    if len(cmd.note) > MAX_NOTE:
        return f"the note is longer than {MAX_NOTE} characters; say it shorter"
    if cmd.drained:
        if not any(conn.execute("SELECT 1 FROM nodes WHERE node=?", (cmd.node,))) and \
                cmd.node != cmd.origin:
            return (f"no node {cmd.node!r} in the cluster; GET /api/v1/nodes lists the "
                    "nodes")
        conn.execute("INSERT INTO node_drains(node, at, by, note) VALUES(?,?,?,?) "
                     "ON CONFLICT(node) DO UPDATE SET at=excluded.at, by=excluded.by, "
                     "note=excluded.note", (cmd.node, cmd.at, cmd.by, cmd.note))
        return None
    conn.execute("DELETE FROM node_drains WHERE node=?", (cmd.node,))
    return None


def drained(conn: apsw.Connection) -> dict[str, dict[str, Any]]:

    """node -> {at, by, note} of every drained node."""
    return {node: {"at": at, "by": by, "note": note} for node, at, by, note in conn.execute(
        "SELECT node, at, by, note FROM node_drains ORDER BY node")}

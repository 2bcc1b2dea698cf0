"""Applying the commands about access: denials, join tokens, API tokens,
drains and the audit record.

A part of the state machine (machine.py), which is one of these
classes each: the methods use its connection and one another."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import commands as C
from . import tokens
from . import node_drains
from ..errors import Refused
from .apply_common import ApplyBase

if TYPE_CHECKING:
    from .effects import Effect


class AccessApply(ApplyBase):
    """The access part of StateMachine."""

    def _deny(self, kind: str, value: str, reason: str, at: float) -> None:
        self.conn.execute("INSERT INTO denied(kind, value, at, reason) VALUES(?,?,?,?) "
                          "ON CONFLICT(kind, value) DO UPDATE SET at=excluded.at, "
                          "reason=excluded.reason", (kind, value, at, reason))


    def _apply_deny(self, index: int, cmd: C.Deny, effects: list[Effect]) -> dict[str, Any]:
        if cmd.kind not in ("node", "serial") or not cmd.value:
            raise Refused(f"deny: kind must be node or serial with a value (got "
                          f"{cmd.kind!r}, {cmd.value!r})")
        if cmd.lift:
            self.conn.execute("DELETE FROM denied WHERE kind=? AND value=?",
                              (cmd.kind, cmd.value))
            return {"lifted": bool(self.conn.changes())}
        self._deny(cmd.kind, cmd.value, cmd.reason, cmd.at)
        return {"denied": cmd.value}


    def _apply_join_token(self, index: int, cmd: C.JoinToken, effects: list[Effect]) -> dict[str, Any]:
        if not cmd.token_hash:
            self.conn.execute("DELETE FROM join_tokens WHERE node=?", (cmd.node,))
            return {"withdrawn": bool(self.conn.changes())}
        self.conn.execute("INSERT INTO join_tokens(node, hash, addr, at) VALUES(?,?,?,?) "
                          "ON CONFLICT(node) DO UPDATE SET hash=excluded.hash, "
                          "addr=excluded.addr, at=excluded.at",
                          (cmd.node, cmd.token_hash, cmd.addr, cmd.at))
        return {"node": cmd.node}


    def _apply_create_token(self, index: int, cmd: C.CreateToken, effects: list[Effect]) -> dict[str, Any]:
        problem = tokens.create(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"name": cmd.name, "role": cmd.role}


    def _apply_revoke_token(self, index: int, cmd: C.RevokeToken, effects: list[Effect]) -> dict[str, Any]:
        problem = tokens.revoke(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"revoked": cmd.name}


    def _apply_start_session(self, index: int, cmd: C.StartSession, effects: list[Effect]) -> dict[str, Any]:
        problem = tokens.start_session(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"name": cmd.name, "expires_at": cmd.expires_at}


    def _apply_end_session(self, index: int, cmd: C.EndSession, effects: list[Effect]) -> dict[str, Any]:
        return {"ended": tokens.end_session(self.conn, cmd)}


    def _apply_drain_node(self, index: int, cmd: C.DrainNode, effects: list[Effect]) -> dict[str, Any]:
        problem = node_drains.apply(self.conn, cmd)
        if problem:
            raise Refused(problem)
        return {"node": cmd.node, "drained": cmd.drained}


    def _apply_audit(self, index: int, cmd: C.Audit, effects: list[Effect]) -> dict[str, Any]:
        self.conn.execute(
            "INSERT INTO audit(at, node, uid, user, pid, command, target, allowed, detail) "
            "VALUES(?,?,?,?,?,?,?,?,?)",
            (cmd.at, cmd.node, cmd.uid, cmd.user, cmd.pid, cmd.command, cmd.target,
             int(cmd.allowed), cmd.detail))
        return {"audit_id": self.conn.last_insert_rowid()}

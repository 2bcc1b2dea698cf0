"""The control commands about the cluster's members: drain, members, add,
revoke-cert, remove, transfer-leader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...state import commands as C
from .access import Caller, check_admin
from .server import arg

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged


class MembershipRequests(_Host):
    """The membership part of Handlers (handlers.py): its state, log and guard."""

    async def h_node_drain(self, args: dict, caller: Caller) -> dict:
        """Drain (``drained``) or undrain ``node``: no new runs are placed
        there; its running runs finish. Root, the daemon's uid, an admin token."""
        node = arg(args, "node", str, required=True)
        drained = bool(arg(args, "drained", bool, True))
        command = "node_drain" if drained else "node_undrain"
        verb = "drain" if drained else "undrain"
        what = (f"POST /api/v1/nodes/{node}/{verb}" if caller.token is not None
                else f"cronrd cluster {verb} {node}")
        await self._authorize(caller, command, node, what, lambda: check_admin(caller, what),
                              change=False)
        self.members.members()  # one host: "runs without a cluster", nothing to drain to
        await self._audit(caller, command, node, True)
        return await self.log.propose(C.DrainNode(
            origin=self.config.node_id, node=node, drained=drained,
            note=arg(args, "note", str, ""), by=caller.describe(), at=self.clock.now()))

    async def h_cluster_members(self, args: dict) -> dict:
        return self.members.members()

    async def h_cluster_add(self, args: dict) -> dict:
        return await self.members.admin("cluster_add", {
            "node": arg(args, "node", str, required=True),
            "address": arg(args, "address", str, required=True),
            "token": bool(arg(args, "token", bool, False))})

    async def h_cluster_revoke_cert(self, args: dict) -> dict:
        return await self.members.admin("cluster_revoke_cert", {
            "serial": arg(args, "serial", str, required=True),
            "reason": arg(args, "reason", str, "revoked by the operator")})

    async def h_cluster_remove(self, args: dict) -> dict:
        return await self.members.admin("cluster_remove", {
            "node": arg(args, "node", str, required=True)})

    async def h_cluster_transfer_leader(self, args: dict) -> dict:
        return await self.members.admin("cluster_transfer_leader", {
            "node": arg(args, "node", str)})

"""The control commands about the cluster's members: drain, members, add,
revoke-cert, remove, transfer-leader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...ops import admin as A
from ...state import commands as C
from .access import Caller, check_admin

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged


class MembershipRequests(_Host):
    """The membership part of Handlers (handlers.py): its state, log and guard."""

    async def h_node_drain(self, req: A.DrainNode, caller: Caller) -> Any:
        """Drain (``drained``) or undrain ``node``: no new runs are placed
        there; its running runs finish. Root, the daemon's uid, an admin token."""
        node, drained = req.node, req.drained
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
            note=req.note, by=caller.describe(), at=self.clock.now()))

    async def h_cluster_members(self, req: A.ClusterMembers) -> dict[str, Any]:
        return self.members.members()

    # The changes go to the cluster's members (over the peer port to the
    # leader) as the members' own JSON objects: those are not requests here.
    async def h_cluster_add(self, req: A.AddMember) -> dict[str, Any]:
        return await self.members.admin("cluster_add", {
            "node": req.node, "address": req.address, "token": req.token})

    async def h_cluster_revoke_cert(self, req: A.RevokeCert) -> dict[str, Any]:
        return await self.members.admin("cluster_revoke_cert", {
            "serial": req.serial, "reason": req.reason})

    async def h_cluster_remove(self, req: A.RemoveMember) -> dict[str, Any]:
        return await self.members.admin("cluster_remove", {"node": req.node})

    async def h_cluster_transfer_leader(self, req: A.TransferLeader) -> dict[str, Any]:
        return await self.members.admin("cluster_transfer_leader", {"node": req.node})

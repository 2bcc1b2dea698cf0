"""Requests that only the leader can carry out: ``cronrd cluster add |
remove | revoke-cert | transfer-leader``, and handing leadership over
before the leader stops.

Any node takes them (``request``): a follower sends them to the leader as
the ``cluster_*`` peer requests (``serve``), which only voters may make. The
leader checks them and changes the membership through Raft, with the
records that go with it (join tokens, denied ids and serials, node records).
``Cluster`` (cluster/raft_cluster.py) owns one and hands it what it needs.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Awaitable, Callable, Mapping

from ...config import ClusterConfig, format_address, is_loopback, parse_address
from ...errors import CronrdError, NotLeader, ProposalDropped, RequestError, UsageError
from ...ids import node_id_problem
from ...raft.tracker import most_caught_up
from ...raft.types import ConfChangeType
from ...state import commands as C
from ..clock import Clock
from ..peers.rpc import PeerError, PeerRPC
from ..log.replicated import RaftLog, local_error
from ..log.raft_node import RaftNode

log = logging.getLogger("cronrd.cluster")

TRANSFER_TIMEOUT = 5.0   # seconds a leadership transfer may take


def hex_serial(raw: object) -> str:
    """A certificate serial as the transport records it (lower-case hex, no
    leading zeros), from what an operator types: ``0x`` and colons allowed."""
    text = str(raw or "").strip().lower().replace(":", "")
    try:
        return format(int(text[2:] if text.startswith("0x") else text, 16), "x")
    except ValueError:
        raise UsageError(f"invalid certificate serial {raw!r}: give it in "
                         "hex, as `openssl x509 -noout -serial` prints it") from None


class ClusterAdmin:
    """The ``cronrd cluster`` requests. ``require_voter`` is the peer
    requests' check (PeerTrust's), ``healthy`` whether a node answered this
    leader lately, ``peer_serials`` the transport's live map of the members'
    certificate serials, ``refresh_peers`` is called when the membership
    or the denied list changed."""

    def __init__(self, node_id: str, cc: ClusterConfig, clock: Clock, node: RaftNode,
                 log: RaftLog, rpc: PeerRPC, peer_serials: Mapping[str, str],
                 require_voter: Callable[[str], None], healthy: Callable[[str], bool],
                 refresh_peers: Callable[[], None],
                 is_worker: Callable[[str], bool] = lambda node: False):
        self.node_id = node_id
        self.is_worker = is_worker   # a registered worker agent (cluster/worker_hub.py)?
        self.cc = cc
        self.clock = clock
        self.node = node
        self.log = log
        self.rpc = rpc
        self.peer_serials = peer_serials
        self.require_voter = require_voter
        self.healthy = healthy
        self.refresh_peers = refresh_peers
        self.methods: dict[str, Callable[[dict], Awaitable[dict]]] = {
            "cluster_add": self.add, "cluster_remove": self.remove,
            "cluster_transfer_leader": self.transfer_leader,
            "cluster_revoke_cert": self.revoke_cert}

    async def request(self, method: str, args: dict) -> dict:
        """``cluster add|remove|revoke-cert|transfer-leader`` from any node."""
        if not self.node.is_leader:
            leader = self.node.leader
            if not leader:
                raise NotLeader(None)
            try:
                return await self.rpc.call(leader, method, {**args, "_method": method},
                                           timeout=30.0)
            except PeerError as exc:
                raise local_error(exc) from None
        return await self._method(method)(args)

    async def serve(self, frm: str, args: dict) -> dict:
        """The ``cluster_*`` peer requests: a follower's ``request``."""
        self.require_voter(frm)
        method = self._method(args.pop("_method", None))
        if not self.node.is_leader:
            raise NotLeader(self.node.leader or None)
        return await method(args)

    def _method(self, method: object) -> Callable[[dict], Awaitable[dict]]:
        if method not in self.methods:
            raise RequestError(f"unknown membership request {method!r}; run the same cronrd "
                               "version on every node")
        return self.methods[method]

    async def add(self, args: dict) -> dict:
        node, address = args.get("node"), args.get("address")
        problem = node_id_problem(node)
        if problem:
            raise UsageError(problem)
        assert isinstance(node, str)  # node_id_problem refused anything else
        try:
            address = format_address(parse_address(str(address)))
        except ValueError as exc:
            raise UsageError(f"invalid address {address!r}: {exc}; use HOST:PORT") from None
        if self.cc.insecure and not self.cc.insecure_network \
                and not is_loopback(parse_address(address)[0]):
            raise UsageError(f"refusing to add {node} at {address}: this cluster runs with "
                             "insecure: true (no TLS), which is allowed only on loopback "
                             "addresses; configure tls (`cronrd cluster init-tls`) or "
                             "insecure: {allow_network: true} on every member")
        conf = self.node.raft.conf
        if node in conf.voters or node in conf.learners:
            raise RequestError(f"node {node} is already a member; `cronrd cluster members` "
                               "lists them")
        now = self.clock.now()
        await self.log.propose_as_leader(C.Deny(kind="node", value=node, reason="added again",
                                                at=now, lift=True))
        if args.get("token"):
            # The operator's word travels with the node: it is admitted only
            # when it presents this token (once), not for holding a certificate.
            token = secrets.token_urlsafe(24)
            await self.log.propose_as_leader(C.JoinToken(
                node=node, token_hash=hashlib.sha256(token.encode()).hexdigest(),
                addr=address, at=now))
            return {"node": node, "address": address, "role": "expected", "token": token,
                    "hint": f"start {node} with cluster: {{join: {{token: {token}}}, "
                            "initial_members: {...}}; the token works once, and only for "
                            f"{node}; it becomes a learner when it connects"}
        await self.log.propose_as_leader(C.NodeInfo(node=node, state="joining", addr=address,
                                                    tags=(), at=now))
        self.refresh_peers()
        # Applying it makes every node snapshot (see RaftNode._handle): the new
        # member starts from a snapshot, which carries the membership.
        await self.node.change_membership(ConfChangeType.ADD_LEARNER, node)
        self.refresh_peers()
        return {"node": node, "address": address, "role": "learner",
                "hint": "it runs jobs once it has caught up and announced itself; it is "
                        "promoted to voter when that keeps the voters odd and at most 5"}

    async def remove(self, args: dict) -> dict:
        node = args.get("node")
        conf = self.node.raft.conf
        if node not in conf.voters and node not in conf.learners:
            if isinstance(node, str) and self.is_worker(node):
                # A worker agent: no membership change, its record and name go
                # (denied: its certificate is refused from now on), its runs are lost.
                await self.log.propose_as_leader(C.RemoveNode(node=node, at=self.clock.now()))
                self.refresh_peers()
                return {"removed": node, "worker": True}
            raise RequestError(f"node {node!r} is not a member or a worker; `cronrd cluster "
                               "members` lists them")
        if node == self.node_id:
            new = await self.transfer_leader({"node": None})
            return await self.rpc.call(new["leader"], "cluster_remove",
                                       {"_method": "cluster_remove", "node": node},
                                       timeout=30.0)
        if node in conf.voters and len(conf.voters) == 1:
            raise RequestError(f"node {node} is the only voter; add another node first")
        await self.node.change_membership(ConfChangeType.REMOVE, node)
        await self.log.propose_as_leader(C.RemoveNode(node=node, at=self.clock.now(),
                                                      serial=self.peer_serials.get(node, "")))
        self.refresh_peers()
        return {"removed": node}

    async def revoke_cert(self, args: dict) -> dict:
        serial = hex_serial(args.get("serial"))
        await self.log.propose_as_leader(C.Deny(
            kind="serial", value=serial, at=self.clock.now(),
            reason=str(args.get("reason") or "revoked by the operator")))
        self.refresh_peers()
        return {"revoked": serial}

    async def transfer_leader(self, args: dict) -> dict:
        raft = self.node.raft
        to = args.get("node")
        voters = [v for v in raft.conf.voters if v != self.node_id]
        if to is None:
            if not voters:
                raise RequestError("there is no other voter to hand leadership to")
            to = most_caught_up([v for v in voters if self.healthy(v)] or voters, raft.prs)
        elif to == self.node_id:
            return {"leader": self.node_id}
        elif to not in voters:
            raise RequestError(f"node {to!r} is not a voter; `cronrd cluster members` "
                               "lists the voters")
        self.node.transfer_leadership(to)
        if await self.node.changes.until(
                lambda: not self.node.is_leader and bool(self.node.leader), TRANSFER_TIMEOUT):
            return {"leader": self.node.leader}
        raise ProposalDropped(f"leadership did not move to {to} within 5s (is it caught "
                              "up and reachable?); the leader is still "
                              f"{self.node.leader or 'unknown'}")

    async def transfer_before_stop(self) -> None:
        """SIGTERM on the leader: hand leadership over before exiting."""
        if not self.node.is_leader or not any(
                self.healthy(v) for v in self.node.raft.conf.voters if v != self.node_id):
            return  # nobody to hand over to
        try:
            res = await self.transfer_leader({"node": None})
            log.info("event=leadership_transferred to=%s", res["leader"])
        except CronrdError as exc:
            log.warning("event=leadership_transfer_failed error=\"%s\"", exc)

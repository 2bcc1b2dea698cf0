"""Who may speak on the peer port (DESIGN.md, guarantee 6: "Nobody gets in").

``PeerTrust`` decides, for the transport, whether an authenticated peer may
talk to this node: members (as far as this node knows), a node whose
addition is in progress, the members a joining node was told of, and a node
that presents the join token it was added with. Denied ids and certificate
serials are refused whatever else holds. A member added while this node
lagged is heard once a voter it knows vouches for it. The peer requests'
own checks (only members ask; membership changes only from voters) are here
too. ``Cluster`` (cluster/raft_cluster.py) owns one and hands it what it needs.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from typing import Awaitable, Callable, Mapping

import apsw

from ...config import ClusterConfig
from ...errors import CronrdError, PermissionDenied, Refused, RequestError
from ...raft.types import ConfChangeType
from ...state import commands as C
from ...state import queries as Q
from ..clock import Clock
from ..peers.rpc import PeerRPC
from ..log.replicated import RaftLog
from ..log.raft_node import RaftNode
from ..tasks import TaskSet

log = logging.getLogger("cronrd.cluster")

VOUCH_INTERVAL = 2.0     # seconds between asking the members about one unknown node
JOIN_TOKEN_TTL = 86400.0  # seconds a join token works
REFUSED_EVERY = 60.0      # seconds between log lines about one joiner too old


class PeerTrust:
    """Who may speak to this node, and the vouching and admitting that
    decision starts. ``peer_serials`` is the transport's live map of the
    serials the members' certificates had; ``refresh_peers`` is called once
    a joiner's record and again once its learner are in."""

    def __init__(self, node_id: str, cc: ClusterConfig, clock: Clock, conn: apsw.Connection,
                 node: RaftNode, log: RaftLog, rpc: PeerRPC, peer_serials: Mapping[str, str],
                 refresh_peers: Callable[[], None],
                 check_joiner: Callable[[str], Awaitable[None]] | None = None):
        self.node_id = node_id
        self.cc = cc
        self.clock = clock
        self.conn = conn
        self.node = node
        self.log = log
        self.rpc = rpc
        self.peer_serials = peer_serials
        self.refresh_peers = refresh_peers
        self.check_joiner = check_joiner   # refuses a joiner too old (cluster/versions.py)
        self.stopping = False
        self._requests = TaskSet("cluster")  # vouching, admitting a joiner
        self._vouch_asked: dict[str, float] = {}
        self._admitting: set[str] = set()
        self._refused_said: dict[str, float] = {}   # joiners too old: when last logged

    async def close(self) -> None:
        self.stopping = True
        await self._requests.close()

    def _in_conf(self) -> bool:
        conf = self.node.raft.conf
        return self.node_id in conf.voters or self.node_id in conf.learners

    def authorize(self, peer: str, info: dict | None = None, ask: bool = True) -> str | None:
        """Why ``peer`` may not speak to this node, or None if it may: a
        member (as far as this node knows, see Raft.knows_member), the node
        whose addition is in progress (its "joining" record), or, while this
        node is outside the configuration itself (joining), the members it
        was told of. A certificate signed by the cluster CA is not enough.
        An unknown id makes this node ask the members it knows (vouching):
        a member added while this node lagged is admitted once one of the
        voters it knows confirms it. Denied ids and certificate serials (removed
        nodes, rotated certificates) are refused whatever else holds, and a
        node added with a join token is admitted only with that token."""
        info = info or {}
        denied = Q.denied(self.conn)
        serial = info.get("serial") or self.peer_serials.get(peer, "")
        if serial and serial in denied["serial"]:
            return (f"the certificate of {peer} (serial {serial}) is refused: "
                    f"{denied['serial'][serial]}; give it a new one (`cronrd cluster "
                    f"rotate-cert {peer} DIR`)")
        raft = self.node.raft
        if peer in denied["node"]:
            return (f"{peer} was removed from the cluster ({denied['node'][peer]}); to add it "
                    f"again run `cronrd cluster add {peer} ADDR` on a voter")
        if raft.knows_member(peer):
            return None
        if not self._in_conf() and peer in self.cc.members_dict():
            return None
        for row in Q.nodes(self.conn):
            if row["node"] == peer and row.get("state") == "joining":
                return None
        expected = Q.join_token(self.conn, peer)
        if expected is not None and self.clock.now() - expected["at"] > JOIN_TOKEN_TTL:
            return (f"the join token for {peer} expired (tokens work for "
                    f"{JOIN_TOKEN_TTL / 3600:.0f} hours); run `cronrd cluster add {peer} "
                    "ADDR --token` again for a new one")
        if expected is not None:
            token = info.get("token") or ""
            given = hashlib.sha256(token.encode()).hexdigest()
            if token and hmac.compare_digest(given, expected["hash"]):
                self._admit_joiner(peer, expected["addr"])
                return None
            return (f"{peer} was added with a join token and must present it (cluster: "
                    f"{{join: {{token: ...}}}} in its config){'; the token it gave is wrong' if token else ''}")
        if ask:
            self.ask_vouch(peer)
        return (f"{peer} is not a member of this cluster as far as {self.node_id} knows "
                f"(applied index {raft.applied}); a certificate from the cluster CA is not "
                "enough: add it with `cronrd cluster add` on a voter")

    # -- vouching -------------------------------------------------------------------
    def ask_vouch(self, peer: str) -> None:
        """Ask the voters about ``peer`` (at most every VOUCH_INTERVAL)."""
        now = self.clock.monotonic()
        if now - self._vouch_asked.get(peer, 0.0) < VOUCH_INTERVAL or self.stopping:
            return
        self._vouch_asked[peer] = now
        if len(self._vouch_asked) > 1024:  # bounded: forget the oldest askers
            for old in sorted(self._vouch_asked, key=self._vouch_asked.__getitem__)[:512]:
                del self._vouch_asked[old]
        self._requests.spawn(self._vouch(peer), f"vouch-{peer}")

    async def _vouch(self, peer: str) -> None:
        """Ask the other voters this node knows whether ``peer`` is a member;
        vouch for it when one of them says so."""
        raft = self.node.raft
        voters = [v for v in raft.conf.voters if v != self.node_id]
        if not self._in_conf():
            voters = [v for v in self.cc.members_dict() if v != self.node_id]  # joining
        if not voters:
            return
        answers = await asyncio.gather(*(self.rpc.call(v, "is_member", {"node": peer},
                                                       timeout=2.0) for v in voters),
                                       return_exceptions=True)
        def upto(yes: list) -> int | None:
            """The newest applied index among the answers that vouch (None: one
            of them, an older version, did not say): the vouch holds while
            this node is behind it (raft.vouch)."""
            idx = [a.get("applied") for a in yes]
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
                return None
            return max(idx)

        said = [a for a in answers if isinstance(a, dict) and a.get("voter") is True]
        if said:
            log.info("event=member_vouched node=%s as=voter", peer)
            raft.vouch(peer, voter=True, upto=upto(said))
            return
        # One voter's word suffices: it answers from its applied configuration,
        # so a "yes" means a committed entry added ``peer``. (A majority could
        # not be had: this node counts itself, and it is the one behind.)
        yes = [v for v, a in zip(voters, answers)
               if isinstance(a, dict) and a.get("member") is True]
        if yes:
            log.info("event=member_vouched node=%s by=%s hint=\"this node is behind on the "
                     "membership; it hears %s until it has caught up\"", peer,
                     ",".join(yes), peer)
            self.node.raft.vouch(peer, upto=upto([a for v, a in zip(voters, answers)
                                                  if v in yes]))

    # -- admitting joiners ----------------------------------------------------------
    def _admit_joiner(self, peer: str, addr: str) -> None:
        """A node presented the join token it was added with: the leader
        spends the token (one use) and makes it a learner."""
        if not self.node.is_leader or peer in self._admitting:
            return
        self._admitting.add(peer)

        async def admit() -> None:
            try:
                now = self.clock.now()
                # The joining record first (it admits the node from now on),
                # then its cronrd is asked whether it can apply the cluster's
                # version (cluster/versions.py), then the token is spent; the
                # learner is added here, or, if this leader goes, by the next
                # one (resume_join).
                await self.log.propose_as_leader(C.NodeInfo(node=peer, state="joining",
                                                            addr=addr, tags=(), at=now))
                self.refresh_peers()
                if not await self._check_version(peer):
                    return
                await self.log.propose_as_leader(C.JoinToken(node=peer, token_hash="",
                                                             addr="", at=now))
                self.refresh_peers()
                await self.node.change_membership(ConfChangeType.ADD_LEARNER, peer)
                self.refresh_peers()
                log.info("event=joined_with_token node=%s addr=%s", peer, addr)
            except CronrdError as exc:
                log.warning("event=join_failed node=%s error=\"%s\"", peer, exc)
            finally:
                self._admitting.discard(peer)
        if self._requests.spawn(admit(), f"admit-{peer}") is None:
            self._admitting.discard(peer)  # stopping

    async def resume_join(self, node: str) -> None:
        """The leader's duty for a joining record without membership: add its
        learner, unless that is under way here or already in the log."""
        if node in self._admitting or self.node.raft.knows_member(node):
            return
        self._admitting.add(node)
        try:
            if not await self._check_version(node):
                return
            log.info("event=join_resumed node=%s", node)
            token = Q.join_token(self.conn, node)
            if token is not None and token.get("hash"):  # spent now (one use)
                await self.log.propose_as_leader(C.JoinToken(node=node, token_hash="", addr="",
                                                             at=self.clock.now()))
            await self.node.change_membership(ConfChangeType.ADD_LEARNER, node)
        finally:
            self._admitting.discard(node)
        self.refresh_peers()

    async def _check_version(self, node: str) -> bool:
        """Can ``node``'s cronrd apply the cluster version (cluster/versions.py)?
        If not, it stays a joining node, heard but not added, until it runs
        a newer cronrd (the leader's duty asks again: resume_join); said in
        the log once a minute. Raises when it does not answer."""
        if self.check_joiner is None:
            return True
        try:
            await self.check_joiner(node)
        except Refused as exc:
            now = self.clock.monotonic()
            if now - self._refused_said.get(node, -REFUSED_EVERY) >= REFUSED_EVERY:
                self._refused_said[node] = now
                log.error("event=join_refused node=%s error=\"%s\"", node, exc)
            return False
        self._refused_said.pop(node, None)
        return True

    # -- the peer requests' checks --------------------------------------------------
    async def rpc_is_member(self, frm: str, args: dict) -> dict:
        """The ``is_member`` peer request: what vouching asks a voter."""
        self.require_member(frm)
        node = args.get("node")
        if not isinstance(node, str):
            raise RequestError("is_member needs a node id")
        conf = self.node.raft.conf
        return {"member": node in conf.voters or node in conf.learners,
                "voter": node in conf.voters, "applied": self.node.raft.log.applied}

    def require_member(self, frm: str) -> None:
        if not self.node.raft.knows_member(frm):
            raise PermissionDenied(f"{frm} is not a member of this cluster; only members may "
                                   "make peer requests")

    def require_voter(self, frm: str) -> None:
        if frm not in self.node.raft.conf.voters:
            raise PermissionDenied(f"{frm} is not a voter; membership and leadership changes "
                                   "are accepted only from voters")

"""Which cronrd each member runs, and raising the cluster version.

Every node answers the ``version`` peer request with its release, commit,
the highest cluster version its apply knows (state/versions.py) and the
version its state has recorded. Every node asks the members every
``INTERVAL`` seconds, so `cronrd status` and `cronrd cluster members` show
the versions anywhere and say when the cluster is mixed.

The leader raises the cluster version, by a ``SetClusterVersion`` in the
log, to the highest version *every* voter and learner applies, and only
from answers of one round in which the membership stayed the same: a
member that does not answer (down, cut off) or answers as an older release
(cronrd 0.2.0 has no ``version`` request: "unknown peer request") holds the
version where it is. So the new behaviour turns on only after the last node
is upgraded, and never while a member could not follow it.

A node that hears that the cluster has recorded a version above its own
(it was downgraded, or it is joining with an older release) refuses to go
on, naming both versions: applying the log by older rules would fork its
state from the others'.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import apsw

from ... import __version__
from ...errors import (CronrdError, PermissionDenied, ProposalDropped, Refused,
                       RequestError)
from ...release import commit
from ...state import commands as C
from ...state import versions as V
from ..clock import Clock
from ..peers.rpc import PeerError, PeerRPC, PeerUnavailable

log = logging.getLogger("cronrd.cluster")

INTERVAL = 5.0       # seconds between rounds of asking the members
ASK_TIMEOUT = 2.0    # seconds one member may take to answer
JOIN_PATIENCE = 6.0  # seconds a joining node has to say which cronrd it runs
OLD_RELEASE = "0.2.0 or older"   # what a member without the version request runs


@dataclass
class Seen:
    """What a member said of itself, as last asked."""

    release: str | None        # its cronrd version (None: not known yet)
    commit: str | None
    applies: int | None        # the highest cluster version it applies (None: unknown)
    recorded: int | None       # the cluster version its state has recorded
    reachable: bool
    at: float                  # monotonic time of the answer (or of the failed ask)

    def view(self) -> dict[str, Any]:
        return {"release": self.release, "commit": self.commit, "applies": self.applies,
                "recorded": self.recorded, "answered": self.reachable}


class VersionWatch:
    """``members()``: the voters and learners; ``propose``: the leader's
    proposal (``RaftLog.propose_as_leader``); ``stop(reason)``: this node
    must not go on (it cannot apply what the cluster has recorded);
    ``settled()``: no membership change is in flight; ``joining()``: this
    node is not in the configuration yet."""

    def __init__(self, node_id: str, clock: Clock, conn: apsw.Connection, rpc: PeerRPC,
                 members: Callable[[], list[str]], is_leader: Callable[[], bool],
                 propose: Callable[[C.Command], Awaitable[Any]],
                 stop: Callable[[str], None], settled: Callable[[], bool] = lambda: True,
                 joining: Callable[[], bool] = lambda: False):
        self.node_id = node_id
        self.clock = clock
        self.conn = conn
        self.rpc = rpc
        self.members = members
        self.is_leader = is_leader
        self.propose = propose
        self.stop = stop
        self.settled = settled   # no membership change in flight (raised only then)
        self.joining = joining   # this node is not in the configuration yet
        self.seen: dict[str, Seen] = {}
        # Read once, now (at start): it may ask git, which must not run
        # on the critical loop later.
        self.commit = commit()
        self.raised: int | None = None   # the version this leader last proposed

    # -- this node ------------------------------------------------------------------
    def own(self) -> dict[str, Any]:
        return {"release": __version__, "commit": self.commit, "applies": V.APPLY_VERSION,
                "recorded": V.recorded(self.conn)}

    async def rpc_version(self, frm: str, args: dict) -> dict[str, Any]:
        """The ``version`` peer request. Any peer the transport admitted may
        ask (a leader asks a node joining with a token before admitting it).
        With ``prepare``: the leader is about to raise the cluster version
        to it; this node locks its state against older releases first
        (state/versions.lock_schema), and only a member may ask that."""
        prepare = args.get("prepare")
        if prepare is not None:
            if not _whole(prepare) or prepare > V.APPLY_VERSION:
                raise RequestError(f"version: prepare must be a cluster version this node "
                                   f"applies (1 to {V.APPLY_VERSION}), not {prepare!r}")
            if frm not in self.members():
                raise PermissionDenied(f"{frm} is not a member; only the leader prepares a "
                                       "cluster version")
            V.lock_schema(self.conn, prepare)
        return self.own()

    # -- asking the others ----------------------------------------------------------
    async def ask(self, peer: str) -> Seen:
        now = self.clock.monotonic()
        try:
            got = await self.rpc.call(peer, "version", {}, timeout=ASK_TIMEOUT)
        except PeerError as exc:
            if "unknown peer request" in str(exc):
                # A release before the version request: it applies version 1
                # only, and its state records none.
                return Seen(OLD_RELEASE, None, V.BASE, V.BASE, True, now)
            return self._unknown(peer, now)
        except PeerUnavailable:
            return self._unknown(peer, now)
        if not isinstance(got, dict):
            return self._unknown(peer, now)
        applies, recorded = got.get("applies"), got.get("recorded")
        return Seen(str(got.get("release") or "?")[:64],
                    str(got["commit"])[:40] if isinstance(got.get("commit"), str) else None,
                    applies if _whole(applies) else None,
                    recorded if _whole(recorded) else None, True, now)

    def _unknown(self, peer: str, now: float) -> Seen:
        last = self.seen.get(peer)
        return Seen(last.release if last else None, last.commit if last else None,
                    None, last.recorded if last else None, False, now)

    async def round(self) -> dict[str, Seen] | None:
        """Ask every other member; None if the membership changed meanwhile."""
        members = self.members()
        peers = [m for m in members if m != self.node_id]
        answers = await asyncio.gather(*(self.ask(p) for p in peers))
        if self.members() != members:
            return None
        for peer in list(self.seen):
            if peer not in members:
                del self.seen[peer]
        self.seen.update(zip(peers, answers))
        own = self.own()
        self.seen[self.node_id] = Seen(own["release"], own["commit"], own["applies"],
                                       own["recorded"], True, self.clock.monotonic())
        # Only a node outside the configuration (joining) goes by what a
        # member says: a member stops on its own evidence (its state, a
        # snapshot, an entry it cannot apply), never on another's word.
        too_new = [(p, s.recorded) for p, s in self.seen.items()
                   if s.recorded is not None and s.recorded > V.APPLY_VERSION]
        if too_new and self.joining():
            peer, version = max(too_new, key=lambda t: t[1] or 0)
            self.stop(f"member {peer} says the cluster has recorded cluster version {version}; "
                      f"this cronrd {__version__} applies versions up to {V.APPLY_VERSION}: "
                      f"{V.upgrade_hint(version or 0)}; a node older than the cluster's "
                      "version is refused, as it would apply the log by rules it does not know")
        return dict(self.seen)

    async def maybe_raise(self, seen: dict[str, Seen]) -> int | None:
        """On the leader: raise the cluster version to what every member
        applies, if that is above the recorded one. The new version, or None."""
        if not self.is_leader() or not self.settled():
            # A member being added would come after the asking: not asked.
            return None
        recorded = V.recorded(self.conn)
        applies = [s.applies for s in seen.values()]
        if not applies or any(a is None for a in applies):
            return None   # a member did not answer: it may be the one that cannot
        target = min(a for a in applies if a is not None)
        target = min(target, V.APPLY_VERSION)
        if target <= recorded or self.raised == target:
            return None
        members = {p: s.release or "?" for p, s in sorted(seen.items())}
        # Every member locks its state against older releases first: one
        # taken back to an older release from now on refuses to start,
        # instead of skipping the raise and going on by the old rules.
        peers = [p for p in seen if p != self.node_id]
        ready = await asyncio.gather(*(self._prepare(p, target) for p in peers))
        if not all(ready) or not self.is_leader() or sorted(self.members()) != sorted(seen):
            return None
        V.lock_schema(self.conn, target)
        self.raised = target
        try:
            await self.propose(C.SetClusterVersion(version=target, members=members,
                                                   at=self.clock.now()))
        except Refused:
            return None   # raised meanwhile (by this leader, or one before it)
        except CronrdError as exc:
            self.raised = None
            log.warning("event=cluster_version_not_raised to=%d error=\"%s\"", target, exc)
            return None
        log.info("event=cluster_version_raised from=%d to=%d members=%s", recorded, target,
                 ",".join(f"{p}={r}" for p, r in members.items()))
        return target

    async def _prepare(self, peer: str, version: int) -> bool:
        try:
            got = await self.rpc.call(peer, "version", {"prepare": version}, timeout=ASK_TIMEOUT)
        except (PeerError, PeerUnavailable) as exc:
            log.info("event=cluster_version_not_raised to=%d node=%s error=\"%s\"", version,
                     peer, exc)
            return False
        return isinstance(got, dict) and _whole(got.get("applies")) and got["applies"] >= version

    async def run(self) -> None:
        while True:
            seen = await self.round()
            if seen is not None:
                await self.maybe_raise(seen)
            await asyncio.sleep(INTERVAL)

    # -- joiners and the faces ------------------------------------------------------
    async def check_joiner(self, peer: str, patience: float = JOIN_PATIENCE) -> None:
        """Before a joining node becomes a learner: refuse one whose cronrd
        cannot apply the cluster version (it would stop at the first entry
        it does not know, or misread the log). A node that does not answer
        within ``patience`` seconds is not added yet (``ProposalDropped``)."""
        deadline = self.clock.monotonic() + patience
        while True:
            seen = await self.ask(peer)
            if seen.reachable or self.clock.monotonic() >= deadline:
                break
            await asyncio.sleep(0.25)
        if not seen.reachable:
            raise ProposalDropped(f"node {peer} did not say which cronrd it runs (is it "
                                  "started, and can the leader reach it?); it is added once "
                                  "it answers")
        recorded = max(V.recorded(self.conn), self.raised or 0)  # or being raised
        if (seen.applies or 0) < recorded:
            raise Refused(
                f"node {peer} runs cronrd {seen.release}, which applies cluster versions up to "
                f"{seen.applies}; the cluster is at version {recorded}: upgrade cronrd on "
                f"{peer} to {V.release_of(recorded)} or newer, then start it again to join")

    def view(self) -> dict[str, Any]:
        """For `cronrd status` and `cronrd cluster members`."""
        recorded = V.recorded(self.conn)
        members = {p: s.view() for p, s in sorted(self.seen.items())}
        members[self.node_id] = {**self.own(), "answered": True}
        releases = {m["release"] for m in members.values() if m["release"]}
        return {"cluster_version": recorded, "applies": V.APPLY_VERSION,
                "release": __version__, "members": members,
                "mixed": len(releases) > 1,
                "behind": sorted(p for p, m in members.items()
                                 if m["applies"] is not None and m["applies"] < V.APPLY_VERSION)}


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31

"""cronrd as a cluster: the ``Members`` (cluster/members.py) of a node on Raft.

``Cluster`` owns the Raft node (its log is ``RaftLog``, log/replicated.py), the
transport and the peer requests. Who may speak on the peer port (membership,
vouching, join tokens) is its ``PeerTrust`` (cluster/trust.py), and the
``cronrd cluster`` requests only the leader carries out are its
``ClusterAdmin`` (cluster/admin.py). It answers "may this node start a run
now?" (the lease, which its ``LeaseKeeper`` keeps, cluster/lease_keeper.py), keeps
the members' views for placement, and gives the leader its membership
duties: declare unreachable nodes' runs lost after ``node_timeout``,
promote caught-up learners, finish interrupted membership changes.
Leadership (leader/leadership.py) runs them, with the scheduler and the
placement of pending runs, on whichever node leads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import math
import os
from typing import Any, Awaitable, Callable, Mapping, cast

from ...config import Config, format_address, parse_address
from ...errors import (CronrdError, NotLeader, PermissionDenied, RequestError, StateError,
                      StorageError)
from ...raft.core import VOTER_ONLY
from ...raft.tracker import most_caught_up
from ...raft.types import ConfChangeType, ConfState, Message, MsgType
from ...schedule import iso_utc, parse_schedule
from ...state import commands as C
from ...state import node_drains
from ...state import queries as Q
from ...state.forwarded import check_forwarded
from ...state.machine import StateMachine
from ...decisions import duties
from ..clock import Clock
from ...decisions import claims, clocks, disk
from ...decisions.disk import FRESH as DISK_FRESH
from .clock_watch import ClockWatch
from ..log.forwarding import BATCH as FORWARD_BATCH, Forwarder
from .admin import ClusterAdmin
from .lease_keeper import LeaseKeeper
from ..peers.rpc import Handler, PeerError, PeerRPC
from .trust import PeerTrust
from .versions import VersionWatch
from .worker_hub import WorkerHub
from ...state.versions import EXIT_NEWER, NewerLog
from ...decisions.placement import NodeView
from ..log.raft_node import RaftNode
from ..log.replicated import FORWARD_TIMEOUT, PROPOSE_DEADLINE, RaftLog, ReplicatedState, local_error
from ..log.raft_storage import RaftStorage
from ..storage import WalCheckpointer
from ..peers.tls import cert_info, cert_status
from ..peers.transport import TLSConfig, Transport

log = logging.getLogger("cronrd.cluster")

TICK = 0.05              # seconds per Raft tick (heartbeats go out every tick)
DUTY_INTERVAL = 0.25     # the leader's housekeeping: node loss, placement, promotion
ACKS = frozenset({MsgType.APP_RESP, MsgType.HEARTBEAT_RESP, MsgType.SNAP_RESP})
JOIN_PATIENCE = 600.0    # seconds a joining record waits for its learner to be added
PEER_REFRESH = 1.0       # seconds between refreshes of the peers' addresses
RESPONSIVE = 4 * TICK    # a member that answered the leader this recently is alive
DISK_CHECK = 0.25        # s between looks at this node's log write times
DISK_RETRY = 5.0         # s after a hand-over for a slow disk before another
MEASURE_GRACE = 0.5      # s a new leader waits to place until the members' clocks are in (fires are
                         # committed 0.7 s ahead: a wait this short makes none late)


class ClockNotGood(StateError):
    """A forwarded new job while this leader's clock is not known good (the
    sender sees a StateError and tries again)."""


def stamped_by_leader(cmd: C.Command, now: float) -> C.Command:
    """A member's forwarded command with the times the leader decides by
    taken from the leader's clock (``now``): its ``at``, which the leader
    sets; and a run's start and end, which are the member's to say, but
    never later than the leader's now. The end of a run is when its retry
    is due: a node 30 s fast reported a run lost 'at' its clock's time, and
    the retry waited 30 s (fault suite, clock-jump: fire times 30-34 s late).
    A time in the past is kept (a report may wait in the outbox while the
    leader is away); one ahead of the leader's clock cannot be true."""
    if dataclasses.is_dataclass(cmd) and "at" in {f.name for f in dataclasses.fields(cmd)}:
        cmd = dataclasses.replace(cast(Any, cmd), at=now)  # (one with an ``at``: just checked)
    times = ([cmd.started_at, cmd.finished_at] if isinstance(cmd, C.RunFinished) else
             [cmd.started_at] if isinstance(cmd, C.RunStarted) else [])
    if any(t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not math.isfinite(t)) for t in times):
        # min() keeps a NaN, which would make its retry due at NaN.
        raise RequestError(f"{cmd.op}: a run's times must be finite numbers (epoch seconds); "
                           "the report was refused")
    if isinstance(cmd, C.RunFinished):
        finished = min(cmd.finished_at, now)
        started = None if cmd.started_at is None else min(cmd.started_at, finished)
        if (started, finished) != (cmd.started_at, cmd.finished_at):
            cmd = dataclasses.replace(cmd, started_at=started, finished_at=finished)
    elif isinstance(cmd, C.RunStarted) and cmd.started_at > now:
        cmd = dataclasses.replace(cmd, started_at=now)
    return cmd


class Cluster:
    duty_interval = DUTY_INTERVAL
    claims = True   # a node starts a run only once its claim is committed (claims.py)

    def __init__(self, config: Config, machine: StateMachine, clock: Clock,
                 stalled: Callable[[float, float], bool] | None = None):
        cc = config.cluster
        assert cc is not None  # open_members makes a Cluster for a cluster: section only
        self.config = config
        self.cc = cc
        self.node_id = config.node_id
        self.clock = clock
        self.conn = machine.conn
        self.machine = machine
        self.stopping = False
        self.give_up_waiting = False
        # Raft's log is the durable record: the state database need not fsync
        # each batch (after a crash it is caught up from the log or a snapshot).
        self.conn.execute("PRAGMA synchronous=NORMAL")
        # Nor checkpoint its WAL from the loop's commits: a thread does.
        self.checkpoints = WalCheckpointer(self.conn.filename) if self.conn.filename else None
        if self.checkpoints is not None:
            self.checkpoints.disown(self.conn)
        self.state = ReplicatedState(machine, config.data_dir)
        if machine.applied_index > 0 and not os.path.exists(config.raft_db):
            raise StateError(
                f"{config.data_dir} holds the state of a one-node cronrd (applied index "
                f"{machine.applied_index}) and no Raft log; run `cronrd cluster init` (with "
                "the daemon stopped) to make it the first member of a cluster with its jobs, "
                "runs and history, or give this node a fresh data_dir to join a cluster")
        self.storage = RaftStorage(config.raft_db)
        tls = TLSConfig(cc.tls.ca, cc.tls.cert, cc.tls.key) if cc.tls else None
        # A connection whose data stays unacknowledged for five election
        # timeouts (2.5 s at least) is dialled afresh (Transport._connect).
        self.transport = Transport(self.node_id, cc.listen, {}, self._on_message, tls=tls,
                                   insecure=cc.insecure, clock=clock,
                                   stall_timeout=max(2.5, 5 * cc.election_timeout))
        bootstrap = self._bootstrap(config)
        self.node = RaftNode(self.node_id, bootstrap, self.storage, self.transport, self.state,
                             tick_interval=TICK,
                             election_tick=max(3, round(cc.election_timeout / TICK)),
                             snapshot_every=20000, proposal_timeout=PROPOSE_DEADLINE)
        self.log = RaftLog(self.node, self.state, self._forward)
        # A killed leader's sockets close at once: campaign then, not after
        # an election timeout (Raft.leader_gone).
        self.transport.on_peer_closed = self._peer_closed
        self.changes = self.node.changes  # the leader or the membership changed
        self.lease = LeaseKeeper(self.node_id, self.node, clock, cc.node_timeout,
                                 cc.election_timeout)
        handlers: dict[str, Handler] = {}
        self.rpc = PeerRPC(self.node_id, self.transport, handlers)
        self.forwarder = Forwarder(lambda leader, args: self.rpc.call(
            leader, "propose", args, timeout=FORWARD_TIMEOUT))
        # Which cronrd each member runs, and the cluster version (versions.py).
        # (A node joining asks the members it was told of: one too old to
        # follow the cluster's version hears so before it takes any state.)
        self.versions = VersionWatch(self.node_id, clock, self.conn, self.rpc,
                                     lambda: self.member_ids() or sorted(cc.members_dict()),
                                     lambda: self.node.is_leader, self.log.propose_as_leader,
                                     self._refuse_version, settled=lambda: (
                                         self.node.raft.pending_conf_index
                                         <= self.node.raft.log.applied),
                                     joining=lambda: self.node_id not in self.member_ids())
        # Who may speak on the peer port (cluster/trust.py), and the requests
        # only the leader carries out (cluster/admin.py).
        self._forwarded_order: dict[str, asyncio.Lock] = {}  # by member
        self.trust = PeerTrust(self.node_id, cc, clock, self.conn, self.node, self.log,
                               self.rpc, self.transport.peer_serials, self._refresh_peers,
                               check_joiner=self.versions.check_joiner)
        self.transport.authorize = self.trust.authorize
        self.admin_requests = ClusterAdmin(self.node_id, cc, clock, self.node, self.log,
                                           self.rpc, self.transport.peer_serials,
                                           self.trust.require_voter, self.lease.healthy,
                                           self._refresh_peers, is_worker=self._is_worker)
        self.clocks = ClockWatch(self.node_id, clock, cc.max_clock_offset,
                                 lambda: self.node.leader or None, lambda: self.node.is_leader,
                                 self.member_ids, self.call, hold=self._hold_campaign,
                                 hand_over=self._hand_over, stalled=stalled,
                                 disk=self._slow_disk)
        self._disk_slow: float | None = None   # as last logged
        handlers.update({
            "propose": self._rpc_propose, "read_log": self._rpc_read_log,
            "clock": self._rpc_clock, "version": self.versions.rpc_version,
            # Every membership request a follower may forward (one list: a
            # request left out here failed on followers as "unknown").
            **{method: self.admin_requests.serve for method in self.admin_requests.methods},
            "is_member": self.trust.rpc_is_member,
        })
        self.was_member = self.node_id in self.member_ids()
        self.removed = asyncio.Event()
        self.fatal = asyncio.Event()  # the Raft node stopped on an error
        self.fatal_code = 1           # the daemon's exit status then
        self._leading = False
        self._lost_proposed: dict[str, float] = {}
        # set by the daemon: reads in a thread of their own, off this loop
        self.read_log: Callable[[int, int], Awaitable[dict]] | None = None
        self._refused_propose = 0
        # This node's certificate, read once: a new one needs a restart.
        self._cert = cert_info(cc.tls.cert) if cc.tls else None
        self.transport.join_token = cc.join_token or ""
        # The worker port (cluster/worker_hub.py): worker agents reach the
        # leader there; None without cluster.worker_listen.
        self.workers: WorkerHub | None = None
        if cc.worker_listen is not None and cc.tls is not None:
            self.workers = WorkerHub(
                self.node_id, self.conn, clock, listen=cc.worker_listen, tls=cc.tls,
                is_leader=lambda: self.node.is_leader, leader=lambda: self.node.leader or None,
                propose=self.log.propose_as_leader,
                stamp=lambda cmd: stamped_by_leader(cmd, self.clock.now()),
                members=self.member_ids, node_timeout=cc.node_timeout,
                max_clock_offset=cc.max_clock_offset)

    @staticmethod
    def _bootstrap(config: Config) -> ConfState:
        """The membership this node started the cluster with, fixed at its first
        start (data_dir/bootstrap): editing initial_members later cannot change
        what the log means. Later changes are log entries (`cronrd cluster`)."""
        path = os.path.join(config.data_dir, "bootstrap")
        try:
            with open(path) as f:
                voters = tuple(v for v in f.read().split() if v)
            return ConfState(voters)
        except FileNotFoundError:
            pass
        cc = config.cluster
        assert cc is not None  # a Cluster's config has a cluster: section
        voters = () if cc.join else tuple(sorted(cc.members_dict()))
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(voters) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return ConfState(voters)

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        self._refresh_peers()
        await self.transport.start()
        await self.node.start()
        if self.workers is not None:
            await self.workers.start()

    async def run(self) -> None:
        """The membership's upkeep, until cancelled (a service the daemon
        owns from right after ``start``): watch the Raft node, follow who
        leads and who is a member, renew this node's lease."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch_node(), name="raft-node")
            tg.create_task(self._watch_role(), name="membership")
            tg.create_task(self.lease.renew(), name="lease")
            tg.create_task(self.clocks.run(), name="clocks")
            tg.create_task(self._watch_disk(), name="disk")
            tg.create_task(self.versions.run(), name="versions")
            if self.checkpoints is not None:
                tg.create_task(self.checkpoints.run(), name="wal-checkpoint")

    async def stop(self) -> None:
        self.stopping = True
        self.log.stopping = True
        await self.trust.close()
        if self.workers is not None:
            await self.workers.close()
        await self.node.stop()
        self.rpc.close()
        await self.transport.close()
        self.storage.close()
        if self.checkpoints is not None:
            self.checkpoints.close()

    async def _watch_node(self) -> None:
        """The Raft node stopping on an error is fatal: the daemon exits so
        that systemd restarts it."""
        try:
            await self.node.wait_stopped()
        except NewerLog as exc:
            if not self.stopping:
                # Restarting cannot help: only a newer cronrd applies it.
                log.error("event=version_refused error=\"%s\" hint=\"the daemon exits with "
                          "status %d, which its unit does not restart\"", exc, EXIT_NEWER)
                self.fatal_code = EXIT_NEWER
                self.fatal.set()
                self.changes.notify()
        except Exception as exc:
            if not self.stopping:
                log.error("event=raft_stopped error=%r hint=\"see the error above (storage?); "
                          "the daemon exits so that systemd restarts it\"", exc)
                self.fatal.set()
                self.changes.notify()

    def _refuse_version(self, reason: str) -> None:
        """This node cannot apply the cluster version the others recorded
        (versions.py): it stops, as the Raft node stopping would stop it."""
        if self.stopping or self.fatal.is_set():
            return
        log.error("event=version_refused error=\"%s\"", reason)
        self.fatal_code = EXIT_NEWER
        self.fatal.set()
        self.changes.notify()

    async def wait_caught_up(self) -> None:
        """Return once this node has applied everything the cluster had
        committed when it asked (a ReadIndex through the leader)."""
        warned = False
        start = self.clock.monotonic()
        while not self.stopping and not self.give_up_waiting:
            if self.fatal.is_set():
                raise StorageError("the Raft node stopped while this daemon was starting (see "
                                   "the error above: storage?); exiting so that systemd "
                                   "restarts it")
            try:
                sent = self.clock.monotonic()
                await self.read_barrier()
                self.lease.round_trip(sent)
                return
            except CronrdError as exc:
                if not warned and self.clock.monotonic() - start > 10:
                    warned = True
                    hint = ("has `cronrd cluster add` been run for this node on a member?"
                            if self.cc.join else "are a majority of initial_members running "
                            "and reachable?")
                    log.warning("event=waiting_for_cluster reason=\"%s\" hint=\"%s\"",
                                exc, hint)
                # No leader yet: ask again when one is known (or the node
                # stops); a known leader that did not answer: ask again soon.
                await self.changes.wait(0.2 if self.node.leader else 1.0)

    async def read_barrier(self) -> int:
        return await self.node.read_barrier()

    # -- messages -------------------------------------------------------------------
    def _on_message(self, msg: Message) -> None:
        if msg.type in (MsgType.RPC_REQ, MsgType.RPC_RESP):
            self.rpc.on_message(msg)
            return
        if msg.type == MsgType.PROPOSE:
            # Followers forward through the checked `propose` peer request;
            # a raw Raft proposal from a peer would skip every check.
            self._refused_propose += 1
            if self._refused_propose in (1, 10, 100) or self._refused_propose % 1000 == 0:
                log.warning("event=raw_propose_refused from=%s count=%d hint=\"peers forward "
                            "proposals with the propose request; a raw Raft proposal is "
                            "dropped\"", msg.frm, self._refused_propose)
            return
        if msg.type in VOTER_ONLY and not self.node.raft.knows_member(msg.frm, voter=True):
            self.trust.ask_vouch(msg.frm)  # a voter this node has not seen promoted yet?
        leading = self.node.is_leader
        self.node.step(msg)
        if msg.type in ACKS and leading and self.node.is_leader:
            # an answer to what this leader sent (not one with a newer term,
            # that deposed it: its lease must not count from that)
            self.lease.answered(msg.frm)

    # -- membership views -----------------------------------------------------------
    def address(self) -> str:
        """The peer address this node announces (its record's, once it has one)."""
        return format_address(self.cc.members_dict().get(self.node_id, self.cc.listen))

    def tags(self) -> tuple[str, ...]:
        return tuple(self.cc.tags)

    def member_ids(self) -> list[str]:
        conf = self.node.raft.conf
        return sorted(set(conf.voters) | set(conf.learners))

    def _addresses(self) -> dict[str, tuple[str, int]]:
        addrs = dict(self.cc.members_dict())
        for row in Q.nodes(self.conn):
            if row.get("addr"):
                try:
                    addrs[row["node"]] = parse_address(row["addr"])
                except ValueError:
                    pass
        return addrs

    def _refresh_peers(self) -> None:
        addrs = self._addresses()
        members = set(self.member_ids())
        if self.node_id not in members:
            members |= set(self.cc.members_dict())  # joining: talk to the known members
        # and a node being added: the leader asks it which cronrd it runs
        # before it becomes a learner (versions.py)
        members |= {r["node"] for r in Q.nodes(self.conn) if r.get("state") == "joining"}
        peers = {n: a for n, a in addrs.items() if n in members and n != self.node_id}
        self.transport.set_peers(peers)
        self.transport.revoke([p for p in self.transport.connected_peers()
                               if self.trust.authorize(p, ask=False) is not None])
        if self.workers is not None:
            self.workers.drop_denied()

    def contact_age(self, node: str) -> float | None:
        """Seconds since any frame came from ``node`` (for display)."""
        if node == self.node_id:
            return 0.0
        last = self.transport.last_contact(node)
        return None if last is None else self.clock.monotonic() - last

    def node_views(self) -> list[NodeView]:
        rows = {r["node"]: r for r in Q.nodes(self.conn)}
        drains = node_drains.drained(self.conn)  # an admin's drain: no new runs there
        offsets = self.clocks.members()
        leading = self.node.is_leader
        own_fence = self.clocks.fence()
        slow = self.clocks.slow_disks() if leading else {}
        views = []
        for node in self.member_ids():
            row = rows.get(node) or {}
            state = row.get("state") or "unknown"
            if node in drains and state in ("up", "unknown"):
                state = "drained"
            healthy = self.lease.healthy(node)
            why = ""
            clock_bar = clocks.placement_bar(node, self.node_id, offsets,
                                             self.cc.max_clock_offset, own_fence,
                                             measured=leading)
            if not healthy:
                age = self.lease.ack_age(node)
                if age is None:
                    # no answer to this leader yet: it may have been heard
                    # from under the leader before (it may have been that leader)
                    age = self.contact_age(node)
                why = "never reached" if age is None else f"no answer for {age:.1f}s"
            elif clock_bar is not None:
                # It would start the run early or late by its offset (it
                # refuses to: Cluster.start_fence), or this leader cannot
                # tell yet (decisions/clocks.placement_bar).
                healthy = False
                why = clock_bar
            elif state not in ("up", "unknown"):
                why = {"draining": "draining (stopping)", "joining": "still joining",
                       "drained": f"drained by {drains.get(node, {}).get('by')} "
                                  f"(`cronrd cluster undrain {node}` undoes it)",
                       "unknown": "has not announced itself yet (starting?)"}.get(
                           state, f"state {state}")
            views.append(NodeView(node, healthy, state, frozenset(row.get("tags") or ()), why,
                                  slow_disk=disk.disk_bar(node, slow)))
        if self.workers is not None and leading:
            views += self.workers.views()   # (placement is the leader's)
        return views

    def on_effects(self, effects: list) -> None:
        """The state machine's effects: the leader tells its workers theirs."""
        if self.workers is not None:
            self.workers.on_effects(effects)

    def worker_status(self) -> list[dict]:
        """The registered workers; on the leader, with their connections."""
        if self.workers is not None and self.node.is_leader:
            return self.workers.status()
        return [{**w, "connected": None} for w in Q.workers(self.conn)]

    # -- the lease (cluster/lease_keeper.py) -------------------------------------------------
    def lease_fresh(self) -> bool:
        """Has this node heard from a leader within its lease?"""
        return self.lease.fresh()

    def start_fence(self) -> str | None:
        """Why this node may not start a run now, or None: no fresh lease
        (the leader may have given its runs to another node), or its clock
        beyond max_clock_offset from the cluster's or not measured yet (it
        would start them early or late by its offset: ClockWatch.fence)."""
        if not self.lease.fresh():
            return ("had no fresh lease from the leader at the fire time (cut off from the "
                    "cluster?)")
        return self.clock_fence()

    def placement_hold(self) -> str | None:
        """Why this leader may not place fire times now, or None: its own
        clock (clock_fence), or, for MEASURE_GRACE seconds after it was
        elected, a member that answers it but whose clock it has not
        measured yet (they report within a moment: placing before would
        leave them out, or put runs on a clock that may be off)."""
        fence = self.clock_fence()
        if fence is not None or not self.node.is_leader:
            return fence
        if self.clock.monotonic() - self.lease.lead_since >= MEASURE_GRACE:
            return None
        waiting = clocks.unmeasured(self.member_ids(), self.node_id, self.clocks.members(),
                                    filter(self.lease.healthy, self.member_ids()))
        if waiting:
            return (f"is measuring the clocks of {', '.join(waiting)} (elected "
                    f"{self.clock.monotonic() - self.lease.lead_since:.1f}s ago)")
        return None

    def clock_fence(self) -> str | None:
        """Why this node's clock may not be used to schedule or start runs
        now (stepped since it was measured, off the cluster's, or not
        measured yet), or None (ClockWatch.fence)."""
        return self.clocks.fence()

    def responsive(self) -> set[str]:
        """(On the leader) the healthy members (clock within bounds, not
        draining) that answered this leader within RESPONSIVE seconds and
        whose disks are not slow: a run they have not claimed yet is on its
        way, not stranded (decisions/claims.on_their_way)."""
        views = self.node_views()
        workers = self.workers.responsive() if self.workers is not None else set()
        return claims.on_their_way({v.id: self.lease.ack_age(v.id) for v in views
                                    if v.healthy and v.id not in workers},
                                   [v.id for v in views if v.slow_disk is not None],
                                   RESPONSIVE) | {v.id for v in views if v.healthy
                                                  and v.id in workers}

    def behind_leader(self) -> dict[str, float]:
        """(On the leader) how many seconds each member's clock is behind
        this leader's, as last measured (ahead, or off: not listed;
        decisions/clocks.behind)."""
        if not self.node.is_leader:
            return {}
        return clocks.behind(self.clocks.vs_leader(), self.cc.max_clock_offset)

    # -- leadership -----------------------------------------------------------------
    async def _watch_role(self) -> None:
        """Membership upkeep: when this node starts leading (its lease counts
        from then), whether it is still a member, and the peers to talk to.
        What the leader does is Leadership's (leader/leadership.py)."""
        last_peers = 0.0
        while True:
            leading = self.node.is_leader
            if leading and not self._leading:
                self.lease.started_leading()
                self._refresh_peers()
            if self._leading and not leading and self.workers is not None:
                self.workers.leadership_lost()
            self._leading = leading
            members = self.member_ids()
            if self.node_id in members:
                self.was_member = True
                self.transport.join_token = ""  # spent: a member is admitted as one
            elif self.was_member and not self.removed.is_set():
                log.warning("event=removed_from_cluster node=%s hint=\"this node is no longer "
                            "a member; to add it back, wipe its data_dir and run `cronrd "
                            "cluster add %s ADDR` on a member, with cluster.join: true here\"",
                            self.node_id, self.node_id)
                self.removed.set()
            now = self.clock.monotonic()
            if now - last_peers >= PEER_REFRESH:
                last_peers = now
                self._refresh_peers()
            # a change of leader or membership, or the peers' addresses (from
            # the replicated node records) once a second: a timer
            await self.changes.wait(max(0.0, last_peers + PEER_REFRESH - now))

    def leader_duties(self) -> list:
        """The membership's part of leading (Leadership runs them)."""
        return [self._declare_lost, self._promote, self._forget_removed]

    async def _declare_lost(self) -> None:
        now = self.clock.monotonic()
        # (queries says str nodes; nodes_lost takes a mapping that may hold None too)
        active = cast(Mapping[str | None, int], Q.active_by_node(self.conn))
        members, answered = self.member_ids(), self.lease.acked
        # Workers are judged as members are: silent for node_timeout, lost.
        if self.workers is not None:
            members = members + [w["node"] for w in self.workers.registered()]
            answered = {**self.lease.acked, **self.workers.answered_at()}
        elif any(True for _ in self.conn.execute("SELECT 1 FROM workers LIMIT 1")):
            members = members + [w["node"] for w in Q.workers(self.conn)]
        proposals = []
        for lost in duties.nodes_lost(now, self.node_id, active,
                                      members, answered, self.lease.lead_since,
                                      self.cc.node_timeout, self._lost_proposed):
            self._lost_proposed[lost.node] = now
            log.warning("event=node_lost node=%s runs=%d reason=\"%s\"", lost.node, lost.runs,
                        lost.reason)
            proposals.append(self.log.propose_as_leader(C.NodeLost(
                node=lost.node, at=self.clock.now(), reason=lost.reason)))
        # All at once: 100 workers lost together were declared one commit after
        # another, the last 1.5 s after the first (bench/workers.py).
        for result in await asyncio.gather(*proposals, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    async def _forget_removed(self) -> None:
        """Finish what a leader change may have cut short. A joining record
        without membership is a `cluster add` (or a join with a token) whose
        learner was not added yet: add it, and forget the record after ten
        minutes without success. Any other record without membership is a
        `cluster remove` whose second step (RemoveNode) did not commit: finish
        it (a minute on, so that a node just being added is not caught)."""
        members = set(self.member_ids())
        now = self.clock.now()
        for row in Q.nodes(self.conn):
            node, age = row["node"], now - (row.get("since") or now)
            if node in members:
                continue
            if row.get("state") == "joining":
                if age > JOIN_PATIENCE:
                    log.warning("event=join_abandoned node=%s after_s=%.0f hint=\"run `cronrd "
                                "cluster add` again\"", node, age)
                    await self.log.propose_as_leader(C.RemoveNode(node=node, at=now,
                                                                  deny=False))
                else:
                    await self.trust.resume_join(node)
            elif age > 60:
                log.info("event=forget_removed node=%s", node)
                await self.log.propose_as_leader(C.RemoveNode(
                    node=node, at=now, serial=self.transport.peer_serials.get(node, "")))

    async def _promote(self) -> None:
        raft = self.node.raft
        conf = raft.conf
        n = len(self.member_ids())
        healthy = [nid for nid in conf.learners if self.lease.healthy(nid)]
        learner = duties.learner_to_promote(
            n, len(conf.voters), conf.learners, healthy,
            {nid: raft.prs[nid].match for nid in conf.learners if nid in raft.prs}, raft.commit)
        if learner is not None:
            log.info("event=promoting node=%s voters=%d target=%d", learner,
                     len(conf.voters), duties.voter_target(n))
            await self.node.change_membership(ConfChangeType.PROMOTE, learner)

    # -- status ---------------------------------------------------------------------
    def role(self) -> str:
        role = self.node.role
        return "candidate" if role == "precandidate" else role

    def status(self) -> dict:
        st = self.node.status()
        return {"role": self.role(), "leader": st["leader"] or None, "term": st["term"],
                "commit_index": st["commit_index"], "lease_fresh": self.lease_fresh(),
                "voters": st["voters"], "learners": st["learners"],
                # shown on every `cronrd status`: without TLS anyone can be a node
                "peer_transport": "insecure" if self.cc.insecure else "tls",
                "insecure_network": self.cc.insecure_network,
                "certificate": cert_status(self._cert, self.clock.now(), self.node_id),
                "down": self._down_members(),
                "versions": self.versions.view(),
                "workers": self.worker_status(),
                **self._clock_status()}

    def _down_members(self) -> list[dict]:
        """The members this node cannot reach now, with when it last heard
        from each (`cronrd status` names them)."""
        out = []
        for node in self.member_ids():
            if node == self.node_id or self.transport.reachable(node):
                continue
            age = self.contact_age(node)
            out.append({"id": node, "last_contact_s": None if age is None else round(age, 3)})
        return out

    def _clock_status(self) -> dict:
        own = self.clocks.own()

        def ms(v):
            return None if v is None else round(v * 1000, 1)
        return {"clock_offset_ms": ms(self.clocks.offset()), "clock_error_ms": ms(own["error"]),
                "clock_vs_leader_ms": ms(own["vs_leader"]),
                "max_clock_offset_ms": round(self.cc.max_clock_offset * 1000, 1),
                "clock_off": self.clocks.is_off()}

    def members(self) -> dict:
        conf = self.node.raft.conf
        rows = {r["node"]: r for r in Q.nodes(self.conn)}
        addrs = self._addresses()
        now_wall = self.clock.now()
        offsets = self.clocks.members()
        drains = node_drains.drained(self.conn)
        versions = self.versions.view()
        out = []
        for node in self.member_ids():
            age = self.contact_age(node)
            row = rows.get(node) or {}
            addr = addrs.get(node)
            out.append({
                "id": node, "address": format_address(addr) if addr else None,
                "role": "voter" if node in conf.voters else "learner",
                "reachable": node == self.node_id or self.transport.reachable(node),
                "last_contact": None if age is None else iso_utc(round(now_wall - age, 3)),
                "last_contact_s": None if age is None else round(age, 3),
                "leader": node == self.node.leader, "self": node == self.node_id,
                "state": row.get("state"), "tags": list(row.get("tags") or ()),
                "clock_offset_ms": None if (offset := offsets.get(node)) is None
                else round(offset * 1000, 1),
                "drained": drains.get(node),   # an admin's drain: {by, note, at}, or None
                "version": versions["members"].get(node),   # its release, as it said
            })
        return {"leader": self.node.leader or None, "members": out,
                "workers": self.worker_status(),
                "cluster_version": versions["cluster_version"], "mixed": versions["mixed"]}

    # -- requests that only the leader can carry out (cluster/admin.py) -------------------
    async def admin(self, method: str, args: dict) -> dict:
        """``cluster add|remove|revoke-cert|transfer-leader`` from any node."""
        return await self.admin_requests.request(method, args)

    async def transfer_before_stop(self) -> None:
        return await self.admin_requests.transfer_before_stop()

    # -- peer requests ------------------------------------------------------------------
    async def _rpc_propose(self, frm: str, args: dict) -> Any:
        """A member's proposals: one (``cmd``) or a batch (``cmds``, each
        answered on its own: log/forwarding.py)."""
        self.trust.require_member(frm)
        if not self.node.is_leader:
            raise NotLeader(self.node.leader or None)
        if "cmds" not in args:
            return await self._propose_for(frm, args.get("cmd", ""))
        cmds = args["cmds"]
        if not isinstance(cmds, list) or not 0 < len(cmds) <= FORWARD_BATCH:
            raise RequestError(f"propose: cmds must be a list of 1 to {FORWARD_BATCH} commands")
        results = await asyncio.gather(*(self._propose_for(frm, c) for c in cmds),
                                       return_exceptions=True)
        return {"results": [
            {"error": str(r), "kind": type(r).__name__, "leader": getattr(r, "leader", None)}
            if isinstance(r, BaseException) else {"ok": r} for r in results]}

    async def _propose_for(self, frm: str, text: Any) -> Any:
        # A member's commands are proposed in the order they came (a file's
        # record after its jobs), even while one of them is checked in a thread.
        order = self._forwarded_order.setdefault(frm, asyncio.Lock())
        try:
            async with order:
                cmd = await self._check_forwarded(C.decode(str(text)), frm)
                cmd = self._leader_view(cmd, frm)
                self.log.gate(cmd)
                fut = self.node.submit(cmd.encode())
        except ClockNotGood as exc:  # not the sender's fault: it tries again
            log.info("event=forwarded_deferred from=%s error=\"%s\"", frm, exc)
            raise
        except CronrdError as exc:
            log.warning("event=forwarded_refused from=%s error=\"%s\"", frm, exc)
            raise
        _, result = await fut
        if isinstance(result, BaseException):
            raise result
        return result

    async def _check_forwarded(self, cmd: C.Command, frm: str) -> C.Command:
        """``check_forwarded``; a SyncJobs with definitions in a worker thread
        (validating a thousand of them held the leader's loop for a second:
        its peers, hearing no heartbeat, elected another)."""
        puts = cmd.puts if isinstance(cmd, C.SyncJobs) and isinstance(cmd.puts, list) else []
        names = [p[0] for p in puts if isinstance(p, list) and len(p) == 4
                 and isinstance(p[0], str) and isinstance(p[3], str)]
        if not names:
            return check_forwarded(cmd, frm, known=lambda name, digest: any(
                self.conn.execute("SELECT 1 FROM specs WHERE name=? AND digest=?",
                                  (name, digest))))
        held = {(n, d) for n, d in self.conn.execute(
            "SELECT name, digest FROM specs WHERE name IN (SELECT value FROM json_each(?))",
            (json.dumps(names),))}
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(
            check_forwarded, cmd, frm, known=lambda name, digest: (name, digest) in held))

    def _leader_view(self, cmd: C.Command, frm: str) -> C.Command:
        """What the leader commits of a member's forwarded command: its own
        time (a sender's ``at`` decides which definition of a job is older,
        so it must not be the sender's to choose), and the checks that need
        the state: a forwarded fire must be an @reboot fire of an @reboot job,
        not in the future."""
        now = self.clock.now()
        if isinstance(cmd, C.PutJob) and self.clocks.fence() is not None \
                and Q.job_spec(self.conn, cmd.name) is None:
            # A new job's schedule starts at its creation time, this clock's.
            raise ClockNotGood(f"the leader's clock {self.clocks.fence()}; a new job waits until "
                             "it is measured good (the sender tries again)")
        if isinstance(cmd, C.SyncJobs) and self.clocks.fence() is not None and any(
                isinstance(p, list) and p and not any(self.conn.execute(
                    "SELECT 1 FROM jobs WHERE name=?", (p[0],))) for p in cmd.puts):
            raise ClockNotGood(f"the leader's clock {self.clocks.fence()}; new jobs wait until "
                               "it is measured good (the sender tries again)")
        cmd = stamped_by_leader(cmd, now)
        if isinstance(cmd, C.Fire):
            job = Q.job_spec(self.conn, cmd.job)
            if job is None or parse_schedule(job.schedule).kind != "reboot":
                raise PermissionDenied(f"{frm} forwarded an @reboot fire of {cmd.job!r}, which "
                                       "is not an @reboot job")
            if cmd.fire_time > now + 60:
                raise PermissionDenied(f"{frm} forwarded an @reboot fire in the future "
                                       f"({cmd.fire_time})")
        return cmd

    async def _forward(self, leader: str, data: bytes) -> Any:
        """A follower's proposal, to the leader through the checked request."""
        return await self.forwarder.forward(leader, data)

    async def clock_ready(self) -> None:
        """Return once this leader's clock is known to be within bounds (it
        would otherwise schedule fires early or late by its offset); a
        leader whose clock is off hands leadership over instead
        (ClockWatch.act), which ends its term."""
        await self.clocks.changes.until(lambda: self.clocks.fence() is None
                                        or not self.node.is_leader)

    def _slow_disk(self) -> float | None:
        """This node's typical log write (s) when its disk is slow, else None."""
        return disk.slow_disk(self.node.disk_writes, self.node.write_began,
                              self.clock.monotonic())

    async def _watch_disk(self) -> None:
        """Every DISK_CHECK: a disk gone slow (or fast again) is logged once; a
        leader on a slow disk hands leadership to a voter whose disk is not
        (told with its clock questions), as one with a bad clock does. The
        leader places new runs on nodes with slow disks last (placement)."""
        while True:
            await asyncio.sleep(DISK_CHECK)
            typical = self._slow_disk()
            if (typical is None) != (self._disk_slow is None):
                if typical is not None:
                    log.warning("event=disk_slow node=%s write_ms=%.0f hint=\"this node's "
                                "log writes (fsync) are slow: it hands leadership over and "
                                "gets new runs last; check the disk of the data_dir\"",
                                self.node_id, typical * 1000)
                else:
                    log.info("event=disk_ok node=%s", self.node_id)
                # Told to the leader now, not at the next clock question (up
                # to a second): until it knows, it gives this node's
                # unclaimed runs the time of a node that is on its way.
                self.clocks.poke()
            self._disk_slow = typical
            if typical is None or not self.node.is_leader:
                continue
            now = self.clock.monotonic()
            good = sorted(n for n, (v, at) in self.clocks.disks.items()
                          if n != self.node_id and v is None and now - at <= DISK_FRESH
                          and n in self.member_ids())
            if not good:
                continue   # nobody known to be better: it goes on leading
            try:
                to = await self._hand_over(good)
                log.warning("event=disk_step_down node=%s to=%s write_ms=%.0f", self.node_id,
                            to, typical * 1000)
            except CronrdError as exc:
                log.info("event=disk_step_down_failed error=\"%s\"", exc)
            await asyncio.sleep(DISK_RETRY)

    def _peer_closed(self, peer: str) -> None:
        """A peer's connection to this node ended (it died, or restarts):
        campaign at once if it led (Raft.leader_gone), and measure its
        clock again before it gets runs (ClockWatch.forget)."""
        self.node.peer_closed(peer)
        self.clocks.forget(peer)

    def _hold_campaign(self, held: bool) -> None:
        self.node.raft.campaign_held = held

    async def _hand_over(self, good: list[str]) -> str:
        voters = [n for n in good if n in self.node.raft.conf.voters and self.lease.healthy(n)]
        if not voters:
            raise RequestError("no healthy voter with a good clock to hand leadership to")
        to = most_caught_up(voters, self.node.raft.prs)
        return (await self.admin_requests.transfer_leader({"node": to}))["leader"]

    async def _rpc_clock(self, frm: str, args: dict) -> dict:
        self.trust.require_member(frm)
        try:
            return await self.clocks.rpc(frm, args)
        except ValueError as exc:
            raise RequestError(f"clock: {exc}") from None

    async def _rpc_read_log(self, frm: str, args: dict) -> dict:
        self.trust.require_member(frm)
        if self.read_log is None:
            raise RequestError("this node is still starting; retry in a few seconds")
        run_id, offset = args.get("run_id"), args.get("offset", 0)
        if not isinstance(run_id, int) or not isinstance(offset, int) or offset < 0:
            raise RequestError("read_log needs an integer run_id and a non-negative offset")
        run = Q.get_run(self.conn, run_id)
        if run is not None and run.node and run.node != self.node_id \
                and self._is_worker(run.node):
            return await self._worker_log(run.node, run_id, offset)
        return await self.read_log(run_id, offset)

    def _is_worker(self, node: str) -> bool:
        return any(True for _ in self.conn.execute("SELECT 1 FROM workers WHERE node=?",
                                                   (node,)))

    async def _worker_log(self, node: str, run_id: int, offset: int) -> dict:
        """A run's log on worker ``node``: read over its connection to the
        leader (this node, or asked of the leader)."""
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}")
        if self.workers is not None and self.node.is_leader:
            return await self.workers.read_log(node, run, offset)
        leader = self.node.leader
        if not leader or leader == self.node_id:
            raise StateError(f"worker {node}'s log is read through the leader, and no leader "
                             "is known now; retry shortly")
        return await self.call(leader, "read_log", {"run_id": run_id, "offset": offset})

    async def call(self, node: str, method: str, args: dict, timeout: float = 5.0) -> Any:
        if method == "read_log" and node not in self.member_ids() and self._is_worker(node):
            return await self._worker_log(node, args["run_id"], args.get("offset", 0))
        try:
            return await self.rpc.call(node, method, args, timeout=timeout)
        except PeerError as exc:
            raise local_error(exc) from None

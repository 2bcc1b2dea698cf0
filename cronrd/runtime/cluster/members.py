"""Who this node is with: the members of its cluster, as the daemon sees them.

The daemon is written once against ``Members``: its log (log/base.py), the lease
("may this node start a run now?"), the members' views for placement, the
leader's membership duties, and the ``cronrd cluster`` requests. Two kinds:

* ``Cluster`` (cluster/raft_cluster.py): Raft over TCP with peers.
* ``OneHost`` (here): a cluster of one on the direct log (log/local.py says
  why not a one-voter Raft node). It is always the leader, its lease is
  always fresh, and it has no membership to change: `cronrd cluster init`
  turns its data_dir into the first member of a cluster.

``open_members`` picks one from the config; nothing else asks which.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Awaitable, Callable, Protocol

from ... import __version__
from ...config import Config
from ...errors import RequestError, StateError
from ...release import commit
from ...state import commands as C
from ...state import versions as V
from ...state.machine import StateMachine
from ..clock import Clock, now
from ..log.local import LocalLog
from ..log.base import Log
from ...decisions.placement import NodeView
from ..tasks import Changes
from ..runs.executors import offered_tags

log = logging.getLogger("cronrd.cluster")

Duty = Callable[[], Awaitable[None]]

NO_CLUSTER = ("this node runs without a cluster: section (a one-node cluster); run "
              "`cronrd cluster init` to make it the first member of a cluster, then "
              "use `cronrd cluster`")



def local_node(config: Config) -> NodeView:
    """This node, as placement sees it when it is the only member."""
    cluster = getattr(config, "cluster", None)
    tags = tuple(cluster.tags if cluster else ()) + offered_tags()
    return NodeView(config.node_id, True, "up", frozenset(tags))

class Members(Protocol):
    @property
    def log(self) -> Log: ...  # (read only: each kind holds its own Log)
    removed: asyncio.Event     # this node was removed from the cluster: stop
    fatal: asyncio.Event       # the log failed for good: stop (systemd restarts us)
    fatal_code: int            # the daemon's exit status then (78: a newer cronrd is needed)
    give_up_waiting: bool      # SIGTERM while waiting for the cluster
    read_log: Callable[[int, int], Awaitable[dict]] | None  # serves other nodes' `cronrd logs`
    changes: Changes           # notified when the leader or the membership changes
    duty_interval: float       # seconds between the leader's housekeeping passes
    claims: bool               # runs start only once their claim is committed (others
                               # could start them); one host: no one else could

    async def start(self) -> None: ...
    async def run(self) -> None: ...  # the membership's upkeep, a service the daemon owns
    async def wait_caught_up(self) -> None: ...
    async def transfer_before_stop(self) -> None: ...
    async def stop(self) -> None: ...
    def lease_fresh(self) -> bool: ...
    def start_fence(self) -> str | None: ...  # why runs may not start here now, or None
    def clock_fence(self) -> str | None: ...  # why this node's clock may not schedule now
    def placement_hold(self) -> str | None: ...  # (leader) why it may not place fires now
    def behind_leader(self) -> dict[str, float]: ...  # (leader) s each clock is behind it
    def responsive(self) -> set[str]: ...  # (leader) healthy members answering it just now
    async def clock_ready(self) -> None: ...  # returns once this node's clock may schedule
    def member_ids(self) -> list[str]: ...
    def node_views(self) -> list[NodeView]: ...
    def leader_duties(self) -> list[Duty]: ...
    def address(self) -> str: ...
    def tags(self) -> tuple[str, ...]: ...
    def status(self) -> dict: ...
    def members(self) -> dict: ...
    async def admin(self, method: str, args: dict) -> dict: ...
    async def call(self, node: str, method: str, args: dict, timeout: float = 5.0) -> Any: ...
    def on_effects(self, effects: list) -> None: ...  # the leader's workers hear theirs
    def worker_status(self) -> list[dict]: ...  # registered worker agents


class OneHost:
    """The members of a one-host node: itself."""

    duty_interval = 1.0   # placement is driven by effects; this pass is a fallback
    claims = False        # nobody else could start its runs

    def __init__(self, config: Config, machine: StateMachine):
        self.config = config
        self.machine = machine
        self.log = LocalLog(machine)
        self.removed = asyncio.Event()
        self.fatal = asyncio.Event()
        self.fatal_code = 1
        self.commit = commit()   # read at start (it may ask git): not on the loop later
        self.give_up_waiting = False
        self.read_log: Callable[[int, int], Awaitable[dict]] | None = None
        self.changes = Changes()  # it leads from the start, for good: never notified

    async def start(self) -> None:
        pass

    async def run(self) -> None:
        """No upkeep (nothing changes who leads or who is a member), but
        the cluster version: this host is every member, so its state takes
        the version this code applies as soon as it runs it (versions.py)."""
        recorded = V.recorded(self.machine.conn)
        if recorded < V.APPLY_VERSION:
            await self.log.propose(C.SetClusterVersion(
                version=V.APPLY_VERSION, members={self.config.node_id: __version__},
                at=now()))
            log.info("event=cluster_version_raised from=%d to=%d members=%s=%s", recorded,
                     V.APPLY_VERSION, self.config.node_id, __version__)

    async def wait_caught_up(self) -> None:
        pass  # everything committed is applied here

    async def transfer_before_stop(self) -> None:
        pass  # nobody to hand over to

    async def stop(self) -> None:
        pass

    def lease_fresh(self) -> bool:
        return True  # nobody else can have been given its runs

    def start_fence(self) -> str | None:
        return None  # its clock is the only one: nothing to hold it against

    def clock_fence(self) -> str | None:
        return None

    def placement_hold(self) -> str | None:
        return None

    def behind_leader(self) -> dict[str, float]:
        return {}

    def responsive(self) -> set[str]:
        return {self.config.node_id}

    async def clock_ready(self) -> None:
        pass

    def member_ids(self) -> list[str]:
        return [self.config.node_id]

    def node_views(self) -> list[NodeView]:
        return [local_node(self.config)]

    def leader_duties(self) -> list[Duty]:
        return []

    def address(self) -> str:
        return ""  # no peer port

    def tags(self) -> tuple[str, ...]:
        return ()

    def status(self) -> dict:
        own = {"release": __version__, "commit": self.commit, "applies": V.APPLY_VERSION,
               "recorded": V.recorded(self.machine.conn), "answered": True}
        return {"role": "leader", "leader": self.config.node_id, "term": 0,
                "commit_index": self.machine.applied_index,
                "versions": {"cluster_version": own["recorded"], "applies": V.APPLY_VERSION,
                             "release": __version__, "members": {self.config.node_id: own},
                             "mixed": False, "behind": []}}

    def members(self) -> dict:
        raise RequestError(NO_CLUSTER)

    async def admin(self, method: str, args: dict) -> dict:
        raise RequestError(NO_CLUSTER)

    async def call(self, node: str, method: str, args: dict, timeout: float = 5.0) -> Any:
        raise RequestError(f"node {node} is not a member: {self.config.node_id} runs "
                           "without a cluster")

    def on_effects(self, effects: list) -> None:
        return None   # no workers without a cluster

    def worker_status(self) -> list[dict]:
        return []


def open_members(config: Config, machine: StateMachine, clock: Clock,
                 stalled: Callable[[float, float], bool] | None = None) -> Members:
    """The members this config describes: a cluster if it has a cluster:
    section, else this one host. ``stalled(t0, t1)``: did this node's event
    loop stall between those monotonic times (loop_watch.py)?"""
    if config.cluster is None:
        if os.path.exists(config.raft_db):
            # Its state is a cluster's: on its own it would fire the
            # cluster's jobs a second time and its history would fork.
            raise StateError(
                f"{config.data_dir} belongs to a cluster member (it holds a Raft log, "
                f"{config.raft_db}) but the config has no cluster: section; restore the "
                "cluster: section to run it as that member, or give this node a fresh "
                "data_dir to run it alone")
        return OneHost(config, machine)
    from .raft_cluster import Cluster  # the peer transport and TLS, only when needed
    return Cluster(config, machine, clock, stalled=stalled)

"""What the leader does, on whichever node leads: one place for one host
and for a cluster (one host always leads).

While this node leads it runs the scheduler (a new leader resumes from the
replicated cursors), places pending runs (a manual run, a retry) on the
members that may take them, and runs the membership's own duties (in a
cluster: declaring silent nodes' runs lost, promoting learners). It stops
all of it the moment it no longer leads. Every proposal it makes is
leader-only (``propose_as_leader``): a decision made from this leader's view
must not reach the next leader after this one was deposed.
"""

from __future__ import annotations

import asyncio
import logging

from ..config import Config
from ..errors import CronrdError
from ..state import commands as C
from ..state import queries as Q
from ..state.machine import Effect
from .clock import Clock
from .log import Log
from .members import Members
from .placement import Placement
from .scheduler import Scheduler

log = logging.getLogger("cronrd.leader")


class _LeaderOnly:
    """The scheduler's proposer: leader-only, never forwarded."""

    def __init__(self, log: Log):
        self.propose = log.propose_as_leader


class Leadership:
    def __init__(self, config: Config, log: Log, conn, clock: Clock, members: Members):
        self.config = config
        self.node_id = config.node_id
        self.log = log
        self.conn = conn
        self.clock = clock
        self.members = members
        self.placement = Placement(conn, members.node_views)
        self.scheduler: Scheduler | None = None
        self.stopping = False
        self._watch: asyncio.Task | None = None
        self._lead_task: asyncio.Task | None = None
        self._sched_task: asyncio.Task | None = None
        self._assigning: set[int] = set()
        self._placing = False

    # -- life cycle ------------------------------------------------------------
    def start(self) -> None:
        """Lead whenever this node leads, from now on (call once the job files
        are loaded and the runs of the last start settled)."""
        self._watch = asyncio.get_running_loop().create_task(self._watch_role())

    async def stop(self) -> None:
        self.stopping = True
        self._stop_leading()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)

    async def _watch_role(self) -> None:
        while not self.stopping:
            leading = self._lead_task is not None
            if self.log.is_leader and not leading:
                self._lead_task = asyncio.get_running_loop().create_task(self._lead())
                self._lead_task.add_done_callback(self._lead_ended)
            elif not self.log.is_leader and leading:
                self._stop_leading()
            await asyncio.sleep(self.members.role_poll)

    def _lead_ended(self, task: asyncio.Task) -> None:
        """A leader's duties must not die quietly: log it, and let the role
        watcher start them again (while this node still leads)."""
        if task.cancelled() or task is not self._lead_task:
            return
        exc = task.exception()
        if exc is not None:
            log.error("event=leader_duties_failed error=%r (restarting them)", exc)
        self._stop_leading()

    def _sched_ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and \
                task is self._sched_task:
            log.error("event=scheduler_failed error=%r (restarting it)", task.exception())
            self._stop_leading()

    def _stop_leading(self) -> None:
        was = self._lead_task is not None
        self._assigning.clear()
        self._placing = False
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        for task in (self._lead_task, self._sched_task):
            if task is not None:
                task.cancel()
        self._lead_task = self._sched_task = None
        if was and not self.stopping:
            log.info("event=leadership_lost node=%s", self.node_id)

    async def _lead(self) -> None:
        try:
            # Everything committed by earlier leaders is applied before this
            # one schedules: the cursors it resumes from are then current.
            await self.log.read_barrier()
        except CronrdError as exc:
            log.warning("event=lead_start_failed error=\"%s\"", exc)
            self._lead_task = None
            return
        sched = Scheduler(self.config, _LeaderOnly(self.log), self.conn, self.clock,
                          self.placement)
        self.scheduler = sched
        sched.start()
        self._sched_task = asyncio.get_running_loop().create_task(sched.run())
        self._sched_task.add_done_callback(self._sched_ended)
        log.info("event=leading node=%s jobs=%d", self.node_id, len(sched.entries))
        while not self.stopping and self.log.is_leader:
            for duty in [self._place_pending, *self.members.leader_duties()]:
                try:
                    await duty()
                except CronrdError as exc:
                    log.info("event=leader_duty_failed duty=%s error=\"%s\"",
                             duty.__name__, exc)
                except Exception:
                    log.exception("event=leader_duty_failed duty=%s", duty.__name__)
            await asyncio.sleep(self.members.duty_interval)

    # -- effects -------------------------------------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        if self.scheduler is not None:
            self.scheduler.on_effects(effects)
        for eff in effects:
            if eff.kind == "restored" and self.scheduler is not None:
                self.scheduler.started = False
                self.scheduler.entries.clear()
                self.scheduler.start()
            elif eff.kind == "pending" and self._lead_task is not None and not self._placing:
                self._placing = True  # one placement pass for a burst of pending runs
                asyncio.get_running_loop().call_soon(self._place_soon)

    def _place_soon(self) -> None:
        self._placing = False
        task = asyncio.get_running_loop().create_task(self._place_pending())

        def done(t: asyncio.Task) -> None:
            if not t.cancelled() and t.exception() is not None:
                log.info("event=placement_failed error=\"%s\"", t.exception())
        task.add_done_callback(done)

    # -- placing pending runs ----------------------------------------------------------
    async def _place_pending(self) -> None:
        if not self.log.is_leader:
            return
        runs = [r for r in Q.pending_runs(self.conn) if r["run_id"] not in self._assigning]
        if not runs:
            return
        self.placement.begin()
        proposals = []
        specs: dict[str, list[str] | None] = {}
        members = set(self.members.member_ids())
        for run in runs:
            if run["job"] not in specs:
                spec = Q.job_spec(self.conn, run["job"])
                specs[run["job"]] = [] if spec is None else self.placement.eligible(spec)
                if spec is not None and spec.run_on.mode == "nodes" and \
                        not members & set(spec.run_on.values):
                    specs[run["job"]] = None  # no listed node is a member any more
            ready = specs[run["job"]]
            gone = (run["target"] and run["target"] not in members) or ready is None
            if gone:
                # It can never be placed: say so rather than wait for ever.
                self._assigning.add(run["run_id"])
                proposals.append((run["run_id"], self.log.propose_as_leader(C.CancelRun(
                    run_id=run["run_id"], at=self.clock.now(),
                    reason="no member can run it any more (its node was removed)"))))
                continue
            if run["target"]:
                if run["target"] not in ready:
                    continue  # a per-node run waits for its node
                node = run["target"]
            elif not ready:
                continue  # waits until an eligible node is up
            else:
                node = self.placement.pick(ready, f"{run['job']}/{run['fire_time']}/"
                                                  f"{run['attempt']}")
            self._assigning.add(run["run_id"])
            proposals.append((run["run_id"], self.log.propose_as_leader(C.AssignRun(
                run_id=run["run_id"], node=node, at=self.clock.now()))))
        for run_id, fut in proposals:
            try:
                await fut
            except CronrdError as exc:
                log.info("event=assign_failed run=%d error=\"%s\"", run_id, exc)
            finally:
                self._assigning.discard(run_id)

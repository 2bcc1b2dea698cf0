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
import datetime
import dataclasses
import logging
from typing import Any, cast

from ...config import Config
from ...decisions import claims
from ...decisions.placement import no_executor
from ...errors import CronrdError
from ...jobspec import JobSpec
from ...config.calendars import resolve as resolve_calendars
from ...state import calendars as CAL
from ...state import commands as C
from ...state import versions as V
from ...state import pools as PL
from ...state import queries as Q
from ...state import start_deadline
from ...state.apply_watches import overdue as watch_overdue
from ...state.effects import Effect, RunPending, StateRestored
from . import sla_watch as alerting
from .backfills import Backfiller
from ..clock import Clock
from .heartbeat_watch import HeartbeatWatch
from ..log.base import Log
from ..cluster.members import Members
from ..notify.delivery import Delivery
from .placement import Placement
from .planned import PlannedRuns
from .scheduler import Scheduler
from ..tasks import HEALTHY_AFTER, RESTART_MAX, RESTART_MIN

CALENDARS_EVERY = 60   # seconds between looks at the config's calendars (leader)
CALENDARS_TIMEOUT = 10.0  # seconds resolving them may take (ICS files, holidays)
log = logging.getLogger("cronrd.leader")


REPLACE_AFTER = 1.0  # s before a lost run goes back to the node that lost it (no other)


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
        self.placement = Placement(conn, self._node_views)
        # In a cluster, runs nobody claimed in time move to another node
        # (decisions/claims.py); the nodes that missed, by when (monotonic).
        self.claims = members.claims
        self.suspects: dict[str, float] = {}
        self._moving: set[int] = set()
        self.scheduler: Scheduler | None = None
        self._assigning: set[int] = set()
        self._pending = asyncio.Event()  # pending runs were committed: place them
        self.backfiller: Backfiller | None = None
        self.delivery: Delivery | None = None  # the outbox's sender (notify/delivery.py)
        self.planned: PlannedRuns | None = None  # starts `run-now --at` runs (planned.py)
        self._leading = False
        self._sla_looked = float("-inf")
        self._calendars_looked = float("-inf")
        self.heartbeats = HeartbeatWatch(log, conn, clock, lambda: members.clock_fence())

    # -- life cycle ------------------------------------------------------------
    async def run(self) -> None:
        """Lead whenever this node leads, until cancelled (the daemon owns
        this as a service; start it once the job files are loaded and the
        runs of the last start settled). A term whose scheduler or duties
        fail is logged and started again after a bounded back-off, while
        this node still leads."""
        loop = asyncio.get_running_loop()
        delay = RESTART_MIN
        while True:
            await self.members.changes.until(lambda: self.log.is_leader)
            started = loop.time()
            try:
                await self._term()
                continue  # leadership ended; wait to lead again
            except CronrdError as exc:  # the read barrier: no leader after all?
                log.warning("event=lead_start_failed error=\"%s\"", exc)
            except Exception as exc:
                failed = [e for e in getattr(exc, "exceptions", [exc])]
                log.error("event=leader_duties_failed error=%r restart_in_s=%g", failed[0],
                          delay, exc_info=failed[0])
            if loop.time() - started >= HEALTHY_AFTER:
                delay = RESTART_MIN
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_MAX)

    async def _term(self) -> None:
        """One stint as the leader: the scheduler, the placement of pending
        runs and the membership's duties, until this node no longer leads."""
        # Everything committed by earlier leaders is applied before this
        # one schedules: the cursors it resumes from are then current.
        await self.log.read_barrier()
        # Nor before its clock is known to be within bounds: a leader 30 s
        # fast would commit every fire 30 s early (Members.clock_ready).
        await self.members.clock_ready()
        if not self.log.is_leader:
            return
        # This leader's pools and calendars are in force before it fires anything.
        await self._set_pools()
        self._calendars_looked = float("-inf")
        try:   # (a calendar that cannot be read now keeps the ones in force: never fatal)
            await self._set_calendars()
        except CronrdError as exc:
            log.warning("event=calendars_set_failed error=\"%s\"", exc)
        sched = Scheduler(self.config, _LeaderOnly(self.log), self.conn, self.clock,
                          self.placement, hold=self.members.placement_hold)
        self.scheduler = sched
        self._leading = True
        try:
            await sched.start_async()
            log.info("event=leading node=%s jobs=%d", self.node_id, len(sched.entries))
            self.heartbeats.begin_term()  # silence counts from this election
            async with asyncio.TaskGroup() as tg:
                # Open backfills resume where the last leader left them.
                self.backfiller = Backfiller(self.conn, self.log.propose_as_leader,
                                             self.clock, self.members.duty_interval)
                tasks = [tg.create_task(sched.run(), name="scheduler"),
                         tg.create_task(self._placer(), name="placement"),
                         tg.create_task(self._duties(), name="leader-duties"),
                         tg.create_task(self.backfiller.run(), name="backfills")]
                if self.claims:
                    tasks.append(tg.create_task(self._mover(), name="claims"))
                self.delivery = Delivery(self.config, self.conn, self.log.propose_as_leader,
                                         self.clock)
                tasks.append(tg.create_task(self.delivery.run(), name="notifications"))
                self.planned = PlannedRuns(self.conn, self.log.propose_as_leader, self.clock,
                                           self.members.clock_fence)
                tasks.append(tg.create_task(self.planned.run(), name="planned-runs"))
                await self.members.changes.until(lambda: not self.log.is_leader)
                for task in tasks:
                    task.cancel()
            log.info("event=leadership_lost node=%s", self.node_id)
        finally:
            self._leading = False
            self.backfiller = None
            self.delivery = None
            self.planned = None
            self._assigning.clear()
            self._moving.clear()
            sched.stop()
            self.scheduler = None

    async def _duties(self) -> None:
        """The leader's housekeeping, every duty_interval (a timer)."""
        while True:
            for duty in [self._place_pending, self._upstream_timeouts, self._sla_watch,
                         self._set_pools, self._set_calendars, self._watches_missed,
                         self._start_deadlines, self.heartbeats.duty,
                         *self.members.leader_duties()]:
                try:
                    await duty()
                except CronrdError as exc:
                    log.info("event=leader_duty_failed duty=%s error=\"%s\"",
                             duty.__name__, exc)
                except Exception:
                    log.exception("event=leader_duty_failed duty=%s", duty.__name__)
            await asyncio.sleep(self.members.duty_interval)

    async def _placer(self) -> None:
        """Places pending runs as soon as they are committed (one pass for a
        burst of them)."""
        while True:
            await self._pending.wait()
            self._pending.clear()
            try:
                await self._place_pending()
            except CronrdError as exc:
                log.info("event=placement_failed error=\"%s\"", exc)

    # -- runs nobody claimed ----------------------------------------------------------
    def _node_views(self):
        """The members as placement sees them: a node that missed a claim
        within SUSPECT_FOR is a suspect (others first)."""
        now = self.clock.monotonic()
        for node, since in list(self.suspects.items()):
            if now - since >= claims.SUSPECT_FOR:
                del self.suspects[node]
        return [dataclasses.replace(v, suspect=True) if v.id in self.suspects else v
                for v in self.members.node_views()]

    async def _mover(self) -> None:
        """Move the runs nobody claimed by their deadline, as each deadline
        passes (a timer; at least every CLAIM_GRACE, for runs placed meanwhile)."""
        while True:
            try:
                await self._move_unclaimed()
            except CronrdError as exc:
                log.info("event=move_failed error=\"%s\"", exc)
            # Overdue runs that could not move are looked at again in a grace.
            now = self.clock.now()
            due = claims.next_deadline(Q.unclaimed_runs(self.conn), after=now,
                                       behind=self.members.behind_leader(),
                                       responsive=self.members.responsive())
            wait = claims.CLAIM_GRACE if due is None else due - now
            await asyncio.sleep(min(claims.CLAIM_GRACE, max(0.005, wait)))

    async def _move_unclaimed(self) -> None:
        if not self.log.is_leader or self.members.clock_fence() is not None:
            return  # deadlines by a clock that is off would move runs not yet due
        late = [r for r in claims.overdue(self.clock.now(), Q.unclaimed_runs(self.conn),
                                          behind=self.members.behind_leader(),
                                          responsive=self.members.responsive())
                if r.run_id not in self._moving]
        if not late:
            return
        now = self.clock.monotonic()
        for run in late:
            self.suspects[cast(str, run.node)] = now  # (unclaimed: assigned to a node)
        self.placement.begin()
        moves: list[list[Any]] = []  # [run_id, token, node] (C.ReplaceRuns)
        for run in late:
            spec = Q.job_spec(self.conn, run.job)
            ready = [] if spec is None else [n for n in self.placement.eligible(spec)
                                             if n != run.node]
            if not ready:
                continue  # nowhere else to go: it waits for its node (or node loss)
            moves.append([run.run_id, run.token,
                          self.placement.pick(ready, f"{run.job}/{run.fire_time}/"
                                                     f"{run.attempt}/moved")])
        if not moves:
            return
        reason = (f"not claimed within {claims.CLAIM_GRACE:g}s of its fire time (its node "
                  "dead, cut off, paused or overloaded?)")
        log.warning("event=runs_moved count=%d from=%s reason=\"%s\"", len(moves),
                    ",".join(sorted({cast(str, r.node) for r in late})), reason)
        ids = {m[0] for m in moves}
        self._moving |= ids
        try:
            await self.log.propose_as_leader(C.ReplaceRuns(moves=moves, at=self.clock.now(),
                                                           reason=reason))
        finally:
            self._moving -= ids

    def next_fires(self, names: list[str]) -> dict[str, int | None]:
        """The scheduler's next fire time of those of ``names`` it has (none
        unless this node leads); listings ask once per page."""
        sched = self.scheduler
        if sched is None:
            return {}
        return {name: sched.next_fire(name) for name in names if name in sched.entries}

    # -- effects -------------------------------------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        if self.scheduler is not None:
            self.scheduler.on_effects(effects)
        if self.backfiller is not None:
            self.backfiller.on_effects(effects)
        if self.delivery is not None:
            self.delivery.on_effects(effects)
        if self.planned is not None:
            self.planned.on_effects(effects)
        for eff in effects:
            if isinstance(eff, StateRestored) and self.scheduler is not None:
                self.scheduler.started = False
                self.scheduler.entries.clear()
                self.scheduler.start()
            elif isinstance(eff, RunPending) and self._leading:
                self._pending.set()

    # -- scheduled children whose wait for their parents ran out -----------------------
    async def _upstream_timeouts(self) -> None:
        """Propose the end of each wait_for_upstream that ran out; apply looks
        at the gate once more (it may have opened meanwhile)."""
        if not self.log.is_leader or self.members.clock_fence() is not None:
            return
        from ...state.dependencies import waiting_due
        for run_id, _end in waiting_due(self.conn, self.clock.now()):
            try:
                await self.log.propose_as_leader(C.UpstreamTimeout(run_id=run_id,
                                                                   at=self.clock.now()))
            except CronrdError as exc:
                log.info("event=upstream_timeout_failed run=%d error=\"%s\"", run_id, exc)

    # -- pools (state/pools.py) -----------------------------------------------------------
    async def _set_pools(self) -> None:
        """Put this leader's daemon config's pools in force, when the state's differ."""
        if not self.log.is_leader:
            return
        mine = [[p.name, p.slots, p.scope] for p in self.config.pools]
        if [list(p) for p in PL.in_force(self.conn)] != mine:
            log.info("event=pools_set pools=%s", ",".join(
                f"{n}:{s}:{sc}" for n, s, sc in mine) or "none")
            await self.log.propose_as_leader(C.SetPools(pools=mine, at=self.clock.now()))

    # -- calendars (state/calendars.py) ---------------------------------------------------
    async def _set_calendars(self) -> None:
        """Put this leader's daemon config's calendars, resolved to days, in
        force when the state's differ (looked at every CALENDARS_EVERY s:
        an ICS file may change, and a new year brings its holidays)."""
        if not self.log.is_leader or not V.at_least(self.conn, V.CALENDARS):
            return
        now = self.clock.now()
        if now - self._calendars_looked < CALENDARS_EVERY:
            return
        self._calendars_looked = now
        year = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).year
        try:
            async with asyncio.timeout(CALENDARS_TIMEOUT):
                cals = await asyncio.to_thread(resolve_calendars, self.config.calendars, year)
        except (CronrdError, TimeoutError, ValueError, OSError) as exc:
            log.error("event=calendars_unreadable error=\"%s\" hint=\"the calendars in force "
                      "stay as they were; fix the file and the leader tries again within "
                      "%ds\"", exc, CALENDARS_EVERY)
            return
        mine = {name: cal.to_dict() for name, cal in cals.items()}
        if {n: CAL.canonical(b) for n, b in mine.items()} != CAL.bodies(self.conn):
            log.info("event=calendars_set calendars=%s", ",".join(sorted(mine)) or "none")
            await self.log.propose_as_leader(C.SetCalendars(calendars=mine, at=now))

    # -- watches (state/apply_watches.py) -----------------------------------------------
    async def _watches_missed(self) -> None:
        """Propose the end, missed, of each watch's run whose grace is over
        with no ping (apply checks it again: the ping may have come)."""
        if not self.log.is_leader or self.members.clock_fence() is not None:
            return
        for run_id, job in watch_overdue(self.conn, self.clock.now()):
            try:
                await self.log.propose_as_leader(C.WatchMissed(run_id=run_id,
                                                               at=self.clock.now()))
                log.info("event=watch_missed job=%s run=%d", job, run_id)
            except CronrdError as exc:
                log.info("event=watch_missed_failed run=%d error=\"%s\"", run_id, exc)

    async def _start_deadlines(self) -> None:
        """Propose the skip of each run not started by its job's start_deadline;
        apply checks it again (it may have started meanwhile)."""
        if not self.log.is_leader or self.members.clock_fence() is not None:
            return
        for run_id in start_deadline.overdue(self.conn, self.clock.now()):
            try:
                await self.log.propose_as_leader(C.StartDeadline(run_id=run_id,
                                                                 at=self.clock.now()))
            except CronrdError as exc:
                log.info("event=start_deadline_failed run=%d error=\"%s\"", run_id, exc)
    # -- SLA misses (runtime/leader/sla_watch.py) ---------------------------------------------
    async def _sla_watch(self) -> None:
        """Propose the SLA misses not alerted yet (every alerting.EVERY s)."""
        if not self.log.is_leader or self.members.clock_fence() is not None:
            return
        now = self.clock.now()
        if now - self._sla_looked < alerting.EVERY:
            return
        self._sla_looked = now
        await alerting.watch_once(self.conn, now, self.config.timezone,
                                  self.log.propose_as_leader)

    # -- placing pending runs ----------------------------------------------------------
    async def _place_pending(self) -> None:
        if not self.log.is_leader:
            return
        runs = [r for r in Q.pending_runs(self.conn) if r.run_id not in self._assigning]
        if not runs:
            return
        self.placement.begin()
        proposals = []
        specs: dict[str, list[str] | None] = {}
        spec_of: dict[str, JobSpec | None] = {}
        never: dict[str, str] = {}   # job -> why no member can ever run it
        members = set(self.members.member_ids())
        for run in runs:
            if run.job not in specs:
                spec = spec_of[run.job] = Q.job_spec(self.conn, run.job)
                specs[run.job] = [] if spec is None else self.placement.eligible(spec)
                if spec is not None and spec.run_on.mode == "nodes" and \
                        not members & set(spec.run_on.values):
                    specs[run.job] = None  # no listed node is a member any more
                    never[run.job] = "no member can run it any more (its node was removed)"
                elif spec is not None and not self.placement.offered(spec):
                    # e.g. a manual run of a container job where no member has podman
                    specs[run.job] = None
                    never[run.job] = no_executor(spec.executor_type)
            ready = specs[run.job]
            gone = (run.target and run.target not in members) or ready is None
            if gone:
                # It can never be placed: say so rather than wait for ever.
                self._assigning.add(run.run_id)
                proposals.append((run.run_id, self.log.propose_as_leader(C.CancelRun(
                    run_id=run.run_id, at=self.clock.now(),
                    reason=never.get(run.job, "no member can run it any more (its node was "
                                              "removed)")))))
                continue
            if run.target:
                # Its node or none: a suspect (it missed another run's claim)
                # still gets it, as nobody else could.
                run_spec = spec_of[run.job]
                if run_spec is None or run.target not in \
                        self.placement.eligible(run_spec, trusted=False):
                    continue  # a per-node run waits for its node
                node = run.target
            elif not ready:
                continue  # waits until an eligible node is up
            else:
                # Not straight back on the node that lost the attempt before
                # (it may have refused to start it: its clock is off, or it
                # was cut off), or a refusal bounces between it and the log
                # at commit speed. Another node if there is one; else the
                # same one, once REPLACE_AFTER has passed (a lone node).
                lost = Q.lost_by(self.conn, run)
                choices = [n for n in ready if lost is None or n != lost[0]]
                if not choices:
                    assert lost is not None  # only its node was ready
                    wait = lost[1] + REPLACE_AFTER - self.clock.now()
                    if wait > 0:
                        asyncio.get_running_loop().call_later(wait, self._pending.set)
                        continue
                    choices = ready
                run_spec = spec_of[run.job]
                assert run_spec is not None  # it has eligible nodes (ready)
                node = self.placement.pick(self.placement.with_room(run_spec, choices),
                                           f"{run.job}/{run.fire_time}/{run.attempt}")
            self._assigning.add(run.run_id)
            proposals.append((run.run_id, self.log.propose_as_leader(C.AssignRun(
                run_id=run.run_id, node=node, at=self.clock.now()))))
        for run_id, fut in proposals:
            try:
                await fut
            except CronrdError as exc:
                log.info("event=assign_failed run=%d error=\"%s\"", run_id, exc)
            finally:
                self._assigning.discard(run_id)

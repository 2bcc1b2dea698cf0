"""The leader starts planned runs (`cronrd run-now JOB --at TIME`,
state/planned.py) at their time.

It sleeps until the soonest plan is LEAD seconds away (as the scheduler
commits a fire ahead of it), then proposes a ``ManualRun`` with the
plan's id and ``at`` = the planned time: the run is placed and released at
that time by its node's gate, like a fire. Apply removes the plan in the
same transaction, so a plan starts once across retries and leader
changes; a plan overdue when a leader takes over (the last one died) is
started at once, its run's due time saying how late. A leader whose clock
is out of bounds starts nothing (Members.clock_fence)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from ...errors import CronrdError, Refused
from ...state import commands as C
from ...state import planned as PLN
from ...state.effects import Effect, PlansChanged, StateRestored
from ..clock import Clock
from .scheduler import LEAD, MAX_SLEEP, RETRY_DELAY

log = logging.getLogger("cronrd.planned")


class PlannedRuns:
    def __init__(self, conn, propose: Callable[[C.Command], Awaitable[Any]], clock: Clock,
                 fence: Callable[[], str | None]):
        self.conn = conn
        self.propose = propose
        self.clock = clock
        self.fence = fence
        self._wake = asyncio.Event()
        self._proposing: set[int] = set()
        self._tasks: set[asyncio.Task] = set()

    def on_effects(self, effects: list[Effect]) -> None:
        if any(isinstance(e, (PlansChanged, StateRestored)) for e in effects):
            self._wake.set()

    async def run(self) -> None:
        try:
            while True:
                self._wake.clear()
                now = self.clock.now()
                if self.fence() is None:
                    for plan in PLN.due_by(self.conn, now + LEAD):
                        if plan.plan_id not in self._proposing:
                            self._start(plan)
                soonest = PLN.soonest(self.conn)
                wait = MAX_SLEEP if soonest is None else \
                    min(MAX_SLEEP, max(RETRY_DELAY / 10, soonest - LEAD - now))
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            for task in self._tasks:
                task.cancel()

    def _start(self, plan: PLN.Plan) -> None:
        self._proposing.add(plan.plan_id)
        task = asyncio.create_task(self._propose(plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _propose(self, plan: PLN.Plan) -> None:
        try:
            res = await self.propose(C.ManualRun(
                job=plan.job, node="", at=plan.due, params=plan.params, key=plan.run_key,
                plan_id=plan.plan_id))
            log.info("event=planned_run_started plan=%d job=%s run=%s state=%s", plan.plan_id,
                     plan.job, res.get("run_id"), res.get("state"))
        except Refused as exc:   # cancelled or started meanwhile: nothing to do
            log.info("event=planned_run_gone plan=%d job=%s reason=\"%s\"", plan.plan_id,
                     plan.job, exc)
        except CronrdError as exc:
            log.warning("event=planned_run_failed plan=%d job=%s error=\"%s\" retry_in_s=%g",
                        plan.plan_id, plan.job, exc, RETRY_DELAY)
            await asyncio.sleep(RETRY_DELAY)
        finally:
            self._proposing.discard(plan.plan_id)
            self._wake.set()

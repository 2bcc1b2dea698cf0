"""The leader starts planned runs (runtime/leader/planned.py): LEAD seconds
before their time, not earlier, once, not with its clock out of bounds, and
at once when they are overdue (the last leader died)."""

from __future__ import annotations

import asyncio

from cronrd.errors import NotLeader
from cronrd.runtime.leader.planned import PlannedRuns
from cronrd.runtime.leader.scheduler import LEAD
from cronrd.state import commands as C
from cronrd.state import planned as PLN
from tests.unit.state.test_state import T0, Log


class Clock:
    def __init__(self, t):
        self.t = t

    def now(self):
        return self.t


def setup(fence=None, fail_first: bool = False):
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    log.put()
    plan_id = log.apply(C.PlanRun(job="j", due=T0 + 100, by="me", at=T0))["plan"]["plan_id"]
    proposed: list[C.Command] = []

    async def propose(cmd):
        proposed.append(cmd)
        if fail_first and len(proposed) == 1:
            raise NotLeader(None)
        seen = len(log.effects)
        result = log.apply(cmd)
        planned.on_effects(log.effects[seen:])
        return result
    clock = Clock(T0)
    planned = PlannedRuns(log.sm.conn, propose, clock, fence or (lambda: None))
    planned.plan_id = plan_id
    return log, clock, planned, proposed


async def turn(task_owner: PlannedRuns, clock: Clock, t: float, wait: float = 0.05):
    clock.t = t
    task_owner._wake.set()
    await asyncio.sleep(wait)


def test_it_starts_a_plan_lead_seconds_ahead_and_once():
    async def main():
        log, clock, planned, proposed = setup()
        task = asyncio.create_task(planned.run())
        await turn(planned, clock, T0 + 100 - LEAD - 1)
        assert proposed == []
        await turn(planned, clock, T0 + 100 - LEAD + 0.01)
        (cmd,) = proposed
        pid = planned.plan_id
        assert isinstance(cmd, C.ManualRun) and (cmd.plan_id, cmd.at, cmd.key, cmd.node) == \
            (pid, T0 + 100, f"plan-{pid}", "")
        assert PLN.plans(log.sm.conn) == []
        await turn(planned, clock, T0 + 101)
        assert len(proposed) == 1
        task.cancel()
    asyncio.run(main())


def test_an_overdue_plan_starts_at_once_and_a_failed_proposal_is_asked_again():
    async def main():
        log, clock, planned, proposed = setup(fail_first=True)
        clock.t = T0 + 500          # the leader that should have started it died
        task = asyncio.create_task(planned.run())
        for _ in range(100):
            if len(proposed) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(proposed) == 2 and all(c.at == T0 + 100 for c in proposed)
        assert PLN.plans(log.sm.conn) == []
        task.cancel()
    asyncio.run(main())


def test_a_leader_with_its_clock_out_of_bounds_starts_nothing():
    async def main():
        log, clock, planned, proposed = setup(fence=lambda: "clock 9 s off")
        task = asyncio.create_task(planned.run())
        await turn(planned, clock, T0 + 200)
        assert proposed == [] and len(PLN.plans(log.sm.conn)) == 1
        task.cancel()
    asyncio.run(main())

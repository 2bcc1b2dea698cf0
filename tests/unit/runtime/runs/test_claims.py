"""A node's claims (cronrd/runtime/runs/claims.py), against the real state
machine on the one-member log: one command for the runs of a loop turn,
asked until decided, each run told whether it may start."""

from __future__ import annotations

import asyncio
import dataclasses

import apsw

from cronrd.errors import CronrdError
from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.runs import claims as CL
from cronrd.runtime.runs.active import ActiveRun
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state import run_life as L
from cronrd.state.machine import StateMachine
from tests.unit.state.test_state import T0, spec
from virtual_time import LoopClock, run_virtual


def Clock() -> LoopClock:  # noqa: N802 - the runtime's Clock, on the virtual loop
    return LoopClock(T0)


class Flaky:
    """The log, after ``fail`` tries that find no leader; counts commands."""

    def __init__(self, log, fail=0, delay=0.0):
        self.log, self.fail, self.delay, self.sent = log, fail, delay, []

    async def propose(self, cmd):
        self.sent.append(cmd)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise CronrdError("no leader")
        return await self.log.propose(cmd)


async def setup(n=3, node="a"):
    sm = StateMachine(apsw.Connection(":memory:"))
    log = LocalLog(sm)
    await log.propose(C.PutJob(name="j", spec=spec(concurrency="allow"), digest="d", at=T0,
                               node=node, source="/j.yaml"))
    acts = []
    for i in range(n):
        res = await log.propose(C.Fire(job="j", fire_time=int(T0) + 1 + i, kind="scheduled",
                                       node=node, due_at=T0 + 1 + i, at=T0))
        run = Q.get_run(sm.conn, res["run_id"])
        acts.append(ActiveRun(run=run, spec=None, key=f"k{i}", log_path="/l", kill_grace=1,
                              life=L.Life(phase=L.Phase.WAITING, pid=100 + i, ready=True)))
    return sm, log, acts


def stepper(events):
    def step(act, event):
        act.life, _ = L.step(act.life, event)
        events.append((act.run.run_id, type(event).__name__))
    return step


def test_the_runs_of_one_loop_turn_are_claimed_in_one_command_and_win():
    async def main():
        sm, log, acts = await setup(3)
        prop, events = Flaky(log), []
        claims = CL.Claims("a", prop, Clock(), stepper(events))
        claims.want(acts[:2])
        claims.want(acts[2:])
        claims.want(acts)  # asked already: not again
        assert [a.life.claim for a in acts] == ["asking"] * 3
        await asyncio.sleep(0.05)
        assert len(prop.sent) == 1 and len(prop.sent[0].claims) == 3
        assert [a.life.claim for a in acts] == ["won"] * 3 and all(
            a.life.at_gate_ready for a in acts)
        assert all(Q.get_run(sm.conn, a.run.run_id).claimed_at is not None for a in acts)
        assert CL.LEAD_MIN <= claims.lead() <= CL.LEAD_MAX
    run_virtual(main())


def test_a_claim_is_asked_again_until_a_leader_decides_it():
    async def main():
        sm, log, acts = await setup(1)
        prop, events = Flaky(log, fail=3), []
        claims = CL.Claims("a", prop, Clock(), stepper(events))
        claims.want(acts)
        deadline = asyncio.get_running_loop().time() + 5
        while acts[0].life.claim == "asking" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert acts[0].life.claim == "won" and len(prop.sent) == 4
    run_virtual(main())


def test_a_run_moved_away_loses_its_claim_and_is_stopped_unreported():
    async def main():
        sm, log, acts = await setup(2)
        moved = acts[1].run
        await log.propose(C.ReplaceRuns(moves=[[moved.run_id, moved.token, "b"]], at=T0,
                                        reason="not claimed"))
        prop, events = Flaky(log), []
        claims = CL.Claims("a", prop, Clock(), stepper(events))
        claims.want(acts)
        await asyncio.sleep(0.05)
        assert acts[0].life.claim == "won"
        assert (acts[1].life.claim, acts[1].life.stop_state) == ("lost", "final")
        assert "moved to node b" in acts[1].life.stop_reason
    run_virtual(main())


def test_a_run_that_stopped_waiting_is_not_claimed_any_more():
    async def main():
        sm, log, acts = await setup(1)
        prop, events = Flaky(log, fail=1000), []
        claims = CL.Claims("a", prop, Clock(), stepper(events))
        claims.want(acts)
        await asyncio.sleep(0.12)
        tries = len(prop.sent)
        assert tries >= 2
        acts[0].life = dataclasses.replace(acts[0].life, stop_state="lost", stop_reason="x")
        await asyncio.sleep(0.15)
        assert len(prop.sent) <= tries + 1 and not claims.tasks
        assert Q.get_run(sm.conn, acts[0].run.run_id).claimed_at is None
    run_virtual(main())


def test_the_lead_follows_how_long_claims_take_within_bounds():
    async def main():
        sm, log, acts = await setup(2)
        claims = CL.Claims("a", Flaky(log, delay=0.04), Clock(), stepper([]))
        assert claims.lead() == CL.LEAD_FIRST
        claims.want(acts[:1])
        await asyncio.sleep(0.1)
        assert 0.04 <= claims.lead() < 0.1
        slow = CL.Claims("a", Flaky(log, delay=0.6), Clock(), stepper([]))
        slow._took.extend([5.0] * 3)
        assert slow.lead() == CL.LEAD_MAX
    run_virtual(main())


def test_a_refused_claim_hands_the_run_back_not_started_to_be_reported():
    class Refusing:
        async def propose(self, cmd):
            from cronrd.errors import Refused
            raise Refused("claims: a non-empty list is required")

    async def main():
        sm, log, acts = await setup(1)
        claims = CL.Claims("a", Refusing(), Clock(), stepper([]))
        claims.want(acts)
        await asyncio.sleep(0.05)
        life = acts[0].life
        assert (life.stop_state, life.claim) == ("lost", "asking")
        life, actions = L.step(life, L.Exited(9, 0, T0))
        (report,) = [a for a in actions if isinstance(a, L.Report)]
        assert report.state == "lost" and report.not_started  # retried, whatever the policy
    run_virtual(main())


class Held:
    """A log whose answers wait until released; ``leader`` is whom it knows."""

    def __init__(self, log, leader="b"):
        self.log, self.leader, self.sent, self.gates = log, leader, [], []

    async def propose(self, cmd):
        self.sent.append(cmd)
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return await self.log.propose(cmd)


def test_a_slow_claim_is_waited_for_not_proposed_again_while_the_leader_stays():
    async def main():
        sm, log, acts = await setup(2)
        prop, events = Held(log), []
        claims = CL.Claims("a", prop, Clock(), stepper(events))
        claims.want(acts)
        await asyncio.sleep(CL.TRY_TIMEOUT * 3)  # three tries' worth, unanswered
        assert len(prop.sent) == 1
        assert [a.life.claim for a in acts] == ["asking"] * 2
        prop.gates[0].set()
        await asyncio.sleep(0.05)
        assert len(prop.sent) == 1 and [a.life.claim for a in acts] == ["won"] * 2
        assert not claims.tasks
    run_virtual(main())


def test_a_claim_unanswered_when_the_leader_changes_is_proposed_to_the_new_one():
    async def main():
        sm, log, acts = await setup(2)
        prop = Held(log, leader="b")
        claims = CL.Claims("a", prop, Clock(), stepper([]))
        claims.want(acts)
        await asyncio.sleep(0.05)
        prop.leader = "c"  # b died or was cut off with the claim
        await asyncio.sleep(CL.TRY_TIMEOUT + 0.1)
        assert len(prop.sent) == 2 and prop.sent[1].claims == prop.sent[0].claims
        prop.gates[1].set()
        await asyncio.sleep(0.05)
        assert [a.life.claim for a in acts] == ["won"] * 2
        prop.gates[0].set()  # the first one's late answer changes nothing
        await asyncio.sleep(0.05)
        assert [a.life.claim for a in acts] == ["won"] * 2 and not claims.tasks
        assert all(Q.get_run(sm.conn, a.run.run_id).claimed_at for a in acts)
    run_virtual(main())


def test_a_claim_sent_while_there_was_no_leader_is_waited_for_once_one_is_known():
    async def main():
        sm, log, acts = await setup(1)
        prop = Held(log, leader="")
        claims = CL.Claims("a", prop, Clock(), stepper([]))
        claims.want(acts)
        await asyncio.sleep(0.05)
        prop.leader = "b"  # the proposal itself goes there (raft_log waits for a leader)
        await asyncio.sleep(CL.TRY_TIMEOUT * 2.5)
        assert len(prop.sent) == 1
        prop.gates[0].set()
        await asyncio.sleep(0.05)
        assert acts[0].life.claim == "won"
    run_virtual(main())


def test_a_claim_goes_to_the_new_leader_as_soon_as_the_change_is_known(monkeypatch):
    # A leader that hands over with its disk stuck answers only when its
    # write ends: the claim is asked of the new one at the change, not at
    # the next TRY_TIMEOUT look.
    from cronrd.runtime.tasks import Changes
    monkeypatch.setattr(CL, "TRY_TIMEOUT", 30.0)

    async def main():
        sm, log, acts = await setup(2)
        prop = Held(log, leader="b")
        prop.changes = Changes()
        claims = CL.Claims("a", prop, Clock(), stepper([]))
        claims.want(acts)
        await asyncio.sleep(0.05)
        assert len(prop.sent) == 1
        prop.changes.notify()            # something changed, not the leader: wait on
        await asyncio.sleep(0.05)
        assert len(prop.sent) == 1
        prop.leader = "c"
        prop.changes.notify()
        deadline = asyncio.get_running_loop().time() + 5
        while len(prop.sent) < 2:
            assert asyncio.get_running_loop().time() < deadline, "not asked again"
            await asyncio.sleep(0.01)
        prop.gates[1].set()
        while [a.life.claim for a in acts] != ["won"] * 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        prop.gates[0].set()
        await asyncio.sleep(0.05)
        assert not claims.tasks
    run_virtual(main())

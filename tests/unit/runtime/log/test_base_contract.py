"""The ``Log`` contract (runtime/log/base.py), the same for both implementations:
the one-host direct log and a one-voter Raft log."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.errors import CronrdError
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.effects import JobsChanged, RunAssigned
from log_impls import KINDS, open_log
from tests.unit.state.test_apply import bad_fire
from tests.unit.runtime.log.test_replicated import fire, put
from tests.unit.state.test_state import T0


def run(kind, tmp_path, body):
    async def main():
        async with open_log(kind, str(tmp_path)) as (log, machine):
            return await body(log, machine)
    return asyncio.run(asyncio.wait_for(main(), 30))


@pytest.mark.parametrize("kind", KINDS)
def test_propose_resolves_with_apply_result(kind, tmp_path):
    async def body(log, machine):
        job = await log.propose(put())
        run1 = await log.propose(fire(T0 + 1))
        assert job["changed"] is True and job["created"] is True
        assert run1 == {"run_id": 1, "state": "assigned"}
        assert Q.get_run(machine.conn, 1).fire_time == T0 + 1
    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refusal_fails_only_its_own_proposal(kind, tmp_path):
    async def body(log, machine):
        await log.propose(put())
        await log.propose(fire(T0 + 1))
        # One batch: a duplicate fire time (Refused), a command apply cannot
        # handle, and a good one.
        res = await asyncio.gather(log.propose(fire(T0 + 1)), log.propose(bad_fire()),
                                   log.propose(fire(T0 + 2)), return_exceptions=True)
        assert isinstance(res[0], Refused)
        assert isinstance(res[1], Refused) and "could not be applied" in str(res[1])
        assert res[2] == {"run_id": 2, "state": "assigned"}
        with pytest.raises(Refused):
            await log.propose(C.SetPaused(name="nope", paused=True, at=T0))
        return machine.applied_index
    # Refused commands take an index too, on every node alike.
    assert run(kind, tmp_path, body) >= 6


@pytest.mark.parametrize("kind", KINDS)
def test_subscribers_get_committed_effects_in_order(kind, tmp_path):
    async def body(log, machine):
        seen, also = [], []
        log.subscribe(seen.extend)
        log.subscribe(also.extend)
        await log.propose(put())
        await asyncio.gather(*(log.propose(fire(T0 + i)) for i in range(1, 6)))
        await log.propose(C.CancelRun(run_id=3, reason="test", at=T0 + 10))
        assigned = [e.run.run_id for e in seen if isinstance(e, RunAssigned)]
        assert assigned == [1, 2, 3, 4, 5]
        assert [e.kind for e in seen][-1] in ("cancel", "run_done")
        assert [e.kind for e in seen if isinstance(e, JobsChanged)] == ["jobs_changed"]
        assert also == seen
        # Effects come after the commit: the state they speak of is there.
        assert Q.get_run(machine.conn, 5) is not None
    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_subscriber_does_not_cost_the_others_their_effects(kind, tmp_path):
    async def body(log, machine):
        seen = []

        def broken(effects):
            raise RuntimeError("listener bug")
        log.subscribe(broken)
        log.subscribe(seen.extend)
        assert (await log.propose(put()))["changed"] is True
        assert any(isinstance(e, JobsChanged) for e in seen)
    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", KINDS)
def test_read_barrier_covers_every_committed_write(kind, tmp_path):
    async def body(log, machine):
        await log.propose(put())
        futs = [log.propose(fire(T0 + i)) for i in range(1, 4)]
        await asyncio.gather(*futs)
        index = await log.read_barrier()
        assert index >= 4 and machine.applied_index >= index
        assert len(Q.list_runs(machine.conn)) == 3
    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", KINDS)
def test_the_only_member_leads_and_proposes_as_leader(kind, tmp_path):
    async def body(log, machine):
        assert log.is_leader
        res = await log.propose_as_leader(put())
        assert res["changed"] is True
        with pytest.raises(Refused):
            await log.propose_as_leader(C.SetPaused(name="nope", paused=True, at=T0))
        assert (await log.propose_as_leader(fire(T0 + 1)))["run_id"] == 1
    run(kind, tmp_path, body)


@pytest.mark.parametrize("kind", KINDS)
def test_drain_waits_for_the_proposals_made(kind, tmp_path):
    async def body(log, machine):
        futs = [log.propose(put())] + [log.propose(fire(T0 + i)) for i in range(1, 4)]
        await log.drain()
        assert all(f.done() for f in futs)
        for f in futs:
            assert not isinstance(f.exception(), CronrdError)
    run(kind, tmp_path, body)

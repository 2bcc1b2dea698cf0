"""The scheduler with an injected clock: clock jumps and failed commits."""

from __future__ import annotations

import asyncio
import logging

import apsw

from cronrd.config import Config
from cronrd.jobspec import JobSpec, RunOn
from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.leader.scheduler import Scheduler
from cronrd.state import commands as C
from cronrd.state.machine import StateMachine
from virtual_time import run_virtual

T0 = 1_800_000_000.2


class FakeClock:
    def __init__(self, t):
        self.t = t

    def now(self):
        return self.t

    def monotonic(self):
        return self.t


async def setup(schedule: str, catchup: str):
    conn = apsw.Connection(":memory:")
    log = LocalLog(StateMachine(conn))
    clock = FakeClock(T0)
    cfg = Config(node_id="n1", data_dir="/tmp", jobs_dir="/tmp", socket="/tmp/x",
                 log_dir="/tmp", timezone="UTC")
    spec = JobSpec(name="j", schedule=schedule, command="true", catchup=catchup)
    await log.propose(C.PutJob(name="j", spec=spec.to_dict(), digest="d", source="s",
                               at=clock.now()))
    sch = Scheduler(cfg, log, conn, clock)
    sch.start()
    return conn, log, clock, sch


def counts(conn):
    return {(k, s): n for k, s, n in conn.execute(
        "SELECT kind, state, count(*) FROM runs GROUP BY kind, state")}


def test_a_clock_jump_follows_the_catchup_policy_instead_of_firing_everything():
    async def main():
        conn, log, clock, sch = await setup("* * * * *", "none")
        task = asyncio.create_task(sch.run())
        await asyncio.sleep(0.05)
        clock.t += 7200  # the host was suspended for two hours
        sch.wake()
        for _ in range(50):
            await asyncio.sleep(0.01)
        await log.drain()
        c = counts(conn)
        # 120 missed minutes: none of them runs; every one is accounted for.
        assert c.get(("scheduled", "assigned"), 0) + c.get(("catchup", "assigned"), 0) <= 1
        skipped = sum(n for (k, s), n in c.items() if s == "skipped")
        gaps = sum(n for (n,) in conn.execute("SELECT count FROM gaps"))
        assert skipped + gaps >= 119
        sch.stop()
        await task
    run_virtual(main())


class FlakyLog:
    """A log whose first N commits fail, as a full disk or a locked file would."""

    def __init__(self, inner: LocalLog, failures: int):
        self.inner, self.failures = inner, failures

    def propose(self, cmd):
        if self.failures > 0 and isinstance(cmd, C.Fire):
            self.failures -= 1
            fut = asyncio.get_running_loop().create_future()
            from cronrd.errors import StorageError
            fut.set_exception(StorageError("disk full"))
            return fut
        return self.inner.propose(cmd)


async def tick_seconds(sch, clock, seconds: int) -> asyncio.Task:
    """Run the scheduler through ``seconds`` seconds from T0, each long
    enough for a retry (RETRY_DELAY of loop time); its task, running."""
    task = asyncio.create_task(sch.run())
    for step in range(seconds):
        clock.t = T0 + step
        sch.wake()
        for _ in range(80):
            await asyncio.sleep(0.01)
    return task


def test_fires_that_fail_to_commit_are_proposed_again_in_order():
    async def main():
        conn, log, clock, sch = await setup("* * * * * *", "all")
        sch.proposer = FlakyLog(log, failures=3)
        task = await tick_seconds(sch, clock, 8)
        await log.drain()
        fires = [f for (f,) in conn.execute("SELECT fire_time FROM runs ORDER BY fire_time")]
        # No fire time is lost to the failed commits: consecutive, no duplicates.
        assert fires == list(range(fires[0], fires[0] + len(fires)))
        assert fires[0] == int(T0) + 1 and len(fires) >= 6
        sch.stop()
        await task
    run_virtual(main())


class DeposedLog(FlakyLog):
    """A log whose node lost its leadership: every proposal fails NotLeader."""

    def propose(self, cmd):
        from cronrd.errors import NotLeader
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(NotLeader("b"))
        return fut


def test_a_leader_that_lost_its_leadership_says_so_once_not_an_error_per_fire(caplog):
    """Fault suite (slow-fsync-leader): a leader that handed over logged 36
    ERROR lines `propose_failed ... not the leader` in the half second
    before its scheduler stopped."""
    async def main():
        conn, log, clock, sch = await setup("* * * * * *", "all")
        sch.proposer = DeposedLog(log, failures=0)
        task = await tick_seconds(sch, clock, 4)
        sch.stop()
        await task
    with caplog.at_level(logging.DEBUG, logger="cronrd.scheduler"):
        run_virtual(main())
    failed = [r for r in caplog.records if "propose_failed" in r.getMessage()]
    assert failed, "the failures are still logged"
    assert all(r.levelno < logging.WARNING for r in failed), [r.getMessage() for r in failed]
    told = [r for r in caplog.records if "event=leadership_lost" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in told]


async def _run_on_all_job(schedule: str):
    """A one-node log holding one run_on: all job, created at T0."""
    conn = apsw.Connection(":memory:")
    log = LocalLog(StateMachine(conn))
    clock = FakeClock(T0)
    cfg = Config(node_id="n1", data_dir="/tmp", jobs_dir="/tmp", socket="/tmp/x",
                 log_dir="/tmp", timezone="UTC")
    spec = JobSpec(name="j", schedule=schedule, command="true", run_on=RunOn(mode="all"))
    await log.propose(C.PutJob(name="j", spec=spec.to_dict(), digest="d", source="s",
                               at=clock.now()))
    return conn, log, clock, cfg


def test_a_new_run_on_all_job_does_not_fire_at_its_creation_time_after_a_restart():
    """Issue 10 (8): a new job's cursor is its creation time, not a fire time;
    a scheduler (re)started within a minute of it "completed" that fire, so a
    job `0 3 * * *` with run_on: all ran at once."""
    async def main():
        conn, log, clock, cfg = await _run_on_all_job("0 3 * * *")
        clock.t += 30  # the daemon restarts (or the leader changes) half a minute later
        sch = Scheduler(cfg, log, conn, clock)
        sch.start()
        task = asyncio.create_task(sch.run())
        for _ in range(20):
            await asyncio.sleep(0.01)
        await log.drain()
        task.cancel()
        assert counts(conn) == {}
    run_virtual(main())


def test_a_run_on_all_fire_left_half_done_is_completed_by_the_next_scheduler():
    """The behaviour the fix must keep: a leader that died between the
    per-node fires of one fire time leaves it for the next one to complete."""
    async def main():
        conn, log, clock, cfg = await _run_on_all_job("* * * * * *")
        fire = int(T0) + 2
        # the old leader fired for another node ("n0"), then died
        await log.propose(C.Fire(job="j", fire_time=fire, kind="scheduled", node="n0",
                                 due_at=fire, at=T0, target="n0"))
        clock.t = fire + 1.5
        sch = Scheduler(cfg, log, conn, clock)
        sch.start()
        await log.drain()
        targets = {t for (t,) in conn.execute(
            "SELECT target FROM runs WHERE fire_time=?", (fire,))}
        assert targets == {"n0", "n1"}
    run_virtual(main())


def test_a_run_on_all_fire_commits_the_nodes_that_run_it_before_the_skipped_ones():
    """A node that cannot run a run_on: all fire gets a skipped record at
    once; committed first, it would be the whole fire time's outcome for the
    job's children (state/dependencies.py: fire_time_outcome) before the
    other nodes' runs even exist. The runnable nodes' fires go first."""
    from cronrd.decisions.placement import NodeView
    from cronrd.runtime.leader.placement import Placement

    async def main():
        conn, log, clock, cfg = await _run_on_all_job("* * * * * *")
        nodes = [NodeView("n0", False, "up", frozenset(), why_not="silent"),
                 NodeView("n1", True, "up", frozenset()),
                 NodeView("n2", True, "up", frozenset())]
        sch = Scheduler(cfg, log, conn, clock, placement=Placement(conn, lambda: nodes))
        sch.start()
        fire = int(T0) + 2
        sch._fire("j", sch.entries["j"], fire)
        await log.drain()
        rows = list(conn.execute("SELECT target, state FROM runs WHERE fire_time=? "
                                 "ORDER BY run_id", (fire,)))
        assert rows == [("n1", "assigned"), ("n2", "assigned"), ("n0", "skipped")], rows
        sch.stop()
    run_virtual(main())


def test_soonest_walks_the_heap_in_order_past_stale_and_filtered_entries():
    import random

    async def main():
        conn, log, clock, sch = await setup("0 0 1 1 *", "none")
        rng = random.Random(5)
        for i in range(300):   # jobs at random minutes of the day, some edited
            minute, hour = rng.randrange(60), rng.randrange(24)
            spec = JobSpec(name=f"j{i:03d}", schedule=f"{minute} {hour} * * *",
                           command="true")
            await log.propose(C.PutJob(name=spec.name, spec=spec.to_dict(), digest=f"d{i}",
                                       source="s", at=clock.now()))
        sch.start()
        for i in range(0, 300, 7):   # a refresh leaves a stale heap entry behind
            sch.refresh(f"j{i:03d}")
        want = sorted((e.next_fire, n) for n, e in sch.entries.items()
                      if e.active and e.next_fire is not None)
        assert len(sch.heap) > len(want)                    # stale entries are there
        assert sch.soonest(10) == want[:10]
        def odd(name):
            return name[1:].isdigit() and int(name[1:]) % 2 == 1
        assert sch.soonest(7, odd) == [w for w in want if odd(w[1])][:7]
        assert sch.soonest(5, lambda n: False) == []
        assert len(sch.soonest(1000)) == len(want)
    run_virtual(main())

"""The leader's heartbeat_timeout duty: proposes the end of a silent run once
(not again within RETRY_AFTER), only while leading and with its clock in
bounds."""

from __future__ import annotations

import asyncio

from cronrd.runtime.leader.heartbeat_watch import HeartbeatWatch
from cronrd.state import checkpoints as CK
from cronrd.state import commands as C
from tests.unit.state.test_state import T0, Log


class Clock:
    def __init__(self, t):
        self.t = t

    def now(self):
        return self.t


class LeaderLog:
    def __init__(self, log):
        self.inner, self.is_leader, self.proposed = log, True, []

    async def propose_as_leader(self, cmd):
        self.proposed.append(cmd)
        return self.inner.apply(cmd)


def silent_run():
    log = Log()
    log.put(heartbeat_timeout=60.0)
    rid = log.fire(T0 + 1)["run_id"]
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=4, started_at=T0 + 1,
                           log_path="/l", secret=CK.token_hash("t")))
    return log, rid


def test_a_silent_run_is_ended_once():
    log, rid = silent_run()
    leader, clock, fence = LeaderLog(log), Clock(T0 + 2), [None]
    watch = HeartbeatWatch(leader, log.sm.conn, clock, lambda: fence[0])
    asyncio.run(watch.duty())               # leading from T0 + 2
    clock.t = T0 + 30
    asyncio.run(watch.duty())
    assert leader.proposed == []            # heard of 29 s ago
    clock.t = T0 + 62
    fence[0] = "its clock is off"
    asyncio.run(watch.duty())
    assert leader.proposed == []            # a leader with a bad clock decides nothing
    fence[0] = None
    asyncio.run(watch.duty())
    assert [c.run_id for c in leader.proposed] == [rid]  # silent 60 s under this leader
    assert log.run(rid).state == "timed_out"
    asyncio.run(watch.duty())
    assert len(leader.proposed) == 1 and watch.proposed == {}


def test_only_the_leader_proposes():
    log, rid = silent_run()
    leader = LeaderLog(log)
    leader.is_leader = False
    asyncio.run(HeartbeatWatch(leader, log.sm.conn, Clock(T0 + 1000), lambda: None).duty())
    assert leader.proposed == []


def test_a_new_leader_gives_a_run_its_whole_timeout_after_a_leaderless_spell():
    # Before the fix a leader elected after a spell without one (heartbeats
    # could not be heard) ended at once every run whose last heartbeat was
    # older than its timeout, healthy or not.
    log, rid = silent_run()                  # last heard at T0 + 1
    leader, clock = LeaderLog(log), Clock(T0 + 500)
    leader.is_leader = False
    watch = HeartbeatWatch(leader, log.sm.conn, clock, lambda: None)
    asyncio.run(watch.duty())
    leader.is_leader = True                  # elected at T0 + 500
    asyncio.run(watch.duty())
    clock.t = T0 + 559
    asyncio.run(watch.duty())
    assert leader.proposed == [] and log.run(rid).state == "running"
    clock.t = T0 + 560                       # silent a whole timeout under it
    asyncio.run(watch.duty())
    assert [c.run_id for c in leader.proposed] == [rid]
    # leadership lost and won again: the count starts over
    log2, rid2 = silent_run()
    leader2, clock2 = LeaderLog(log2), Clock(T0 + 100)
    watch2 = HeartbeatWatch(leader2, log2.sm.conn, clock2, lambda: None)
    asyncio.run(watch2.duty())
    leader2.is_leader = False
    clock2.t = T0 + 150
    asyncio.run(watch2.duty())
    leader2.is_leader = True
    clock2.t = T0 + 200
    asyncio.run(watch2.duty())
    clock2.t = T0 + 259
    asyncio.run(watch2.duty())
    assert leader2.proposed == []


def test_a_node_elected_again_counts_from_its_new_election():
    # Found in review: the duty runs only while leading, so "not leader"
    # was never seen between two terms of the same node; Leadership calls
    # begin_term at each election.
    log, rid = silent_run()                  # last heard at T0 + 1
    leader, clock = LeaderLog(log), Clock(T0 + 2)
    watch = HeartbeatWatch(leader, log.sm.conn, clock, lambda: None)
    asyncio.run(watch.duty())                # first term from T0 + 2 ...
    clock.t = T0 + 500                       # ... lost; others led (or nobody)
    watch.begin_term()                       # elected again at T0 + 500
    asyncio.run(watch.duty())
    clock.t = T0 + 559
    asyncio.run(watch.duty())
    assert leader.proposed == []
    clock.t = T0 + 560
    asyncio.run(watch.duty())
    assert [c.run_id for c in leader.proposed] == [rid]

"""The leader's heartbeat_timeout duty: proposes the end of a silent run once
(not again within RETRY_AFTER), only while leading and with its clock in
bounds."""

from __future__ import annotations

import asyncio

from cronrd.runtime.heartbeats import HeartbeatWatch
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
    leader, clock, fence = LeaderLog(log), Clock(T0 + 30), [None]
    watch = HeartbeatWatch(leader, log.sm.conn, clock, lambda: fence[0])
    asyncio.run(watch.duty())
    assert leader.proposed == []            # heard of 29 s ago
    clock.t = T0 + 62
    fence[0] = "its clock is off"
    asyncio.run(watch.duty())
    assert leader.proposed == []            # a leader with a bad clock decides nothing
    fence[0] = None
    asyncio.run(watch.duty())
    assert [c.run_id for c in leader.proposed] == [rid]
    assert log.run(rid).state == "timed_out"
    asyncio.run(watch.duty())
    assert len(leader.proposed) == 1 and watch.proposed == {}


def test_only_the_leader_proposes():
    log, rid = silent_run()
    leader = LeaderLog(log)
    leader.is_leader = False
    asyncio.run(HeartbeatWatch(leader, log.sm.conn, Clock(T0 + 1000), lambda: None).duty())
    assert leader.proposed == []

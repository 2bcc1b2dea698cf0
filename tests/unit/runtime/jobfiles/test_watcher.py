"""The job-file watcher (cronrd/runtime/jobfiles/watcher.py), against the real state
machine on the one-member log: what it proposes, when it tries again, and
when it waits for the leader's clock. Job-file edits picked up by a real
daemon: integration/test_daemon.py."""

from __future__ import annotations

import asyncio

import apsw
import pytest

from cronrd.errors import NotLeader, RequestError
from cronrd.runtime.jobfiles import watcher as W
from cronrd.runtime.log.local import LocalLog
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine

T0 = 1_800_000_000.0


class Clock:
    def now(self):
        return T0

    def monotonic(self):
        return 0.0


class Flaky:
    """The log, after ``fail`` proposals that raise ``exc``."""

    def __init__(self, log, fail=0, exc=NotLeader(None)):
        self.log, self.fail, self.exc, self.sent = log, fail, exc, []

    def propose(self, cmd):
        self.sent.append(cmd)
        if self.fail:
            self.fail -= 1
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(self.exc)
            return fut
        return self.log.propose(cmd)


def setup(tmp_path, **kw):
    (tmp_path / "a.yaml").write_text("schedule: '* * * * *'\ncommand: 'true'\n")
    sm = StateMachine(apsw.Connection(":memory:"))
    log = LocalLog(sm)
    prop = Flaky(log, **{k: v for k, v in kw.items() if k in ("fail", "exc")})
    w = W.Watcher(str(tmp_path), prop, sm.conn, Clock(), node="n1",
                  hold=kw.get("hold", lambda: None))
    return sm, prop, w


def test_a_change_that_failed_for_want_of_a_leader_is_proposed_again(tmp_path):
    async def main():
        sm, prop, w = setup(tmp_path, fail=1)
        await w.reload()
        assert Q.job_names(sm.conn) == [] and w._fingerprint is None  # looked at again
        assert not any(c.files for c in prop.sent)  # a failed look records no file
        await w.reload()
        # the job, then the file's record (only once every job command committed)
        assert Q.job_names(sm.conn) == ["a"] and len(prop.sent) == 3
        assert prop.sent[-1].files and not prop.sent[-1].puts
        assert w._fingerprint is not None
        await w.reload()
        assert len(prop.sent) == 3  # nothing differs: nothing proposed
    asyncio.run(main())


def test_a_change_refused_is_not_proposed_again_until_the_files_change(tmp_path):
    for exc in (Refused("no"), RequestError("bad definition")):
        async def main():
            sm, prop, w = setup(tmp_path, fail=1, exc=exc)
            await w.reload()
            assert w._fingerprint is not None and len(prop.sent) == 1
        asyncio.run(main())


def test_a_new_job_waits_while_this_leaders_clock_is_not_good(tmp_path, caplog):
    held = {"why": "has not measured its clock against the cluster's yet"}

    async def main():
        sm, prop, w = setup(tmp_path, hold=lambda: held["why"])
        res = await w.reload()
        assert res["held"] == held["why"] and prop.sent == [] and w._fingerprint is None
        held["why"] = None
        res = await w.reload()
        assert "held" not in res and Q.job_names(sm.conn) == ["a"]
        job = Q.job_schedule(sm.conn, "a")
        assert job[2] == int(T0)  # its schedule starts at its creation, by a good clock
    asyncio.run(main())
    assert sum("event=job_changes_held" in r.getMessage() for r in caplog.records) == 1


def test_the_first_look_at_start_waits_a_bounded_while_for_the_leaders_clock(tmp_path):
    held = {"why": "has not measured its clock against the cluster's yet", "looks": 0}

    def hold():
        held["looks"] += 1
        return held["why"] if held["looks"] < 4 else None

    async def main():
        sm, prop, w = setup(tmp_path, hold=hold)
        w.clock = type("C", (), {"now": lambda self: T0,
                                 "monotonic": lambda self: asyncio.get_running_loop().time()})()
        res = await w.settle(5.0)
        assert "held" not in res and Q.job_names(sm.conn) == ["a"] and held["looks"] >= 4
        held["looks"], held["why"] = -10**6, "off"  # never good: gives up after patience
        (tmp_path / "b.yaml").write_text("schedule: '* * * * *'\ncommand: 'true'\n")
        res = await w.settle(0.3)
        assert res["held"] == "off" and Q.job_names(sm.conn) == ["a"]
    asyncio.run(main())


def test_a_job_file_is_read_again_when_the_pools_change(tmp_path):
    """A daemon restarted with other pools: a file naming a pool is parsed
    again (its digest covers them) and a pool that went is a problem; the
    job keeps its last good version."""
    async def main():
        (tmp_path / "p.yaml").write_text("schedule: '* * * * *'\ncommand: 'true'\npool: db\n")
        sm = StateMachine(apsw.Connection(":memory:"))
        log = LocalLog(sm)
        w = W.Watcher(str(tmp_path), log, sm.conn, Clock(), node="n1", pools={"db": 1})
        await w.reload()
        assert Q.job_names(sm.conn) == ["p"] and w.problems == []
        again = W.Watcher(str(tmp_path), log, sm.conn, Clock(), node="n1", pools={"etl": 1})
        await again.reload()
        assert [str(p) for p in again.problems] == [
            f"{tmp_path}/p.yaml:3:7: unknown pool 'db' (the daemon config defines: etl); "
            "add it under pools: in the daemon config or fix the name"]
        assert Q.job_names(sm.conn) == ["p"]
    asyncio.run(main())


@pytest.mark.parametrize("key,text", [
    ("executor: container", "  executor: {type: container, image: localhost/x:1}\n"),
    ("success_exit_codes", "  success_exit_codes: [0, 3]\n"),
    ("retries.not_on_exit_codes", "  retries: {max: 2, not_on_exit_codes: [2]}\n"),
    ("retries.retry_on", "  retries: {max: 2, retry_on: [timeout]}\n"),
    ("schedule: @at", "  schedule: '@AT 2030-01-01T00:00:00Z'\n"),
])
def test_a_job_with_a_newer_key_waits_for_the_cluster_version_and_the_others_load(
        tmp_path, key, text):
    """Review of issue 34: a node of 0.2.0 ignores the executor key and would
    run a container job's command on its host. Until the cluster version
    says every member applies it, the job is a problem of its file (the
    file's other jobs load); once it does, the file is read again."""
    from cronrd.state import commands as C
    from cronrd.state import versions as V

    async def main():
        (tmp_path / "box.yaml").write_text(
            "jobs:\n- name: plain\n  schedule: '@daily'\n  command: 'true'\n"
            "- name: boxed\n  command: 'true'\n"
            + ("" if "schedule" in text else "  schedule: '@daily'\n") + text)
        sm = StateMachine(apsw.Connection(":memory:"))
        log = LocalLog(sm)
        w = W.Watcher(str(tmp_path), log, sm.conn, Clock(), node="n1", interval=0.05)
        await w.reload()
        assert Q.job_names(sm.conn) == ["plain"]
        (p,) = w.problems
        assert p.line == 5 and f"{key} needs cluster version 2" in p.message, p
        await log.propose(C.SetClusterVersion(version=V.EXECUTORS, members={"n1": "0.3.0"},
                                              at=T0))
        task = asyncio.create_task(w.run())
        for _ in range(100):
            if Q.job_names(sm.conn) == ["boxed", "plain"]:
                break
            await asyncio.sleep(0.05)
        w.stop()
        await task
        assert Q.job_names(sm.conn) == ["boxed", "plain"] and w.problems == []
    asyncio.run(main())

"""Reports (cronrd/runtime/runs/reports.py): a result is on this node's disk
before it is proposed, proposed until committed or refused, and forgotten
(with its supervisor's record) only then."""

from __future__ import annotations

import asyncio

from cronrd.errors import CronrdError
from cronrd.runtime.runs import reports
from cronrd.runtime.runs.active import ActiveRun
from cronrd.runtime.runs.outbox import Outbox
from cronrd.runtime.runs.reports import Reporter, finished, run_ended
from cronrd.state import commands as C
from cronrd.state import run_life as L
from cronrd.errors import Refused
from cronrd.model.run import Run
from cronrd.model.run_states import RunState

T0 = 1_800_000_000
RUN = Run(run_id=7, job="j", origin="schedule", kind="scheduled", fire_time=T0, attempt=1,
          target="", state=RunState.RUNNING, node="n1", token=3, due_at=T0, created_at=T0 - 1)


class Proposer:
    def __init__(self, outbox, fail=0, refuse=False, result=None):
        self.outbox, self.fail, self.refuse, self.result = outbox, fail, refuse, result
        self.seen = []       # (command, what the outbox held when it was proposed)

    async def propose(self, cmd):
        self.seen.append((cmd, [c for _, c in self.outbox.pending()]))
        if self.refuse:
            raise Refused("no")
        if self.fail:
            self.fail -= 1
            raise CronrdError("no leader")
        return self.result


def test_a_result_is_on_disk_before_it_is_proposed_and_gone_once_committed(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(reports, "REPORT_RETRY_DELAY", 0.01)
    record = tmp_path / "7.a"
    record.write_text("{}")

    async def main():
        outbox = Outbox(str(tmp_path / "local.db"))
        proposer = Proposer(outbox, fail=2)
        rep = Reporter(proposer, outbox)
        cmd = finished(RUN, "n1", "succeeded", T0 + 2, reason=None, exit_code=0,
                       started_at=T0)
        rep.propose(cmd, record=str(record))
        await asyncio.sleep(0.2)
        assert [c for c, _ in proposer.seen] == [cmd] * 3      # retried until committed
        assert proposer.seen[0][1] == [cmd]                     # already in the outbox
        assert outbox.pending() == [] and not record.exists()
        outbox.close()
    asyncio.run(main())


def test_a_refused_report_is_dropped_and_a_start_report_skips_the_outbox(tmp_path):
    async def main():
        outbox = Outbox(str(tmp_path / "local.db"))
        got = []
        rep = Reporter(Proposer(outbox, result={"cancel": True}), outbox)
        start = C.RunStarted(run_id=7, token=3, node="n1", pid=5, started_at=T0,
                             log_path="/l")
        rep.propose(start, on_result=got.append)
        await asyncio.sleep(0.05)
        assert got == [{"cancel": True}] and rep.proposer.seen == [(start, [])]
        rep.proposer.refuse = True
        rep.propose(finished(RUN, "n1", "failed", T0 + 1, reason="exit code 1"))
        await asyncio.sleep(0.05)
        assert outbox.pending() == [] and not rep.tasks
        outbox.close()
    asyncio.run(main())


def test_what_a_previous_daemon_left_is_replayed(tmp_path):
    cmd = finished(RUN, "n1", "lost", T0 + 5, reason="gone")
    outbox = Outbox(str(tmp_path / "local.db"))
    outbox.add(cmd)
    outbox.close()

    async def main():
        box = Outbox(str(tmp_path / "local.db"))
        proposer = Proposer(box)
        rep = Reporter(proposer, box)
        assert rep.replay() == 1 and rep.replayed == {7}
        await asyncio.sleep(0.05)
        assert [c for c, _ in proposer.seen] == [cmd] and box.pending() == []
        box.close()
    asyncio.run(main())


def test_drain_writes_this_turns_results_before_the_daemon_stops(tmp_path):
    async def main():
        outbox = Outbox(str(tmp_path / "local.db"))
        never = asyncio.Event()

        class Stuck:
            async def propose(self, cmd):
                await never.wait()
        rep = Reporter(Stuck(), outbox)
        cmd = finished(RUN, "n1", "succeeded", T0 + 1, reason=None, exit_code=0)
        rep.propose(cmd)
        await rep.drain(timeout=0.05)   # not committed: stays in the outbox
        assert [c for _, c in outbox.pending()] == [cmd]
        outbox.close()
    asyncio.run(main())


def test_the_end_report_follows_the_life_table():
    act = ActiveRun(run=RUN, spec=None, key="7.a", log_path="/logs/j/x.log", kill_grace=1.0,
                    life=L.Life(phase=L.Phase.STARTED, pid=42, ready=True, started_at=T0))
    cmd = run_ended(act, L.Report("failed", "exit code 3", exit_code=3, started_at=T0,
                                  finished_at=T0 + 4), "n1", T0 + 9, "/logs",
                    note="ended while cronrd was restarting")
    assert cmd == C.RunFinished(
        run_id=7, token=3, node="n1", state="failed", exit_code=3, signal=None,
        started_at=T0, finished_at=T0 + 4, log_path="/logs/j/x.log",
        reason="exit code 3; ended while cronrd was restarting", pid=42)
    gone = run_ended(act, L.Report("lost", None, log_kept=False), "n1", T0 + 9, "/logs")
    assert (gone.finished_at, gone.log_path, gone.reason) == (T0 + 9, None, None)


def test_a_slow_outbox_write_holds_the_report_not_the_loop(tmp_path):
    import threading
    import time

    async def main():
        outbox = Outbox(str(tmp_path / "local.db"))
        gate = threading.Event()
        writes = []
        add_many = outbox.add_many

        def held(cmds):      # a disk whose fsync takes its time
            writes.append(len(cmds))
            gate.wait(20)
            return add_many(cmds)
        outbox.add_many = held
        proposer = Proposer(outbox)
        rep = Reporter(proposer, outbox)
        first = finished(RUN, "n1", "succeeded", T0 + 1, reason=None, exit_code=0)
        rep.propose(first)
        began = time.monotonic()
        for _ in range(20):                  # the loop turns while the write is held
            await asyncio.sleep(0.01)
        assert time.monotonic() - began < 5
        assert writes == [1] and proposer.seen == []   # not proposed before it is on disk
        # Results that come meanwhile ride the next write together.
        second = finished(RUN, "n1", "failed", T0 + 2, reason="exit code 1", exit_code=1)
        third = finished(RUN, "n1", "failed", T0 + 3, reason="exit code 1", exit_code=1)
        rep.propose(second)
        rep.propose(third)
        gate.set()
        deadline = asyncio.get_running_loop().time() + 10
        while len(proposer.seen) < 3:
            assert asyncio.get_running_loop().time() < deadline, proposer.seen
            await asyncio.sleep(0.01)
        assert writes == [1, 2]
        assert [c for c, _ in proposer.seen] == [first, second, third]
        assert proposer.seen[1][1][-2:] == [second, third]    # on disk when proposed
        outbox.close()
    asyncio.run(main())

"""The durable local outbox of run reports (runtime/runs/outbox.py)."""

from __future__ import annotations

import asyncio
import logging

from cronrd.state import commands as C
from cronrd.runtime.runs.outbox import Outbox
from tests.unit.runtime.log.test_raft_node import until


def finished(run_id: int, state: str = "succeeded") -> C.RunFinished:
    return C.RunFinished(run_id=run_id, token=run_id * 10, node="a", state=state,
                         exit_code=0 if state == "succeeded" else 1, signal=None,
                         started_at=1.5, finished_at=2.5, log_path=f"/l/{run_id}.log",
                         reason=None, pid=100 + run_id)


def started(run_id: int) -> C.RunStarted:
    return C.RunStarted(run_id=run_id, token=run_id * 10, node="a", pid=100 + run_id,
                        started_at=1.5, log_path=f"/l/{run_id}.log")


def test_what_was_not_done_survives_a_restart(tmp_path):
    path = str(tmp_path / "local.db")

    async def first_life():
        box = Outbox(path)
        ids = [box.add(cmd) for cmd in (started(1), finished(1), started(2), finished(2))]
        assert len(set(ids)) == 4
        box.done(ids[0])
        box.done(ids[1])
        await asyncio.sleep(0)  # the batched delete runs on the next loop turn
        box.close()
        return ids

    ids = asyncio.run(first_life())
    box = Outbox(path)
    try:
        assert box.pending() == [(ids[2], started(2)), (ids[3], finished(2))]
    finally:
        box.close()


def test_an_added_report_is_on_disk_before_any_loop_turn(tmp_path):
    """A crash right after add (no close, no flush) loses nothing."""
    path = str(tmp_path / "local.db")
    box = Outbox(path)
    item = box.add(finished(7, "failed"))
    other = Outbox(path)  # another process would see the same file
    try:
        assert other.pending() == [(item, finished(7, "failed"))]
    finally:
        other.close()
        box.close()


def test_done_is_batched_into_one_transaction_per_loop_turn(tmp_path):
    async def main():
        box = Outbox(str(tmp_path / "local.db"))
        ids = [box.add(finished(i)) for i in range(1, 6)]
        commits = []
        box.conn.setcommithook(lambda: commits.append(1) or False)
        for item in ids:
            box.done(item)
        # Nothing written yet: the deletes wait for the end of this turn.
        assert commits == []
        assert [i for i, _ in box.pending()] == ids
        await asyncio.sleep(0)
        await until(lambda: commits)      # on the outbox's storage thread
        assert commits == [1]
        assert box.pending() == []
        # The next turn's done is a new batch.
        extra = box.add(started(9))
        commits.clear()
        box.done(extra)
        await asyncio.sleep(0)
        await until(lambda: commits)
        assert len(commits) == 1 and box.pending() == []
        box.close()
    asyncio.run(main())


def test_close_writes_the_done_items_not_yet_flushed(tmp_path):
    path = str(tmp_path / "local.db")

    async def main():
        box = Outbox(path)
        keep = box.add(started(1))
        gone = box.add(finished(1))
        box.done(gone)
        box.close()  # before the loop turn that would have flushed
        await asyncio.sleep(0)  # the scheduled flush then finds a closed db: harmless
        return keep

    keep = asyncio.run(main())
    box = Outbox(path)
    try:
        assert box.pending() == [(keep, started(1))]
    finally:
        box.close()


def test_unreadable_rows_are_dropped_with_a_log_line(tmp_path, caplog):
    path = str(tmp_path / "local.db")

    async def main():
        box = Outbox(path)
        good1 = box.add(started(1))
        with box.conn:
            box.conn.execute("INSERT INTO outbox(cmd) VALUES(?)", (b"{not json",))
            bad = box.conn.last_insert_rowid()
            box.conn.execute("INSERT INTO outbox(cmd) VALUES(?)",
                             (b'{"op":"no_such_op","x":1}',))
            bad2 = box.conn.last_insert_rowid()
        good2 = box.add(finished(1))
        assert box.pending() == [(good1, started(1)), (good2, finished(1))]
        await asyncio.sleep(0)
        box.close()
        return bad, bad2, good1, good2

    with caplog.at_level(logging.ERROR, logger="cronrd.outbox"):
        bad, bad2, good1, good2 = asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "outbox_unreadable" in r.getMessage()]
    assert len(lines) == 2
    assert f"id={bad} " in lines[0] and f"id={bad2} " in lines[1]
    # Dropped for good: the next start does not trip over them again.
    caplog.clear()
    box = Outbox(path)
    try:
        assert [i for i, _ in box.pending()] == [good1, good2]
        assert not [r for r in caplog.records if "outbox_unreadable" in r.getMessage()]
    finally:
        box.close()


def test_add_many_writes_a_turns_results_durably_and_in_order(tmp_path):
    path = str(tmp_path / "local.db")
    box = Outbox(path)
    before = box.conn.totalchanges()
    ids = box.add_many([finished(1), finished(2, "failed"), finished(3)])
    assert len(set(ids)) == 3 and box.conn.totalchanges() - before == 3
    box.conn.close()
    again = Outbox(path)  # on disk: another connection reads them back in order
    assert [cmd.run_id for _, cmd in again.pending()] == [1, 2, 3]
    assert [item for item, _ in again.pending()] == ids
    again.conn.close()

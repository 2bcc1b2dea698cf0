"""The critical loop's stall detector (runtime/loop_watch.py): a real event
loop held on purpose, found, named and counted."""

from __future__ import annotations

import asyncio
import logging
import time
import traceback

from cronrd.runtime import loop_watch as LW
from cronrd.runtime.loop_watch import LoopWatch


def hold_the_loop(seconds: float) -> None:
    """What a heavy request on the loop does: compute without yielding."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def _watched(body, watch: LoopWatch):
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.05)   # the beat and the thread are going
    try:
        await body()
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass


def test_a_held_loop_is_reported_once_with_what_held_it(caplog):
    watch = LoopWatch()

    async def body():
        before = time.monotonic()
        hold_the_loop(0.5)
        after = time.monotonic()
        deadline = time.monotonic() + 2.0
        while watch.count == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert watch.stalled_within(before, after)
        assert not watch.stalled_within(after + 0.01, after + 0.02) or watch.count > 1
    with caplog.at_level(logging.WARNING, logger="cronrd.loop"):
        asyncio.run(_watched(body, watch))
    lines = [r.getMessage() for r in caplog.records if "event=loop_stalled" in r.getMessage()]
    assert len(lines) == 1, lines
    ms = float(lines[0].split("ms=")[1].split()[0])
    assert 450 <= ms < 2000
    # The stack was taken while the loop was held: it names the holder.
    assert "where=test_loop_watch.py:" in lines[0] and ":hold_the_loop" in lines[0]
    buckets, total, count = watch.histogram()
    assert count == 1 and 0.45 <= total < 2.0
    assert dict(buckets)[0.25] == 0 and dict(buckets)[2.5] == 1
    assert buckets[-1] == (float("inf"), 1)


def test_a_loop_that_keeps_its_beat_reports_nothing(caplog):
    watch = LoopWatch()

    async def body():
        for _ in range(20):
            hold_the_loop(0.01)    # short turns, as the critical path takes them
            await asyncio.sleep(0.005)
    with caplog.at_level(logging.WARNING, logger="cronrd.loop"):
        asyncio.run(_watched(body, watch))
    assert watch.count == 0 and "event=loop_stalled" not in caplog.text
    assert not watch.stalled_within(0, time.monotonic() - 10)


def test_where_is_the_innermost_frame_of_cronrds_own_code():
    stack = [traceback.FrameSummary("/usr/lib/python3.11/asyncio/events.py", 80, "_run"),
             traceback.FrameSummary("/srv/x/cronrd/runtime/control/handlers.py", 650, "h_backfill"),
             traceback.FrameSummary("/srv/x/cronrd/runtime/leader/backfills.py", 60, "plan"),
             traceback.FrameSummary("/srv/x/site-packages/yaml/scanner.py", 10, "scan")]
    where, text = LW.describe(stack)
    assert where == "cronrd/runtime/leader/backfills.py:60:plan"
    assert text.startswith("scanner.py:10:scan < cronrd/runtime/leader/backfills.py:60:plan")
    assert LW.describe(None) == ("-", "")


def test_the_stall_histogram_is_on_the_metrics_page():
    from cronrd.runtime.http.metrics import StateCollector, live_view

    watch = LoopWatch()
    watch._report(10.0, 10.7, 0.7)   # as the beat reports a 700 ms stall
    live = live_view("n1", {}, 0, False, loop_stalls=watch.histogram())
    fam = next(f for f in StateCollector(None, live).collect()
               if f.name == "cronrd_loop_stall_seconds")
    got = {(s.name, s.labels.get("le")): s.value for s in fam.samples}
    assert got[("cronrd_loop_stall_seconds_bucket", "0.5")] == 0
    assert got[("cronrd_loop_stall_seconds_bucket", "1.0")] == 1
    assert got[("cronrd_loop_stall_seconds_bucket", "+Inf")] == 1
    assert got[("cronrd_loop_stall_seconds_count", None)] == 1
    assert abs(got[("cronrd_loop_stall_seconds_sum", None)] - 0.7) < 1e-9

"""Issue 32 point 8: a job's own token saved 432 checkpoints a second of 64
KiB (27 MiB/s into every node's log). Saves of a run now go to the log at
most once per CHECKPOINT_INTERVAL: a save waits for its turn, and a newer
one before that turn supersedes it."""

from __future__ import annotations

import asyncio

from cronrd.runtime.control.checkpoints import CHECKPOINT_INTERVAL
from cronrd.state import checkpoints as CK
from tests.unit.runtime.control.test_checkpoints import save, setup
from virtual_time import run_virtual


def test_a_tight_loop_of_saves_is_paced_to_one_a_second():
    req, h, rid, token, _ = setup()
    args = {"run_id": rid, "token": token}

    async def main():
        loop = asyncio.get_running_loop()
        h.clock.monotonic = loop.time
        start = loop.time()
        for i in range(20):
            res = await save(req, {**args, "value": "x" * 60_000 + str(i)})
            assert not res.get("superseded")
        return loop.time() - start
    took = run_virtual(main())
    assert len(h.log.proposed) == 20
    assert took >= 19 * CHECKPOINT_INTERVAL * 0.99   # was 20 writes at once
    assert CK.of_record(h.conn, h.log.inner.run(rid))["value"].endswith("19")


def test_concurrent_saves_send_the_first_and_the_newest_only():
    req, h, rid, token, _ = setup()
    args = {"run_id": rid, "token": token}

    async def main():
        h.clock.monotonic = asyncio.get_running_loop().time
        first = await save(req, {**args, "value": "v0"})
        results = await asyncio.gather(*(save(req, {**args, "value": f"v{i}"})
                                         for i in range(1, 40)))
        return first, results
    first, results = run_virtual(main())
    assert not first.get("superseded")
    assert [r.get("superseded", False) for r in results] == [True] * 38 + [False]
    assert len(h.log.proposed) == 2
    assert CK.of_record(h.conn, h.log.inner.run(rid))["value"] == "v39"

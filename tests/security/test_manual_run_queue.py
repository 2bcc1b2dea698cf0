"""Issue 32 point 8: 60 run-nows of one job filled a shared pool and made
another job miss its start_deadline. A job's manual runs held waiting are
capped (MAX_QUEUED_MANUAL); a repeated key is no new run and passes."""

from __future__ import annotations

import pytest

from cronrd.errors import CronrdError
from cronrd.runtime.control.runs import MAX_QUEUED_MANUAL
from harness import wait_for


def test_run_now_beyond_the_jobs_queue_is_refused_with_what_to_do(node_factory):
    node = node_factory(pools={"one": {"slots": 1}})
    # a pool of one slot: the first run holds it, the others wait for it
    node.write_job("stuck", {"schedule": "@yearly", "command": "sleep 60", "pool": "one",
                             "concurrency": "allow"})
    node.write_job("other", {"schedule": "@yearly", "command": "true"})
    node.start()
    first = node.call("run_now", {"job": "stuck"})["run_id"]
    wait_for(lambda: node.call("run", {"run_id": first})["state"] == "running",
             what="the first run holding the slot")
    ids = [node.call("run_now", {"job": "stuck"})["run_id"] for _ in range(MAX_QUEUED_MANUAL)]
    wait_for(lambda: all(node.call("run", {"run_id": i})["state"] == "waiting" for i in ids),
             what="the others waiting for the slot")
    with pytest.raises(CronrdError, match=rf"{MAX_QUEUED_MANUAL} manual runs of stuck are "
                                          r"waiting to start already.*cronrd cancel"):
        node.call("run_now", {"job": "stuck"})
    # a key already used answers its run (no new one); another job is not held
    keyed = node.call("run_now", {"job": "other", "key": "k1"})["run_id"]
    assert node.call("run_now", {"job": "other", "key": "k1"})["run_id"] == keyed
    node.call("cancel", {"run_id": ids[0]})
    assert node.call("run_now", {"job": "stuck"})["run_id"] not in ids   # room again

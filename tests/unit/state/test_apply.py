"""One batch-apply function for both logs (state/apply.py): a batch with one
bad command and good ones applies the good ones and refuses only the bad one,
on one host as in a cluster."""

from __future__ import annotations

import asyncio
import json

from cronrd.runtime.local_log import LocalLog
from cronrd.runtime.storage import open_db
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state.machine import Refused, StateMachine
from tests.unit.runtime.test_raft_log import fire, put
from tests.unit.state.test_state import T0


def bad_fire() -> C.Command:
    """Decodes, but apply cannot handle it (a str fire time): TypeError."""
    cmd = C.decode(json.dumps({"op": "fire", "job": "j", "fire_time": "soon",
                               "kind": "scheduled", "node": "a", "due_at": 1.0,
                               "at": 1.0}).encode())
    assert isinstance(cmd, C.Fire)
    return cmd


def test_one_host_a_bad_command_in_a_batch_is_refused_alone(tmp_path):
    """Before: LocalLog let apply's TypeError out of the transaction, so the
    whole batch rolled back and every proposal failed with StorageError (and
    the executor retried its report for ever)."""
    machine = StateMachine(open_db(str(tmp_path / "state.db")))

    async def main():
        log = LocalLog(machine)
        seen = []
        log.subscribe(seen.extend)
        futs = [log.propose(c) for c in (put(), bad_fire(), fire(T0 + 1))]
        return await asyncio.gather(*futs, return_exceptions=True), seen

    (job, bad, run), effects = asyncio.run(main())
    assert job["changed"] is True
    assert isinstance(bad, Refused) and "could not be applied" in str(bad)
    assert run == {"run_id": 1, "state": "assigned"}
    assert machine.applied_index == 3
    assert [r.run_id for r in Q.list_runs(machine.conn)] == [1]
    assert [e.kind for e in effects if e.kind == "assign"] == ["assign"]

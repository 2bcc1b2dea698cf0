"""One batch-apply function for both logs (state/apply.py): a batch with one
bad command and good ones applies the good ones and refuses only the bad one,
on one host as in a cluster."""

from __future__ import annotations

import asyncio
import json

from cronrd.runtime.log.local import LocalLog
from cronrd.runtime.storage import open_db
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from cronrd.state.effects import RunAssigned
from tests.unit.runtime.log.test_replicated import fire, put
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
    assert [e.kind for e in effects if isinstance(e, RunAssigned)] == ["assign"]


def test_a_command_that_breaks_a_constraint_is_refused_alone_not_fatal():
    """A NaN time (JSON NaN decodes) binds as NULL: a NOT NULL constraint of
    a table fails inside apply. That is the command's doing, alike on every
    node, not the disk's: refused, never the node stopping (and, replayed
    after a restart, stopping again: the whole cluster down for good)."""
    from cronrd.state.apply import apply_batch
    from cronrd.state import checkpoints as CK
    from tests.unit.state.test_state import Log
    digests = []
    for _ in range(2):
        log = Log()
        log.put()
        rid = log.fire(T0 + 1)["run_id"]
        run = log.run(rid)
        log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=1,
                               started_at=T0 + 1, log_path="/l", secret=CK.token_hash("t")))
        nan = C.decode(b'{"op":"save_checkpoint","run_id":%d,"token_hash":"%s","value":"v",'
                       b'"node":"n1","at":NaN}' % (rid, CK.token_hash("t").encode()))
        i = log.index
        with log.sm.conn:
            results, _ = apply_batch(log.sm, [(i + 1, nan), (i + 2, C.SaveCheckpoint(
                run_id=rid, token_hash=CK.token_hash("t"), value="w", node="n1",
                at=T0 + 2))])
        assert isinstance(results[i + 1], Refused)
        assert results[i + 2] == {"run_id": rid, "attempt": 1}
        assert log.sm.applied_index == i + 2
        assert CK.of_record(log.sm.conn, run)["value"] == "w"
        digests.append(log.sm.full_digest())
    assert digests[0] == digests[1]

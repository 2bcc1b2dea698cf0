"""Write commands straight into a stopped node's replicated state, the way a
member that forges fields would get them committed: through the real
StateMachine.apply on the node's own state database."""

from __future__ import annotations

import time

from cronrd.jobspec import JobSpec
from cronrd.runtime.storage import open_db
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state.machine import StateMachine
from cronrd.model.run import Run


class ForgedState:
    def __init__(self, db_path: str, node_id: str = "n1"):
        self.conn = open_db(db_path)
        self.machine = StateMachine(self.conn, node_id=node_id)
        self.node_id = node_id

    def apply(self, cmd: C.Command):
        with self.conn:
            result, _ = self.machine.apply(self.machine.applied_index + 1, cmd)
        return result

    def put_job(self, name: str, **spec) -> None:
        js = JobSpec(name=name, schedule=spec.pop("schedule", "@yearly"),
                     command=spec.pop("command", "true"), **spec)
        self.apply(C.PutJob(name=name, spec=js.to_dict(), digest=js.digest(),
                            source=f"/forged/{name}.yaml", at=time.time(), node=self.node_id))

    def running_run(self, job: str, *, pid: int, started_at: float, log_path: str) -> Run:
        """A manual run of ``job`` on this node that the state says is running."""
        res = self.apply(C.ManualRun(job=job, node=self.node_id, at=time.time()))
        run = Q.get_run(self.conn, res["run_id"])
        self.apply(C.RunStarted(run_id=run.run_id, token=run.token, node=self.node_id,
                                pid=pid, started_at=started_at, log_path=log_path))
        return Q.get_run(self.conn, run.run_id)

    def finished_run(self, job: str, *, log_path: str) -> Run:
        run = self.running_run(job, pid=999999, started_at=time.time(), log_path=log_path)
        self.apply(C.RunFinished(
            run_id=run.run_id, token=run.token, node=self.node_id, state="succeeded",
            exit_code=0, signal=None, started_at=run.started_at, finished_at=time.time(),
            log_path=log_path))
        return Q.get_run(self.conn, run.run_id)

    def close(self) -> None:
        self.conn.close()

"""Applying the commands of the workflows on top of runs: backfills and
reruns, pools and start deadlines, checkpoints and heartbeats,
notification deliveries, alerts and the dead letter.

A part of the state machine (machine.py), which is one of these
classes each: the methods use its connection and one another."""

from __future__ import annotations

from typing import Any

from ..schedule import iso_utc
from . import calendars as CAL
from . import backfill as BF
from . import checkpoints as CK
from . import commands as C
from . import alerts as AL
from . import downstream as DS
from . import events as EV
from . import deliveries as DL
from . import pools as PL
from . import start_deadline as SD
from . import queries as Q
from ..model.run import Run
from ..errors import Refused
from .effects import CalendarsChanged, Effect, RunPending, RunStuck
from .apply_common import ApplyBase


class WorkflowsApply(ApplyBase):
    """The workflows part of StateMachine."""

    def _apply_create_backfill(self, index: int, cmd: C.CreateBackfill, effects: list[Effect]) -> dict[str, Any]:
        return BF.create(self.conn, cmd, self._need_job(cmd.job), self._job_spec(cmd.job),
                         Refused)


    def _apply_backfill_step(self, index: int, cmd: C.BackfillStep, effects: list[Effect]) -> dict[str, Any]:
        bf = BF.get(self.conn, cmd.backfill, Refused)
        job = self._job(bf["job"])

        def new_attempt(kind: str, fire_time: int, attempt: int) -> int:
            run = self._insert_run(index, job=bf["job"], origin="schedule", kind=kind,
                                   fire_time=fire_time, attempt=attempt, state="pending",
                                   node=None, due_at=cmd.at, at=cmd.at)
            effects.append(RunPending(run=run))
            if bf["downstream"] and attempt > 1:  # a record some children may have consumed
                try:
                    DS.start(self, run.run_id, bf["job"], fire_time)
                except DS.TooMany:
                    pass  # (the rerun stands; its children follow by their generations)
            return run.run_id
        return BF.step(self.conn, cmd.backfill, cmd.at, spec=self._job_spec(bf["job"]),
                       held=BF.held(self.conn, bf["job"]),
                       cursor=None if job is None else job["cursor"],
                       new_attempt=new_attempt, refused=Refused)


    def _apply_set_backfill_state(self, index: int, cmd: C.SetBackfillState, effects: list[Effect]) -> dict[str, Any]:
        return BF.set_state(self.conn, cmd, Refused)


    def _apply_rerun(self, index: int, cmd: C.Rerun, effects: list[Effect]) -> dict[str, Any]:
        """A new attempt (kind rerun) of an existing record, never a second record."""
        job = self._need_job(cmd.job)
        BF.check_job(self._job_spec(cmd.job), cmd.job, Refused)
        if not isinstance(cmd.fire_time, int) or isinstance(cmd.fire_time, bool):
            raise Refused("rerun: fire_time must be whole seconds")
        attempt = BF.rerun_attempt(self.conn, cmd.job, cmd.fire_time, Refused)
        reason = self._admit(index, job, cmd.at, effects)
        if reason is not None:
            raise Refused(f"job {cmd.job!r} not rerun: {reason}; wait for the active run to "
                          f"finish (`cronrd runs {cmd.job} --state running`)")
        hold = self._queue_hold(cmd.job, "", cmd.fire_time)
        if hold is not None and hold.skip is not None:
            raise Refused(f"job {cmd.job!r} not rerun: {hold.skip}; wait for the queue to "
                          f"drain (`cronrd runs {cmd.job} --state waiting`)")
        if hold is not None and hold.wait is not None:  # queued, by its fire time
            run = self._enqueue(index, job=cmd.job, origin="schedule", kind="rerun",
                                fire_time=cmd.fire_time, attempt=attempt, due_at=cmd.at,
                                at=cmd.at, reason=hold.wait, target="")
            state = "waiting"
        else:
            run = self._insert_run(index, job=cmd.job, origin="schedule", kind="rerun",
                                   fire_time=cmd.fire_time, attempt=attempt, state="pending",
                                   node=None, due_at=cmd.at, at=cmd.at,
                                   reason=f"rerun by {cmd.who}" if cmd.who else "rerun")
            effects.append(RunPending(run=run))
            state = run.state.value  # pending, or waiting for its pool's slots
        out = {"run_id": run.run_id, "attempt": attempt, "state": state}
        if cmd.downstream is True:
            out["downstream"] = self._downstream(run.run_id, cmd.job, cmd.fire_time)
        return out


    def _downstream(self, root_run: int, job: str, fire_time: int) -> list[list[str | int]]:
        """Record the --downstream of an attempt (state/downstream.py): the
        records that will follow it, [job, fire time] in order."""
        try:
            return [list(r) for r in DS.start(self, root_run, job, fire_time)]
        except DS.TooMany as exc:
            raise Refused(f"{exc}; rerun fewer at once (without --downstream, then "
                          "the children one by one)") from None


    def _pool_gate(self, run: Run) -> Run:
        """``run`` just became pending or assigned: it takes its pool's slots,
        or waits for them (the run as it is now)."""
        if not PL.names_pool(self.conn, run.job):
            return run
        if PL.gate(self.conn, run, self._job_spec(run.job)) is None:
            return run
        return self._get_run(run.run_id)


    def _pool_after(self, run: Run, at: float, effects: list[Effect]) -> None:
        """``run`` ended: it leaves its pool, whose waiting runs that fit now
        are released to pending, in order."""
        pool = PL.drop(self.conn, run.run_id)
        if pool is not None:
            self._pool_release(pool, at, effects, run.node)


    def _pool_release(self, pool: str, at: float, effects: list[Effect], freed_on: str | None = None
                      ) -> list[int]:
        """Release the pool's waiting runs that fit now (state/pools.py); the
        ids of those that go to pending."""
        out: list[int] = []
        while True:
            stopped = []
            for run_id in PL.release(self.conn, pool, at, freed_on):
                released = self._get_run(run_id)
                job = self._job(released.job)
                why = None if job is None else self._stop_reason(job)
                if why is None:
                    effects.append(RunPending(run=released))
                    out.append(run_id)
                else:
                    stopped.append((released, why))
            if not stopped:
                return out
            # Its job was paused or disabled while it waited: it does not
            # start (as a queued run's), and the next in line goes instead.
            for released, why in stopped:
                PL.drop(self.conn, released.run_id)
                self._finish(released, "skipped", at, reason=why, effects=effects)


    def _apply_set_pools(self, index: int, cmd: C.SetPools, effects: list[Effect]) -> dict[str, Any]:
        pools = PL.check_pools(cmd.pools)
        if pools is None:
            raise Refused("set_pools: pools must be a list of [name, slots >= 1, cluster|node]"
                          " with distinct names; run the same cronrd version on every node")
        changed = PL.set_pools(self.conn, pools)
        released = []
        for pool in PL.pools_with_waiters(self.conn) if changed else []:
            released += self._pool_release(pool, cmd.at, effects)
        return {"changed": changed, "released": released}


    def _apply_set_calendars(self, index: int, cmd: C.SetCalendars, effects: list[Effect]) -> dict[str, Any]:
        calendars = CAL.check(cmd.calendars)
        if calendars is None:
            raise Refused("set_calendars: calendars must be a mapping of names to calendars; "
                          "run the same cronrd version on every node")
        changed = CAL.set_all(self.conn, calendars)
        if changed:
            effects.append(CalendarsChanged())
        return {"changed": changed}


    def _apply_start_deadline(self, index: int, cmd: C.StartDeadline, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if not SD.not_started(run):
            raise Refused(f"run {cmd.run_id} is {run.state.value}"
                          f"{' (claimed)' if run.claimed_at is not None else ''}: started or "
                          "ended already")
        spec = self._job_spec(run.job)
        end = SD.expires(run, spec)
        if end is None or cmd.at < end:
            raise Refused(f"run {cmd.run_id} is not past its start_deadline"
                          f"{'' if end is None else f' ({iso_utc(end)})'}")
        assert spec is not None  # it has a start_deadline (end is not None)
        self._finish(run, "skipped", cmd.at, reason=SD.reason(run, spec), effects=effects,
                     index=index)
        return {"run_id": run.run_id, "state": "skipped"}


    def _token_run(self, cmd: C.SaveCheckpoint | C.Heartbeat, what: str) -> Run:
        """The attempt a SaveCheckpoint or Heartbeat speaks for, checked."""
        if not isinstance(cmd.run_id, int) or isinstance(cmd.run_id, bool):
            raise Refused(f"{what}: run_id must be a whole number")
        if not isinstance(cmd.at, (int, float)) or isinstance(cmd.at, bool):
            raise Refused(f"{what}: at must be a number")
        run = Q.get_run(self.conn, cmd.run_id)
        problem = CK.check_attempt(self.conn, run, cmd.token_hash, cmd.node,
                                   at=cmd.at if isinstance(cmd, C.Heartbeat) else None)
        if problem is not None:
            raise Refused(f"{what} refused: {problem}")
        assert run is not None  # check_attempt found no problem: there is one
        return run


    def _apply_save_checkpoint(self, index: int, cmd: C.SaveCheckpoint, effects: list[Effect]) -> dict[str, Any]:
        problem = CK.value_problem(cmd.value)
        if problem is not None:
            raise Refused(f"checkpoint refused: {problem}")
        run = self._token_run(cmd, "checkpoint")
        CK.save(self.conn, run, cmd.value, cmd.at)
        CK.beat(self.conn, run.run_id, cmd.at, None, None)  # a save is a sign of life
        return {"run_id": run.run_id, "attempt": run.attempt}


    def _apply_heartbeat(self, index: int, cmd: C.Heartbeat, effects: list[Effect]) -> dict[str, Any]:
        problem = CK.progress_problem(cmd.progress) or (
            None if cmd.message is None else CK.message_problem(cmd.message))
        if problem is not None:
            raise Refused(f"heartbeat refused: {problem}")
        run = self._token_run(cmd, "heartbeat")
        CK.beat(self.conn, run.run_id, cmd.at,
                None if cmd.progress is None else float(cmd.progress), cmd.message)
        return {"run_id": run.run_id}


    def _apply_heartbeat_timeout(self, index: int, cmd: C.HeartbeatTimeout, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if run.state != "running":
            raise Refused(f"run {cmd.run_id} is {run.state}, not running")
        spec = self._job_spec(run.job)
        timeout = spec.heartbeat_timeout if spec is not None else None
        if not timeout:
            raise Refused(f"run {cmd.run_id}: job {run.job!r} has no heartbeat_timeout")
        last = CK.silent_since(self.conn, run)
        if last is None or cmd.at - last < timeout:
            raise Refused(f"run {cmd.run_id} was heard of at {iso_utc(last)}, within its "
                          f"heartbeat_timeout")
        reason = CK.stuck_reason(timeout)
        retry = self._finish(run, "timed_out", cmd.at, reason=reason, effects=effects,
                             index=index)
        # Its node stops the process (the record is final already).
        effects.append(RunStuck(run=self._get_run(run.run_id)))
        return {"run_id": run.run_id, "state": "timed_out", "retry_run_id": retry}


    def _apply_delivery_result(self, index: int, cmd: C.DeliveryResult, effects: list[Effect]) -> dict[str, Any]:
        if not DL.well_formed(cmd.attempts, cmd.done):
            raise Refused("delivery_result: attempts must be [event_id, notifier, attempt, "
                          "ok, final, error] lists and done a list of event ids")
        return DL.record(self.conn, cmd.at, cmd.leader, cmd.attempts, cmd.done)


    def _apply_raise_alerts(self, index: int, cmd: C.RaiseAlerts, effects: list[Effect]) -> dict[str, Any]:
        if not isinstance(cmd.alerts, list) or len(cmd.alerts) > 1000:
            raise Refused("raise_alerts: alerts must be a list of at most 1000")
        opened = []
        for item in cmd.alerts:
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                    and isinstance(item[1], int) and item[2] in EV.SLA_KINDS
                    and isinstance(item[3], str)):
                raise Refused("raise_alerts: each alert is [job, fire_time, sla kind, detail]")
            aid = AL.raise_alert(self.conn, job=item[0], fire_time=item[1], kind=item[2],
                                 detail=item[3], at=cmd.at)
            if aid is not None:
                opened.append(aid)
        return {"opened": opened}


    def _apply_ack_alert(self, index: int, cmd: C.AckAlert, effects: list[Effect]) -> dict[str, Any]:
        return AL.ack(self.conn, cmd.alert_id, cmd.note, cmd.who, cmd.at, Refused)


    def _apply_dead_letter_action(self, index: int, cmd: C.DeadLetterAction, effects: list[Effect]) -> dict[str, Any]:
        return AL.dead_letter_action(self, index, cmd, Refused, effects)

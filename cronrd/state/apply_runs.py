"""Applying the commands about runs: fires, manual runs, starts and ends,
retries, cancels, assignment, claims and replacements, and the job
queue (concurrency: queue).

A part of the state machine (machine.py), which is one of these
classes each: the methods use its connection and one another."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ..decisions import exit_rules, overlap
from ..jobspec.fields import MAX_QUEUED_LIMIT
from ..schedule import iso_utc, retry_delay
from . import checkpoints as CK
from . import planned as PLN
from . import apply_watches as WW
from . import versions as V
from . import commands as C
from . import dependencies as deps
from . import alerts as AL
from . import seq as SEQ
from . import run_events as RE
from . import pools as PL
from . import start_deadline as SD
from . import queries as Q
from . import queue as QU
from . import run_params as RP
from ..model.run import SELECT as SELECT_RUNS, Run
from ..errors import Conflict, Refused
from .effects import (CancelRequested, Effect, PlansChanged, RunAssigned, RunDone, RunMoved,
                      RunPending)
from ..model.run_states import ACTIVE, NOT_STARTED, REPORTABLE, TRANSITIONS, sql_in
from .apply_common import ApplyBase

# The ends the exit-code rules judge (decisions/exit_rules.py).
JUDGED = ("succeeded", "failed", "timed_out")

if TYPE_CHECKING:
    from ..jobspec import JobSpec


def _pairs(items: Any, width: int, what: str) -> list[tuple[Any, ...]]:
    """``items`` as tuples of ``width`` (run id and token first, integers);
    Refused if the command is malformed (it came from a peer)."""
    if not isinstance(items, list) or not items:
        raise Refused(f"{what}: a non-empty list is required")
    out = []
    for item in items:
        if (not isinstance(item, list) or len(item) != width
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item[:2])):
            raise Refused(f"{what}: each entry must be [run_id, token{', node' * (width > 2)}]")
        out.append(tuple(item))
    return out


class RunsApply(ApplyBase):
    """The runs part of StateMachine."""

    def _get_run(self, run_id: int) -> Run:
        for row in self.conn.execute(
                f"{SELECT_RUNS} WHERE run_id=?", (run_id,)):
            return Run.from_row(row)
        raise Refused(f"no run with id {run_id}; `cronrd runs` lists recent runs")


    def _active_runs(self, job: str) -> list[Run]:
        return [Run.from_row(r) for r in self.conn.execute(
            f"{SELECT_RUNS} WHERE job=? AND state IN "
            f"{sql_in(ACTIVE)} ORDER BY run_id", (job,))]


    def _insert_run(self, index: int, *, job: str, origin: str, kind: str,
                    fire_time: int, attempt: int, state: str, node: str | None,
                    due_at: float | None, at: float, reason: str | None = None,
                    target: str = "") -> Run:
        run_id = SEQ.peek(self.conn, "run_seq", "runs", "run_id")  # never one given before
        try:
            self.conn.execute(
                "INSERT INTO runs(run_id, job, origin, kind, fire_time, attempt, target, state,"
                " node, token, due_at, created_at, reason, assigned_at)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, job, origin, kind, fire_time, attempt, target, state, node,
                 index if state == "assigned" else None, due_at, at, reason,
                 at if state == "assigned" else None))
        except apsw.ConstraintError:
            raise Refused(f"a run record for job {job!r} at fire time {fire_time} "
                          f"attempt {attempt} already exists") from None
        SEQ.taken(self.conn, "run_seq", run_id)
        run = self._get_run(run_id)
        return self._pool_gate(run) if state in ("pending", "assigned") else run


    def _admit(self, index: int, job: dict[str, Any], at: float, effects: list[Effect]) -> str | None:
        """The overlap policy for a manual run: against runs already running
        (one assigned ahead of its fire time is decided at its own gate)."""
        active = {r.run_id: r for r in self._active_runs(job["name"])
                  if r.state == "running"}
        spec = self._job_spec(job["name"])
        assert spec is not None  # the job exists (its row is ``job``)
        decision = overlap.decide(spec.concurrency, [overlap.Running(rid) for rid in active])
        for other in decision.replace:
            self._request_cancel(active[other.run_id], decision.reason, at, effects)
        return decision.skip


    def _request_cancel(self, run: Run, reason: str, at: float, effects: list[Effect]) -> None:
        if run.state in NOT_STARTED:
            self._finish(run, "cancelled", at, reason=reason, effects=effects)
        else:
            self.conn.execute("UPDATE runs SET cancel_requested=1, reason=? WHERE run_id=?",
                              (reason, run.run_id))
            effects.append(CancelRequested(run=self._get_run(run.run_id)))


    def _queue_hold(self, job: str, target: str, fire_time: int, spec: JobSpec | None = None,
                    bounded: bool = True) -> overlap.Decision | None:
        """None unless the job queues its runs; else may this one start now,
        must it wait, or is the queue full (overlap.hold; never, unless
        ``bounded``). ``spec``: the job's definition, if the caller has it."""
        spec = spec or self._job_spec(job)
        if spec is None or spec.concurrency != "queue":
            return None
        bound = spec.max_queued or overlap.DEFAULT_MAX_QUEUED
        return QU.hold(self.conn, job, target, fire_time,
                       bound if bounded else MAX_QUEUED_LIMIT + bound)


    def _enqueue(self, index: int, *, job: str, origin: str, kind: str, fire_time: int,
                 due_at: float, at: float, reason: str, target: str, attempt: int = 1) -> Run:
        """A run that waits in its job's queue (not placed: no node yet)."""
        run = self._insert_run(index, job=job, origin=origin, kind=kind,
                               fire_time=fire_time, attempt=attempt, state="waiting", node=None,
                               due_at=due_at, at=at, reason=reason, target=target)
        QU.enqueue(self.conn, run)
        QU.refresh_reasons(self.conn, job, target)  # one may have come before others
        return run


    def _stop_reason(self, job: dict[str, Any]) -> str | None:
        """Why the job may not start a run now (paused, maintenance, disabled)."""
        if job["paused"]:
            return "paused: `cronrd resume` re-enables the job"
        reason = self._maintenance_reason()
        if reason is None:
            spec = self._job_spec(job["name"])
            assert spec is not None  # the job exists (its row is ``job``)
            if not spec.enabled:
                reason = "disabled: enabled is false in the job file"
        return reason


    def _queue_after(self, run: Run, at: float, effects: list[Effect]) -> None:
        """``run`` ended (at ``at``): if none of its job's runs is in flight
        any more, the first waiting one is released to pending, in this
        command (overlap.release); the others name the run now ahead."""
        QU.dequeue(self.conn, run.run_id)
        if not QU.has_queue(self.conn, run.job, run.target):
            return
        job = self._job(run.job)
        if job is None:
            return  # the job is going: its waiting runs are cancelled
        if not QU.in_flight(self.conn, run.job, run.target):
            spec = self._job_spec(run.job)
            assert spec is not None  # the job exists (checked above)
            waiting = {r.run_id: r for r in QU.queued(self.conn, run.job, run.target)}
            out = overlap.release(
                [overlap.Queued(r.run_id, r.fire_time if r.due_at is None else r.due_at)
                 for r in waiting.values()], at, spec.catchup_window, self._stop_reason(job))
            for run_id, why in out.skip:
                QU.dequeue(self.conn, run_id)
                self._finish(waiting[run_id], "skipped", at, reason=why, effects=effects,
                             release=False)
            if out.go is not None:
                QU.to_pending(self.conn, waiting[out.go], at,
                              f"waited in the queue until run {run.run_id} ended at "
                              f"{iso_utc(at)} (concurrency: queue)")
                effects.append(RunPending(run=self._pool_gate(self._get_run(out.go))))
        QU.refresh_reasons(self.conn, run.job, run.target)


    def _queue_dissolve(self, job: str, at: float, policy: str, effects: list[Effect]) -> None:
        """The job no longer queues: its waiting runs are released at once,
        for its new policy to decide at their start."""
        for run in QU.all_queued(self.conn, job):
            QU.to_pending(self.conn, run, at, f"released from the queue: the job's "
                                              f"concurrency is now {policy}")
            effects.append(RunPending(run=self._pool_gate(self._get_run(run.run_id))))


    def _apply_fire(self, index: int, cmd: C.Fire, effects: list[Effect]) -> dict[str, Any]:
        job = self._need_job(cmd.job)
        if not cmd.boot:
            if cmd.fire_time <= job["cursor"] and not (
                    cmd.target and cmd.fire_time == job["cursor"]):
                raise Refused(f"fire time {cmd.fire_time} of job {cmd.job!r} was already "
                              f"handled (cursor {job['cursor']})")
            self.conn.execute("UPDATE jobs SET cursor=? WHERE name=?",
                              (cmd.fire_time, cmd.job))
        reason = cmd.skip_reason
        if reason is None and job["paused"]:
            reason = "paused: `cronrd resume` re-enables the job"
        if reason is None:
            reason = self._maintenance_reason()
        spec = self._job_spec(cmd.job) if reason is None else None
        if spec is not None and not spec.enabled:
            reason = "disabled: enabled is false in the job file"
        if reason is None and not cmd.boot:
            reason = SD.fire_reason(cmd.fire_time, spec, cmd.at)
        # The overlap policy is applied by the executor at the fire time (a fire
        # is committed ahead of it), against the runs then running; but a
        # queued job's run waits here, behind the runs ahead of it.
        hold = None if reason is not None else self._queue_hold(cmd.job, cmd.target,
                                                                 cmd.fire_time, spec)
        if hold is not None and hold.skip is not None:
            reason = hold.skip
        if reason is not None:
            run = self._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                   fire_time=cmd.fire_time, attempt=1, state="skipped",
                                   node=None, due_at=None, at=cmd.at, reason=reason,
                                   target=cmd.target)
            self.conn.execute("UPDATE runs SET finished_at=? WHERE run_id=?",
                              (cmd.at, run.run_id))
            deps.parent_final(self, index, cmd.job, run.run_id, cmd.at, effects)
            return {"run_id": run.run_id, "state": "skipped", "reason": reason}
        assert spec is not None  # read above, as reason was None: the job exists (_need_job)
        if spec.watch is not None:  # runs nothing: waits for its ping (apply_watches.py)
            return self._watch_fire(index, cmd, spec)
        if spec.depends_on:  # its gate, at its fire time
            return deps.scheduled_fire(self, index, cmd, spec, effects)
        if hold is not None and hold.wait is not None:
            run = self._enqueue(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                                fire_time=cmd.fire_time, due_at=cmd.due_at, at=cmd.at,
                                reason=hold.wait, target=cmd.target)
            return {"run_id": run.run_id, "state": "waiting", "reason": hold.wait}
        run = self._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                               fire_time=cmd.fire_time, attempt=1, state="assigned",
                               node=cmd.node, due_at=cmd.due_at, at=cmd.at,
                               target=cmd.target)
        effects.append(RunAssigned(run=run))
        if run.state == "waiting":  # for its pool's slots
            return {"run_id": run.run_id, "state": "waiting", "reason": run.reason}
        return {"run_id": run.run_id, "state": "assigned"}


    def _apply_record_gap(self, index: int, cmd: C.RecordGap, effects: list[Effect]) -> dict[str, Any]:
        job = self._need_job(cmd.job)
        if cmd.first <= job["cursor"]:
            raise Refused(f"gap starting at {cmd.first} overlaps fire times of job "
                          f"{cmd.job!r} already handled (cursor {job['cursor']})")
        self.conn.execute(
            "INSERT INTO gaps(job, first, last, count, reason, created_at) VALUES(?,?,?,?,?,?)",
            (cmd.job, cmd.first, cmd.last, cmd.count, cmd.reason, cmd.at))
        self.conn.execute("UPDATE jobs SET cursor=? WHERE name=?", (cmd.last, cmd.job))
        return {"gap_id": self.conn.last_insert_rowid()}


    def _apply_plan_run(self, index: int, cmd: C.PlanRun, effects: list[Effect]) -> dict[str, Any]:
        self._need_job(cmd.job)
        spec = self._job_spec(cmd.job)
        if spec is not None and spec.watch is not None:
            raise Refused(f"{cmd.job!r} is a watch: it runs nothing here")
        problem = RP.params_problem(cmd.params) or (cmd.key and RP.key_problem(cmd.key))
        if problem:
            raise Refused(f"plan_run: {problem}")
        if cmd.due <= cmd.at:
            raise Refused(f"plan_run: {iso_utc(cmd.due)} is not after the request's time "
                          f"{iso_utc(cmd.at)}; for a run now, leave out --at")
        if PLN.count(self.conn) >= PLN.MAX_PLANS or \
                PLN.count(self.conn, cmd.job) >= PLN.MAX_PLANS_PER_JOB:
            raise Refused(f"job {cmd.job!r} or the cluster has as many planned runs as it "
                          f"may ({PLN.MAX_PLANS_PER_JOB} a job, {PLN.MAX_PLANS} in all); "
                          "`cronrd cancel --plan ID` removes one (`cronrd next JOB` lists them)")
        if cmd.key and (RP.run_of_key(self.conn, cmd.job, cmd.key) is not None or any(
                p.key == cmd.key for p in PLN.plans(self.conn, cmd.job))):
            raise Conflict(f"job {cmd.job!r} has a run or a planned run with key {cmd.key!r} "
                           "already; use another --key")
        plan = PLN.add(self.conn, index, cmd.job, cmd.due, cmd.params, cmd.key, cmd.by, cmd.at)
        effects.append(PlansChanged())
        return {"plan": plan.view()}


    def _apply_cancel_plan(self, index: int, cmd: C.CancelPlan, effects: list[Effect]) -> dict[str, Any]:
        plan = PLN.get(self.conn, cmd.plan_id)
        if plan is None:
            raise Refused(f"no planned run {cmd.plan_id}: it started or was cancelled "
                          "(`cronrd runs JOB` lists its run)")
        PLN.remove(self.conn, cmd.plan_id)
        effects.append(PlansChanged())
        return {"plan": plan.view(), "cancelled_by": cmd.by}


    def _start_plan(self, index: int, job: dict[str, Any], cmd: C.ManualRun,
                    effects: list[Effect]) -> dict[str, Any]:
        """A planned run's start (the leader's ManualRun with its plan_id).
        Once the plan is taken it never comes back: whatever stops its run
        now (a key used meanwhile, the overlap policy, a full queue, the job
        turned into a watch) is recorded on a skipped run, not refused; a
        refusal would leave the plan to be proposed again at once."""
        if cmd.key:
            existing = RP.run_of_key(self.conn, cmd.job, cmd.key)
        else:
            existing = None
        plan = PLN.get(self.conn, cmd.plan_id)
        if plan is None or plan.job != cmd.job or plan.run_key != cmd.key:
            if existing is not None:   # proposed again (a timeout, a new leader): its run
                run = self._get_run(existing)
                return {"run_id": run.run_id, "state": run.state.value, "existing": True}
            raise Refused(f"planned run {cmd.plan_id} of job {cmd.job!r} is not planned "
                          "(cancelled, or started already)")
        PLN.remove(self.conn, cmd.plan_id)
        effects.append(PlansChanged())
        spec = self._job_spec(cmd.job)
        why = None
        if RP.params_problem(cmd.params) or (cmd.key and RP.key_problem(cmd.key)):
            why = "its parameters or key are not valid any more"
        elif existing is not None:
            why = f"its key {cmd.key!r} was used meanwhile (run {existing})"
        elif spec is not None and spec.watch is not None:
            why = "the job is a watch now: it runs nothing here"
        else:
            why = self._admit(index, job, cmd.at, effects)
            if why is None:
                hold = self._queue_hold(cmd.job, "", int(cmd.at))
                why = hold.skip if hold is not None else None
        if why is None:
            return self._manual_start(index, job, cmd, effects)
        run = self._insert_run(index, job=cmd.job, origin="manual", kind="manual",
                               fire_time=int(cmd.at), attempt=1, state="skipped",
                               node=None, due_at=None, at=cmd.at,
                               reason=f"planned run {cmd.plan_id} not started: {why}")
        self.conn.execute("UPDATE runs SET finished_at=? WHERE run_id=?", (cmd.at, run.run_id))
        if existing is None:   # (a used key stays its first run's)
            RP.record(self.conn, run.run_id, cmd.job, cmd.params, cmd.key)
        return {"run_id": run.run_id, "state": "skipped", "reason": run.reason}


    def _apply_manual_run(self, index: int, cmd: C.ManualRun, effects: list[Effect]) -> dict[str, Any]:
        job = self._need_job(cmd.job)
        if cmd.plan_id:
            return self._start_plan(index, job, cmd, effects)
        watch = self._job_spec(cmd.job)
        if watch is not None and watch.watch is not None:
            raise Refused(f"{cmd.job!r} is a watch: it runs nothing here; its job pings it "
                          f"(`cronrd ping {cmd.job}`)")
        problem = RP.params_problem(cmd.params) or (cmd.key and RP.key_problem(cmd.key))
        if problem:
            raise Refused(f"manual_run: {problem}")
        if cmd.key:
            existing = RP.run_of_key(self.conn, cmd.job, cmd.key)
            if existing is not None:  # the key's run: no second one
                run = self._get_run(existing)
                return {"run_id": run.run_id, "state": run.state.value, "existing": True}
        reason = self._admit(index, job, cmd.at, effects)
        if reason is not None:
            raise Conflict(f"job {cmd.job!r} not started: {reason}; wait for the active run "
                          "to finish (`cronrd runs " + cmd.job + " --state running`)")
        hold = self._queue_hold(cmd.job, "", int(cmd.at))
        if hold is not None and hold.skip is not None:
            raise Conflict(f"job {cmd.job!r} not started: {hold.skip}; wait for the queue to "
                          "drain (`cronrd runs " + cmd.job + " --state waiting`)")
        return self._manual_start(index, job, cmd, effects, hold)


    def _manual_start(self, index: int, job: dict[str, Any], cmd: C.ManualRun,
                      effects: list[Effect], hold: Any = None) -> dict[str, Any]:
        """A manual run admitted: queued behind its job's run, or placed."""
        if hold is None:
            hold = self._queue_hold(cmd.job, "", int(cmd.at))
        if hold is not None and hold.wait is not None:
            run = self._enqueue(index, job=cmd.job, origin="manual", kind="manual",
                                fire_time=int(cmd.at), due_at=cmd.at, at=cmd.at,
                                reason=hold.wait, target="")
            RP.record(self.conn, run.run_id, cmd.job, cmd.params, cmd.key)
            return {"run_id": run.run_id, "state": "waiting", "reason": hold.wait}
        # No node given (a cluster): the run waits, pending, for the leader to place it.
        state = "assigned" if cmd.node else "pending"
        run = self._insert_run(index, job=cmd.job, origin="manual", kind="manual",
                               fire_time=int(cmd.at), attempt=1, state=state,
                               node=cmd.node or None, due_at=cmd.at, at=cmd.at)
        RP.record(self.conn, run.run_id, cmd.job, cmd.params, cmd.key)
        effects.append((RunAssigned if cmd.node else RunPending)(run=run))
        if run.state == "waiting":  # for its pool's slots
            return {"run_id": run.run_id, "state": "waiting", "reason": run.reason}
        return {"run_id": run.run_id, "state": state}


    def _apply_run_started(self, index: int, cmd: C.RunStarted, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if run.token != cmd.token or run.node != cmd.node:
            raise Refused(f"run {cmd.run_id}: start report from {cmd.node} with token "
                          f"{cmd.token} is stale (current token {run.token} on {run.node})")
        CK.record_start(self.conn, cmd.run_id, cmd.secret if isinstance(cmd.secret, str)
                        and len(cmd.secret) == CK.TOKEN_HASH_LEN else "")
        if run.pid == cmd.pid and run.started_at == cmd.started_at:
            # The same report again (a forwarded proposal retried after a timeout).
            return {"state": run.state.value, "duplicate": True,
                    "cancel": run.state == "running" and bool(run.cancel_requested)}
        if run.state != "assigned":
            # Cancelled while the process was being started: tell the node to stop it.
            self.conn.execute("UPDATE runs SET pid=?, started_at=?, log_path=? "
                              "WHERE run_id=?",
                              (cmd.pid, cmd.started_at, cmd.log_path, cmd.run_id))
            effects.append(CancelRequested(run=self._get_run(cmd.run_id)))
            return {"state": run.state.value, "cancel": True}
        self.conn.execute(
            "UPDATE runs SET state='running', pid=?, started_at=?, log_path=?, "
            "claimed_at=COALESCE(claimed_at, ?) WHERE run_id=?",
            (cmd.pid, cmd.started_at, cmd.log_path, cmd.started_at, cmd.run_id))
        if QU.has_queue(self.conn, run.job, run.target):  # the runs behind it say so
            QU.refresh_reasons(self.conn, run.job, run.target)
        return {"state": "running", "cancel": bool(run.cancel_requested)}


    def _apply_run_finished(self, index: int, cmd: C.RunFinished, effects: list[Effect]) -> dict[str, Any]:
        if cmd.state not in REPORTABLE:
            raise Refused(f"run {cmd.run_id}: {cmd.state!r} is not a final state")
        run = self._get_run(cmd.run_id)
        # (success_exit_codes may have recorded another state than the report's)
        same = run.state == cmd.state or (
            run.exit_code == cmd.exit_code and run.finished_at == cmd.finished_at
            and cmd.state in JUDGED and V.at_least(self.conn, V.EXIT_RULES))
        if same and run.state not in TRANSITIONS and (
                run.token, run.node) == (cmd.token, cmd.node):
            # The same report again (a forwarded proposal retried after a timeout),
            # or the node's own word after the leader declared the run lost.
            out: dict[str, Any] = {"state": run.state.value, "duplicate": True}
            if cmd.state == "lost" and cmd.not_started:
                out["retry_run_id"] = self._retry_never_started(index, run, cmd.finished_at,
                                                                effects)
            return out
        if (run.token, run.node, run.state.value) == (cmd.token, cmd.node, "lost") \
                and not cmd.not_started:
            # The node's own word on an attempt declared lost while it could
            # not report (dead, cut off): the record keeps "lost" (a retry
            # may have run meanwhile) but says what really happened there.
            self._late_word(run, cmd)
        elif cmd.not_started and cmd.state == "lost" and run.token != cmd.token:
            # Never started on a node that had lost the run already (moved):
            # nothing to keep.
            return {"state": run.state.value, "late": True}
        if run.token != cmd.token or run.state not in TRANSITIONS:
            # Stale attempt or already final: keep as history, do not overwrite.
            self.conn.execute(
                "INSERT INTO late_reports(run_id, node, token, state, exit_code, signal,"
                " finished_at, log_path, received_index) VALUES(?,?,?,?,?,?,?,?,?)",
                (cmd.run_id, cmd.node, cmd.token, cmd.state, cmd.exit_code, cmd.signal,
                 cmd.finished_at, cmd.log_path, index))
            return {"state": run.state.value, "late": True}
        if cmd.started_at is not None:
            self.conn.execute("UPDATE runs SET started_at=COALESCE(started_at, ?) "
                              "WHERE run_id=?", (cmd.started_at, cmd.run_id))
        if cmd.pid is not None:
            self.conn.execute("UPDATE runs SET pid=COALESCE(pid, ?) WHERE run_id=?",
                              (cmd.pid, cmd.run_id))
        retry = self._finish(run, cmd.state, cmd.finished_at, reason=cmd.reason,
                             exit_code=cmd.exit_code, signal=cmd.signal,
                             log_path=cmd.log_path, effects=effects, index=index,
                             not_started=cmd.not_started and cmd.state == "lost")
        # (the state it counts as: success_exit_codes may say otherwise)
        return {"state": self._get_run(cmd.run_id).state.value, "retry_run_id": retry}


    def _late_word(self, run: Run, cmd: C.RunFinished) -> None:
        """Fill in a lost attempt from its node's late report: when it
        started, its pid, exit code and log, and a note saying so."""
        outcome = cmd.state if cmd.exit_code is None else f"{cmd.state} (exit {cmd.exit_code})"
        if cmd.signal is not None:
            outcome = f"{cmd.state} (signal {cmd.signal})"
        started = cmd.started_at is not None
        note = (f"node {cmd.node} reported later that it ran: {outcome}" if started else
                f"node {cmd.node} reported later: {outcome}")
        self.conn.execute(
            "UPDATE runs SET started_at=COALESCE(started_at, ?), pid=COALESCE(pid, ?), "
            "exit_code=COALESCE(exit_code, ?), signal=COALESCE(signal, ?), "
            "log_path=COALESCE(log_path, ?), reason=? WHERE run_id=?",
            (cmd.started_at, cmd.pid, cmd.exit_code, cmd.signal, cmd.log_path,
             run.reason if run.reason and run.reason.endswith(note) else
             f"{run.reason}; {note}" if run.reason else note, run.run_id))


    def _retry_never_started(self, index: int, run: Run, at: float, effects: list[Effect]) -> int | None:
        """A run declared lost (node silent) whose node now says it never
        started: give it its next attempt if nothing else did (the policy may
        have kept a lost run from being retried; one that never ran is)."""
        if self._job(run.job) is None or self._has_next_attempt(run):
            return None
        hold = self._queue_hold(run.job, run.target, run.fire_time, bounded=False)
        if hold is not None and hold.wait is not None:
            # The queue moved on meanwhile: the attempt waits its turn (by
            # its fire time: at the head), full or not.
            new = self._enqueue(index, job=run.job, origin=run.origin, kind="retry",
                                fire_time=run.fire_time, attempt=run.attempt + 1,
                                due_at=max(at, run.due_at or at), at=at,
                                reason=hold.wait, target=run.target)
            self._link_retry(run, new)
            return new.run_id
        new = self._insert_run(index, job=run.job, origin=run.origin, kind="retry",
                               fire_time=run.fire_time, attempt=run.attempt + 1,
                               state="pending", node=None, due_at=max(at, run.due_at or at),
                               at=at,
                               target=run.target)
        self._link_retry(run, new)
        effects.append(RunPending(run=new))
        return new.run_id


    def _has_next_attempt(self, run: Run) -> bool:
        """Whether ``run`` was retried already (its record has its next
        attempt): by the link for any run; by the attempt number for a
        scheduled record (one per attempt) made before links were kept."""
        if any(self.conn.execute("SELECT 1 FROM run_retries WHERE run_id=?", (run.run_id,))):
            return True
        return run.origin == "schedule" and any(self.conn.execute(
            "SELECT 1 FROM runs WHERE job=? AND origin='schedule' AND fire_time=? AND "
            "target=? AND attempt=?", (run.job, run.fire_time, run.target, run.attempt + 1)))


    def _link_retry(self, run: Run, new: Run) -> None:
        """``new`` retries ``run``: it takes its parameters and key, and the
        link (`run-now --wait` follows it; run_retries)."""
        RP.carry(self.conn, run.run_id, new.run_id)
        self.conn.execute("INSERT INTO run_retries(run_id, retry_run_id) VALUES(?,?)",
                          (run.run_id, new.run_id))


    def _finish(self, run: Run, state: str, at: float, *, reason: str | None = None,
                exit_code: int | None = None, signal: int | None = None,
                log_path: str | None = None, effects: list[Effect], index: int | None = None,
                not_started: bool = False, release: bool = True) -> int | None:
        """``_end_run``; when no retry follows, the job's outcome for that
        fire time is final: its children's gates are looked at
        (state/dependencies.py). Then the job's queue moves on if this was
        the last of its runs in flight (concurrency: queue; not when
        ``release`` is false: the queue itself is being settled)."""
        retry = self._end_run(run, state, at, reason=reason, exit_code=exit_code,
                              signal=signal, log_path=log_path, effects=effects, index=index,
                              not_started=not_started)
        WW.forget(self.conn, run.run_id)   # a watch's run waits no more (none before v2)
        if retry is None:
            AL.on_final(self, run, at)
            deps.parent_final(self, index or 0, run.job, run.run_id, at, effects)
        if release:
            self._queue_after(run, at, effects)
        self._pool_after(run, at, effects)
        return retry


    def _apply_upstream_timeout(self, index: int, cmd: C.UpstreamTimeout, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if run.state != "waiting":
            raise Refused(f"run {cmd.run_id} is {run.state}, not waiting for its parents")
        if not deps.waits_for_upstream(self.conn, run.run_id):
            raise Refused(f"run {cmd.run_id} waits in its job's queue (concurrency: queue), "
                          "not for its parents")
        spec = self._job_spec(run.job)
        if spec is None:
            raise Refused(f"run {cmd.run_id}: job {run.job!r} is gone")
        if cmd.at < (run.due_at or 0) + spec.wait_for_upstream:
            raise Refused(f"run {cmd.run_id} waits for its parents until "
                          f"{(run.due_at or 0) + spec.wait_for_upstream} (wait_for_upstream)")
        state = deps.resolve_waiting(self, index, run, spec, cmd.at, effects, timed_out=True)
        return {"run_id": run.run_id, "state": state}


    def _end_run(self, run: Run, state: str, at: float, *, reason: str | None = None,
                 exit_code: int | None = None, signal: int | None = None,
                 log_path: str | None = None, effects: list[Effect], index: int | None = None,
                 not_started: bool = False) -> int | None:
        """Move ``run`` to a final state and schedule a retry if policy says so.

        A lost run its node says never started is retried whatever the
        policy: running it once is then neither a second run (at-most-once
        holds) nor optional (at-least-once needs it)."""
        spec = None if index is None or run.cancel_requested else self._job_spec(run.job)
        verdict = None
        if spec is not None and state in JUDGED and V.at_least(self.conn, V.EXIT_RULES):
            verdict = exit_rules.judge(spec, state, exit_code, signal,
                                       run.attempt - self._try_began(run) + 1)
            state = verdict.state
            if verdict.rule:
                base = reason if reason is not None else run.reason
                reason = f"{base}; {verdict.rule}" if base else verdict.rule
        if state not in TRANSITIONS.get(run.state, ()):
            raise Refused(f"run {run.run_id} cannot go from {run.state} to {state}")
        no_retry = spec is not None and state == "lost" and spec.on_node_loss != "retry" \
            and not not_started
        if no_retry:
            assert spec is not None  # no_retry says so
            note = f"not retried (on_node_loss: {spec.on_node_loss})"
            base = reason if reason is not None else run.reason
            reason = f"{base}; {note}" if base else note
        self.conn.execute(
            "UPDATE runs SET state=?, finished_at=?, exit_code=?, signal=?,"
            " log_path=COALESCE(?, log_path), reason=COALESCE(?, reason) WHERE run_id=?",
            (state, at, exit_code, signal, log_path, reason, run.run_id))
        effects.append(RunDone(run=self._get_run(run.run_id)))
        if spec is None or no_retry or (verdict is not None and not verdict.retry):
            return None
        policy = spec.retries
        allowed = 1 + policy.max
        if state == "lost":
            allowed = max(allowed, 2)  # at-least-once: a lost run is retried
        elif state not in ("failed", "timed_out"):
            return None
        attempt = run.attempt + 1
        if self._has_next_attempt(run):  # another way gave the record its next attempt
            return None
        # The retries count from the attempt that began this try: a rerun (or
        # a dead-letter requeue) is attempt 2, 5, ... of its record and has
        # its own retries, and a lost one is run again like any other.
        if verdict is None and attempt - self._try_began(run) + 1 > allowed and not not_started:
            return None
        key = f"{run.job}/{run.fire_time}/{attempt}"
        delay = 0.0 if state == "lost" else retry_delay(
            attempt, policy.delay, policy.backoff, policy.max_delay, policy.jitter, key)
        # A lost run must run elsewhere: it waits, pending, for the leader to place
        # it; a failed one is retried where it ran.
        lost = state == "lost"
        assert index is not None  # spec, read only with an index, is not None
        new = self._insert_run(index, job=run.job, origin=run.origin, kind="retry",
                               fire_time=run.fire_time, attempt=attempt,
                               state="pending" if lost else "assigned",
                               # never before the attempt it replaces was due (one
                               # handed back before its fire time waits for it)
                               node=None if lost else run.node,
                               due_at=max(at + delay, run.due_at or at), at=at,
                               target=run.target)
        self._link_retry(run, new)
        effects.append((RunPending if lost else RunAssigned)(run=new))
        RE.on_retry(self.conn, run.run_id, new.run_id, at)
        return new.run_id


    def _try_began(self, run: Run) -> int:
        """The attempt that began the try ``run`` belongs to: its own, or for
        a retry the newest earlier attempt of its record that was no retry."""
        if run.kind != "retry":
            return run.attempt
        for (first,) in self.conn.execute(
                "SELECT MAX(attempt) FROM runs WHERE job=? AND fire_time=? AND target=? "
                "AND origin=? AND attempt<? AND kind!='retry'",
                (run.job, run.fire_time, run.target, run.origin, run.attempt)):
            return first or 1
        return 1


    def _apply_cancel_run(self, index: int, cmd: C.CancelRun, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if run.state not in ACTIVE:
            raise Refused(f"run {cmd.run_id} is already {run.state}")
        self._request_cancel(run, cmd.reason, cmd.at, effects)
        return {"run_id": cmd.run_id}


    def _apply_assign_run(self, index: int, cmd: C.AssignRun, effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        if run.state != "pending":
            raise Refused(f"run {cmd.run_id} is {run.state}, not pending; only pending "
                          "runs are placed")
        why = PL.placed_check(self.conn, run, cmd.node)  # a node-scoped pool full there
        if why is not None:
            return {"run_id": cmd.run_id, "state": "waiting", "reason": why}
        self.conn.execute("UPDATE runs SET state='assigned', node=?, token=?, assigned_at=? "
                          "WHERE run_id=?", (cmd.node, index, cmd.at, cmd.run_id))
        run = self._get_run(cmd.run_id)
        effects.append(RunAssigned(run=run))
        return {"run_id": cmd.run_id, "state": "assigned", "node": cmd.node, "token": index}


    def _apply_claim_runs(self, index: int, cmd: C.ClaimRuns, effects: list[Effect]) -> dict[str, Any]:
        """A node may start a run once its claim is committed: the run is
        assigned to it under the same token and nobody moved it first. A
        claim again is won again (a retried proposal)."""
        if not isinstance(cmd.at, (int, float)) or isinstance(cmd.at, bool):
            # A won claim must leave claimed_at set (ReplaceRuns moves only
            # runs without one): a claim with no time would be won and moved.
            raise Refused("claim_runs: at must be a number")
        won, lost = [], {}
        for run_id, token in _pairs(cmd.claims, 2, "claims"):
            run = Q.get_run(self.conn, run_id)
            if run is None:
                lost[str(run_id)] = "no such run"
            elif run.node != cmd.node or run.token != token:
                lost[str(run_id)] = (f"moved to node {run.node}" if run.state == "assigned"
                                     else f"no longer this node's attempt ({run.state})")
            elif run.state != "assigned":
                if run.claimed_at is not None and run.state == "running":
                    won.append(run_id)  # claimed, and started: a retried claim
                else:
                    lost[str(run_id)] = f"already {run.state}"
            else:
                if run.claimed_at is None:
                    self.conn.execute("UPDATE runs SET claimed_at=? WHERE run_id=?",
                                      (cmd.at, run_id))
                won.append(run_id)
        return {"won": won, "lost": lost}


    def _apply_replace_runs(self, index: int, cmd: C.ReplaceRuns, effects: list[Effect]) -> dict[str, Any]:
        """Move runs nobody claimed to other nodes (a new token: the old
        node's claim, if it still comes, loses). Claimed, moved or ended
        meanwhile: left alone."""
        moved, kept = [], []
        for run_id, token, node in _pairs(cmd.moves, 3, "moves"):
            run = Q.get_run(self.conn, run_id)
            if (run is None or run.state != "assigned" or run.token != token
                    or run.claimed_at is not None or run.target or not isinstance(node, str)
                    or not node or node == run.node or not PL.fits_on(self.conn, run_id, node)):
                kept.append(run_id)
                continue
            trail = ",".join(filter(None, [run.moved_from, run.node]))
            self.conn.execute("UPDATE runs SET node=?, token=?, assigned_at=?, moved_from=?, "
                              "reason=? WHERE run_id=?",
                              (node, index, cmd.at, trail,
                               f"moved from {run.node}: {cmd.reason}", run_id))
            effects.append(RunMoved(run=run))
            effects.append(RunAssigned(run=self._get_run(run_id)))
            moved.append(run_id)
        return {"moved": moved, "kept": kept}

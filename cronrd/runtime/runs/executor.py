"""The executor: starts the runs assigned to this node and reports results.

Each run is forked in its own session and process group, with stdout and
stderr into one size-capped log file. Exits are noticed through a pidfd on
the event loop (no SIGCHLD handler, no polling). Timeouts and cancels signal
the whole tree: the process group plus every descendant found by psutil, so
grandchildren that left the group are stopped too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import resource
import signal
from dataclasses import dataclass, field
from typing import Callable

import psutil

from ...config import Config
from ...errors import CronrdError
from ...jobspec import JobSpec
from ...schedule import iso_utc
from ...schedule.catchup import stale_reason
from ...state import commands as C
from ...decisions import overlap
from ...state import queries as Q
from ...state import run_life as L
from ...state.machine import Effect, Refused
from ...state.run import Run
from ..clock import Clock
from .launch import Identities, launch
from .legacy import at_gate, find_orphans, stop_orphans
from .logs import open_run_log, prune_logs, read_run_log, run_log_path, say
from .outbox import Outbox
from .processes import alive, run_process, signal_tree, snapshot_tree
from . import records
from . import recovery as R
from .spawner import Spawner, new_key

log = logging.getLogger("cronrd.executor")

READ_CHUNK = 65536
REPORT_RETRY_DELAY = 0.5
PRESPAWN = 1.0    # seconds before the fire time a run's supervisor is asked for
READY_WAIT = 2.0  # longest a gate waits for a run prepared at or before its time to be ready


@dataclass
class Gate:
    due: float
    rfd: int
    wfd: int
    runs: list = field(default_factory=list)
    handle: asyncio.TimerHandle | None = None
    waiting: bool = False            # due, but a run is not ready yet
    ready_by: float = 0.0            # wall time after which it opens for whoever is ready


@dataclass
class ActiveRun:
    """A run this node is starting or running: its life (run_life.Life, the
    only state the executor keeps about it) and the handles that go with it."""
    run: Run
    spec: JobSpec | None
    key: str                         # the spawn's name: its record file and datagrams
    log_path: str
    kill_grace: float
    life: L.Life
    user: str = ""
    sup_fd: int | None = None        # pidfd of the run's supervisor
    sup_pid: int = 0
    gate: "Gate | None" = None
    tree: list = field(default_factory=list)
    timers: list = field(default_factory=list)
    hard_kill: asyncio.TimerHandle | None = None




class Executor:
    def __init__(self, config: Config, proposer, conn, clock: Clock, *,
                 lease: Callable[[], bool], outbox: Outbox,
                 others_can_run: Callable[[], bool] = lambda: False):
        self.config = config
        self.node_id = config.node_id
        self.proposer = proposer
        # May this node start a run now (its lease from the leader is fresh)?
        # The durable outbox that results go to first. Is there another
        # member to hand unstarted runs to when this daemon stops?
        self.lease = lease
        self.outbox = outbox
        self.others_can_run = others_can_run
        self.conn = conn
        self.clock = clock
        self.timers: dict[int, asyncio.TimerHandle] = {}
        self.active: dict[int, ActiveRun] = {}
        self.by_key: dict[str, ActiveRun] = {}
        # Each run gets a supervisor process of its own (runs/supervisor.py),
        # which outlives the daemon; its records live here.
        self.runs_dir = os.path.join(config.data_dir, "runs")
        self.spawner = Spawner(self.runs_dir, self._on_spawned, self._on_event)
        self._waiters: list[asyncio.Future] = []  # woken when a run ends
        self.gates: dict[float, Gate] = {}
        self.reports: set[asyncio.Task] = set()
        self._unwritten: list[tuple] = []  # results waiting for this turn's outbox write
        # False until reconcile(): runs assigned meanwhile (a cluster applies
        # entries while the daemon starts) are settled there, once, rather
        # than started and then mistaken for leftovers of the last run.
        self.accepting = False
        self.started_count = 0
        self._specs: dict[str, JobSpec | None] = {}
        self.identities = Identities(config.node_id)
        self._reported: set[int] = set()  # results found in the outbox at start
        self._deferred: set[int] = set()  # over max_running when prepared: retried when due
        # The soft open-file limit jobs get (the daemon raises its own at start).
        self.job_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    # -- what others may ask ---------------------------------------------------
    def running_here(self) -> int:
        return sum(1 for a in self.active.values() if a.life.started)

    def prune_logs(self, active: set[str]) -> int:
        """log_retention, in a worker thread (``active``: logs_in_use())."""
        return prune_logs(self.config.log_dir, self.config.log_max_age,
                          self.config.log_max_files_per_job, self.clock.now(), active)

    def logs_in_use(self) -> set[str]:
        return {a.log_path for a in self.active.values()}

    def gates_pending(self) -> bool:
        return bool(self.gates)

    # -- effects from the state machine -------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        for eff in effects:
            try:
                self._on_effect(eff)
            except Exception:  # one bad run must not cost the others their effects
                log.exception("event=effect_failed kind=%s", eff.kind)

    def _on_effect(self, eff: Effect) -> None:
        if eff.kind == "jobs_changed":
            self._specs.pop(eff.job, None)
            return
        if eff.kind == "restored":  # a snapshot replaced the state
            self._specs.clear()
            for run in Q.runs_for_node(self.conn, self.node_id, ("assigned",)):
                self.schedule(run)
            return
        run = eff.run
        if run is None or run.node != self.node_id:
            return
        if eff.kind == "assign":
            self.schedule(run)
        elif eff.kind == "cancel":
            self.cancel(run.run_id, run.reason or "cancelled")
        elif eff.kind == "run_done":
            handle = self.timers.pop(run.run_id, None)
            if handle is not None:
                handle.cancel()
            act = self.active.get(run.run_id)
            if act is not None and not act.life.started:
                # Final already (cancelled, job removed...) while it waited
                # at its gate: it must not start, and it is not reported again.
                self._apply(act, L.Stop("final", run.reason or "final"))

    def schedule(self, run: Run) -> None:
        """Prepare ``run`` PRESPAWN seconds before it is due (at once if sooner)."""
        run_id = run.run_id
        if not self.accepting or run_id in self.timers or run_id in self.active:
            return
        delay = (run.due_at or 0) - PRESPAWN - self.clock.now()
        if delay <= 0:
            self.prepare(run)
        else:
            self.timers[run_id] = asyncio.get_running_loop().call_later(
                delay, self._prepare_timer, run)

    def _prepare_timer(self, run: Run) -> None:
        self.timers.pop(run.run_id, None)
        if self.accepting and self._still_mine([run]).get(run.run_id, True):
            self.prepare(run)

    def _still_mine(self, runs: list[Run]) -> dict[int, bool]:
        """Is each run still assigned here, with the same token? (A snapshot
        from the leader may have replaced the state meanwhile, without the
        effects that would have told us.)"""
        now = Q.run_assignments(self.conn, [r.run_id for r in runs])
        return {r.run_id: now.get(r.run_id) == ("assigned", self.node_id, r.token)
                for r in runs}

    # -- starting -------------------------------------------------------------
    def _job_spec(self, name: str) -> JobSpec | None:
        if name not in self._specs:
            self._specs[name] = Q.job_spec(self.conn, name)
        return self._specs[name]

    def _gate(self, due: float) -> Gate:
        gate = self.gates.get(due)
        if gate is None:
            rfd, wfd = os.pipe2(os.O_CLOEXEC)
            gate = Gate(due, rfd, wfd)
            delay = max(0.0, due - self.clock.now())
            gate.handle = asyncio.get_running_loop().call_later(delay, self._open_gate, gate)
            self.gates[due] = gate
        # Each run gets READY_WAIT from the later of its due time and now to say
        # it is ready: a run prepared late (a catch-up) is not failed at once.
        gate.ready_by = max(gate.ready_by, max(due, self.clock.now()) + READY_WAIT)
        return gate

    def _over_cap(self, run: Run, spec: JobSpec) -> str | None:
        """max_running: the reason this run may not start now, or None. Runs
        waiting at a gate count: each holds a process and descriptors."""
        total = same = 0
        for act in self.active.values():
            if not act.life.holds_slot:
                continue
            total += 1
            same += act.run.job == run.job
        if spec.max_running is not None and same >= spec.max_running:
            return (f"max_running ({spec.max_running}) of job {run.job} reached on node "
                    f"{self.node_id}")
        if total >= self.config.max_running:
            return f"max_running ({self.config.max_running}) reached on node {self.node_id}"
        return None

    def _refused_source(self, job: str) -> str | None:
        """accept_jobs_from: why this node will not run ``job`` (defined only
        by nodes it does not take jobs from), or None."""
        accept = self.config.accept_jobs_from
        if accept is None:
            return None
        # The definition in force must be one of theirs: being one of the
        # job's sources is not enough (another node's conflicting definition
        # may be the one in force).
        if Q.in_force_from(self.conn, job, accept):
            return None
        sources = Q.job_source_nodes(self.conn, job)
        return (f"node {self.node_id} runs only jobs defined by {', '.join(accept)} "
                f"(accept_jobs_from); the definition of {job} in force comes from "
                f"{', '.join(n for n in sources if n not in accept) or 'another node'}: pin it "
                "to other nodes with run_on, or define it the same way here")

    def prepare(self, run: Run) -> None:
        """Spawn the run's process, waiting at the gate of its due time."""
        spec = self._job_spec(run.job)
        now = self.clock.now()
        log_path = run_log_path(self.config.log_dir, run)
        if spec is None:
            self._report_now(run, "cancelled", now, reason="job no longer defined")
            return
        refused = self._refused_source(run.job)
        if refused is not None:
            self._report_now(run, "skipped", now, reason=refused)
            return
        over = self._over_cap(run, spec)
        if over is not None:
            due = run.due_at or now
            if due - now > 0.001 and run.run_id not in self._deferred:
                # Runs may end before the fire time: decide then.
                self._deferred.add(run.run_id)
                self.timers[run.run_id] = asyncio.get_running_loop().call_later(
                    due - now, self._prepare_timer, run)
                return
            self._deferred.discard(run.run_id)
            self._report_now(run, "skipped", now, reason=over)
            return
        self._deferred.discard(run.run_id)
        try:
            logfd = open_run_log(self.config.log_dir, run, create=True)
        except (OSError, CronrdError) as exc:
            why = str(exc) if isinstance(exc, CronrdError) else \
                f"{exc.strerror}; check log_dir permissions"
            self._report_now(run, "failed", now,
                             reason=f"cannot open log file {log_path}: {why}")
            return
        envfd = -1
        try:
            ident = self.identities(spec)
            how = launch(run, spec, ident, node_id=self.node_id, log_path=log_path,
                         job_nofile=self.job_nofile)
            if how.env_script is not None:
                envfd = os.memfd_create("cronrd-env", os.MFD_CLOEXEC)
                view = memoryview(how.env_script)
                while view:
                    view = view[os.write(envfd, view):]
                os.lseek(envfd, 0, os.SEEK_SET)
        except (CronrdError, OSError) as exc:
            if envfd >= 0:
                os.close(envfd)
            msg = str(exc) if isinstance(exc, CronrdError) else \
                f"cannot prepare the run: {exc.strerror}"
            say(logfd, f"cronrd: run not started: {msg}\n")
            os.close(logfd)
            self._report_now(run, "failed", now, reason=msg, log_path=log_path)
            return
        key = new_key(run.run_id)
        gate = self._gate(run.due_at or now)
        req = {"key": key, "argv": how.argv, "env": how.env, "cwd": how.cwd,
               "cap": spec.max_log_bytes, "switch": how.switch, "ids": how.ids,
               "record": os.path.join(self.runs_dir, key)}
        try:
            self.spawner.spawn(req, [gate.rfd, logfd] + ([envfd] if envfd >= 0 else []))
        except CronrdError as exc:
            msg = f"cannot start the run: {exc}"
            say(logfd, f"cronrd: {msg}\n")
            self._report_now(run, "failed", now, reason=msg, log_path=log_path,
                             exit_code=127)
            return
        finally:
            os.close(logfd)
            if envfd >= 0:
                os.close(envfd)
        act = ActiveRun(run=run, spec=spec, key=key, log_path=log_path,
                        kill_grace=spec.kill_grace, user=how.user, gate=gate,
                        life=L.Life(switch=how.switch))
        self.active[run.run_id] = act
        self.by_key[key] = act
        gate.runs.append(act)

    def _admit(self, act: ActiveRun) -> str | None:
        """The overlap policy, decided at the fire time against the runs of the
        same job that are running here, and (in a cluster) those the
        replicated state shows running on other nodes."""
        others = [a for a in self.active.values()
                  if a is not act and a.run.job == act.run.job and a.life.started]
        # Alone, nothing runs elsewhere: no query on the path to the gate.
        remote = (Q.running_elsewhere(self.conn, act.run, self.node_id)
                  if self.others_can_run() else [])
        local = {a.run.run_id: a for a in others}
        decision = overlap.decide(
            act.spec.concurrency,
            [overlap.Running(rid) for rid in local] + [overlap.Running(rid, node)
                                                       for rid, node in remote],
            run_id=act.run.run_id, manual=act.run.kind == "manual")
        for other in decision.replace:
            if other.node is None:
                self._apply(local[other.run_id], L.Stop("cancelled", decision.reason))
            else:
                self._propose(C.CancelRun(run_id=other.run_id, at=self.clock.now(),
                                          reason=decision.reason))
        return decision.skip

    def _open_gate(self, gate: Gate) -> None:
        early = gate.due - self.clock.now()
        if early > 0.0005:  # timers may fire a hair early: re-arm
            gate.handle = asyncio.get_running_loop().call_later(early, self._open_gate, gate)
            return
        left = gate.ready_by - self.clock.now()
        if left > 0 and any(not a.life.ready and a.life.stop_state is None
                            and not a.life.over for a in gate.runs):
            # A run's supervisor has not said spawned (or, switching to the
            # job's user, ready) yet: opened when it does, or at ready_by.
            gate.waiting = True
            gate.handle = asyncio.get_running_loop().call_later(left, self._open_gate, gate)
            return
        gate.handle.cancel()
        self.gates.pop(gate.due, None)
        now = self.clock.now()
        fenced = not self.lease()
        if fenced:
            log.warning("event=runs_fenced count=%d reason=\"no fresh lease from the leader "
                        "(cut off from the cluster?)\"", len(gate.runs))
        mine = self._still_mine([a.run for a in gate.runs])
        go = []
        for act in gate.runs:
            if act.life.over or act.life.stop_state is not None:
                continue
            if not mine.get(act.run.run_id, True):
                verdict = L.GateOpen(now, "final", "no longer assigned here")
            elif fenced:
                # Not heard from the leader within the lease: the leader may
                # already have given this run to another node. Nothing ran.
                verdict = L.GateOpen(now, "lost", (
                    f"node {self.node_id} had no fresh lease from the leader at the fire "
                    "time (cut off from the cluster?); not started here"))
            elif not act.life.pid:
                verdict = L.GateOpen(now, "failed", (
                    f"its supervisor did not start within {READY_WAIT:g}s of the fire time "
                    f"(node {self.node_id} overloaded?)"))
            else:
                skip = self._admit(act)  # sees the runs admitted before it as started
                verdict = L.GateOpen(now) if skip is None else L.GateOpen(now, "skipped", skip)
            self._apply(act, verdict)
            if act.life.phase is L.Phase.STARTED:
                go.append(act)
        try:
            # Two bytes per run: a run killed a moment ago cannot starve another.
            os.write(gate.wfd, b"\n" * (2 * len(go)))
        except OSError as exc:
            log.error("event=gate_write_failed error=%s", exc)
        os.close(gate.wfd)
        os.close(gate.rfd)
        loop = asyncio.get_running_loop()
        for act in go:
            self.started_count += 1
            run = act.run
            if act.spec.timeout:
                act.timers.append(loop.call_later(
                    act.spec.timeout, self._apply, act, L.Stop(
                        "timed_out", f"timed out after {act.spec.timeout:g}s (timeout)")))
            self._propose(C.RunStarted(run_id=run.run_id, token=run.token,
                                       node=self.node_id, pid=act.life.pid,
                                       started_at=act.life.started_at,
                                       log_path=act.log_path), act)
        if go:
            log.info("event=runs_started count=%d due=%s lateness_ms=%.1f jobs=%s",
                     len(go), iso_utc(round(gate.due, 3)), (now - gate.due) * 1000,
                     ",".join(a.run.job for a in go[:5]) + ("..." if len(go) > 5 else ""))

    def _maybe_open(self, act: ActiveRun) -> None:
        """A run of a gate that waits for its runs got ready (or ended)."""
        gate = act.gate
        if gate is not None and gate.waiting and gate.due in self.gates:
            if all(a.life.ready or a.life.stop_state is not None or a.life.over
                   for a in gate.runs):
                gate.waiting = False
                self._open_gate(gate)

    # -- what the supervisors say ---------------------------------------------
    def _on_spawned(self, key: str, sup_pid: int | None, pidfd: int | None,
                    error: str | None) -> None:
        act = self.by_key.get(key)
        if act is None or act.life.over:
            if pidfd is not None:
                os.close(pidfd)
            return
        if error is not None or pidfd is None or not sup_pid:
            log.error("event=spawn_failed job=%s run=%d error=\"%s\"", act.run.job,
                      act.run.run_id, error)
            self._apply(act, L.SpawnFailed(error or "no supervisor"))
            return
        act.sup_pid, act.sup_fd = sup_pid, pidfd
        asyncio.get_running_loop().add_reader(pidfd, self._supervisor_ended, act)

    def _on_event(self, key: str, ev: dict) -> None:
        act = self.by_key.get(key)
        if act is None:
            return  # a run already settled, or a key nobody made
        kind = ev["event"]
        if kind == "spawned":
            pid = ev.get("pid")
            if isinstance(pid, int) and not isinstance(pid, bool):
                self._apply(act, L.Spawned(pid))
        elif kind == "ready":
            self._apply(act, L.Ready())
        elif kind == "exited":
            status, written = ev.get("status"), ev.get("written")
            if isinstance(status, int) and not isinstance(status, bool):
                self._apply(act, L.Exited(status, written if isinstance(written, int) else 0,
                                          self.clock.now(), accepting=self.accepting))

    def _supervisor_ended(self, act: ActiveRun) -> None:
        """The run's supervisor is gone: its record says how the job ended
        (the datagram may still be on its way, or lost)."""
        self._close_supervisor(act)
        if act.life.over:
            return
        rec = records.read(os.path.join(self.runs_dir, act.key))
        now = self.clock.now()
        if rec is not None and rec.exited:
            self._apply(act, L.Exited(rec.status, rec.written, now, accepting=self.accepting))
            return
        reason = (f"its supervisor (pid {act.sup_pid}) ended unexpectedly (killed?); the "
                  "run's result is unknown")
        log.error("event=supervisor_lost job=%s run=%d pid=%d", act.run.job,
                  act.run.run_id, act.sup_pid)
        if rec is not None and rec.job_alive():
            # Only while its start time says the pid is still the job's.
            self._apply(act, L.Stop("lost", reason + "; its processes were stopped"))
        else:
            act.life = dataclasses.replace(act.life, stop_state="lost", stop_reason=reason)
        self._apply(act, L.Exited(None, rec.written if rec else 0, now,
                                  accepting=self.accepting))

    def _close_supervisor(self, act: ActiveRun) -> None:
        if act.sup_fd is not None:
            asyncio.get_running_loop().remove_reader(act.sup_fd)
            os.close(act.sup_fd)
            act.sup_fd = None

    @staticmethod
    def _signal_record(rec: records.Record, sig: int) -> None:
        """Signal the job's group of a record, if that process is still the one
        the supervisor started (its start time says so)."""
        if rec.job_alive() and rec.pid:
            try:
                os.killpg(rec.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # -- the run's life: events in, actions out ------------------------------------
    def _apply(self, act: ActiveRun, event: L.Event, note: str | None = None) -> None:
        was_ready = act.life.ready or act.life.stop_state is not None
        act.life, actions = L.step(act.life, event)
        for action in actions:
            self._perform(act, action, note)
        if act.life.over:
            self._forget(act)
        elif not was_ready and (act.life.ready or act.life.stop_state is not None):
            self._maybe_open(act)

    def _perform(self, act: ActiveRun, action: L.Action, note: str | None) -> None:
        if isinstance(action, L.KillWaiting):
            signal_tree(action.pid, [], signal.SIGKILL)
        elif isinstance(action, L.Terminate):
            self._terminate(act)
        elif isinstance(action, L.DropLog):
            try:
                os.unlink(act.log_path)
            except OSError:
                pass
        elif isinstance(action, L.Defer):
            log.info("event=run_deferred job=%s run=%d reason=\"daemon stopping before "
                     "the fire time; it starts when the daemon is back\"",
                     act.run.job, act.run.run_id)
        elif isinstance(action, L.Report):
            self._report_end(act, action, note)

    def _forget(self, act: ActiveRun) -> None:
        for timer in act.timers:
            timer.cancel()
        self.active.pop(act.run.run_id, None)
        self.by_key.pop(act.key, None)
        self._close_supervisor(act)
        if act.gate is not None:
            self._maybe_open(act)
        self._changed()

    def _report_end(self, act: ActiveRun, rep: L.Report, note: str | None = None) -> None:
        run = act.run
        finished = rep.finished_at if rep.finished_at is not None else self.clock.now()
        reason = rep.reason
        if rep.early:
            reason = self._not_started_reason(act, rep.status)
        if note:
            reason = f"{reason}; {note}" if reason else note
        if act.life.started:
            # Successes at debug level: at hundreds of runs a second an info
            # line each would run into journald's rate limit.
            log.log(logging.DEBUG if rep.state == "succeeded" else logging.INFO,
                    "event=run_finished job=%s run=%d state=%s exit_code=%s signal=%s "
                    "duration_s=%.3f", run.job, run.run_id, rep.state, rep.exit_code,
                    rep.signal, finished - act.life.started_at)
        else:
            log.warning("event=run_not_started job=%s run=%d state=%s reason=\"%s\"",
                        run.job, run.run_id, rep.state, reason)
        self._propose(C.RunFinished(
            run_id=run.run_id, token=run.token, node=self.node_id, state=rep.state,
            exit_code=rep.exit_code, signal=rep.signal, started_at=rep.started_at,
            finished_at=finished, log_path=act.log_path if rep.log_kept else None,
            reason=reason, not_started=rep.not_started,
            pid=(act.life.pid or None) if act.life.started else None),
            record=os.path.join(self.runs_dir, act.key))

    def _early_output(self, act: ActiveRun) -> str:
        """What a run that never started wrote (why it could not)."""
        try:
            return read_run_log(self.config.log_dir, act.run, 0, 4096).decode("utf-8", "replace")
        except (OSError, CronrdError):
            return ""

    def _not_started_reason(self, act: ActiveRun, status: int | None) -> str:
        rc = L.exit_code(status) if status is not None else -1
        said = [ln.strip() for ln in self._early_output(act).splitlines() if ln.strip()]
        if said and rc > 0:
            last = said[-1][:500]
            if last.startswith("cronrd: run not started: "):
                return last[len("cronrd: "):]
            return (f"run not started: preparing it as user {act.user} failed (status {rc}): "
                    f"{last}")
        return (f"the run's waiting process ended before the fire time (status {rc}); "
                "was it killed?")

    # -- stopping --------------------------------------------------------------
    def _terminate(self, act: ActiveRun) -> None:
        """SIGTERM the whole tree now, SIGKILL whatever is left after kill_grace."""
        pid = act.life.pid
        act.tree = snapshot_tree(pid) or act.tree
        log.info("event=run_stopping job=%s run=%d reason=\"%s\" processes=%d",
                 act.run.job, act.run.run_id, act.life.stop_reason, len(act.tree))
        signal_tree(pid, act.tree, signal.SIGTERM)
        # Kept apart from act.timers: it must still run after the job exits,
        # since grandchildren may outlive it.
        act.hard_kill = asyncio.get_running_loop().call_later(act.kill_grace,
                                                              self._kill_hard, act)

    def _kill_hard(self, act: ActiveRun) -> None:
        over, pid = act.life.over, act.life.pid
        procs = alive(act.tree + ([] if over else snapshot_tree(pid)))
        if procs or not over:
            log.info("event=run_killed job=%s run=%d processes=%d", act.run.job,
                     act.run.run_id, len(procs))
            signal_tree(pid, procs, signal.SIGKILL, leader_reaped=over)

    def cancel(self, run_id: int, reason: str) -> None:
        handle = self.timers.pop(run_id, None)
        if handle is not None:
            handle.cancel()
        act = self.active.get(run_id)
        if act is not None:
            self._apply(act, L.Stop("cancelled", reason))

    # -- reporting ---------------------------------------------------------------
    def _report_now(self, run: Run, state: str, at: float, *, reason: str,
                    log_path: str | None = None, exit_code: int | None = None) -> None:
        log.warning("event=run_not_started job=%s run=%d state=%s reason=\"%s\"",
                    run.job, run.run_id, state, reason)
        self._propose(C.RunFinished(
            run_id=run.run_id, token=run.token, node=self.node_id, state=state,
            exit_code=exit_code, signal=None, started_at=None, finished_at=at,
            log_path=log_path, reason=reason))

    def _propose(self, cmd: C.Command, act: ActiveRun | None = None,
                 item: int | None = None, record: str | None = None) -> None:
        if item is None and isinstance(cmd, C.RunFinished):
            # Results only (a lost start report is settled by reconcile): to
            # the outbox first, every result of this loop turn in one fsync,
            # then proposed.
            self._unwritten.append((cmd, act, record))
            if len(self._unwritten) == 1:
                asyncio.get_running_loop().call_soon(self._write_results)
            return
        self._start_report(cmd, act, item, record)

    def _write_results(self) -> None:
        batch, self._unwritten = self._unwritten, []
        try:
            items = self.outbox.add_many([cmd for cmd, _, _ in batch])
        except Exception as exc:  # still proposed; only the crash safety is lost
            log.error("event=outbox_write_failed count=%d error=\"%s\"", len(batch), exc)
            items = [None] * len(batch)
        for (cmd, act, record), item in zip(batch, items):
            self._start_report(cmd, act, item, record)

    def _start_report(self, cmd: C.Command, act: ActiveRun | None, item: int | None,
                      record: str | None) -> None:
        task = asyncio.get_running_loop().create_task(self._report(cmd, act, item, record))
        self.reports.add(task)
        task.add_done_callback(self.reports.discard)

    def replay_outbox(self) -> int:
        """Propose the reports a previous run of the daemon left unconfirmed."""
        items = self.outbox.pending()
        for item, cmd in items:
            if isinstance(cmd, C.RunFinished):
                self._reported.add(cmd.run_id)  # reconcile must not call it lost
            self._propose(cmd, None, item)
        return len(items)

    async def _report(self, cmd: C.Command, act: ActiveRun | None,
                      item: int | None = None, record: str | None = None) -> None:
        """Propose until committed: a result is never dropped (guarantee 4)."""
        while True:
            try:
                result = await self.proposer.propose(cmd)
            except Refused as exc:
                log.info("event=report_refused op=%s reason=\"%s\"", cmd.op, exc)
                break
            except CronrdError as exc:
                log.warning("event=report_retry op=%s error=\"%s\"", cmd.op, exc)
                await asyncio.sleep(REPORT_RETRY_DELAY)
                continue
            if act is not None and isinstance(result, dict) and result.get("cancel"):
                self._apply(act, L.Stop("cancelled", "cancelled while starting"))
            break
        if item is not None:
            self.outbox.done(item)
        if record is not None:  # the result is committed: the record has served
            records.remove(record)

    # -- restart reconciliation ---------------------------------------------------
    async def reconcile(self) -> dict:
        """Start the executor and settle the runs this node had in flight when
        the daemon last stopped.

        A run whose supervisor (runs/supervisor.py) still lives is *adopted*:
        it goes on, and is reported when it ends. One that ended meanwhile is
        reported with the exit status its supervisor recorded, as the same
        attempt. Only a run whose supervisor is gone too without a word (the
        host rebooted, it was killed) is ``lost``, and retried by the job's
        on_node_loss policy. Runs that never passed their gate start now (if
        the catch-up policy still wants them).

        Runs of daemons older than the supervisors have no record: their
        processes are stopped and the runs marked lost (kill and retry).
        """
        # Supervisors' datagrams are read from here on, but only between the
        # steps below (no await until the runs are registered).
        self.spawner.start()
        found = records.scan(self.runs_dir)
        legacy = records.first_supervised_start(self.runs_dir)
        orphans: dict | None = None
        counts = {"lost": 0, "resumed": 0, "adopted": 0, "collected": 0}
        waits = []
        runs = [r for r in Q.runs_for_node(self.conn, self.node_id, ("running", "assigned"))
                if r.run_id not in self._reported]
        self.accepting = True  # from here on, new assignments start as they come
        for run in runs:
            seen = [records.seen(r) for r in found.pop(run.run_id, [])]
            settle = R.decide(run, seen, legacy=legacy)
            if settle.kind != R.LEGACY:
                counts[self._settle(run, settle)] += 1
                continue
            if orphans is None:
                orphans = find_orphans(self.node_id)
            path = run_log_path(self.config.log_dir, run)
            procs = list(orphans.get(run.run_id, []))
            # The recorded pid counts only if that process is this run's
            # (its environment says so): a forged pid must not name a stranger.
            proc = run_process(run.pid, run.started_at, run_id=run.run_id,
                               node=self.node_id)
            if proc is not None and proc not in procs:
                procs.append(proc)
            if run.state == "assigned":
                waiting = [p for p in procs if at_gate(p)]
                if len(waiting) == len(procs):
                    # Never passed its gate (a shell of the old daemon may still
                    # be exiting): nothing ran, so it is not lost.
                    for p in waiting:
                        try:
                            p.kill()
                        except psutil.Error:
                            pass
                    self._start_again(run)
                    counts["resumed"] += 1
                    continue
            counts["lost"] += 1
            waits.append(self._settle_lost(run, procs, path))
        for recs in found.values():
            # Runs that are over (or not ours any more): their supervisors
            # have nothing left to tell. One still running keeps its record.
            for rec in recs:
                if not rec.supervisor_alive():
                    records.remove(rec.path)
        if waits:
            await asyncio.gather(*waits)
        return counts

    def _start_again(self, run: Run) -> str:
        """A run that never passed its gate: start it, unless the catch-up
        policy no longer wants it."""
        late = self._stale_reason(run)
        if late is not None:
            self._propose(C.RunFinished(
                run_id=run.run_id, token=run.token, node=self.node_id,
                state="skipped", exit_code=None, signal=None, started_at=None,
                finished_at=self.clock.now(), log_path=None, reason=late))
        else:
            self.schedule(run)
        return "resumed"

    def _settle(self, run: Run, settle: R.Settle) -> str:
        """Perform what recovery.decide said about ``run``; the count it adds to."""
        for other in settle.kill:
            self._signal_record(other.record, signal.SIGKILL)
        for path in settle.remove:
            records.remove(path)
        if settle.kind == R.START_AGAIN:
            return self._start_again(run)
        now = self.clock.now()
        if settle.seen is None:  # lost without ever starting here
            log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job,
                        run.run_id, settle.reason)
            self._propose(C.RunFinished(
                run_id=run.run_id, token=run.token, node=self.node_id, state="lost",
                exit_code=None, signal=None, started_at=run.started_at, finished_at=now,
                log_path=None, reason=settle.reason))
            return "lost"
        rec = settle.seen.record
        spec = self._job_spec(run.job)
        act = ActiveRun(run=run, spec=spec, key=rec.key,
                        log_path=run_log_path(self.config.log_dir, run),
                        kill_grace=spec.kill_grace if spec else 10.0,
                        life=L.Life(phase=L.Phase.STARTED, pid=rec.pid or 0, ready=True,
                                    started_at=rec.started_at or run.started_at or now),
                        sup_pid=rec.sup or 0)
        if settle.kind == R.ADOPT and not self._watch_supervisor(act, rec):
            # It ended between the look and the pidfd.
            settle = R.supervisor_gone(dataclasses.replace(settle.seen, supervisor_alive=False))
            for other in settle.kill:
                self._signal_record(other.record, signal.SIGKILL)
        if settle.kind == R.COLLECT:
            log.info("event=run_collected job=%s run=%d status=%d", run.job, run.run_id,
                     rec.status)
            self._apply(act, L.Exited(rec.status, rec.written, rec.exited_at or now),
                        note="ended while cronrd was restarting")
            return "collected"
        if settle.kind == R.LOST:
            log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job,
                        run.run_id, settle.reason)
            act.life = dataclasses.replace(act.life, stop_state="lost",
                                           stop_reason=settle.reason)
            self._apply(act, L.Exited(None, rec.written, now))
            return "lost"
        # Adopted: it goes on under its supervisor.
        self.active[run.run_id] = act
        self.by_key[act.key] = act
        if run.state == "assigned":  # it passed its gate as the last daemon stopped
            self._propose(C.RunStarted(run_id=run.run_id, token=run.token,
                                       node=self.node_id, pid=act.life.pid,
                                       started_at=act.life.started_at,
                                       log_path=act.log_path), act)
        if spec is not None and spec.timeout:
            left = spec.timeout - (now - act.life.started_at)
            act.timers.append(asyncio.get_running_loop().call_later(
                max(0.0, left), self._apply, act, L.Stop(
                    "timed_out", f"timed out after {spec.timeout:g}s (timeout)")))
        log.info("event=run_adopted job=%s run=%d pid=%d supervisor=%d", run.job,
                 run.run_id, act.life.pid, act.sup_pid)
        return "adopted"

    def _watch_supervisor(self, act: ActiveRun, rec: records.Record) -> bool:
        try:
            fd = os.pidfd_open(rec.sup)
        except OSError:
            return False
        if not rec.supervisor_alive():  # the pid was reused before we opened it
            os.close(fd)
            return False
        act.sup_fd = fd
        asyncio.get_running_loop().add_reader(fd, self._supervisor_ended, act)
        return True

    def _stale_reason(self, run: Run) -> str | None:
        """A run assigned before the daemon stopped and never started: does the
        job's catch-up policy still want it?"""
        if run.kind == "manual" or run.kind == "retry":
            return None
        spec = self._job_spec(run.job)
        if spec is None:
            return "job no longer defined"
        return stale_reason(spec.catchup, spec.catchup_window, run.due_at or 0,
                            self.clock.now())

    async def _settle_lost(self, run: Run, procs: list, path: str) -> None:
        spec = self._job_spec(run.job)
        reason = await stop_orphans(procs, run_id=run.run_id, node_id=self.node_id,
                                    grace=spec.kill_grace if spec else 10.0,
                                    monotonic=self.clock.monotonic)
        log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job, run.run_id,
                    reason)
        self._propose(C.RunFinished(
            run_id=run.run_id, token=run.token, node=self.node_id, state="lost",
            exit_code=None, signal=None, started_at=run.started_at,
            finished_at=self.clock.now(), log_path=path, reason=reason))

    # -- shutdown -----------------------------------------------------------------
    def _changed(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def _wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``done()`` (checked whenever a run ends), at most ``timeout``."""
        deadline = self.clock.monotonic() + timeout
        while not done():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return False
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                pass
        return True

    async def shutdown(self, mode: str, grace: float) -> None:
        """Stop starting runs. Running ones go on under their supervisors and
        are adopted by the next daemon (``detach``), or are waited for within
        ``grace`` (``wait``), or stopped (``stop``); those still running after
        ``grace`` in ``wait`` mode are stopped too."""
        self.accepting = False
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        for gate in list(self.gates.values()):
            # Closing the gate without a byte makes the waiting shells exit
            # unrun; their runs stay assigned and start when the daemon is back.
            gate.handle.cancel()
            os.close(gate.wfd)
            os.close(gate.rfd)
        self.gates.clear()
        if self.others_can_run():
            # Runs not started yet go back to the leader (they never ran
            # here), to be placed on a node that is up.
            now = self.clock.now()
            for run in Q.runs_for_node(self.conn, self.node_id, ("assigned",)):
                act = self.active.get(run.run_id)
                if act is None or not act.life.started:
                    self._propose(C.RunFinished(
                        run_id=run.run_id, token=run.token, node=self.node_id,
                        state="lost", exit_code=None, signal=None, started_at=None,
                        finished_at=now, log_path=None, not_started=True,
                        reason=f"node {self.node_id} stopped before the run was due; "
                               "placed on another node"))
        for act in list(self.active.values()):
            if not act.life.started and act.life.pid:
                signal_tree(act.life.pid, [], signal.SIGKILL)  # at its gate: nothing ran
        live = [a for a in self.active.values() if a.life.started]
        if live:
            log.info("event=shutdown_runs mode=%s running=%d grace_s=%g", mode, len(live), grace)
        if mode != "detach" and live:
            if mode == "stop":
                for act in live:
                    self._apply(act, L.Stop("lost", "stopped by daemon shutdown "
                                                    "(shutdown.mode: stop)"))
            all_done = lambda: all(a.life.over for a in live)  # noqa: E731
            if not await self._wait_until(all_done, grace):
                for act in live:
                    self._apply(act, L.Stop("lost", f"stopped by daemon shutdown after the "
                                                    f"{grace:g}s grace period"))
            await self._wait_until(all_done, max([a.kill_grace for a in live] + [0]) + 1)
        elif live:
            log.info("event=runs_detached count=%d reason=\"they go on under their "
                     "supervisors; the next start of the daemon adopts them\"", len(live))
        # Waiting shells that were killed: let their supervisors say so.
        await self._wait_until(lambda: all(a.life.started for a in self.active.values()), 2.0)
        if self._unwritten:  # results of this very turn: to the outbox now
            self._write_results()
        if self.reports:
            # They are in the durable outbox: give them a moment to commit,
            # and the next start proposes whatever is left.
            await asyncio.wait(list(self.reports), timeout=5.0)
            for task in list(self.reports):
                task.cancel()
        for act in list(self.active.values()):
            self._close_supervisor(act)
        self.spawner.close()

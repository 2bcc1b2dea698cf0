"""The executor: starts the runs assigned to this node and reports results.

Each run is forked in its own session and process group, with stdout and
stderr into one size-capped log file. Exits are noticed through a pidfd on
the event loop (no SIGCHLD handler, no polling). Timeouts and cancels signal
the whole tree: the process group plus every descendant found by psutil, so
grandchildren that left the group are stopped too.

What happens to a run on this node is written down in state/run_life.py;
the executor turns what it hears (effects, supervisors' datagrams, timers)
into that table's events and performs the actions it returns (``apply``).
Around it: gates.py (the runs due at one time, released together),
reports.py (the outbox and the proposals), restart.py (what a daemon stop
leaves running and the next start takes over).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import resource
import signal
from typing import Callable, cast

from ...config import Config
from ...decisions import overlap
from ...decisions.run_env import run_env
from ...jobspec import JobSpec
from ...schedule import iso_utc
from ...state import commands as C
from ...state import run_life as L
from ...state.effects import (CancelRequested, Effect, JobSourceMoved, JobsChanged, RunAssigned,
                              RunDone, RunMoved, RunStuck, StateRestored)
from ...model.run import Run
from ..clock import Clock
from . import records
from .active import ActiveRun, InFlight
from .cgroups import RunCgroups, oom_reason
from .executors import Executors
from .claims import Claims
from .gates import CLAIM_WAIT, READY_WAIT, Gate, Gates
from .launch import Identities
from .logs import prune_logs, remove_run_log
from .outbox import Outbox
from .processes import alive, signal_tree, snapshot_tree
from .reports import Reporter, finished, run_ended
from .spawner import Spawner
from .starting import NotStarted, over_cap, spawn
from .view import ReplicatedView, StateView
from ..tasks import wait_within

log = logging.getLogger("cronrd.executor")

PRESPAWN = 1.0    # seconds before the fire time a run's supervisor is asked for


class Executor:
    def __init__(self, config: Config, proposer, conn, clock: Clock, *,
                 fence: Callable[[], str | None], outbox: Outbox,
                 others_can_run: Callable[[], bool] = lambda: False, claims: bool = False,
                 view: StateView | None = None):
        self.config = config
        self.node_id = config.node_id
        # Why this node may not start a run now (no fresh lease from the
        # leader, its clock off), or None. Is there another member to hand unstarted runs to when this daemon
        # stops? Results go to the durable outbox first (reports.py).
        self.fence = fence
        self.others_can_run = others_can_run
        self.reporter = Reporter(proposer, outbox)
        # What it asks of the state (view.py): the replicated state on a
        # member, the leader's assignments on a worker agent.
        self.view: StateView = view if view is not None else ReplicatedView(conn)
        self.clock = clock
        self.timers: dict[int, asyncio.TimerHandle] = {}
        # The runs held here (read-only views: change them through flight).
        self.flight = InFlight()
        self.active: dict[int, ActiveRun] = self.flight.by_id
        self.by_key: dict[str, ActiveRun] = self.flight.by_key
        # Each run gets a supervisor process of its own (runs/supervisor.py),
        # which outlives the daemon; its records live here.
        self.runs_dir = os.path.join(config.data_dir, "runs")
        self.spawner = Spawner(self.runs_dir, self._on_spawned, self._on_event)
        # In a cluster a run starts only once the log holds this node's claim
        # on it (claims.py); on one host nobody else could start it.
        self.claims = Claims(self.node_id, proposer, clock, self.apply) if claims else None
        self.gates = (Gates(clock, self._release, self._claim_gate, self.claims.lead,
                            fence=self.fence)
                      if self.claims else Gates(clock, self._release, fence=self.fence))
        self._waiters: list[asyncio.Future] = []  # woken when a run ends
        # False until reconcile(): runs assigned meanwhile (a cluster applies
        # entries while the daemon starts) are settled there, once, rather
        # than started and then mistaken for leftovers of the last run.
        self.accepting = False
        self.started_count = 0
        self._specs: dict[str, JobSpec | None] = {}
        self.identities = Identities(config.node_id)
        self._deferred: set[int] = set()  # over max_running when prepared: retried when due
        # The soft open-file limit jobs get (the daemon raises its own at start).
        self.job_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.cgroups: RunCgroups | None = None  # setup_cgroups()
        self.cgroups_why = "not set up"
        # What runs a run's command here: local, and container with podman.
        self.executors = Executors(config.node_id)

    def setup_cgroups(self) -> None:
        """Give runs with limits a cgroup each where the host allows it
        (cgroups.py). The daemon calls it once, at its start."""
        self.cgroups, why = RunCgroups.setup()
        self.cgroups_why = why
        if self.cgroups is None:
            log.info("event=run_cgroups enabled=false reason=\"%s\" action=\"limits: "
                     "memory, tasks and open_files as rlimits; cpu not enforced\"", why)
            return
        try:
            keep = set(os.listdir(self.runs_dir))  # runs with records may still run
        except OSError:
            keep = set()
        self.cgroups.prune(keep)
        log.info("event=run_cgroups enabled=true root=%s controllers=%s", self.cgroups.root,
                 ",".join(sorted(self.cgroups.controllers)))

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

    def job_spec(self, name: str) -> JobSpec | None:
        """The definition in force of job ``name`` (cached until it changes)."""
        if name not in self._specs:
            self._specs[name] = self.view.job_spec(name)
        return self._specs[name]

    # -- the daemon's start and stop (restart.py) ----------------------------------
    def replay_outbox(self) -> int:
        """Propose the reports a previous run of the daemon left unconfirmed."""
        return self.reporter.replay()

    # -- effects from the state machine -------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        for eff in effects:
            try:
                self._on_effect(eff)
            except Exception:  # one bad run must not cost the others their effects
                log.exception("event=effect_failed kind=%s", eff.kind)

    def _on_effect(self, eff: Effect) -> None:
        if isinstance(eff, (JobsChanged, JobSourceMoved)):  # its spec names its file
            if eff.job is not None:  # (popping None is a no-op)
                self._specs.pop(eff.job, None)
            return
        if isinstance(eff, StateRestored):  # a snapshot replaced the state
            self._specs.clear()
            for assigned in self.view.runs_for_node(self.node_id, ("assigned",)):
                self.schedule(assigned)
            return
        run = eff.run
        if run is None or run.node != self.node_id:
            return
        if isinstance(eff, RunAssigned):
            self.schedule(run)
        elif isinstance(eff, CancelRequested):
            self.cancel(run.run_id, run.reason or "cancelled")
        elif isinstance(eff, RunStuck):
            # Ended timed_out by the leader (heartbeat_timeout): stop its processes.
            act = self.active.get(run.run_id)
            if act is not None:
                self.apply(act, L.Stop("timed_out", run.reason or "heartbeat_timeout"))
        elif isinstance(eff, RunDone):
            # Final already (cancelled, job removed...) while it waited at its
            # gate: it must not start, and it is not reported again.
            self._unwait(run.run_id, L.Stop("final", run.reason or "final"))
        elif isinstance(eff, RunMoved):
            # The leader gave it to another node: this node did not claim it
            # in time. Whatever waits for it here goes, unreported.
            self._unwait(run.run_id, L.ClaimDecided(False, "moved to another node: not "
                                                            "claimed in time"))

    def _unwait(self, run_id: int, event: L.Event) -> None:
        """A run that must not start here any more: no longer prepared, and
        whatever waits at its gate goes (``event``)."""
        handle = self.timers.pop(run_id, None)
        if handle is not None:
            handle.cancel()
        act = self.active.get(run_id)
        if act is not None and not act.life.started:
            self.apply(act, event)

    def schedule(self, run: Run) -> None:
        """Prepare ``run`` PRESPAWN seconds before it is due (at once if sooner)."""
        if not self.accepting or run.run_id in self.timers or run.run_id in self.active:
            return
        delay = (run.due_at or 0) - PRESPAWN - self.clock.now()
        if delay <= 0:
            self.prepare(run)
        else:
            self.timers[run.run_id] = asyncio.get_running_loop().call_later(
                delay, self._prepare_timer, run)

    def _prepare_timer(self, run: Run) -> None:
        self.timers.pop(run.run_id, None)
        if self.accepting and self._still_mine([run]).get(run.run_id, True):
            self.prepare(run)

    def _still_mine(self, runs: list[Run]) -> dict[int, bool]:
        """Is each run still assigned here, with the same token? (A snapshot
        from the leader may have replaced the state meanwhile, without the
        effects that would have told us.)"""
        now = self.view.run_assignments([r.run_id for r in runs])
        return {r.run_id: now.get(r.run_id) == ("assigned", self.node_id, r.token)
                for r in runs}

    # -- starting -------------------------------------------------------------
    def prepare(self, run: Run) -> None:
        """Spawn the run's process, waiting at the gate of its due time."""
        spec = self.job_spec(run.job)
        now = self.clock.now()
        if spec is None:
            self._not_started(run, "cancelled", now, reason="job no longer defined")
            return
        refused = self.view.refused_source(self.node_id, self.config.accept_jobs_from, run.job)
        if refused is not None:
            self._not_started(run, "skipped", now, reason=refused)
            return
        over = over_cap(self.flight, run, spec, self.node_id,
                        self.config.max_running)
        if over is not None:
            due = run.due_at or now
            if due - now > 0.001 and run.run_id not in self._deferred:
                # Runs may end before the fire time: decide then.
                self._deferred.add(run.run_id)
                self.timers[run.run_id] = asyncio.get_running_loop().call_later(
                    due - now, self._prepare_timer, run)
                return
            self._deferred.discard(run.run_id)
            self._not_started(run, "skipped", now, reason=over)
            return
        self._deferred.discard(run.run_id)
        workflow = run_env(run, spec, self.config.timezone, *self.view.inputs(run))
        # its token for checkpoints and heartbeats, and a retry's last checkpoint
        extra, secret = self.view.attempt_env(run, self.config.socket)
        workflow.update(extra)
        act = spawn(run, spec, now, self.config.log_dir, self.runs_dir, node_id=self.node_id,
                    identities=self.identities, job_nofile=self.job_nofile,
                    gates=self.gates, spawner=self.spawner, claimed=self.claims is None,
                    cgroups=self.cgroups, workflow=workflow, executors=self.executors)
        if isinstance(act, NotStarted):
            self._not_started(run, "failed", now, reason=act.reason, log_path=act.log_path,
                              exit_code=act.exit_code)
            return
        act.secret = secret
        assert act.gate is not None  # spawn() put it at its gate
        self.flight.add(act)
        act.gate.runs.append(act)
        if self.claims is not None and act.gate.claiming:
            self._claim_gate(act.gate, [act])  # its gate's claims were asked for already

    def _claim_gate(self, gate: Gate, acts: list[ActiveRun] | None = None) -> None:
        """Claim the runs of ``gate`` (or just ``acts``), unless this node may
        not start runs now: then the leader moves them to another node,
        sooner than a claim won and given back."""
        fenced = self.fence()
        if fenced is not None:
            log.warning("event=claims_withheld count=%d reason=\"node %s %s\"",
                        len(acts if acts is not None else gate.runs), self.node_id, fenced)
            return
        assert self.claims is not None  # a cluster's gates only claim
        self.claims.want(acts if acts is not None else gate.runs)

    def _admit(self, act: ActiveRun) -> str | None:
        """The overlap policy, decided at the fire time against the runs of the
        same job that are running here, and (in a cluster) those the
        replicated state shows running on other nodes."""
        assert act.spec is not None  # at its gate: prepared with its spec
        others = [a for a in self.flight.of_job(act.run.job)
                  if a is not act and a.life.started]
        # Alone, nothing runs elsewhere: no query on the path to the gate.
        remote = (self.view.running_elsewhere(act.run, self.node_id)
                  if self.others_can_run() else [])
        local = {a.run.run_id: a for a in others}
        decision = overlap.decide(
            act.spec.concurrency,
            [overlap.Running(rid) for rid in local] + [overlap.Running(rid, node)
                                                       for rid, node in remote],
            run_id=act.run.run_id,
            # a backfill or rerun run was released when nothing of the job ran
            # (state/backfill.py): it queues, it is never skipped at its gate
            manual=act.run.kind in ("manual", "backfill", "rerun"))
        for other in decision.replace:
            if other.node is None:
                self.apply(local[other.run_id], L.Stop("cancelled", decision.reason))
            else:
                self.reporter.propose(C.CancelRun(run_id=other.run_id, at=self.clock.now(),
                                                  reason=decision.reason))
        return decision.skip

    def _release(self, gate: Gate) -> None:
        """The gate's time has come: which of its runs go, and let them through."""
        now = self.clock.now()
        fenced = self.fence()
        if fenced is not None:
            log.warning("event=runs_fenced count=%d reason=\"node %s %s\"", len(gate.runs),
                        self.node_id, fenced)
        mine = self._still_mine([a.run for a in gate.runs])
        go = []
        for act in gate.runs:
            if act.life.over or act.life.stop_state is not None:
                continue
            if not mine.get(act.run.run_id, True):
                verdict = L.GateOpen(now, "final", "no longer assigned here")
            elif fenced is not None:
                # Not heard from the leader within the lease (the leader may
                # already have given this run to another node), or this node's
                # clock is off (it would start the run early or late). Nothing
                # ran: the run is retried elsewhere.
                verdict = L.GateOpen(now, "lost", f"node {self.node_id} {fenced}; not started "
                                                  "here")
            elif act.life.claim != "won":
                # Its claim is not committed (no leader reachable?): it must
                # not start, and whoever holds it next runs it.
                verdict = L.GateOpen(now, "lost", (
                    f"node {self.node_id} could not get its claim on the run committed "
                    f"within {CLAIM_WAIT:g}s of the fire time (no leader reachable?); not "
                    "started here"))
            elif not act.life.pid:
                verdict = L.GateOpen(now, "failed", (
                    f"its supervisor did not start within {READY_WAIT:g}s of the fire time "
                    f"(node {self.node_id} overloaded?)"))
            else:
                skip = self._admit(act)  # sees the runs admitted before it as started
                verdict = L.GateOpen(now) if skip is None else L.GateOpen(now, "skipped", skip)
            self.apply(act, verdict)
            if act.life.phase is L.Phase.STARTED:
                go.append(act)
        gate.open(len(go))
        for act in go:
            self.started_count += 1
            assert act.spec is not None  # at its gate: prepared with its spec
            if act.spec.timeout:
                self.arm_timeout(act, act.spec.timeout)
            self._report_started(act)
        if go:
            log.info("event=runs_started count=%d due=%s lateness_ms=%.1f jobs=%s",
                     len(go), iso_utc(round(gate.due, 3)), (now - gate.due) * 1000,
                     ",".join(a.run.job for a in go[:5]) + ("..." if len(go) > 5 else ""))

    def arm_timeout(self, act: ActiveRun, left: float) -> None:
        """Stop the run when its job's timeout is up, ``left`` seconds from now."""
        assert act.spec is not None  # (a job with a timeout)
        act.timers.append(asyncio.get_running_loop().call_later(
            max(0.0, left), self.apply, act, L.Stop(
                "timed_out", f"timed out after {act.spec.timeout:g}s (timeout)")))

    def adopt(self, act: ActiveRun, *, report_start: bool) -> None:
        """A run a previous daemon started goes on here (restart.py)."""
        self.flight.add(act)
        if report_start:
            self._report_started(act)

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
            self.apply(act, L.SpawnFailed(error or "no supervisor"))
            return
        act.sup_pid = sup_pid
        self.watch_supervisor(act, pidfd)

    def watch_supervisor(self, act: ActiveRun, pidfd: int) -> None:
        """Notice the end of the run's supervisor (``pidfd``, now the run's)."""
        act.sup_fd = pidfd
        asyncio.get_running_loop().add_reader(pidfd, self._supervisor_ended, act)

    def _on_event(self, key: str, ev: dict) -> None:
        act = self.by_key.get(key)
        if act is None:
            return  # a run already settled, or a key nobody made
        kind = ev["event"]
        if kind == "spawned":
            pid = ev.get("pid")
            if isinstance(pid, int) and not isinstance(pid, bool):
                self.apply(act, L.Spawned(pid))
        elif kind == "ready":
            self.apply(act, L.Ready())
        elif kind == "exited":
            status, written = ev.get("status"), ev.get("written")
            if isinstance(status, int) and not isinstance(status, bool):
                self.apply(act, L.Exited(status, written if isinstance(written, int) else 0,
                                         self.clock.now(), accepting=self.accepting))

    def _supervisor_ended(self, act: ActiveRun) -> None:
        """The run's supervisor is gone: its record says how the job ended
        (the datagram may still be on its way, or lost)."""
        self.close_supervisor(act)
        if act.life.over:
            return
        rec = records.read(os.path.join(self.runs_dir, act.key))
        now = self.clock.now()
        if rec is not None and rec.exited:
            self.apply(act, L.Exited(rec.status, rec.written, now, accepting=self.accepting))
            return
        reason = (f"its supervisor (pid {act.sup_pid}) ended unexpectedly (killed?); the "
                  "run's result is unknown")
        log.error("event=supervisor_lost job=%s run=%d pid=%d", act.run.job,
                  act.run.run_id, act.sup_pid)
        if rec is not None and rec.job_alive():
            # Only while its start time says the pid is still the job's.
            self.apply(act, L.Stop("lost", reason + "; its processes were stopped"))
        else:
            act.life = dataclasses.replace(act.life, stop_state="lost", stop_reason=reason)
        self.apply(act, L.Exited(None, rec.written if rec else 0, now,
                                 accepting=self.accepting))

    def close_supervisor(self, act: ActiveRun) -> None:
        if act.sup_fd is not None:
            asyncio.get_running_loop().remove_reader(act.sup_fd)
            os.close(act.sup_fd)
            act.sup_fd = None

    # -- the run's life: events in, actions out ------------------------------------
    def apply(self, act: ActiveRun, event: L.Event, note: str | None = None) -> None:
        """Step the run's life (run_life.step) and perform what it asks."""
        was_ready = act.life.at_gate_ready
        act.life, actions = L.step(act.life, event)
        self.flight.recount(act)
        for action in actions:
            self._perform(act, action, note)
        if act.life.over:
            self._forget(act)
        elif not was_ready and act.life.at_gate_ready:
            self.gates.settled(act)

    def _perform(self, act: ActiveRun, action: L.Action, note: str | None) -> None:
        if isinstance(action, L.KillWaiting):
            signal_tree(action.pid, [], signal.SIGKILL)
        elif isinstance(action, L.Terminate):
            self._terminate(act)
        elif isinstance(action, L.DropLog):
            try:
                remove_run_log(act.log_path)
            except OSError:
                pass
        elif isinstance(action, L.Defer):
            log.info("event=run_deferred job=%s run=%d reason=\"daemon stopping before "
                     "the fire time; it starts when the daemon is back\"",
                     act.run.job, act.run.run_id)
        elif isinstance(action, L.Report):
            if self.cgroups is not None:
                note = self._cgroup_note(act, note)
            self.reporter.propose(run_ended(act, action, self.node_id, self.clock.now(),
                                            self.config.log_dir, note),
                                  record=os.path.join(self.runs_dir, act.key))

    def _cgroup_note(self, act: ActiveRun, note: str | None) -> str | None:
        """A run's end, in its cgroup: did the memory limit kill any of its
        processes (then say so), and the cgroup goes."""
        assert self.cgroups is not None  # asked only with cgroups
        killed = self.cgroups.oom_killed(act.key)
        self.cgroups.remove(act.key)
        if not killed:
            return note
        lim = act.spec.limits if act.spec is not None else None
        said = oom_reason(killed, lim.memory if lim is not None else None)
        return f"{note}; {said}" if note else said

    def _forget(self, act: ActiveRun) -> None:
        if act.executor != "local":   # a container that outlives its client goes
            self.executors.named(act.executor).ended(act.key)
        for timer in act.timers:
            timer.cancel()
        self.flight.remove(act)
        self.close_supervisor(act)
        if act.gate is not None:
            self.gates.settled(act)
        self._changed()

    # -- stopping --------------------------------------------------------------
    def _terminate(self, act: ActiveRun) -> None:
        """SIGTERM the whole tree now, SIGKILL whatever is left after kill_grace."""
        pid = act.life.pid
        act.tree = snapshot_tree(pid) or act.tree
        log.info("event=run_stopping job=%s run=%d reason=\"%s\" processes=%d executor=%s",
                 act.run.job, act.run.run_id, act.life.stop_reason, len(act.tree),
                 act.executor)
        if not self.executors.named(act.executor).stop(act.key, act.kill_grace):
            # (a container's podman client passes the signal on to it)
            signal_tree(pid, act.tree, signal.SIGTERM)
        # Kept apart from act.timers: it must still run after the job exits,
        # since grandchildren may outlive it.
        act.hard_kill = asyncio.get_running_loop().call_later(act.kill_grace,
                                                              self._kill_hard, act)

    def _kill_hard(self, act: ActiveRun) -> None:
        over, pid = act.life.over, act.life.pid
        procs = alive(act.tree + ([] if over else snapshot_tree(pid)))
        if not over:
            self.executors.named(act.executor).kill(act.key)
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
            self.apply(act, L.Stop("cancelled", reason))

    # -- reporting (reports.py) ----------------------------------------------------
    def _not_started(self, run: Run, state: str, at: float, *, reason: str,
                     log_path: str | None = None, exit_code: int | None = None) -> None:
        log.warning("event=run_not_started job=%s run=%d state=%s reason=\"%s\"",
                    run.job, run.run_id, state, reason)
        self.reporter.propose(finished(run, self.node_id, state, at, reason=reason,
                                       log_path=log_path, exit_code=exit_code))

    def _report_started(self, act: ActiveRun) -> None:
        def on_result(result) -> None:
            if isinstance(result, dict) and result.get("cancel"):
                self.apply(act, L.Stop("cancelled", "cancelled while starting"))
        run = act.run
        # (assigned here, so it has its token; started, so its life has its start)
        self.reporter.propose(C.RunStarted(run_id=run.run_id, token=cast(int, run.token),
                                           node=self.node_id, pid=act.life.pid,
                                           started_at=cast(float, act.life.started_at),
                                           log_path=act.log_path, secret=act.secret),
                              on_result=on_result)

    # -- waiting for runs to end -----------------------------------------------------
    def _changed(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``done()`` (checked whenever a run ends), at most ``timeout``."""
        deadline = self.clock.monotonic() + timeout
        while not done():
            left = deadline - self.clock.monotonic()
            if left <= 0:
                return False
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await wait_within(fut, left)
            except asyncio.TimeoutError:
                pass
        return True

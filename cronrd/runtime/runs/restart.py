"""A daemon restart, seen from its runs: what a stop leaves running, and
how the next start takes it over (recovery.py decides, this module performs).

``shutdown``: runs not started yet stay assigned (or, with another member up,
go back to the leader); running ones go on under their supervisors
(``detach``), are waited for (``wait``) or stopped (``stop``).

``reconcile``, at start: a run whose supervisor (runs/supervisor.py) still
lives is *adopted*: it goes on, and is reported when it ends. One that ended
meanwhile is reported with the exit status its supervisor recorded, as the
same attempt. Only a run whose supervisor is gone too without a word (the
host rebooted, it was killed) is ``lost``, and retried by the job's
on_node_loss policy. Runs that never passed their gate start now (if the
catch-up policy still wants them). Runs of daemons older than the
supervisors have no record: their processes are stopped and the runs marked
lost (kill and retry).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from typing import TYPE_CHECKING

import psutil

from ...schedule.catchup import stale_reason
from ...state import run_life as L
from ...model.run import Run
from . import records
from . import recovery as R
from .active import ActiveRun
from .executors import started_with
from .legacy import at_gate, find_orphans, stop_orphans
from .logs import run_log_path
from .processes import run_process, run_secret, signal_tree
from .reports import finished

if TYPE_CHECKING:
    from .executor import Executor

log = logging.getLogger("cronrd.executor")


async def reconcile(ex: "Executor") -> dict:
    """Start ``ex`` and settle its node's runs; how many went which way."""
    # Supervisors' datagrams are read from here on, but only between the
    # steps below (no await until the runs are registered).
    ex.spawner.start()
    found = records.scan(ex.runs_dir)
    legacy = records.first_supervised_start(ex.runs_dir)
    orphans: dict | None = None
    counts = {"lost": 0, "resumed": 0, "adopted": 0, "collected": 0}
    waits = []
    runs = [r for r in ex.view.runs_for_node(ex.node_id, ("running", "assigned"))
            if r.run_id not in ex.reporter.replayed]
    ex.accepting = True  # from here on, new assignments start as they come
    for run in runs:
        seen = [records.seen(r) for r in found.pop(run.run_id, [])]
        settle = R.decide(run, seen, legacy=legacy)
        if settle.kind != R.LEGACY:
            counts[_settle(ex, run, settle)] += 1
            continue
        if orphans is None:
            orphans = find_orphans(ex.node_id)
        path = run_log_path(ex.config.log_dir, run)
        procs = list(orphans.get(run.run_id, []))
        # The recorded pid counts only if that process is this run's
        # (its environment says so): a forged pid must not name a stranger.
        proc = run_process(run.pid, run.started_at, run_id=run.run_id, node=ex.node_id)
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
                _start_again(ex, run)
                counts["resumed"] += 1
                continue
        counts["lost"] += 1
        waits.append(_settle_lost(ex, run, procs, path))
    for recs in found.values():
        # Runs that are over (or not ours any more): their supervisors
        # have nothing left to tell. One still running keeps its record.
        for rec in recs:
            if not rec.supervisor_alive():
                records.remove(rec.path)
    # What no record accounts for any more (a container of a run whose
    # supervisor is gone): removed, off the event loop.
    def has_record(key: str) -> bool:
        return os.path.exists(os.path.join(ex.runs_dir, key))
    sweeps = [asyncio.to_thread(executor.sweep, ex.node_id, has_record)
              for executor in ex.executors.by_name.values()]
    if waits or sweeps:
        await asyncio.gather(*waits, *sweeps)
    return counts


def _start_again(ex: "Executor", run: Run) -> str:
    """A run that never passed its gate: start it, unless the catch-up
    policy no longer wants it."""
    late = _stale_reason(ex, run)
    if late is not None:
        ex.reporter.propose(finished(run, ex.node_id, "skipped", ex.clock.now(), reason=late))
    else:
        ex.schedule(run)
    return "resumed"


def _settle(ex: "Executor", run: Run, settle: R.Settle) -> str:
    """Perform what recovery.decide said about ``run``; the count it adds to."""
    for other in settle.kill:
        _signal_record(other.record, signal.SIGKILL)
        _remove_container(ex, other.record)
    for path in settle.remove:
        records.remove(path)
    if settle.kind == R.START_AGAIN:
        return _start_again(ex, run)
    now = ex.clock.now()
    if settle.seen is None:  # lost without ever starting here
        log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job, run.run_id,
                    settle.reason)
        ex.reporter.propose(finished(run, ex.node_id, "lost", now, reason=settle.reason,
                                     started_at=run.started_at))
        return "lost"
    rec = settle.seen.record
    spec = ex.job_spec(run.job)
    act = ActiveRun(run=run, spec=spec, key=rec.key,
                    log_path=run_log_path(ex.config.log_dir, run),
                    kill_grace=spec.kill_grace if spec else 10.0,
                    # what it was started with (its definition may have changed since)
                    executor=started_with(rec.pid, rec.key) if rec.job_alive() else "local",
                    life=L.Life(phase=L.Phase.STARTED, pid=rec.pid or 0, ready=True,
                                started_at=rec.started_at or run.started_at or now),
                    sup_pid=rec.sup or 0)
    if settle.kind == R.ADOPT and not _watch_supervisor(ex, act, rec):
        # It ended between the look and the pidfd.
        settle = R.supervisor_gone(dataclasses.replace(settle.seen, supervisor_alive=False))
        for other in settle.kill:
            _signal_record(other.record, signal.SIGKILL)
    if settle.kind == R.COLLECT:
        log.info("event=run_collected job=%s run=%d status=%d", run.job, run.run_id,
                 rec.status)
        ex.apply(act, L.Exited(rec.status, rec.written, rec.exited_at or now),
                 note="ended while cronrd was restarting")
        return "collected"
    if settle.kind == R.LOST:
        # Its container, if it had one, goes before the loss is reported: a
        # retry may run elsewhere, and the job must not run twice.
        _remove_container(ex, rec)
        log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job, run.run_id,
                    settle.reason)
        act.life = dataclasses.replace(act.life, stop_state="lost", stop_reason=settle.reason)
        ex.apply(act, L.Exited(None, rec.written, now))
        return "lost"
    # Adopted: it goes on under its supervisor.
    # Still assigned: it passed its gate as the last daemon stopped; its
    # start is reported now, with its token's hash read from its process.
    if run.state == "assigned":
        act.secret = run_secret(run_process(rec.pid, None, run_id=run.run_id,
                                            node=ex.node_id), run.run_id, ex.node_id)
    ex.adopt(act, report_start=run.state == "assigned")
    if spec is not None and spec.timeout:
        assert act.life.started_at is not None  # given above
        ex.arm_timeout(act, spec.timeout - (now - act.life.started_at))
    log.info("event=run_adopted job=%s run=%d pid=%d supervisor=%d", run.job, run.run_id,
             act.life.pid, act.sup_pid)
    return "adopted"


def _remove_container(ex: "Executor", rec: records.Record) -> None:
    """A run settled without its supervisor: the container named after it
    (whatever its process says, which may be gone) is removed now."""
    container = ex.executors.by_name.get("container")
    if container is not None:
        container.remove_now(rec.key)


def _watch_supervisor(ex: "Executor", act: ActiveRun, rec: records.Record) -> bool:
    assert rec.sup is not None  # adopted: its supervisor is alive (recovery.py)
    try:
        fd = os.pidfd_open(rec.sup)
    except OSError:
        return False
    if not rec.supervisor_alive():  # the pid was reused before we opened it
        os.close(fd)
        return False
    ex.watch_supervisor(act, fd)
    return True


def _signal_record(rec: records.Record, sig: int) -> None:
    """Signal the job's group of a record, if that process is still the one
    the supervisor started (its start time says so)."""
    if rec.job_alive() and rec.pid:
        try:
            os.killpg(rec.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stale_reason(ex: "Executor", run: Run) -> str | None:
    """A run assigned before the daemon stopped and never started: does the
    job's catch-up policy still want it?"""
    if run.kind in ("manual", "retry", "backfill", "rerun"):
        return None
    spec = ex.job_spec(run.job)
    if spec is None:
        return "job no longer defined"
    return stale_reason(spec.catchup, spec.catchup_window, run.due_at or 0, ex.clock.now())


async def _settle_lost(ex: "Executor", run: Run, procs: list, path: str) -> None:
    spec = ex.job_spec(run.job)
    reason = await stop_orphans(procs, run_id=run.run_id, node_id=ex.node_id,
                                grace=spec.kill_grace if spec else 10.0,
                                monotonic=ex.clock.monotonic)
    log.warning("event=run_lost job=%s run=%d reason=\"%s\"", run.job, run.run_id, reason)
    ex.reporter.propose(finished(run, ex.node_id, "lost", ex.clock.now(), reason=reason,
                                 started_at=run.started_at, log_path=path))


async def shutdown(ex: "Executor", mode: str, grace: float) -> None:
    """Stop starting runs. Running ones go on under their supervisors and
    are adopted by the next daemon (``detach``), or are waited for within
    ``grace`` (``wait``), or stopped (``stop``); those still running after
    ``grace`` in ``wait`` mode are stopped too."""
    ex.accepting = False
    for handle in ex.timers.values():
        handle.cancel()
    ex.timers.clear()
    ex.gates.close_all()
    if ex.others_can_run():
        # Runs not started yet go back to the leader (they never ran
        # here), to be placed on a node that is up.
        now = ex.clock.now()
        for run in ex.view.runs_for_node(ex.node_id, ("assigned",)):
            act = ex.active.get(run.run_id)
            if act is None or not act.life.started:
                ex.reporter.propose(finished(
                    run, ex.node_id, "lost", now, not_started=True,
                    reason=f"node {ex.node_id} stopped before the run was due; "
                           "placed on another node"))
    for act in list(ex.active.values()):
        if not act.life.started and act.life.pid:
            signal_tree(act.life.pid, [], signal.SIGKILL)  # at its gate: nothing ran
    live = [a for a in ex.active.values() if a.life.started]
    if live:
        log.info("event=shutdown_runs mode=%s running=%d grace_s=%g", mode, len(live), grace)
    if mode != "detach" and live:
        if mode == "stop":
            for act in live:
                ex.apply(act, L.Stop("lost", "stopped by daemon shutdown "
                                             "(shutdown.mode: stop)"))
        all_done = lambda: all(a.life.over for a in live)  # noqa: E731
        if not await ex.wait_until(all_done, grace):
            for act in live:
                ex.apply(act, L.Stop("lost", f"stopped by daemon shutdown after the "
                                             f"{grace:g}s grace period"))
        await ex.wait_until(all_done, max([a.kill_grace for a in live] + [0]) + 1)
    elif live:
        log.info("event=runs_detached count=%d reason=\"they go on under their "
                 "supervisors; the next start of the daemon adopts them\"", len(live))
    # Waiting shells that were killed: let their supervisors say so.
    await ex.wait_until(lambda: all(a.life.started for a in ex.active.values()), 2.0)
    # Results of this very turn to the outbox now; those in flight get a
    # moment to commit, and the next start proposes whatever is left.
    await ex.reporter.drain(timeout=5.0)
    for act in list(ex.active.values()):
        ex.close_supervisor(act)
    ex.spawner.close()

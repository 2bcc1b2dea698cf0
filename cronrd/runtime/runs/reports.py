"""A node's reports about its runs: written to the durable outbox, then
proposed until the cluster has committed or refused them (guarantee 5: no
result is lost).

Every result of one loop turn goes to the outbox in one transaction (one
fsync) and is then proposed; a start report is proposed at once (a lost one
is settled by the next start's reconcile). A committed result's supervisor
record has served and is removed. Reports a previous daemon left in the
outbox are proposed again at start (``replay``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Sequence, cast

from ...errors import CronrdError
from ...state import commands as C
from ...state import run_life as L
from ...errors import Refused
from ...model.run import Run
from . import records
from .active import ActiveRun
from .logs import read_run_log
from .outbox import Outbox

log = logging.getLogger("cronrd.executor")

REPORT_RETRY_DELAY = 0.5


def finished(run: Run, node: str, state: str, at: float, *, reason: str | None,
             started_at: float | None = None, log_path: str | None = None,
             exit_code: int | None = None, signal: int | None = None,
             not_started: bool = False, pid: int | None = None) -> C.RunFinished:
    """The report that ``run`` (this node's attempt, by its token) ended."""
    # (a run of this node: assigned to it, so it has its token)
    return C.RunFinished(run_id=run.run_id, token=cast(int, run.token), node=node, state=state,
                         exit_code=exit_code, signal=signal, started_at=started_at,
                         finished_at=at, log_path=log_path, reason=reason,
                         not_started=not_started, pid=pid)


def run_ended(act: ActiveRun, rep: L.Report, node: str, now: float, log_dir: str,
              note: str | None = None) -> C.RunFinished:
    """The report of a run's end, as run_life's ``Report`` action describes it
    (logged here: successes at debug level, at hundreds of runs a second an
    info line each would run into journald's rate limit)."""
    run = act.run
    finished_at = rep.finished_at if rep.finished_at is not None else now
    reason = rep.reason
    if rep.early:
        reason = _not_started_reason(act, rep.status, log_dir)
    if note:
        reason = f"{reason}; {note}" if reason else note
    if act.life.started:
        assert act.life.started_at is not None  # a started run's life has its start
        log.log(logging.DEBUG if rep.state == "succeeded" else logging.INFO,
                "event=run_finished job=%s run=%d state=%s exit_code=%s signal=%s "
                "duration_s=%.3f", run.job, run.run_id, rep.state, rep.exit_code,
                rep.signal, finished_at - act.life.started_at)
    else:
        log.warning("event=run_not_started job=%s run=%d state=%s reason=\"%s\"",
                    run.job, run.run_id, rep.state, reason)
    return finished(run, node, rep.state, finished_at, reason=reason,
                    exit_code=rep.exit_code, signal=rep.signal, started_at=rep.started_at,
                    log_path=act.log_path if rep.log_kept else None,
                    not_started=rep.not_started,
                    pid=(act.life.pid or None) if act.life.started else None)


def _not_started_reason(act: ActiveRun, status: int | None, log_dir: str) -> str:
    """Why a run that never passed its gate ended: what it wrote (the
    user-switching shell says why it could not prepare the run)."""
    rc = L.exit_code(status) if status is not None else -1
    try:
        parts, _, _ = read_run_log(log_dir, act.run, 0, 4096)
        early = b"".join(p.data for p in parts).decode("utf-8", "replace")
    except (OSError, CronrdError):
        early = ""
    said = [ln.strip() for ln in early.splitlines() if ln.strip()]
    if said and rc > 0:
        last = said[-1][:500]
        if last.startswith("cronrd: run not started: "):
            return last[len("cronrd: "):]
        return (f"run not started: preparing it as user {act.user} failed (status {rc}): "
                f"{last}")
    return (f"the run's waiting process ended before the fire time (status {rc}); "
            "was it killed?")


def _write_failed(batch: list, exc: Exception) -> list[None]:
    """Results the outbox could not take: still proposed (no outbox item);
    only their crash safety is lost, and the log says so."""
    log.error("event=outbox_write_failed count=%d error=\"%s\"", len(batch), exc)
    return [None] * len(batch)


class Reporter:
    def __init__(self, proposer, outbox: Outbox):
        self.proposer = proposer
        self.outbox = outbox
        self.tasks: set[asyncio.Task] = set()
        self.replayed: set[int] = set()      # runs with a result in the outbox at start
        self._unwritten: list[tuple] = []     # results waiting for their outbox write
        self._writer: asyncio.Task | None = None   # writing them (storage thread), then proposing

    def propose(self, cmd: C.Command, *, record: str | None = None,
                on_result: Callable[[Any], None] | None = None) -> None:
        """Report ``cmd`` until the cluster commits or refuses it.
        ``record``: the supervisor's record, removed once the result is
        committed. ``on_result``: called with the committed command's result."""
        self._propose(cmd, None, record, on_result)

    def _propose(self, cmd: C.Command, item: int | None, record: str | None,
                 on_result: Callable[[Any], None] | None) -> None:
        if item is None and isinstance(cmd, C.RunFinished):
            # Results only: to the outbox first, every result of this loop
            # turn in one fsync, then proposed.
            self._unwritten.append((cmd, record, on_result))
            if self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(self._write_results())
            return
        self._start(cmd, item, record, on_result)

    async def _write_results(self) -> None:
        """Results to the outbox, then proposed: all that arrived in one
        loop turn, or while the previous write was under way, ride one
        write (one fsync, on the outbox's storage thread)."""
        try:
            while self._unwritten:
                await asyncio.sleep(0)   # the rest of this turn's results join
                batch, self._unwritten = self._unwritten, []
                items: Sequence[int | None]
                try:
                    items = await self.outbox.write([cmd for cmd, _, _ in batch])
                except Exception as exc:
                    items = _write_failed(batch, exc)
                self._start_all(batch, items)
        finally:
            self._writer = None

    def _write_now(self) -> None:
        """At shutdown, what is left, written on the loop."""
        batch, self._unwritten = self._unwritten, []
        items: Sequence[int | None]
        try:
            items = self.outbox.add_many([cmd for cmd, _, _ in batch])
        except Exception as exc:
            items = _write_failed(batch, exc)
        self._start_all(batch, items)

    def _start_all(self, batch: list[tuple], items: Sequence[int | None]) -> None:
        for (cmd, record, on_result), item in zip(batch, items):
            self._start(cmd, item, record, on_result)

    def _start(self, cmd: C.Command, item: int | None, record: str | None,
               on_result: Callable[[Any], None] | None) -> None:
        task = asyncio.get_running_loop().create_task(self._report(cmd, item, record,
                                                                   on_result))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def replay(self) -> int:
        """Propose the reports a previous run of the daemon left unconfirmed."""
        items = self.outbox.pending()
        for item, cmd in items:
            if isinstance(cmd, C.RunFinished):
                self.replayed.add(cmd.run_id)  # reconcile must not call it lost
            self._propose(cmd, item, None, None)
        return len(items)

    async def _report(self, cmd: C.Command, item: int | None, record: str | None,
                      on_result: Callable[[Any], None] | None) -> None:
        """Propose until committed: a result is never dropped (guarantee 5)."""
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
            if on_result is not None:
                on_result(result)
            break
        if item is not None:
            self.outbox.done(item)
        if record is not None:  # the result is committed: the record has served
            records.remove(record)

    async def drain(self, timeout: float) -> None:
        """At shutdown: this turn's results to the outbox now, and a moment for
        the reports in flight to commit; the next start proposes the rest."""
        if self._writer is not None:
            await asyncio.wait([self._writer], timeout=timeout)
        if self._unwritten:
            self._write_now()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout)
            for task in list(self.tasks):
                task.cancel()

"""``cronrd worker``: a worker agent (docs/workers.md).

It runs the runs the leader gives it with the executor a member uses
(runtime/runs/: supervisors, gates, claims, the durable outbox of reports,
adoption after a restart), above a view of the leader's assignments
instead of the replicated state (worker/view.py), and proposes through its
connection to the leader (worker/link.py). It holds no replicated state and
takes no part in Raft.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
from typing import Any

from ... import __version__
from ...config import Config, check_directories
from ...errors import ConfigError, CronrdError, RequestError
from ...state import commands as C
from ...state.effects import (CancelRequested, Effect, JobsChanged, RunAssigned, RunDone,
                              RunMoved, RunStuck, StateRestored)
from ..clock import Clock
from ..logfmt import setup_logging
from ..peers.tls import WORKER_OU, cert_subject
from ..runs import restart
from ..runs.executor import Executor
from ..runs.executors import offered_tags
from ..runs.logs import read_run_chunk
from ..runs.outbox import Outbox
from ..storage import DataDirLock
from .link import Link
from .view import WorkerView, run_of

log = logging.getLogger("cronrd.worker")

HOUSEKEEPING = 3600.0   # s between log-retention passes
EFFECTS = {"cancel": CancelRequested, "stuck": RunStuck, "run_done": RunDone,
           "moved": RunMoved}


class _Proposer:
    """The executor's proposer on a worker: the link to the leader; a
    claim's answer also refreshes the view's runs running elsewhere."""

    changes = None

    def __init__(self, link: Link, view: WorkerView):
        self.link, self.view = link, view

    @property
    def leader(self) -> str | None:
        return self.link.leader

    async def propose(self, cmd: C.Command) -> Any:
        result = await self.link.propose(cmd)
        if isinstance(cmd, C.ClaimRuns) and isinstance(result, dict):
            self.view.claimed(result.get("elsewhere"))
        return result


class WorkerAgent:
    def __init__(self, config: Config, clock: Clock | None = None):
        if config.worker is None:
            raise ConfigError(f"{config.path}: a worker's config needs a worker: section "
                              "(servers, tls, tags); see `man 8 cronrd` (WORKERS)")
        self.config = config
        self.wc = config.worker
        self.clock = clock or Clock()
        self.node_id = config.node_id
        self.first = True
        self.stop_event = asyncio.Event()

    def _check_name(self) -> None:
        """The certificate names this worker: node_id must say the same."""
        subject = cert_subject(self.wc.tls.cert) or {}
        hint = ("issue it one with `cronrd cluster init-tls DIR --nodes ... --workers "
                f"{self.node_id}`")
        if subject.get("CN") != self.node_id:
            raise ConfigError(
                f"{self.config.path}: node_id {self.node_id!r} is not the name in "
                f"{self.wc.tls.cert} ({subject.get('CN') or 'unreadable'}); a worker is known "
                f"by its certificate: set node_id to its name, or {hint}")
        if subject.get("OU") != WORKER_OU:
            raise ConfigError(f"{self.wc.tls.cert} is not a worker's certificate (OU "
                              f"{subject.get('OU')!r}, not {WORKER_OU}): the servers refuse "
                              f"it on the worker port; {hint}")

    def _hello(self) -> dict[str, Any]:
        return {"version": __version__, "capacity": self.config.max_running,
                "tags": sorted(set(self.wc.tags) | set(offered_tags()))}

    async def run(self) -> int:
        cfg = self.config
        self._check_name()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
        old = os.umask(0o022)
        try:
            os.makedirs(cfg.data_dir, mode=0o700, exist_ok=True)
            os.makedirs(cfg.log_dir, mode=0o750, exist_ok=True)
        finally:
            os.umask(old)
        check_directories(cfg)
        lock = DataDirLock(cfg.data_dir)
        lock.acquire()
        outbox = Outbox(cfg.local_db)
        self.view = WorkerView(self.node_id)
        self.link = Link(self.node_id, self.wc.servers, self.wc.tls, self.clock,
                         hello=self._hello, arrived=self._arrived, welcome=self._welcome,
                         message=self._message,
                         serve={"read_log": self._read_log},
                         running=lambda: self.executor.running_here())
        self.executor = Executor(cfg, _Proposer(self.link, self.view), None, self.clock,
                                 fence=self.link.fence,
                                 outbox=outbox, others_can_run=lambda: True, claims=True,
                                 view=self.view)
        self.executor.job_nofile = soft
        self.executor.setup_cgroups()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_event.set)
        replayed = self.executor.replay_outbox()   # proposed once connected
        log.info("event=worker_starting node=%s version=%s servers=%d tags=%s outbox=%d",
                 self.node_id, __version__, len(self.wc.servers),
                 ",".join(self._hello()["tags"]), replayed)
        link = loop.create_task(self.link.run(), name="worker-link")
        code = 0
        housekeeping = loop.create_task(self._housekeeping(), name="housekeeping")
        try:
            done, _ = await asyncio.wait([link, loop.create_task(self.stop_event.wait())],
                                         return_when=asyncio.FIRST_COMPLETED)
            if link in done:   # (it catches every error: only a bug ends it)
                log.error("event=worker_link_ended error=\"%s\" hint=\"the worker stops; its "
                          "unit restarts it\"", link.exception() if not link.cancelled()
                          else "cancelled")
                code = 1
        finally:
            log.info("event=stopping mode=%s grace_s=%g", cfg.shutdown_mode,
                     cfg.shutdown_grace)
            housekeeping.cancel()
            if not self.first:   # (before its first hello it holds no runs to settle)
                await restart.shutdown(self.executor, cfg.shutdown_mode, cfg.shutdown_grace)
            link.cancel()
            await asyncio.gather(link, housekeeping, return_exceptions=True)
            outbox.close()
            lock.release()
        return code

    # -- what the leader says --------------------------------------------------------
    def _arrived(self, answer: dict) -> None:
        """A (new) leader's list of this worker's runs replaces the view,
        before any later message about them."""
        runs = answer.get("runs")
        changed = self.view.replace_all(runs if isinstance(runs, list) else [],
                                        answer.get("specs"))
        self.executor.on_effects([JobsChanged(job=job) for job in sorted(changed)])

    async def _welcome(self, answer: dict) -> None:
        """The first leader's welcome settles what the last agent left
        (restart.py: runs that went on while it was down are adopted, their
        ends reported); a later one re-reads the runs, as after a snapshot."""
        if self.first:
            settled = await restart.reconcile(self.executor)
            self.first = False
            log.info("event=worker_ready node=%s leader=%s runs=%d adopted=%d lost=%d",
                     self.node_id, self.link.leader, len(self.view.runs),
                     settled.get("adopted", 0) + settled.get("resumed", 0),
                     settled.get("lost", 0))
        else:
            self.executor.on_effects([StateRestored()])
        # A cancel sent while this worker was away is in its run's record.
        self.executor.on_effects([CancelRequested(run=a.run) for a in self.view.runs.values()
                                  if a.run.cancel_requested])

    def _message(self, msg: dict) -> None:
        op = msg.get("op")
        effects: list[Effect] = []
        if op == "assigned":
            run, changed = self.view.assigned(msg)
            if changed:
                effects.append(JobsChanged(job=run.job))
            effects.append(RunAssigned(run=run))
        elif op == "effect" and msg.get("kind") in EFFECTS:
            kind = str(msg["kind"])
            effects.append(EFFECTS[kind](run=self.view.changed(msg.get("run"), kind)))
        else:
            log.warning("event=worker_unknown_message op=%s", str(op)[:40])
            return
        self.executor.on_effects(effects)

    async def _read_log(self, msg: dict) -> dict:
        """The leader asks for a chunk of one of this worker's run logs."""
        try:
            run = run_of(msg.get("run"))
        except CronrdError as exc:
            raise RequestError(str(exc)) from None
        if run.node != self.node_id:
            raise RequestError(f"run {run.run_id} did not run on worker {self.node_id}")
        offset = msg.get("offset")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise RequestError("read_log: offset must be a whole number")
        return await asyncio.get_running_loop().run_in_executor(
            None, read_run_chunk, self.config, run, offset)

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                removed = await loop.run_in_executor(None, self.executor.prune_logs,
                                                     self.executor.logs_in_use())
                if removed:
                    log.info("event=logs_pruned removed=%d", removed)
            except OSError as exc:
                log.warning("event=log_retention_failed error=\"%s\"", exc)
            await asyncio.sleep(HOUSEKEEPING)


def run_worker(config: Config) -> int:
    setup_logging(config.log_level)
    try:
        return asyncio.run(WorkerAgent(config).run())
    except CronrdError as exc:
        log.error("event=fatal error=\"%s\"", exc)
        return 1

"""`cronrd checkpoint save|get` and `cronrd heartbeat` on the control socket,
and the token an attempt gets to make them (state/checkpoints.py).

The node that starts an attempt makes it a random token (``attempt_env``:
``CRONRD_RUN_TOKEN``, with ``CRONRD_SOCKET`` so that the job finds this
daemon, and a retry's last checkpoint); the hash goes to the log with the
attempt's start. A request from inside the job names its run and presents
the token: it is authorised by the token, whatever uid the job runs as (the
socket's permissions still decide who may connect), and only for a run of
this node. The check is made here (a refusal is answered at once and
audited) and again inside apply, where it is fenced against the log: a
stale attempt never overwrites a newer one.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from typing import Any

from ...errors import PermissionDenied, UsageError
from ...ops import admin as A
from ...state import checkpoints as CK
from ...state import commands as C
from ...state import queries as Q
from ...errors import Refused
from ...model.run import Run
from .access import Caller
from .server import HandlersHost

START_WAIT = 10.0     # s a request waits for its attempt's start to be committed
# At most one heartbeat of a run goes to the replicated log per this many
# seconds: a job calling `cronrd heartbeat` in a tight loop must not flood the
# log. A heartbeat within the interval is answered at once and its progress
# and message are sent with the next one, at the interval's end.
HEARTBEAT_INTERVAL = 1.0
# At most one checkpoint save of a run goes to the log per this many seconds
# (a job saving 64 KiB in a tight loop wrote 27 MiB/s into every node's log).
# A save within the interval waits for its turn (the job slows down to the
# pace); a newer save before that turn replaces it (answered "superseded").
CHECKPOINT_INTERVAL = 1.0
START_POLL = 0.05
MAX_TOKEN = 256       # characters of a presented token
log = logging.getLogger("cronrd.checkpoints")
CLI = {"checkpoint_save": "checkpoint save", "checkpoint_get": "checkpoint get",
       "heartbeat": "heartbeat"}


class CheckpointRequests:
    """The requests, served by ``handlers`` (handlers.Handlers: its state,
    log, clock, config and audit)."""

    def __init__(self, handlers: HandlersHost):
        self.h = handlers
        self._heartbeat_sent: dict[int, float] = {}   # run id -> monotonic time sent
        self._heartbeat_later: dict[int, C.Heartbeat] = {}  # the newest held back
        self._heartbeat_tasks: dict[int, asyncio.Task[None]] = {}  # each sends its run's later
        self._save_sent: dict[int, float] = {}   # run id -> monotonic time a save went
        self._save_next: dict[int, asyncio.Future] = {}   # the save waiting for its turn

    async def _attempt(self, req: A.SaveCheckpoint | A.GetCheckpoint | A.Heartbeat,
                       caller: Caller, command: str) -> tuple[Run, str]:
        """The run the request speaks for and its token's hash, once the token
        is checked; PermissionDenied (audited) otherwise."""
        h = self.h
        run_id, token = req.run_id, req.token
        if not token or len(token) > MAX_TOKEN:
            raise UsageError("the token is empty or too long; pass the run's "
                             "CRONRD_RUN_TOKEN")
        presented = CK.token_hash(token)
        me = h.config.node_id
        run = Q.get_run(h.conn, run_id)
        # The attempt's start (with its token's hash) may still be on its way
        # to the log when the job first speaks: wait for it, a while.
        deadline = h.clock.monotonic() + START_WAIT
        while (run is not None and run.node == me and run.state == "assigned"
               and h.clock.monotonic() < deadline):
            await asyncio.sleep(START_POLL)
            run = Q.get_run(h.conn, run_id)
        problem = CK.check_attempt(h.conn, run, presented, me)
        if problem is not None:
            if run is None:
                problem = (f"no run with id {run_id} on node {me}; `cronrd {CLI[command]}` "
                           "works only inside a run of a job (CRONRD_RUN_ID)")
            await h._audit(caller, command, str(run_id), False, problem)
            raise PermissionDenied(f"`cronrd {CLI[command]}` refused: {problem}")
        assert run is not None  # check_attempt refused a run that is not there
        return run, presented

    async def _propose(self, cmd: C.SaveCheckpoint | C.Heartbeat, command: str,
                       caller: Caller) -> Any:
        try:
            return await self.h.log.propose(cmd)
        except Refused as exc:  # fenced in the log: a newer attempt came first
            await self.h._audit(caller, command, str(cmd.run_id), False, str(exc))
            raise PermissionDenied(f"`cronrd {CLI[command]}` refused: {exc}") from None

    async def save(self, req: A.SaveCheckpoint, caller: Caller) -> dict[str, Any]:
        raw = req.value_b64
        if raw is not None:
            try:
                data = base64.b64decode(raw, validate=True)
                value = data.decode("utf-8")
            except (binascii.Error, ValueError):
                raise UsageError("the checkpoint value is not UTF-8 text (value_b64: base64 "
                                 "of UTF-8); encode binary data, e.g. with base64") from None
        elif req.value is not None:
            value = req.value
        else:
            raise UsageError("missing argument 'value'")
        problem = CK.value_problem(value)
        if problem is not None:
            raise UsageError(problem)
        run, presented = await self._attempt(req, caller, "checkpoint_save")
        size = len(value.encode("utf-8"))
        rid = run.run_id
        waiting = self._save_next.pop(rid, None)
        if waiting is not None and not waiting.done():   # a newer value: that one goes not
            waiting.set_result(False)
        sent = self._save_sent.get(rid)
        now = self.h.clock.monotonic()
        if sent is not None and now - sent < CHECKPOINT_INTERVAL:
            turn = asyncio.get_running_loop().create_future()
            self._save_next[rid] = turn
            try:
                await asyncio.wait([turn], timeout=sent + CHECKPOINT_INTERVAL - now)
            finally:
                if self._save_next.get(rid) is turn:
                    del self._save_next[rid]
            if turn.done() and turn.result() is False:
                return {"run_id": rid, "superseded": True, "bytes": size}
        self._save_sent[rid] = self.h.clock.monotonic()
        if len(self._save_sent) > 10_000:  # bounded: forget the runs long quiet
            for old, t in list(self._save_sent.items()):
                if self._save_sent[rid] - t >= CHECKPOINT_INTERVAL:
                    del self._save_sent[old]
        res = await self._propose(C.SaveCheckpoint(
            run_id=rid, token_hash=presented, value=value, node=self.h.config.node_id,
            at=self.h.clock.now()), "checkpoint_save", caller)
        return {**res, "bytes": size}

    async def get(self, req: A.GetCheckpoint, caller: Caller) -> dict[str, Any]:
        run, _ = await self._attempt(req, caller, "checkpoint_get")
        ck = CK.of_record(self.h.conn, run)
        if ck is None:
            return {"run_id": run.run_id, "value": None, "attempt": None, "at": None}
        return {"run_id": run.run_id, "value": ck["value"], "attempt": ck["attempt"],
                "at": ck["at"]}

    async def heartbeat(self, req: A.Heartbeat, caller: Caller) -> Any:
        # the bounds are the request's (progress 0 to 1, the message's length);
        # the message's text is checked as apply does
        progress, message = req.progress, req.message
        problem = None if message is None else CK.message_problem(message)
        if problem is not None:
            raise UsageError(problem)
        run, presented = await self._attempt(req, caller, "heartbeat")
        cmd = C.Heartbeat(
            run_id=run.run_id, token_hash=presented, node=self.h.config.node_id,
            at=self.h.clock.now(), progress=progress,
            message=message)
        now = self.h.clock.monotonic()
        sent = self._heartbeat_sent.get(run.run_id)
        if sent is not None and now - sent < HEARTBEAT_INTERVAL:
            if run.run_id not in self._heartbeat_tasks:
                self._heartbeat_tasks[run.run_id] = asyncio.get_running_loop().create_task(
                    self._send_later(run.run_id, sent + HEARTBEAT_INTERVAL - now))
            self._heartbeat_later[run.run_id] = cmd
            return {"run_id": run.run_id, "coalesced": True}
        # sent now: a beat still held back is older, and goes no more
        self._heartbeat_later.pop(run.run_id, None)
        task = self._heartbeat_tasks.pop(run.run_id, None)
        if task is not None:
            task.cancel()
        self._heartbeat_sent[run.run_id] = now
        if len(self._heartbeat_sent) > 10_000:  # bounded: forget the ones long quiet
            for rid, t in list(self._heartbeat_sent.items()):
                if now - t >= HEARTBEAT_INTERVAL:
                    del self._heartbeat_sent[rid]
        return await self._propose(cmd, "heartbeat", caller)

    async def _send_later(self, run_id: int, delay: float) -> None:
        """Send the newest heartbeat held back for ``run_id`` once its
        interval is over (with the time it was made)."""
        await asyncio.sleep(max(0.0, delay))
        self._heartbeat_tasks.pop(run_id, None)
        cmd = self._heartbeat_later.pop(run_id, None)
        if cmd is None:
            return
        self._heartbeat_sent[run_id] = self.h.clock.monotonic()
        try:
            await self.h.log.propose(cmd)
        except Exception as exc:  # a newer attempt, no leader: the job sends again
            # (an attempt that ended meanwhile still records it: apply takes a
            # beat made before its end)
            log.info(
                "event=heartbeat_held_not_sent run=%d error=\"%s\"", run_id, exc)

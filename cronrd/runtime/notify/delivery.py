"""The leader's delivery of events (a duty while this node leads).

It reads the outbox (state/events.py), decides who gets what now
(decisions/delivery.py), sends in tasks of their own (runtime/notify/senders.py)
and records every attempt through the log (``DeliveryResult``). A receiver
that is down or slow holds one of ``CONCURRENCY`` send slots for at most its
notifier's timeout; the scheduler and the event loop never wait for it.
Delivery is at least once: an attempt in flight when the leader goes is
sent again by the next one (receivers dedupe on the event id).
"""

from __future__ import annotations

import asyncio
import logging

from ...config import Config
from ...decisions import delivery as D
from ...errors import CronrdError
from ...state import commands as C
from ...state import deliveries as DL
from ...state import events as EV
from ...state import queries as Q
from ...state.deliveries import MAX_BATCH
from ...state.effects import Effect, RunDone
from . import senders as N
from ..clock import Clock

log = logging.getLogger("cronrd.notify")

CONCURRENCY = 8       # sends at once
MAX_IN_FLIGHT = 64    # sends started and not yet recorded (the rest wait a step)
TICK = 1.0            # s between looks at the outbox (sooner when a run ends)
FAILED_PAUSE = 5.0    # s after a step that failed unexpectedly (logged)
SCAN = 1000           # undelivered events looked at per step (oldest first)


class Delivery:
    def __init__(self, config: Config, conn, propose, clock: Clock):
        self.config = config
        self.node_id = config.node_id
        self.notifications = config.notifications
        self.policies = {name: D.Policy(n.max_attempts, n.retry_delay, n.max_retry_delay)
                         for name, n in self.notifications.notifiers.items()}
        self.conn = conn
        self.propose = propose   # leader-only
        self.clock = clock
        self.in_flight: set[tuple[int, str]] = set()
        self.tasks: set[asyncio.Task] = set()
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._wake = asyncio.Event()

    def on_effects(self, effects: list[Effect]) -> None:
        if any(isinstance(e, RunDone) for e in effects):
            self._wake.set()

    async def run(self) -> None:
        """Until cancelled (leadership ended): the sends in flight go with it
        (unrecorded: the next leader sends them again)."""
        try:
            while True:
                next_at = None
                try:
                    next_at = await self.step()
                except CronrdError as exc:
                    log.info("event=delivery_step_failed error=\"%s\"", exc)
                except Exception:  # a bug here must not end the scheduler's term
                    log.exception("event=delivery_step_failed")
                    await asyncio.sleep(FAILED_PAUSE)  # (not cut short by ended runs)
                wait = TICK if next_at is None else min(TICK, max(0.02, next_at -
                                                                  self.clock.now()))
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            for task in list(self.tasks):
                task.cancel()

    def _routes(self, job: str, cache: dict):
        if job not in cache:
            spec = Q.job_spec(self.conn, job)
            cache[job] = None if spec is None else spec.notify
        return cache[job]

    async def step(self) -> float | None:
        """One look at the outbox: give up, settle and start sends; the time of
        the earliest retry not yet due."""
        events = EV.undelivered(self.conn, SCAN)
        if not events:
            return None
        cache: dict = {}
        default = self.notifications.default
        by_id = {e["event_id"]: e for e in events}
        wanted = [(e["event_id"], D.recipients(e["kind"], self._routes(e["job"], cache),
                                               default)) for e in events]
        plan = D.plan(self.clock.now(), wanted, DL.attempts_of(self.conn, by_id),
                      self.policies, self.in_flight)
        records = []
        for g in plan.give_up:
            if g.why == "unknown":
                error = (f"no notifier named {g.notifier!r} in the config of node "
                         f"{self.node_id} (the leader); define it under notifiers: in "
                         f"{self.config.path or 'the config'} on every node")
            else:
                error = "given up: max_attempts of the notifier used up"
            log.warning("event=notification_given_up event_id=%d notifier=%s error=\"%s\"",
                        g.event_id, g.notifier, error)
            records.append([g.event_id, g.notifier, g.attempt, False, True, error])
        if records or plan.done:
            await self.propose(C.DeliveryResult(at=self.clock.now(), leader=self.node_id,
                                                attempts=records[:MAX_BATCH],
                                                done=plan.done[:MAX_BATCH]))
        for send in plan.sends:
            if len(self.in_flight) >= MAX_IN_FLIGHT:
                break
            key = (send.event_id, send.notifier)
            self.in_flight.add(key)
            task = asyncio.create_task(self._send(send, by_id[send.event_id]),
                                       name=f"notify-{send.event_id}-{send.notifier}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return plan.next_at

    async def _send(self, send: D.Send, event: dict) -> None:
        key = (send.event_id, send.notifier)
        try:
            async with self._slots:
                notifier = self.notifications.notifiers[send.notifier]
                try:
                    note = await N.send(notifier, event, self.node_id, self.clock.now())
                    ok, error = True, ""
                    log.info("event=notification_sent event_id=%d kind=%s job=%s notifier=%s "
                             "attempt=%d result=\"%s\"", send.event_id, event["kind"],
                             event["job"], send.notifier, send.attempt, note)
                except N.SendError as exc:
                    ok, error = False, str(exc)
                except Exception as exc:  # a bug must not stop the deliveries
                    log.exception("event=notification_error event_id=%d notifier=%s",
                                  send.event_id, send.notifier)
                    ok, error = False, f"internal error: {exc!r}"
                if not ok:
                    log.warning("event=notification_failed event_id=%d kind=%s job=%s "
                                "notifier=%s attempt=%d final=%s error=\"%s\"", send.event_id,
                                event["kind"], event["job"], send.notifier, send.attempt,
                                str(send.final).lower(), error)
            await self.propose(C.DeliveryResult(
                at=self.clock.now(), leader=self.node_id,
                attempts=[[send.event_id, send.notifier, send.attempt, ok, send.final, error]]))
        except CronrdError as exc:  # not recorded: sent again (at least once)
            log.info("event=delivery_record_failed event_id=%d notifier=%s error=\"%s\"",
                     send.event_id, send.notifier, exc)
        except Exception:
            log.exception("event=delivery_record_failed event_id=%d notifier=%s",
                          send.event_id, send.notifier)
        finally:
            self.in_flight.discard(key)
            self._wake.set()

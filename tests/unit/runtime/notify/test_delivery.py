"""The leader's delivery loop against a real receiver and a real state
machine: routes chosen, failed attempts retried with back-off and recorded
through the log, the event marked delivered once every recipient settled;
a receiver that hangs does not hold up the others."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from cronrd.config import parse_config
from cronrd.jobspec.notify import NotifyRoute
from cronrd.runtime.notify.delivery import Delivery
from cronrd.state import deliveries as DL
from cronrd.state import events as EV
from receivers import WebhookReceiver
from tests.unit.state.test_state import T0, Log
from tests.support.virtual_time import run_virtual


class Clock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def delivery(log: Log, notifiers: dict, notify: list) -> Delivery:
    config = parse_config({"node_id": "n1", "notifiers": notifiers, "notify": notify})

    async def propose(cmd):
        return log.apply(cmd)
    return Delivery(config, log.sm.conn, propose, Clock())


async def until(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.02)


def test_retried_until_the_receiver_accepts_then_delivered():
    rx = WebhookReceiver(fail_first=2)
    log = Log()
    log.put(notify=[{"to": "chat", "on": ["failed"]}])
    eid = EV.emit(log.sm.conn, "failed", job="j", at=T0, run_id=1)
    skipped = EV.emit(log.sm.conn, "skipped", job="j", at=T0, run_id=2)  # nobody wants it
    d = delivery(log, {"chat": {"type": "webhook", "url": rx.url, "retry_delay": "0.1s",
                                "max_attempts": 5}}, [])

    async def go():
        task = asyncio.create_task(d.run())
        await until(lambda: EV.undelivered(log.sm.conn) == [])
        task.cancel()
    try:
        asyncio.run(go())
    finally:
        rx.close()
    rows = {r["event_id"]: r for r in DL.listing(log.sm.conn)}
    assert [(a["attempt"], a["ok"]) for a in rows[eid]["attempts"]] == [
        (1, False), (2, False), (3, True)]
    assert "HTTP 500" in rows[eid]["attempts"][0]["error"]
    assert rows[skipped]["delivered"] and rows[skipped]["attempts"] == []
    assert list(rx.events) == [str(eid)]


def test_given_up_after_max_attempts_and_an_unknown_notifier_is_recorded():
    rx = WebhookReceiver(fail_first=100)
    log = Log()
    log.put()
    EV.emit(log.sm.conn, "failed", job="j", at=T0)
    d = delivery(log, {"chat": {"type": "webhook", "url": rx.url, "retry_delay": "0s",
                                "max_attempts": 2}}, ["chat"])
    # another node's config names "pager"; this leader's does not define it
    d.notifications = replace(d.notifications,
                              default=d.notifications.default + (NotifyRoute("pager"),))

    async def go():
        task = asyncio.create_task(d.run())
        await until(lambda: EV.undelivered(log.sm.conn) == [])
        task.cancel()
    try:
        asyncio.run(go())
    finally:
        rx.close()
    [row] = DL.listing(log.sm.conn)
    got = {(a["notifier"], a["attempt"]): (a["ok"], a["final"]) for a in row["attempts"]}
    assert got == {("chat", 1): (False, False), ("chat", 2): (False, True),
                   ("pager", 1): (False, True)}
    pager = [a for a in row["attempts"] if a["notifier"] == "pager"][0]
    assert "no notifier named 'pager' in the config of node n1" in pager["error"]


def test_a_hanging_receiver_does_not_hold_up_another():
    slow, fast = WebhookReceiver(delay=3.0), WebhookReceiver()
    log = Log()
    log.put()
    EV.emit(log.sm.conn, "failed", job="j", at=T0)
    d = delivery(log, {"slow": {"type": "webhook", "url": slow.url, "timeout": "1s"},
                       "fast": {"type": "webhook", "url": fast.url}}, ["slow", "fast"])

    async def go():
        task = asyncio.create_task(d.run())
        start = time.monotonic()
        await until(lambda: len(fast.events) == 1)
        took = time.monotonic() - start
        await until(lambda: any(not a["ok"] for r in DL.listing(log.sm.conn)
                                for a in r["attempts"]))
        task.cancel()
        return took
    try:
        assert asyncio.run(go()) < 0.9
    finally:
        slow.close()
        fast.close()
    [row] = DL.listing(log.sm.conn)
    assert any("no answer within 1s" in a["error"] for a in row["attempts"])


def test_a_failing_step_is_logged_and_the_loop_goes_on(caplog):
    log = Log()
    d = delivery(log, {}, [])
    calls = []

    async def broken():
        calls.append(1)
        raise RuntimeError("a bug")
    d.step = broken

    async def go():
        task = asyncio.create_task(d.run())
        await until(lambda: len(calls) >= 2, timeout=15)  # (5s apart, virtual)
        assert not task.done()
        task.cancel()
    run_virtual(go())  # no I/O: the 5 s pause after the failure takes no real time
    assert "event=delivery_step_failed" in caplog.text

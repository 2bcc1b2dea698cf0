"""tasks.py: every task has an owner; a failure is logged with the task's
name and either restarted with back-off or reported; closing leaves nothing
running."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cronrd.runtime.tasks import Changes, ServiceDown, Services, TaskSet, first_of


def run(coro, timeout: float = 10.0):
    async def bounded():
        async with asyncio.timeout(timeout):  # a deadline, in this same task
            return await coro
    return asyncio.run(bounded())


def others() -> set[asyncio.Task]:
    return asyncio.all_tasks() - {asyncio.current_task()}


def test_leaving_the_block_cancels_and_awaits_every_service():
    ended = []

    async def forever(name):
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    async def go():
        async with Services("t", lambda n, e: None) as services:
            services.start("a", lambda: forever("a"))
            services.start("b", lambda: forever("b"))
            await asyncio.sleep(0)
            assert services.running() == ["a", "b"]
        assert others() == set()
    run(go())
    assert sorted(ended) == ["a", "b"]


def test_a_failing_service_is_logged_by_name_and_reported(caplog):
    failed = []

    async def boom():
        raise RuntimeError("boom")

    async def go():
        done = asyncio.Event()

        def on_failure(name, exc):
            failed.append((name, str(exc)))
            done.set()
        async with Services("t", on_failure) as services:
            services.start("exploder", boom)
            await asyncio.wait_for(done.wait(), 5)
    caplog.set_level(logging.ERROR, "cronrd.tasks")
    run(go())
    assert failed == [("exploder", "boom")]
    assert "event=service_failed owner=t service=exploder" in caplog.text
    assert "action=stop" in caplog.text


def fails_twice(name: str, error: Exception) -> list[float]:
    """Run a restartable service ``name`` that raises ``error`` at its first
    two starts and then runs; the times it started (three)."""
    starts: list[float] = []

    async def service():
        starts.append(asyncio.get_running_loop().time())
        if len(starts) < 3:
            raise error
        await asyncio.Event().wait()

    async def go():
        async with Services("t", lambda n, e: pytest.fail("not reported"),
                            restart_min=0.05, restart_max=1.0) as services:
            services.start(name, service, restart=True)
            deadline = asyncio.get_running_loop().time() + 5
            while len(starts) < 3:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert services.restarts == {name: 2}
    run(go())
    return starts


def test_a_restartable_service_is_restarted_with_growing_back_off(caplog):
    caplog.set_level(logging.WARNING, "cronrd.tasks")
    starts = fails_twice("flaky", RuntimeError("failure"))
    assert starts[1] - starts[0] >= 0.05 and starts[2] - starts[1] >= 0.1  # doubled
    assert caplog.text.count("action=restart") == 2
    assert caplog.text.count("event=service_restarted owner=t service=flaky") == 2


def test_a_service_down_for_an_outside_reason_is_retried_without_traceback_or_extra_lines(caplog):
    """Issue 33 (5): a port another node holds made the HTTP service log a
    full traceback on every retry, for ever. The service says why once per
    attempt (its own line); Services adds nothing above DEBUG."""
    caplog.set_level(logging.DEBUG, "cronrd.tasks")
    starts = fails_twice("http", ServiceDown("cannot listen on 127.0.0.1:8177"))
    assert starts[2] - starts[1] >= 0.1                              # still backs off
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert not [r for r in caplog.records if r.exc_info]
    assert caplog.text.count("event=service_down owner=t service=http") == 2


def test_a_service_that_returns_is_not_restarted():
    calls = []

    async def once():
        calls.append(1)

    async def go():
        async with Services("t", lambda n, e: None) as services:
            services.start("once", once, restart=True)
            await asyncio.sleep(0.05)
            assert services.running() == []
    run(go())
    assert calls == [1]


def test_stop_ends_only_the_named_services():
    async def go():
        async with Services("t", lambda n, e: None) as services:
            services.start("a", lambda: asyncio.Event().wait())
            services.start("b", lambda: asyncio.Event().wait())
            await services.stop("a", "not-started")
            assert services.running() == ["b"]
    run(go())


def test_task_set_logs_a_failure_and_close_cancels_the_rest(caplog):
    async def go():
        tasks = TaskSet("server")
        tasks.spawn(asyncio.Event().wait(), "waits")

        async def fail():
            raise ValueError("bad request")
        failing = tasks.spawn(fail(), "fails")
        await asyncio.gather(failing, return_exceptions=True)
        await asyncio.sleep(0)
        assert len(tasks) == 1
        await tasks.close()
        assert others() == set()
        assert tasks.spawn(asyncio.sleep(0), "late") is None  # closed: nothing new
    caplog.set_level(logging.ERROR, "cronrd.tasks")
    run(go())
    assert "event=task_failed owner=server task=server:fails" in caplog.text


def test_changes_wake_every_waiter_and_until_checks_the_condition():
    async def go():
        changes = Changes()
        state = {"leader": None}
        waiters = [asyncio.ensure_future(changes.until(lambda: state["leader"] == "b", 5))
                   for _ in range(3)]
        await asyncio.sleep(0)
        state["leader"] = "a"
        changes.notify()
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        state["leader"] = "b"
        changes.notify()
        assert await asyncio.gather(*waiters) == [True, True, True]
        assert await changes.until(lambda: False, 0.05) is False
        assert await changes.wait(0.01) is False
    run(go())


def test_a_waiter_giving_up_does_not_take_the_wake_up_from_others():
    async def go():
        changes = Changes()
        a = asyncio.ensure_future(changes.wait())
        b = asyncio.ensure_future(changes.wait())
        await asyncio.sleep(0)
        a.cancel()
        await asyncio.sleep(0)
        changes.notify()
        assert await asyncio.wait_for(b, 1) is True
    run(go())


def test_first_of_cancels_the_rest():
    async def go():
        e = asyncio.Event()
        e.set()
        await first_of(e.wait(), asyncio.Event().wait())
        assert others() == set()
    run(go())


def test_wait_within_keeps_a_cancel_that_comes_as_the_wait_ends():
    # asyncio.wait_for on Python 3.11 returns the result instead: the task
    # goes on as if it had not been cancelled (a leader's term never ended).
    from cronrd.runtime.tasks import wait_within

    async def main():
        wake = asyncio.Event()
        rounds = []

        async def duty():
            while True:
                rounds.append(1)
                try:
                    await wait_within(wake.wait(), 60)
                except TimeoutError:
                    pass
                wake.clear()

        task = asyncio.get_running_loop().create_task(duty())
        await asyncio.sleep(0.01)
        wake.set()          # the wait ends ...
        task.cancel()       # ... as the owner cancels the task
        await asyncio.wait([task], timeout=2)
        assert task.cancelled(), f"the cancel was lost ({len(rounds)} rounds)"
        # and the time limit still holds
        with pytest.raises(TimeoutError):
            await wait_within(asyncio.Event().wait(), 0.01)
        assert await wait_within(asyncio.sleep(0, "done"), 5) == "done"
    asyncio.run(main())


def test_no_daemon_code_uses_asyncio_wait_for():
    from pathlib import Path
    root = Path(__file__).resolve().parents[3] / "cronrd"
    found = []
    for path in root.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "asyncio.wait_for(" in code and "``" not in code:
                found.append(f"{path.relative_to(root)}:{n}")
    assert not found, f"use tasks.wait_within (a cancel is not lost there): {found}"

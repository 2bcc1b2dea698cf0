"""The clock (runtime/clock.py), and the virtual time that runtime unit
tests run on (tests/support/virtual_time.py)."""

from __future__ import annotations

import asyncio
import time

from cronrd.runtime import clock
from virtual_time import LoopClock, run_virtual


def test_the_clock_reads_the_wall_and_the_monotonic_clocks():
    before_wall, before_mono = time.time(), time.monotonic()
    c = clock.Clock()
    assert before_wall <= c.now() <= time.time() and before_wall <= clock.now() <= time.time()
    assert before_mono <= c.monotonic() <= time.monotonic()
    assert before_mono <= clock.monotonic() <= time.monotonic()


def test_a_virtual_loop_jumps_to_its_next_timer_instead_of_waiting():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        loop.call_later(3600, fired.append, "hour")
        start = loop.time()
        await asyncio.sleep(7200)
        return fired, loop.time() - start
    real = time.monotonic()
    fired, waited = run_virtual(main())
    assert fired == ["hour"] and waited == 7200
    assert time.monotonic() - real < 5  # two virtual hours, no real ones


def test_a_virtual_loop_still_serves_io_before_its_timers():
    async def main():
        loop = asyncio.get_running_loop()
        r, w = await asyncio.open_connection(*(await _server()))
        w.write(b"ping\n")
        await w.drain()
        line = await asyncio.wait_for(r.readline(), timeout=60)
        w.close()
        return line, loop.time()
    line, at = run_virtual(main())
    assert line == b"pong\n"


async def _server():
    async def serve(r, w):
        await r.readline()
        w.write(b"pong\n")
        await w.drain()
        w.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[:2]


def test_loop_clock_is_the_wall_clock_of_the_virtual_loop():
    async def main():
        c = LoopClock(1_800_000_000.0)
        first = c.now()
        await asyncio.sleep(30)
        return first, c.now(), c.monotonic()
    first, later, mono = run_virtual(main())
    assert later - first == 30 and first == 1_800_000_000.0 + mono - 30

"""The faces' loop (runtime/faces.py): requests served on a loop and thread
of their own, their handlers run on the critical loop through the bridge;
a busy face does not hold the critical loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from cronrd.errors import RequestError, UsageError
from cronrd.runtime.control.server import Stream
from cronrd.runtime.faces import CoreBridge, CoreOnly, CoreReads, FacesThread
from cronrd.runtime.loop_watch import LoopWatch


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(500))


async def with_faces(body):
    """Run ``body(bridge, faces)`` on the test's loop (the critical one)."""
    faces = FacesThread()
    faces.start()
    try:
        return await body(CoreBridge(asyncio.get_running_loop()), faces)
    finally:
        await faces.stop()


def test_a_handler_runs_on_the_critical_loop_and_its_answer_comes_back():
    seen = {}

    async def handler(args, caller):
        seen["thread"] = threading.get_ident()
        seen["loop"] = asyncio.get_running_loop()
        return {"echo": args["x"], "caller": caller}

    async def body(bridge, faces):
        core = asyncio.get_running_loop()
        across = bridge.handler(handler)

        async def from_faces():
            assert threading.get_ident() != seen.get("main")
            return await across({"x": 7}, "root")
        seen["main"] = threading.get_ident()
        got = await faces.run(from_faces())
        assert got == {"echo": 7, "caller": "root"}
        assert seen["thread"] == seen["main"] and seen["loop"] is core
    asyncio.run(with_faces(body))


@pytest.mark.parametrize("error", [UsageError("bad arguments"), RequestError("no job")])
def test_a_handlers_error_reaches_the_face_as_it_was(error):
    async def handler(args, caller):
        raise error

    async def body(bridge, faces):
        async def from_faces():
            with pytest.raises(type(error), match=str(error)):
                await bridge.handler(handler)({}, None)
            return True
        assert await faces.run(from_faces())
    asyncio.run(with_faces(body))


def test_a_stream_is_pulled_across_item_by_item_and_closed_on_the_critical_loop():
    where = []

    async def handler(args, caller):
        async def items():
            try:
                for i in range(5):
                    where.append(threading.get_ident())
                    yield {"data": str(i)}
                yield {"result": "done"}
            finally:
                where.append(("closed", threading.get_ident()))
        return Stream(items())

    async def body(bridge, faces):
        main = threading.get_ident()

        async def from_faces():
            res = await bridge.handler(handler)({}, None)
            got = []
            async for msg in res.it:
                got.append(msg)
                if len(got) == 3:
                    break            # the client went away after three
            await res.it.aclose()
            return got
        got = await faces.run(from_faces())
        assert got == [{"data": "0"}, {"data": "1"}, {"data": "2"}]
        for _ in range(100):          # the close runs on the critical loop
            if where and where[-1][0:1] == ("closed",):
                break
            await asyncio.sleep(0.01)
        assert where[-1] == ("closed", main)
        assert all(w == main for w in where[:-1])
    asyncio.run(with_faces(body))


def test_a_request_given_up_by_its_face_is_cancelled_on_the_critical_loop():
    state = {}

    async def handler(args, caller):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    async def body(bridge, faces):
        async def from_faces():
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await bridge.handler(handler)({}, None)
        await faces.run(from_faces())
        for _ in range(100):
            if state.get("cancelled"):
                break
            await asyncio.sleep(0.01)
        assert state.get("cancelled")
    asyncio.run(with_faces(body))


def test_a_busy_face_does_not_stall_the_critical_loop_and_a_held_core_does_not_stop_the_faces():
    """The point of the faces' loop (issue 29): 0.6 s of request work on the
    faces' loop (parsing, rendering, encoding) is no stall of the critical
    loop (the stall detector, which sees 100 ms, sees none); on one loop it
    would be a 600 ms stall. And the faces keep answering while the
    critical loop is held (they queue what they need from it)."""
    async def body(bridge, faces):
        watch = LoopWatch()
        beat = asyncio.create_task(watch.run())
        await asyncio.sleep(0.05)

        async def heavy_request():
            spin(0.6)
            return "rendered"
        assert await faces.run(heavy_request()) == "rendered"
        await asyncio.sleep(0.05)
        assert watch.count == 0, watch.histogram()
        # the critical loop held: the faces still run their own work
        fut = faces.submit(asyncio.sleep(0.05, result="answered"))
        spin(0.3)                    # the critical loop is held here
        assert fut.result(timeout=0.01) == "answered"
        for _ in range(100):         # the held beat is reported when it comes
            if watch.count:
                break
            await asyncio.sleep(0.01)
        beat.cancel()
        try:
            await beat
        except asyncio.CancelledError:
            pass
        assert watch.count == 1     # and that one was seen
    asyncio.run(with_faces(body))


def test_core_reads_serve_handlers_across_and_refuse_anything_else():
    class Log:
        is_leader = True
        leader = "n1"

        def __init__(self):
            self.listeners = []

        def subscribe(self, fn):
            self.listeners.append(fn)

        def propose(self, cmd):
            fut = asyncio.get_running_loop().create_future()
            fut.set_result({"cmd": cmd, "thread": threading.get_ident()})
            return fut

    class Handlers:
        config = clock = started_at = machine = members = None

        def __init__(self):
            self.log = Log()

        async def h_status(self, args):
            return {"thread": threading.get_ident()}

        def table(self):
            return {"status": lambda args, caller: self.h_status(args)}

        def secret_object(self):
            return "never"

    async def body(bridge, faces):
        main = threading.get_ident()
        h = Handlers()
        reads = CoreReads(h, bridge, conn=None, faces=faces.loop)
        heard = []
        reads.log.subscribe(lambda effects: heard.append((effects, threading.get_ident())))

        async def from_faces():
            me = threading.get_ident()
            a = await reads.h_status({})
            b = await reads.table()["status"]({}, None)
            c = await reads.log.propose("cmd")
            with pytest.raises(AttributeError, match="not served to the faces"):
                reads.secret_object  # noqa: B018
            # The state machine reads the critical loop's connection: a read
            # of it from here stopped the daemon (apsw: "Connection is busy
            # in another thread"). The faces read their own connection.
            with pytest.raises(AttributeError, match="not served to the faces"):
                reads.machine  # noqa: B018
            return me, a, b, c
        me, a, b, c = await faces.run(from_faces())
        assert a["thread"] == b["thread"] == c["thread"] == main != me
        h.log.listeners[0](["effect"])          # the critical loop's commit
        for _ in range(100):
            if heard:
                break
            await asyncio.sleep(0.01)
        assert heard == [(["effect"], me)]       # delivered on the faces' loop
    asyncio.run(with_faces(body))


def test_explain_and_the_listings_run_on_the_faces_and_status_goes_across():
    from cronrd.runtime.faces import control_table

    class Bridge:
        def handler(self, fn):
            return ("across", fn)

    def core_fn(args, caller):
        return "core"

    def faces_fn(args, caller):
        return "faces"
    names = ("explain", "jobs", "runs", "status", "run_now", "logs")
    table = control_table({n: core_fn for n in names}, {n: faces_fn for n in names}, Bridge())
    # explain evaluates schedules and reads the state: never on the critical loop
    assert table["explain"] is faces_fn and table["jobs"] is faces_fn
    assert table["runs"] is faces_fn
    # logs reads run output files (a slow disk, a big file): never there either
    assert table["logs"] is faces_fn
    assert table["status"] == ("across", core_fn) and table["run_now"] == ("across", core_fn)


def test_the_faces_stand_in_for_a_core_object_refuses_every_use_and_says_why():
    """The faces' Handlers get CoreOnly for the state machine and the
    executor: both read the critical loop's connection."""
    machine = CoreOnly("machine")
    with pytest.raises(AttributeError, match="machine.applied_index belongs to the critical loop"):
        machine.applied_index   # noqa: B018 (the read is the test)


def test_a_runs_log_is_read_on_the_faces_when_they_have_handlers_of_their_own():
    """The HTTP log stream read each chunk of a run's output file on the
    critical loop (log_chunk went across); with the faces' own handlers it
    is read here, and only a chunk of another node's log is asked across."""
    class Core:
        config = clock = started_at = members = None
        log = None

        async def log_chunk(self, run, offset):
            return "core"

    class Local:
        async def log_chunk(self, run, offset):
            return "faces"

        async def h_logs(self, args, caller):
            return "faces"

    class Log:
        def subscribe(self, fn):
            pass
    core = Core()
    core.log = Log()
    reads = CoreReads(core, bridge=None, conn=None, faces=None, local=Local())
    assert asyncio.run(reads.log_chunk(None, 0)) == "faces"
    assert asyncio.run(reads.h_logs({}, None)) == "faces"

"""The daemon's end of the faces' process (faces_host.py), with the faces'
end (faces_child.Channel, Remote) over real socket pairs in one loop."""

import asyncio
import pickle
import socket
import struct
import threading

import pytest

from cronrd.errors import CronrdError, RequestError
from cronrd.runtime.control.access import Caller
from cronrd.runtime.control.server import Stream
from cronrd.runtime.faces_child import Channel, Remote
from cronrd.runtime.faces_host import FacesHost
from cronrd.state import commands as C
from cronrd.state.effects import JobsChanged, RunDone

ROOT = Caller(uid=0, gid=0, pid=1, name="root")


class FakeLog:
    leader = "a"
    is_leader = True

    def __init__(self):
        self.listeners = []
        self.proposed = []

    def subscribe(self, fn):
        self.listeners.append(fn)

    async def propose(self, cmd):
        self.proposed.append(cmd)
        return {"index": len(self.proposed)}

    async def read_barrier(self):
        return 41


class FakeMembers:
    def status(self):
        return {"role": "leader", "leader": "a"}

    def node_views(self):
        return ["view"]

    async def call(self, node, method, args, timeout=5.0):
        return {"node": node, "method": method, "args": args}


class FakeHandlers:
    def __init__(self):
        self.log = FakeLog()
        self.members = FakeMembers()
        self.closed = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    def table(self):
        async def echo(args, caller):
            return {"args": args, "uid": caller.uid}

        async def count(args, caller):
            async def items():
                try:
                    for i in range(args["n"]):
                        yield {"i": i}
                finally:
                    self.closed.append("count")
            return Stream(items())

        async def hold(args, caller):
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return "released"
        return {"echo": echo, "count": count, "hold": hold}

    async def h_fail(self, req):
        raise RequestError(f"no job named {req!r}")

    async def h_pair(self, a, b=0):
        return a + b

    def not_a_handler(self):  # pragma: no cover - must never be reached
        raise AssertionError("served")


async def wired(handlers, blocking=None):
    """A FacesHost serving a Channel, over two socket pairs, no process."""
    host = FacesHost(config=None, started_at=0.0)
    host.attach(handlers, is_ready=lambda: True,
                blocking=blocking or {"members_status": handlers.members.status})
    ours, theirs = socket.socketpair()
    sync_ours, sync_theirs = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    sreader, swriter = await asyncio.open_unix_connection(sock=sync_ours)
    host.writer = writer
    host._ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    host._readers = [loop.create_task(host._read(reader)),
                     loop.create_task(host._serve_blocking(sreader, swriter))]
    creader, cwriter = await asyncio.open_unix_connection(sock=theirs)
    chan = Channel(creader, cwriter, sync_theirs, host._state())
    chan.running = loop.create_task(chan.run())
    return host, chan


def test_a_command_an_h_handler_and_a_stream_cross_and_errors_keep_their_class():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        remote = Remote(chan, config=None, started_at=0.0, commands=sorted(h.table()))
        table = remote.table()
        assert await table["echo"]({"job": "x"}, ROOT) == {"args": {"job": "x"}, "uid": 0}
        assert await remote.h_pair(2, b=3) == 5
        with pytest.raises(RequestError, match="no job named 'zz'"):
            await remote.h_fail("zz")
        stream = await table["count"]({"n": 3}, ROOT)
        assert isinstance(stream, Stream)
        assert [item async for item in stream.it] == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert h.closed == ["count"] and host.streams == {}
        # a stream given up half way is closed on the daemon's side
        stream = await table["count"]({"n": 100}, ROOT)
        async for item in stream.it:
            break
        await stream.it.aclose()
        for _ in range(100):
            if h.closed == ["count", "count"]:
                break
            await asyncio.sleep(0.01)
        assert h.closed == ["count", "count"] and host.streams == {}
        audit = C.Audit(node="a", uid=-1, user="token:x", pid=0, command="hook", target="h",
                        allowed=False, at=1.0, detail="bad signature")
        assert await remote.log.propose(audit) == {"index": 1} and h.log.proposed == [audit]
        assert await remote.log.read_barrier() == 41
        assert (await remote.members.call("b", "read_log", {"run_id": 1}))["node"] == "b"
        with pytest.raises(AttributeError):
            remote.not_a_handler
    asyncio.run(go())


def test_the_faces_propose_only_audits_backfills_and_hook_runs():
    # a faces' process taken over cannot forge a run's end, a member, a token
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        remote = Remote(chan, config=None, started_at=0.0, commands=[])
        forged = [C.RunFinished(run_id=1, token=1, node="a", state="succeeded", exit_code=0,
                                signal=None, started_at=1.0, finished_at=2.0, log_path=None),
                  C.CreateToken(node="a", name="evil", token_hash="x", role="admin", jobs="",
                                expires_at=None, at=1.0)]
        for cmd in forged:
            with pytest.raises(CronrdError, match=f"may not propose {type(cmd).__name__}"):
                await remote.log.propose(cmd)
        assert h.log.proposed == []
        run = C.ManualRun(job="j", node="", at=1.0, key="k")
        await remote.log.propose(run)
        assert h.log.proposed == [run]
    asyncio.run(go())


def test_only_handlers_are_served_whatever_the_faces_ask():
    async def go():
        h = FakeHandlers()
        host, _ = await wired(h)
        with pytest.raises(CronrdError, match="not served"):
            await host._do("h", ("not_a_handler", (), {}))
        with pytest.raises(CronrdError, match="not served"):
            await host._do("h", ("__class__", (), {}))
        with pytest.raises(CronrdError, match="unknown command"):
            await host._do("table", ("drop_everything", {}, ROOT))
        with pytest.raises(CronrdError, match="unknown request"):
            await host._do("exec", ("rm -rf /",))
    asyncio.run(go())


def test_a_request_the_faces_give_up_is_cancelled_in_the_daemon():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        remote = Remote(chan, config=None, started_at=0.0, commands=["hold"])
        call = asyncio.ensure_future(remote.table()["hold"]({}, ROOT))
        await asyncio.wait_for(h.started.wait(), 5)
        call.cancel()
        for _ in range(200):
            if h.cancelled:
                break
            await asyncio.sleep(0.01)
        assert h.cancelled and host.tasks == {}
    asyncio.run(go())


def test_blocking_calls_are_answered_from_a_thread_of_the_faces():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h, {"members_status": h.members.status,
                                     "next_fires": lambda names: {n: 60 for n in names}})
        loop = asyncio.get_running_loop()
        status = await loop.run_in_executor(None, chan.blocking, "members_status")
        assert status == {"role": "leader", "leader": "a"}
        fires = await loop.run_in_executor(None, chan.blocking, "next_fires", ["x", "y"])
        assert fires == {"x": 60, "y": 60}
        with pytest.raises(CronrdError, match="unknown blocking request"):
            await loop.run_in_executor(None, chan.blocking, "h")
    asyncio.run(go())


def test_state_and_the_fed_effects_reach_the_faces_once_they_subscribe():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        remote = Remote(chan, config=None, started_at=0.0, commands=[])
        got = []
        remote.log.subscribe(got.append)
        for _ in range(200):
            if host.subscribed:
                break
            await asyncio.sleep(0.01)
        h.log.leader = "b"
        h.log.is_leader = False
        (listener,) = h.log.listeners
        listener([JobsChanged(job="x"), RunDone(run=None)])
        for _ in range(200):
            if got:
                break
            await asyncio.sleep(0.01)
        assert got == [[RunDone(run=None)]]   # only what the event feed reads
        assert remote.log.leader == "b" and not remote.log.is_leader  # pushed before it
        assert remote.leadership.next_fires(["x"]) == {}   # not the leader: not asked
    asyncio.run(go())


def test_a_faces_process_that_sends_a_forbidden_pickle_is_killed():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        killed = threading.Event()
        host.kill = killed.set
        payload = pickle.dumps(("call", 1, "h", (print,)))
        chan.writer.write(struct.pack("!I", len(payload)) + payload)
        await asyncio.wait_for(host._ended.wait(), 5)
        assert killed.is_set()
    asyncio.run(go())


def test_stopping_the_faces_closes_the_channel():
    async def go():
        h = FakeHandlers()
        host, chan = await wired(h)
        host._send(("stop",))
        await asyncio.wait_for(chan.running, 5)
        assert chan.running.done() and chan.running.exception() is None
    asyncio.run(go())

"""The control server's bounds, on a server in this process with short limits:
idle and slow clients, the connection cap, oversized requests, streams, and
running out of file descriptors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from cronrd.runtime.control import server as control
from cronrd.runtime.control.access import Caller
from cronrd.runtime.control.server import ControlServer, Stream
from harness import REPO, wait_for


class Server:
    """A ControlServer on its own event loop in a thread."""

    def __init__(self, handlers: dict, **kw):
        self.dir = tempfile.mkdtemp(prefix="crd-", dir="/tmp")
        self.path = os.path.join(self.dir, "s")
        self.loop = asyncio.new_event_loop()
        self.server = ControlServer(self.path, handlers, **kw)
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.server.start())
            started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def clients(self) -> int:
        return len(self.server.clients)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        os.rmdir(self.dir)


@pytest.fixture
def serve():
    made = []

    def make(handlers=None, **kw):
        s = Server(handlers if handlers is not None else HANDLERS, **kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


async def h_echo(args, caller):
    return {"args": args, "uid": caller.uid, "pid": caller.pid}


async def h_stream(args, caller):
    async def gen():
        for i in range(args["n"]):
            await asyncio.sleep(args["gap"])
            yield {"data": str(i)}
        yield {"result": "done"}
    return Stream(gen())

HANDLERS = {"echo": h_echo, "stream": h_stream}


def connect(path: str, timeout: float = 10.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(path)
    return s


def lines(s: socket.socket) -> list[dict]:
    """Every reply line until the server closes the connection."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(x) for x in data.splitlines()]


def request(path: str, cmd: str, args: dict | None = None) -> dict:
    with connect(path) as s:
        s.sendall(json.dumps({"cmd": cmd, "args": args or {}}).encode() + b"\n")
        f = s.makefile("rb")
        while True:
            msg = json.loads(f.readline())
            if "ok" in msg:
                return msg


def test_the_handler_sees_the_caller_the_kernel_reports(serve):
    srv = serve()
    reply = request(srv.path, "echo", {"x": 1})
    assert reply["result"] == {"args": {"x": 1}, "uid": os.getuid(), "pid": os.getpid()}


def test_an_idle_or_slow_client_is_closed_after_the_request_timeout(serve):
    srv = serve(request_timeout=0.3)
    with connect(srv.path) as idle, connect(srv.path) as slow:
        slow.sendall(b'{"cmd": "ec')  # half a request, never finished
        t0 = time.monotonic()
        assert lines(idle) == []
        assert time.monotonic() - t0 < 3
        (reply,) = lines(slow)
        assert reply["ok"] is False and "no complete request line within 0.3s" in reply["error"]
    wait_for(lambda: srv.clients() == 0, 5, what="clients gone")
    # A client that asks in time is served, one request after another.
    with connect(srv.path) as s:
        for i in range(3):
            s.sendall(json.dumps({"cmd": "echo", "args": {"i": i}}).encode() + b"\n")
            assert json.loads(s.makefile("rb").readline())["result"]["args"] == {"i": i}


def test_a_stream_outlives_the_request_timeout(serve):
    """logs --follow and run-now --wait: the timeout is for the request only."""
    srv = serve(request_timeout=0.2)
    with connect(srv.path) as s:
        s.sendall(b'{"cmd": "stream", "args": {"n": 6, "gap": 0.15}}\n')
        got = lines(s)
    assert [m.get("data") for m in got[:-1]] == ["0", "1", "2", "3", "4", "5"]
    assert got[-1] == {"ok": True, "result": "done"}


def test_over_the_cap_a_connection_gets_one_line_and_one_log_line(serve, caplog):
    srv = serve(max_clients=4, privileged_reserve=0, request_timeout=30)
    caplog.set_level(logging.INFO, logger="cronrd.control")
    held = [connect(srv.path) for _ in range(4)]
    wait_for(lambda: srv.clients() == 4, 5, what="4 clients")
    for _ in range(20):
        with connect(srv.path) as s:
            (reply,) = lines(s)
            assert reply["ok"] is False and "too many connections" in reply["error"]
            assert "at most 4" in reply["error"]
    refusals = [r.getMessage() for r in caplog.records
                if "control_connections_refused" in r.getMessage()]
    assert refusals and len(refusals) <= 2 and "count=1" in refusals[0]
    held.pop().close()
    wait_for(lambda: srv.clients() == 3, 5, what="a slot freed")
    assert request(srv.path, "echo")["ok"] is True
    for s in held:
        s.close()


def test_one_unprivileged_user_gets_half_the_slots_root_keeps_a_reserve(serve, monkeypatch):
    srv = serve(max_clients=4, privileged_reserve=1, request_timeout=30)
    who = {"uid": 1000}
    real = Caller.from_socket
    monkeypatch.setattr(control.Caller, "from_socket", classmethod(
        lambda cls, sock: Caller.of(who["uid"], 1000, real(sock).pid)))
    alice = [connect(srv.path) for _ in range(2)]
    wait_for(lambda: srv.clients() == 2, 5, what="alice's 2 clients")
    with connect(srv.path) as s:
        (reply,) = lines(s)
        assert "too many connections" in reply["error"] and "2 of them from uid 1000" \
            in reply["error"]
    who["uid"] = 1001
    bob = [connect(srv.path) for _ in range(2)]
    wait_for(lambda: srv.clients() == 4, 5, what="bob's 2 clients")
    who["uid"] = 1002  # the cap is full for everyone but root
    with connect(srv.path) as s:
        assert "too many connections" in lines(s)[0]["error"]
    who["uid"] = 0
    assert request(srv.path, "echo")["result"]["uid"] == 0
    for s in alice + bob:
        s.close()


def test_an_oversized_request_is_refused_after_reading_at_most_the_limit(serve, monkeypatch):
    srv = serve(max_request=1024)
    biggest = []
    real = control.LineReader.readline

    async def watched(self, timeout):
        try:
            return await real(self, timeout)
        finally:
            biggest.append(len(self.buf))
    monkeypatch.setattr(control.LineReader, "readline", watched)
    with connect(srv.path) as s:
        try:
            s.sendall(b"x" * (1 << 20))
        except OSError:
            pass
        (reply,) = lines(s)
    assert reply["ok"] is False and "larger than 1024 bytes" in reply["error"]
    assert max(biggest) <= 1024
    big = json.dumps({"cmd": "echo", "args": {"pad": "y" * 900}}).encode()
    with connect(srv.path) as s:  # just under the limit: served
        s.sendall(big + b"\n")
        assert json.loads(s.makefile("rb").readline())["result"]["args"]["pad"] == "y" * 900


SERVER_WITH_FEW_FILES = """
import asyncio, logging, os, resource, sys
from cronrd.runtime.control.server import ControlServer
logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format="%(levelname)s %(name)s %(message)s")
async def echo(args, caller):
    return "pong"
async def main():
    server = ControlServer(sys.argv[1], {"echo": echo}, max_clients=500,
                           request_timeout=60, summary_interval=60)
    await server.start()
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
    print("ready", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def test_out_of_file_descriptors_the_server_backs_off_without_tracebacks(tmp_path):
    """accept() failing with EMFILE must neither spin nor log per attempt."""
    path = str(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-c", SERVER_WITH_FEW_FILES, path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    held = []
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for _ in range(60):  # more than its 40 descriptors
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            held.append(s)
        server = psutil.Process(proc.pid)
        wait_for(lambda: server.num_fds() >= 38, 5, what="the server out of descriptors")
        cpu0 = sum(server.cpu_times()[:2])
        time.sleep(2.0)  # measuring: how busy is it while it cannot accept?
        busy = sum(server.cpu_times()[:2]) - cpu0
        assert busy < 0.5, f"{busy:.2f}s of CPU in 2s: accept() is spinning"
        for s in held:
            s.close()
        held.clear()
        # Descriptors freed: it accepts again and answers.
        wait_for(lambda: request(path, "echo")["result"] == "pong", 10,
                 what="an answer after the descriptors were freed")
    finally:
        for s in held:
            s.close()
        proc.kill()
        _, err = proc.communicate(10)
    assert "Traceback" not in err, err[-3000:]
    failed = [x for x in err.splitlines() if "control_accept_failed" in x]
    assert 1 <= len(failed) <= 2, err[-3000:]
    assert "Too many open files" in failed[0]

"""The faces' process's end (faces_child.py); the two ends together are in
test_faces_host.py, a real faces' process in
tests/integration/test_faces_process.py."""

import asyncio
import socket
import threading

import pytest

from cronrd.errors import CronrdError
from cronrd.runtime import faces_child
from cronrd.runtime import faces_wire as W
from cronrd.runtime.faces_child import Channel, RemoteLeadership


def channel(monkeypatch, timeout: float = 5.0):
    monkeypatch.setattr(faces_child, "CALL_TIMEOUT", timeout)
    ours, theirs = socket.socketpair()
    return Channel(None, None, theirs, {"is_leader": True}), ours


def test_a_blocking_call_skips_the_late_answer_of_one_that_timed_out(monkeypatch):
    chan, daemon = channel(monkeypatch, timeout=0.2)
    with daemon:
        with pytest.raises(CronrdError, match="did not answer members_status within 0.2s"):
            chan.blocking("members_status")
        first = W.recv_frame(daemon)

        def answer():
            second = W.recv_frame(daemon)
            daemon.sendall(W.dumps((first[0], "ok", "stale")))   # the late one
            daemon.sendall(W.dumps((second[0], "ok", {"x": 1})))
        t = threading.Thread(target=answer)
        t.start()
        monkeypatch.setattr(faces_child, "CALL_TIMEOUT", 5.0)
        chan.sync.settimeout(5.0)
        assert chan.blocking("next_fires", ["x"]) == {"x": 1}
        t.join()


def test_a_blocking_call_to_a_daemon_that_is_gone_says_so(monkeypatch):
    chan, daemon = channel(monkeypatch)
    daemon.close()
    with pytest.raises(CronrdError, match="the daemon is gone"):
        chan.blocking("problems")


def test_a_leaders_next_fires_are_asked_of_the_daemon(monkeypatch):
    chan, daemon = channel(monkeypatch)
    with daemon:
        def answer():
            rid, op, args = W.recv_frame(daemon)
            daemon.sendall(W.dumps((rid, "ok", {args[0][0]: 120, "op": op})))
        t = threading.Thread(target=answer)
        t.start()
        assert RemoteLeadership(chan).next_fires(["j"]) == {"j": 120, "op": "next_fires"}
        t.join()
        chan.state = {"is_leader": False}
        assert RemoteLeadership(chan).next_fires(["j"]) == {}


def test_pending_calls_fail_when_the_daemon_goes_away():
    async def go():
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_unix_connection(sock=a)
        chan = Channel(reader, writer, socket.socket(), {})
        call = asyncio.ensure_future(chan.call("read_barrier"))
        await asyncio.sleep(0)
        b.close()
        await chan.run()
        with pytest.raises(CronrdError, match="stopping"):
            await call
    asyncio.run(go())


def test_it_is_not_a_command(capsys):
    assert faces_child.main([]) == 2
    assert faces_child.main(["x", "y"]) == 2
    assert "the daemon starts this" in capsys.readouterr().err

"""The wire between the daemon and its faces' process (faces_wire.py)."""

import asyncio
import os
import pickle
import socket
import struct

import pytest

from cronrd.errors import CronrdError, RequestError
from cronrd.runtime import faces_wire as W
from cronrd.runtime.control.access import Caller
from cronrd.state import commands as C


def frame_of(payload: bytes) -> bytes:
    return struct.pack("!I", len(payload)) + payload


async def read_back(data: bytes, narrow: bool):
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await W.read_frame(reader, narrow)


def test_requests_callers_and_commands_cross_the_narrow_unpickler():
    caller = Caller(uid=-1, gid=-1, pid=0, name="token:ops", token={"name": "ops", "role": "viewer"})
    cmd = C.SetPaused(name="backup", paused=True, note="maintenance", by="root", at=1.5)
    msg = ("call", 7, "table", ("pause", {"job": "backup"}, caller), {1, 2}, frozenset({3}),
           b"\x00", 2.5, None, [cmd])
    assert asyncio.run(read_back(W.dumps(msg), narrow=True)) == msg


@pytest.mark.parametrize("evil", [os.system, print, socket.socket, asyncio.get_event_loop])
def test_a_pickle_naming_a_function_or_a_foreign_class_is_refused(evil):
    # A faces' process that was taken over must not make the daemon call
    # something by sending a pickle of it.
    with pytest.raises(W.WireError, match="not data the daemon accepts"):
        asyncio.run(read_back(frame_of(pickle.dumps(("call", 1, "h", (evil,)))), narrow=True))


def test_a_cronrd_class_that_is_not_data_is_refused_too():
    from cronrd.runtime.faces_host import FacesHost
    payload = pickle.dumps(FacesHost)   # a class, not a dataclass, enum or error
    with pytest.raises(W.WireError, match="FacesHost"):
        asyncio.run(read_back(frame_of(payload), narrow=True))


def test_the_daemons_own_frames_are_read_whole_on_the_faces_side():
    assert asyncio.run(read_back(W.dumps(("reply", 1, "ok", print)), narrow=False))[3] is print


def test_an_oversized_or_cut_frame_ends_the_wire():
    with pytest.raises(W.WireError, match="over the"):
        asyncio.run(read_back(struct.pack("!I", W.MAX_FRAME + 1), narrow=True))
    with pytest.raises(EOFError):
        asyncio.run(read_back(W.dumps(("x",))[:-2], narrow=True))
    with pytest.raises(W.WireError, match="unreadable"):
        asyncio.run(read_back(frame_of(b"not a pickle"), narrow=True))


class Refusal(CronrdError):
    def __init__(self, job: str, *, hint: str):
        super().__init__(f"{job}: {hint}")
        self.job = job


def test_an_error_crosses_with_its_class_message_and_attributes():
    # (its __init__ takes other parameters than its args: not called again)
    back = W.unpack_error(pickle.loads(pickle.dumps(W.pack_error(Refusal("db", hint="no")))))
    assert type(back) is Refusal and str(back) == "db: no" and back.job == "db"
    back = W.unpack_error(W.pack_error(RequestError("no job named 'x'")))
    assert isinstance(back, RequestError) and str(back) == "no job named 'x'"


def test_an_error_whose_class_cannot_cross_becomes_a_plain_one():
    class Local(Exception):
        pass
    back = W.unpack_error(W.pack_error(Local("odd")))
    assert type(back) is CronrdError and "Local: odd" in str(back)


def test_blocking_frames_over_a_socket_pair():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(W.dumps((3, "ok", {"role": "leader"})))
        assert W.recv_frame(b) == (3, "ok", {"role": "leader"})
        a.close()
        with pytest.raises(EOFError):
            W.recv_frame(b)

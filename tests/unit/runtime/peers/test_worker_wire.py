"""The worker port's frames (peers/worker_wire.py): bounded, JSON objects
only, and answers matched to their requests."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.errors import CronrdError, NotLeader, PermissionDenied, StateError
from cronrd.runtime.peers import worker_wire as W


def _reader(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return r


async def _a_frame_goes_and_comes_back_whole():
    msg = {"op": "ping", "id": 3, "offset": -0.25}
    assert await W.read_frame(_reader(W.encode(msg) + W.encode({"re": 3, "ok": None}))) == msg


async def _frames_that_break_the_protocol_are_refused():
    with pytest.raises(W.WireError, match="over the"):
        await W.read_frame(_reader(W.HEADER.pack(W.MAX_FRAME + 1)))
    with pytest.raises(W.WireError, match="not JSON"):
        await W.read_frame(_reader(W.HEADER.pack(3) + b"{x}"))
    with pytest.raises(W.WireError, match="not a JSON object"):
        await W.read_frame(_reader(W.HEADER.pack(2) + b"[]"))
    with pytest.raises(asyncio.IncompleteReadError):
        await W.read_frame(_reader(W.HEADER.pack(10) + b"{}"))
    with pytest.raises(W.WireError, match="over the"):
        W.encode({"data": "x" * W.MAX_FRAME})


def test_errors_keep_their_kind_across_the_wire():
    for exc in (PermissionDenied("not yours"), StateError("later")):
        back = W.error_of(W.answer_error(1, exc))
        assert type(back) is type(exc) and str(back) == str(exc)
    back = W.error_of(W.answer_error(1, NotLeader("b")))
    assert isinstance(back, NotLeader) and back.leader == "b"
    # an unknown kind is a plain CronrdError, never a class the sender names
    assert type(W.error_of({"re": 1, "error": "x", "kind": "SystemExit"})) is CronrdError


class _Transport:
    def __init__(self):
        self.size = 0
        self.aborted = False

    def get_write_buffer_size(self):
        return self.size

    def abort(self):
        self.aborted = True


class _Writer:
    def __init__(self):
        self.transport = _Transport()
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data):
        self.sent.append(data)

    def close(self):
        self.closed = True


async def _a_channel_matches_answers_and_fails_what_is_left_when_it_closes():
    w = _Writer()
    chan = W.Channel(w)
    ask = asyncio.ensure_future(chan.request("propose", {"cmd": "x"}, 5))
    await asyncio.sleep(0)
    sent = await W.read_frame(_reader(w.sent[0]))
    assert sent["op"] == "propose" and sent["cmd"] == "x"
    chan.answered({"re": sent["id"], "ok": {"won": [1]}})
    assert await ask == {"won": [1]}
    ask = asyncio.ensure_future(chan.request("propose", {}, 5))
    await asyncio.sleep(0)
    chan.answered({"re": 999, "ok": 1})      # an answer to nothing is ignored
    chan.answered({"re": [1], "ok": 1})      # (an unhashable id too)
    chan.close()
    with pytest.raises(StateError, match="closed"):
        await ask
    assert w.transport.aborted   # at once: a TLS close would wait for a dead peer


async def _a_request_times_out_and_a_slow_peer_is_cut_off():
    w = _Writer()
    chan = W.Channel(w)
    with pytest.raises(StateError, match="no answer within"):
        await chan.request("ping", {}, 0.01)
    w.transport.size = W.WRITE_LIMIT + 1
    assert chan.send({"op": "assigned"}) is False and w.transport.aborted
    with pytest.raises(StateError, match="closed"):
        await chan.request("ping", {}, 1)


def test_a_frame_goes_and_comes_back_whole():
    asyncio.run(_a_frame_goes_and_comes_back_whole())


def test_frames_that_break_the_protocol_are_refused():
    asyncio.run(_frames_that_break_the_protocol_are_refused())


def test_a_channel_matches_answers_and_fails_what_is_left_when_it_closes():
    asyncio.run(_a_channel_matches_answers_and_fails_what_is_left_when_it_closes())


def test_a_request_times_out_and_a_slow_peer_is_cut_off():
    asyncio.run(_a_request_times_out_and_a_slow_peer_is_cut_off())


def test_tls_connections_read_in_small_buffers():
    import asyncio.sslproto as sslproto
    W.small_tls_buffers()
    assert sslproto.SSLProtocol.max_size == W.TLS_READ_BUFFER
    W.small_tls_buffers()   # (idempotent)
    assert sslproto.SSLProtocol.max_size == W.TLS_READ_BUFFER

"""The pieces of the SSE routes (cronrd/runtime/http/stream.py): log events
and their byte positions, the event feed's ring and its resume points."""

from __future__ import annotations

import base64

from cronrd.runtime.http.stream import EventFeed, log_events, sse
from cronrd.runtime.runs import output as O
from cronrd.state import commands as C
from tests.unit.state.test_state import T0, Log


def chunk(parts: list[tuple[int, bytes]], offset: int, more: bool = False) -> dict:
    data = b"".join(d for _, d in parts)
    return {"data": base64.b64encode(data).decode(), "offset": offset, "more": more,
            "parts": [[s, 1.0, len(d)] for s, d in parts]}


def test_each_stretch_is_an_event_whose_id_is_the_position_after_it():
    got = log_events(chunk([(O.STDOUT, b"ab\n"), (O.STDERR, b"err\n")], 17), {})
    assert got == [({"stream": "stdout", "time": 1.0, "text": "ab\n"}, 13),
                   ({"stream": "stderr", "time": 1.0, "text": "err\n"}, 17)]


def test_a_character_cut_in_two_is_not_counted_until_it_is_whole():
    snow = "\u2603".encode()  # three bytes
    decoders: dict = {}
    first = log_events(chunk([(O.STDOUT, b"x" + snow[:2])], 3), decoders)
    assert first == [({"stream": "stdout", "time": 1.0, "text": "x"}, 1)]  # resume at 1
    second = log_events(chunk([(O.STDOUT, snow[2:] + b"y")], 5), decoders)
    assert second == [({"stream": "stdout", "time": 1.0, "text": "\u2603y"}, 5)]


def test_a_stretch_before_one_of_cronrds_notes_has_no_id():
    got = log_events(chunk([(O.STDOUT, b"head"), (O.CRONRD, b"[dropped 900 bytes]\n"),
                            (O.STDOUT, b"tail")], 2000), {})
    assert [end for _, end in got] == [None, 1996, 2000]


def test_sse_puts_the_data_on_one_line():
    assert sse("log", {"text": "a\nb"}, 7) == b'id: 7\nevent: log\ndata: {"text":"a\\nb"}\n\n'


def feed_over(log: Log, size: int = 100) -> EventFeed:
    feed = EventFeed(log.sm.conn, lambda: "n1", lambda: log.index, size=size)
    return feed


def apply(log: Log, feed: EventFeed, cmd) -> None:
    log.apply(cmd)
    feed.on_effects(log.effects)
    log.effects = []


def test_pauses_and_runs_become_events_with_the_batch_index():
    log = Log()
    log.put("j", schedule="@yearly")
    feed = feed_over(log)
    apply(log, feed, C.SetPaused(name="j", paused=True, at=T0 + 1, note="n", by="me"))
    apply(log, feed, C.ManualRun(job="j", node="n1", at=T0 + 2))
    run = log.run(1)
    assert run is not None and run.state == "assigned"
    apply(log, feed, C.RunStarted(run_id=run.run_id, node="n1", token=run.token, pid=9,
                                  started_at=T0 + 3, log_path=""))
    log.finish(run.run_id, exit_code=0)
    feed.on_effects(log.effects)
    events, seq, lost = feed.read(0)
    kinds = [k for _, _, k, _ in events]
    assert kinds[:3] == ["job_paused", "run_started", "run_ended"] and not lost
    assert events[0][3]["note"] == "n" and events[2][3]["state"] == "succeeded"
    assert all(last for _, last, _, _ in events[:3])  # one event per batch here
    assert [i for i, _, _, _ in events] == sorted(i for i, _, _, _ in events)
    # resume points: after the pause's index, the run's events
    after = feed.position_after(events[0][0])
    assert [k for _, _, k, _ in feed.read(after)[0]][:2] == ["run_started", "run_ended"]
    assert feed.read(seq) == ([], seq, False)


def test_a_client_behind_the_ring_is_told_it_lost_events():
    log = Log()
    log.put("j", schedule="@yearly")
    feed = feed_over(log, size=3)
    start = feed.newest_seq()
    for i in range(5):
        apply(log, feed, C.SetPaused(name="j", paused=i % 2 == 0, at=T0 + i))
    events, seq, lost = feed.read(start)
    assert lost and len(events) == 3 and seq == feed.newest_seq()
    assert feed.position_after(0) is None  # before what the node kept: a reset


def test_a_snapshot_installed_is_a_reset_and_earlier_ids_cannot_resume():
    from cronrd.state.effects import StateRestored
    log = Log()
    log.put("j", schedule="@yearly")
    feed = feed_over(log)
    apply(log, feed, C.SetPaused(name="j", paused=True, at=T0 + 1))
    before = feed.read(0)[0][-1][0]
    log.index += 5  # (as a snapshot at a later index would)
    feed.on_effects([StateRestored()])
    events, _, _ = feed.read(0)
    assert events[-1][2] == "reset" and events[-1][0] == log.index
    assert feed.position_after(before) is None
    assert feed.position_after(log.index) == feed.newest_seq()


class StateReads:
    """The parts of the daemon's Handlers the stream routes use, over a
    state machine applied in-process."""

    def __init__(self, log: Log):
        self.conn = log.sm.conn
        self.machine = log.sm
        self.log = self
        self.leader = "n1"
        self.listeners = []

    def subscribe(self, listener) -> None:
        self.listeners.append(listener)


def test_an_event_stream_ends_when_its_token_is_revoked(monkeypatch):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from cronrd.config import HttpConfig
    from cronrd.runtime.http import stream as http_stream
    from cronrd.runtime.http.server import HttpServer
    monkeypatch.setattr(http_stream, "KEEPALIVE", 0.2)
    log = Log()
    log.put("j", schedule="@yearly")
    tokens = {"v": {"name": "v", "role": "viewer", "jobs": "", "expires_at": None}}
    reads = StateReads(log)
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=dict, metrics=None, find_token=tokens.get,
                        now=lambda: T0, reads=reads)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            r = await client.get("/api/v1/events", headers={"Authorization": "Bearer v"})
            assert r.status == 200
            log.apply(C.SetPaused(name="j", paused=True, at=T0 + 1, note="x"))
            for listener in reads.listeners:
                listener(log.effects)
            seen = b""
            while b"job_paused" not in seen:
                seen += await asyncio.wait_for(r.content.readany(), 5)
            del tokens["v"]  # revoked: the stream ends at its next keep-alive
            rest = await asyncio.wait_for(r.content.read(), 5)
            assert b"event:" not in rest
            again = await client.get("/api/v1/events", headers={"Authorization": "Bearer v"})
            assert again.status == 401
    asyncio.run(main())


def test_a_node_serves_a_bounded_number_of_streams(monkeypatch):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from cronrd.config import HttpConfig
    from cronrd.runtime.http import stream as http_stream
    from cronrd.runtime.http.server import HttpServer
    monkeypatch.setattr(http_stream, "MAX_STREAMS", 1)
    log = Log()
    tokens = {"v": {"name": "v", "role": "viewer", "jobs": "", "expires_at": None}}
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=dict, metrics=None, find_token=tokens.get,
                        now=lambda: T0, reads=StateReads(log))
    auth = {"Authorization": "Bearer v"}

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            first = await client.get("/api/v1/events", headers=auth)
            assert first.status == 200
            second = await client.get("/api/v1/events", headers=auth)
            assert second.status == 503 and "another node" in (await second.json())["detail"]
            first.close()
            async def freed():
                while True:
                    r = await client.get("/api/v1/events", headers=auth)
                    if r.status == 200:
                        return r
                    await asyncio.sleep(0.05)
            (await asyncio.wait_for(freed(), 5)).close()
    asyncio.run(main())


def test_a_stream_opened_with_the_session_cookie_lives_until_its_session_ends(monkeypatch):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from cronrd.config import HttpConfig
    from cronrd.runtime.http import stream as http_stream
    from cronrd.runtime.http.server import HttpServer
    from cronrd.runtime.http.session import COOKIE
    monkeypatch.setattr(http_stream, "KEEPALIVE", 0.1)
    # the session "s" of token v (a logout or its token's revocation ends it)
    sessions = {"s": {"name": "v", "role": "viewer", "jobs": "", "expires_at": None}}
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=dict, metrics=None,
                        find_session=lambda secret, now: sessions.get(secret),
                        now=lambda: T0, reads=StateReads(Log()))

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            r = await client.get("/api/v1/events", cookies={COOKIE: "s"})
            assert r.status == 200
            got = b""
            while got.count(b": keepalive") < 3:  # still open after several checks
                more = await asyncio.wait_for(r.content.readany(), 5)
                assert more, "the stream ended while its session was live"
                got += more
            del sessions["s"]
            await asyncio.wait_for(r.content.read(), 5)  # ends
    asyncio.run(main())

"""Requests between daemons (PeerRPC) over a fake in-process transport."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from cronrd.errors import NotLeader, StateError
from cronrd.raft.types import Message, MsgType
from cronrd.runtime.peers.rpc import PeerError, PeerRPC, PeerUnavailable


class Net:
    """Delivers messages between PeerRPC instances on the next loop turn."""

    def __init__(self):
        self.nodes: dict[str, PeerRPC] = {}
        self.down: set[str] = set()      # messages to these vanish (send still says True)
        self.full: set[str] = set()      # send to these returns False
        self.held: list[Message] = []    # messages to a node in ``hold`` wait here
        self.hold: set[str] = set()
        self.sent: list[Message] = []

    def add(self, node_id: str, handlers: dict) -> PeerRPC:
        rpc = PeerRPC(node_id, Transport(self, node_id), handlers)
        self.nodes[node_id] = rpc
        return rpc

    def deliver(self, msg: Message) -> None:
        asyncio.get_running_loop().call_soon(self.nodes[msg.to].on_message, msg)


class Transport:
    def __init__(self, net: Net, node_id: str):
        self.net = net
        self.node_id = node_id

    def send(self, msg: Message) -> bool:
        net = self.net
        assert msg.frm == self.node_id
        if msg.to in net.full or msg.to not in net.nodes:
            return False
        net.sent.append(msg)
        if msg.to in net.down:
            return True
        if msg.to in net.hold:
            net.held.append(msg)
            return True
        net.deliver(msg)
        return True


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def until(pred, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def answers(net: Net) -> list[Message]:
    return [m for m in net.sent if m.type == MsgType.RPC_RESP]


def request(frm: str, to: str, method: str, data: bytes, index: int = 99) -> Message:
    return Message(type=MsgType.RPC_REQ, to=to, frm=frm, term=0, index=index,
                   context=method.encode(), data=data)


# -- answers ------------------------------------------------------------------------------
def test_a_call_returns_the_handlers_result_and_the_handler_sees_the_caller():
    async def main():
        net = Net()
        seen = []

        async def echo(frm, args):
            seen.append((frm, args))
            return {"got": args["x"] * 2, "list": [1, "two"]}
        a = net.add("a", {})
        net.add("b", {"echo": echo})
        assert await a.call("b", "echo", {"x": 21}) == {"got": 42, "list": [1, "two"]}
        assert seen == [("a", {"x": 21})]
        # Many calls in flight at once each get their own answer.
        results = await asyncio.gather(*(a.call("b", "echo", {"x": i}) for i in range(20)))
        assert [r["got"] for r in results] == [2 * i for i in range(20)]
        assert a.stats["calls"] == 21 and net.nodes["b"].stats["served"] == 21
        assert not a._waiting
    run(main())


def test_a_cronrd_error_in_the_handler_is_a_peer_error_with_its_kind_and_message(caplog):
    async def main():
        net = Net()

        async def refuse(frm, args):
            raise StateError("run 7 is already succeeded")

        async def not_leader(frm, args):
            raise NotLeader("c")
        a = net.add("a", {})
        net.add("b", {"refuse": refuse, "propose": not_leader})
        with pytest.raises(PeerError) as exc:
            await a.call("b", "refuse", {})
        assert exc.value.kind == "StateError"
        assert str(exc.value) == "run 7 is already succeeded"
        assert exc.value.leader is None
        # NotLeader carries the leader it knows, for the caller to retry there.
        with pytest.raises(PeerError) as exc:
            await a.call("b", "propose", {})
        assert exc.value.kind == "NotLeader" and exc.value.leader == "c"
        assert net.nodes["b"].stats["refused"] == 2
    with caplog.at_level(logging.DEBUG, logger="cronrd.rpc"):
        run(main())
    # Expected refusals are not logged as failures.
    assert "peer_request_failed" not in caplog.text


@pytest.mark.parametrize("method, data, why", [
    ("nosuch", b"{}", "unknown peer request 'nosuch'"),
    ("echo", b"{not json", "arguments are not JSON"),
    ("echo", b"\xff\xfe", "arguments are not JSON"),
    ("echo", b"[1, 2]", "arguments must be an object"),
    ("echo", b"null", "arguments must be an object"),
])
def test_a_bad_request_is_answered_with_an_error_and_the_node_keeps_serving(method, data, why):
    async def main():
        net = Net()
        calls = []

        async def echo(frm, args):
            calls.append(args)
            return args
        net.add("a", {})
        b = net.add("b", {"echo": echo})
        b.on_message(request("a", "b", method, data, index=5))
        await until(lambda: answers(net))
        (resp,) = answers(net)
        assert (resp.to, resp.frm, resp.index, resp.reject) == ("a", "b", 5, True)
        body = json.loads(resp.data)
        assert body["kind"] == "RequestError" and why in body["error"]
        assert calls == []
        # Still serving.
        assert await net.nodes["a"].call("b", "echo", {"ok": 1}) == {"ok": 1}
    run(main())


def test_an_unexpected_exception_in_a_handler_is_answered_and_logged(caplog):
    async def main():
        net = Net()

        async def broken(frm, args):
            return args["missing"]
        a = net.add("a", {})
        net.add("b", {"broken": broken})
        with pytest.raises(PeerError) as exc:
            await a.call("b", "broken", {})
        assert exc.value.kind == "KeyError"
        assert "missing" in str(exc.value)
    with caplog.at_level(logging.ERROR, logger="cronrd.rpc"):
        run(main())
    failed = [r for r in caplog.records if "peer_request_failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "method=broken from=a" in failed[0].getMessage()


def test_an_answer_that_is_not_json_serialisable_is_an_error_answer(caplog):
    async def main():
        net = Net()

        async def odd(frm, args):
            return {"when": object()}
        a = net.add("a", {})
        net.add("b", {"odd": odd})
        with pytest.raises(PeerError) as exc:
            await a.call("b", "odd", {})
        assert exc.value.kind == "TypeError"
    with caplog.at_level(logging.ERROR, logger="cronrd.rpc"):
        run(main())


def test_an_unreadable_answer_fails_the_call():
    async def main():
        net = Net()
        net.hold.add("b")
        a = net.add("a", {})
        net.add("b", {})
        call = asyncio.ensure_future(a.call("b", "x", {}, timeout=5))
        await until(lambda: net.held)
        req = net.held[0]
        a.on_message(Message(type=MsgType.RPC_RESP, to="a", frm="b", term=0,
                             index=req.index, data=b"{garbage"))
        with pytest.raises(PeerError, match="unreadable answer"):
            await call
    run(main())


# -- no answer ----------------------------------------------------------------------------
def test_a_peer_that_never_answers_gives_peer_unavailable_after_the_timeout():
    async def main():
        net = Net()
        net.down.add("b")
        a = net.add("a", {})
        net.add("b", {})
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(PeerUnavailable, match="did not answer ping within 0.2s"):
            await a.call("b", "ping", {}, timeout=0.2)
        assert 0.15 <= loop.time() - start < 2.0
        assert a.stats["timeouts"] == 1
        assert not a._waiting
    run(main())


def test_a_late_answer_after_the_timeout_is_ignored():
    async def main():
        net = Net()
        net.hold.add("b")

        async def slow(frm, args):
            return {"n": args["n"]}
        a = net.add("a", {})
        net.add("b", {"slow": slow})
        with pytest.raises(PeerUnavailable):
            await a.call("b", "slow", {"n": 1}, timeout=0.05)
        # Now b gets the old request and answers it: nothing breaks, and the
        # next call gets its own answer, not the stale one.
        net.hold.clear()
        for msg in net.held:
            net.deliver(msg)
        await until(lambda: answers(net))
        await asyncio.sleep(0)  # its delivery to a (call_soon)
        assert await a.call("b", "slow", {"n": 2}) == {"n": 2}
        assert not a._waiting
    run(main())


def test_send_refused_by_the_transport_is_peer_unavailable_at_once():
    async def main():
        net = Net()
        net.full.add("b")
        a = net.add("a", {})
        net.add("b", {})
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(PeerUnavailable, match="cannot send ping to node b"):
            await a.call("b", "ping", {}, timeout=5)
        assert loop.time() - start < 1.0
        with pytest.raises(PeerUnavailable):
            await a.call("nobody", "ping", {}, timeout=5)
        assert not a._waiting
    run(main())


def test_close_fails_the_calls_waiting_for_an_answer():
    async def main():
        net = Net()
        net.down.add("b")
        a = net.add("a", {})
        net.add("b", {})
        calls = [asyncio.ensure_future(a.call("b", "ping", {"i": i}, timeout=10))
                 for i in range(3)]
        await until(lambda: len(a._waiting) == 3)
        loop = asyncio.get_running_loop()
        start = loop.time()
        a.close()
        for call in calls:
            with pytest.raises(PeerUnavailable, match="stopping"):
                await call
        assert loop.time() - start < 1.0
    run(main())


def test_close_cancels_requests_being_served():
    async def main():
        net = Net()
        started = asyncio.Event()
        cancelled = asyncio.Event()

        async def forever(frm, args):
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        net.down.add("a")
        a = net.add("a", {})
        b = net.add("b", {"forever": forever})
        asyncio.ensure_future(a.call("b", "forever", {}, timeout=10))
        await asyncio.wait_for(started.wait(), 5)
        b.close()
        await asyncio.wait_for(cancelled.wait(), 5)
        a.close()
    run(main())


# -- answers must come from the request they answer ------------------------------------------
def test_an_answer_from_another_peer_than_the_one_asked_is_ignored():
    """Request ids are per daemon, not per peer: an RPC_RESP from node c
    carrying the id of a request sent to node b must not resolve it."""
    async def main():
        net = Net()
        net.hold.add("b")
        a = net.add("a", {})
        net.add("b", {})
        net.add("c", {})
        call = asyncio.ensure_future(a.call("b", "propose", {}, timeout=0.3))
        await until(lambda: net.held)
        req = net.held[0]
        a.on_message(Message(type=MsgType.RPC_RESP, to="a", frm="c", term=0, index=req.index,
                             data=json.dumps({"from": "c"}).encode()))
        with pytest.raises(PeerUnavailable):
            await call  # b never answered
    run(main())


def test_an_answer_to_a_previous_incarnation_does_not_resolve_a_new_request():
    """A daemon restarts while the leader still works on its forwarded
    proposal; the leader's answer to the old request must not be taken as
    the answer to the new daemon's first request (ids restart at 1)."""
    async def main():
        net = Net()
        net.hold.add("b")
        old = net.add("a", {})
        net.add("b", {})
        first = asyncio.ensure_future(old.call("b", "propose", {"cmd": "old"}, timeout=10))
        await until(lambda: net.held)
        old_req = net.held.pop()
        old.close()
        with pytest.raises(PeerUnavailable):
            await first
        new = net.add("a", {})  # the restarted daemon
        second = asyncio.ensure_future(new.call("b", "read_log", {"run_id": 1}, timeout=0.3))
        await until(lambda: net.held)
        # b answers the old request now.
        new.on_message(Message(type=MsgType.RPC_RESP, to="a", frm="b", term=0,
                               index=old_req.index,
                               data=json.dumps({"run_id": 12, "state": "assigned"}).encode()))
        with pytest.raises(PeerUnavailable):
            await second
    run(main())


def test_one_peer_cannot_flood_a_node_with_requests():
    """Review of issue 9: every request started a task, without a bound."""
    import asyncio

    from cronrd.runtime.peers import rpc as peer_rpc
    from cronrd.raft.types import Message, MsgType

    class Sink:
        def __init__(self):
            self.sent = []

        def send(self, m):
            self.sent.append(m)
            return True

    async def main():
        gate = asyncio.Event()

        async def slow(frm, args):
            await gate.wait()
            return {"ok": True}
        t = Sink()
        rpc = peer_rpc.PeerRPC("a", t, {"slow": slow})
        n = peer_rpc.MAX_SERVING_PER_PEER + 10
        for i in range(n):
            rpc.on_message(Message(type=MsgType.RPC_REQ, to="a", frm="b", term=0, index=i,
                                   context=b"slow", data=b"{}"))
        rpc.on_message(Message(type=MsgType.RPC_REQ, to="a", frm="c", term=0, index=99,
                               context=b"slow", data=b"{}"))
        await asyncio.sleep(0)
        refused = [m for m in t.sent if m.reject]
        assert len(refused) == 10 and all(m.to == "b" for m in refused)
        assert len(rpc._tasks) == peer_rpc.MAX_SERVING_PER_PEER + 1  # c still served
        gate.set()
        await asyncio.sleep(0.05)
        assert not rpc._tasks and rpc._serving == {}
    asyncio.run(main())

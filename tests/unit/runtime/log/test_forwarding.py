"""A follower's proposals, batched for the leader (runtime/log/forwarding.py):
one request per loop turn and leader, each command answered on its own. The
leader's side (each command checked alone, bad batches refused):
security/test_peer_port.py."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.runtime.log import forwarding as F
from cronrd.runtime.peers.rpc import PeerError, PeerUnavailable


class Leader:
    """Answers each command with ok (its text reversed) or an error for "bad"."""

    def __init__(self, fail: Exception | None = None, answer=None):
        self.requests, self.fail, self.answer = [], fail, answer

    async def call(self, leader, args):
        self.requests.append((leader, list(args["cmds"])))
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        if self.answer is not None:
            return self.answer
        return {"results": [{"error": "refused", "kind": "Refused"} if c == "bad"
                            else {"ok": c[::-1]} for c in args["cmds"]]}


def test_one_turns_proposals_go_in_one_request_per_leader_each_answered_alone():
    async def main():
        leader = Leader()
        fw = F.Forwarder(leader.call)
        futs = [fw.forward("a", b"one"), fw.forward("a", b"bad"), fw.forward("b", b"two")]
        res = await asyncio.gather(*futs, return_exceptions=True)
        assert res[0] == "eno" and res[2] == "owt"
        assert isinstance(res[1], PeerError) and res[1].kind == "Refused"
        assert sorted(leader.requests) == [("a", ["one", "bad"]), ("b", ["two"])]
        # A later turn: a request of its own.
        assert await fw.forward("a", b"x") == "x" and len(leader.requests) == 3
    asyncio.run(main())


def test_a_turn_of_more_than_a_batch_is_split():
    async def main():
        leader = Leader()
        fw = F.Forwarder(leader.call)
        futs = [fw.forward("a", f"c{i}".encode()) for i in range(2 * F.BATCH + 1)]
        await asyncio.gather(*futs)
        assert [len(cmds) for _, cmds in leader.requests] == [F.BATCH, F.BATCH, 1]
    asyncio.run(main())


@pytest.mark.parametrize("fail", [PeerUnavailable("node a did not answer"),
                                  PeerError("not the leader", "NotLeader", "b")])
def test_a_request_that_fails_whole_fails_each_command_alike(fail):
    async def main():
        fw = F.Forwarder(Leader(fail=fail).call)
        res = await asyncio.gather(fw.forward("a", b"1"), fw.forward("a", b"2"),
                                   return_exceptions=True)
        assert all(r is fail for r in res)
    asyncio.run(main())


@pytest.mark.parametrize("answer", [{"results": [{"ok": 1}]}, {"nope": 1}, "x",
                                    {"results": [{"ok": 1}, "garbage"]}])
def test_an_answer_that_does_not_fit_is_an_error_not_a_result(answer):
    async def main():
        fw = F.Forwarder(Leader(answer=answer).call)
        res = await asyncio.gather(fw.forward("a", b"1"), fw.forward("a", b"2"),
                                   return_exceptions=True)
        assert isinstance(res[1], PeerError)
        if answer != {"results": [{"ok": 1}, "garbage"]}:
            assert isinstance(res[0], PeerError)
        else:
            assert res[0] == 1
    asyncio.run(main())

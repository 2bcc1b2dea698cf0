"""The control requests a job makes from inside a run: authorised by its
token (checked before anything is proposed, refusals audited), bounded,
waiting a while for the attempt's start to be committed; and the token and
checkpoint an attempt gets in its environment."""

from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace

import pytest

from cronrd.errors import PermissionDenied, UsageError
from cronrd.ops import admin as A
from cronrd.ops.typed import parse
from cronrd.runtime.control.access import Caller
from cronrd.runtime.control.checkpoints import CheckpointRequests
from cronrd.runtime.runs.launch import attempt_env
from cronrd.state import checkpoints as CK
from cronrd.state import commands as C
from tests.unit.state.test_state import T0, Log
from virtual_time import run_virtual

CALLER = Caller(uid=1000, gid=1000, pid=7, name="alice")


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return T0 + 10 + self.t

    def monotonic(self):
        return self.t


class FakeLog:
    """Proposals applied at once, in order, to a one-member state."""

    def __init__(self, log: Log):
        self.inner = log
        self.proposed = []

    async def propose(self, cmd):
        self.proposed.append(cmd)
        return self.inner.apply(cmd)


# The requests as the control table hands them over: the socket's JSON object
# parsed into its type (ops/admin.py).
def save(req, args):
    return req.save(parse(A.SaveCheckpoint, args), CALLER)


def get(req, args):
    return req.get(parse(A.GetCheckpoint, args), CALLER)


def heartbeat(req, args):
    return req.heartbeat(parse(A.Heartbeat, args), CALLER)


def setup(start: bool = True):
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    run = log.run(rid)
    env, secret = attempt_env(log.sm.conn, run, "/run/cronrd.sock")
    if start:
        log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=4,
                               started_at=T0 + 1, log_path="/l", secret=secret))
    audits = []

    async def audit(caller, command, target, allowed, detail=""):
        audits.append((command, target, allowed, detail))
    h = SimpleNamespace(conn=log.sm.conn, config=SimpleNamespace(node_id="n1"),
                        clock=Clock(), log=FakeLog(log), _audit=audit)
    return CheckpointRequests(h), h, rid, env["CRONRD_RUN_TOKEN"], audits


def test_an_attempt_gets_a_fresh_token_and_the_socket_and_only_its_hash_is_kept():
    req, h, rid, token, _ = setup()
    assert len(token) == 64 and CK.stored_hash(h.conn, rid) == CK.token_hash(token)
    other, _ = attempt_env(h.conn, h.log.inner.run(rid), "/s")
    assert other["CRONRD_RUN_TOKEN"] != token and other["CRONRD_SOCKET"] == "/s"


def test_save_get_and_heartbeat_with_the_runs_token():
    req, h, rid, token, audits = setup()
    args = {"run_id": rid, "token": token}
    res = run_virtual(save(req, {**args, "value_b64": base64.b64encode(
        "naïve".encode()).decode()}))
    assert res["bytes"] == 6
    assert run_virtual(get(req, args))["value"] == "naïve"
    run_virtual(heartbeat(req, {**args, "progress": 1, "message": "done"}))
    assert CK.heartbeat_of(h.conn, rid)[1:] == (1.0, "done")
    assert audits == []
    assert all(c.token_hash == CK.token_hash(token) for c in h.log.proposed)
    assert token not in repr(h.log.proposed)


def test_a_wrong_token_is_refused_audited_and_nothing_is_proposed():
    req, h, rid, token, audits = setup()
    with pytest.raises(PermissionDenied, match="checkpoint save` refused: the token does "
                                               "not belong to run"):
        run_virtual(save(req, {"run_id": rid, "token": "x" * 64, "value": "v"}))
    with pytest.raises(PermissionDenied, match="no run with id 99"):
        run_virtual(get(req, {"run_id": 99, "token": token}))
    assert h.log.proposed == []
    assert [(a[0], a[2]) for a in audits] == [("checkpoint_save", False),
                                              ("checkpoint_get", False)]


def test_bad_values_are_usage_errors_before_the_token_is_looked_at():
    req, h, rid, token, audits = setup()
    for args, match in (({"value": "x" * (CK.MAX_VALUE + 1)}, "64 KiB"),
                        ({"value_b64": base64.b64encode(b"\xff").decode()}, "not UTF-8"),
                        ({"value_b64": "!!"}, "not UTF-8")):
        with pytest.raises(UsageError, match=match):
            run_virtual(save(req, {"run_id": rid, "token": token, **args}))
    with pytest.raises(UsageError, match="from 0 to 1"):
        run_virtual(heartbeat(req, {"run_id": rid, "token": token, "progress": 2}))
    with pytest.raises(UsageError, match="token is empty or too long"):
        run_virtual(get(req, {"run_id": rid, "token": ""}))
    assert h.log.proposed == [] and audits == []


def test_a_request_waits_for_the_start_then_gives_up(monkeypatch):
    req, h, rid, token, audits = setup(start=False)
    real = asyncio.sleep

    async def sleep(_s):
        h.clock.t += 1.0   # time passes; the start never comes
        await real(0)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    with pytest.raises(PermissionDenied, match="token does not belong"):
        run_virtual(get(req, {"run_id": rid, "token": token}))
    assert h.clock.t >= 10.0


def test_heartbeats_in_a_tight_loop_reach_the_log_once_a_second_the_newest_last():
    # Before: every `cronrd heartbeat` was a write to the replicated log, so
    # a job calling it in a loop flooded the log (and every node's disk).
    req, h, rid, token, audits = setup()
    args = {"run_id": rid, "token": token}

    async def main():
        for i in range(50):                        # 50 heartbeats within 0.49 s
            h.clock.t = i * 0.01
            res = await heartbeat(req, {**args, "progress": i / 100, "message": f"m{i}"})
            assert res["run_id"] == rid and res.get("coalesced", False) == (i > 0)
        assert len(h.log.proposed) == 1
        h.clock.t = 1.0
        for _ in range(100):                       # the held-back one goes at ~1 s
            if len(h.log.proposed) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(h.log.proposed) == 2
        assert CK.heartbeat_of(h.conn, rid)[1:] == (0.49, "m49")
        h.clock.t = 2.5                            # a quiet while later: sent at once
        await heartbeat(req, {**args, "message": "later"})
        assert len(h.log.proposed) == 3
    run_virtual(main())


def test_a_heartbeat_sent_at_once_drops_the_older_one_held_back():
    # Found in review: a beat arriving just after the second was sent at
    # once, and the task holding an older beat then sent that one too.
    req, h, rid, token, audits = setup()
    args = {"run_id": rid, "token": token}

    async def main():
        await heartbeat(req, {**args, "message": "first"})   # sent
        h.clock.t = 0.5
        assert (await heartbeat(req, {**args, "message": "held"}))["coalesced"]
        h.clock.t = 1.2                                   # before the task wakes
        await heartbeat(req, {**args, "message": "newest"})  # sent at once
        await asyncio.sleep(0.8)                          # the held one's time passes
        assert [c.message for c in h.log.proposed] == ["first", "newest"]
        assert req._heartbeat_tasks == {} and req._heartbeat_later == {}
    run_virtual(main())

"""The leader's side of the worker port (cluster/worker_hub.py): a worker
speaks only for itself, hears only its own runs, and is placed on only
while it answers with a good clock."""

from __future__ import annotations

import pytest

from cronrd.errors import PermissionDenied, RequestError
from cronrd.runtime.cluster import worker_hub as H
from cronrd.runtime.peers import worker_wire as W
from cronrd.state import commands as C
from cronrd.state.effects import CancelRequested, RunAssigned
from tests.unit.state.test_state import T0, Log
from tests.unit.state.test_versions import raise_to


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def now(self):
        return T0 + self.t

    def monotonic(self):
        return self.t


class FakeChan:
    def __init__(self):
        self.sent: list[dict] = []
        self.closed = False

    def send(self, msg):
        self.sent.append(msg)
        return True

    def close(self):
        self.closed = True


def _state():
    log = Log()
    log.apply(raise_to(2))
    log.apply(C.WorkerInfo(node="wk1", tags=("gpu",), capacity=4, version="0.3.0", at=T0))
    log.apply(C.WorkerInfo(node="wk2", tags=(), capacity=4, version="0.3.0", at=T0))
    log.put()
    mine = log.fire(T0 + 1, node="wk1")["run_id"]
    theirs = log.fire(T0 + 2, node="wk2")["run_id"]
    return log, mine, theirs


def _hub(log, clock=None):
    return H.WorkerHub("a", log.sm.conn, clock or FakeClock(), listen=("127.0.0.1", 0),
                       tls=None, is_leader=lambda: True, leader=lambda: "a",
                       propose=None, stamp=lambda cmd: cmd, members=lambda: ["a", "b", "c"],
                       node_timeout=10.0, max_clock_offset=0.5)


def _session(hub, node, clock, offset=0.0):
    s = H.Session(node, FakeChan(), ("gpu",), 4, "0.3.0", clock.t, clock.t, offset)
    hub.sessions[node] = s
    hub.contact[node] = clock.t
    return s


def test_a_worker_may_claim_and_report_on_its_own_runs():
    log, mine, _ = _state()
    hub = _hub(log)
    run = log.run(mine)
    claim = C.ClaimRuns(node="wk1", at=T0, claims=[[mine, run.token]])
    assert hub.checked("wk1", claim.encode().decode()) == claim
    started = C.RunStarted(run_id=mine, token=run.token, node="wk1", pid=7,
                           started_at=T0 + 1, log_path="/l")
    assert hub.checked("wk1", started.encode().decode()) == started


@pytest.mark.parametrize("cmd", [
    C.NodeLost(node="wk2", at=T0, reason="x"),
    C.SetPaused(name="j", paused=True, at=T0),
    C.Audit(node="wk1", uid=0, user="root", pid=1, command="pause", target="j",
            allowed=True, at=T0),
    C.WorkerInfo(node="wk1", tags=("admin",), capacity=9, version="x", at=T0),
])
def test_a_worker_proposes_nothing_but_claims_and_reports(cmd):
    log, _, _ = _state()
    with pytest.raises(PermissionDenied, match="a worker proposes only claims and reports"):
        _hub(log).checked("wk1", cmd.encode().decode())


def test_a_worker_never_speaks_for_another_node():
    log, mine, theirs = _state()
    hub = _hub(log)
    other = log.run(theirs)
    # in another node's name
    with pytest.raises(PermissionDenied, match="speaks only for itself"):
        hub.checked("wk1", C.ClaimRuns(node="wk2", at=T0,
                                       claims=[[theirs, other.token]]).encode().decode())
    # in its own name, on another worker's current attempt (the token is guessable)
    for cmd in (C.RunStarted(run_id=theirs, token=other.token, node="wk1", pid=1,
                             started_at=T0, log_path="/l"),
                C.RunFinished(run_id=theirs, token=other.token, node="wk1", state="succeeded",
                              exit_code=0, signal=None, started_at=T0, finished_at=T0 + 1,
                              log_path=None, reason=None)):
        with pytest.raises(PermissionDenied, match="reports only on its own runs"):
            hub.checked("wk1", cmd.encode().decode())
    # a late report of its own old attempt is no one else's word: apply records it late
    stale = C.RunFinished(run_id=theirs, token=other.token - 1, node="wk1", state="failed",
                          exit_code=1, signal=None, started_at=T0, finished_at=T0 + 1,
                          log_path=None, reason=None)
    assert hub.checked("wk1", stale.encode().decode()) == stale
    with pytest.raises(RequestError):
        hub.checked("wk1", 42)


def test_each_worker_hears_only_its_own_runs():
    log, mine, theirs = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    one = _session(hub, "wk1", clock)
    hub.on_effects([RunAssigned(run=log.run(mine)), RunAssigned(run=log.run(theirs)),
                    CancelRequested(run=log.run(mine))])
    assert [m["op"] for m in one.chan.sent] == ["assigned", "effect"]
    sent = one.chan.sent[0]
    assert sent["run"][0] == mine and '"command"' in sent["spec"]
    assert sent["inputs"] == [{}, None, None] and sent["elsewhere"] == []
    assert one.chan.sent[1]["kind"] == "cancel"


def test_placement_sees_a_worker_while_it_answers_with_a_good_clock():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)
    views = {v.id: v for v in hub.views()}
    assert views["wk1"].healthy and views["wk1"].tags == frozenset({"gpu"})
    assert not views["wk2"].healthy and views["wk2"].why_not == "not connected to the leader"
    s.offset = 0.9
    assert "clock is +900ms off" in {v.id: v for v in hub.views()}["wk1"].why_not
    s.offset = 0.0
    clock.t += H.RESPONSIVE + 0.1
    assert "no word for" in {v.id: v for v in hub.views()}["wk1"].why_not
    assert hub.responsive() == set()
    st = {w["node"]: w for w in hub.status()}
    assert st["wk1"]["connected"] and not st["wk2"]["connected"]
    hub.leadership_lost()
    assert s.chan.closed and hub.answered_at() == {}


def test_registration_needs_cluster_version_2_and_a_name_not_removed():
    log = Log()
    from cronrd.errors import Refused
    with pytest.raises(Refused, match="needs cluster version"):
        log.apply(C.WorkerInfo(node="wk1", tags=(), capacity=1, version="x", at=T0))
    log.apply(raise_to(2))
    with pytest.raises(Refused, match="capacity"):
        log.apply(C.WorkerInfo(node="wk1", tags=(), capacity=0, version="x", at=T0))
    log.apply(C.WorkerInfo(node="wk1", tags=("b", "a"), capacity=2, version="x", at=T0))
    from cronrd.state import queries as Q
    assert Q.workers(log.sm.conn) == [{"node": "wk1", "tags": ["a", "b"], "capacity": 2,
                                        "version": "x", "since": T0}]
    log.apply(C.RemoveNode(node="wk1", at=T0 + 1, deny=True))
    assert Q.workers(log.sm.conn) == []
    with pytest.raises(Refused, match="was removed"):
        log.apply(C.WorkerInfo(node="wk1", tags=(), capacity=1, version="x", at=T0 + 2))


def test_an_unknown_frame_is_refused_and_many_cut_the_worker_off():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)
    for i in range(H.MAX_BAD):
        hub._dispatch(s, {"op": "raft", "id": i})
    assert s.chan.sent[0]["kind"] == "RequestError" and s.chan.closed
    hub._dispatch(s, {"op": "ping", "id": 99, "offset": 0.01, "running": 3})
    assert s.chan.sent[-1] == {"re": 99, "ok": {"now": clock.now()}}
    assert (s.offset, s.running) == (0.01, 3)
    assert W.error_of(s.chan.sent[0]).__class__.__name__ == "RequestError"


def test_a_worker_cancels_only_to_replace_a_run_of_its_own_replace_job():
    log, mine, theirs = _state()
    hub = _hub(log)
    cancel = C.CancelRun(run_id=theirs, at=T0, reason="replaced by run on wk1")
    with pytest.raises(PermissionDenied, match="only to replace it"):
        hub.checked("wk1", cancel.encode().decode())      # job j: concurrency forbid
    log.put(concurrency="replace", at=T0 + 0.5)
    # it holds run `mine` (T0+1), older than `theirs` (T0+2): nothing newer to replace it with
    from cronrd.errors import Refused
    with pytest.raises(Refused, match="holds no newer run"):
        hub.checked("wk1", cancel.encode().decode())
    # with a newer run of its own (T0+5), it may replace `theirs`
    log.fire(T0 + 5, node="wk1")
    assert hub.checked("wk1", cancel.encode().decode()) == cancel
    log.put(name="other", concurrency="replace")
    other = log.fire(T0 + 3, name="other", node="wk2")["run_id"]
    with pytest.raises(PermissionDenied, match="only to replace it"):   # holds none of it
        hub.checked("wk1", C.CancelRun(run_id=other, at=T0, reason="x").encode().decode())


def test_a_workers_reports_are_as_large_as_real_ones_and_no_larger():
    log, mine, _ = _state()
    hub = _hub(log)
    run = log.run(mine)
    big = C.ClaimRuns(node="wk1", at=T0, claims=[[mine, run.token]] * 5)
    with pytest.raises(RequestError, match="at most 4 runs in one claim"):
        hub.checked("wk1", big.encode().decode(), capacity=4)
    long_reason = C.RunFinished(run_id=mine, token=run.token, node="wk1", state="failed",
                                exit_code=1, signal=None, started_at=T0, finished_at=T0 + 1,
                                log_path=None, reason="x" * (H.MAX_TEXT + 1))
    with pytest.raises(RequestError, match="reason of"):
        hub.checked("wk1", long_reason.encode().decode())
    with pytest.raises(RequestError, match="a command of"):
        hub.checked("wk1", "x" * (H.MAX_COMMAND + 1))


def test_a_hello_answer_names_each_definition_once():
    log, mine, _ = _state()
    log.fire(T0 + 3, node="wk1")
    welcome = _hub(log)._welcome("wk1")
    assert len(welcome["runs"]) == 2 and all("spec" not in r for r in welcome["runs"])
    assert list(welcome["specs"]) == ["j"] and '"command"' in welcome["specs"]["j"][0]


def test_pings_carry_only_sane_numbers_and_only_a_leader_answers_them():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)
    hub._dispatch(s, {"op": "ping", "id": 1, "offset": float("nan"), "running": 10**30})
    assert s.offset == 0.0 and s.running == s.capacity
    hub.is_leader = lambda: False
    hub._dispatch(s, {"op": "ping", "id": 2})
    assert s.chan.closed and s.chan.sent[-1]["re"] == 1


def test_a_revoked_certificate_ends_its_workers_connection():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)
    s.serial = "abc1"
    hub.drop_denied()
    assert not s.chan.closed
    log.apply(C.Deny(kind="serial", value="abc1", at=T0, reason="revoked"))
    hub.drop_denied()
    assert s.chan.closed


def test_the_registered_workers_are_read_at_most_once_a_second():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    assert {v.id for v in hub.views()} == {"wk1", "wk2"}
    log.apply(C.WorkerInfo(node="wk3", tags=(), capacity=1, version="x", at=T0))
    assert {v.id for v in hub.views()} == {"wk1", "wk2"}   # (on the critical loop: cached)
    clock.t += H.REGISTERED_TTL
    assert {v.id for v in hub.views()} == {"wk1", "wk2", "wk3"}


def test_a_worker_floods_the_log_no_faster_than_its_capacity_needs():
    log, _, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)   # capacity 4: the floor, RATE_MIN a second
    s.refilled = clock.t
    allowed = sum(hub._within_rate(s) for _ in range(H.RATE_MIN * 3))
    assert allowed == H.RATE_MIN
    clock.t += 0.5                    # half a second refills half
    assert sum(hub._within_rate(s) for _ in range(H.RATE_MIN)) == H.RATE_MIN // 2
    # over the rate, a proposal is answered "slow down" without counting as a refusal
    hub._dispatch(s, {"op": "propose", "id": 7, "cmd": "{}"})
    assert s.chan.sent[-1]["re"] == 7 and "slow down" in s.chan.sent[-1]["error"]
    assert s.bad == 0 and not s.chan.closed


def test_a_malformed_proposal_is_refused_and_counted_never_raised():
    import asyncio
    import json
    log, mine, _ = _state()
    clock = FakeClock()
    hub = _hub(log, clock)
    s = _session(hub, "wk1", clock)
    run = log.run(mine)
    good = json.loads(C.RunStarted(run_id=mine, token=run.token, node="wk1", pid=1,
                                   started_at=T0, log_path="/l").encode())
    from cronrd.runtime.cluster.raft_cluster import stamped_by_leader
    proposed = []

    async def propose(cmd):
        proposed.append(cmd)
        return {"ok": True}
    hub.propose, hub.stamp = propose, lambda cmd: stamped_by_leader(cmd, clock.now())
    asyncio.run(hub._answer(s, 4, json.dumps(good)))
    assert s.chan.sent[-1] == {"re": 4, "ok": {"ok": True}} and len(proposed) == 1
    for bad in ({**good, "run_id": [mine]}, {**good, "started_at": None},
                {**good, "started_at": "soon"}):
        asyncio.run(hub._answer(s, 5, json.dumps(bad)))
        assert s.chan.sent[-1]["re"] == 5 and s.chan.sent[-1]["kind"] == "RequestError"
    assert len(proposed) == 1 and not s.chan.closed

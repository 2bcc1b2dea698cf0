"""Which cronrd each member runs, and raising the cluster version
(runtime/cluster/versions.py): nodes in process, each with its own state,
the ``version`` peer request between them; an old node answers it as
cronrd 0.2.0 does ("unknown peer request"), a down one not at all. The
whole cluster upgraded for real: integration/test_rolling_upgrade.py."""

from __future__ import annotations

import asyncio
import logging

import apsw
import pytest

from cronrd import __version__
from cronrd.errors import PermissionDenied, ProposalDropped, Refused, RequestError
from cronrd.runtime.cluster.versions import OLD_RELEASE, VersionWatch
from cronrd.runtime.peers.rpc import PeerError, PeerUnavailable
from cronrd.state import versions as V
from cronrd.state.apply import apply_batch
from cronrd.state.machine import StateMachine


class Clock:
    def now(self):
        return 1_800_000_000.0

    def monotonic(self):
        return 100.0


class Net:
    """Nodes ``new`` (this code), ``old`` (0.2.0: no version request) and
    ``down`` (no answer); the log applies a proposal on every node."""

    def __init__(self, nodes: dict[str, str], leader: str = "a"):
        self.kinds = dict(nodes)
        self.leader = leader
        self.machines = {n: StateMachine(apsw.Connection(":memory:")) for n in nodes}
        self.proposed: list = []
        self.stopped: dict[str, str] = {}
        self.joining: set[str] = set()
        self.watches = {n: VersionWatch(
            n, Clock(), self.machines[n].conn, Rpc(self, n), lambda: sorted(self.kinds),
            lambda n=n: n == self.leader, self.propose,
            lambda why, n=n: self.stopped.__setitem__(n, why),
            joining=lambda n=n: n in self.joining) for n in nodes}

    async def propose(self, cmd):
        self.proposed.append(cmd)
        out = None
        for m in self.machines.values():
            results, _ = apply_batch(m, [(m.applied_index + 1, cmd)])
            out = next(iter(results.values()))
        if isinstance(out, BaseException):
            raise out
        return out


class Rpc:
    def __init__(self, net: Net, me: str):
        self.net = net
        self.me = me

    async def call(self, peer, method, args, timeout=5.0):
        kind = self.net.kinds[peer]
        if kind == "down":
            raise PeerUnavailable(f"node {peer} did not answer {method} within {timeout:g}s")
        if kind == "old":
            raise PeerError(f"unknown peer request {method!r} (version mismatch between "
                            "nodes? run the same cronrd version everywhere)", "RequestError")
        if kind == "dies-when-prepared" and "prepare" in args:
            raise PeerUnavailable(f"node {peer} did not answer {method}")
        return await self.net.watches[peer].rpc_version(self.me, args)


def meta_of(sm: StateMachine, key: str):
    for (value,) in sm.conn.execute("SELECT value FROM meta WHERE key=?", (key,)):
        return value
    return None


async def round_on(net: Net, node: str):
    seen = await net.watches[node].round()
    return await net.watches[node].maybe_raise(seen)


def test_a_mixed_cluster_holds_the_version_and_says_who_runs_what():
    net = Net({"a": "new", "b": "new", "c": "old"})
    assert asyncio.run(round_on(net, "a")) is None
    assert net.proposed == [] and V.recorded(net.machines["a"].conn) == 1
    view = net.watches["a"].view()
    assert view["cluster_version"] == 1 and view["applies"] == V.APPLY_VERSION
    assert view["mixed"] and view["behind"] == ["c"]
    assert view["members"]["c"] == {"release": OLD_RELEASE, "commit": None, "applies": 1,
                                    "recorded": 1, "answered": True}
    assert view["members"]["b"]["release"] == __version__


def test_the_leader_raises_it_once_the_last_member_runs_the_new_code(caplog):
    net = Net({"a": "new", "b": "new", "c": "old"})
    asyncio.run(round_on(net, "a"))
    net.kinds["c"] = "new"        # upgraded
    with caplog.at_level(logging.INFO, logger="cronrd.cluster"):
        assert asyncio.run(round_on(net, "a")) == V.APPLY_VERSION
    [cmd] = net.proposed
    assert cmd.version == V.APPLY_VERSION and set(cmd.members) == {"a", "b", "c"}
    assert all(V.recorded(m.conn) == V.APPLY_VERSION for m in net.machines.values())
    assert f"event=cluster_version_raised from=1 to={V.APPLY_VERSION}" in caplog.text
    # Nothing more to do: no second proposal.
    assert asyncio.run(round_on(net, "a")) is None and len(net.proposed) == 1
    assert not net.watches["a"].view()["mixed"]


@pytest.mark.parametrize("kind", ["down", "old"])
def test_a_member_that_does_not_answer_or_is_old_holds_it(kind):
    net = Net({"a": "new", "b": "new", "c": kind})
    assert asyncio.run(round_on(net, "a")) is None and net.proposed == []


def test_it_is_not_raised_while_a_membership_change_is_in_flight():
    """A member being added was not asked: the next round asks it."""
    net = Net({"a": "new", "b": "new"})
    busy = {"conf": True}
    net.watches["a"].settled = lambda: not busy["conf"]
    assert asyncio.run(round_on(net, "a")) is None and net.proposed == []
    busy["conf"] = False
    assert asyncio.run(round_on(net, "a")) == V.APPLY_VERSION


def test_only_the_leader_raises_it():
    net = Net({"a": "new", "b": "new"})
    assert asyncio.run(round_on(net, "b")) is None and net.proposed == []


def test_every_member_locks_its_state_against_older_releases_before_the_raise():
    """A member taken back to 0.2.0 after it said yes must not skip the
    raise and go on by the old rules: its state says schema 7 (which 0.2.0
    refuses) before the raise is even proposed."""
    net = Net({"a": "new", "b": "new", "c": "new"})
    asyncio.run(round_on(net, "a"))
    locks = {n: meta_of(m, "schema_version") for n, m in net.machines.items()}
    assert locks == {"a": 7, "b": 7, "c": 7}


def test_a_member_that_does_not_get_ready_holds_the_version_and_locks_nothing_more():
    net = Net({"a": "new", "b": "new", "c": "dies-when-prepared"})
    assert asyncio.run(round_on(net, "a")) is None and net.proposed == []
    assert V.recorded(net.machines["a"].conn) == 1
    assert meta_of(net.machines["a"], "schema_version") == 6   # the leader's own: not yet


def test_only_a_member_may_ask_a_node_to_prepare_and_only_a_version_it_applies():
    net = Net({"a": "new", "b": "new"})
    with pytest.raises(PermissionDenied):
        asyncio.run(net.watches["b"].rpc_version("stranger", {"prepare": 2}))
    for bad in (V.APPLY_VERSION + 1, 0, "2", True, 2.5):
        with pytest.raises(RequestError):
            asyncio.run(net.watches["b"].rpc_version("a", {"prepare": bad}))
    assert meta_of(net.machines["b"], "schema_version") == 6


def test_a_member_does_not_stop_on_another_members_word():
    """Only a joining node goes by what a member says of the recorded
    version: one member's bad answer must not stop the others."""
    net = Net({"a": "new", "b": "new"})
    with net.machines["a"].conn:
        net.machines["a"].conn.execute("INSERT INTO meta VALUES('cluster_version', ?)",
                                       (V.APPLY_VERSION + 1,))
    asyncio.run(net.watches["b"].round())
    assert net.stopped == {}


def test_a_joining_node_older_than_the_recorded_version_stops_naming_both():
    net = Net({"a": "new", "b": "new"})
    net.joining.add("b")
    with net.machines["a"].conn:  # "a" recorded a version this code does not apply
        net.machines["a"].conn.execute("INSERT INTO meta VALUES('cluster_version', ?)",
                                       (V.APPLY_VERSION + 1,))
    asyncio.run(net.watches["b"].round())
    why = net.stopped["b"]
    assert f"member a says the cluster has recorded cluster version {V.APPLY_VERSION + 1}" in why
    assert f"this cronrd {__version__} applies versions up to {V.APPLY_VERSION}" in why
    assert "upgrade cronrd on this node" in why


def test_a_joiner_too_old_for_the_recorded_version_is_refused():
    net = Net({"a": "new", "j": "old"})
    asyncio.run(net.watches["a"].check_joiner("j"))   # at version 1: welcome
    with net.machines["a"].conn:
        net.machines["a"].conn.execute("INSERT INTO meta VALUES('cluster_version', 2)")
    with pytest.raises(Refused) as err:
        asyncio.run(net.watches["a"].check_joiner("j"))
    assert str(err.value) == (
        f"node j runs cronrd {OLD_RELEASE}, which applies cluster versions up to 1; the "
        "cluster is at version 2: upgrade cronrd on j to 0.3.0 or newer, then start it "
        "again to join")
    net.kinds["j"] = "new"
    asyncio.run(net.watches["a"].check_joiner("j"))


def test_a_joiner_that_does_not_say_which_cronrd_it_runs_is_not_added_yet():
    net = Net({"a": "new", "j": "down"})
    with pytest.raises(ProposalDropped, match="node j did not say which cronrd it runs"):
        asyncio.run(net.watches["a"].check_joiner("j", patience=0.0))


@pytest.mark.parametrize("answer", [
    "not an object", ["a", 2], {"release": "x" * 10_000, "applies": "2", "recorded": 2.5},
    {"release": None, "applies": True, "recorded": -1}, {"applies": 1 << 40},
])
def test_a_forged_or_garbled_answer_counts_as_no_answer_and_raises_nothing(answer):
    """A peer's answer is its word only where it has the right shape: a
    member that answers garbage holds the version (it may be the one that
    cannot apply it), and nothing of its answer is kept unbounded."""
    net = Net({"a": "new", "b": "new"})

    async def forged(peer, method, args, timeout=5.0):
        return answer
    net.watches["a"].rpc.call = forged
    assert asyncio.run(round_on(net, "a")) is None and net.proposed == []
    seen = net.watches["a"].view()["members"]["b"]
    assert seen["applies"] is None
    assert seen["release"] is None or len(seen["release"]) <= 64
    assert seen["recorded"] is None

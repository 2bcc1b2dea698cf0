"""Focused unit tests of the Raft core (``cronrd.raft.core``), one behaviour each.

The ``Net`` helper drives a few ``Raft`` instances by hand: it runs every
node's Ready cycle (persist = nothing to do, apply = record the entries) and
delivers messages, optionally dropping some, so that each test can set up the
exact interleaving it is about.
"""

from __future__ import annotations

import random

import pytest

from cronrd.raft.core import (CANDIDATE, FOLLOWER, LEADER, PRECANDIDATE,
                              Raft, RaftConfig, RaftError)
from cronrd.raft.log import RaftLog
from cronrd.raft.tracker import REPLICATE
from cronrd.raft.types import (ConfChange, ConfChangeType, ConfState, Entry, EntryType,
                               HardState, Message, MsgType, Snapshot)


class Net:
    def __init__(self, ids, learners=(), logs=None, terms=None, **cfg):
        conf = ConfState(tuple(ids), tuple(learners))
        self.nodes: dict[str, Raft] = {}
        self.applied: dict[str, list[Entry]] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.sent: list[Message] = []
        self.drop = lambda m: False
        self.queue: list[Message] = []
        self.readies: dict[str, list] = {}
        for i in list(ids) + list(learners):
            entries = (logs or {}).get(i, [])
            hs = HardState(term=(terms or {}).get(i, entries[-1].term if entries else 0))
            self.nodes[i] = Raft(RaftConfig(i, **cfg), random.Random(i), conf=conf,
                                 hard_state=hs, entries=entries)
            self.applied[i] = []

    def __getitem__(self, i) -> Raft:
        return self.nodes[i]

    def cycle(self, i) -> list[Message]:
        """One Ready cycle of node ``i``; its messages are queued (not delivered)."""
        r = self.nodes[i]
        out = []
        while r.has_ready():
            rd = r.ready()
            if rd.snapshot is not None:
                self.snapshots[i] = rd.snapshot
            self.applied[i].extend(rd.committed)
            out.extend(rd.messages)
            self.readies.setdefault(i, []).append(rd)
            r.advance(rd)
        self.sent.extend(out)
        self.queue.extend(out)
        return out

    def settle(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            for i in self.nodes:
                self.cycle(i)
            if not self.queue:
                return
            queue, self.queue = self.queue, []
            for m in queue:
                if m.to in self.nodes and not self.drop(m):
                    self.nodes[m.to].step(m)
        raise AssertionError("the cluster did not settle")

    def campaign(self, i) -> None:
        r = self.nodes[i]
        for _ in range(r.randomized_timeout):
            r.tick()
        self.settle()

    def elect(self, i) -> Raft:
        self.campaign(i)
        assert self.nodes[i].role == LEADER
        return self.nodes[i]


def log(*terms):
    return [Entry(t, i + 1) for i, t in enumerate(terms)]


# -- elections ------------------------------------------------------------------------------------------
def test_election_with_prevote_does_not_bump_terms_until_won():
    net = Net(["a", "b", "c"])
    a = net["a"]
    for _ in range(a.randomized_timeout):
        a.tick()
    assert a.role == PRECANDIDATE and a.term == 0
    msgs = net.cycle("a")
    assert {(m.type, m.to, m.term) for m in msgs} == {(MsgType.PREVOTE, "b", 1),
                                                      (MsgType.PREVOTE, "c", 1)}
    net.settle()
    assert a.role == LEADER and a.term == 1
    assert all(net[i].lead == "a" and net[i].term == 1 for i in "bc")
    # the no-op of the new term is committed and applied everywhere
    assert all(net.applied[i][-1].type == EntryType.NOOP for i in "abc")


def test_prevote_of_a_partitioned_node_does_not_disrupt_the_leader():
    net = Net(["a", "b", "c"])
    net.elect("a")
    net.drop = lambda m: "c" in (m.to, m.frm)
    c = net["c"]
    for _ in range(5 * c.randomized_timeout):
        c.tick()
        net.settle()
    assert c.term == 1 and c.role == PRECANDIDATE  # never got a pre-vote, never bumped
    net.drop = lambda m: False
    c.tick()
    net.settle()
    for _ in range(3):
        net["a"].tick()
        net.settle()
    assert net["a"].role == LEADER and net["a"].term == 1 and c.lead == "a"


def test_a_follower_told_its_leader_is_gone_campaigns_within_three_ticks():
    net = Net(["a", "b", "c"])
    net.elect("a")
    net.drop = lambda m: "a" in (m.to, m.frm)   # a is dead
    b, c = net["b"], net["c"]
    b.leader_gone()
    c.leader_gone()
    for ticks in range(1, 4):
        b.tick()
        c.tick()
        net.settle()
        if LEADER in (b.role, c.role):
            break
    assert LEADER in (b.role, c.role) and ticks <= 3 < b.cfg.election_tick
    assert max(b.term, c.term) == 2


def test_a_false_alarm_of_leader_gone_does_not_depose_a_live_leader():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    b = net["b"]
    b.leader_gone()   # its connection from a closed, but a is alive and c hears it
    for _ in range(3 * b.cfg.election_tick):
        b.tick()
        net["c"].tick()
        a.tick()
        net.settle()
    assert a.role == LEADER and a.term == 1 and b.lead == "a" and b.term == 1
    # Not a follower of a known leader: nothing to do.
    a.leader_gone()
    assert a.role == LEADER


def test_check_quorum_leader_steps_down_when_isolated():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    net.drop = lambda m: "a" in (m.to, m.frm)
    for _ in range(2 * a.cfg.election_tick):
        a.tick()
        net.settle()
    assert a.role == FOLLOWER and a.lead == ""


def test_vote_refused_to_a_candidate_with_a_stale_log():
    net = Net(["a", "b"], logs={"a": log(1, 1, 2), "b": log(1, 1)}, pre_vote=False,
              check_quorum=False)
    a, b = net["a"], net["b"]
    b.step(Message(MsgType.VOTE, to="b", frm="a", term=3, index=3, log_term=2))
    grant = b.ready().messages[-1]
    assert grant.type == MsgType.VOTE_RESP and not grant.reject and b.vote == "a"
    a.step(Message(MsgType.VOTE, to="a", frm="b", term=4, index=2, log_term=1))
    (resp,) = a.ready().messages
    assert resp.type == MsgType.VOTE_RESP and resp.reject and a.vote == ""
    # same last term but shorter: refused as well
    a.step(Message(MsgType.VOTE, to="a", frm="b", term=5, index=2, log_term=2))
    assert a.ready().messages[0].reject


def test_vote_rejection_tells_the_candidate_the_commit_index():
    # Regression (simulation seeds 273, 607): a leader applied its own removal and
    # stepped down before the remaining voter learned that the removal committed.
    # The remaining voter still counts the removed node, whose longer log makes it
    # refuse the vote: without learning the commit from the refusal, no leader
    # could ever be elected again.
    cc = ConfChange(ConfChangeType.REMOVE, "b").encode()
    entries = [Entry(1, 1, EntryType.NOOP), Entry(1, 2, EntryType.CONF, cc)]
    net = Net(["a", "b"], logs={"a": entries, "b": entries + [Entry(1, 3)]})
    a, b = net["a"], net["b"]
    b.log.commit_to(2)
    b.applied_entries = b.log.next_committed()
    net.drop = lambda m: m.to == "b" and m.type != MsgType.PREVOTE and m.type != MsgType.VOTE
    net.campaign("a")
    assert a.commit == 2                      # learned from b's refusal
    assert a.conf.voters == ("a",)            # applied the removal
    net.campaign("a")                         # and can now win alone
    assert a.role == LEADER


def test_commit_learned_from_a_refusal_needs_a_matching_entry():
    net = Net(["a", "b"], logs={"a": log(1, 2), "b": log(1, 3, 3)})
    a = net["a"]
    a._become_candidate()
    a.step(Message(MsgType.VOTE_RESP, to="a", frm="b", term=a.term, reject=True,
                   commit=2, log_term=3))
    assert a.commit == 0  # b's entry 2 has another term: not the same entry


@pytest.mark.parametrize("prevote", [False, True])
def test_a_candidate_told_of_commits_beyond_its_log_stands_down_until_a_leader_is_heard(prevote):
    """Seed 14855062069096 (issue 36's campaign): a removed node that never
    learned of its removal, its clock fast, campaigned first every term; the
    new configuration's other voter lagged (outside its own configuration)
    and granted it each time, so the voter that could win never got that
    vote. A refusal that names a commit index beyond the candidate's last
    entry proves it cannot be a correct leader: it stands down and does not
    campaign again until its log reaches that index or a leader is heard."""
    net = Net(["a", "b", "c"], logs={"a": log(1, 1), "b": log(1, 1, 2, 2, 2)},
              pre_vote=prevote)
    a = net["a"]
    a._campaign(transfer=False)
    want = MsgType.PREVOTE_RESP if prevote else MsgType.VOTE_RESP
    a.step(Message(want, to="a", frm="b", term=a.term, reject=True,
                   commit=4, log_term=2))
    assert a.role == FOLLOWER and a.behind == 4
    net.cycle("a")
    for _ in range(5 * a.randomized_timeout):
        a.tick()
    assert not [m for m in net.cycle("a") if m.type in (MsgType.VOTE, MsgType.PREVOTE)]
    # a leader is heard: a may campaign again later (a heartbeat leaves its
    # log as it is: the leader brings it up)
    a.step(Message(MsgType.HEARTBEAT, to="a", frm="b", term=a.term, commit=2))
    assert a.behind == 0 and a._promotable()
    # a refusal that names nothing beyond its log changes nothing
    a._campaign(transfer=False)
    a.step(Message(want, to="a", frm="c", term=a.term, reject=True,
                   commit=2, log_term=1))
    assert a.behind == 0 and a.role in (PRECANDIDATE, CANDIDATE)


@pytest.mark.parametrize("seed", [14855062069096, 14855062076692, 14855062077425])
def test_the_campaign_seeds_of_a_disrupting_candidate_converge(seed):
    """The whole seeds, in the simulation (tests/support/raft_sim.py): the
    three liveness failures of issue 36's first campaign, one cause."""
    import raft_sim
    r = raft_sim.run_seed(seed)
    assert "failed" not in r, raft_sim.report(r)


# -- replication --------------------------------------------------------------------------------------------
def test_fast_backoff_skips_a_whole_conflicting_term():
    leader_log = log(1, 1, 3, 3, 3, 3)
    follower_log = log(1, 2, 2, 2, 2, 2)
    net = Net(["a", "b"], logs={"a": leader_log, "b": follower_log})
    net.elect("a")
    rejects = [m for m in net.sent if m.type == MsgType.APP_RESP and m.reject]
    # one rejection of the probe at 6 (hint: index 6 has term 2), one of the probe at 2
    assert len(rejects) <= 2
    assert rejects[0].reject_hint == 6 and rejects[0].hint_term == 2
    apps = [m for m in net.sent if m.type == MsgType.APP and m.to == "b"]
    assert apps[1].index == 2  # jumped from 6 straight to the last index of term <= 2
    assert [e.term for e in net["b"].log.entries] == [e.term for e in net["a"].log.entries]


def test_leader_commits_old_term_entries_only_through_an_entry_of_its_term():
    # Figure 8: entry 2 (term 2) on a majority must not be committed by counting.
    net = Net(["a", "b", "c"], logs={"a": log(1, 2), "b": log(1, 2), "c": log(1)},
              terms={"a": 3, "b": 3, "c": 3})
    a = net["a"]
    net.drop = lambda m: m.type == MsgType.APP  # keep the no-op from the followers
    net.campaign("a")
    assert a.role == LEADER and a.term == 4 and a.last_index == 3
    a.step(Message(MsgType.APP_RESP, to="a", frm="b", term=4, index=2))
    net.cycle("a")
    assert a.commit == 0
    a.step(Message(MsgType.APP_RESP, to="a", frm="b", term=4, index=3))
    net.cycle("a")
    assert a.commit == 3


def test_leader_counts_its_own_entries_only_once_persisted():
    net = Net(["a"])
    a = net.elect("a")
    a.propose(b"x")
    assert a.commit == 2 - 1  # the no-op; the new entry is not on disk yet
    rd = a.ready()
    assert [e.data for e in rd.entries] == [b"x"] and not rd.committed
    a.advance(rd)
    assert a.commit == 3 - 1 and a.ready().committed[-1].data == b"x"


def test_full_inflight_window_with_lost_appends_recovers_on_heartbeat():
    # Regression (simulation seeds 18, 26): in replicate state with a full window
    # (max_inflight) whose appends were all lost, nothing was ever sent again.
    net = Net(["a", "b", "c"], max_inflight=1, max_msg_bytes=1)
    a = net.elect("a")
    assert a.prs["b"].state == REPLICATE
    net.drop = lambda m: m.type == MsgType.APP and m.to == "b"
    a.propose(b"x")
    net.settle()
    a.propose(b"y")
    net.settle()
    assert a.prs["b"].paused(1)
    net.drop = lambda m: False
    for _ in range(3):
        a.tick()
        net.settle()
    assert net["b"].last_index == a.last_index and a.prs["b"].match == a.last_index


# -- learners and membership -------------------------------------------------------------------------------------------------
def test_learner_does_not_campaign_is_not_asked_and_not_counted():
    net = Net(["a", "b"], learners=["c"])
    c = net["c"]
    for _ in range(5 * c.cfg.election_tick):
        c.tick()
    assert c.role == FOLLOWER and c.public_role == "learner" and not c.ready().messages
    a = net.elect("a")
    assert not [m for m in net.sent if m.type in (MsgType.VOTE, MsgType.PREVOTE)
                and m.to == "c"]
    net.drop = lambda m: m.to == "b" or m.frm == "b"
    a.propose(b"x")
    net.settle()
    assert net["c"].last_index == a.last_index  # replicated to the learner
    assert a.commit == a.last_index - 1         # but the learner's copy does not commit it
    # a granted vote from a learner is not counted
    b = net["b"]
    b._become_candidate()
    b.step(Message(MsgType.VOTE_RESP, to="b", frm="c", term=b.term))
    assert b.role == CANDIDATE


def test_one_membership_change_at_a_time():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "d"), b"one")
    a.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "e"), b"two")
    rd = a.ready()
    assert [ctx for ctx, _ in rd.dropped] == [b"two"]
    net.queue.extend(rd.messages)
    a.advance(rd)
    net.settle()
    assert a.conf.learners == ("d",)
    a.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "e"), b"three")
    assert not a.ready().dropped


def test_new_leader_commits_its_own_entry_before_a_membership_change():
    net = Net(["a", "b", "c"])
    a = net["a"]
    net.drop = lambda m: m.type == MsgType.APP
    net.campaign("a")
    assert a.role == LEADER and a.commit < a.last_index
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "c"), b"cc")
    (dropped,) = a.ready().dropped
    assert dropped[0] == b"cc" and "not committed an entry of its term" in dropped[1]


def test_removed_leader_steps_down_and_conf_below_installed_snapshot_is_not_reapplied():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "a"))
    net.settle()
    assert a.role == FOLLOWER and a.conf.voters == ("b", "c")
    for _ in range(net["c"].cfg.election_tick):
        net["c"].tick()  # c's lease on the old leader runs out
    net.campaign("b")
    assert net["b"].role == LEADER


# -- leadership transfer -----------------------------------------------------------------------------------------
def test_transfer_leadership_with_timeout_now():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.transfer_leadership("b")
    a.propose(b"refused", b"ctx")
    msgs = net.cycle("a")
    assert any(m.type == MsgType.TIMEOUT_NOW and m.to == "b" for m in msgs)
    assert net.readies["a"][-1].dropped[0][0] == b"ctx"
    net.settle()
    assert net["b"].role == LEADER and net["b"].term == 2 and a.lead == "b"
    # the transfer's vote ignores the lease the followers hold
    assert any(m.type == MsgType.VOTE and m.context == b"transfer" for m in net.sent)


def test_a_node_held_from_campaigning_neither_campaigns_nor_takes_a_transfer_but_votes():
    """The driver holds a node whose wall clock is off from leading
    (runtime/cluster/clock_watch.py): its election timeout passes without a
    campaign, a TimeoutNow does not make it campaign, and it still votes."""
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    c = net["c"]
    c.campaign_held = True
    a.transfer_leadership("c")
    net.settle()
    assert a.role == LEADER and c.role == FOLLOWER and c.term == a.term
    for _ in range(3 * c.cfg.election_tick):
        c.tick()
    assert c.role == FOLLOWER and not any(m.frm == "c" and m.type in (
        MsgType.VOTE, MsgType.PREVOTE) for m in c.msgs)
    for _ in range(a.cfg.election_tick):   # b's lease on a runs out: b campaigns, c votes
        net["b"].tick()
        c.tick()
    net.campaign("b")
    assert net["b"].role == LEADER


def test_transfer_to_a_lagging_follower_catches_it_up_first():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    net.drop = lambda m: m.to == "b"
    a.propose(b"x")
    net.settle()
    net.drop = lambda m: False
    a.transfer_leadership("b")
    assert not any(m.type == MsgType.TIMEOUT_NOW for m in net.cycle("a"))
    net.settle()
    assert net["b"].role == LEADER and net["b"].log.term(a.last_index - 1) is not None


# -- ReadIndex ---------------------------------------------------------------------------------------------------------
def test_read_index_on_the_leader_needs_a_quorum_heartbeat():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    net.drop = lambda m: m.type == MsgType.HEARTBEAT_RESP
    a.read_index(b"r1")
    net.settle()
    assert not any(rd.read_states for rd in net.readies.get("a", []))
    net.drop = lambda m: False
    a.read_index(b"r2")
    net.settle()
    states = [rs for rd in net.readies["a"] for rs in rd.read_states]
    assert [rs.context for rs in states] == [b"r1", b"r2"]  # r2's quorum answers r1 too
    assert all(rs.index == a.commit for rs in states)


def test_read_index_from_a_follower_goes_through_the_leader():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    net["b"].read_index(b"rb")
    net.settle()
    assert any(m.type == MsgType.READ_INDEX and m.to == "a" for m in net.sent)
    (rs,) = [rs for rd in net.readies["b"] for rs in rd.read_states]
    assert rs.context == b"rb" and rs.index == a.commit


def test_read_index_waits_for_a_commit_in_the_leaders_term():
    net = Net(["a", "b", "c"])
    a = net["a"]
    net.drop = lambda m: m.type == MsgType.APP
    net.campaign("a")
    a.read_index(b"early")
    net.settle()
    assert not any(rd.read_states for rd in net.readies.get("a", []))
    net.drop = lambda m: False
    a.tick()
    net.settle()
    for _ in range(2):
        a.tick()
        net.settle()
    states = [rs for rd in net.readies.get("a", []) for rs in rd.read_states]
    assert [rs.context for rs in states] == [b"early"] and states[0].index == a.commit


# -- snapshots and compaction -------------------------------------------------------------------------------------------------
def test_compact_requires_the_applied_index():
    net = Net(["a"])
    a = net.elect("a")
    for k in range(5):
        a.propose(b"%d" % k)
    net.settle()
    assert a.applied == 6
    with pytest.raises(RaftError):
        a.compact(4, b"state")
    snap = a.compact(6, b"state")
    assert (snap.meta.index, snap.meta.term, snap.meta.conf) == (6, 1, a.conf)
    assert a.log.first_index() == 7 and a.log.term(6) == 1 and a.log.term(5) is None
    with pytest.raises(RaftError):
        a.compact(7, b"ahead")  # beyond the applied index
    # Taken already at 6: the same snapshot, its bytes unchanged (a follower
    # may hold part of them and resume the transfer).
    assert a.compact(6, b"again") is snap and snap.data == b"state"


def test_a_snapshot_copied_off_the_loop_is_taken_at_the_index_it_was_copied_at():
    """The daemon copies the state in a worker thread while entries go on
    being applied: the snapshot is at the index (and membership) the copy
    began at, behind the applied index."""
    net = Net(["a"])
    a = net.elect("a")
    for k in range(5):
        a.propose(b"%d" % k)
    net.settle()
    noted = a.conf
    snap = a.compact(4, b"state-at-4", noted)
    assert (snap.meta.index, snap.meta.conf, a.applied) == (4, noted, 6)
    assert a.log.first_index() == 5 and a.log.term(6) == 1
    with pytest.raises(RaftError):
        a.compact(3, b"older", noted)  # its entry is compacted already
    with pytest.raises(RaftError):
        a.compact(7, b"ahead", noted)


SNAP_DATA = b"0123456789abcdefghijklmnopqrstuvwxyz"


def _leader_with_new_learner() -> tuple[Net, Raft, Raft]:
    """Leader a (its log compacted into SNAP_DATA, 8-byte chunks) and a new,
    empty learner n it must bring up from the snapshot."""
    net = Net(["a", "b"], learners=[], snapshot_chunk_bytes=8)
    a = net.elect("a")
    for k in range(4):
        a.propose(b"%d" % k)
    net.settle()
    a.compact(a.applied, SNAP_DATA)
    a.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "n"))
    net.settle()
    n = Raft(RaftConfig("n", snapshot_chunk_bytes=8), random.Random(1),
             conf=ConfState(("a", "b")))
    net.nodes["n"] = n
    net.applied["n"] = []
    return net, a, n


def test_snapshot_is_sent_in_chunks_and_installed():
    net, a, n = _leader_with_new_learner()
    data = SNAP_DATA
    for _ in range(3):
        a.tick()
        net.settle()
    chunks = [m for m in net.sent if m.type == MsgType.SNAP and m.to == "n"]
    assert [m.offset for m in chunks][:5] == [0, 8, 16, 24, 32]
    assert chunks[4].done and not chunks[3].done
    assert net.snapshots["n"].data == data
    assert n.log.snap_index == 5 and n.last_index == a.last_index and n.applied == a.applied
    assert n.conf == a.conf and n.public_role == "learner"


def test_installing_a_snapshot_does_not_move_applied_before_the_ready():
    # Regression (simulation seeds 441, 776, 878, 1010): the runtime steps messages
    # while a Ready is being persisted. A snapshot received then used to move
    # ``applied`` at once, so after advancing the *older* Ready the runtime saw an
    # applied index its state machine had not reached (and could compact its old
    # state under the snapshot's index, or serve reads from it).
    net = Net(["a", "b"])
    a = net.elect("a")
    for k in range(3):
        a.propose(b"%d" % k)
    net.settle()
    assert a.applied == 4
    snap = a.compact(a.applied, b"state-at-4")
    b = Raft(RaftConfig("b"), random.Random(2), conf=ConfState(("a", "b")))
    b.step(Message(MsgType.HEARTBEAT, to="b", frm="a", term=1, commit=0))
    old = b.ready()
    b.step(Message(MsgType.SNAP, to="b", frm="a", term=1, snapshot_meta=snap.meta,
                   data=snap.data, done=True))
    b.advance(old)
    assert b.applied == 0
    rd = b.ready()
    assert rd.snapshot is not None and rd.snapshot.meta.index == 4 and not rd.committed
    b.advance(rd)
    assert b.applied == 4


def test_conf_entries_below_an_installed_snapshot_are_not_applied_over_its_conf():
    add = Entry(1, 2, EntryType.CONF, ConfChange(ConfChangeType.ADD_LEARNER, "x").encode())
    b = Raft(RaftConfig("b"), random.Random(2), conf=ConfState(("a", "b")),
             hard_state=HardState(1, "", 2), entries=[Entry(1, 1, EntryType.NOOP), add])
    rd = b.ready()
    assert [e.index for e in rd.committed] == [1, 2]
    meta_conf = ConfState(("a", "b"), ())  # x was added and removed again by index 9
    from cronrd.raft.types import SnapshotMeta
    b.step(Message(MsgType.SNAP, to="b", frm="a", term=2,
                   snapshot_meta=SnapshotMeta(9, 2, meta_conf), data=b"s", done=True))
    b.advance(rd)
    assert b.conf == meta_conf


def test_raftlog_restore_and_compact_bounds():
    lg = RaftLog(0, 0, log(1, 1, 2))
    lg.commit_to(3)
    lg.applied = 2
    lg.compact(2)
    assert (lg.snap_index, lg.snap_term, lg.first_index(), lg.last_index()) == (2, 1, 3, 3)
    lg.restore(10, 4)
    assert (lg.last_index(), lg.commit, lg.applied, lg.term(10)) == (10, 10, 2, 4)


def test_refusing_a_vote_does_not_restart_the_election_timer():
    # Regression (simulation seed 944, pre_vote off): a candidate with a stale log
    # and a faster clock campaigned every timeout; the up-to-date node stepped down
    # to each new term *and restarted its timer*, so it never campaigned itself.
    net = Net(["a", "b"], logs={"a": log(1), "b": log(1, 1)}, pre_vote=False)
    b = net["b"]
    for _ in range(b.randomized_timeout - 1):
        b.tick()
    before = b.election_elapsed
    assert before > 0
    b.step(Message(MsgType.VOTE, to="b", frm="a", term=5, index=1, log_term=1))
    assert b.term == 5 and b.ready().messages[-1].reject
    assert b.election_elapsed == before
    # a granted vote does restart it
    b.step(Message(MsgType.VOTE, to="b", frm="a", term=6, index=2, log_term=1))
    assert b.vote == "a" and b.election_elapsed == 0


def test_vote_request_of_an_older_term_is_answered_with_our_term():
    # Regression (simulation seed 3220, pre_vote off): the only other voter did not
    # know the candidate had been promoted, so never sent it anything, and silently
    # dropped its vote requests of older terms; both kept bumping their own terms
    # and the candidate never caught up.
    net = Net(["a", "b"], logs={"a": log(1, 1), "b": log(1)}, terms={"a": 3, "b": 9},
              pre_vote=False)
    a = net["a"]
    a._campaign(transfer=False)
    assert a.role == CANDIDATE and a.term == 4
    net.settle()
    assert a.term == 9  # learned b's term from the refusal
    net.campaign("a")
    assert a.role == LEADER and a.term == 10


# -- proposals at a node outside the configuration (issue 17) ------------------------------------------------
def _removed_node_with_a_stale_leader():
    """c is removed from {a, b, c} and applies its removal while it still
    believes ``a`` leads; nobody sends c anything again, and as a non-voter it
    never campaigns, so its ``lead`` stays stale forever."""
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "c"))
    net.settle()
    c = net["c"]
    assert c.conf.voters == ("a", "b") and c.lead == "a" and c.role == FOLLOWER
    return net, a, c


def test_removed_node_refuses_a_proposal_instead_of_forwarding_it_to_its_stale_leader():
    # seed 83889309: the stale leader had been removed too and dropped the
    # forwarded proposal silently; the proposal never resolved.
    net, a, c = _removed_node_with_a_stale_leader()
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "a"))
    net.settle()
    assert a.role == FOLLOWER and a.conf.voters == ("b",)
    net.sent.clear()
    c.propose(b"x", b"op1")
    net.settle()
    assert not [m for m in net.sent if m.type == MsgType.PROPOSE]
    (dropped,) = [d for rd in net.readies["c"] for d in rd.dropped]
    assert dropped[0] == b"op1" and "not a member" in dropped[1]


def test_removed_node_refuses_a_proposal_its_leader_of_a_newer_term_would_ignore():
    # seed 500005356: the stale leader leads again in a newer term and ignores a
    # PROPOSE of the removed node's older term; the proposal never resolved.
    net, a, c = _removed_node_with_a_stale_leader()
    a.transfer_leadership("b")
    net.settle()
    net["b"].transfer_leadership("a")
    net.settle()
    assert a.role == LEADER and a.term > c.term and c.lead == "a"
    net.sent.clear()
    c.propose(b"x", b"op1")
    c.read_index(b"r1")
    net.settle()
    assert not [m for m in net.sent if m.frm == "c"]
    dropped = [d for rd in net.readies["c"] for d in rd.dropped]
    assert [ctx for ctx, _ in dropped] == [b"op1", b"r1"]
    assert all("not a member" in why for _, why in dropped)


def test_a_learner_still_forwards_its_proposals():
    net = Net(["a", "b"], learners=["l"])
    net.elect("a")
    net["l"].propose(b"from-learner", b"op")
    net.settle()
    assert b"from-learner" in [e.data for e in net.applied["a"]]


# -- messages from outside the configuration (issue 9) --------------------------------------------------------
@pytest.mark.parametrize("kind", list(MsgType))
def test_messages_of_every_type_from_a_non_member_are_dropped(kind):
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    b = net["b"]
    before = (b.term, b.lead, b.vote, b.commit, b.last_index, b.role, a.term, a.last_index)
    for target in (a, b):
        target.step(Message(type=kind, to=target.id, frm="evil", term=b.term + 5,
                            index=b.last_index + 1, log_term=b.term + 5, commit=b.commit + 10,
                            entries=(Entry(b.term + 5, b.last_index + 1, EntryType.NORMAL,
                                           b"rm -rf /"),)))
    net.settle()
    assert (b.term, b.lead, b.vote, b.commit, b.last_index, b.role, a.term,
            a.last_index) == before
    assert not [m for m in net.sent if m.to == "evil"]
    assert all(b"rm -rf /" not in e.data for e in net.applied["a"] + net.applied["b"])


def test_a_removed_member_can_no_longer_lead_or_propose_to_the_others():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "c"))
    net.settle()
    b = net["b"]
    b.step(Message(type=MsgType.HEARTBEAT, to="b", frm="c", term=b.term + 1, commit=0))
    a.step(Message(type=MsgType.PROPOSE, to="a", frm="c", term=a.term,
                   entries=(Entry(0, 0, EntryType.NORMAL, b"from-c"),)))
    net.settle()
    assert b.lead == "a" and b.term == a.term and a.role == LEADER
    assert b"from-c" not in [e.data for e in net.applied["a"]]


def test_a_member_whose_addition_is_in_the_log_but_not_applied_is_heard():
    # The leader has appended (not yet applied) ADD_LEARNER d and already
    # talks to d; d's answers must count.
    net = Net(["a", "b", "c"], learners=[])
    a = net.elect("a")
    net.nodes["d"] = Raft(RaftConfig("d"), random.Random("d"), conf=ConfState((), ()))
    net.applied["d"] = []
    a.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, "d"))
    net.settle()
    a.propose(b"after-d")
    net.settle()
    assert "d" in a.conf.learners and b"after-d" in [e.data for e in net.applied["d"]]


def test_a_removed_voter_that_missed_its_removal_cannot_disrupt_the_leader():
    # seed 20000000003769 (found by the campaign): without PreVote and
    # CheckQuorum, a removed node that never learned of its removal kept
    # campaigning with ever higher terms; each vote request deposed the leader,
    # which never committed again.
    net = Net(["a", "b", "c"], pre_vote=False, check_quorum=False)
    a = net.elect("a")
    net.drop = lambda m: m.to == "c"
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "c"))
    net.settle()
    c = net["c"]
    assert a.conf.voters == ("a", "b") and "c" in c.conf.voters
    net.drop = lambda m: False
    term = a.term
    for _ in range(3):
        net.campaign("c")
    a.propose(b"still-leading")
    net.settle()
    assert a.role == LEADER and a.term == term
    assert b"still-leading" in [e.data for e in net.applied["b"]]


def test_a_node_that_never_campaigns_tells_a_stale_leader_its_term():
    # seed 545: a node outside its own configuration had a newer term (from a
    # removed node's vote request); without PreVote and CheckQuorum it ignored
    # the leader's appends silently and, never campaigning, never caught up.
    net = Net(["a", "b"], learners=["l"], pre_vote=False, check_quorum=False)
    a = net.elect("a")
    l = net["l"]  # noqa: E741 - the learner is named l
    l.step(Message(type=MsgType.VOTE, to="l", frm="b", term=a.term + 5,
                   index=l.last_index, log_term=l.log.last_term()))
    net.queue.clear()
    assert l.term == a.term + 5
    a.propose(b"x")
    net.settle()
    assert a.term >= l.term or a.role != LEADER  # told of the newer term
    net.campaign("a")
    a.propose(b"after")
    net.settle()
    assert a.role == LEADER and b"after" in [e.data for e in net.applied["l"]]


def test_a_vouched_member_is_heard_before_its_addition_is_applied():
    # seeds 101 and 545: b lagged behind the addition of d, which then led; b
    # dropped every message of d until the members it knows vouched for d.
    net = Net(["a", "b", "c"])
    b = net["b"]
    evil = Message(type=MsgType.HEARTBEAT, to="b", frm="d", term=b.term + 1, commit=0)
    b.step(evil)
    assert b.lead == "" and b.term == 0
    b.vouch("d")  # a member, not a voter: it may not lead
    b.step(evil)
    assert b.lead == "" and b.term == 0
    b.vouch("d", voter=True)
    b.step(evil)
    assert b.lead == "d" and b.term == 1
    b._apply_conf(ConfChange(ConfChangeType.REMOVE, "d"))  # its removal ends the vouching
    assert "d" not in b.vouched and "d" not in b.vouched_voters
    b.step(Message(type=MsgType.HEARTBEAT, to="b", frm="d", term=b.term + 1, commit=0))
    assert b.term == 1


def test_a_voucher_behind_this_node_cannot_bring_a_removed_member_back():
    # The removal of d is applied here (index 2); a voucher that has applied
    # only up to index 1 still has d as a voter and vouches for it: ignored.
    net = Net(["a", "b", "c"])
    b = net["b"]
    b.log.applied = 2
    b.vouch("d", voter=True, upto=1)
    b.vouch("d", upto=2)                  # not ahead of b either
    assert not b.knows_member("d") and not b.knows_member("d", voter=True)
    b.step(Message(type=MsgType.HEARTBEAT, to="b", frm="d", term=b.term + 1, commit=0))
    assert b.lead == "" and b.term == 0
    # a voucher ahead of b is heard, until b has applied as far as it had
    b.vouch("d", voter=True, upto=5)
    assert b.knows_member("d", voter=True)
    b.log.applied = 5
    assert not b.knows_member("d", voter=True)



# -- what a member may not do (review of issue 9) ---------------------------------------------------------
def test_a_learner_cannot_lead_a_voter_or_make_it_apply_anything():
    net = Net(["a", "b"], learners=["l"])
    net.elect("a")
    b = net["b"]
    term, last, commit = b.term, b.last_index, b.commit
    b.step(Message(type=MsgType.APP, to="b", frm="l", term=term + 1, index=last,
                   log_term=b.log.last_term(), commit=last + 1,
                   entries=(Entry(term + 1, last + 1, EntryType.NORMAL, b"forged"),)))
    for kind in (MsgType.HEARTBEAT, MsgType.VOTE, MsgType.PREVOTE, MsgType.TIMEOUT_NOW):
        b.step(Message(type=kind, to="b", frm="l", term=term + 1, index=last + 5,
                       log_term=term + 1, commit=last + 1))
    net.settle()
    assert (b.term, b.lead, b.commit) == (term, "a", commit)
    assert b"forged" not in [e.data for e in net.applied["b"]]


def test_only_the_leader_hands_over_or_answers_a_read():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    b = net["b"]
    b.step(Message(type=MsgType.TIMEOUT_NOW, to="b", frm="c", term=a.term))
    assert b.role == FOLLOWER and b.term == a.term
    b.read_index(b"rb")
    net.queue.clear()  # the real answer never comes
    b.step(Message(type=MsgType.READ_INDEX_RESP, to="b", frm="c", term=a.term, index=10**6,
                   context=b"rb"))
    net.cycle("b")
    assert not [rs for rd in net.readies["b"] for rs in rd.read_states]


def test_a_term_far_ahead_is_dropped_so_no_member_can_exhaust_the_term_space():
    # A heartbeat with term 2**62 - 1 used to be adopted and persisted; every
    # later campaign then needed term 2**62, which the codec refuses: no
    # leader ever again.
    from cronrd.raft.core import MAX_TERM_STEP
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    for frm, to in (("b", "a"), ("a", "c"), ("c", "b")):
        net[to].step(Message(type=MsgType.HEARTBEAT, to=to, frm=frm, term=2 ** 62 - 1))
        net[to].step(Message(type=MsgType.VOTE, to=to, frm=frm, term=a.term + MAX_TERM_STEP + 1,
                             index=10**6, log_term=10**6))
    net.settle()
    assert all(n.term == a.term for n in net.nodes.values()) and a.role == LEADER


def test_an_append_whose_entries_do_not_follow_its_index_is_dropped_not_fatal():
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose(b"x")
    net.settle()
    b = net["b"]
    commit = b.commit
    b.step(Message(type=MsgType.APP, to="b", frm="a", term=a.term, index=b.last_index,
                   log_term=b.log.last_term(), commit=b.commit,
                   entries=(Entry(a.term, 1, EntryType.NORMAL, b"rewrite"),)))
    assert b.commit == commit and b"rewrite" not in [e.data for e in b.log.entries]


def test_a_voter_that_lags_tells_a_stale_leader_its_term_without_prevote():
    # seed 1544: b (a voter in its own view, demoted to learner meanwhile)
    # inflated its term; the others drop its campaigns, so only its answer to
    # the leader's append can carry its term.
    net = Net(["a", "b", "c"], pre_vote=False, check_quorum=False)
    a = net.elect("a")
    b = net["b"]
    b.step(Message(type=MsgType.VOTE, to="b", frm="c", term=a.term + 7, index=0, log_term=0))
    net.queue.clear()
    net.sent.clear()
    a.propose(b"x")
    net.settle()
    assert any(m.type == MsgType.APP_RESP and m.frm == "b" and m.term == a.term + 7
               for m in net.sent) or a.term >= b.term


def test_a_node_outside_its_configuration_refuses_votes_without_taking_their_term():
    # seed 50000000077640: a re-added node, behind on the membership (its own
    # configuration lacks it), heard a removed node's campaigns, took their
    # ever higher terms and passed them on to the leader, deposing it every
    # few seconds; it never finished receiving its snapshot.
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose_conf_change(ConfChange(ConfChangeType.REMOVE, "b"))
    net.settle()
    b = net["b"]
    assert "b" not in b.conf.members()
    term = b.term
    net.sent.clear()
    b.step(Message(type=MsgType.VOTE, to="b", frm="c", term=term + 9, index=0, log_term=0))
    (resp,) = b.ready().messages
    assert b.term == term and resp.type == MsgType.VOTE_RESP and resp.reject
    assert resp.term == term + 9 and resp.commit == b.commit  # counts there, and tells
    # A candidate it may grant still gets its vote: b may be a voter of a
    # configuration it has not applied yet.
    for _ in range(b.cfg.election_tick):
        b.tick()  # b's lease on its last leader runs out
    b.step(Message(type=MsgType.VOTE, to="b", frm="c", term=term + 9, index=10**6,
                   log_term=term + 9))
    (resp,) = b.ready().messages
    assert b.term == term + 9 and not resp.reject


def test_a_candidate_that_applies_its_own_removal_does_not_become_leader():
    # seed 50000000096748: a candidate learned a commit from a refusal, applied
    # its own removal, and the new voters' grants still made it leader: a
    # leader outside the configuration, which never stepped down.
    net = Net(["a", "b", "c", "d"], pre_vote=False)
    d = net["d"]
    d._campaign(transfer=False)
    assert d.role == CANDIDATE
    d._conf_applied(ConfChange(ConfChangeType.REMOVE, "d"))
    assert d.role == FOLLOWER  # applying its own removal ends its campaign
    # And grants that arrive after the removal is applied never make it leader.
    e = Net(["a", "b", "c", "d"], pre_vote=False)["d"]
    e._campaign(transfer=False)
    e._apply_conf(ConfChange(ConfChangeType.REMOVE, "d"))
    for v in ("a", "b", "c"):
        e.step(Message(type=MsgType.VOTE_RESP, to="d", frm=v, term=e.term))
    assert e.role != LEADER


def test_a_node_that_cannot_campaign_forgets_a_silent_leader():
    # seed 50000000098497: learners removed without knowing it kept forwarding
    # proposals to a leader that drops a non-member's messages; nobody answered.
    net = Net(["a", "b"], learners=["l"])
    a = net.elect("a")
    l = net["l"]  # noqa: E741 - the learner is named l
    assert l.lead == "a"
    net.drop = lambda m: m.to == "l"  # the leader no longer sends it anything
    for _ in range(3 * l.cfg.election_tick):
        l.tick()
    assert l.lead == "" and l.role == FOLLOWER and l.term == a.term
    l.propose(b"x", b"op")
    (dropped,) = l.ready().dropped
    assert dropped[0] == b"op" and "no leader" in dropped[1]


def test_a_ready_carries_at_most_max_committed_bytes_of_committed_entries():
    net = Net(["a", "b", "c"], max_committed_bytes=1000)
    a = net.elect("a")
    for i in range(20):
        a.propose(bytes([i]) * 300)
    net.settle()
    for i in "abc":
        got = [e.data for e in net.applied[i] if e.type == EntryType.NORMAL]
        assert got == [bytes([k]) * 300 for k in range(20)]  # all of them, in order
        sizes = [sum(len(e.data) + 24 for e in rd.committed) for rd in net.readies[i]]
        # each Ready at most the bound (or one entry), so several carried them
        assert max(sizes) <= 1000 and sum(1 for s in sizes if s) >= 7


class ListSink:
    """A snapshot_sink that records what the core does with it."""
    made: list["ListSink"] = []

    def __init__(self):
        self.chunks, self.finished, self.discarded = [], False, False
        ListSink.made.append(self)

    def extend(self, data):
        self.chunks.append(bytes(data))

    def __len__(self):
        return sum(map(len, self.chunks))

    def finish(self):
        self.finished = True
        return ("file", b"".join(self.chunks))

    def discard(self):
        self.discarded = True


def test_a_snapshot_is_received_chunk_by_chunk_into_the_sink_the_runtime_gives():
    """The runtime passes a file as the sink (a 100 MB state is never held
    whole): chunks go to it as they come, a transfer started over drops the
    abandoned one, and the finished data is what the install carries."""
    from cronrd.raft.types import SnapshotMeta
    ListSink.made = []
    b = Raft(RaftConfig("b", snapshot_sink=ListSink), random.Random(2),
             conf=ConfState(("a", "b", "c")))
    meta = SnapshotMeta(9, 2, ConfState(("a", "b", "c")))

    def chunk(offset, data, done=False, frm="c", term=3):
        b.step(Message(MsgType.SNAP, to="b", frm=frm, term=term, snapshot_meta=meta,
                       offset=offset, data=data, done=done))
    chunk(0, b"abc", frm="a", term=2)
    chunk(3, b"def", frm="a", term=2)
    chunk(0, b"ABC")        # another leader's copy: the first transfer is dropped
    assert [s.discarded for s in ListSink.made] == [True, False]
    chunk(3, b"DEF")
    chunk(9, b"zzz")        # out of order: not taken
    chunk(6, b"GHI", done=True)
    first, second = ListSink.made
    assert second.chunks == [b"ABC", b"DEF", b"GHI"] and second.finished
    assert not first.finished
    rd = b.ready()
    assert rd.snapshot is not None and rd.snapshot.data == ("file", b"ABCDEFGHI")
    assert rd.snapshot.meta == meta


def _snapshot_rounds(drop_first_at=None):
    """A learner receiving a 5-chunk snapshot while the leader heartbeats
    every round (one delivery of the queued messages per round): the SNAP
    offsets sent, in order."""
    net, a, _ = _leader_with_new_learner()
    dropped = []

    def drop(m):
        if m.type == MsgType.SNAP and m.offset == drop_first_at and not dropped:
            dropped.append(m)
            return True
        return False
    for _ in range(40):
        a.tick()
        for i in net.nodes:
            net.cycle(i)
        queue, net.queue = net.queue, []
        for m in queue:
            if m.to in net.nodes and not drop(m):
                net.nodes[m.to].step(m)
        if "n" in net.snapshots:
            break
    assert net.snapshots["n"].data == SNAP_DATA
    return [m.offset for m in net.sent if m.type == MsgType.SNAP and m.to == "n"]


def test_a_snapshot_chunk_is_sent_again_only_when_the_transfer_stalls():
    # Answered chunks, heartbeats in between: each chunk once (copies at
    # every heartbeat answer held a 64 MB transfer to 8 MB/s).
    assert _snapshot_rounds() == [0, 8, 16, 24, 32]
    # A lost chunk: sent again once it went unanswered for an election
    # timeout (10 ticks; a heartbeat answer brings the check).
    offsets = _snapshot_rounds(drop_first_at=16)
    assert offsets.count(16) == 2 and offsets[-1] == 32
    assert all(offsets.count(o) == 1 for o in (0, 8, 24, 32))


def test_a_snapshot_transfer_resumes_where_it_stood_after_a_term_change():
    # seed 734837732495074: a voter behind a compaction was receiving a
    # 23-chunk snapshot while a removed node it still counted as a voter
    # campaigned every election timeout; each campaign gave it a newer term,
    # which deposed the leader (no PreVote, no CheckQuorum). The leader, re-
    # elected with the same snapshot, started the transfer over at offset 0
    # and the follower dropped what it had, so terms changed faster than the
    # transfer could finish and it never did. The follower now answers the
    # restart with where it stands, and the leader goes on from there.
    net = Net(["a", "b", "e"], pre_vote=False, check_quorum=False, snapshot_chunk_bytes=8)
    a = net.elect("a")
    e = net["e"]
    net.drop = lambda m: m.to == "e"          # e falls behind a compaction
    for k in range(4):
        a.propose(b"%d" % k)
    net.settle()
    snap = a.compact(a.applied, SNAP_DATA)
    # e gets the first three chunks; the fourth is lost (the transfer stands
    # at 24 bytes).
    net.drop = lambda m: m.to == "e" and m.type == MsgType.SNAP and m.offset >= 24
    a.tick()
    net.settle()
    assert [m.offset for m in net.sent if m.type == MsgType.SNAP] == [0, 8, 16, 24]
    # A vote request of a newer term (the removed node's campaign) reaches e,
    # which tells the leader of that term at its next heartbeat: a steps down.
    net.drop = lambda m: False
    e.step(Message(MsgType.VOTE, to="e", frm="b", term=a.term + 1, index=e.last_index,
                   log_term=e.log.last_term()))
    a.tick()
    net.settle()
    assert a.role == FOLLOWER
    # a is elected again, with the same snapshot, and starts over at offset 0.
    net.sent.clear()
    net.campaign("a")
    assert a.role == LEADER and a.snapshot is snap
    snaps = [m for m in net.sent if m.type == MsgType.SNAP]
    resps = [m for m in net.sent if m.type == MsgType.SNAP_RESP]
    assert [m.offset for m in snaps] == [0, 24, 32]
    assert resps[0].offset == 24 and not resps[0].reject   # where e stands
    assert net.snapshots["e"].data == SNAP_DATA and net.snapshots["e"].meta == snap.meta
    assert e.log.snap_index == snap.meta.index and e.applied == a.applied


def test_a_snapshot_transfer_from_another_sender_starts_over():
    # Two nodes' snapshots at one index may differ byte for byte (copies of
    # a database): a transfer resumes only from the node that began it.
    from cronrd.raft.types import SnapshotMeta
    b = Raft(RaftConfig("b"), random.Random(2), conf=ConfState(("a", "b", "c")))
    meta = SnapshotMeta(9, 2, ConfState(("a", "b", "c")))

    def chunk(frm, term, offset, data, done=False):
        b.step(Message(MsgType.SNAP, to="b", frm=frm, term=term, snapshot_meta=meta,
                       offset=offset, data=data, done=done))
        resp = b.msgs[-1]
        b.msgs.clear()
        return resp
    assert chunk("a", 2, 0, b"abc").offset == 3
    assert chunk("a", 3, 0, b"abc").offset == 3      # a again, a term later: resumed
    assert chunk("c", 4, 0, b"XYZ").offset == 3      # c: its own copy, from the start
    done = chunk("c", 4, 3, b"UVW", done=True)
    assert done.type == MsgType.APP_RESP and done.index == 9
    rd = b.ready()
    assert rd.snapshot is not None and rd.snapshot.data == b"XYZUVW"

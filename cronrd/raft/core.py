"""The Raft consensus core: a pure state machine, in the manner of etcd's raft.

Inputs: ``tick()``, ``step(message)``, ``propose(data)`` and the other
request methods. Output: ``ready()`` returns a ``Ready`` saying what to
persist, send and apply; the caller does it in that order and calls
``advance(ready)``. No clocks, sockets, files or global randomness: time is
ticks, randomness comes from the ``random.Random`` passed in.

Features: leader election with randomised timeouts, PreVote, CheckQuorum;
log replication with the consistency check and fast back-off, pipelined
appends with flow control (messages in flight, bytes per message); commit
only by counting entries of the current term; a no-op entry at the start of
each term; learners; one-at-a-time membership changes (never more than one
uncommitted, and a new leader first commits an entry of its own term);
leadership transfer (TimeoutNow); ReadIndex; chunked InstallSnapshot and log
compaction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import CronrdError
from . import confchange, quorum
from .log import RaftLog
from .tracker import PROBE, REPLICATE, SNAPSHOT, Progress
from .types import (ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState,
                    Message, MsgType, Ready, ReadState, Snapshot, SnapshotMeta, SoftState)

FOLLOWER, CANDIDATE, PRECANDIDATE, LEADER = "follower", "candidate", "precandidate", "leader"
TRANSFER = b"transfer"
# A message whose term is more than this above ours is dropped: honest terms
# grow by one per election (PreVote keeps an isolated node from inflating its
# own), so only a broken or hostile sender jumps this far, and accepting the
# jump would bring every node nearer to the end of the term space.
MAX_TERM_STEP = 1 << 20
# Only a voter leads, campaigns or hands over leadership: these from anyone
# else (a learner, a stranger) are dropped.
VOTER_ONLY = frozenset({MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP, MsgType.TIMEOUT_NOW,
                        MsgType.VOTE, MsgType.PREVOTE})


VOUCH_FOREVER = 1 << 62  # a vouch without the voucher's applied index (an older peer)

class RaftError(CronrdError):
    """An invariant of the protocol was violated (a bug or corrupted state)."""


@dataclass(frozen=True)
class RaftConfig:
    id: str
    election_tick: int = 10          # ticks without a leader before campaigning (randomised x1..x2)
    heartbeat_tick: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    max_inflight: int = 256          # APP messages in flight per follower
    max_msg_bytes: int = 1 << 20     # entry bytes per APP message
    max_committed_bytes: int = 1 << 20  # committed entry bytes per Ready (to apply at once)
    snapshot_chunk_bytes: int = 1 << 20
    # Where a snapshot being received goes: a callable returning a buffer
    # with extend(bytes) and len(); if it has finish(), that gives the
    # snapshot's data when the last chunk is in, and discard() drops an
    # abandoned one. Default: bytes in memory (the node's runtime passes a
    # file, so a 100 MB state is never held whole).
    snapshot_sink: Callable[[], Any] | None = None


@dataclass
class PendingRead:
    context: bytes
    index: int
    requester: str                   # "" when the leader itself asked
    acks: set[str] = field(default_factory=set)


class Raft:
    def __init__(self, config: RaftConfig, rng: random.Random, *, conf: ConfState,
                 hard_state: HardState = HardState(), entries: list[Entry] | tuple[Entry, ...] = (),
                 snapshot: Snapshot | None = None, applied: int = 0):
        """Restart (or bootstrap) from durable state.

        ``conf`` is the bootstrap membership, replaced by the snapshot's when
        there is one; membership entries up to ``applied`` are replayed.
        ``applied`` is the state machine's applied index.
        """
        self.cfg = config
        self.id = config.id
        self.rng = rng
        snap_index = snapshot.meta.index if snapshot else 0
        snap_term = snapshot.meta.term if snapshot else 0
        self.log = RaftLog(snap_index, snap_term, list(entries))
        self.snapshot = snapshot            # latest snapshot (with data) to send followers
        self.conf = snapshot.meta.conf if snapshot else conf
        # members this node has not applied yet (vouch), each with the
        # voucher's applied index: the vouch holds while this node is behind it
        self.vouched: dict[str, int] = {}
        self.vouched_voters: dict[str, int] = {}
        self.term = hard_state.term
        self.vote = hard_state.vote
        if hard_state.commit > self.log.last_index():
            raise RaftError(f"commit {hard_state.commit} beyond last index "
                            f"{self.log.last_index()}")
        self.log.commit = max(hard_state.commit, snap_index)
        applied = max(applied, snap_index)
        if applied > self.log.commit:
            # Only committed entries are applied, and they were durable in the
            # log before that; the durable commit index may just lag (a
            # commit-only change of the hard state is not fsynced).
            if applied > self.log.last_index():
                raise RaftError(f"applied {applied} beyond the last log index "
                                f"{self.log.last_index()}")
            self.log.commit = applied
        for e in self.log.slice(snap_index + 1, applied + 1):
            if e.type == EntryType.CONF:
                self._apply_conf(ConfChange.decode(e.data))
        self.log.applied = applied
        self.role = FOLLOWER
        self.lead = ""
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.ticks = 0  # ticks since this Raft was made (timing resends)
        self.randomized_timeout = self._random_timeout()
        self.votes: dict[str, bool] = {}
        self.prs: dict[str, Progress] = {}
        self.pending_conf_index = 0
        self.lead_transferee = ""
        self.reads: list[PendingRead] = []
        self.read_queue: list[tuple[bytes, str]] = []  # reads waiting for a commit in term
        self.read_states: list[ReadState] = []
        self.msgs: list[Message] = []
        self.dropped: list[tuple[bytes, str]] = []
        self.snap_recv: tuple[SnapshotMeta, str, Any] | None = None  # meta, sender, sink
        self.pending_install: Snapshot | None = None
        self.campaign_held = False  # see _promotable
        # A commit index beyond this node's last entry that a voter named in
        # refusing its vote: until its log reaches it (or a leader is heard)
        # it cannot be elected, and does not campaign (see _step_candidate).
        self.behind = 0
        self.prev_hs = HardState(self.term, self.vote, self.log.commit)
        self.prev_ss = SoftState("", self.public_role)
        self._self_match = self.log.last_index()

    # -- views ------------------------------------------------------------------
    @property
    def public_role(self) -> str:
        if self.role == FOLLOWER and self.id in self.conf.learners:
            return "learner"
        return self.role

    @property
    def commit(self) -> int:
        return self.log.commit

    @property
    def applied(self) -> int:
        return self.log.applied

    @property
    def last_index(self) -> int:
        return self.log.last_index()

    def is_voter(self, node: str | None = None) -> bool:
        return (node or self.id) in self.conf.voters

    def quorum(self) -> int:
        return quorum.majority(self.conf.voters)

    def _random_timeout(self) -> int:
        return self.cfg.election_tick + self.rng.randrange(self.cfg.election_tick)

    def _send(self, **kw: Any) -> None:
        kw.setdefault("term", self.term)
        self.msgs.append(Message(frm=self.id, **kw))

    # -- role changes -------------------------------------------------------------
    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = ""
        self.lead = ""
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self._random_timeout()
        self.votes = {}
        self.lead_transferee = ""
        self._fail_reads("leadership changed")
        self.prs = {}

    def _fail_reads(self, reason: str) -> None:
        for r in self.reads:
            if r.requester == "" or r.requester == self.id:
                self.dropped.append((r.context, f"read index abandoned: {reason}"))
        for ctx, requester in self.read_queue:
            if requester in ("", self.id):
                self.dropped.append((ctx, f"read index abandoned: {reason}"))
        self.reads = []
        self.read_queue = []

    def become_follower(self, term: int, lead: str) -> None:
        self._reset(term)
        self.lead = lead
        self.role = FOLLOWER

    def _become_precandidate(self) -> None:
        # PreVote does not change the term or the vote.
        self.role = PRECANDIDATE
        self.votes = {}
        self.lead = ""
        self.election_elapsed = 0
        self.randomized_timeout = self._random_timeout()

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self.role = LEADER
        last = self.log.last_index()
        for node in self.conf.members():
            if node != self.id:
                self.prs[node] = Progress(match=0, next=last + 1)
        # Any unapplied membership change in the log counts as pending.
        self.pending_conf_index = last
        self.log.append([Entry(self.term, last + 1, EntryType.NOOP)])

    def leader_gone(self) -> None:
        """The driver saw the leader's connection close (its process died: the
        kernel closes a killed process's sockets). A follower stops counting
        on the leader's lease (it grants votes now) and campaigns within 1-3
        ticks (randomised) instead of a whole election timeout. A false alarm
        costs nothing: PreVote needs a quorum, and a node that still hears
        the leader refuses; the leader's next heartbeat resets the timer."""
        if self.role != FOLLOWER or not self.lead:
            return
        self.election_elapsed = max(self.election_elapsed, self.cfg.election_tick)
        self.randomized_timeout = min(self.randomized_timeout,
                                      self.election_elapsed + 1 + self.rng.randrange(3))

    # -- ticks --------------------------------------------------------------------------
    def tick(self) -> None:
        self.ticks += 1
        if self.role == LEADER:
            self._tick_leader()
        else:
            self.election_elapsed += 1
            if self.election_elapsed >= self.randomized_timeout:
                if self._promotable():
                    self.election_elapsed = 0
                    self._campaign(transfer=False)
                elif self.lead and self.role == FOLLOWER:
                    # A node that cannot campaign (a learner, or one removed
                    # without knowing it, which the leader no longer sends
                    # anything) forgets a leader that has gone silent: its
                    # requests are then refused at once ("no leader is
                    # known") instead of being forwarded where nobody answers
                    # (seed 50000000098497).
                    self.lead = ""

    def knows_member(self, node: str, voter: bool = False) -> bool:
        """Is ``node`` a member (with ``voter``: a voter) as far as this node
        knows: in the applied configuration, vouched for (``vouch``), or
        added (promoted) by a membership entry already in its log (the leader
        talks to a new member from the moment it appends the entry)?"""
        if node in self.conf.voters or self._vouched(node, True):
            return True
        if not voter and (node in self.conf.learners or self._vouched(node, False)):
            return True
        want = (ConfChangeType.PROMOTE,) if voter else (ConfChangeType.ADD_LEARNER,
                                                        ConfChangeType.PROMOTE)
        for e in self.log.slice(max(self.log.applied, self.log.snap_index) + 1,
                                self.log.last_index() + 1):
            if e.type == EntryType.CONF:
                cc = ConfChange.decode(e.data)
                if cc.node == node and cc.type in want:
                    return True
        return False

    def _in_conf(self) -> bool:
        return self.id in self.conf.voters or self.id in self.conf.learners

    def _from_member(self, node: str, voter: bool = False) -> bool:
        """Messages are heard only from members (``knows_member``), and those
        that lead, campaign or hand over leadership only from voters: a
        stranger, a member since removed, or a learner can neither lead this
        node, nor vote, nor propose. A node outside its own configuration
        (joining, or removed) hears anyone: it knows no members to check
        against, and the transport admits only the members it was told of."""
        return not self._in_conf() or self.knows_member(node, voter)

    def vouch(self, node: str, voter: bool = False, upto: int | None = None) -> None:
        """A voter this node knows says ``node`` is a member (a voter) in its
        applied configuration: hear it before this node has applied that
        change. A node that lagged behind a member's addition or promotion
        would otherwise drop every message of that member, even when it leads.

        ``upto``: the voucher's applied index when it answered. The vouch
        holds only while this node has applied less: from there on its own
        configuration is at least as new as the voucher's, and a voucher that
        is behind (it has not applied ``node``'s removal yet) cannot bring a
        removed node back. None (a voucher that does not say): until the
        node's removal is applied here."""
        held = self.vouched_voters if voter else self.vouched
        held[node] = max(held.get(node, 0), VOUCH_FOREVER if upto is None else int(upto))

    def _vouched(self, node: str, voter: bool) -> bool:
        upto = (self.vouched_voters if voter else self.vouched).get(node)
        return upto is not None and self.log.applied < upto

    def _promotable(self) -> bool:
        # campaign_held: set by the driver while this node must not lead
        # (its wall clock is off: runtime/cluster/clock_watch.py). It still votes.
        return (self.is_voter() and self.pending_install is None and not self.campaign_held
                and self.log.last_index() >= self.behind)

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum:
                active = sum(1 for v in self.conf.voters
                             if v == self.id or (v in self.prs and self.prs[v].recent_active))
                for pr in self.prs.values():
                    pr.recent_active = False
                if active < self.quorum():
                    self.become_follower(self.term, "")
                    return
            if self.lead_transferee:
                self.lead_transferee = ""  # took longer than an election timeout: abort
        if self.role == LEADER and self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat(self.reads[-1].context if self.reads else b"")

    # -- elections ------------------------------------------------------------------------
    def _campaign(self, transfer: bool, prevoted: bool = False) -> None:
        # A pre-vote that timed out starts another pre-vote (never a real
        # election: a partitioned node must not keep bumping its term). Only a
        # won pre-vote (``prevoted``) or a transfer (TimeoutNow) starts a real one,
        # and only a transfer's votes carry the context that bypasses leases.
        if self.cfg.pre_vote and not transfer and not prevoted:
            self._become_precandidate()
            kind, term = MsgType.PREVOTE, self.term + 1
        else:
            self._become_candidate()
            kind, term = MsgType.VOTE, self.term
        self.votes[self.id] = True
        if self._tally() >= self.quorum():  # a single voter wins at once
            if kind == MsgType.PREVOTE:
                self._campaign(transfer=False, prevoted=True)  # straight to a real one
            else:
                self._become_leader()
                self._bcast_append()
            return
        for node in self.conf.voters:
            if node != self.id:
                self._send(type=kind, to=node, term=term, index=self.log.last_index(),
                           log_term=self.log.last_term(),
                           context=TRANSFER if transfer else b"")

    def _tally(self) -> int:
        return quorum.granted(self.votes, self.conf.voters)

    def _rejections(self) -> int:
        return quorum.rejected(self.votes, self.conf.voters)

    # -- step -----------------------------------------------------------------------------------
    def step(self, m: Message) -> None:
        if m.frm == self.id or not self._from_member(m.frm, m.type in VOTER_ONLY):
            return
        if m.term > self.term + MAX_TERM_STEP and self._in_conf():
            return
        if m.type == MsgType.VOTE and m.term > self.term and not self._in_conf() \
                and not self.log.is_up_to_date(m.index, m.log_term):
            # A node outside its own configuration (joining, removed, or
            # re-added but behind) refuses a candidate with a staler log
            # without taking its term (it tells its commit, see _handle_vote):
            # it would otherwise pass that term on to the leader and depose it
            # (seed 50000000077640: a removed node that kept campaigning did
            # that every few seconds, and a re-added node never finished
            # receiving its snapshot). It still votes for a candidate it may
            # grant: it may be a voter of a configuration it has not applied.
            self._send(type=MsgType.VOTE_RESP, to=m.frm, term=m.term, reject=True,
                       commit=self.log.commit, log_term=self.log.term(self.log.commit) or 0)
            return
        if m.term > self.term:
            if m.type in (MsgType.VOTE, MsgType.PREVOTE):
                in_lease = (self.cfg.check_quorum and self.lead != ""
                            and self.election_elapsed < self.cfg.election_tick)
                if in_lease and m.context != TRANSFER:
                    return  # we heard from a leader recently: ignore the disruption
            if m.type == MsgType.PREVOTE:
                pass  # a pre-vote never changes our term
            elif m.type == MsgType.PREVOTE_RESP and not m.reject:
                pass  # granted pre-votes carry the future term
            else:
                lead = m.frm if m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP) else ""
                elapsed = self.election_elapsed
                self.become_follower(m.term, lead)
                if m.type == MsgType.VOTE:
                    # Only granting the vote restarts the election timer (_handle_vote).
                    # Otherwise a candidate with a stale log and a fast clock keeps
                    # resetting the timers of the nodes that could win, forever.
                    self.election_elapsed = elapsed
        elif m.term < self.term:
            if m.type in (MsgType.HEARTBEAT, MsgType.APP):
                # Tell a stale leader about the newer term so it steps down.
                # (etcd answers only with CheckQuorum or PreVote, and lets a
                # voter's campaigns carry its term otherwise. But the others
                # drop the campaigns of a node they do not count as a voter --
                # a learner, a node outside its own configuration, a voter
                # demoted while it was away -- so this answer is the only way
                # its term reaches the leader; without it the node would
                # ignore its leader for ever.)
                self._send(type=MsgType.APP_RESP, to=m.frm)
            elif m.type == MsgType.PREVOTE:
                self._send(type=MsgType.PREVOTE_RESP, to=m.frm, reject=True)
            elif m.type == MsgType.VOTE:
                # Tell a candidate of an older term about ours (§5.1) so that its
                # next campaign can win: a voter that does not consider it a voter
                # (it has not applied the promotion yet) will never ask it to vote,
                # and both would otherwise go on bumping their terms side by side.
                self._send(type=MsgType.VOTE_RESP, to=m.frm, reject=True)
            return

        if m.type in (MsgType.VOTE, MsgType.PREVOTE):
            self._handle_vote(m)
            return
        if self.role == LEADER:
            self._step_leader(m)
        elif self.role in (CANDIDATE, PRECANDIDATE):
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def _handle_vote(self, m: Message) -> None:
        can_vote = (self.vote == m.frm or (self.vote == "" and self.lead == "")
                    or (m.type == MsgType.PREVOTE and m.term > self.term))
        resp = MsgType.VOTE_RESP if m.type == MsgType.VOTE else MsgType.PREVOTE_RESP
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            # A pre-vote answer carries the candidate's future term.
            self._send(type=resp, to=m.frm, term=m.term)
            if m.type == MsgType.VOTE:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            # Tell the candidate how far we know the log is committed: a candidate
            # that holds that entry may commit up to it (log matching makes its
            # prefix identical). Without this, a voter that missed the commit of
            # a membership change removing this node (say the removed leader
            # stepped down before telling anyone) waits forever for a vote this
            # node must refuse, because this node's log is longer.
            self._send(type=resp, to=m.frm, reject=True, commit=self.log.commit,
                       log_term=self.log.term(self.log.commit) or 0)

    # -- leader -----------------------------------------------------------------------------------
    def _step_leader(self, m: Message) -> None:
        pr = self.prs.get(m.frm)
        if m.type == MsgType.PROPOSE:
            self._leader_append(list(m.entries), b"")
            return
        if m.type == MsgType.READ_INDEX:
            self._leader_read(m.context, m.frm)
            return
        if pr is None:
            return  # not a member (any more)
        pr.recent_active = True
        if m.type == MsgType.APP_RESP:
            if m.reject:
                if self._maybe_decr(pr, m):
                    if pr.state == REPLICATE:
                        pr.become_probe()
                    self._send_append(m.frm)
                return
            old_paused = pr.paused(self.cfg.max_inflight)
            if pr.maybe_update(m.index):
                if pr.state == PROBE:
                    pr.become_replicate()
                elif pr.state == SNAPSHOT and pr.match >= pr.pending_snapshot:
                    pr.become_probe()
                    pr.become_replicate()
                if self._maybe_commit():
                    self._bcast_append()
                elif old_paused or pr.next <= self.log.last_index():
                    self._send_append(m.frm)
                while pr.state == REPLICATE and pr.next <= self.log.last_index() and \
                        not pr.paused(self.cfg.max_inflight):
                    if not self._send_append(m.frm):
                        break
                if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                    self._send(type=MsgType.TIMEOUT_NOW, to=m.frm)
        elif m.type == MsgType.HEARTBEAT_RESP:
            pr.probe_sent = False
            if pr.state == REPLICATE and pr.paused(self.cfg.max_inflight):
                # The window is full and may stay full forever if those appends were
                # lost: free one slot so the next append (rejected if there is a gap)
                # brings the follower back to probing.
                pr.inflight.pop(0)
            if pr.state == SNAPSHOT:
                # The chunk in flight is sent again only when it has gone
                # unanswered for an election timeout (lost, not slow):
                # resending at every heartbeat answer filled the send queue
                # with copies of 1 MiB chunks and held a 64 MB transfer to
                # 8 MB/s.
                if self.ticks - pr.snap_sent_tick >= self.cfg.election_tick:
                    self._send_snapshot_chunk(m.frm, pr)
            elif pr.match < self.log.last_index():
                self._send_append(m.frm)
            if m.context:
                self._ack_read(m.context, m.frm)
        elif m.type == MsgType.SNAP_RESP:
            if pr.state != SNAPSHOT:
                return
            if m.reject:
                pr.become_probe()
                self._send_append(m.frm)
                return
            pr.snap_offset = m.offset
            self._send_snapshot_chunk(m.frm, pr)

    def _maybe_decr(self, pr: Progress, m: Message) -> bool:
        """A rejected append: move ``next`` back, using the follower's hint."""
        if pr.state == REPLICATE:
            if m.index <= pr.match:
                return False  # stale rejection
            pr.next = pr.match + 1
            return True
        if pr.next - 1 != m.index:
            return False  # stale: not the probe we sent
        probe = m.reject_hint
        if m.hint_term > 0:
            probe = self.log.find_conflict_by_term(m.reject_hint, m.hint_term)
        pr.next = max(min(m.index, probe + 1), pr.match + 1, 1)
        pr.probe_sent = False
        return True

    def _maybe_commit(self) -> bool:
        index = quorum.committed_index(self.conf.voters, self._match_of)
        if index is None:
            return False
        # Only entries of the current term are committed by counting (§5.4.2).
        if index > self.log.commit and self.log.term(index) == self.term:
            self.log.commit_to(index)
            self._release_queued_reads()
            return True
        return False

    def _match_of(self, node: str) -> int:
        if node == self.id:
            return self._self_match
        pr = self.prs.get(node)
        return pr.match if pr is not None else 0

    def _send_append(self, to: str) -> bool:
        pr = self.prs[to]
        if pr.paused(self.cfg.max_inflight):
            return False
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        if prev_term is None:
            return self._start_snapshot(to, pr)
        entries = self.log.slice(pr.next, self.log.last_index() + 1, self.cfg.max_msg_bytes)
        self._send(type=MsgType.APP, to=to, index=prev, log_term=prev_term,
                   entries=tuple(entries), commit=self.log.commit)
        if entries:
            last = entries[-1].index
            if pr.state == REPLICATE:
                pr.next = last + 1
                pr.inflight.append(last)
            else:
                pr.probe_sent = True
        elif pr.state == PROBE:
            pr.probe_sent = True
        return bool(entries)

    def _start_snapshot(self, to: str, pr: Progress) -> bool:
        if self.snapshot is None:
            raise RaftError(f"follower {to} needs entries before {self.log.first_index()} "
                            "but there is no snapshot to send")
        pr.become_snapshot(self.snapshot.meta.index)
        self._send_snapshot_chunk(to, pr)
        return False

    def _send_snapshot_chunk(self, to: str, pr: Progress) -> None:
        snap = self.snapshot
        if snap is None or snap.meta.index != pr.pending_snapshot:
            pr.become_probe()
            return
        lo = pr.snap_offset
        pr.snap_sent_tick = self.ticks
        chunk = snap.data[lo: lo + self.cfg.snapshot_chunk_bytes]
        self._send(type=MsgType.SNAP, to=to, snapshot_meta=snap.meta, offset=lo, data=chunk,
                   done=lo + len(chunk) >= len(snap.data))

    def _bcast_append(self) -> None:
        for node in sorted(self.prs):
            self._send_append(node)

    def _bcast_heartbeat(self, context: bytes) -> None:
        for node in sorted(self.prs):
            pr = self.prs[node]
            self._send(type=MsgType.HEARTBEAT, to=node, commit=min(pr.match, self.log.commit),
                       context=context)

    def _leader_append(self, entries: list[Entry], context: bytes) -> bool:
        if self.lead_transferee:
            self.dropped.append((context, f"leadership is moving to {self.lead_transferee}"))
            return False
        last = self.log.last_index()
        out: list[Entry] = []
        for i, e in enumerate(entries):
            if e.type == EntryType.CONF:
                if self.pending_conf_index > self.log.applied:
                    self.dropped.append((context, "another membership change is not yet "
                                                  "applied; retry when it is"))
                    continue
                self.pending_conf_index = last + len(out) + 1
            out.append(Entry(self.term, last + len(out) + 1, e.type, e.data))
        if not out:
            return False
        self.log.append(out)
        self._bcast_append()
        return True

    # -- candidate ------------------------------------------------------------------------------------
    def _step_candidate(self, m: Message) -> None:
        if m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP):
            self.become_follower(m.term, m.frm)
            self._step_follower(m)
            return
        want = MsgType.PREVOTE_RESP if self.role == PRECANDIDATE else MsgType.VOTE_RESP
        if m.type == want:
            if m.reject and m.commit > self.log.commit and \
                    self.log.term(m.commit) == m.log_term:
                self.log.commit_to(m.commit)  # see _handle_vote
            if m.reject and m.commit > self.log.last_index():
                # The cluster has committed entries this node does not hold:
                # it cannot be a correct leader (leader completeness), yet a
                # voter that lags further (outside its own configuration)
                # may grant it, term after term, and never the voter that
                # can win (seed 14855062069096: a removed node whose clock
                # ran fast took every term's vote of the new configuration's
                # other voter). It stands down and campaigns no more until
                # its log reaches that index or a leader is heard.
                self.behind = max(self.behind, m.commit)
                self.become_follower(self.term, "")
                return
            self.votes.setdefault(m.frm, not m.reject)
            if not self.is_voter():
                # It applied its own removal meanwhile (a commit learned from
                # a refusal): a quorum of the new voters must not make a
                # non-member leader (seed 50000000096748).
                self.become_follower(self.term, "")
            elif self._tally() >= self.quorum():
                if self.role == PRECANDIDATE:
                    self._campaign(transfer=False, prevoted=True)
                else:
                    self._become_leader()
                    self._bcast_append()
            elif self._rejections() >= self.quorum():
                self.become_follower(self.term, "")
        elif m.type == MsgType.PROPOSE:
            pass  # forwarded to a node that is not leader: the proposer times out

    # -- follower --------------------------------------------------------------------------------------
    def _step_follower(self, m: Message) -> None:
        if m.type in (MsgType.APP, MsgType.HEARTBEAT, MsgType.SNAP):
            self.behind = 0   # a leader is heard: it brings the log up (or was elected)
        if m.type == MsgType.APP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_append(m)
        elif m.type == MsgType.HEARTBEAT:
            self.election_elapsed = 0
            self.lead = m.frm
            self.log.commit_to(min(m.commit, self.log.last_index()))
            self._send(type=MsgType.HEARTBEAT_RESP, to=m.frm, context=m.context)
        elif m.type == MsgType.SNAP:
            self.election_elapsed = 0
            self.lead = m.frm
            self._handle_snapshot(m)
        elif m.type == MsgType.TIMEOUT_NOW:
            if self._promotable() and m.frm == self.lead:  # only the leader hands over
                self._campaign(transfer=True)
        elif m.type == MsgType.READ_INDEX_RESP:
            if m.frm == self.lead:  # only the leader we asked answers
                self.read_states.append(ReadState(m.index, m.context))
        elif m.type == MsgType.PROPOSE:
            if self.lead:
                self._send(type=MsgType.PROPOSE, to=self.lead, entries=m.entries)

    def _handle_append(self, m: Message) -> None:
        ents = m.entries
        if ents and (ents[0].index != m.index + 1 or ents[-1].index != m.index + len(ents)):
            # Not a leader's append (its entries must follow its index): from
            # a broken or hostile sender; dropped, never fatal. (The ends are
            # checked, on the hot path; the codec refuses absurd indexes.)
            return
        if m.index < self.log.commit:
            self._send(type=MsgType.APP_RESP, to=m.frm, index=self.log.commit)
            return
        last_new = self.log.maybe_append(m.index, m.log_term, m.commit, m.entries)
        if last_new is not None:
            self._send(type=MsgType.APP_RESP, to=m.frm, index=last_new)
            return
        hint = min(m.index, self.log.last_index())
        hint = self.log.find_conflict_by_term(hint, m.log_term)
        self._send(type=MsgType.APP_RESP, to=m.frm, index=m.index, reject=True,
                   reject_hint=hint, hint_term=self.log.term(hint) or 0)

    def _handle_snapshot(self, m: Message) -> None:
        meta = m.snapshot_meta
        if meta is None:
            return
        if meta.index <= self.log.commit:
            # Already have it all: just tell the leader where we are.
            self._drop_snap_recv()
            self._send(type=MsgType.APP_RESP, to=m.frm, index=self.log.commit)
            return
        # A transfer is identified by the snapshot and its sender: a node has
        # one snapshot per index (``compact``), so those name the same bytes.
        # A first chunk of the transfer under way is the leader starting over
        # after a term change (its progress starts afresh; the snapshot has not
        # changed): answered with where it stands, not dropped. Starting over
        # at every term change kept a lagging node from ever finishing when
        # terms changed faster than the transfer took (seed 734837732495074).
        if m.offset == 0 and not (self.snap_recv is not None
                                  and self.snap_recv[:2] == (meta, m.frm)):
            self._drop_snap_recv()
            sink = self.cfg.snapshot_sink
            self.snap_recv = (meta, m.frm, sink() if sink is not None else bytearray())
        if self.snap_recv is None or self.snap_recv[:2] != (meta, m.frm):
            self._send(type=MsgType.SNAP_RESP, to=m.frm, reject=True)
            return
        buf = self.snap_recv[2]
        if m.offset != len(buf):
            self._send(type=MsgType.SNAP_RESP, to=m.frm, offset=len(buf))
            return
        buf.extend(m.data)
        if not m.done:
            self._send(type=MsgType.SNAP_RESP, to=m.frm, offset=len(buf))
            return
        self.snap_recv = None
        if self.log.match_term(meta.index, meta.term):
            # Our log already has the snapshot's last entry: keep the suffix.
            discard = getattr(buf, "discard", None)
            if discard is not None:
                discard()
            self.log.commit_to(meta.index)
        else:
            finish = getattr(buf, "finish", None)
            snap = Snapshot(meta, finish() if finish is not None else bytes(buf))
            self.log.restore(meta.index, meta.term)
            self.conf = meta.conf
            self.snapshot = snap
            self.pending_install = snap
        self._send(type=MsgType.APP_RESP, to=m.frm, index=self.log.last_index())

    def _drop_snap_recv(self) -> None:
        if self.snap_recv is not None:
            discard = getattr(self.snap_recv[2], "discard", None)
            if discard is not None:
                discard()
            self.snap_recv = None

    # -- requests from the application ----------------------------------------------------------------
    def propose(self, data: bytes, context: bytes = b"") -> None:
        self._propose([Entry(0, 0, EntryType.NORMAL, data)], context)

    def propose_conf_change(self, cc: ConfChange, context: bytes = b"") -> None:
        if self.role != LEADER:
            self.dropped.append((context, f"not the leader (leader: {self.lead or 'unknown'})"))
            return
        if self.log.term(self.log.commit) != self.term:
            self.dropped.append((context, "the new leader has not committed an entry of its "
                                          "term yet; retry shortly"))
            return
        refused = confchange.refusal(self.conf, cc)
        if refused is not None:
            self.dropped.append((context, refused))
            return
        self._leader_append([Entry(0, 0, EntryType.CONF, cc.encode())], context)

    def _outside_conf(self, context: bytes) -> bool:
        """A node outside its own configuration refuses requests instead of
        forwarding them. It was removed (or its addition is not applied yet):
        nobody sends it anything any more, so the leader it remembers may be
        gone, removed too, or leading a newer term it never learns of, and a
        request forwarded there would wait forever with no answer."""
        if self.id in self.conf.members():
            return False
        self.dropped.append((context, f"{self.id} is not a member of the cluster (removed, "
                                      "or its addition is not applied yet); send the request "
                                      "to a member"))
        return True

    def _propose(self, entries: list[Entry], context: bytes) -> None:
        if self._outside_conf(context):
            return
        if self.role == LEADER:
            self._leader_append(entries, context)
        elif self.lead and self.role == FOLLOWER:
            self._send(type=MsgType.PROPOSE, to=self.lead, entries=tuple(entries))
        else:
            self.dropped.append((context, "no leader is known; retry shortly"))

    def transfer_leadership(self, to: str) -> None:
        if self.role != LEADER or to == self.id or to not in self.conf.voters:
            return
        self.lead_transferee = to
        self.election_elapsed = 0
        pr = self.prs[to]
        if pr.match == self.log.last_index():
            self._send(type=MsgType.TIMEOUT_NOW, to=to)
        else:
            self._send_append(to)

    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read point; answered as a ReadState."""
        if self._outside_conf(context):
            return
        if self.role == LEADER:
            self._leader_read(context, "")
        elif self.lead and self.role == FOLLOWER:
            self._send(type=MsgType.READ_INDEX, to=self.lead, context=context)
        else:
            self.dropped.append((context, "no leader is known; retry shortly"))

    def _leader_read(self, context: bytes, requester: str) -> None:
        if self.log.term(self.log.commit) != self.term:
            self.read_queue.append((context, requester))  # wait for a commit in this term
            return
        if len(self.conf.voters) == 1:
            self._answer_read(PendingRead(context, self.log.commit, requester))
            return
        read = PendingRead(context, self.log.commit, requester, {self.id})
        self.reads.append(read)
        self._bcast_heartbeat(context)

    def _release_queued_reads(self) -> None:
        queued, self.read_queue = self.read_queue, []
        for ctx, requester in queued:
            self._leader_read(ctx, requester)

    def _ack_read(self, context: bytes, frm: str) -> None:
        for i, read in enumerate(self.reads):
            if read.context != context:
                continue
            if frm in self.conf.voters:
                read.acks.add(frm)
            if quorum.acknowledged(read.acks, self.conf.voters):
                done, self.reads = self.reads[:i + 1], self.reads[i + 1:]
                for r in done:
                    self._answer_read(r)
            return

    def _answer_read(self, read: PendingRead) -> None:
        if read.requester in ("", self.id):
            self.read_states.append(ReadState(read.index, read.context))
        else:
            self._send(type=MsgType.READ_INDEX_RESP, to=read.requester, index=read.index,
                       context=read.context)

    def compact(self, index: int, data: bytes, conf: ConfState | None = None) -> Snapshot:
        """The application saved a snapshot of its state at ``index``.

        ``index`` is the applied index, or an earlier one when the copy was
        made off the event loop while entries went on being applied: then
        ``conf`` is the membership as it was at ``index`` (the caller noted
        it with the index; by default the current one)."""
        if index > self.log.applied:
            raise RaftError(f"snapshot index {index} is beyond the applied index "
                            f"{self.log.applied}")
        if conf is None and index != self.log.applied:
            raise RaftError(f"a snapshot at {index}, before the applied index "
                            f"{self.log.applied}, needs the membership at {index}")
        if self.snapshot is not None and index == self.snapshot.meta.index:
            # Taken already: a snapshot's bytes never change under its index
            # (a follower may hold part of them and resume, _handle_snapshot).
            return self.snapshot
        term = self.log.term(index)
        if term is None:
            raise RaftError(f"cannot snapshot at {index}: entry already compacted")
        snap = Snapshot(SnapshotMeta(index, term, conf or self.conf), data)
        self.snapshot = snap
        self.log.compact(index)
        return snap

    # -- membership ----------------------------------------------------------------------------------------
    def _apply_conf(self, cc: ConfChange) -> None:
        if cc.type == ConfChangeType.REMOVE:
            # A removed node's vouch ends with its membership.
            self.vouched.pop(cc.node, None)
            self.vouched_voters.pop(cc.node, None)
        self.conf = confchange.apply_change(self.conf, cc)

    def _conf_applied(self, cc: ConfChange) -> None:
        self._apply_conf(cc)
        if self.role in (CANDIDATE, PRECANDIDATE) and not self.is_voter():
            self.become_follower(self.term, "")  # its own removal: no longer a candidate
        if self.role != LEADER:
            return
        if cc.node != self.id and cc.node in self.conf.members() and cc.node not in self.prs:
            self.prs[cc.node] = Progress(match=0, next=self.log.last_index() + 1)
        if cc.type == ConfChangeType.REMOVE:
            self.prs.pop(cc.node, None)
            if cc.node == self.id:
                self.become_follower(self.term, "")
                return
            if self.lead_transferee == cc.node:
                self.lead_transferee = ""
        if self._maybe_commit():
            self._bcast_append()

    # -- Ready --------------------------------------------------------------------------------------------
    def has_ready(self) -> bool:
        hs = HardState(self.term, self.vote, self.log.commit)
        return bool(self.msgs or self.log.unstable() or self.log.next_committed()
                    or self.read_states or self.dropped or self.pending_install
                    or hs != self.prev_hs
                    or SoftState(self.lead, self.public_role) != self.prev_ss)

    def ready(self) -> Ready:
        hs = HardState(self.term, self.vote, self.log.commit)
        ss = SoftState(self.lead, self.public_role)
        rd = Ready(
            hard_state=hs if hs != self.prev_hs else None,
            entries=self.log.unstable(),
            snapshot=self.pending_install,
            committed=self.log.next_committed(self.cfg.max_committed_bytes),
            messages=self.msgs,
            read_states=self.read_states,
            soft_state=ss if ss != self.prev_ss else None,
            dropped=self.dropped,
        )
        self.msgs, self.read_states, self.dropped = [], [], []
        return rd

    def advance(self, rd: Ready) -> None:
        """The Ready was persisted, sent and applied."""
        if rd.hard_state is not None:
            self.prev_hs = rd.hard_state
        if rd.soft_state is not None:
            self.prev_ss = rd.soft_state
        if rd.snapshot is not None:
            if self.pending_install is rd.snapshot:
                self.pending_install = None
            self.log.applied = max(self.log.applied, rd.snapshot.meta.index)
        if rd.entries:
            last = rd.entries[-1]
            # Only if the log still holds what was persisted (no truncation since).
            if self.log.term(last.index) == last.term:
                self.log.stable_to(last.index)
        # The leader counts its own copy only once it is on disk.
        self._self_match = self.log.unstable_from - 1
        for e in rd.committed:
            if e.index <= self.log.applied:
                continue
            self.log.applied = e.index
            # A conf entry at or below an installed snapshot is already in its conf.
            if e.type == EntryType.CONF and e.index > self.log.snap_index:
                self._conf_applied(ConfChange.decode(e.data))
        if self.role == LEADER and self._maybe_commit():
            self._bcast_append()

"""Deterministic simulation of cronrd's Raft core (``cronrd.raft.core``).

N nodes run in one process over a simulated network and a simulated disk.
Everything is driven by one seed: the simulator draws every decision from one
``random.Random(seed)``, and each node's ``Raft`` gets its own
``random.Random`` derived from the seed, the node id and its incarnation.

Time is counted in *steps*; a node ticks every ``STEPS_PER_TICK`` steps scaled
by its own tick rate (0.8x-1.25x skew). Messages are delayed by a whole number
of steps, so they can arrive between ticks, out of order, twice, or never.

The Ready cycle is modelled the way ``cronrd.runtime.log.raft_node`` drives it:
``ready()``, persist (possibly slow: several steps, during which the node keeps
stepping messages and ticking but does not call ``ready``/``advance`` again --
or, in some seeds, queues its inbox), send, apply (snapshot first), advance.
A crash can hit any point of that cycle.

Disk model
----------
Each node has a ``Disk`` holding a hard state, entries and a snapshot. It only
changes when the node persists a Ready (or compacts after a snapshot). A crash
loses the node's memory (its Raft and its state machine); the node restarts
from the disk, its state machine restored from the disk snapshot (applied =
snapshot index) and re-applying committed entries from the log.

The disk keeps the storage contract of ``cronrd.raft.storage``, as the real
storage does (the same refusals; a received snapshot keeps the stored suffix
only when it continues the snapshot).

Torn writes. A crash *while* a Ready is being persisted keeps a prefix of the
contract's order: the snapshot (whole or not at all), then, only if the
snapshot was kept, a prefix of the Ready's entries (the conflict truncation
included), never the hard state -- it is written after the entries, like a
WAL record after the entry records, and a checksummed WAL drops a torn tail. This is safe because nothing
of a Ready is externalised (no message sent, nothing applied) before the whole
Ready is durable, so the disk always equals a state the node could have had
when it last acknowledged anything; the only new combination it creates is
"entries of term T on disk with a hard state term < T", which Raft must (and
does) tolerate: the node has not promised anything in term T. What would be
unsafe, and is therefore not modelled, is keeping a *newer* hard state (vote or
commit) without the entries of the same write: a vote for a candidate is only
sent after its hard state is durable, and a commit beyond the persisted log is
refused by ``Raft.__init__``. Real storage (log/raft_storage.py) writes the snapshot
in one SQLite transaction and the entries with the hard state in a second
one, i.e. the "all or nothing" case, which is the other torn mode simulated.

Invariants are checked after every step that touched a node (see ``Checker``);
a violation raises ``Violation`` with the last events of the trace.
"""

from __future__ import annotations

import collections
import hashlib
import heapq
import json
import os
import random
from dataclasses import dataclass, field

from cronrd.raft.core import LEADER, VOTER_ONLY, Raft, RaftConfig
from cronrd.raft.storage import append_refusal, keeps_suffix, snapshot_refusal
from cronrd.raft.types import (ConfChange, ConfChangeType, ConfState, Entry, EntryType,
                               HardState, Message, MsgType, Ready, Snapshot)

STEPS_PER_TICK = 2
ELECTION_TICK = 10


class Violation(AssertionError):
    pass


# ---------------------------------------------------------------------------------------------
# disk and state machine
# ---------------------------------------------------------------------------------------------
@dataclass
class Disk:
    """A node's durable log, keeping the storage contract (cronrd.raft.storage)
    as the real storage does: a write that breaks it is a Violation (the real
    storage raises StorageError and the node stops)."""
    hard_state: HardState = HardState()
    entries: list = field(default_factory=list)
    snapshot: Snapshot | None = None

    def snap_index(self) -> int:
        return self.snapshot.meta.index if self.snapshot else 0

    def last_index(self) -> int:
        return self.snap_index() + len(self.entries)

    def term(self, index: int) -> int | None:
        si = self.snap_index()
        if index == si:
            return self.snapshot.meta.term if self.snapshot else 0
        if index < si or index > self.last_index():
            return None
        return self.entries[index - si - 1].term

    def save_snapshot(self, snap: Snapshot) -> None:
        """Store a snapshot (a received one or a local compaction alike): the
        entries it covers go, the suffix stays only if it continues it."""
        si = self.snap_index()
        refusal = snapshot_refusal(snap.meta.index, si)
        if refusal is not None:
            raise Violation(f"disk: {refusal}")
        if keeps_suffix(self.term(snap.meta.index), snap.meta.term):
            self.entries = self.entries[snap.meta.index - si:]
        else:
            self.entries = []
        self.snapshot = snap

    def save_entries(self, entries: list[Entry]) -> None:
        refusal = append_refusal(entries, self.snap_index(), self.last_index())
        if refusal is not None:
            raise Violation(f"disk: {refusal}")
        if not entries:
            return
        del self.entries[entries[0].index - self.snap_index() - 1:]
        self.entries.extend(entries)


class StateMachine:
    """The application: a running sha256 over applied NORMAL payloads, their count,
    and which proposal ids were applied at which index."""

    def __init__(self) -> None:
        self.applied = 0
        self.count = 0
        self.digest = ""
        self.ids: dict[str, int] = {}

    def apply(self, e: Entry) -> None:
        if e.type == EntryType.NORMAL:
            self.count += 1
            self.digest = hashlib.sha256(self.digest.encode() + e.data).hexdigest()[:16]
            self.ids[e.data.decode()] = e.index
        self.applied = e.index

    def state(self) -> tuple:
        return (self.applied, self.count, self.digest)

    def serialize(self) -> bytes:
        return json.dumps([self.applied, self.count, self.digest,
                           sorted(self.ids.items())], separators=(",", ":")).encode()

    @classmethod
    def restore(cls, data: bytes) -> "StateMachine":
        sm = cls()
        sm.applied, sm.count, sm.digest, ids = json.loads(data)
        sm.ids = {k: v for k, v in ids}
        return sm


# ---------------------------------------------------------------------------------------------
# nodes
# ---------------------------------------------------------------------------------------------
class SimNode:
    def __init__(self, sim: "Sim", node_id: str):
        self.sim = sim
        self.id = node_id
        self.disk = Disk()
        self.alive = False
        self.incarnation = 0
        self.raft: Raft | None = None
        self.sm: StateMachine | None = None
        self.rate = 1.0
        self.tick_acc = 0.0
        self.io: tuple[Ready, int] | None = None     # Ready being persisted, done at step
        self.inbox: list[Message] = []               # held while io is in flight (no-interleave)
        self.slow_disk = 0                           # extra steps per persist (0 = fast)
        self.down_until = 0
        # checker bookkeeping, reset on restart
        self.last_commit = 0
        self.lead_mark: tuple | None = None
        self.last_role = ""
        self.last_term = 0

    def start(self) -> None:
        sim = self.sim
        self.incarnation += 1
        d = self.disk
        if d.snapshot is not None:
            self.sm = StateMachine.restore(d.snapshot.data)
            if self.sm.applied != d.snapshot.meta.index:
                raise Violation(f"{self.id}: snapshot data at {self.sm.applied} but meta "
                                f"says {d.snapshot.meta.index}")
            sim.check.snapshot_restored(self, d.snapshot.meta.index)
        else:
            self.sm = StateMachine()
        cfg = RaftConfig(self.id, election_tick=ELECTION_TICK, heartbeat_tick=1,
                         pre_vote=sim.pre_vote, check_quorum=sim.check_quorum,
                         max_inflight=sim.max_inflight, max_msg_bytes=sim.max_msg_bytes,
                         snapshot_chunk_bytes=sim.chunk_bytes)
        rng = random.Random(f"{sim.seed}/{self.id}/{self.incarnation}")
        self.raft = Raft(cfg, rng, conf=sim.bootstrap, hard_state=d.hard_state,
                         entries=list(d.entries), snapshot=d.snapshot, applied=self.sm.applied)
        self.alive = True
        self.io = None
        self.inbox = []
        self.tick_acc = 0.0
        self.last_commit = self.raft.commit
        self.lead_mark = None
        self.last_role = self.raft.role
        self.last_term = self.raft.term
        sim.trace("start", self.id, f"inc={self.incarnation} term={self.raft.term} "
                  f"commit={self.raft.commit} last={self.raft.last_index} snap={d.snap_index()}")
        sim.check.full_log(self)
        sim.check.after_op(self)

    def crash(self, why: str) -> None:
        sim = self.sim
        sim.trace("crash", self.id, why)
        sim.stats["crash: " + why] += 1
        self.down_until = sim.now + sim.rng.randint(1, 40) * STEPS_PER_TICK
        self.alive = False
        self.raft = None
        self.sm = None
        self.io = None
        self.inbox = []


# ---------------------------------------------------------------------------------------------
# invariants
# ---------------------------------------------------------------------------------------------
class Checker:
    def __init__(self, sim: "Sim"):
        self.sim = sim
        self.leaders: dict[int, str] = {}                     # term -> leader
        self.entry_at: dict[tuple[int, int], tuple] = {}      # (index, term) -> (type, data, prev term)
        self.committed: dict[int, tuple] = {}                 # index -> (term, type, data)
        self.commit_term: dict[int, int] = {}                 # index -> smallest observer term
        self.applied: dict[int, tuple] = {}                   # index -> (term, type, data)
        self.state_at: dict[int, tuple] = {0: (0, 0, "")}     # index -> state after applying it
        self.max_applied = 0

    def fail(self, msg: str) -> None:
        raise Violation(msg)

    # -- logs ------------------------------------------------------------------------------
    def _check_entries(self, node: SimNode, lo: int) -> None:
        log = node.raft.log
        base = log.snap_index
        ents = log.entries
        start = max(lo, base + 1)
        prev = log.term(start - 1)
        for k in range(start - base - 1, len(ents)):
            e = ents[k]
            if e.index != base + 1 + k:
                self.fail(f"{node.id}: log not contiguous at {e.index}")
            if prev is not None and e.term < prev:
                self.fail(f"{node.id}: term goes down at {e.index}: {prev} -> {e.term}")
            key = (e.index, e.term)
            val = (e.type, e.data, prev)
            old = self.entry_at.get(key)
            if old is not None and old != val:
                self.fail(f"log matching: {node.id} has entry {key} = {val}, another log had {old}")
            prev = e.term

    def persisted(self, node: SimNode, entries: list[Entry]) -> None:
        """Entries reached ``node``'s disk. Only persisted entries are registered for
        the log-matching check: an entry that lived only in the memory of a node that
        crashed was never seen by anyone (a node whose term was never persisted may
        legitimately run that term again after a restart)."""
        if not entries:
            return
        d = node.disk
        si = d.snap_index()
        first = entries[0].index
        prev = (d.snapshot.meta.term if first - 1 == si and d.snapshot else
                0 if first - 1 == 0 else d.entries[first - 2 - si].term)
        for e in entries:
            key = (e.index, e.term)
            val = (e.type, e.data, prev)
            old = self.entry_at.setdefault(key, val)
            if old != val:
                self.fail(f"log matching: {node.id} persisted entry {key} = {val}, another "
                          f"node persisted {old}")
            prev = e.term

    def full_log(self, node: SimNode) -> None:
        self._check_entries(node, 0)

    def snapshot_restored(self, node: SimNode, index: int) -> None:
        want = self.state_at.get(index)
        got = node.sm.state()
        if want is None:
            self.fail(f"{node.id}: restored a snapshot at {index} that nobody applied")
        if want != got:
            self.fail(f"{node.id}: snapshot at {index} restores {got}, replaying gives {want}")

    def after_op(self, node: SimNode) -> None:
        r = node.raft
        log = r.log
        # log matching on everything that changed (changes are always >= unstable_from)
        if log.unstable_from <= log.last_index():
            self._check_entries(node, log.unstable_from)
        if r.commit > log.last_index() or r.applied > r.commit:
            self.fail(f"{node.id}: applied {r.applied} <= commit {r.commit} <= last "
                      f"{log.last_index()} broken")
        # election safety and append-only leaders
        if r.role == LEADER:
            other = self.leaders.setdefault(r.term, node.id)
            if other != node.id:
                self.fail(f"two leaders in term {r.term}: {other} and {node.id}")
            mark = node.lead_mark
            if mark is None or mark[0] != r.term:
                self.leader_completeness(node)
            else:
                _, idx, obj = mark
                if idx > log.snap_index:
                    if idx > log.last_index() or log.entries[idx - log.snap_index - 1] is not obj:
                        self.fail(f"leader {node.id} (term {r.term}) lost or rewrote entry {idx}")
            last = log.last_index()
            obj = log.entries[-1] if log.entries else None
            node.lead_mark = (r.term, last, obj)
        else:
            node.lead_mark = None
        if r.term < node.last_term:
            self.fail(f"{node.id}: term went back from {node.last_term} to {r.term}")
        node.last_term = r.term
        if r.role != node.last_role:
            self.sim.trace("role", node.id, f"{node.last_role}->{r.role} term={r.term} "
                           f"last={log.last_index()} commit={r.commit}")
            node.last_role = r.role
        # commit never goes back; record what became committed
        c = r.commit
        if c < node.last_commit:
            self.fail(f"{node.id}: commit went back from {node.last_commit} to {c}")
        if c > node.last_commit:
            for i in range(max(node.last_commit + 1, log.snap_index + 1), c + 1):
                e = log.entries[i - log.snap_index - 1]
                val = (e.term, e.type, e.data)
                old = self.committed.get(i)
                if old is None:
                    self.committed[i] = val
                    self.commit_term[i] = r.term
                elif old != val:
                    self.fail(f"{node.id} commits {i} = {val}, but {old} was committed")
                elif r.term < self.commit_term[i]:
                    self.commit_term[i] = r.term
            node.last_commit = c

    def leader_completeness(self, node: SimNode) -> None:
        log = node.raft.log
        term = node.raft.term
        for i, (t, typ, data) in self.committed.items():
            if i <= log.snap_index or self.commit_term[i] >= term:
                continue
            e_term = log.term(i)
            if e_term != t:
                self.fail(f"leader completeness: {node.id} leads term {term} without committed "
                          f"entry {i} (term {t}); its log has term {e_term}, last "
                          f"{log.last_index()}")
            e = log.entries[i - log.snap_index - 1]
            if (e.type, e.data) != (typ, data):
                self.fail(f"leader completeness: {node.id} has a different entry {i}")

    def applying(self, node: SimNode, e: Entry) -> None:
        sm = node.sm
        if e.index != sm.applied + 1:
            self.fail(f"{node.id}: applies {e.index} after {sm.applied} (gap or repeat)")
        val = (e.term, e.type, e.data)
        c = self.committed.get(e.index)
        if c is not None and c != val:
            self.fail(f"{node.id} applies {e.index} = {val} but {c} was committed")
        old = self.applied.get(e.index)
        if old is None:
            self.applied[e.index] = val
        elif old != val:
            self.fail(f"{node.id} applies {e.index} = {val} but another node applied {old}")

    def applied_one(self, node: SimNode, e: Entry) -> None:
        st = node.sm.state()
        old = self.state_at.get(e.index)
        if old is None:
            self.state_at[e.index] = st
        elif old != st:
            self.fail(f"{node.id}: state after {e.index} is {st}, another node had {old}")
        if e.index > self.max_applied:
            self.max_applied = e.index


# ---------------------------------------------------------------------------------------------
# client
# ---------------------------------------------------------------------------------------------
@dataclass
class Op:
    op: int
    attempt: str
    sent_at: int
    retry_at: int = 0
    attempts: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# the simulation
# ---------------------------------------------------------------------------------------------
class Sim:
    def __init__(self, seed: int, trace_len: int = 40):
        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.events = collections.deque(maxlen=trace_len)
        self.now = 0
        self.check = Checker(self)
        # -- scenario -------------------------------------------------------------------------
        self.n = rng.choice([1, 3, 3, 3, 3, 5, 5, 5])
        self.voters = [f"n{i}" for i in range(1, self.n + 1)]
        self.extra = [f"n{i}" for i in range(self.n + 1, self.n + 1 + rng.choice([0, 1, 2]))]
        self.bootstrap = ConfState(tuple(self.voters), ())
        self.pre_vote = rng.random() < 0.85
        self.check_quorum = rng.random() < 0.85
        self.max_inflight = rng.choice([1, 2, 4, 256])
        self.max_msg_bytes = rng.choice([40, 200, 1 << 20])
        self.chunk_bytes = rng.choice([64, 64, 256, 1 << 20])
        self.snapshot_every = rng.choice([0, 4, 8, 16, 40])
        self.interleave = rng.random() < 0.7          # step messages while a Ready persists
        self.torn_prefix = rng.random() < 0.5         # torn writes keep an entry prefix
        self.fault_ticks = rng.randint(120, 260)
        f = self.faults = {
            "drop": rng.choice([0.0, 0.0, 0.02, 0.1, 0.25]),
            "dup": rng.choice([0.0, 0.02, 0.1]),
            "delay": rng.choice([(1, 2), (1, 4), (1, 8), (2, 12)]),
            "partition": rng.random() < 0.5,
            "clog": rng.random() < 0.4,
            "crash": rng.random() < 0.5,
            "crash_io": rng.choice([0.0, 0.0, 0.002, 0.005, 0.01]),  # per Ready
            "slow_disk": rng.random() < 0.4,
            "skew": rng.random() < 0.6,
            "membership": rng.random() < 0.5,
            "transfer": rng.random() < 0.4,
            "reads": rng.random() < 0.5,
        }
        self.nodes: dict[str, SimNode] = {}
        for nid in self.voters + self.extra:
            node = self.nodes[nid] = SimNode(self, nid)
            if f["skew"]:
                node.rate = rng.uniform(0.8, 1.25)
            if f["slow_disk"] and rng.random() < 0.5:
                node.slow_disk = rng.randint(1, 6)
        self.net: list = []           # heap of (due step, seq, msg)
        self.seq = 0
        self.blocked: set[tuple[str, str]] = set()     # partitions
        self.clogged: set[tuple[str, str]] = set()
        self.healed = False
        # client
        self.op_seq = 0
        self.attempt_seq = 0
        self.pending: dict[str, Op] = {}      # attempt id -> op
        self.ops: dict[int, Op] = {}          # unacknowledged ops
        self.acked: dict[int, str] = {}       # op -> attempt that was applied
        self.acked_attempts: set[str] = set()
        self.reads: dict[bytes, int] = {}     # read context -> required min index
        self.read_seq = 0
        self.stats = collections.Counter()
        for node in self.nodes.values():
            node.start()

    # -- tracing ----------------------------------------------------------------------------
    def trace(self, kind: str, node: str, what) -> None:
        self.events.append((self.now, kind, node, what))

    def format_trace(self) -> str:
        out = []
        for now, kind, node, what in self.events:
            if isinstance(what, Message):
                m = what
                what = (f"{m.type.name} {m.frm}->{m.to} t={m.term} i={m.index} lt={m.log_term} "
                        f"n={len(m.entries)} c={m.commit}" + (" REJ" if m.reject else "")
                        + (f" hint={m.reject_hint}/{m.hint_term}" if m.reject else ""))
            out.append(f"  [{now / STEPS_PER_TICK:7.1f}] {kind:8} {node:4} {what}")
        return "\n".join(out)

    def describe(self) -> str:
        f = {k: v for k, v in self.faults.items() if v}
        return (f"n={self.n} extra={len(self.extra)} prevote={self.pre_vote} "
                f"cq={self.check_quorum} inflight={self.max_inflight} "
                f"msgbytes={self.max_msg_bytes} chunk={self.chunk_bytes} "
                f"snap_every={self.snapshot_every} interleave={self.interleave} "
                f"torn_prefix={self.torn_prefix} faults={f}")

    # -- network ----------------------------------------------------------------------------
    def send(self, m: Message) -> None:
        if m.type == MsgType.SNAP:
            self.stats["snapshot chunks sent"] += 1
        elif m.type == MsgType.TIMEOUT_NOW:
            self.stats["transfers (TimeoutNow)"] += 1
        if (m.frm, m.to) in self.blocked or (m.frm, m.to) in self.clogged:
            return
        rng = self.rng
        if not self.healed and rng.random() < self.faults["drop"]:
            return
        copies = 2 if (not self.healed and rng.random() < self.faults["dup"]) else 1
        lo, hi = (1, 1) if self.healed else self.faults["delay"]  # healed: FIFO, like TCP
        for _ in range(copies):
            self.seq += 1
            heapq.heappush(self.net, (self.now + rng.randint(lo, hi), self.seq, m))

    def deliver(self, m: Message) -> None:
        node = self.nodes.get(m.to)
        if node is None or not node.alive:
            return
        if (m.frm, m.to) in self.blocked or (m.frm, m.to) in self.clogged:
            return  # a partition that started while the message was in flight
        if node.io is not None and not self.interleave:
            node.inbox.append(m)
            return
        self.maybe_vouch(node, m)
        self.trace("recv", m.to, m)
        node.raft.step(m)
        self.check.after_op(node)

    def maybe_vouch(self, node: SimNode, m: Message) -> None:
        """The runtime's vouching (cronrd.runtime.cluster.trust): a node that hears
        from a node it does not know as a member (or, for a message only a
        voter sends, as a voter) asks the other voters it knows; one that has
        it as a member (voter) in its applied configuration, so added by a
        committed entry, vouches for it. Modelled as an instant round trip,
        answered only by voters that are alive and reachable both ways."""
        r = node.raft
        voter = m.type in VOTER_ONLY
        if node.id not in r.conf.members() or r.knows_member(m.frm, voter):
            return
        for v in r.conf.voters:
            peer = self.nodes.get(v)
            if v == node.id or peer is None or not peer.alive or {
                    (node.id, v), (v, node.id)} & (self.blocked | self.clogged):
                continue
            pconf = peer.raft.conf
            if m.frm in (pconf.voters if voter else pconf.members()):
                self.trace("vouch", node.id, f"{m.frm} by {v}" + (" (voter)" if voter else ""))
                self.stats["members vouched for"] += 1
                r.vouch(m.frm, voter=voter, upto=peer.raft.log.applied)
                return

    # -- the Ready cycle ------------------------------------------------------------------------
    def pump(self, node: SimNode) -> None:
        """Run Ready cycles until the node has nothing to do or waits on its disk."""
        for _ in range(50):
            if not node.alive:
                return
            if node.io is not None:
                if node.io[1] > self.now:
                    return
                self.finish_io(node)
                continue
            if node.inbox:
                msgs, node.inbox = node.inbox, []
                for m in msgs:
                    self.deliver(m)
                continue
            if not node.raft.has_ready():
                return
            rd = node.raft.ready()
            for ctx, reason in rd.dropped:
                self.client_dropped(ctx, reason)
            if rd.soft_state is not None:
                self.trace("soft", node.id, f"{rd.soft_state}")
            delay = 0
            if node.slow_disk and not self.healed and (rd.entries or rd.hard_state or rd.snapshot):
                delay = self.rng.randint(0, node.slow_disk)
            node.io = (rd, self.now + delay)
        raise Violation(f"{node.id}: Ready cycle does not settle")

    def torn_write(self, node: SimNode, rd: Ready, keep_snapshot: bool, keep: int) -> None:
        """A crash while ``rd`` is written: the disk keeps a prefix of what the
        Ready writes, in the contract's order (cronrd.raft.storage): its
        snapshot if ``keep_snapshot``, then its first ``keep`` entries, never
        its hard state. Entries written after a snapshot that did not reach
        the disk do not reach it either: they continue the snapshot, not the
        log it replaced (keeping them left a hole: seed 17227417148149)."""
        d = node.disk
        if rd.snapshot is not None:
            if not keep_snapshot:
                keep = 0
            else:
                d.save_snapshot(rd.snapshot)
        if keep:
            d.save_entries(rd.entries[:keep])
            self.check.persisted(node, rd.entries[:keep])
        node.crash("torn write")

    def finish_io(self, node: SimNode) -> None:
        rd, _ = node.io
        rng = self.rng
        crash_at = None
        p = self.faults["crash_io"]
        if p and not self.healed and rng.random() < p:
            crash_at = rng.choice(["torn", "persisted", "sent", "applied"])
        d = node.disk
        # 1. persist: snapshot, entries, hard state
        if crash_at == "torn":
            keep_snapshot = rd.snapshot is not None and rng.random() < 0.5
            keep = rng.randint(0, len(rd.entries)) if self.torn_prefix and rd.entries else 0
            self.torn_write(node, rd, keep_snapshot, keep)
            return
        if rd.snapshot is not None:
            d.save_snapshot(rd.snapshot)
        d.save_entries(rd.entries)
        self.check.persisted(node, rd.entries)
        if rd.hard_state is not None:
            d.hard_state = rd.hard_state
        if d.hard_state.commit > d.last_index():
            raise Violation(f"{node.id}: persisted commit {d.hard_state.commit} beyond the "
                            f"persisted log {d.last_index()}")
        if crash_at == "persisted":
            node.crash("after persisting a Ready")
            return
        # 2. send
        for m in rd.messages:
            self.trace("send", node.id, m)
            self.send(m)
        if crash_at == "sent":
            node.crash("after sending a Ready")
            return
        # 3. apply: snapshot first, then committed entries
        sm = node.sm
        if rd.snapshot is not None:
            node.sm = sm = StateMachine.restore(rd.snapshot.data)
            self.check.snapshot_restored(node, rd.snapshot.meta.index)
            self.trace("install", node.id, f"snapshot {rd.snapshot.meta.index}")
            self.stats["snapshot installs"] += 1
        for e in rd.committed:
            if e.index <= sm.applied:
                continue
            self.check.applying(node, e)
            sm.apply(e)
            self.check.applied_one(node, e)
            if e.type == EntryType.NORMAL:
                self.client_applied(e.data.decode(), e.index)
            elif e.type == EntryType.CONF and node.raft.role == LEADER:
                self.stats["conf changes applied by a leader"] += 1
        for rs in rd.read_states:
            self.stats["reads answered"] += 1
            need = self.reads.pop(rs.context, None)
            if need is not None and rs.index < need:
                raise Violation(f"{node.id}: read {rs.context!r} got index {rs.index}, but "
                                f"{need} was applied before the read started")
        if crash_at == "applied":
            node.crash("after applying a Ready")
            return
        # 4. advance
        node.io = None
        node.raft.advance(rd)
        if node.raft.applied != sm.applied:
            raise Violation(f"{node.id}: raft applied {node.raft.applied}, state machine "
                            f"{sm.applied}")
        self.check.after_op(node)
        # periodic snapshot + compaction
        if self.snapshot_every and node.raft.applied - node.raft.log.snap_index >= self.snapshot_every:
            snap = node.raft.compact(sm.applied, sm.serialize())
            node.disk.save_snapshot(snap)
            self.trace("compact", node.id, f"at {snap.meta.index}")
            self.stats["compactions"] += 1
            self.check.after_op(node)

    # -- client -------------------------------------------------------------------------------------
    def alive_nodes(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive]

    def leader(self) -> SimNode | None:
        best = None
        for n in self.alive_nodes():
            if n.raft.role == LEADER and (best is None or n.raft.term > best.raft.term):
                best = n
        return best

    def new_op(self) -> None:
        self.op_seq += 1
        op = Op(self.op_seq, "", self.now)
        self.ops[op.op] = op
        self.submit(op)

    def submit(self, op: Op) -> None:
        self.attempt_seq += 1
        op.attempt = f"p{self.attempt_seq}"
        op.sent_at = self.now
        op.attempts.append(op.attempt)
        self.pending[op.attempt] = op
        alive = self.alive_nodes()
        if not alive:
            return
        lead = self.leader()
        node = lead if lead is not None and self.rng.random() < 0.6 else self.rng.choice(alive)
        self.trace("propose", node.id, op.attempt)
        node.raft.propose(op.attempt.encode(), op.attempt.encode())
        self.check.after_op(node)

    def client_dropped(self, ctx: bytes, reason: str) -> None:
        self.stats["proposals dropped"] += 1
        self.reads.pop(ctx, None)
        op = self.pending.pop(ctx.decode(errors="replace"), None)
        if op is not None and op.op in self.ops:
            op.retry_at = self.now + self.rng.randint(1, 3) * STEPS_PER_TICK

    def client_applied(self, attempt: str, index: int) -> None:
        op = self.pending.pop(attempt, None)
        if op is None:
            return
        self.acked_attempts.add(attempt)
        if op.op in self.ops:
            del self.ops[op.op]
            self.acked[op.op] = attempt
        for a in op.attempts:
            self.pending.pop(a, None)

    def client_timeouts(self) -> None:
        limit = 4 * ELECTION_TICK * STEPS_PER_TICK
        for op in list(self.ops.values()):
            if op.retry_at and self.now >= op.retry_at:
                op.retry_at = 0
                self.submit(op)
            elif self.now - op.sent_at > limit:
                self.stats["proposal timeouts"] += 1
                self.submit(op)  # old attempts stay pending: whichever applies first acks

    # -- faults ----------------------------------------------------------------------------------------
    # (fault, action, probability per step); each action has its own slice of [0, 1)
    FAULT_RATES = (("partition", "split", 0.01), ("partition", "unsplit", 0.01),
                   ("clog", "clog", 0.012), ("clog", "unclog", 0.008),
                   ("crash", "crash", 0.004), ("membership", "confchg", 0.02),
                   ("transfer", "transfer", 0.005), ("slow_disk", "disk", 0.005))

    def random_fault(self) -> None:
        rng, f = self.rng, self.faults
        r = rng.random()
        action = None
        for fault, name, p in self.FAULT_RATES:
            if r < p:
                action = name if f[fault] else None
                break
            r -= p
        if action is None:
            return
        ids = list(self.nodes)
        if action == "split":
            self.partition()
        elif action == "unsplit":
            if self.blocked:
                self.trace("heal", "-", "partition")
            self.blocked = set()
        elif action == "clog" and len(ids) > 1:
            a, b = rng.sample(ids, 2)
            self.clogged.add((a, b))
            if rng.random() < 0.5:
                self.clogged.add((b, a))
            self.trace("clog", a, b)
        elif action == "unclog" and self.clogged:
            self.clogged.discard(rng.choice(sorted(self.clogged)))
        elif action == "crash":
            alive = self.alive_nodes()
            if alive:
                rng.choice(alive).crash("random crash")
        elif action == "confchg":
            self.membership_change()
        elif action == "transfer":
            lead = self.leader()
            if lead is not None:
                to = rng.choice(sorted(self.nodes))
                self.trace("transfer", lead.id, to)
                lead.raft.transfer_leadership(to)
                self.check.after_op(lead)
        elif action == "disk":
            self.nodes[rng.choice(ids)].slow_disk = rng.choice([0, 0, 2, 5, 10])

    def partition(self) -> None:
        rng = self.rng
        ids = sorted(self.nodes)
        if len(ids) < 2:
            return
        rng.shuffle(ids)
        kind = rng.choice(["symmetric", "asymmetric", "bridge"])
        self.blocked = set()
        if kind == "bridge" and len(ids) >= 3:
            bridge, rest = ids[0], ids[1:]
            cut = rng.randint(1, len(rest) - 1)
            a, b = rest[:cut], rest[cut:]
        else:
            cut = rng.randint(1, len(ids) - 1)
            a, b = ids[:cut], ids[cut:]
            bridge = None
        for x in a:
            for y in b:
                if kind == "asymmetric":
                    if rng.random() < 0.5:
                        self.blocked.add((x, y))
                    else:
                        self.blocked.add((y, x))
                else:
                    self.blocked.add((x, y))
                    self.blocked.add((y, x))
        self.trace("split", "-", f"{kind} {sorted(a)} | {sorted(b)} bridge={bridge}")

    def membership_change(self) -> None:
        rng = self.rng
        lead = self.leader()
        if lead is None:
            return
        conf = lead.raft.conf
        ids = sorted(self.nodes)
        choices = []
        outside = [i for i in ids if i not in conf.members()]
        if outside:
            choices.append(ConfChange(ConfChangeType.ADD_LEARNER, rng.choice(outside)))
        if conf.learners:
            choices.append(ConfChange(ConfChangeType.PROMOTE, rng.choice(conf.learners)))
        if len(conf.voters) > 1 or conf.learners:
            choices.append(ConfChange(ConfChangeType.REMOVE, rng.choice(conf.members())))
        if not choices:
            return
        cc = rng.choice(choices)
        self.trace("confchg", lead.id, f"{cc.type.name} {cc.node}")
        lead.raft.propose_conf_change(cc, b"cc")
        self.check.after_op(lead)

    def heal(self) -> None:
        self.healed = True
        self.blocked = set()
        self.clogged = set()
        self.trace("heal", "-", "everything")
        for node in self.nodes.values():
            node.slow_disk = 0
            if not node.alive:
                node.start()

    # -- main loop --------------------------------------------------------------------------------------
    def step(self) -> None:
        self.now += 1
        net = self.net
        while net and net[0][0] <= self.now:
            _, _, m = heapq.heappop(net)
            self.deliver(m)
        for node in self.nodes.values():
            if not node.alive:
                if not self.healed and node.down_until and self.now >= node.down_until:
                    node.down_until = 0
                    node.start()
                continue
            node.tick_acc += node.rate
            if node.tick_acc >= STEPS_PER_TICK:
                node.tick_acc -= STEPS_PER_TICK
                node.raft.tick()
                self.check.after_op(node)
        rng = self.rng
        if not self.healed:
            self.random_fault()
            if rng.random() < 0.15:
                self.new_op()
            if self.faults["reads"] and rng.random() < 0.03:
                self.new_read()
        self.client_timeouts()
        for node in self.nodes.values():
            if node.alive:
                self.pump(node)

    def new_read(self) -> None:
        alive = self.alive_nodes()
        if not alive:
            return
        node = self.rng.choice(alive)
        self.read_seq += 1
        ctx = f"r{self.read_seq}".encode()
        self.reads[ctx] = self.check.max_applied
        node.raft.read_index(ctx)
        self.check.after_op(node)

    def converged(self) -> SimNode | None:
        if self.ops:
            return None
        lead = self.leader()
        if lead is None:
            return None
        r = lead.raft
        if any(n.raft.term > r.term for n in self.alive_nodes()
               if n.id in r.conf.members()):
            return None
        if r.commit != r.last_index or r.log.term(r.commit) != r.term:
            return None
        for nid in r.conf.members():
            n = self.nodes[nid]
            if not n.alive or n.io is not None or n.raft.applied != r.commit \
                    or n.sm.applied != r.commit:
                return None
        return lead

    def run(self) -> dict:
        for _ in range(self.fault_ticks * STEPS_PER_TICK):
            self.step()
        self.heal()
        self.new_op()  # the cluster must still make progress
        # 20 election timeouts, plus time to ship the backlog when a seed throttles
        # replication to one small message in flight (max_inflight/max_msg_bytes).
        lasts = [n.raft.last_index for n in self.alive_nodes()]
        commits = [n.raft.commit for n in self.alive_nodes()]
        throttled = self.max_inflight < 4 or self.max_msg_bytes < 1000
        backlog = max(lasts) - min(commits) if throttled else 0
        limit = (20 * ELECTION_TICK + 2 * backlog) * STEPS_PER_TICK
        lead = None
        for i in range(limit):
            self.step()
            if i % 4 == 0:
                lead = self.converged()
                if lead is not None:
                    break
        if lead is None:
            raise Violation(f"liveness: no convergence {limit // STEPS_PER_TICK} ticks after "
                            f"healing; leader={getattr(self.leader(), 'id', None)} "
                            f"pending ops={sorted(self.ops)[:5]} " + self.status())
        self.final_check(lead)
        return {"seed": self.seed, "ticks": self.now // STEPS_PER_TICK, "commit": lead.raft.commit,
                "terms": len(self.check.leaders), "stats": dict(self.stats)}

    def status(self) -> str:
        out = []
        for n in self.nodes.values():
            if not n.alive:
                out.append(f"{n.id}:down")
                continue
            r = n.raft
            out.append(f"{n.id}:{r.role[:4]} t={r.term} lead={r.lead} c={r.commit} "
                       f"a={r.applied} last={r.last_index} snap={r.log.snap_index} "
                       f"conf={r.conf.voters}/{r.conf.learners} io={n.io is not None}")
        return "; ".join(out)

    def final_check(self, lead: SimNode) -> None:
        r = lead.raft
        want = lead.sm.state()
        for nid in r.conf.members():
            n = self.nodes[nid]
            if n.sm.state() != want:
                raise Violation(f"{nid} ends with state {n.sm.state()}, leader {lead.id} has "
                                f"{want}")
            if n.raft.conf != r.conf:
                raise Violation(f"{nid} ends with conf {n.raft.conf}, leader has {r.conf}")
            missing = [a for a in self.acked_attempts if a not in n.sm.ids]
            if missing:
                raise Violation(f"{nid} lost acknowledged proposals {sorted(missing)[:5]}")


def replay_line(seed: int) -> str:
    return (f"CRONRD_SIM_SEEDS=1 CRONRD_SIM_SEED_START={seed} "
            f"python -m pytest tests/unit/raft/test_core_sim.py::test_simulation_seeds")


def report(r: dict, events: int = 30) -> str:
    """A failed seed: what broke, the line that replays it, its scenario, its trace."""
    trace = "\n".join(r["trace"].splitlines()[-events:])
    return (f"\nseed {r['seed']}: {r['failed']}\n"
            f"  replay: {replay_line(r['seed'])}\n"
            f"  scenario: {r['scenario']}\n{r['tb']}  last events (tick, kind, node, what):\n"
            f"{trace}\n")


def run_many(seeds, workers: int | None = None, chunksize: int = 8):
    """Yield each seed's result (in completion order), on ``workers`` processes."""
    seeds = list(seeds)
    workers = min(workers or os.cpu_count() or 1, len(seeds)) or 1
    if workers == 1:
        yield from map(run_seed, seeds)
        return
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        yield from pool.imap_unordered(run_seed, seeds, chunksize=chunksize)


def summary(results: list[dict], start: int, elapsed: float) -> str:
    failed = [r for r in results if "failed" in r]
    ok = [r for r in results if "failed" not in r]
    totals: collections.Counter = collections.Counter()
    for r in ok:
        totals.update(r["stats"])
    return (f"raft simulation: {len(results)} seeds from {start} in {elapsed:.1f}s "
            f"({len(results) / max(elapsed, 1e-9):.1f} seeds/s), {len(failed)} failed; "
            f"{sum(r['commit'] for r in ok)} entries committed, "
            f"{sum(r['ticks'] for r in ok)} ticks, {sum(r['terms'] for r in ok)} leader terms; "
            + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))


def run_seed(seed: int) -> dict:
    sim = Sim(seed)
    try:
        return sim.run()
    except Exception as exc:  # noqa: BLE001 - report any failure with its trace
        kind = "violation" if isinstance(exc, Violation) else type(exc).__name__
        import traceback
        tb = "" if isinstance(exc, Violation) else traceback.format_exc()
        return {"seed": seed, "failed": f"{kind}: {exc}", "scenario": sim.describe(),
                "trace": sim.format_trace(), "tb": tb}

"""Data types of the Raft core: entries, messages, hard state, Ready.

Everything here is a frozen value. The core (``cronrd.raft.core``) consumes
messages, ticks and proposals and produces ``Ready`` values; the runtime
persists, sends and applies what a Ready says, then calls ``advance``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class EntryType(enum.IntEnum):
    NORMAL = 0   # application data (a state machine command)
    NOOP = 1     # appended by a new leader at the start of its term (data empty)
    CONF = 2     # a membership change; data = ConfChange.encode()


@dataclass(frozen=True)
class Entry:
    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""


class ConfChangeType(enum.IntEnum):
    ADD_LEARNER = 0
    PROMOTE = 1      # learner -> voter
    REMOVE = 2       # voter or learner -> gone


@dataclass(frozen=True)
class ConfChange:
    type: ConfChangeType
    node: str

    def encode(self) -> bytes:
        return f"{int(self.type)}:{self.node}".encode()

    @classmethod
    def decode(cls, data: bytes) -> "ConfChange":
        kind, _, node = data.decode().partition(":")
        return cls(ConfChangeType(int(kind)), node)


@dataclass(frozen=True)
class ConfState:
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()

    def members(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.voters) | set(self.learners)))


@dataclass(frozen=True)
class HardState:
    term: int = 0
    vote: str = ""      # "" = voted for nobody in this term
    commit: int = 0


@dataclass(frozen=True)
class SnapshotMeta:
    index: int
    term: int
    conf: ConfState


@dataclass(frozen=True)
class Snapshot:
    meta: SnapshotMeta
    data: bytes


class MsgType(enum.IntEnum):
    VOTE = 1
    VOTE_RESP = 2
    PREVOTE = 3
    PREVOTE_RESP = 4
    APP = 5             # AppendEntries (also carries the commit index)
    APP_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAP = 9            # one chunk of InstallSnapshot
    SNAP_RESP = 10      # acknowledges a chunk (or rejects)
    TIMEOUT_NOW = 11    # leadership transfer: start an election now
    READ_INDEX = 12     # follower -> leader: ask for a read index (context)
    READ_INDEX_RESP = 13
    PROPOSE = 14        # follower -> leader: forward proposals (entries carry data)
    # Not Raft: the daemon's peer requests ride the same authenticated
    # connections (``cronrd.runtime.peers.rpc``); the core never sees them.
    RPC_REQ = 15        # index = request id, context = method, data = JSON arguments
    RPC_RESP = 16       # index = request id, reject = error, data = JSON result or error


@dataclass(frozen=True)
class Message:
    type: MsgType
    to: str
    frm: str
    term: int
    log_term: int = 0            # APP: term of the entry at ``index``; votes: last log term
    index: int = 0               # APP: index before ``entries``; votes: last log index;
                                 # APP_RESP: match index (or rejected index); SNAP: snapshot index
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0         # APP_RESP on reject: the follower's last index (or conflict index)
    hint_term: int = 0           # APP_RESP on reject: the term at reject_hint (fast back-off)
    context: bytes = b""         # READ_INDEX / heartbeats: request context; votes: b"transfer"
    # SNAP chunking: the snapshot's meta is in every chunk; data is bytes
    # [offset, offset + len(data)) of the whole; ``done`` marks the last chunk.
    snapshot_meta: SnapshotMeta | None = None
    offset: int = 0
    data: bytes = b""
    done: bool = False


@dataclass(frozen=True)
class ReadState:
    """A linearizable read may be served once ``index`` has been applied."""
    index: int
    context: bytes


@dataclass(frozen=True)
class SoftState:
    leader: str      # "" when unknown
    role: str        # leader | follower | candidate | precandidate | learner


@dataclass
class Ready:
    """What the runtime must do, in this order:

    1. persist ``snapshot`` (if any), then ``entries`` and ``hard_state``
       (if any) durably (fsync);
    2. send ``messages`` (only after step 1: they may acknowledge what was
       persisted);
    3. apply ``committed`` entries to the state machine (a snapshot first, if
       one was installed), answer ``read_states`` once applied;
    4. call ``advance(ready)``.
    """

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    committed: list[Entry] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    soft_state: SoftState | None = None
    # Proposals the core dropped (no leader, transfer in progress, conf change
    # pending...): (context, reason). The driver fails their futures.
    dropped: list[tuple[bytes, str]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.hard_state or self.entries or self.snapshot or self.committed
                    or self.messages or self.read_states or self.soft_state
                    or self.dropped)

"""Binary wire encoding of Raft messages (pure: no I/O).

Payload layout (all integers big-endian)::

    version      u8      == VERSION (1)
    type         u8      MsgType
    flags        u8      bit0 reject, bit1 done, bit2 snapshot_meta present
    term, log_term, index, commit, reject_hint, hint_term, offset   7 x u64
    to, frm      u16 length + UTF-8
    context      u32 length + bytes
    data         u32 length + bytes
    n_entries    u32, then per entry: term u64, index u64, type u8,
                 data u32 length + bytes
    [snapshot_meta: index u64, term u64,
                    n_voters u16 + strings, n_learners u16 + strings]

The transport's hello (the first frame of every connection) is a separate
payload: version u8, tag u8 0 (no MsgType is 0), magic ``b"CRND"``, node id
(u16 length + UTF-8), and, from a node joining with a one-time token
(`cluster add --token`), the token (u16 length + UTF-8, at most 255 bytes).

Frames on the wire are a u32 big-endian length followed by the payload.

``decode`` and ``decode_hello`` raise ``CodecError`` (a ``ValueError``) on any
malformed input and never another exception type: payloads come from the
network.
"""

from __future__ import annotations

import struct

from cronrd.errors import CronrdError
from cronrd.raft.types import (ConfState, Entry, EntryType, Message, MsgType,
                               SnapshotMeta)

VERSION = 1
MAX_FRAME = 16 * 1024 * 1024
MAX_NODE_ID = 255            # bytes of UTF-8; longer ids are refused both ways
# Terms, indexes, commit values and offsets at or above this are refused: a
# real cluster never gets near it, and every value that passes leaves room
# for ``term + 1`` inside the storage's signed 64-bit integers. (Refusing
# only >= 2**63 would let 2**63-1 in, which is stored, spreads, and makes
# every node that next campaigns overflow on ``term + 1``.)
MAX_COUNTER = 1 << 62

FRAME_HEADER = struct.Struct("!I")
_HEAD = struct.Struct("!BBB7Q")          # version, type, flags, 7 integers
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_ENTRY = struct.Struct("!QQBI")          # term, index, type, data length
_META = struct.Struct("!QQ")

_F_REJECT = 1
_F_DONE = 2
_F_META = 4
_F_ALL = _F_REJECT | _F_DONE | _F_META

_HELLO_TAG = 0
_HELLO_MAGIC = b"CRND"

_MSG_TYPES = {int(t): t for t in MsgType}


def _fast_entry_works() -> bool:
    """Entry is a frozen dataclass; filling its ``__dict__`` directly skips the
    frozen ``__setattr__`` guard and halves the cost of decoding an entry (the
    hot path). Use it only while it builds an equal value (not if Entry ever
    gets ``__slots__`` or a ``__post_init__``)."""
    try:
        e = object.__new__(Entry)
        e.__dict__.update(term=1, index=2, type=EntryType.NOOP, data=b"x")
        return (e == Entry(1, 2, EntryType.NOOP, b"x") and hash(e) == hash(Entry(1, 2, EntryType.NOOP, b"x"))
                and not hasattr(Entry, "__post_init__"))
    except Exception:
        return False


_FAST_ENTRY = _fast_entry_works()
_ENTRY_TYPES = {int(t): t for t in EntryType}


class CodecError(CronrdError, ValueError):
    """A payload or frame is malformed (or a message cannot be encoded)."""


# ---------------------------------------------------------------- encoding

def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > MAX_NODE_ID:
        raise CodecError(f"node id too long ({len(b)} bytes, at most {MAX_NODE_ID}): {s[:40]!r}...")
    return _U16.pack(len(b)) + b


def encode(msg: Message) -> bytes:
    """Encode ``msg`` as a versioned payload (without the frame length)."""
    try:
        meta = msg.snapshot_meta
        flags = ((_F_REJECT if msg.reject else 0) | (_F_DONE if msg.done else 0)
                 | (_F_META if meta is not None else 0))
        context = msg.context
        data = msg.data
        entries = msg.entries
        parts = [
            _HEAD.pack(VERSION, int(msg.type), flags, msg.term, msg.log_term, msg.index,
                       msg.commit, msg.reject_hint, msg.hint_term, msg.offset),
            _str(msg.to), _str(msg.frm),
            _U32.pack(len(context)), context,
            _U32.pack(len(data)), data,
            _U32.pack(len(entries)),
        ]
        append = parts.append
        pack_entry = _ENTRY.pack
        for e in entries:
            d = e.data
            append(pack_entry(e.term, e.index, e.type, len(d)))
            append(d)
        if meta is not None:
            append(_META.pack(meta.index, meta.term))
            for names in (meta.conf.voters, meta.conf.learners):
                append(_U16.pack(len(names)))
                for n in names:
                    append(_str(n))
        return b"".join(parts)
    except CodecError:
        raise
    except (struct.error, UnicodeError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise CodecError(f"cannot encode {getattr(msg, 'type', '?')!s} message: {exc}") from exc


def encode_hello(node_id: str, token: str = "") -> bytes:
    """The payload of the first frame a connecting node sends: who it claims to
    be, and the join token it was given, if it is joining with one."""
    try:
        return (bytes((VERSION, _HELLO_TAG)) + _HELLO_MAGIC + _str(node_id)
                + (_str(token) if token else b""))
    except UnicodeError as exc:
        raise CodecError(f"cannot encode node id {node_id!r}: {exc}") from exc


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its u32 big-endian length."""
    return FRAME_HEADER.pack(len(payload)) + payload


def frame_length(header: bytes, max_frame: int = MAX_FRAME) -> int:
    """Parse a 4-byte frame header; CodecError when the length exceeds ``max_frame``."""
    if len(header) != FRAME_HEADER.size:
        raise CodecError(f"frame header must be {FRAME_HEADER.size} bytes, got {len(header)}")
    n: int = FRAME_HEADER.unpack(header)[0]
    if n > max_frame:
        raise CodecError(f"frame of {n} bytes exceeds the limit of {max_frame} bytes")
    return n


# ---------------------------------------------------------------- decoding

def _check_version(buf: bytes) -> None:
    if not buf:
        raise CodecError("empty payload")
    if buf[0] != VERSION:
        raise CodecError(f"unsupported codec version {buf[0]} (this node speaks version {VERSION})")


def _read_str(buf: bytes, off: int, end: int, what: str) -> tuple[str, int]:
    if off + 2 > end:
        raise CodecError(f"truncated payload: {what} length at byte {off}")
    (n,) = _U16.unpack_from(buf, off)
    off += 2
    if n > MAX_NODE_ID:
        raise CodecError(f"{what} of {n} bytes exceeds {MAX_NODE_ID}")
    if off + n > end:
        raise CodecError(f"truncated payload: {what} needs {n} bytes at byte {off}")
    try:
        s = buf[off:off + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CodecError(f"{what} is not valid UTF-8: {exc}") from None
    return s, off + n


def _read_bytes(buf: bytes, off: int, end: int, what: str) -> tuple[bytes, int]:
    if off + 4 > end:
        raise CodecError(f"truncated payload: {what} length at byte {off}")
    (n,) = _U32.unpack_from(buf, off)
    off += 4
    if off + n > end:
        raise CodecError(f"truncated payload: {what} claims {n} bytes, {end - off} left")
    return bytes(buf[off:off + n]), off + n


def decode(payload: bytes) -> Message:
    """Decode a payload made by ``encode``; CodecError on anything malformed."""
    try:
        return _decode(payload)
    except CodecError:
        raise
    except Exception as exc:  # defensive: nothing but CodecError may escape
        raise CodecError(f"malformed payload: {type(exc).__name__}: {exc}") from None


def _decode(buf: bytes) -> Message:
    if not isinstance(buf, bytes):
        buf = bytes(buf)
    _check_version(buf)
    end = len(buf)
    if end < _HEAD.size:
        if end >= 2 and buf[1] == _HELLO_TAG:
            raise CodecError("got a hello where a message was expected")
        raise CodecError(f"truncated payload: {end} bytes, header needs {_HEAD.size}")
    (_, mtype, flags, term, log_term, index, commit, reject_hint, hint_term,
     offset) = _HEAD.unpack_from(buf, 0)
    if max(term, log_term, index, commit, reject_hint, hint_term, offset) >= MAX_COUNTER:
        raise CodecError(f"a term, index, commit or offset of 2**62 or more (term={term}, "
                         f"index={index}, commit={commit}): no cluster gets there")
    t = _MSG_TYPES.get(mtype)
    if t is None:
        if mtype == _HELLO_TAG:
            raise CodecError("got a hello where a message was expected")
        raise CodecError(f"unknown message type {mtype}")
    if flags & ~_F_ALL:
        raise CodecError(f"unknown flag bits {flags:#04x}")
    off = _HEAD.size
    to, off = _read_str(buf, off, end, "recipient id")
    frm, off = _read_str(buf, off, end, "sender id")
    context, off = _read_bytes(buf, off, end, "context")
    data, off = _read_bytes(buf, off, end, "data")
    if off + 4 > end:
        raise CodecError(f"truncated payload: entry count at byte {off}")
    (count,) = _U32.unpack_from(buf, off)
    off += 4
    if count * _ENTRY.size > end - off:
        raise CodecError(f"entry count {count} cannot fit in the {end - off} bytes left")
    entries: list[Entry] = []
    append = entries.append
    unpack_entry = _ENTRY.unpack_from
    esize = _ENTRY.size
    etypes = _ENTRY_TYPES
    new = object.__new__
    fast = _FAST_ENTRY
    for _ in range(count):
        if off + esize > end:
            raise CodecError(f"truncated payload: entry header at byte {off}")
        eterm, eindex, etype, n = unpack_entry(buf, off)
        off += esize
        if eterm >= MAX_COUNTER or eindex >= MAX_COUNTER:
            raise CodecError(f"entry with term {eterm} or index {eindex} of 2**62 or more")
        et = etypes.get(etype)
        if et is None:
            raise CodecError(f"unknown entry type {etype} at byte {off - esize}")
        if off + n > end:
            raise CodecError(f"truncated payload: entry data claims {n} bytes, {end - off} left")
        if fast:
            e = new(Entry)
            e.__dict__.update(term=eterm, index=eindex, type=et, data=buf[off:off + n])
            append(e)
        else:
            append(Entry(eterm, eindex, et, buf[off:off + n]))
        off += n
    meta = None
    if flags & _F_META:
        if off + _META.size > end:
            raise CodecError(f"truncated payload: snapshot meta at byte {off}")
        sindex, sterm = _META.unpack_from(buf, off)
        off += _META.size
        if sindex >= MAX_COUNTER or sterm >= MAX_COUNTER:
            raise CodecError(f"snapshot at index {sindex}, term {sterm}: 2**62 or more")
        groups = []
        for what in ("voter", "learner"):
            if off + 2 > end:
                raise CodecError(f"truncated payload: {what} count at byte {off}")
            (n,) = _U16.unpack_from(buf, off)
            off += 2
            if n * 2 > end - off:
                raise CodecError(f"{what} count {n} cannot fit in the {end - off} bytes left")
            names = []
            for _ in range(n):
                name, off = _read_str(buf, off, end, what + " id")
                names.append(name)
            groups.append(tuple(names))
        meta = SnapshotMeta(index=sindex, term=sterm,
                            conf=ConfState(voters=groups[0], learners=groups[1]))
    if off != end:
        raise CodecError(f"{end - off} trailing bytes after the message")
    return Message(type=t, to=to, frm=frm, term=term, log_term=log_term, index=index,
                   entries=tuple(entries), commit=commit, reject=bool(flags & _F_REJECT),
                   reject_hint=reject_hint, hint_term=hint_term, context=context,
                   snapshot_meta=meta, offset=offset, data=data, done=bool(flags & _F_DONE))


def decode_hello(payload: bytes) -> str:
    """Decode a hello payload and return the node id it claims; CodecError otherwise."""
    return decode_hello_token(payload)[0]


def decode_hello_token(payload: bytes) -> tuple[str, str]:
    """Decode a hello: (node id, join token or "")."""
    try:
        buf = bytes(payload)
        _check_version(buf)
        prefix = 2 + len(_HELLO_MAGIC)
        if len(buf) < prefix or buf[1] != _HELLO_TAG or buf[2:prefix] != _HELLO_MAGIC:
            raise CodecError("not a hello frame")
        node_id, off = _read_str(buf, prefix, len(buf), "node id")
        token = ""
        if off != len(buf):
            token, off = _read_str(buf, off, len(buf), "join token")
        if off != len(buf):
            raise CodecError(f"{len(buf) - off} trailing bytes after the hello")
        if not node_id:
            raise CodecError("hello with an empty node id")
        return node_id, token
    except CodecError:
        raise
    except Exception as exc:  # defensive
        raise CodecError(f"malformed hello: {type(exc).__name__}: {exc}") from None

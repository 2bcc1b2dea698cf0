"""Wire codec: round trips, and malformed input never escapes as anything but CodecError."""

from __future__ import annotations

import random
import struct

import pytest

from cronrd.errors import CronrdError
from cronrd.raft import codec
from cronrd.raft.codec import (MAX_FRAME, VERSION, CodecError, decode, decode_hello, encode,
                               encode_hello, frame, frame_length)
from cronrd.raft.types import (ConfState, Entry, EntryType, Message, MsgType, SnapshotMeta)

U64 = 2 ** 64 - 1
IDS = ["n1", "node-2", "host.example.com", "ü-nöde", "x" * 255, ""]


TOP = codec.MAX_COUNTER - 1  # the largest term/index a message may carry


def _int(rng: random.Random) -> int:
    return rng.choice([0, 1, rng.randrange(1000), rng.randrange(2 ** 32), TOP,
                       rng.randrange(TOP)])


def _bytes(rng: random.Random, big: int = 300) -> bytes:
    return rng.randbytes(rng.choice([0, 1, rng.randrange(big)]))


def random_message(rng: random.Random) -> Message:
    entries = tuple(Entry(term=_int(rng), index=_int(rng), type=rng.choice(list(EntryType)),
                          data=_bytes(rng)) for _ in range(rng.choice([0, 0, 1, rng.randrange(70)])))
    meta = None
    if rng.random() < 0.3:
        meta = SnapshotMeta(index=_int(rng), term=_int(rng),
                            conf=ConfState(voters=tuple(rng.sample(IDS, rng.randrange(4))),
                                           learners=tuple(rng.sample(IDS, rng.randrange(3)))))
    return Message(type=rng.choice(list(MsgType)), to=rng.choice(IDS), frm=rng.choice(IDS),
                   term=_int(rng), log_term=_int(rng), index=_int(rng), entries=entries,
                   commit=_int(rng), reject=rng.random() < 0.5, reject_hint=_int(rng),
                   hint_term=_int(rng), context=_bytes(rng, 40), snapshot_meta=meta,
                   offset=_int(rng), data=_bytes(rng, 2000), done=rng.random() < 0.5)


def hot_path_message() -> Message:
    rng = random.Random(7)
    entries = tuple(Entry(term=9, index=1000 + i, data=rng.randbytes(200)) for i in range(64))
    return Message(MsgType.APP, to="n2", frm="n1", term=9, log_term=9, index=999,
                   entries=entries, commit=990)


def test_codec_error_is_a_value_error_and_a_cronrd_error():
    assert issubclass(CodecError, ValueError)
    assert issubclass(CodecError, CronrdError)


@pytest.mark.parametrize("seed", range(400))
def test_random_messages_round_trip(seed):
    msg = random_message(random.Random(seed))
    payload = encode(msg)
    assert payload[0] == VERSION
    back = decode(payload)
    assert back == msg
    assert all(type(e.data) is bytes for e in back.entries)
    assert type(back.data) is bytes and type(back.context) is bytes
    assert isinstance(back.type, MsgType)


def test_defaults_round_trip_and_are_compact():
    msg = Message(MsgType.HEARTBEAT, "n2", "n1", 3, commit=7)
    payload = encode(msg)
    assert decode(payload) == msg
    assert len(payload) < 100


def test_hot_path_message_round_trips_with_small_overhead():
    msg = hot_path_message()
    payload = encode(msg)
    assert decode(payload) == msg
    raw = 64 * 200
    assert len(payload) < raw * 1.15   # binary, not JSON/base64


def test_unknown_version_is_refused_and_named():
    payload = bytearray(encode(hot_path_message()))
    payload[0] = 2
    with pytest.raises(CodecError, match="version 2"):
        decode(bytes(payload))
    with pytest.raises(CodecError, match="version 2"):
        decode_hello(b"\x02" + encode_hello("n1")[1:])


@pytest.mark.parametrize("msg_seed", range(40))
def test_every_truncation_is_a_codec_error(msg_seed):
    payload = encode(random_message(random.Random(msg_seed)))
    step = max(1, len(payload) // 300)
    for n in list(range(0, len(payload), step)) + [len(payload) - 1]:
        with pytest.raises(CodecError):
            decode(payload[:n])


def test_trailing_bytes_are_refused():
    payload = encode(hot_path_message())
    with pytest.raises(CodecError, match="trailing"):
        decode(payload + b"\x00")


def test_bad_enums_are_refused():
    msg = Message(MsgType.APP, "b", "a", 1, entries=(Entry(1, 1, EntryType.NORMAL, b"x"),))
    payload = bytearray(encode(msg))
    bad_type = bytearray(payload)
    bad_type[1] = 99
    with pytest.raises(CodecError, match="message type 99"):
        decode(bytes(bad_type))
    bad_flags = bytearray(payload)
    bad_flags[2] = 0x80
    with pytest.raises(CodecError, match="flag"):
        decode(bytes(bad_flags))
    # The entry's type byte sits 17 bytes into the entry header, after term and index.
    entry_start = len(payload) - (8 + 8 + 1 + 4 + 1)
    bad_entry = bytearray(payload)
    bad_entry[entry_start + 16] = 9
    with pytest.raises(CodecError, match="entry type 9"):
        decode(bytes(bad_entry))


def test_absurd_lengths_are_refused_without_allocating():
    msg = Message(MsgType.APP, "b", "a", 1)
    payload = bytearray(encode(msg))
    # The entry count is the last field of a message without entries or meta.
    payload[-4:] = struct.pack("!I", 2 ** 32 - 1)
    with pytest.raises(CodecError, match="entry count"):
        decode(bytes(payload))
    data_len_at = len(payload) - 8
    payload = bytearray(encode(msg))
    payload[data_len_at:data_len_at + 4] = struct.pack("!I", 2 ** 32 - 1)
    with pytest.raises(CodecError, match="data claims"):
        decode(bytes(payload))


@pytest.mark.parametrize("seed", range(60))
def test_bit_flips_decode_or_raise_codec_error(seed):
    rng = random.Random(1000 + seed)
    payload = encode(random_message(rng))
    for _ in range(60):
        mutated = bytearray(payload)
        for _ in range(rng.choice([1, 1, 2, 8])):
            i = rng.randrange(len(mutated))
            mutated[i] ^= 1 << rng.randrange(8)
        try:
            out = decode(bytes(mutated))
        except CodecError:
            continue
        assert isinstance(out, Message)
        assert encode(out) == bytes(mutated)   # anything accepted is canonical


@pytest.mark.parametrize("seed", range(30))
def test_random_bytes_decode_or_raise_codec_error(seed):
    rng = random.Random(5000 + seed)
    for _ in range(200):
        blob = rng.randbytes(rng.randrange(200))
        if blob and rng.random() < 0.7:
            blob = bytes([VERSION]) + blob[1:]    # get past the version check
        for fn in (decode, decode_hello):
            try:
                fn(blob)
            except CodecError:
                pass


def test_non_bytes_input_is_a_codec_error():
    for junk in (None, 12, "text", [1, 2]):
        with pytest.raises(CodecError):
            decode(junk)  # type: ignore[arg-type]
    assert decode(bytearray(encode(hot_path_message()))) == hot_path_message()


def test_unencodable_messages_raise_codec_error():
    with pytest.raises(CodecError):
        encode(Message(MsgType.APP, "b", "a", term=-1))
    with pytest.raises(CodecError):
        encode(Message(MsgType.APP, "b", "a", term=2 ** 64))
    with pytest.raises(CodecError, match="too long"):
        encode(Message(MsgType.APP, "b" * 256, "a", term=1))
    with pytest.raises(CodecError):
        encode(Message(MsgType.APP, "\udc80", "a", term=1))


def test_hello_round_trip_and_is_not_a_message():
    hello = encode_hello("node-7")
    assert decode_hello(hello) == "node-7"
    with pytest.raises(CodecError, match="hello"):
        decode(hello)
    with pytest.raises(CodecError, match="not a hello"):
        decode_hello(encode(hot_path_message()))
    with pytest.raises(CodecError, match="empty"):
        decode_hello(encode_hello(""))
    with pytest.raises(CodecError, match="join token"):
        decode_hello(hello + b"x")  # a token needs its length
    with pytest.raises(CodecError, match="trailing"):
        decode_hello(encode_hello("node-7", "tok") + b"x")


def test_hello_carries_a_join_token():
    assert codec.decode_hello_token(encode_hello("d", "s3cr3t")) == ("d", "s3cr3t")
    assert codec.decode_hello_token(encode_hello("d")) == ("d", "")
    with pytest.raises(CodecError):
        encode_hello("d", "x" * 300)


def test_frames():
    payload = encode(hot_path_message())
    framed = frame(payload)
    assert framed[4:] == payload
    assert frame_length(framed[:4]) == len(payload)
    assert frame_length(struct.pack("!I", MAX_FRAME)) == MAX_FRAME
    assert MAX_FRAME == 16 * 1024 * 1024
    with pytest.raises(CodecError, match="exceeds"):
        frame_length(struct.pack("!I", MAX_FRAME + 1))
    with pytest.raises(CodecError, match="exceeds"):
        frame_length(struct.pack("!I", 101), max_frame=100)
    with pytest.raises(CodecError):
        frame_length(b"\x00\x01")


def test_codec_module_is_pure():
    import ast
    tree = ast.parse(open(codec.__file__).read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported <= {"__future__", "struct", "cronrd.errors", "cronrd.raft.types"}


@pytest.mark.parametrize("field", ["term", "log_term", "index", "commit", "reject_hint",
                                   "hint_term", "offset"])
@pytest.mark.parametrize("value", [2 ** 62, 2 ** 63 - 1, 2 ** 63, U64])
def test_counters_that_would_overflow_storage_are_refused(field, value):
    # Issue 9: a heartbeat with term 2**63 made the receiver exit (OverflowError
    # in storage); 2**63-1 was stored and crashed every node on term + 1.
    fields = {"term": 1, field: value}
    payload = encode(Message(MsgType.HEARTBEAT, to="n2", frm="n1", **fields))
    with pytest.raises(CodecError, match="2\\*\\*62"):
        decode(payload)


@pytest.mark.parametrize("where", ["entry term", "entry index", "snapshot index",
                                   "snapshot term"])
def test_entry_and_snapshot_counters_are_bounded_too(where):
    big = 2 ** 63 - 1
    e = Entry(term=big if where == "entry term" else 1, index=big if where == "entry index" else 1)
    meta = SnapshotMeta(index=big if where == "snapshot index" else 1,
                        term=big if where == "snapshot term" else 1, conf=ConfState(("n1",)))
    msg = (Message(MsgType.APP, to="n2", frm="n1", term=1, entries=(e,))
           if where.startswith("entry")
           else Message(MsgType.SNAP, to="n2", frm="n1", term=1, snapshot_meta=meta))
    with pytest.raises(CodecError, match="2\\*\\*62"):
        decode(encode(msg))
    assert decode(encode(Message(MsgType.APP, to="n2", frm="n1", term=TOP, index=TOP,
                                 entries=(Entry(TOP, TOP),)))).term == TOP

"""Reading a run's output (cronrd/runtime/runs/output.py) from files laid
out as the supervisors write them: older logs, indexed logs, a ring left
by a running or killed supervisor, cursors that survive the tail's move."""

from __future__ import annotations

import os

import pytest

from cronrd.runtime.runs import output as O


def rec(off, pos, length, stream, t=1.0):
    return O.RECORD.pack(off, pos, length, stream, t)


@pytest.fixture
def logdir(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path
    os.close(fd)


def read_all(path, pos=0, size=1 << 20):
    d = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        files = O.open_files(d, os.path.basename(path))
    finally:
        os.close(d)
    try:
        return O.read(files, pos, size)
    finally:
        files.close()


def test_a_log_without_an_index_is_one_stream(logdir):
    (logdir / "a.log").write_bytes(b"hello\nworld\n")
    parts, pos, more = read_all(str(logdir / "a.log"))
    assert parts == [O.Part(O.ALL, None, b"hello\nworld\n")] and pos == 12 and not more


def test_bytes_the_index_does_not_cover_are_shown_as_one_stream(logdir):
    # The daemon's own line before the run, then the job's stderr.
    (logdir / "a.log").write_bytes(b"cronrd: note\nboom\n")
    (logdir / "a.log.idx").write_bytes(rec(13, 0, 5, O.STDERR, 5.0))
    parts, _, _ = read_all(str(logdir / "a.log"))
    assert [(p.stream, p.data) for p in parts] == [(O.ALL, b"cronrd: note\n"),
                                                   (O.STDERR, b"boom\n")]


def test_a_damaged_index_cannot_point_outside_the_log(logdir):
    (logdir / "a.log").write_bytes(b"abc")
    (logdir / "a.log.idx").write_bytes(rec(0, 0, 99, O.STDOUT) + rec(50, 3, 10, O.STDERR)
                                       + b"\x01\x02")
    parts, _, _ = read_all(str(logdir / "a.log"))
    assert [(p.stream, p.data) for p in parts] == [(O.STDOUT, b"abc")]


def test_reading_in_small_steps_gives_the_same_output(logdir):
    (logdir / "a.log").write_bytes(b"out1\nerr1\nout2\n")
    (logdir / "a.log.idx").write_bytes(rec(0, 0, 5, O.STDOUT, 1.0) + rec(5, 5, 5, O.STDERR, 2.0)
                                       + rec(10, 10, 5, O.STDOUT, 3.0))
    pos, got = 0, []
    while True:
        parts, pos, more = read_all(str(logdir / "a.log"), pos, 3)
        got.extend(parts)
        if not more:
            break
    assert b"".join(p.data for p in got) == b"out1\nerr1\nout2\n"
    assert [p.stream for p in got if p.data.startswith(b"e")] == [O.STDERR]
    assert {p.time for p in got} == {1.0, 2.0, 3.0}


def _live(logdir, head_data, ring_bytes, recs, head=10, tail=10):
    """A log whose supervisor is (or was) running past its head."""
    (logdir / "a.log").write_bytes(head_data)
    (logdir / "a.log.idx").write_bytes(rec(0, 0, len(head_data), O.STDOUT))
    (logdir / "a.log.tail").write_bytes(ring_bytes)
    slots = O.tail_slots(tail)
    table = bytearray(O.RECORD.size * (slots + 1))
    table[:O.RECORD.size] = O.RECORD.pack(head, tail, slots, O.TAIL_HEADER, 0.0)
    for i, r in enumerate(recs):
        table[O.RECORD.size * (1 + i):O.RECORD.size * (2 + i)] = r
    (logdir / "a.log.tidx").write_bytes(bytes(table))


def test_a_running_log_past_its_head_reads_the_ring_in_order(logdir):
    # Output 0123456789 (head) then ABCDEFGHIJKLMNO (15 bytes) into a ring of
    # 10: positions 10..24; the ring holds 15..24 = FGHIJKLMNO, wrapped.
    ring = bytearray(10)
    for i, c in enumerate(b"ABCDEFGHIJKLMNO"):
        ring[(10 + i - 10) % 10] = c
    _live(logdir, b"0123456789", bytes(ring),
          [rec(0, 10, 12, O.STDOUT, 2.0), rec(0, 22, 3, O.STDERR, 3.0)])
    parts, pos, more = read_all(str(logdir / "a.log"))
    assert parts[0] == O.Part(O.STDOUT, 1.0, b"0123456789")
    assert parts[1].stream == O.CRONRD and b"5 bytes dropped here so far" in parts[1].data
    assert parts[2:] == [O.Part(O.STDOUT, 2.0, b"FGHIJKL"), O.Part(O.STDERR, 3.0, b"MNO")]
    assert pos == 25 and not more


def test_a_follower_in_the_ring_goes_on_after_the_tail_moved_into_the_log(logdir):
    ring = bytearray(b"KLMNOFGHIJ")
    _live(logdir, b"0123456789", bytes(ring), [rec(0, 10, 15, O.STDOUT, 2.0)])
    # A follower has read up to position 20 (..."J").
    parts, pos, _ = read_all(str(logdir / "a.log"), 20)
    assert b"".join(p.data for p in parts) == b"KLMNO" and pos == 25
    # The supervisor ends: head + note + tail in the log, the ring gone.
    note = O.drop_note(5, 20, newline_first=True)
    (logdir / "a.log").write_bytes(b"0123456789" + note + b"FGHIJKLMNO")
    (logdir / "a.log.idx").write_bytes(
        rec(0, 0, 10, O.STDOUT) + rec(10, 15, len(note), O.CRONRD)
        + rec(10 + len(note), 15, 10, O.STDOUT, 2.0))
    os.unlink(logdir / "a.log.tail")
    os.unlink(logdir / "a.log.tidx")
    assert read_all(str(logdir / "a.log"), 25) == ([], 25, False)
    # From the start: head, the note, the tail.
    parts, pos, _ = read_all(str(logdir / "a.log"))
    assert [p.data for p in parts] == [b"0123456789", note, b"FGHIJKLMNO"] and pos == 25
    assert note == (b"\ncronrd: 5 bytes dropped here (max_log_bytes 20 bytes keeps the first "
                    b"10 bytes and the last 10 bytes)\n")


def test_sizes_are_said_in_the_largest_whole_unit():
    assert O.size_text(10 << 20) == "10MiB" and O.size_text(5 << 20) == "5MiB"
    assert O.size_text(1536) == "1536 bytes" and O.size_text(2048) == "2KiB"
    assert O.split_cap(1001) == (501, 500)


def test_bytes_not_yet_indexed_wait_while_the_run_runs(logdir):
    # The supervisor wrote "err2\n" but not yet its record.
    (logdir / "a.log").write_bytes(b"out1\nerr2\n")
    (logdir / "a.log.idx").write_bytes(rec(0, 0, 5, O.STDOUT))
    d = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY)
    files = O.open_files(d, "a.log")
    os.close(d)
    try:
        parts, pos, _ = O.read(files, 0, 100, running=True)
        assert parts == [O.Part(O.STDOUT, 1.0, b"out1\n")] and pos == 5
        # Once over, what no record covers is shown as it is.
        parts, pos, _ = O.read(files, 5, 100)
        assert parts == [O.Part(O.ALL, None, b"err2\n")] and pos == 10
    finally:
        files.close()

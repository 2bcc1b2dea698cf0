"""A run's output on disk: the log, its index, and its tail while it runs.

The supervisor (supervisor.py, _supervise.c) reads the job's stdout and
stderr from two pipes and keeps:

``LOG`` (LOG_DIR/JOB/STAMP-aA-rR.log)
    Plain text, what operators ``cat`` and ``tail``: the output in the order
    it was read. At most max_log_bytes of the job's output: the first half
    (the *head*, the odd byte included) and the last half (the *tail*),
    with a line of cronrd's between them saying how much was dropped.

``LOG.idx``
    The index: fixed-size records (``RECORD``: file offset, output
    position, length, stream, time), one per stretch of the log that came
    from one stream. A stretch grows while the same stream keeps writing
    within MERGE_WINDOW of the stretch's start, so a job that prints a line
    a millisecond costs a record per 100 ms, not per line; and the head's
    records are bounded (``head_records``). The output
    position counts the job's bytes (dropped ones too): it is the cursor
    ``cronrd logs`` follows a run with, the same before and after the tail
    is moved into the log.

``LOG.tail`` and ``LOG.tidx`` (only while a run that overflowed its head runs)
    Output past the head goes into ``LOG.tail``, a ring of TAIL bytes (the
    byte at output position P at (P - HEAD) % TAIL), and its records into
    ``LOG.tidx``, a ring of slots after a header slot (HEAD, TAIL, slots).
    So the last TAIL bytes are on disk all along, with bounded memory and
    a bounded file: a supervisor killed mid-run leaves a log that readers
    (``read``, below) still show as head + "dropped" + tail, and ``logs
    -f`` follows a run past its head. When its output closes, the
    supervisor appends the marker and the tail to the log and their
    records to the index, then removes the ring (LOG.tail first: a ring
    without it is a finished one). Why not two alternating files of
    TAIL/2: they keep between TAIL/2 and TAIL bytes; the ring keeps exactly
    the last TAIL, which the marker promises.

Logs of older daemons have no index: their bytes are one stream (ALL).
Bytes the index does not cover (a line the daemon wrote itself: why a run
could not start) count as ALL too. Only the standard library is used here:
the Python supervisor imports it in the fork server.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

RECORD = struct.Struct("<QQIB3xd")  # file offset, output position, length, stream, time
ALL, STDOUT, STDERR, CRONRD = 0, 1, 2, 3  # streams; ALL: not told apart (older logs)
STREAM_NAMES = {ALL: "output", STDOUT: "stdout", STDERR: "stderr", CRONRD: "cronrd"}
TAIL_HEADER = 0xFE  # the stream byte of LOG.tidx's first slot
MERGE_WINDOW = 0.1  # seconds: a stretch of one stream grows for this long
MAX_STRETCH = 1 << 30  # bytes in one record at most
IDX, TAIL, TIDX = ".idx", ".tail", ".tidx"
SIDECARS = (IDX, TAIL, TIDX)
# Bytes of the log read per index build at most (the index of a 10 MiB log
# is a few hundred records; a hostile one is cut here).
MAX_INDEX_BYTES = 8 << 20


def split_cap(cap: int) -> tuple[int, int]:
    """max_log_bytes -> (head, tail) bytes."""
    tail = cap // 2
    return cap - tail, tail


def head_records(head: int) -> int:
    """Records LOG.idx holds for the head at most: past them, a stretch
    grows whatever stream writes (its stream then ALL), so a job that
    alternates streams byte by byte cannot make the index outgrow the log
    many times over (~1/8 of the head at most)."""
    return 64 + head // 256


def tail_slots(tail: int) -> int:
    """Records LOG.tidx holds for a tail of ``tail`` bytes (header apart)."""
    return min(4096, max(64, tail // 4096))


def size_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n} bytes"


def drop_note(dropped: int, cap: int, newline_first: bool) -> bytes:
    """The line between the head and the tail."""
    head, tail = split_cap(cap)
    text = (f"cronrd: {dropped} bytes dropped here (max_log_bytes {size_text(cap)} keeps "
            f"the first {size_text(head)} and the last {size_text(tail)})\n")
    return (b"\n" if newline_first else b"") + text.encode()


@dataclass(frozen=True)
class Piece:
    """A stretch of the output as readers see it: ``length`` bytes at
    ``pos`` (output position) from one stream, found at ``where`` in
    ``source`` ("log" or "tail"), or a text of cronrd's (``note``) standing
    for ``length`` dropped bytes."""
    pos: int
    length: int
    stream: int
    time: float | None
    source: str = "log"
    where: int = 0
    note: bytes | None = None
    ring: int = 0  # the size of LOG.tail (source "tail")

    @property
    def end(self) -> int:
        return self.pos + self.length


@dataclass(frozen=True)
class Part:
    stream: int
    time: float | None
    data: bytes


def _records(data: bytes) -> list[tuple]:
    n = len(data) // RECORD.size
    return [RECORD.unpack_from(data, i * RECORD.size) for i in range(n)]


def _read_all(fd: int, limit: int) -> bytes:
    out, off = [], 0
    while off < limit:
        chunk = os.pread(fd, min(1 << 20, limit - off), off)
        if not chunk:
            break
        out.append(chunk)
        off += len(chunk)
    return b"".join(out)


class Files:
    """The open files of one run's output (``open_at``: relative to its job's
    log directory, never following symlinks)."""

    def __init__(self, log: int, idx: int | None = None, tail: int | None = None,
                 tidx: int | None = None):
        self.log, self.idx, self.tail, self.tidx = log, idx, tail, tidx

    def close(self) -> None:
        for fd in (self.log, self.idx, self.tail, self.tidx):
            if fd is not None:
                os.close(fd)


def pieces(files: Files, running: bool = False) -> list[Piece]:
    """The output of a run as Pieces in order of position, covering it all.
    ``running``: bytes past the last record are not shown yet (the
    supervisor writes the bytes, then their record: without this a
    follower would see a line of stdout as unsorted output)."""
    size = os.fstat(files.log).st_size
    recs = []
    if files.idx is not None:
        recs = [r for r in _records(_read_all(files.idx, MAX_INDEX_BYTES))
                if r[2] > 0 and r[3] in (ALL, STDOUT, STDERR, CRONRD)]
    live = None
    if files.tail is not None and files.tidx is not None:
        tidx = _read_all(files.tidx, RECORD.size * 4097)
        if len(tidx) >= RECORD.size:
            hdr = RECORD.unpack_from(tidx, 0)
            if hdr[3] == TAIL_HEADER and hdr[1] > 0:
                live = (hdr[0], hdr[1], _records(tidx[RECORD.size:]))
    if live is not None:
        head = live[0]
        size = min(size, head)
        recs = [r for r in recs if r[0] < head]
    recs.sort(key=lambda r: r[0])
    out: list[Piece] = []
    foff = pos = 0  # where the next piece starts in the file and in the output
    for off, rpos, length, stream, t in recs:
        if off < foff or off >= size:
            continue  # overlapping or beyond the file: a damaged index
        if off > foff:  # bytes nobody indexed
            out.append(Piece(pos, off - foff, ALL, None, where=foff))
            pos += off - foff
        length = min(length, size - off)
        if stream == CRONRD:
            # The drop note: its record's output position is where the
            # dropped bytes end (the tail's first byte).
            note = os.pread(files.log, length, off)
            out.append(Piece(pos, max(0, rpos - pos), CRONRD, t, where=off, note=note))
            pos = max(pos, rpos)
        else:
            pos = max(pos, rpos)
            out.append(Piece(pos, length, stream, t, where=off))
            pos += length
        foff = off + length
    if foff < size and not (running and recs):
        out.append(Piece(pos, size - foff, ALL, None, where=foff))
        pos += size - foff
    if live is not None:
        out.extend(_live_tail(live, pos))
    return out


def _live_tail(live: tuple, start: int) -> list[Piece]:
    """The ring of a running (or killed) supervisor as pieces from ``start``
    (the end of the head): a note for what it no longer holds, then the
    indexed window."""
    head, tail, recs = live
    recs = sorted((r for r in recs if r[2] > 0 and r[3] in (STDOUT, STDERR)),
                  key=lambda r: r[1])
    if not recs:
        return []
    end = max(r[1] + r[2] for r in recs)
    window = max(head, end - tail)
    out: list[Piece] = []
    if window > start:
        note = (f"\ncronrd: {window - start} bytes dropped here so far (max_log_bytes "
                f"{size_text(head + tail)} keeps the first {size_text(head)} and the last "
                f"{size_text(tail)})\n").encode()
        out.append(Piece(start, window - start, CRONRD, None, note=note))
    pos = window
    for _, rpos, length, stream, t in recs:
        lo, hi = max(rpos, pos), min(rpos + length, end)
        if hi <= lo:
            continue
        if lo > pos:
            out.append(Piece(pos, lo - pos, ALL, None, "tail", (pos - head) % tail, ring=tail))
        out.append(Piece(lo, hi - lo, stream, t, "tail", (lo - head) % tail, ring=tail))
        pos = hi
    if pos < end:
        out.append(Piece(pos, end - pos, ALL, None, "tail", (pos - head) % tail, ring=tail))
    return out


def read(files: Files, pos: int, size: int, running: bool = False
         ) -> tuple[list[Part], int, bool]:
    """Up to about ``size`` bytes of output from output position ``pos``:
    the parts, the position after them, and whether more is there now
    (``running``: see ``pieces``)."""
    parts: list[Part] = []
    got = 0
    for p in pieces(files, running):
        if p.end <= pos:
            continue
        if got >= size:
            return parts, pos, True
        if p.note is not None:
            parts.append(Part(CRONRD, p.time, p.note))
            got += len(p.note)
            pos = p.end
            continue
        skip = pos - p.pos
        data = _pread_piece(files, p, skip, min(p.length - skip, size - got))
        if not data:
            break
        parts.append(Part(p.stream, p.time, data))
        got += len(data)
        pos += len(data)
        if len(data) < p.length - skip:
            return parts, pos, True
    return parts, pos, False


def _pread_piece(files: Files, p: Piece, skip: int, n: int) -> bytes:
    if p.source == "log":
        return os.pread(files.log, n, p.where + skip)
    assert files.tail is not None  # a piece of the ring: pieces() reads it only from the tail
    out, at = [], p.where + skip
    while n > 0:
        at %= p.ring
        chunk = os.pread(files.tail, min(n, p.ring - at), at)
        if not chunk:
            break
        out.append(chunk)
        n -= len(chunk)
        at += len(chunk)
    return b"".join(out)


def open_files(dir_fd: int, name: str) -> Files:
    """The files of the log ``name`` in the job's log directory ``dir_fd``,
    for reading: FileNotFoundError without the log; sidecars that are not
    there (or not regular files) are None. Symlinks are never followed."""
    import stat

    def one(suffix: str) -> int | None:
        try:
            fd = os.open(name + suffix, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW |
                         os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            if not suffix:
                raise
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            if not suffix:
                raise IsADirectoryError(f"{name} is not a regular file")
            return None
        return fd

    log = one("")
    assert log is not None  # the log itself: one() raises without it
    return Files(log, one(IDX), one(TAIL), one(TIDX))

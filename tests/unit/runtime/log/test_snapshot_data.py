"""A snapshot's data as a file (cronrd/runtime/log/snapshot_data.py): read a
chunk at a time when sent, written a chunk at a time when received."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from cronrd.runtime.log import snapshot_data as SD


def test_file_data_answers_length_and_slices_from_the_file(tmp_path):
    data = os.urandom(3 * SD.CHUNK + 123)
    path = tmp_path / "snap"
    path.write_bytes(data)
    fd = SD.FileData(str(path))
    assert len(fd) == len(data)
    for lo, hi in [(0, 10), (SD.CHUNK - 5, SD.CHUNK + 5), (len(data) - 7, len(data) + 50),
                   (len(data), len(data) + 1), (5, 5)]:
        assert fd[lo:hi] == data[lo:hi]
    assert fd[-3:] == data[-3:]
    assert bytes(fd) == data and fd == data and fd != data[:-1]
    assert b"".join(fd.chunks()) == data and max(map(len, fd.chunks())) == SD.CHUNK
    with pytest.raises(TypeError):
        fd[3]
    with pytest.raises(ValueError):
        fd[0:10:2]
    h1, h2 = hashlib.sha256(), hashlib.sha256(data)
    SD.hash_data(h1, fd)
    assert h1.digest() == h2.digest()
    out = io.BytesIO()
    SD.write_data(out, fd)
    assert out.getvalue() == data
    path.unlink()           # replaced or removed meanwhile: still readable while held
    assert fd[:100] == data[:100]
    fd.close()


def test_a_missing_file_is_an_os_error_and_leaves_nothing_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        SD.FileData(str(tmp_path / "nothing"))


def test_file_sink_writes_chunks_as_they_come_and_finishes_as_file_data(tmp_path):
    sink = SD.FileSink(str(tmp_path / "recv.tmp"))
    sink.extend(b"abc")
    sink.extend(memoryview(b"defgh"))
    assert len(sink) == 8
    got = sink.finish()
    assert isinstance(got, SD.FileData) and bytes(got) == b"abcdefgh"
    dropped = SD.FileSink(str(tmp_path / "other.tmp"))
    dropped.extend(b"x" * 10)
    dropped.discard()
    dropped.discard()
    assert sorted(os.listdir(tmp_path)) == ["recv.tmp"]

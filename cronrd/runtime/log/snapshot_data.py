"""A snapshot's data as a file, not as bytes in memory.

The Raft core needs only ``len(data)`` and slices of it (the chunks it
sends a follower that is behind). Holding a whole state as ``bytes`` costs
its size in memory for as long as the snapshot is the latest one: 121 MB
of a 100,000-job state, on every node, for good. ``FileData`` answers
``len`` and slices from an open file instead (``os.pread``), so a node
holds one chunk at a time, and a snapshot file replaced meanwhile stays
readable until nobody holds it (the descriptor keeps the inode).
"""

from __future__ import annotations

import os

CHUNK = 1 << 20


class FileData:
    """Read-only bytes of a file, read when asked for."""

    __slots__ = ("path", "_fd", "_size")

    def __init__(self, path: str):
        self.path = path
        self._fd = -1
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("FileData supports slices only")
        lo, hi, step = key.indices(self._size)
        if step != 1:
            raise ValueError("FileData slices take no step")
        return self.read(lo, max(0, hi - lo))

    def read(self, offset: int, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            part = os.pread(self._fd, min(CHUNK, size - len(out)), offset + len(out))
            if not part:
                break
            out += part
        return bytes(out)

    def chunks(self, size: int = CHUNK):
        for offset in range(0, self._size, size):
            yield self.read(offset, size)

    def __bytes__(self) -> bytes:
        return self.read(0, self._size)

    def __eq__(self, other) -> bool:
        if isinstance(other, (bytes, bytearray, FileData)):
            return len(other) == self._size and bytes(other) == bytes(self)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"FileData({self.path!r}, {self._size} bytes)"


def hash_data(h, data) -> None:
    """Feed ``data`` (bytes or FileData) to hash ``h`` a chunk at a time."""
    if isinstance(data, FileData):
        for chunk in data.chunks():
            h.update(chunk)
    else:
        h.update(data)


def write_data(f, data) -> None:
    """Write ``data`` (bytes or FileData) to file object ``f`` a chunk at a time."""
    if isinstance(data, FileData):
        for chunk in data.chunks():
            f.write(chunk)
    else:
        f.write(data)



class FileSink:
    """A snapshot being received from the leader, written to a file as its
    chunks come (the Raft core's ``snapshot_sink``): ``finish`` gives its
    data as FileData; ``discard`` drops a transfer that was abandoned."""

    def __init__(self, path: str):
        self.path = path
        self._fd = -1
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self._size += n

    def finish(self) -> FileData:
        self._close()
        return FileData(self.path)

    def discard(self) -> None:
        self._close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self._close()
        except OSError:
            pass

"""The in-memory Raft log of one node: a compacted prefix (snapshot index
and term) followed by entries, with the persisted boundary tracked so that
a Ready hands out exactly what still has to reach the disk. Its writes keep
the rules of the storage contract (``storage``), as the node's disk does."""

from __future__ import annotations

from ..errors import StorageError
from .storage import append_refusal
from .types import Entry


class RaftLog:
    def __init__(self, snap_index: int = 0, snap_term: int = 0,
                 entries: list[Entry] | tuple[Entry, ...] = ()):
        self.snap_index = snap_index
        self.snap_term = snap_term
        self.entries: list[Entry] = list(entries)
        for i, e in enumerate(self.entries):
            if e.index != snap_index + 1 + i:
                raise StorageError(f"raft log is not contiguous at entry {e.index} "
                                   f"(expected {snap_index + 1 + i})")
        self.unstable_from = self.last_index() + 1  # everything loaded is on disk
        self.commit = snap_index
        self.applied = snap_index

    # -- positions ------------------------------------------------------------
    def first_index(self) -> int:
        return self.snap_index + 1

    def last_index(self) -> int:
        return self.snap_index + len(self.entries)

    def term(self, index: int) -> int | None:
        """Term of the entry at ``index``; None when compacted away or beyond the end."""
        if index == self.snap_index:
            return self.snap_term
        if index < self.snap_index or index > self.last_index():
            return None
        return self.entries[index - self.snap_index - 1].term

    def last_term(self) -> int:
        return self.term(self.last_index()) or 0

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Would a candidate with this last entry have a log at least as new?"""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    # -- reading --------------------------------------------------------------
    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at least one, at most ``max_bytes`` of data."""
        lo = max(lo, self.first_index())
        hi = min(hi, self.last_index() + 1)
        if lo >= hi:
            return []
        out = self.entries[lo - self.snap_index - 1: hi - self.snap_index - 1]
        if max_bytes is not None:
            size = 0
            for i, e in enumerate(out):
                size += len(e.data) + 24
                if size > max_bytes and i > 0:
                    return out[:i]
        return out

    def unstable(self) -> list[Entry]:
        return self.slice(self.unstable_from, self.last_index() + 1)

    def next_committed(self, max_bytes: int | None = None) -> list[Entry]:
        """The committed entries not applied yet (at least one, at most
        ``max_bytes`` of them when given)."""
        return self.slice(self.applied + 1, self.commit + 1, max_bytes)

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The largest index <= ``index`` whose term is <= ``term`` (fast back-off)."""
        index = min(index, self.last_index())
        while index > self.snap_index:
            t = self.term(index)
            if t is not None and t <= term:
                return index
            index -= 1
        return self.snap_index

    # -- writing --------------------------------------------------------------
    def append(self, entries: list[Entry]) -> None:
        """Append after the last entry, or overwrite a conflicting suffix."""
        if not entries:
            return
        refusal = append_refusal(entries, self.snap_index, self.last_index())
        if refusal is not None:
            raise StorageError(f"raft log append refused: {refusal}")
        first = entries[0].index
        if first <= self.commit:
            raise StorageError(f"append at {first} would overwrite committed entry "
                               f"(commit {self.commit})")
        del self.entries[first - self.snap_index - 1:]
        self.entries.extend(entries)
        self.unstable_from = min(self.unstable_from, first)

    def maybe_append(self, prev_index: int, prev_term: int, commit: int,
                     entries: tuple[Entry, ...]) -> int | None:
        """Follower side of AppendEntries; the new last index, or None on mismatch."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for e in entries:
            if e.index <= self.snap_index:
                continue
            t = self.term(e.index)
            if t is None or t != e.term:  # first new or conflicting entry
                self.append([x for x in entries if x.index >= e.index])
                break
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        if index > self.commit:
            if index > self.last_index():
                raise StorageError(f"commit index {index} is beyond the last entry "
                                   f"{self.last_index()}")
            self.commit = index

    def stable_to(self, index: int) -> None:
        """Entries up to ``index`` were persisted."""
        if index >= self.unstable_from - 1:
            self.unstable_from = index + 1

    def restore(self, index: int, term: int) -> None:
        """Reset to a snapshot at (index, term): drop every entry.

        ``applied`` is left alone: it is the state machine's applied index and
        only moves when the runtime has restored the snapshot (``advance``).
        Moving it here would let the runtime, between this step and the Ready
        that carries the snapshot, label its old state with the snapshot's index
        (``compact``) or answer reads from a state that is behind."""
        self.snap_index, self.snap_term = index, term
        self.entries = []
        self.unstable_from = index + 1
        self.commit = max(self.commit, index)

    def compact(self, index: int) -> None:
        """Drop entries up to ``index`` (a snapshot covers them)."""
        if index <= self.snap_index:
            return
        if index > self.applied:
            raise StorageError(f"cannot compact to {index}: only {self.applied} is applied")
        term = self.term(index)
        if term is None:  # applied entries are in the log: never, unless it is broken
            raise StorageError(f"cannot compact to {index}: its term is not in the log")
        del self.entries[:index - self.snap_index]
        self.snap_index, self.snap_term = index, term
        self.unstable_from = max(self.unstable_from, index + 1)

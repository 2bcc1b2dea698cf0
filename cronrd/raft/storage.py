"""The contract between the Raft core and a node's durable log storage.

The core (``core.Raft``) hands the runtime a ``Ready``; the runtime persists
it before it sends or applies anything of it. Every storage of the Raft log
keeps the rules below: the node's real storage
(``cronrd.runtime.log.raft_storage.RaftStorage``), the core's in-memory log
(``log.RaftLog``, which keeps the write rules) and the simulated disk of the
Raft simulation (``tests/support/raft_sim.py``). The functions here are the
rules' one statement; each storage calls them and raises its own error with
its own context, and ``tests/unit/raft/test_storage.py`` runs one set of
cases against every storage.

Writes
------
1. A write of entries carries ascending, contiguous indexes.
2. Its first entry lies after the stored snapshot (``first > snapshot
   index``): entries a snapshot covers are gone for good.
3. Its first entry is at most one past the last stored entry (``first <=
   last + 1``): a log never has a hole. Stored entries from ``first`` on are
   replaced (the conflict truncation of AppendEntries).
4. A snapshot older than the stored one is refused.
5. Storing a snapshot at ``(i, t)`` drops every entry up to ``i``; the
   entries after ``i`` are kept only when the stored entry at ``i`` has term
   ``t`` (log matching then makes them consistent with it), otherwise all of
   them go, so a restart cannot bring back a suffix that diverged.

A write that breaks a rule is refused and changes nothing: the storage
raises, the node stops. It is never applied in part.

Order and crashes
-----------------
A Ready is written in this order: its snapshot, then its entries, then its
hard state. A crash in the middle keeps a prefix of that order and nothing
after the cut: never entries without the snapshot written before them (the
entries of a Ready that installs a snapshot continue the snapshot, not the
log the snapshot replaced), never a hard state without all the entries of the
same write (a vote or a commit index must not get ahead of the log it was
given with). The real storage writes the snapshot in one transaction and the
entries with the hard state in a second one, so its crash outcomes are
"nothing", "the snapshot" and "all of it"; a write-ahead log that keeps
single records may also keep a prefix of the entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from .types import Entry


def append_refusal(entries: Sequence[Entry], snap_index: int, last_index: int) -> str | None:
    """Why a storage holding a snapshot at ``snap_index`` and entries up to
    ``last_index`` must refuse to write ``entries`` (rules 1 to 3), or None
    when the write is allowed."""
    if not entries:
        return None
    first = entries[0].index
    if first <= snap_index:
        return (f"entry {first} is covered by the snapshot at {snap_index} "
                "(entries up to a snapshot's index are never written again)")
    if first > last_index + 1:
        return (f"entry {first} leaves a hole after {last_index} "
                f"(the next entry must be at most {last_index + 1})")
    for k, e in enumerate(entries):
        if e.index != first + k:
            return (f"entries are not contiguous: {entries[k - 1].index} is followed "
                    f"by {e.index}")
    return None


def snapshot_refusal(index: int, stored_index: int) -> str | None:
    """Why a storage holding a snapshot at ``stored_index`` must refuse one
    at ``index`` (rule 4), or None."""
    if index < stored_index:
        return f"the snapshot at {index} is older than the stored snapshot at {stored_index}"
    return None


def keeps_suffix(stored_term_at_index: int | None, snapshot_term: int) -> bool:
    """Rule 5: are the stored entries after a new snapshot's index kept? Only
    when the stored entry at that index (None: there is none) has the
    snapshot's term."""
    return stored_term_at_index is not None and stored_term_at_index == snapshot_term

"""Backfill and rerun decisions, as functions of plain values (pure).

A backfill walks the fire times of one job between two instants (from the
job's own trigger: its schedule, zone and DST rule) and decides for each,
from the job's existing record of that fire time, what to do:

* no record: ``create`` a record of kind ``backfill`` (attempt 1);
* a record whose last attempt is still active: ``skip: running``;
* a record whose last attempt succeeded: ``skip: already succeeded``, unless
  ``reprocess`` is ``all``;
* a record whose last attempt was skipped (never started): ``reprocess`` for
  every mode (it never ran: it is as good as missing);
* a record that failed (failed, timed_out, lost, cancelled): ``reprocess``
  under ``failed`` and ``all``, ``skip: already ran (failed)`` under
  ``missing``.

A reprocess is the record's next attempt (``attempt N``), never a second
record. The same function decides the dry run, the plan stored when the
backfill is created, and again when each fire time is released (the record
may have changed since).

Fire times before the job existed are created like any other: filling in
the history of a new job is what a backfill is for (the dry run marks them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, TypeVar

T = TypeVar("T")

REPROCESS = ("missing", "failed", "all")
ORDERS = ("oldest", "newest")
STATES = ("running", "paused", "done", "cancelled")
OPEN = ("running", "paused")        # a backfill that still releases (or will)
MAX_FIRES = 10_000                  # fire times one backfill takes without --force
HARD_MAX_FIRES = 1_000_000          # and with it (a command in the log has a bound)
DRY_RUN_LINES = 50                  # a dry run shows the first and the last this many

_ACTIVE = frozenset({"pending", "assigned", "running"})
_FAILED = frozenset({"failed", "timed_out", "lost", "cancelled"})


@dataclass(frozen=True)
class Record:
    """The last attempt of a job's record of one fire time."""
    attempt: int
    state: str


@dataclass(frozen=True)
class Decision:
    action: str            # create | reprocess | skip
    attempt: int = 1       # the attempt a create or reprocess makes
    reason: str = ""       # why a skip (or what a reprocess replaces)

    def line(self) -> str:
        """The dry run's word for it."""
        if self.action == "create":
            return "create" + (f" ({self.reason})" if self.reason else "")
        if self.action == "reprocess":
            return f"reprocess (attempt {self.attempt}; was {self.reason})"
        return f"skip: {self.reason}"


def decide(record: Record | None, reprocess: str, *, before_job: bool = False) -> Decision:
    """What a backfill does with one fire time, given its record."""
    if record is None:
        return Decision("create", 1, "before the job existed" if before_job else "")
    if record.state in _ACTIVE:
        return Decision("skip", reason="running" if record.state == "running"
                        else f"running ({record.state})")
    nxt = record.attempt + 1
    if record.state == "skipped":
        return Decision("reprocess", nxt, "skipped")
    if record.state == "succeeded":
        if reprocess == "all":
            return Decision("reprocess", nxt, "succeeded")
        return Decision("skip", reason="already succeeded")
    if record.state in _FAILED and reprocess in ("failed", "all"):
        return Decision("reprocess", nxt, record.state)
    return Decision("skip", reason=f"already ran ({record.state}); --reprocess failed "
                                   "runs it again")


def ordered(fire_times: Iterable[int], order: str) -> list[int]:
    return sorted(set(fire_times), reverse=order == "newest")


NOT_DUE = Decision("skip", reason="not due yet: the scheduler runs it")


def plan(fire_times: Iterable[int], records: Mapping[int, Record], reprocess: str,
         order: str, job_created_at: float | None = None,
         cursor: int | None = None) -> list[tuple[int, Decision]]:
    """Every fire time, in the order the backfill releases them, with its
    decision. A fire time after the job's ``cursor`` (the last one the
    scheduler handled) is the scheduler's, not the backfill's."""
    return [(t, NOT_DUE if cursor is not None and t > cursor else
             decide(records.get(t), reprocess,
                    before_job=job_created_at is not None and t < job_created_at))
            for t in ordered(fire_times, order)]


def too_many(count: int, force: bool) -> str | None:
    """Why a backfill of ``count`` fire times is refused, or None (apply's
    check of a command's fire times, which it has all of)."""
    if count > HARD_MAX_FIRES:
        return (f"{count} fire times is more than one backfill can take "
                f"({HARD_MAX_FIRES}); split the range into several backfills")
    if count > MAX_FIRES and not force:
        return (f"{count} fire times is more than {MAX_FIRES}; check the range with "
                "--dry-run, then pass --force to backfill them all")
    return None


def fire_limit(force: bool) -> int:
    """The most fire times one request may take: a request generates at
    most one more than this, and is refused as soon as it has (count first,
    then plan)."""
    return HARD_MAX_FIRES if force else MAX_FIRES


def over_limit(force: bool) -> str:
    """Why a request whose range holds more than :func:`fire_limit` fire
    times is refused (it stopped counting there: "more than")."""
    if force:
        return (f"more than {HARD_MAX_FIRES} fire times, more than one backfill can "
                "take; split the range into several backfills")
    return (f"more than {MAX_FIRES} fire times; narrow the range (check it with "
            f"--dry-run), or an admin passes --force to take up to {HARD_MAX_FIRES}")


def counts(lines: Iterable[tuple[int, Decision]]) -> dict[str, int]:
    """How many fire times each action gets (create, reprocess, skip)."""
    out = {"create": 0, "reprocess": 0, "skip": 0}
    for _t, d in lines:
        out[d.action] = out.get(d.action, 0) + 1
    return out


def excerpt(lines: Sequence[T], n: int = DRY_RUN_LINES) -> tuple[list[T], int]:
    """The first and last ``n`` of ``lines`` (all of them when there are at
    most 2n), and how many were left out between the two."""
    if len(lines) <= 2 * n:
        return list(lines), 0
    return list(lines[:n]) + list(lines[-n:]), len(lines) - 2 * n


def limit(parallel: int, concurrency: str) -> int:
    """How many runs of a backfill may be in flight at once: ``parallel``
    for a job whose runs may overlap (``concurrency: allow``), one for any
    other policy (its runs queue, one after another, never skipped)."""
    return max(1, parallel) if concurrency == "allow" else 1


def slots(parallel: int, concurrency: str, in_flight: int, others_active: int) -> int:
    """How many more fire times a backfill may release now. It yields to the
    job's other runs (on-time, manual, reruns): none while one is active;
    under any policy but ``allow`` none while any run of the job is active
    (its own included): its runs queue."""
    if others_active:
        return 0
    if concurrency != "allow" and in_flight:
        return 0
    return max(0, limit(parallel, concurrency) - in_flight)


def nearest(fire_times_before: Iterable[int], fire_times_after: Iterable[int], t: int,
            n: int = 2) -> list[int]:
    """The fire times closest to ``t`` (for an error that names them)."""
    both = sorted(set(fire_times_before) | set(fire_times_after), key=lambda f: (abs(f - t), f))
    return sorted(both[:n])

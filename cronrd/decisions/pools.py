"""Pools and priorities as decisions: which runs take a pool's slots now,
which wait, and in what order they are released (pure: the state's numbers
in, the decision out; state/pools.py reads and writes the rows).

A pool has ``slots``; a run of a job in it takes ``pool_slots`` of them
while it is pending, assigned or running. A run that would exceed them, or
that has waiting runs ahead of it, waits (state ``waiting``, with the
reason). When slots free, the waiting runs are released in order: on-time
runs before backfill runs, then by priority (higher first), then by fire
time, then by run id; the first that does not fit stops the release (it is
not overtaken by smaller runs behind it, so it cannot starve).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiter:
    run_id: int
    slots: int
    priority: int
    fire_time: int
    late: bool = False      # a backfill run: after every on-time run

    def key(self) -> tuple[bool, int, int, int]:
        return order_key(self.late, self.priority, self.fire_time, self.run_id)


def order_key(late: bool, priority: int, fire_time: int, run_id: int) -> tuple[bool, int, int, int]:
    """The release order: on-time first, higher priority, earlier fire time."""
    return (bool(late), -priority, fire_time, run_id)


def admit(slots: int, in_use: int, need: int, ahead: int) -> bool:
    """May a run needing ``need`` slots take them now (``ahead``: waiting
    runs that come before it)?"""
    return ahead == 0 and in_use + need <= slots


def fits_ever(w: Waiter, slots: int) -> bool:
    """Could ``w`` ever take its slots in a pool of ``slots``? One that could
    not waits (its reason says why) but is nobody's run ahead: it would
    hold up the whole pool for good."""
    return w.slots <= slots


def release(free: int, waiters: list[Waiter], slots: int | None = None) -> list[int]:
    """The run ids to release now, in order, with ``free`` slots (of the
    pool's ``slots``: a run needing more is passed over)."""
    out = []
    for w in sorted(waiters, key=Waiter.key):
        if slots is not None and not fits_ever(w, slots):
            continue
        if w.slots > free:
            break
        out.append(w.run_id)
        free -= w.slots
    return out


def release_by_node(free: dict[str, int], spare: int, slots: int,
                    waiters: list[tuple[Waiter, str]]) -> list[int]:
    """A node-scoped pool: the run ids to release now. ``free``: each known
    node's free slots; ``spare``: their sum less what runs released already
    and not placed yet will take; each waiter with its ``target`` node (a
    ``run_on: all`` run; "" for any node). A run pinned to a full node is
    passed over (it cannot start there yet), not waited behind."""
    free = dict(free)
    out = []
    for w, target in sorted(waiters, key=lambda wt: wt[0].key()):
        if not fits_ever(w, slots):
            continue
        if w.slots > spare:
            break
        if target:
            if free.get(target, slots) < w.slots:
                continue
            free[target] = free.get(target, slots) - w.slots
        else:
            roomy = max(sorted(free), key=lambda n: free[n], default=None)
            if roomy is not None:
                free[roomy] -= w.slots
        out.append(w.run_id)
        spare -= w.slots
    return out


def reason(pool: str, in_use: int, slots: int, *, node: str | None = None,
           ahead: int = 0, defined: bool = True, need: int = 1) -> str:
    """Why a run waits: ``pool db: 2/2 slots in use`` (and where, and how
    many wait ahead of it)."""
    if defined and need > slots:
        return (f"pool {pool}: a run takes {need} slots (pool_slots) and the pool has "
                f"{slots}; lower pool_slots or raise the pool's slots in the daemon config")
    if not defined:
        return (f"pool {pool}: not defined in the leader's daemon config; add it under "
                "pools: there (the run waits until it is)")
    where = f" on node {node}" if node else ""
    text = f"pool {pool}: {in_use}/{slots} slots in use{where}"
    if ahead:
        text += f", {ahead} run{'s' if ahead != 1 else ''} ahead"
    return text

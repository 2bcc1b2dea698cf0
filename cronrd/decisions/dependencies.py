"""The dependency gate of a child job, as a pure rule.

A *generation* of a child is one set of its parents' outcomes: the child
takes, of each parent, the newest final outcome (the last attempt of a
fire time, no retry following) committed after the one it consumed last.
Parents that ran several times meanwhile count once (the newest), so
parents at different rates never trigger a child more than once per
generation (Airflow's asset rule, not metronome's).

A parent with ``within`` is also satisfied by a success that ended at most
that long ago, new or not (slowly changing reference data).

What a parent's outcome counts as:

* ``succeeded`` -- success;
* ``failed``, ``timed_out``, ``lost``, ``cancelled`` -- failure;
* ``skipped`` -- skipped (never ran: paused, catch-up, its own upstream).

The rules, once every parent has a new outcome (or a fresh success):

* ``all_succeeded``: every parent succeeded -> run; any failed ->
  ``upstream_failed``; else some skipped -> skipped (``upstream_skipped``).
* ``none_failed``: no parent failed -> run (skipped parents count as not
  failed, even all of them); any failed -> ``upstream_failed``.
* ``all_finished``: run, whatever the outcomes.
* ``any_succeeded``: runs as soon as one parent has a new success, without
  waiting for the others; if all finish without one: any failed ->
  ``upstream_failed``, else skipped.
* ``any_failed``: runs as soon as one parent has a new failure; if all
  finish without one: skipped (``upstream_not_failed``).

Nothing here reads a clock or the state: the caller gathers the parents'
outcomes (``Parent``) and acts on the ``Gate``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule import iso_utc

SUCCESS, FAILURE, SKIPPED = "success", "failure", "skipped"
_CLASS = {"succeeded": SUCCESS, "failed": FAILURE, "timed_out": FAILURE, "lost": FAILURE,
          "cancelled": FAILURE, "skipped": SKIPPED}

FIRE, WAIT, SKIP, UPSTREAM_FAILED = "fire", "wait", "skip", "upstream_failed"


def outcome_class(state: str) -> str:
    """success, failure or skipped, for a final run state."""
    return _CLASS[state]


@dataclass(frozen=True)
class Outcome:
    """One final outcome of a parent: its run (the last attempt of a fire time)."""
    run_id: int
    fire_time: int
    state: str


@dataclass(frozen=True)
class Parent:
    job: str
    new: Outcome | None = None     # its newest final outcome since the child consumed one
    fresh: Outcome | None = None   # a success within its ``within`` window, if it has one


@dataclass(frozen=True)
class Gate:
    action: str                                  # fire | wait | skip | upstream_failed
    reason: str = ""                             # why (upstream_not_ready:JOB, ...)
    consume: tuple[tuple[str, Outcome], ...] = ()  # (parent, outcome) the child consumes
    lineage: tuple[tuple[str, Outcome], ...] = ()  # (parent, outcome) a run records

    @property
    def fire_time(self) -> int | None:
        """The newest fire time among the outcomes the generation uses."""
        return max((o.fire_time for _p, o in self.lineage), default=None)


_WORST_FIRST = {FAILURE: 0, SKIPPED: 1, SUCCESS: 2}


def worst(outcomes: list[Outcome]) -> Outcome:
    """The outcome of a fire time run on every node (``run_on: all``): the
    worst of its per-node runs' -- a failure if any, else a skip if any,
    else a success (the first such run, by run id)."""
    return min(outcomes, key=lambda o: (_WORST_FIRST[outcome_class(o.state)], o.run_id))


def _at(job: str, o: Outcome) -> str:
    return f"{job}@{iso_utc(o.fire_time)}"


def decide(rule: str, parents: list[Parent], *, need_new: bool = True) -> Gate:
    """The gate for one evaluation. ``need_new``: at least one parent must
    have a new outcome (an ``@after`` child; a scheduled child's own fire
    time is its trigger, so fresh ``within`` successes alone open it)."""
    seen: list[tuple[str, Outcome, str]] = []  # (parent, outcome used, its class)
    pending: list[str] = []
    for p in parents:
        if p.fresh is not None:
            seen.append((p.job, p.fresh, SUCCESS))
        elif p.new is not None:
            seen.append((p.job, p.new, outcome_class(p.new.state)))
        else:
            pending.append(p.job)
    consume = tuple((p.job, p.new) for p in parents if p.new is not None)
    lineage = tuple((job, o) for job, o, _c in seen)

    def gate(action: str, reason: str = "") -> Gate:
        return Gate(action, reason, consume, lineage)

    if need_new and not consume:
        return Gate(WAIT, "upstream_not_ready:" + (pending[0] if pending else
                                                   parents[0].job if parents else ""))
    failed = [(j, o) for j, o, c in seen if c == FAILURE]
    skipped = [(j, o) for j, o, c in seen if c == SKIPPED]
    succeeded = [(j, o) for j, o, c in seen if c == SUCCESS]
    if rule == "any_succeeded" and succeeded:
        return gate(FIRE)
    if rule == "any_failed" and failed:
        return gate(FIRE)
    if pending:
        return Gate(WAIT, f"upstream_not_ready:{pending[0]}")
    if rule == "all_finished":
        return gate(FIRE)
    if rule == "any_failed":
        return gate(SKIP, "upstream_not_failed: no parent failed (trigger_rule any_failed)")
    if failed:
        return gate(UPSTREAM_FAILED, "upstream_failed:" + _at(*failed[0]))
    if rule == "none_failed":
        return gate(FIRE)
    if rule == "all_succeeded" and skipped:
        return gate(SKIP, "upstream_skipped:" + _at(*skipped[0]))
    if rule == "any_succeeded":  # none succeeded, none failed: all skipped
        return gate(SKIP, "upstream_skipped:" + _at(*skipped[0]))
    return gate(FIRE)

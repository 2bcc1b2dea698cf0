"""The overlap policy (a job's ``concurrency``), in one place.

Decided for a run about to start, against the runs of the same job that are
running then: the executor asks at the fire time (at the gate), and the state
machine asks when a manual run is committed. Pure: the caller says what is
running and acts on the answer.

``queue`` is decided by the state machine alone, when a run is committed
(``hold``) and when the run ahead of a queue ends (``release``): a queued
run waits (state ``waiting``) while the job has a run pending, assigned,
running or waiting ahead of it, and the oldest waiting run is released in
the same command that ends the last one. No timer on one node decides it,
so no leader change or restart starts a queued run twice or two at once.
"""

from __future__ import annotations

from dataclasses import dataclass

# defined with the job field that takes it (jobspec/fields.py)
from ..jobspec.fields import CONCURRENCY_POLICIES as POLICIES  # noqa: F401
from ..schedule import human_duration, iso_utc

DEFAULT_MAX_QUEUED = 100    # waiting runs per job (and target) when max_queued is not set


@dataclass(frozen=True)
class Running:
    run_id: int
    node: str | None = None   # None: on this node


@dataclass(frozen=True)
class Decision:
    skip: str | None = None                 # why the new run does not start
    replace: tuple[Running, ...] = ()       # runs to cancel first
    reason: str = ""                        # the reason recorded on them
    wait: str | None = None                 # why the new run waits (queue)


def _ids(running: list[Running]) -> str:
    return ", ".join(str(r.run_id) if r.node is None else f"{r.run_id} on {r.node}"
                     for r in running)


def decide(policy: str, running: list[Running], run_id: int | None = None,
           manual: bool = False) -> Decision:
    """``forbid``: the new run is skipped while another runs (a manual run
    too, when it is committed; once committed it is not skipped again at its
    gate: ``manual``). ``replace``: the running ones are cancelled for it.
    ``allow``: nothing to do. ``queue``: nothing to do here either: the
    state machine holds a queued run until the runs ahead of it ended
    (``hold``), so what still runs at its gate was started under another
    policy before the job changed to queue; the run is not dropped."""
    if not running:
        return Decision()
    if policy == "forbid":
        if manual:
            return Decision()
        return Decision(skip=f"overlap: run {_ids(running)} still running at the fire time "
                             "(concurrency: forbid)")
    if policy == "replace":
        by = f"run {run_id}" if run_id is not None else "a newer fire"
        return Decision(replace=tuple(running),
                        reason=f"replaced by {by} (concurrency: replace)")
    return Decision()


# -- concurrency: queue (decided in apply) ------------------------------------------


@dataclass(frozen=True)
class Ahead:
    """The run a new run of a queued job would wait for: the last one
    waiting, or (none waiting) the newest pending, assigned or running."""
    run_id: int
    state: str                 # pending | assigned | running | waiting
    at: float | None = None    # started (running), due (pending, assigned), fire time (waiting)


def waiting_reason(ahead: Ahead) -> str:
    """What a waiting run waits for, as `cronrd runs` shows it."""
    when = iso_utc(ahead.at) if ahead.at is not None else "?"
    what = {"running": f"started {when}", "waiting": f"waiting too, fire time {when}"
            }.get(ahead.state, f"{ahead.state}, due {when}")
    return f"waiting for run {ahead.run_id} ({what}) to end: concurrency: queue"


def hold(ahead: Ahead | None, waiting: int, max_queued: int) -> Decision:
    """A run of a ``concurrency: queue`` job, as it is committed: it starts
    (nothing ahead), waits behind ``ahead`` (``wait``: the reason), or is
    skipped when ``waiting`` runs already fill the queue (``max_queued``)."""
    if ahead is None:
        return Decision()
    if waiting >= max_queued:
        return Decision(skip=f"queue full: {waiting} runs already waiting (max_queued "
                             f"{max_queued}, concurrency: queue)")
    return Decision(wait=waiting_reason(ahead))


@dataclass(frozen=True)
class Queued:
    run_id: int
    due: float                 # when it was due (its fire time, with any jitter)


@dataclass(frozen=True)
class Release:
    skip: tuple[tuple[int, str], ...] = ()   # (run id, reason): never started
    go: int | None = None                    # released: placed now, started when placed


def release(queued: list[Queued], now: float, window: float | None,
            stop: str | None = None) -> Release:
    """The queue of a job (oldest fire time first) when none of its runs is
    pending, assigned or running any more (``now``: the time of the command
    that ended the last one). The first goes; before it, the ones that
    waited longer than the job's ``catchup_window`` past their due time are
    skipped (as a fire missed that long ago is). While the job may not start
    runs (``stop``: paused, disabled: why) every one is skipped with it."""
    if stop is not None:
        return Release(skip=tuple((q.run_id, f"{stop} (it was waiting in the queue)")
                                  for q in queued))
    skip = []
    for q in queued:
        if window is not None and now - q.due > window:
            skip.append((q.run_id, f"waited in the queue longer than catchup_window "
                                   f"{human_duration(window)} (due {iso_utc(q.due)}, "
                                   "concurrency: queue)"))
            continue
        return Release(skip=tuple(skip), go=q.run_id)
    return Release(skip=tuple(skip))

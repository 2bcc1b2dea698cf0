"""The workflow variables a run gets in its environment (pure): which run
of which fire time it is, for commands that must be idempotent or that
process a time window.

* ``CRONRD_IDEMPOTENCY_KEY``: ``job/fire time`` (ISO UTC), the same for
  every attempt of a fire time (retries, a run moved after its node was
  lost); changed only by an explicit rerun or backfill reprocess
  (``job/fire time/rerun-N``, N the attempt it made, kept by its retries);
  ``job/key:KEY`` for `run-now --key KEY`.
* ``CRONRD_ORIGIN``: what made the run (``schedule``, ``manual``...).
* ``CRONRD_PREV_FIRE_TIME``: the schedule's fire time before this one
  (empty for a manual run, ``@reboot``, or a schedule with none before).
* ``CRONRD_INTERVAL_START`` / ``CRONRD_INTERVAL_END``: the data interval,
  previous fire time .. this fire time; for a manual run the interval of
  the schedule's last fire at or before the run's time (empty when the
  schedule has none).
* ``CRONRD_PARAM_<NAME>``: each of the job's ``params:``, the run's value
  or the default.

Everything is a function of the run record, its parameters, key and rerun
(from the replicated state) and the job's definition (its schedule and
zone): every node computes the same values for the same attempt.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import ScheduleError
from ..jobspec import JobSpec
from ..jobspec.params import run_env as param_env
from ..schedule import Trigger, iso_utc, make_trigger, parse_schedule, prev_before
from ..model.run import Run


@lru_cache(maxsize=1024)

def idempotency_key(job: str, fire_time: int, key: str | None,
                    rerun: int | None = None) -> str:
    """``CRONRD_IDEMPOTENCY_KEY``: ``job/fire time`` (ISO UTC), the same for
    every attempt of a fire time; ``job/fire time/rerun-N`` from an explicit
    rerun or backfill reprocess on (N: the attempt it made; its retries keep
    it); ``job/key:KEY`` for a run made with a key."""
    if key:
        return f"{job}/key:{key}"
    base = f"{job}/{iso_utc(fire_time)}"
    return f"{base}/rerun-{rerun}" if rerun else base

def _trigger(schedule: str, tz: str) -> Trigger | None:
    try:
        return make_trigger(parse_schedule(schedule), tz)
    except ScheduleError:
        return None   # not a time schedule


@lru_cache(maxsize=4096)
def _interval(schedule: str, tz: str, scheduled: bool, fire_time: int
              ) -> tuple[int | None, int | None, int | None]:
    """(previous fire time, interval start, interval end) of a run of a
    fire time (``scheduled``: any origin but manual, so a backfilled fire
    time too) or a manual one at ``fire_time``. Remembered: the many
    jobs of one schedule that fire at the same second ask alike."""
    trigger = _trigger(schedule, tz)
    if trigger is None:
        return None, None, None
    if scheduled:
        prev = prev_before(trigger, fire_time)
        return prev, prev, fire_time if prev is not None else None
    last = prev_before(trigger, fire_time + 1)   # at or before the run's time
    if last is None:
        return None, None, None
    start = prev_before(trigger, last)
    return None, start, last if start is not None else None


def run_env(run: Run, spec: JobSpec, default_tz: str, params: dict[str, str],
            key: str | None, rerun: int | None = None) -> dict[str, str]:
    """The CRONRD_* variables of workflows for ``run`` of ``spec``
    (``params``, ``key``, ``rerun``: state/run_params.py ``inputs``)."""
    prev, start, end = _interval(spec.schedule, spec.timezone or default_tz,
                                 run.origin != "manual", run.fire_time)
    env = {
        "CRONRD_IDEMPOTENCY_KEY": idempotency_key(run.job, run.fire_time, key, rerun),
        "CRONRD_ORIGIN": run.origin,
        "CRONRD_PREV_FIRE_TIME": iso_utc(prev) or "",
        "CRONRD_INTERVAL_START": iso_utc(start) or "",
        "CRONRD_INTERVAL_END": iso_utc(end) or "",
    }
    env.update(param_env(spec.params, params))
    return env

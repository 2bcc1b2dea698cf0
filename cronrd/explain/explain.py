"""`cronrd explain JOB [--at T | --next]`: why a job did (not) run at one
fire time, past or future, from the replicated state alone.

Like control/reads.py it takes a connection and plain values, so the daemon answers
it on its connection and the CLI from the state database with the daemon
down (offline.py). ``explain`` resolves the time asked, gathers a
``Subject`` (the job, its schedule, the records and gaps of that fire
time, the nodes) and runs the step providers of ``STEPS`` over it, in
order; each returns the lines of its step. The verdict comes last, from
the records (a fire time handled) or from the first step that says it
would keep the fire from running (one not handled yet).

Extension points: a provider is ``(Subject) -> list[Step]``. Dependency
gates and pools go in ``STEPS`` between "overlap" and "placement" (a
scheduled child's gate at T: the reason its record stores,
``upstream_not_ready:JOB`` or ``upstream_failed:JOB@T``, and for a future T
whether each parent has a qualifying run now, ``blocks`` set if not); a
backfill that made or reprocessed the record names itself in the record
lines (kind ``backfill``) or in a provider of its own after "record".

An ``@after`` child has no fire times of its own: a record's fire time is
the newest fire time among the parent runs its generation consumed. ``--at
T`` explains the generation(s) recorded at T (steps "parent" and "gate":
the lineage, each outcome, the trigger rule's verdict) or names the nearest
record fire times; without ``--at`` its latest generation (and a "next"
line); ``--next`` (or no generation yet) its gate now (``gate_now``: each
parent's outcome not consumed yet, a fresh ``within`` success, what it
waits for), read from the state and decided by decisions/dependencies.py
without changing anything; ``at`` is then None.
"""

from __future__ import annotations

from typing import Callable


from ..errors import CronrdError, RequestError, UsageError
from ..ops.admin import Explain
from ..schedule import (iso_utc, parse_schedule, resolve_timezone)
from ..state import node_drains
from ..state import queries as Q
from ..state import trail
from ..decisions.placement import NodeView
from .capacity_steps import overlap_step, placement_step, pool_step
from .record_steps import alerts_step, record_step
from ..state.calendars import job_trigger
from .schedule_steps import calendar_step, catchup_step, job_step, pause_step, schedule_step
from .subject import Step, Subject, prev_fire, resolve_time
from .verdict import verdict
from .workflow_steps import downstream_step, upstream_step


STEPS: list[Callable[[Subject], list[Step]]] = [
    job_step, schedule_step, calendar_step, pause_step, catchup_step, overlap_step, upstream_step,
    pool_step, placement_step, record_step, downstream_step, alerts_step,
]


def nodes_from_state(conn) -> list[NodeView]:
    """The members as last announced in the replicated state (with the
    daemon down: no health of its own to add)."""
    drains = node_drains.drained(conn)
    views = []
    for n in Q.nodes(conn):
        state = "drained" if n["node"] in drains and n["state"] == "up" else n["state"]
        views.append(NodeView(n["node"], n["state"] == "up", state, frozenset(n["tags"]),
                              "" if state == "up" else state))
    return views

OFFLINE_NODES = "as last announced; the daemon is not running"

FOLLOWER_NODES = ("as last announced; this node is not the leader, which alone sees who "
                  "answers: `cronrd explain` on the leader for that")


def explain(conn, req: Explain, *, now: float, default_tz: str,
            nodes: list[NodeView] | None = None, nodes_note: str = "",
            steps: list[Callable[[Subject], list[Step]]] | None = None) -> dict:
    """The decision trail of job ``req.job`` at ``req.at`` (ISO 8601, UTC
    unless it has an offset, or Unix seconds; with ``req.local`` the wall
    clock of the job's zone), at its next fire time (``req.next``) or, with
    neither, at its latest fire time up to ``now``. ``nodes``: the members
    for placement (None: not known); ``nodes_note``: how their health is
    known ("": live, on the leader)."""
    name = req.job
    if not name:
        raise UsageError("explain needs a job name")
    found = Q.jobs(conn, name=name)
    job = found[0] if found else None
    if job is None and not Q.job_has_runs(conn, name):
        raise RequestError(f"no job named {name!r}; `cronrd jobs` lists the known jobs")
    spec = job["spec"] if job else None
    tz = (spec.timezone if spec is not None else None) or default_tz
    zone = resolve_timezone(tz)
    schedule = trigger = None
    if spec is not None:
        try:
            schedule = parse_schedule(spec.schedule)
            trigger = job_trigger(conn, spec, schedule, zone) \
                if schedule.kind not in ("reboot", "after") else None
        except CronrdError:
            schedule = trigger = None
    after = schedule is not None and schedule.kind == "after"
    at, want_next = req.at, req.next
    if at is not None and want_next:
        raise UsageError("give --at T or --next, not both")
    times = trail.job_times(conn, name)
    note = None
    gate_now = latest = False
    if at is not None:
        t, note = resolve_time(at, req.local, zone)
    elif after:
        # an @after child: its latest generation, or (--next, or none yet) its gate now
        got = None if want_next else trail.latest_fire_time(conn, name)
        gate_now, latest = got is None, got is not None
        t = int(now) if got is None else got
    elif trigger is not None:
        start = max(int(now), times["cursor"] if times else 0) if want_next else int(now) + 1
        got = trigger.next_after(start) if want_next else prev_fire(trigger, start)
        if got is None:
            raise RequestError(f"job {name!r} has no {'next' if want_next else 'past'} fire "
                               "time; give one with --at T")
        t = got
    else:
        last = Q.list_runs(conn, name, None, 1, kind=None)
        if want_next or not last:
            raise RequestError(f"job {name!r} has no schedule to look at (@reboot, or not "
                               "defined any more); give a time with --at T")
        t = last[0].fire_time
    subject = Subject(conn=conn, name=name, t=t, now=now, tz=tz, zone=zone, spec=spec, job=job,
                      times=times, schedule=schedule, trigger=trigger,
                      records=trail.records_at(conn, name, t),
                      gaps=trail.gaps_covering(conn, name, t),
                      nodes=nodes, nodes_note=nodes_note, time_note=note, gate_now=gate_now,
                      latest=latest)
    if gate_now:
        subject.records, subject.gaps = [], []
    out: list[Step] = []
    for provider in (STEPS if steps is None else steps):
        out.extend(provider(subject))
    # an @after child's next generation has no time yet: "at" is None
    return {"job": name, "at": None if gate_now else iso_utc(t),
            "local": None if gate_now else subject.local(t), "timezone": tz,
            "future": subject.future, "now": iso_utc(round(now)),
            "steps": [st.view() for st in out], "verdict": verdict(subject, out)}

__all__ = ["explain", "Step", "Subject", "STEPS", "verdict", "prev_fire", "resolve_time",
           "nodes_from_state"]

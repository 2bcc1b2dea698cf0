"""The checks, per (job, fire time), over what the cluster recorded and what
the jobs themselves wrote.

Inputs are plain data: the run records (`runs` on the control socket, after
heal and convergence), the execution lines every job appended to its node's
file ("job fire_time attempt node true_wall_time run_id", the time read by
``date`` without faketime), each job's schedule, the fault windows, and the
window of fire times to judge (the first and last few seconds left out).

Failures: a (job, fire, attempt) with more than one record; an expected fire
time (croniter's schedule) with no record; an attempt executed more than
once; an execution with no record; a start more than ``max_clock_offset`` +
``slack`` before its fire time on the true clock; a job with
``on_node_loss: fail`` executed more than once for one fire time; a run
still pending/assigned/running after the heal. Reported, not failures:
fire times executed by two attempts (at-least-once after a node was declared
lost), fire times never executed, lateness (first execution of any attempt
minus the fire time; p50/p99/max), overall and per fault kind.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from croniter import croniter

ACTIVE = ("pending", "assigned", "running")
FIRE_KINDS = ("scheduled", "catchup", "retry")   # records that belong to a fire time


def epoch(iso: str) -> float:
    """'2026-01-02T03:04:05Z' (or with a fraction/offset) -> epoch seconds."""
    text = iso[:-1] + "+00:00" if iso.endswith("Z") else iso
    return datetime.fromisoformat(text).timestamp()


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def expected_fires(schedule: str, first: int, last: int) -> list[int]:
    """Fire times of a six-field (seconds first) or five-field expression in
    [first, last], by croniter, in UTC."""
    six = len(schedule.split()) == 6
    it = croniter(schedule, first - 1, second_at_beginning=six)
    out = []
    while True:
        t = int(it.get_next(float))
        if t > last:
            return out
        out.append(t)


@dataclass
class Execution:
    job: str
    fire: int
    attempt: int
    node: str
    wall: float
    run_id: str

    @classmethod
    def parse(cls, line: str) -> "Execution | None":
        parts = line.split()
        if len(parts) != 6:
            return None
        try:
            return cls(parts[0], int(epoch(parts[1])), int(parts[2]), parts[3], float(parts[4]),
                       parts[5])
        except ValueError:
            return None


@dataclass
class Report:
    fires_expected: int = 0
    records: int = 0
    executions: int = 0
    dup_records: list = field(default_factory=list)      # (job, fire, attempt, n)
    missed: list = field(default_factory=list)           # (job, fire)
    dup_exec: list = field(default_factory=list)         # (job, fire, attempt, nodes)
    unrecorded: list = field(default_factory=list)       # executions without a record
    early: list = field(default_factory=list)            # (job, fire, attempt, node, s early)
    at_most_once: list = field(default_factory=list)     # (job, fire, attempts)
    stuck: list = field(default_factory=list)            # records still active
    retried: list = field(default_factory=list)          # (job, fire, attempts) reported
    unexecuted: list = field(default_factory=list)       # (job, fire, final states)
    lateness: dict = field(default_factory=dict)         # (job, fire) -> s
    by_kind: dict = field(default_factory=dict)          # fault kind -> [lateness s]
    too_late: list = field(default_factory=list)         # (job, fire, s) over the bound
    digests_equal: bool | None = None
    notes: list = field(default_factory=list)

    FAILURES = ("dup_records", "missed", "dup_exec", "unrecorded", "early", "at_most_once",
                "stuck", "too_late")

    def failures(self) -> dict[str, int]:
        out = {name: len(getattr(self, name)) for name in self.FAILURES}
        out["digests"] = 0 if self.digests_equal else 1
        return {k: v for k, v in out.items() if v}

    def lateness_stats(self, kind: str | None = None) -> dict:
        vals = list(self.lateness.values()) if kind is None else self.by_kind.get(kind, [])
        return {"fires": len(vals), "p50": percentile(vals, 50), "p99": percentile(vals, 99),
                "max": max(vals) if vals else None}


def check(runs: list[dict], executions: list[Execution], jobs: dict[str, dict],
          first: int, last: int, faults: list[dict] | None = None,
          max_offset: float = 0.5, slack: float = 0.05, settle: float = 5.0,
          stuck: list[dict] | None = None, max_lateness: float | None = None) -> Report:
    """``jobs``: name -> {"schedule": ..., "on_node_loss": ...}; ``faults``:
    [{"kind", "t0", "t1"}] in epoch seconds (a fire in [t0, t1 + settle] is
    counted for that kind); ``stuck``: the records still active after the
    heal (judged by the caller after its deadline); ``max_lateness``: a
    first execution later than this many seconds is a failure (None: only
    reported)."""
    rep = Report()
    in_window = [r for r in runs if r["job"] in jobs and r["kind"] in FIRE_KINDS
                 and first <= epoch(r["fire_time"]) <= last]
    rep.records = len(in_window)
    per_attempt = Counter((r["job"], int(epoch(r["fire_time"])), r["attempt"]) for r in in_window)
    rep.dup_records = sorted((j, t, a, n) for (j, t, a), n in per_attempt.items() if n > 1)
    recorded_fires = {(j, t) for j, t, _ in per_attempt}
    states = defaultdict(list)
    for r in in_window:
        states[(r["job"], int(epoch(r["fire_time"])))].append(f"a{r['attempt']}:{r['state']}")

    expected = {(name, t) for name, spec in jobs.items()
                for t in expected_fires(spec["schedule"], first, last)}
    rep.fires_expected = len(expected)
    rep.missed = sorted(expected - recorded_fires)
    unexpected = sorted(recorded_fires - expected)
    if unexpected:
        rep.notes.append(f"{len(unexpected)} fire time(s) recorded that croniter does not "
                         f"expect, e.g. {unexpected[:3]}")

    execs = [e for e in executions if e.job in jobs and first <= e.fire <= last]
    rep.executions = len(execs)
    by_attempt: dict[tuple, list[Execution]] = defaultdict(list)
    by_fire: dict[tuple, list[Execution]] = defaultdict(list)
    for e in execs:
        by_attempt[(e.job, e.fire, e.attempt)].append(e)
        by_fire[(e.job, e.fire)].append(e)
    rep.dup_exec = sorted((j, t, a, [e.node for e in es]) for (j, t, a), es in by_attempt.items()
                          if len(es) > 1)
    rep.unrecorded = sorted((j, t, a) for (j, t, a) in by_attempt if (j, t, a) not in per_attempt)
    for e in execs:
        ahead = e.fire - e.wall
        if ahead > max_offset + slack:
            rep.early.append((e.job, e.fire, e.attempt, e.node, round(ahead, 3)))
    for key, es in sorted(by_fire.items()):
        attempts = sorted({e.attempt for e in es})
        if len(attempts) > 1:
            rep.retried.append((*key, attempts))
            if jobs[key[0]].get("on_node_loss") == "fail":
                rep.at_most_once.append((*key, attempts))
        rep.lateness[key] = min(e.wall for e in es) - key[1]
    rep.unexecuted = sorted((j, t, sorted(states[(j, t)])) for (j, t) in expected & recorded_fires
                            if (j, t) not in by_fire)
    rep.stuck = [r for r in (stuck or []) if r["job"] in jobs
                 and epoch(r["fire_time"]) <= last and r["state"] in ACTIVE]

    if max_lateness is not None:
        rep.too_late = sorted((j, t, round(late, 3)) for (j, t), late in rep.lateness.items()
                              if late > max_lateness)
    faults = faults or []
    for (job, t), late in rep.lateness.items():
        # The fault that started last before this fire time, while it held or
        # within ``settle`` s after its heal.
        during = [f for f in faults if f["t0"] <= t <= f["t1"] + settle]
        kind = max(during, key=lambda f: f["t0"])["kind"] if during else "(no fault)"
        rep.by_kind.setdefault(kind, []).append(late)
    return rep

"""The leader's scheduler: turns job schedules into committed fires.

It keeps one heap entry per active job (its next fire time) and sleeps until
the earliest one is due; it never polls every job. Each fire is proposed a
little ahead of its time (``LEAD``) so the assignment is committed before the
fire time and the executor starts the process on its own timer: precision is
bounded by the local timer and fork, not by the commit.

The replicated per-job cursor (last fire handled) is the scheduler's only
memory: on start (or on becoming leader) it resumes from the cursors and
applies each job's catch-up policy to the gap, so nothing fires twice and
nothing is dropped without a record.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import sys
from typing import Callable

from ...config import Config
from ...jobspec import JobSpec
from ...schedule import Trigger, jitter_for, make_trigger, parse_schedule, plan_catchup
from ...schedule.calendars import Calendar, CalendarRule, CalendarTrigger
from ...state import commands as C
from ...state import queries as Q
from ...state import calendars as CAL
from ...state.effects import CalendarsChanged, Effect, JobsChanged
from ...errors import NotLeader, Refused
from ..clock import Clock
from ...decisions.placement import NodeView, fits, no_executor
from ..cluster.members import local_node
from .placement import Placement

log = logging.getLogger("cronrd.scheduler")

LEAD = 0.7             # seconds a fire is committed ahead (< executor PRESPAWN; off the
                       # whole second, so spawning never competes with the gates opening)
MAX_SLEEP = 5.0        # re-read the wall clock at least this often (clock steps)
HOLD_CHECK = 0.05      # seconds between looks at a held clock (hold())
JUMP = 5.0             # a fire this far behind the clock is caught up, not fired
RETRY_DELAY = 0.5      # seconds before a fire that failed to commit is proposed again
MAX_SKIP_RECORDS = 100  # beyond this many missed fires, one gap record sums them up
RECENT_CURSOR = 60.0   # seconds: a new leader completes a run_on: all fire this recent
MAX_TRIGGERS = 4096    # distinct (schedule, time zone) triggers kept (~1.5 KB each)
START_PAGE = 250       # jobs (re)loaded per turn of the event loop at start (the
                       # first pages build the triggers: ~0.3 ms a job on a busy host)
MAX_REMEMBERED = 65536  # next fire times remembered by (trigger, second)


def reboot_fires(conn, node: NodeView, boot_time: int, now: float) -> list[C.Fire]:
    """The @reboot fires of one node's boot (each node proposes its own)."""
    fires = []
    for name, schedule, *_ in Q.reboot_rows(conn):
        if not schedule.strip().lower().startswith("@reboot"):
            continue
        spec = Q.job_spec(conn, name)
        if spec is None or parse_schedule(spec.schedule).kind != "reboot":
            continue
        skip = None if fits(spec.run_on, node, spec.executor_type) else no_executor(
            spec.executor_type) if fits(spec.run_on, node) else (
            f"no eligible node: {node.id} does not match run_on ({spec.run_on.mode}: "
            f"{', '.join(spec.run_on.values)})")
        fires.append(C.Fire(job=name, fire_time=boot_time, kind="scheduled", node=node.id,
                            due_at=now, at=now, boot=True, skip_reason=skip,
                            target=node.id))  # one per node and boot
    return fires


class Entry:
    """What the scheduler keeps of one job between its fires: a shared
    trigger, flags and times (no definition: it is read when a fire is
    proposed). A few hundred bytes, so 100,000 idle jobs cost tens of MB."""

    __slots__ = ("trigger", "enabled", "paused", "cursor", "next_fire", "seq",
                 "last_proposed")

    def __init__(self, trigger: Trigger, enabled: bool, paused: bool, cursor: int):
        self.trigger = trigger
        self.enabled = enabled
        self.paused = paused
        self.cursor = cursor
        self.next_fire: int | None = None
        self.seq = 0
        self.last_proposed = 0   # the newest fire time proposed (maybe not committed yet)

    @property
    def active(self) -> bool:
        return self.enabled and not self.paused


class Triggers:
    """Triggers shared by every job with the same schedule and time zone
    (a fleet's jobs use a few thousand distinct schedules, not one each),
    at most MAX_TRIGGERS kept; and the next fire time after a given second,
    remembered for that second (every new job asks for the same one)."""

    def __init__(self, default_tz: str, calendars: Callable[[], dict[str, Calendar]]
                 = lambda: {}):
        """``calendars()``: the calendars in force (state/calendars.py)."""
        self.default_tz = default_tz
        self._read_calendars = calendars
        self._calendars: dict[str, Calendar] | None = None
        self._cache: dict[tuple[str, str, str | None], Trigger] = {}
        self._next: dict[tuple[int, int], int | None] = {}

    def forget_calendars(self) -> None:
        """The calendars changed: triggers with a calendar are made again."""
        for key in [k for k in self._cache if k[2] is not None]:
            del self._cache[key]
        self._next.clear()
        self._calendars = None

    def calendars(self) -> dict[str, Calendar]:
        if self._calendars is None:
            self._calendars = self._read_calendars()
        return self._calendars

    def get(self, schedule: str, timezone: str | None, calendar: str | None = None) -> Trigger:
        """``calendar``: the job's calendar rule as JSON (None: none)."""
        key = (schedule, timezone or self.default_tz, calendar)
        trigger = self._cache.pop(key, None)
        if trigger is None:
            trigger = make_trigger(parse_schedule(schedule), key[1])
            if calendar is not None:
                trigger = CalendarTrigger(trigger, CalendarRule.from_dict(json.loads(calendar)),
                                          self.calendars())
            if len(self._cache) >= MAX_TRIGGERS:
                del self._cache[next(iter(self._cache))]  # the least recently used
        self._cache[key] = trigger
        return trigger

    def next_after(self, trigger: Trigger, t: int) -> int | None:
        key = (id(trigger), t)
        try:
            return self._next[key]
        except KeyError:
            pass
        if len(self._next) >= MAX_REMEMBERED:
            self._next.clear()
        if len(self._cache) >= MAX_TRIGGERS - 1:
            self._next.clear()  # ids of evicted triggers may be reused
        got = self._next[key] = trigger.next_after(t)
        return got


class Scheduler:
    def __init__(self, config: Config, proposer, conn, clock: Clock,
                 placement: Placement | None = None,
                 hold: Callable[[], str | None] = lambda: None):
        """``hold()``: why this node's clock may not schedule now (stepped,
        or off the cluster's), or None: no fire is committed meanwhile."""
        self.config = config
        self.hold = hold
        self._held = False
        self.node_id = config.node_id
        self.placement = placement or Placement(conn, lambda: [local_node(config)])
        self.proposer = proposer
        self.conn = conn
        self.clock = clock
        self.entries: dict[str, Entry] = {}
        self.heap: list[tuple[int, int, str]] = []
        self.triggers = Triggers(config.timezone, lambda: CAL.in_force(conn))
        self._seq = 0
        self._wake: asyncio.Future | None = None
        self.stopped = False
        self._deposed = False    # a proposal failed NotLeader (logged once)
        self.started = False
        self.pending: set[asyncio.Future] = set()

    # -- reading jobs from the state ------------------------------------------------
    def _entry(self, row) -> Entry:
        _name, schedule, timezone, enabled, paused, cursor, calendar = row
        return Entry(self.triggers.get(schedule, timezone, calendar), bool(enabled),
                     bool(paused), cursor)

    def _load(self, name: str) -> Entry | None:
        for row in Q.schedule_rows(self.conn, name):
            return self._entry(row)
        return None

    def _spec(self, name: str) -> JobSpec:
        spec = Q.job_spec(self.conn, name)
        if spec is None:
            raise KeyError(name)
        return spec

    def _push(self, name: str, entry: Entry, fire: int | None) -> None:
        self._seq += 1
        entry.seq = self._seq
        entry.next_fire = fire
        if fire is not None:
            heapq.heappush(self.heap, (fire, entry.seq, sys.intern(name)))

    def soonest(self, count: int, allowed=lambda name: True,
                visits: int = 50_000) -> list[tuple[int, str]]:
        """The ``count`` soonest (fire time, job) of the active jobs that
        ``allowed`` lets through, in order, read off the heap without copying
        it: a walk from its root, smallest first (O(k log k) for 100,000 jobs,
        not a sort of them). At most ``visits`` heap slots are looked at."""
        out: list[tuple[int, str]] = []
        frontier = [(self.heap[0], 0)] if self.heap else []
        while frontier and len(out) < count and visits > 0:
            visits -= 1
            (fire, seq, name), i = heapq.heappop(frontier)
            entry = self.entries.get(name)
            if entry is not None and entry.seq == seq and entry.active and allowed(name):
                out.append((fire, name))
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(self.heap):
                    heapq.heappush(frontier, (self.heap[child], child))
        return out

    def next_fire(self, name: str) -> int | None:
        entry = self.entries.get(name)
        return entry.next_fire if entry and entry.active else None

    # -- start / catch-up --------------------------------------------------------------
    def start(self) -> None:
        """Resume every job from its replicated cursor (catch-up included).

        Job changes seen before ``start`` (the first reload of the job files)
        are not acted on one by one: ``start`` reads the resulting state, so
        a job edited while the daemon was down still gets its catch-up. A new
        leader calls it too: it resumes where the old leader stopped.
        """
        for _ in self._start():
            pass

    async def start_async(self) -> None:
        """``start`` a page of START_PAGE jobs per turn of the event loop: a
        new leader of 100,000 jobs goes on answering its peers meanwhile (a
        loop blocked for seconds costs it the leadership)."""
        for _ in self._start():
            await asyncio.sleep(0)

    def _start(self):
        self.started = True
        self.placement.begin()
        self.heap.clear()
        self.entries.clear()
        # Before any catch-up: a catch-up fire moves the cursor past the fire
        # time to complete, which would then be refused.
        self._complete_last_fires()
        after = None
        while True:
            rows = list(Q.schedule_rows(self.conn, after=after, limit=START_PAGE))
            for row in rows:
                self._refresh(row[0], row, startup=True)
            if len(rows) < START_PAGE:
                break
            after = rows[-1][0]
            yield
        self.wake()

    def _complete_last_fires(self) -> None:
        """``run_on: all`` makes one Fire per node: a leader that died between
        them left the cursor at that fire time with some nodes' runs missing.
        A new leader proposes the cursor's fire again; the ones that exist are
        refused by the run key. Only for a recent cursor (records of an old
        one may have been pruned, and it must not run again), and only for a
        cursor that some node's fire record stands at: a new job's cursor is
        its creation time, and a gap record moves the cursor without any run,
        neither of which is a fire to complete."""
        now = self.clock.now()
        # (whether a fire is recorded first: 100,000 new jobs all have a
        # recent cursor, and reading each definition held a new leader for
        # a third of a second)
        for (name,) in list(self.conn.execute(
                "SELECT jobs.name FROM jobs JOIN specs USING(name, digest) WHERE cursor > ? "
                "AND cursor < ? AND EXISTS (SELECT 1 FROM runs WHERE runs.job = jobs.name "
                "AND origin = 'schedule' AND fire_time = jobs.cursor) "
                "AND json_extract(spec, '$.run_on.mode') = 'all' "
                "ORDER BY jobs.name", (now - RECENT_CURSOR, now))):
            try:
                entry = self._load(name)
                spec = self._spec(name)
            except Exception:
                continue  # refresh() reports it
            if entry is None or spec.run_on.mode != "all" or not entry.active \
                    or entry.trigger.schedule.kind in ("reboot", "after") \
                    or not Q.fire_recorded(self.conn, name, int(entry.cursor)):
                continue
            self._fire(name, entry, int(entry.cursor))

    def refresh(self, name: str, startup: bool = False) -> None:
        """(Re)build a job's heap entry from the replicated state.

        Paused and disabled jobs stay scheduled: ``apply`` records each of
        their fire times as skipped with the reason, so "why did it not run
        at T?" has an answer at T, not only after a resume.
        """
        row = next(iter(Q.schedule_rows(self.conn, name)), None)
        self._refresh(name, row, startup)
        self.wake()

    def _refresh(self, name: str, row, startup: bool = False) -> None:
        old = self.entries.get(name)
        try:
            entry = None if row is None else self._entry(row)
        except Exception as exc:  # a spec this version cannot use (newer node, bug)
            log.error("event=job_unschedulable job=%s error=\"%s\" hint=\"run the same "
                      "cronrd version on every node\"", name, exc)
            entry = None
        if entry is None:
            self.entries.pop(name, None)
            return
        name = sys.intern(name)
        if old is not None:
            entry.last_proposed = old.last_proposed
        self.entries[name] = entry
        if entry.trigger.schedule.kind in ("reboot", "after"):
            self._push(name, entry, None)
            return
        now = int(self.clock.now())
        cursor = max(entry.cursor, entry.last_proposed)
        if startup:
            first = self.triggers.next_after(entry.trigger, cursor)
            if first is not None and first <= now:
                cursor = max(cursor, self._catch_up(name, entry, now))
        # A changed schedule starts from now: fire times of the new schedule
        # that lie before the change never existed, so they are not missed.
        self._push(name, entry, self.triggers.next_after(entry.trigger, max(cursor, now)))

    def _catch_up(self, name: str, entry: Entry, now: int) -> int:
        spec = self._spec(name)
        plan = plan_catchup(entry.trigger, entry.cursor, now, spec.catchup,
                            spec.catchup_window, max_records=MAX_SKIP_RECORDS)
        at = self.clock.now()
        if plan.skipped_range is not None:
            first, last, count, reason = plan.skipped_range
            self._propose(C.RecordGap(job=name, first=first, last=last, count=count,
                                      reason=reason, at=at))
        for fire, reason in plan.skipped:
            self._propose(C.Fire(job=name, fire_time=fire, kind="catchup", node=self.node_id,
                                 due_at=at, at=at, skip_reason=reason))
        for fire in plan.run:
            # More than a second overdue: it runs because of the catch-up policy.
            late = fire + 1 <= self.clock.now()
            self._fire(name, entry, fire, kind="catchup" if late else "scheduled")
        log.info("event=catch_up job=%s policy=%s run=%d skipped=%d gap=%s", name,
                 spec.catchup, len(plan.run), len(plan.skipped),
                 plan.skipped_range[2] if plan.skipped_range else 0)
        return plan.cursor

    # -- effects ------------------------------------------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        if not self.started:
            return  # start() reads the whole state once
        names = list(dict.fromkeys(eff.job for eff in effects
                                   if isinstance(eff, JobsChanged) and eff.job is not None))
        if any(isinstance(eff, CalendarsChanged) for eff in effects):
            self.triggers.forget_calendars()
            names = list(dict.fromkeys(names + Q.calendar_jobs(self.conn)))
        if not names:
            return
        # One query for the batch (a batch may change thousands of jobs: a
        # query each held the leader's loop for a second).
        rows = {row[0]: row for row in Q.schedule_rows_of(self.conn, names)}
        for name in names:
            self._refresh(name, rows.get(name))
        self.wake()

    # -- firing ---------------------------------------------------------------------------
    def _fire(self, name: str, entry: Entry, fire: int, kind: str = "scheduled") -> None:
        try:
            spec = self._spec(name)
        except Exception as exc:
            log.error("event=job_unschedulable job=%s error=\"%s\"", name, exc)
            return
        entry.last_proposed = max(entry.last_proposed, fire)
        due = fire + jitter_for(name, fire, spec.jitter)
        at = self.clock.now()
        skip = entry.trigger.skip_reason(fire) if isinstance(entry.trigger, CalendarTrigger) \
            else None
        if skip is not None or spec.watch is not None:
            # a day its calendar excludes (recorded skipped, saying why), or a
            # watch's fire time (no node runs it: it waits for a ping)
            self._propose(C.Fire(job=name, fire_time=fire, kind=kind, node=self.node_id,
                                 due_at=due, at=at, skip_reason=skip))
            return
        # (the nodes that run it first: a node's skip is final at once, and a
        # run_on: all fire time's outcome is final when its nodes' records all
        # are, state/dependencies.py -- not before the runs are recorded)
        for choice in sorted(self.placement.choose(spec, fire),
                             key=lambda c: c.skip is not None):
            self._propose(C.Fire(job=name, fire_time=fire, kind=kind,
                                 node=choice.node or self.node_id, due_at=due, at=at,
                                 skip_reason=choice.skip, target=choice.target))

    def _propose(self, cmd: C.Command) -> None:
        log.debug("event=propose %s", cmd)
        fut = self.proposer.propose(cmd)
        self.pending.add(fut)
        fut.add_done_callback(lambda f: self._proposed(f, cmd))

    def _proposed(self, fut: asyncio.Future, cmd: C.Command) -> None:
        self.pending.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if isinstance(exc, Refused):
            log.debug("event=fire_refused reason=\"%s\"", exc)
        elif exc is not None and not self.stopped:
            # Not committed (storage trouble, no leader): the fire time is
            # neither run nor recorded yet. A job's fires must commit in order
            # (the cursor refuses an older one after a newer), so the job is
            # rescheduled from its earliest failed fire; other commands are
            # proposed again as they were.
            if isinstance(exc, NotLeader):
                # Leadership moved (a hand-over, an election): this
                # scheduler is about to stop and the new leader's takes its
                # fire times from the replicated cursors. Said once, not
                # as an error per fire time.
                if not self._deposed:
                    self._deposed = True
                    log.info("event=leadership_lost node=%s leader=%s hint=\"the new leader "
                             "schedules from here\"", self.node_id, exc.leader or "-")
                log.debug("event=propose_failed error=\"%s\" retry_s=%g", exc, RETRY_DELAY)
            else:
                log.error("event=propose_failed error=\"%s\" retry_s=%g", exc, RETRY_DELAY)
            entry = self.entries.get(cmd.job) if isinstance(cmd, C.Fire) else None
            if entry is not None and isinstance(cmd, C.Fire) and not cmd.boot:  # (entry: a Fire's)
                if entry.next_fire is None or cmd.fire_time < entry.next_fire:
                    entry.last_proposed = min(entry.last_proposed, cmd.fire_time - 1)
                    self._push(cmd.job, entry, cmd.fire_time)
                    asyncio.get_running_loop().call_later(RETRY_DELAY, self.wake)
            else:
                asyncio.get_running_loop().call_later(RETRY_DELAY, self._repropose, cmd)

    def _repropose(self, cmd: C.Command) -> None:
        if not self.stopped:
            self._propose(cmd)

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopped:
            held = self.hold()
            if held is not None:
                if not self._held:
                    log.warning("event=scheduling_held node=%s reason=\"its clock %s\"",
                                self.node_id, held)
                self._held = True
                await asyncio.sleep(HOLD_CHECK)
                continue
            if self._held:
                log.info("event=scheduling_resumed node=%s", self.node_id)
                self._held = False
            now = self.clock.now()
            while self.heap and self.heap[0][0] - LEAD <= now:
                fire, seq, name = heapq.heappop(self.heap)
                entry = self.entries.get(name)
                if entry is None or entry.seq != seq:
                    continue  # superseded by a refresh
                if fire < now - JUMP:
                    # Far behind: the wall clock jumped or the host was
                    # suspended. The missed fires follow the catch-up policy,
                    # as after a restart, rather than all starting at once.
                    log.warning("event=clock_jump job=%s behind_s=%.1f", name, now - fire)
                    entry.cursor = max(entry.cursor, fire - 1)
                    cursor = self._catch_up(name, entry, int(now))
                    self._push(name, entry, entry.trigger.next_after(max(cursor, int(now))))
                    continue
                self._fire(name, entry, fire)
                self._push(name, entry, entry.trigger.next_after(fire))
            self.placement.begin()
            delay = MAX_SLEEP
            if self.heap:
                delay = min(delay, max(0.0, self.heap[0][0] - LEAD - self.clock.now()))
            self._wake = loop.create_future()
            handle = loop.call_later(delay, self.wake)
            try:
                await self._wake
            finally:
                handle.cancel()

    def stop(self) -> None:
        self.stopped = True
        self.wake()

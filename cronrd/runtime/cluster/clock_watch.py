"""How far each member's wall clock is from the cluster's (decisions/clocks.py).

A follower asks the leader for its wall clock every ``PROBE_EVERY`` seconds
(the peer request ``clock``), telling it its own latest offset in the same
request; the leader answers with its wall clock and the members' median
clock (as an offset from its own). So every node knows its offset from the
members' median, and the leader knows everyone's.

A step of this node's own wall clock (settimeofday, a VM resumed, an NTP
step) counts at once: every offset is kept with this node's wall clock
minus its monotonic clock (``_base``) when it was measured, and corrected
by how much that has moved since. A clock that jumps 30 s ahead is fenced
the moment it jumps, not at the next measurement.

A sample whose round trip overlapped a stall of this node's own event loop
(``loop_watch.py``) is dropped, and so is one whose round trip is longer
than ``max_clock_offset`` (its error, half of it, would swamp the bound): a
stalled node or a stalled leader is a stall, not a bad clock, and neither
fences anybody.

What is shown: ``status`` (this node), ``cluster members`` (every member, on
the leader; this node elsewhere), and the log, once when a node's offset
goes beyond ``cluster.max_clock_offset`` (``event=clock_off``) and once when
it is back (``event=clock_ok``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Awaitable, Callable, Mapping

from ...decisions import clocks as K
from ..clock import Clock
from ..tasks import Changes

log = logging.getLogger("cronrd.cluster")

PROBE_EVERY = 1.0      # seconds between a follower's questions to the leader
FIRST_PROBE_EVERY = 0.1  # ... while it has no measurement yet
PROBE_TIMEOUT = 2.0
MAX_ABS_OFFSET = 1e7   # seconds; a report beyond this is nonsense and refused
# Seconds a node's last offset from the median stands in for a new one. A
# clock that is not stepped (a step is caught at once: _base) drifts by parts
# per million, a few milliseconds a minute; 5 s held a new leader back as soon
# as the old one was paused and the only other member's clock was 30 s off
# (no majority of clocks to make a median with): fire times 12 s late.
CARRY = 60.0
DISK_FRESH = 5.0       # s a member's word on its disk stands (it tells every second)
MIN_MAX_RTT = 0.2      # s: a sample with a longer round trip (and max_clock_offset) is dropped
JUMP_MARGIN = 0.05     # s: a sample further than its error (and this) from the estimate: a jump


def _number(value, what: str, limit: float = MAX_ABS_OFFSET) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or abs(value) > limit:
        raise ValueError(f"{what} must be a finite number of seconds within +-{limit:g}")
    return float(value)


class ClockWatch:
    def __init__(self, node_id: str, clock: Clock, limit: float,
                 leader: Callable[[], str | None], is_leader: Callable[[], bool],
                 members: Callable[[], list[str]],
                 call: Callable[[str, str, dict, float], Awaitable[dict]],
                 hold: Callable[[bool], None] = lambda held: None,
                 hand_over: Callable[[list[str]], Awaitable[str]] | None = None,
                 stalled: Callable[[float, float], bool] | None = None,
                 disk: Callable[[], float | None] | None = None):
        self.node_id = node_id
        self.clock = clock
        self.limit = limit
        self._leader = leader
        self._is_leader = is_leader
        self._members = members
        self._call = call
        # hold(True): this node must not campaign (its clock is off);
        # hand_over(good): a leader whose clock is off hands leadership to
        # one of these voters (their clocks are within bounds).
        self._hold = hold
        self._hand_over = hand_over
        # stalled(t0, t1): did this node's own event loop stall between those
        # monotonic times (loop_watch.py)? A round trip across a stall
        # measures the stall, not the clocks.
        self._stalled = stalled or (lambda t0, t1: False)
        # disk(): this node's typical log write (s) when its disk is slow,
        # else None (decisions/disk.py); told to the leader with each
        # question, which keeps the members' in ``disks``.
        self._disk = disk or (lambda: None)
        self.disks: dict[str, tuple[float | None, float]] = {}  # node -> (slow write, at)
        self.held = False
        self.changes = Changes()   # notified when a measurement or a report came
        self.samples: list[K.Sample] = []   # against _sampled_leader only
        self._sampled_leader: str | None = None
        self._sample_base: float | None = None  # _base() when the samples were taken
        self._leader_base: float | None = None  # the leader's _base() then (its answer)
        # This node's offset from the median, when last known from fresh
        # data, when (monotonic) and _base() then: it carries over a leader change.
        self._last: tuple[float, float, float] | None = None
        # The members' median clock minus the leader's, as last told (None:
        # not known yet, fewer than a majority have reported).
        self.median: float | None = None
        # On the leader: each member's reported offset from the leader's clock
        # (s), its error, when it came (monotonic) and this leader's _base()
        # when the member measured it (it says, from the leader's answers).
        self.reports: dict[str, tuple[float, float, float, float]] = {}
        self._logged_off: dict[str, bool] = {}
        self._fence_said: str | None = None   # fence()'s last answer (logged when it changes)
        self._poked = False   # ask the leader now (poke), not at the next PROBE_EVERY

    def forget(self, node: str) -> None:
        """(Leader) ``node``'s process ended (its connection closed): what
        was measured of its clock may not hold for the process that comes
        back (a restart under another clock: placed on at once, a node 30 s
        slow held the next second's runs). It is measured again before
        placement uses it (decisions/clocks.placement_bar)."""
        if self.reports.pop(node, None) is not None:
            log.info("event=clock_forgotten node=%s reason=\"its connection closed: measured "
                     "again before it gets runs\"", node)
            self.changes.notify()

    # -- views ------------------------------------------------------------------------------
    def _base(self) -> float:
        """This node's wall clock minus its monotonic clock: it moves only
        when the wall clock is stepped (or slewed, a few ppm)."""
        return self.clock.now() - self.clock.monotonic()

    def _ahead_of_leader(self) -> dict[str, float]:
        """(Leader) every member's offset from this leader's clock, fresh ones
        only, corrected for any step of this leader's clock since."""
        now, base = self.clock.monotonic(), self._base()
        members = set(self._members())
        out = {self.node_id: 0.0}
        for node, (offset, _err, at, then) in self.reports.items():
            if node in members and now - at <= K.WINDOW:
                out[node] = offset - (base - then)
        return out

    def vs_leader(self) -> dict[str, float]:
        """(Leader) every member's clock minus this leader's (s), fresh only."""
        return self._ahead_of_leader() if self._is_leader() else {}

    def _median(self) -> float | None:
        """(Leader) the cluster's clock minus this leader's: the median of
        the largest group of agreeing clocks, once that group is more than
        half the members (decisions/clocks.reference). A cluster of one or
        two has only the leader's clock to go by."""
        members = set(self._members()) | {self.node_id}
        if len(members) <= 2:
            return 0.0
        return K.reference(self._ahead_of_leader(), self.limit, len(members))

    def own(self) -> dict:
        """This node's offset from the cluster's median clock (s; None until
        known), from the leader's, and the error of the estimate."""
        now = self.clock.monotonic()
        if self._is_leader():
            median = self._median()
            if median is not None:
                self._last = (-median, now, self._base())
                return {"offset": -median, "vs_leader": 0.0, "error": 0.0}
            return {"offset": None, "vs_leader": 0.0, "error": None}
        est = K.estimate(self.samples, now) if self._sampled_leader == self._leader() else None
        if est is None:
            return {"offset": None, "vs_leader": None, "error": None}
        # Samples are taken on one _base (probe voids them when it moves).
        vs_leader = est.offset
        if self._sample_base is not None:
            vs_leader += self._base() - self._sample_base
        if self.median is None:
            return {"offset": None, "vs_leader": vs_leader, "error": est.error}
        self._last = (vs_leader - self.median, now, self._base())
        return {"offset": vs_leader - self.median, "vs_leader": vs_leader, "error": est.error}

    def carried(self) -> float | None:
        """This node's last offset from the median, if known within CARRY
        seconds: it stands in while a new leader has no answer or no median
        yet (a clock does not move when the leader changes)."""
        if self._last is None or self.clock.monotonic() - self._last[1] > CARRY:
            return None
        return self._last[0] + (self._base() - self._last[2])

    def members(self) -> Mapping[str, float | None]:
        """Offsets from the median clock: every member's on the leader, this
        node's elsewhere."""
        if self._is_leader():
            # The cluster's clock from this leader's: fresh, or, with no
            # majority of agreeing clocks now (a member down, and this
            # leader's clock stepped away from the other's), as last known,
            # moved by this leader's own step since (``offset``). That tells
            # which of the two clocks moved: a leader that stepped 5 s with
            # one of three members down held scheduling for 4 s, until the
            # third came back, where it could have handed over at once.
            mine = self.offset()
            return {} if mine is None else K.from_median(self._ahead_of_leader(), -mine)
        return {self.node_id: self.offset()}

    def offset(self) -> float | None:
        """This node's offset from the cluster's clock as best known: fresh,
        else carried over a leader change (``carried``)."""
        fresh = self.own()["offset"]
        return fresh if fresh is not None else self.carried()

    def is_off(self) -> bool:
        """Is this node's clock beyond max_clock_offset from the cluster's?"""
        return K.off(self.offset(), self.limit)

    def fence(self) -> str | None:
        """Why this node's clock keeps it from starting runs now, or None.

        A node goes by its offset from the cluster's clock (``offset``: fresh,
        or carried over a leader change); a follower without one by its
        offset from the leader's; with no measurement at all (the moment
        after it found its leader, or a leader whose followers have not
        reported) it waits for one: a clock 30 s fast would otherwise start
        runs 30 s early."""
        why = self._fence()
        if why != self._fence_said:
            self._fence_said = why
            if log.isEnabledFor(logging.DEBUG):
                log.debug("event=clock_fence node=%s reason=\"%s\" reports=\"%s\" base=%.3f",
                          self.node_id, why or "-", self._reports_text(), self._base())
        return why

    def _reports_text(self) -> str:
        if not self._is_leader():
            return ""
        return " ".join(f"{n}:{v * 1000:.0f}ms" for n, v in sorted(self._ahead_of_leader().items()))

    def _fence(self) -> str | None:
        offset = self.offset()
        if offset is None and not self._is_leader():
            offset = self.own()["vs_leader"]
        if offset is None:
            if not self._leader():
                return None
            if self._is_leader():
                return ("has not measured its clock against the cluster's yet (just elected, "
                        "or the clocks known disagree)")
            return "has not measured its clock against the leader's yet"
        if K.off(offset, self.limit):
            return (f"has its clock {K.relative(offset)} the cluster's, beyond "
                    f"cluster.max_clock_offset ({self.limit * 1000:g}ms): check its time sync")
        return None

    # -- the leader's side: the peer request ------------------------------------------------
    async def rpc(self, frm: str, args: dict) -> dict:
        if not self._is_leader():
            raise ValueError("only the leader answers; ask the leader")
        offset = _number(args.get("offset"), "offset")
        error = _number(args.get("error"), "error") or 0.0
        # Measured against this leader's clock as it was then: a report
        # measured before a step of this leader's clock is corrected by it.
        base = _number(args.get("base"), "base", limit=1e11)
        if offset is not None:
            then = self._base() if base is None else base
            self.reports[frm] = (offset, error, self.clock.monotonic(), then)
            self.changes.notify()
            log.debug("event=clock_report node=%s offset_ms=%.1f error_ms=%.1f step_ms=%.1f",
                      frm, offset * 1000, error * 1000, (self._base() - then) * 1000)
        if "disk" in args:   # an older member does not tell
            slow = _number(args.get("disk"), "disk", limit=3600.0)
            if slow is not None and slow < 0:
                raise ValueError("disk must be a write time in seconds, 0 or more")
            self.disks[frm] = (slow, self.clock.monotonic())
        return {"wall": self.clock.now(), "median": self._median(), "base": self._base()}

    def poke(self) -> None:
        """Ask the leader within FIRST_PROBE_EVERY rather than at the next
        PROBE_EVERY (what this node tells it changed: its disk)."""
        self._poked = True

    def slow_disks(self) -> dict[str, float]:
        """(Leader) the members whose disks are slow, as they told it lately
        (this leader's own included): node -> typical log write (s)."""
        now = self.clock.monotonic()
        out = {n: v for n, (v, at) in self.disks.items()
               if v is not None and now - at <= DISK_FRESH}
        mine = self._disk()
        if mine is not None:
            out[self.node_id] = mine
        return out

    # -- the follower's side -----------------------------------------------------------------
    async def probe(self) -> None:
        """One question to the leader (a follower)."""
        leader = self._leader()
        if not leader or leader == self.node_id:
            return
        if leader != self._sampled_leader:
            # Samples measure against one leader's clock: start afresh (the
            # last offset from the median carries over meanwhile: carried()).
            self.samples, self._sampled_leader, self.median = [], leader, None
            self._leader_base = None
        mine = K.estimate(self.samples, self.clock.monotonic())
        sent, t0 = self.clock.now(), self.clock.monotonic()
        reply = await self._call(leader, "clock",
                                 {"offset": mine.offset if mine else None,
                                  "error": mine.error if mine else None,
                                  "base": self._leader_base if mine else None,
                                  "disk": self._disk()}, PROBE_TIMEOUT)
        t1 = self.clock.monotonic()
        base = sent - t0
        if self._stalled(t0, t1):
            # This node's loop was held while the answer waited: the round
            # trip measures the stall, and the sample would read it as an
            # offset. Dropped; the next probe measures again.
            log.debug("event=clock_sample_dropped why=loop_stalled rtt_ms=%.0f",
                      (t1 - t0) * 1000)
            return
        if t1 - t0 > max(MIN_MAX_RTT, self.limit):
            # Half the round trip is the sample's error: one this slow (the
            # leader's loop held, a congested link) cannot tell whether the
            # clock is within max_clock_offset.
            log.debug("event=clock_sample_dropped why=slow_answer rtt_ms=%.0f",
                      (t1 - t0) * 1000)
            return
        if self._sample_base is not None and abs(base - self._sample_base) > JUMP_MARGIN:
            self.samples = []   # this node's clock was stepped: its samples are void
        if not isinstance(reply, dict):
            raise ValueError("the leader's clock answer is not an object")
        wall = _number(reply.get("wall"), "wall", limit=1e11)
        median = _number(reply.get("median"), "median")
        leader_base = _number(reply.get("base"), "base", limit=1e11)
        if wall is None:
            raise ValueError("the leader's clock answer has no wall clock")
        sample = K.Sample(sent, t1 - t0, wall, t1)
        if mine is not None and abs(sample.offset - mine.offset) > \
                sample.rtt / 2 + mine.error + JUMP_MARGIN:
            self.samples = []   # a clock jumped (either one): what came before is void
        log.debug("event=clock_sample leader=%s offset_ms=%.1f rtt_ms=%.1f kept=%d median_ms=%s",
                  leader, sample.offset * 1000, sample.rtt * 1000, len(self.samples),
                  "-" if median is None else f"{median * 1000:.1f}")
        self.samples = K.keep(self.samples, sample, t1)
        self._sample_base = base
        self._leader_base = leader_base
        self.median = median
        self.changes.notify()

    def check(self) -> None:
        """Log a clock that went beyond max_clock_offset, or came back
        (this node's; every member's on the leader)."""
        offsets = self.members()
        for node, offset in offsets.items():
            if offset is None:
                continue
            now_off = K.off(offset, self.limit)
            if now_off == self._logged_off.get(node, False):
                continue
            self._logged_off[node] = now_off
            whose = "this node's clock" if node == self.node_id else f"node {node}'s clock"
            if now_off:
                log.warning("event=clock_off node=%s offset_ms=%.0f max_ms=%.0f hint=\"%s is %s "
                            "the cluster's, beyond cluster.max_clock_offset: check its time "
                            "sync (timedatectl, chronyc tracking)\"", node,
                            offset * 1000, self.limit * 1000, whose, K.relative(offset))
            else:
                log.info("event=clock_ok node=%s offset_ms=%.0f", node, offset * 1000)

    async def act(self) -> None:
        """Hold this node from campaigning while its clock is known to be off
        the cluster's median; a leader in that state hands leadership over
        to a voter whose clock is good."""
        offset = self.offset()
        held = K.off(offset, self.limit)
        if held != self.held:
            self.held = held
            self._hold(held)
            if held:
                assert offset is not None  # off() holds a measured offset only
                log.warning("event=clock_hold node=%s hint=\"its clock is %s the cluster's: "
                            "it will not lead until it is back within max_clock_offset\"",
                            self.node_id, K.relative(offset))
        if held and self._is_leader() and self._hand_over is not None:
            good = sorted(n for n, off in self.members().items()
                          if n != self.node_id and off is not None and not K.off(off, self.limit))
            if good:
                assert offset is not None  # off() holds a measured offset only
                to = await self._hand_over(good)
                log.warning("event=clock_step_down node=%s to=%s hint=\"this leader's clock is "
                            "%s the cluster's; leadership handed over\"", self.node_id, to,
                            K.relative(offset))

    async def run(self) -> None:
        """Ask, check, every PROBE_EVERY seconds (every FIRST_PROBE_EVERY
        while this node has no measurement: it starts no run until it has
        one), until cancelled."""
        while True:
            try:
                await self.probe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # no leader, a timeout, a bad answer: the next try
                log.debug("event=clock_probe_failed error=\"%s\"", exc)
            self.check()
            try:
                await self.act()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a hand-over that did not happen: tried next time
                log.warning("event=clock_step_down_failed error=\"%s\"", exc)
            leader = self._leader()
            measured = self._is_leader() or self.own()["vs_leader"] is not None
            pause = PROBE_EVERY if measured else FIRST_PROBE_EVERY
            # A new leader is asked at once: it needs the followers' offsets
            # (in their questions) to know the cluster's clock.
            until = self.clock.monotonic() + pause
            base = self._base()
            # ... and at once after a step of this node's clock: a leader that
            # stepped hands over within FIRST_PROBE_EVERY, not a second later.
            while self.clock.monotonic() < until and self._leader() == leader \
                    and abs(self._base() - base) <= JUMP_MARGIN and not self._poked:
                await asyncio.sleep(FIRST_PROBE_EVERY)
            self._poked = False

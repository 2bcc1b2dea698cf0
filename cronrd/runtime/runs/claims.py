"""A node's claims: "I start these runs now", committed before they start.

In a cluster a node starts a run only once the log holds its claim
(state/run_life.py says why). ``Claims`` gathers the runs to claim in one
loop turn into one ``ClaimRuns`` command (a gate's runs, or several gates':
one commit, not one per run), proposes it until it is decided, and tells
the executor each run's answer.

When to ask: ``lead()`` seconds before the fire time, the median time a
claim has taken to commit lately. Claiming earlier costs nothing on the
healthy path, but a node that dies between its claim's commit and the fire
time leaves a run nobody else may start until node_timeout declares it lost
(it might have started): the lead is that window, so it is kept as short as
the commits allow. A claim not committed by the fire time holds the gate
until it is, up to the gate's READY_WAIT.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections import deque
from typing import Callable, Iterable

from ...errors import CronrdError
from ...state import commands as C
from ...state import run_life as L
from ...errors import Refused
from ..clock import Clock
from .active import ActiveRun

log = logging.getLogger("cronrd.executor")

LEAD_MIN = 0.005      # s: the least lead (a claim on loopback commits in ~1-3 ms)
LEAD_MAX = 0.25       # s: the most (a claim slower than this is late, not early)
LEAD_FIRST = 0.02     # s: before any claim was timed
RETRY = 0.05          # s between tries while there is no leader
TRY_TIMEOUT = 0.5     # s one try may take (a forward to a dead leader)


class Claims:
    def __init__(self, node_id: str, proposer, clock: Clock,
                 step: Callable[[ActiveRun, L.Event], None]):
        """``step(act, event)``: the executor steps the run's life with the
        claim's news (run_life.ClaimAsked, ClaimDecided)."""
        self.node_id = node_id
        self.proposer = proposer
        self.clock = clock
        self.step = step
        self._batch: list[ActiveRun] = []
        self._armed = False
        self._took: deque[float] = deque(maxlen=32)  # recent commit times (s)
        self.tasks: set[asyncio.Task] = set()

    def lead(self) -> float:
        """How long before the fire time to ask: twice the median commit time
        of recent claims and 2 ms, within LEAD_MIN..LEAD_MAX (most claims are
        in before the fire time; the window after is a few milliseconds)."""
        if not self._took:
            return LEAD_FIRST
        return min(LEAD_MAX, max(LEAD_MIN, 2 * statistics.median(self._took) + 0.002))

    def want(self, acts: Iterable[ActiveRun]) -> None:
        """Claim these runs (with this loop turn's others, in one command)."""
        for act in acts:
            if act.life.claim == "none" and not act.life.over and act.life.stop_state is None:
                self.step(act, L.ClaimAsked())
                self._batch.append(act)
        if self._batch and not self._armed:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._armed = False
        batch, self._batch = self._batch, []
        task = asyncio.get_running_loop().create_task(self._claim(batch))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _claim(self, acts: list[ActiveRun]) -> None:
        """Propose the claim of ``acts`` until it is decided, or until none of
        them waits for it any more (its gate gave up, or it was stopped).

        A proposal still unanswered after TRY_TIMEOUT is asked again only if
        the leader changed meanwhile (it went to a leader that died or was
        cut off). While the same leader leads, the claim is slow, not lost:
        asking again would only add a copy of it to a log that is already
        behind (at ~170 runs a second on three nodes sharing two cores,
        copies every 0.5 s turned a slow cluster into one that moved every
        run and started none)."""
        while True:
            acts = self._waiting(acts)
            if not acts:
                return
            cmd = C.ClaimRuns(node=self.node_id, at=self.clock.now(),
                              claims=[[a.run.run_id, a.run.token] for a in acts])
            sent = self.clock.monotonic()
            leader = getattr(self.proposer, "leader", None)
            changes = getattr(self.proposer, "changes", None)   # None: one node, no leader
            task = asyncio.ensure_future(self.proposer.propose(cmd))
            while True:
                # Looked at again when the leader changes, not only after
                # TRY_TIMEOUT: a leader that hands over with its disk stuck
                # answers only once its write ends (a second and more).
                waits = {task}
                woke = None
                if changes is not None:
                    woke = asyncio.ensure_future(changes.wait(TRY_TIMEOUT))
                    waits.add(woke)
                await asyncio.wait(waits, timeout=TRY_TIMEOUT,
                                   return_when=asyncio.FIRST_COMPLETED)
                if woke is not None:
                    woke.cancel()
                done = task.done()
                if done:
                    break
                still = self._waiting(acts)
                now_leader = getattr(self.proposer, "leader", None)
                if not leader:  # sent while there was none: it goes to the first one
                    leader = now_leader
                if not still or now_leader != leader:
                    task.add_done_callback(_consume)  # its answer no longer matters
                    break
            if not done:
                acts = still
                if not acts:
                    return
                log.info("event=claim_retry runs=%d error=\"the leader changed (%s to %s) "
                         "before the claim was answered\"", len(acts), leader or "-",
                         getattr(self.proposer, "leader", None) or "-")
                continue
            try:
                result = task.result()
            except Refused as exc:  # cannot happen (a bug): hand the runs back, unstarted
                log.error("event=claim_refused runs=%d error=\"%s\"", len(acts), exc)
                for act in acts:
                    self.step(act, L.Stop("lost", f"its claim was refused ({exc}); not "
                                                  "started here"))
                return
            except CronrdError as exc:
                log.info("event=claim_retry runs=%d error=\"%s\"", len(acts), exc)
                await asyncio.sleep(RETRY)
                continue
            self._took.append(self.clock.monotonic() - sent)
            won = set(result.get("won", ())) if isinstance(result, dict) else set()
            lost = result.get("lost", {}) if isinstance(result, dict) else {}
            for act in acts:
                rid = act.run.run_id
                self.step(act, L.ClaimDecided(rid in won, None if rid in won else
                                              lost.get(str(rid), "claim not granted")))
            return

    @staticmethod
    def _waiting(acts: list[ActiveRun]) -> list[ActiveRun]:
        return [a for a in acts if not a.life.over and a.life.claim == "asking"
                and a.life.stop_state is None]


def _consume(task: asyncio.Future) -> None:
    """Retrieve an abandoned proposal's outcome (so asyncio does not warn)."""
    if not task.cancelled():
        task.exception()

"""The leader's heartbeat_timeout duty: end the running runs that have been
silent too long (decisions/heartbeats.py decides, apply checks again and
ends them timed_out; their node stops the process on the ``stuck`` effect)."""

from __future__ import annotations

import logging

from ...decisions.heartbeats import stuck
from ...errors import CronrdError
from ...state import checkpoints as CK
from ...state import commands as C

log = logging.getLogger("cronrd.leader")

RETRY_AFTER = 5.0   # s before a proposal for the same run is made again


class HeartbeatWatch:
    def __init__(self, log_, conn, clock, fenced):
        self.log = log_
        self.conn = conn
        self.clock = clock
        self.fenced = fenced          # () -> why this leader's clock may not decide, or None
        self.proposed: dict[int, float] = {}
        # When this node's current spell as leader began (its first duty as
        # leader); None while it does not lead. Silence counts from then.
        self.leading_since: float | None = None

    def begin_term(self) -> None:
        """This node has just become leader: silence counts from its first
        duty of this term (the duty runs only while it leads, so a spell
        led by others leaves no trace here to reset it by)."""
        self.leading_since = None

    async def duty(self) -> None:
        if not self.log.is_leader:
            self.leading_since = None
            return
        now = self.clock.now()
        if self.leading_since is None:
            self.leading_since = now
        if self.fenced() is not None:
            return
        running = CK.running_with_timeouts(self.conn)
        live = {run.run_id for run, _t, _l in running}
        for rid in [r for r in self.proposed if r not in live]:
            del self.proposed[rid]
        for rid in stuck(now, [(run.run_id, t, last) for run, t, last in running],
                         self.proposed, RETRY_AFTER, self.leading_since):
            self.proposed[rid] = now
            try:
                res = await self.log.propose_as_leader(C.HeartbeatTimeout(run_id=rid, at=now))
                log.warning("event=run_stuck run=%d reason=\"heartbeat_timeout\" retry=%s",
                            rid, res.get("retry_run_id") if isinstance(res, dict) else None)
            except CronrdError as exc:
                log.info("event=heartbeat_timeout_failed run=%d error=\"%s\"", rid, exc)

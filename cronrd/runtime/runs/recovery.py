"""After a restart: what becomes of each run this node had in flight.

``decide`` is pure: from a run (as the replicated state has it) and what the
node saw of its supervisors' records (``Seen``: the record, and whether its
supervisor and job still live), it returns one ``Settle``. The executor
performs it. The policy:

- a run whose supervisor still lives is *adopted*: it goes on;
- one that ended meanwhile is *collected* with the status its supervisor
  recorded, as the same attempt;
- one whose supervisor is gone without a word is ``lost`` (retried per
  on_node_loss), and its job, if it still runs, is stopped: nobody could
  report its result;
- one that never passed its gate starts again (if catch-up still wants it);
- at a data_dir's first start with supervisors, a run without a record may
  be an older daemon's: the *legacy* path searches its processes (kill and
  retry). Afterwards a run without a record never started here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.run import Run
from .records import Seen

ADOPT, COLLECT, LOST, START_AGAIN, LEGACY = "adopt", "collect", "lost", "start_again", "legacy"
RETRIED = " (retried per on_node_loss)"


@dataclass(frozen=True)
class Settle:
    kind: str
    seen: Seen | None = None          # the spawn that counts
    reason: str | None = None         # for LOST
    kill: tuple[Seen, ...] = ()       # jobs to SIGKILL: at a dead gate, or orphaned
    remove: tuple[str, ...] = ()      # records that have served


def decide(run: Run, seen: list[Seen], *, legacy: bool) -> Settle:
    """``seen``: this run's spawns, oldest first."""
    if not seen:
        if legacy:
            return Settle(LEGACY)
        if run.state == "assigned":
            return Settle(START_AGAIN)
        return Settle(LOST, reason="cronrd restarted and the run's supervisor left no record "
                                   "(its data_dir/runs was emptied?); its result is unknown")
    main = next((s for s in reversed(seen) if s.record.started), seen[-1])
    # Spawns that never started (a gate that closed with its daemon): gone or going.
    kill = [s for s in seen if s is not main and s.job_alive]
    remove = [s.record.path for s in seen if s is not main]
    rec = main.record
    if not rec.started:
        kill += [main] if main.job_alive else []
        remove.append(rec.path)
        if run.state == "assigned":
            return Settle(START_AGAIN, kill=tuple(kill), remove=tuple(remove))
        return Settle(LOST, reason="cronrd restarted before the run's command started; retried",
                      kill=tuple(kill), remove=tuple(remove))
    if rec.exited:
        return Settle(COLLECT, main, kill=tuple(kill), remove=tuple(remove))
    if main.supervisor_alive:
        return Settle(ADOPT, main, kill=tuple(kill), remove=tuple(remove))
    return supervisor_gone(main, kill=tuple(kill), remove=tuple(remove))


def supervisor_gone(main: Seen, kill: tuple[Seen, ...] = (),
                    remove: tuple[str, ...] = ()) -> Settle:
    """A started run whose supervisor is gone and left no exit status."""
    if not main.this_boot:
        reason = "the host restarted during the run"
    else:
        reason = "cronrd restarted during the run and its supervisor is gone too"
        if main.job_alive:
            kill += (main,)
            reason += "; its processes were stopped"
    return Settle(LOST, main, reason=reason + RETRIED, kill=kill, remove=remove)

"""The verdict: the one line that answers "did it run, and why (not)?"."""

from __future__ import annotations



from ..schedule import iso_utc
from ..model.run import Run
from .subject import Step, Subject, _is_fire


def verdict(s: Subject, steps: list[Step]) -> dict:
    """What became (or would become) of the fire time, in one line."""
    if s.records:
        return _records_verdict(s.records)
    if s.gaps:
        g = s.gaps[-1]
        return {"outcome": "skipped", "text": f"skipped (in a gap of {g['count']} fire "
                f"times): {g['reason']}"}
    blocks = [st.blocks for st in steps if st.blocks]
    if s.gate_now:
        wait = [b for b in blocks if b.startswith("waits for")]
        others = [b for b in blocks if not b.startswith("waits for")]
        if wait:
            return {"outcome": "waits_for_upstream", "text": "next generation " + wait[0] + (
                f"; then would be skipped now: {others[0]}" if others else "")}
        if others:
            return {"outcome": "would_skip", "text": f"would be skipped now: {others[0]}"}
        return {"outcome": "would_run", "text": "would run at its parents' next outcome"}
    if s.after and s.spec is not None:
        return {"outcome": "not_a_fire_time", "text": "no run: no generation of its parents "
                "has fire time T (@after)"}
    if s.spec is None:
        return {"outcome": "unknown", "text": "no record; the job is no longer defined"}
    if s.times and s.t < s.times["created_at"]:
        return {"outcome": "not_a_fire_time", "text": "no fire time: the job did not exist yet"}
    if not _is_fire(s.trigger, s.t) and s.schedule is not None and s.schedule.kind != "reboot":
        return {"outcome": "not_a_fire_time", "text": "no run: T is not a fire time of the "
                "schedule"}
    if s.future:
        if blocks:
            return {"outcome": "would_skip", "text": f"would be skipped now: {blocks[0]}"}
        return {"outcome": "would_run", "text": "would run (if nothing changes before T)"}
    cursor = s.times["cursor"] if s.times else None
    if cursor is not None and s.t > cursor:
        if blocks:
            return {"outcome": "not_handled", "text": f"not handled yet; would be skipped: "
                    f"{blocks[0]}"}
        return {"outcome": "not_handled", "text": "not handled yet (the scheduler is behind); "
                "would run late"}
    return {"outcome": "unknown", "text": "no record (pruned, or the schedule changed since)"}


def _records_verdict(records: list[Run]) -> dict:
    by_target: dict[str, list[Run]] = {}
    for r in records:
        by_target.setdefault(r.target, []).append(r)
    parts = []
    outcomes = set()
    for target, rs in sorted(by_target.items()):
        last = max(rs, key=lambda r: (r.attempt, r.run_id))
        state = last.state.value
        n = len(rs)
        where = f"on {target}: " if target else ""
        if state == "succeeded":
            outcome, text = "ran", "ran (succeeded" + (f" on attempt {last.attempt})"
                                                        if n > 1 else ")")
        elif state in ("failed", "timed_out", "lost"):
            outcome = "ran"
            text = f"ran ({state} after {n} attempt{'s' if n > 1 else ''})"
        elif state == "skipped":
            outcome, text = "skipped", f"skipped: {last.reason}"
        elif state == "cancelled":
            outcome, text = "cancelled", f"cancelled: {last.reason}"
        elif state == "running":
            outcome, text = "running", f"running on {last.node} (attempt {last.attempt})"
        else:
            due = f", due {iso_utc(round(last.due_at, 3))}" if last.due_at else ""
            outcome = "waiting"
            text = f"{state} (attempt {last.attempt}{due})" + (
                f"; {last.reason}" if last.reason else "")
        outcomes.add(outcome)
        parts.append(where + text)
    outcome = outcomes.pop() if len(outcomes) == 1 else "mixed"
    return {"outcome": outcome, "text": "; ".join(parts)}

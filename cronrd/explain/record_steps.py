"""The steps of the record: what the state holds of the fire time, and
the alerts it raised."""

from __future__ import annotations



from ..schedule import human_duration, iso_utc
from ..state import alerts as AL
from ..model.run import Run
from .subject import MAX_RECORD_LINES, Step, Subject


def record_step(s: Subject) -> list[Step]:
    """Every record of the fire time: attempt, state, node, times, exit, reason."""
    if not s.records:
        if s.gaps or s.gate_now:
            return []
        return [Step("record", "none", {"records": []})]
    out = []
    for r in s.records[:MAX_RECORD_LINES]:
        out.append(Step("record", _record_text(r), {"run": r.view()}))
    if len(s.records) > MAX_RECORD_LINES:
        out.append(Step("record", f"... and {len(s.records) - MAX_RECORD_LINES} more "
                        f"(`cronrd runs {s.name} --since {iso_utc(s.t)}`)"))
    return out


def _record_text(r: Run) -> str:
    state = r.state.value
    text = f"run {r.run_id} attempt {r.attempt} ({r.kind})"
    if r.node:
        text += f" on node {r.node}"
    elif r.target:
        text += f" for node {r.target}"
    text += f": {state}"
    if r.exit_code is not None and (state != "succeeded" or r.exit_code != 0):
        text += f" exit {r.exit_code}"
    if r.signal:
        text += f" signal {r.signal}"
    if r.started_at is not None:
        text += f", started {iso_utc(round(r.started_at, 3))}"
        if r.finished_at is not None:
            text += f", took {human_duration(round(r.finished_at - r.started_at, 1))}"
    elif r.finished_at is not None:
        text += f", recorded at {iso_utc(round(r.finished_at, 3))}"
    elif r.due_at is not None:
        text += f", due {iso_utc(round(r.due_at, 3))}"
    if r.reason:
        text += f"; {r.reason}"
    return text


def alerts_step(s: Subject) -> list[Step]:
    """The alerts of this fire time (SLA misses, a final failure) and where
    they stand; a fire time with an SLA and none says so."""
    if s.gate_now:
        return []
    out = []
    for a in AL.alerts(s.conn, include_closed=True, job=s.name, limit=1000):
        if a["fire_time"] != s.t:
            continue
        state = a["state"] + (f" by {a['by']}" if a["by"] else "") + \
            (f": {a['note']}" if a["note"] else "")
        out.append(Step("alert", f"{a['kind']} (alert {a['alert_id']}, {state}): "
                        f"{a['detail']}", {"alert": a}))
    if not out and s.spec is not None and s.spec.sla is not None and s.handled:
        out.append(Step("alert", "none: no SLA miss or failure alerted for this fire time"))
    return out

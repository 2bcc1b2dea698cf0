"""The steps of the workflow: the job's parents (depends_on, @after) and
the runs it started downstream."""

from __future__ import annotations

from typing import Any


from ..schedule import human_duration, iso_utc
from ..decisions import dependencies as D
from ..state import dependencies as deps
from ..state import downstream as DS
from ..state import queries as Q
from ..model.run import Run
from .subject import Step, Subject


def upstream_step(s: Subject) -> list[Step]:
    """depends_on: the parents' gate at ``t``: a run waiting for its
    parents (until when), the reason its upstream kept it from running, or
    the parent runs it consumed (its lineage); for a future T, when its
    gate is looked at. A run waiting in the queue after its gate opened
    shows its lineage here and its queue wait under "overlap"."""
    if s.spec is None or not s.spec.depends_on:
        return []
    parents = ", ".join(d.job + (f" (within {human_duration(d.within)})" if d.within else "")
                        for d in s.spec.depends_on)
    rule = f"depends_on {parents}, trigger_rule: {s.spec.trigger_rule}"
    data: dict[str, Any] = {"depends_on": [d.job for d in s.spec.depends_on],
                            "trigger_rule": s.spec.trigger_rule}
    if s.after:
        return _after_upstream(s, rule, data)
    for r in s.records:
        if r.state.value == "waiting" and deps.waits_for_upstream(s.conn, r.run_id):
            until = iso_utc((r.due_at or 0) + s.spec.wait_for_upstream)
            return [Step("upstream", f"{rule}: waiting for its parents ({r.reason}) until "
                         f"{until} (wait_for_upstream)", data | {"waiting": r.run_id})]
        if (r.reason or "").startswith("upstream_"):
            return [Step("upstream", f"{rule}: {r.reason}", data)]
    for r in s.records:
        consumed = deps.lineage(s.conn, r.run_id)
        if consumed:
            runs = ", ".join(f"{x['job']} run {x['run_id']} ({x['state']}, fire time "
                             f"{x['fire_time']})" for x in consumed)
            return [Step("upstream", f"{rule}: gate opened with {runs}",
                         data | {"lineage": consumed})]
    if s.records:
        return [Step("upstream", f"{rule} (no parent run consumed)", data)]
    if not s.future:
        return [Step("upstream", f"{rule}: its gate is looked at when T fires", data)]
    lines, gate, pending = _parents_now(s, need_new=False)
    return [Step("upstream", f"{rule}: its gate is looked at when T fires; if it fired now: "
                 + _gate_now_text(s, gate, pending, need_new=False), data)] + lines


def _after_upstream(s: Subject, rule: str, data: dict) -> list[Step]:
    """An @after child: each generation at ``t`` (the parent runs it
    consumed, each one's outcome, the rule's verdict), or its gate now."""
    assert s.spec is not None  # upstream_step returned without one
    head = f"{rule}; @after: one run per generation of their outcomes"
    if s.gate_now:
        lines, gate, pending = _parents_now(s, need_new=True)
        text = _gate_now_text(s, gate, pending, need_new=True)
        blocks = text if gate.action == D.WAIT else None
        return [Step("upstream", head, data)] + lines + [
            Step("gate", ("next generation " if gate.action == D.WAIT else "") + text,
                 {"action": gate.action, "waits_for": pending}, blocks)]
    lin = {r.run_id: deps.lineage(s.conn, r.run_id) for r in s.records}
    gens = [r for r in s.records if lin[r.run_id] or r.kind == "upstream"]
    out = [Step("upstream", head + (f" ({len(gens)} generations at T: a parent's rerun makes a "
                                    "new attempt of the fire time)" if len(gens) > 1 else ""),
                data)]
    for g in gens:
        who = f"run {g.run_id} (attempt {g.attempt})"
        consumed = {x["job"]: x for x in lin[g.run_id]}
        for d in s.spec.depends_on:
            x = consumed.get(d.job)
            text = (f"{who} consumed {d.job} run {x['run_id']}: {x['state'] or 'pruned'} "
                    f"(fire time {x['fire_time']})" if x else
                    f"{who}: {d.job} is not in this generation (nothing new from it)")
            out.append(Step("parent", text, {"run_id": g.run_id, "parent": d.job,
                                             "consumed": x}))
        out.append(Step("gate", f"{who}: {_generation_verdict(s, g, consumed)}",
                        {"run_id": g.run_id, "reason": g.reason}))
    if s.latest:
        _lines, gate, pending = _parents_now(s, need_new=True)
        out.append(Step("next", "next generation " + _gate_now_text(s, gate, pending, True)
                        + f" (`cronrd explain {s.name} --next`)", {"action": gate.action}))
    return out


def _open_why(rule: str, consumed: dict) -> str:
    def cls(x):
        try:
            return D.outcome_class(x["state"])
        except KeyError:
            return None
    if rule in ("any_succeeded", "any_failed"):
        want = D.SUCCESS if rule == "any_succeeded" else D.FAILURE
        hit = [j for j, x in consumed.items() if cls(x) == want]
        return f"{hit[0]} {'succeeded' if want == D.SUCCESS else 'failed'}" if hit else rule
    return {"all_succeeded": "every parent succeeded", "none_failed": "no parent failed",
            "all_finished": "every parent finished"}.get(rule, rule)


def _generation_verdict(s: Subject, g: Run, consumed: dict) -> str:
    """What the trigger rule made of one generation, from its record."""
    assert s.spec is not None  # upstream_step returned without one
    rule = s.spec.trigger_rule
    reason = g.reason or ""
    if reason.startswith("upstream_"):
        text = f"trigger_rule {rule} closed the gate: {reason}; recorded {g.state.value}"
        if reason.startswith("upstream_failed"):
            text += f" (on_upstream_failure: {s.spec.on_upstream_failure})"
        return text
    text = f"trigger_rule {rule} opened the gate ({_open_why(rule, consumed)})"
    if g.state.value == "skipped" and reason:
        return f"{text}, but it was held: {reason}"
    if reason.startswith(("waiting for run", "waited in the queue", "released from the queue")):
        return f"{text}, then it {'waits' if g.state.value == 'waiting' else 'waited'} in its " \
            "queue (overlap above)"
    if g.kind != "upstream":
        return text
    return f"{text}: the run was made (attempts below)"


def _parents_now(s: Subject, need_new: bool) -> tuple[list[Step], D.Gate, list[str]]:
    """What the child sees of each parent now (read only), and its gate."""
    assert s.spec is not None  # upstream_step returned without one
    view = deps.parents_of(s.conn, s.name, s.spec, s.now)
    last = deps.consumed_last(s.conn, s.name)
    lines = []
    for d, p in zip(s.spec.depends_on, view):
        bits = []
        if p.new is not None:
            bits.append(f"new outcome not consumed yet: run {p.new.run_id} {p.new.state} "
                        f"(fire time {iso_utc(p.new.fire_time)})")
        if p.fresh is not None:
            assert d.within is not None  # parents_of looks for a fresh success only with one
            bits.append(f"a success within {human_duration(d.within)}: run {p.fresh.run_id} "
                        f"(fire time {iso_utc(p.fresh.fire_time)})")
        lr = last.get(d.job, 0)
        if not bits:
            bits.append(f"nothing new since run {lr} (consumed last)" if lr else
                        "no outcome yet")
        active = Q.active_runs_of(s.conn, d.job)
        if active:
            bits.append("active now: " + ", ".join(f"run {r.run_id} ({r.state.value})"
                                                   for r in active[:5]))
        lines.append(Step("parent", f"{d.job}: " + "; ".join(bits), {
            "parent": d.job, "consumed_last": lr,
            "new": p.new.__dict__ if p.new else None,
            "fresh": p.fresh.__dict__ if p.fresh else None,
            "active": [r.run_id for r in active]}))
    gate = D.decide(s.spec.trigger_rule, view, need_new=need_new)
    pending = [p.job for p in view if p.new is None and p.fresh is None]
    return lines, gate, pending


def _gate_now_text(s: Subject, gate: D.Gate, pending: list[str], need_new: bool) -> str:
    assert s.spec is not None  # upstream_step returned without one
    rule = s.spec.trigger_rule
    if gate.action == D.FIRE:
        return f"the gate is open (trigger_rule {rule}): it would run"
    if gate.action != D.WAIT:
        return f"the gate would close: {gate.reason}"
    if not need_new:   # a scheduled child: its own fire time is its trigger
        who = ", ".join(pending)
        wait = s.spec.wait_for_upstream
        if wait > 0:
            return (f"nothing new from {who}: at T it would wait for it up to "
                    f"{human_duration(wait)} (wait_for_upstream)")
        state = "skipped" if s.spec.on_upstream_failure == "skip" else "failed"
        return (f"nothing new from {who}: at T it would be recorded {state} ({gate.reason}; "
                "wait_for_upstream is 0)")
    if not pending:   # only fresh `within` successes: an @after child needs a new outcome
        return ("waits for: a new outcome of a parent (fresh `within` successes alone do not "
                f"make a generation; trigger_rule {rule})")
    who = "waits for: " + ", ".join(pending)
    if rule in ("any_succeeded", "any_failed"):
        x = " or ".join(pending)
        return (f"{who}; runs as soon as {x} {'succeeds' if rule == 'any_succeeded' else 'fails'}"
                f" (trigger_rule {rule})")
    x = " and ".join(pending)
    then = {"all_succeeded": "runs if every parent succeeded",
            "none_failed": "runs unless a parent failed",
            "all_finished": "runs whatever their outcomes"}.get(rule, "")
    return (f"{who}; fires when {x} finish{'' if len(pending) > 1 else 'es'}; {then} "
            f"(trigger_rule {rule})")


# The trail, in order. Dependency gates and pools go between "overlap" and
# "placement" (see the module's docstring).
def downstream_step(s: Subject) -> list[Step]:
    """Each ``--downstream`` rerun this record was part of, and what it got
    (rerun, or why not)."""
    if s.gate_now or not s.records:
        return []
    out = []
    for item in DS.of_record(s.conn, s.name, s.t):
        root = Q.get_run(s.conn, item["root"])
        by = (f"{root.job}@{iso_utc(root.fire_time)} (run {root.run_id})" if root is not None
              else f"run {item['root']}")
        if root is not None and root.job == s.name and root.fire_time == s.t:
            text = f"its rerun (run {root.run_id}) was --downstream"
        elif item["state"] == "waiting":
            text = f"downstream of {by}: waits for its parents in that rerun to end"
        elif item["run_id"] is not None:
            text = f"downstream of {by}: rerun as run {item['run_id']}"
        else:
            text = f"downstream of {by}: {item['note'] or item['state']}"
        out.append(Step("downstream", text, {"downstream": item}))
    return out

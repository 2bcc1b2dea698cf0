"""The steps of capacity: the overlap policy, placement on a node, pools."""

from __future__ import annotations

from typing import Any


from ..schedule import human_duration
from ..state import dependencies as deps
from ..state import pools as PL
from ..state import queries as Q
from ..decisions.placement import TAKES_RUNS, fits, no_executor
from .subject import Step, Subject


# What a record's reason says about concurrency (forbid, replace, queue).
CONCURRENCY_REASONS = ("overlap", "replaced by", "waiting for run", "waited in the queue", "queue full",
                 "released from the queue")


def overlap_step(s: Subject) -> list[Step]:
    """concurrency: what overlapped at ``t``, or what runs now."""
    if s.spec is None:
        return []
    policy = s.spec.concurrency
    said = [r for r in s.records if (r.reason or "").startswith(CONCURRENCY_REASONS)]
    if said:
        return [Step("overlap", f"concurrency: {policy}: {said[0].reason}",
                     {"concurrency": policy})]
    if s.future:
        fire = "the next generation" if s.gate_now else "a fire at T"
        active = Q.active_runs_of(s.conn, s.name)
        if active and policy == "queue":
            flying = sum(r.state.value != "waiting" for r in active)
            waiting = sum(r.state.value == "waiting" and not deps.waits_for_upstream(
                s.conn, r.run_id) for r in active)   # in the queue, not for its parents
            return [Step("overlap", f"concurrency: queue; {flying} in flight "
                         f"and {waiting} waiting now: {fire} waits for its turn",
                         {"concurrency": policy, "active": [r.run_id for r in active]})]
        if active and policy == "forbid":
            ids = ", ".join(str(r.run_id) for r in active)
            runs = f"runs {ids} are" if len(active) > 1 else f"run {ids} is"
            return [Step("overlap", f"concurrency: forbid; {runs} active now: {fire} "
                         "while it still runs is skipped", {"concurrency": policy,
                                                             "active": [r.run_id for r in active]})]
    return [Step("overlap", f"concurrency: {policy}" + (
        "" if s.future else " (nothing overlapped)"), {"concurrency": policy})]


def placement_step(s: Subject) -> list[Step]:
    """run_on, the nodes that may take it, where it was placed."""
    if s.spec is None:
        return []
    ro = s.spec.run_on
    rule = "run_on: any node" if ro.mode == "any" else \
        "run_on: every node" if ro.mode == "all" else \
        f"run_on: {ro.mode} {', '.join(ro.values)}"
    data: dict[str, Any] = {"run_on": {"mode": ro.mode, "values": list(ro.values)}}
    placed = [r for r in s.records if r.node]
    if s.records:
        said = [r.reason for r in s.records
                if r.reason and r.reason.startswith(("no eligible node", "node "))
                and r.state == "skipped"]
        parts = []
        if placed:
            where = sorted({r.node for r in placed if r.node})  # (all of them)
            data["nodes"] = where
            parts.append(f"placed on {', '.join(where)}")
        for r in placed:
            if r.moved_from:
                parts.append(f"run {r.run_id} was moved from {r.moved_from.replace(',', ', ')}"
                             " (they did not claim it)")
        parts += said
        return [Step("placement", f"{rule}: " + ("; ".join(parts) or "not placed"), data)]
    if not s.future and (s.handled or s.after):   # (@after: no generation at T)
        return [Step("placement", rule, data)]
    if s.nodes is None:
        return [Step("placement", f"{rule} (the members are not known here)", data)]
    fit = [n for n in s.nodes if fits(ro, n, s.spec.executor_type)]
    ready = [n.id for n in fit if n.healthy and n.state in TAKES_RUNS]
    others = [f"{n.id}: {n.why_not or n.state}" for n in fit if n.id not in ready]
    data["eligible"] = ready
    live = f" ({s.nodes_note})" if s.nodes_note else ""
    if not fit:
        why = (no_executor(s.spec.executor_type)[len("no eligible node: "):]
               if any(fits(ro, n) for n in s.nodes) else
               f"no member has tags {', '.join(ro.values)}" if ro.mode == "tags" else
               f"run_on {', '.join(ro.values)} names no member of the cluster")
        return [Step("placement", f"{rule}: {why}", data, f"no eligible node: {why}")]
    if not ready:
        why = "; ".join(others)
        return [Step("placement", f"{rule}: no eligible node is up now{live} ({why})", data,
                     f"no eligible node is up ({why})")]
    text = f"{rule}: eligible now{live}: {', '.join(ready)}"
    if others:
        text += f" (not: {'; '.join(others)})"
    return [Step("placement", text, data)]


def pool_step(s: Subject) -> list[Step]:
    """pool: the job's pool and priority; what its records waited for, or
    how full the pool is now (a fire to come waits for a slot: it is not
    skipped, unless its start_deadline passes first)."""
    if s.spec is None or not s.spec.pool:
        return []
    spec = s.spec
    pool = spec.pool
    data: dict[str, Any] = {"pool": pool, "pool_slots": spec.slots_needed,
                            "priority": spec.priority or 0}
    if spec.start_deadline:
        data["start_deadline"] = spec.start_deadline
    use = next((u for u in PL.usage(s.conn) if u["pool"] == pool), None)
    size = ("not defined in the leader's daemon config" if use is None or not use["defined"]
            else f"{use['slots']} slot{'s' if use['slots'] != 1 else ''}"
            f"{' per node' if use['scope'] == 'node' else ''}")
    head = (f"pool {pool} ({size}); takes {spec.slots_needed}, priority "
            f"{spec.priority or 0}")
    if spec.start_deadline:
        head += f", start_deadline {human_duration(spec.start_deadline)}"
    if s.records:
        parts = []
        for r in s.records:
            reason = r.reason or ""
            if r.state.value == "waiting" and PL.of_run(s.conn, r.run_id) is not None \
                    and PL.is_waiting(s.conn, r.run_id):
                parts.append(f"run {r.run_id} waits: {reason}")
            elif reason.startswith(("waited for pool", "start_deadline")):
                parts.append(f"run {r.run_id}: {reason}")
        return [Step("pool", head + ("; " + "; ".join(parts) if parts else ""), data)]
    if not s.open or use is None:
        return [Step("pool", head, data)]
    data.update({"in_use": use["in_use"], "waiting": use["waiting"]})
    now = (f"{use['in_use']}/{use['slots']} slots in use now" if use["defined"] else
           "its runs wait until it is")
    if use["waiting"]:
        now += f", {use['waiting']} run{'s' if use['waiting'] != 1 else ''} waiting"
    return [Step("pool", f"{head}: {now}", data)]

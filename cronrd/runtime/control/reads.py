"""Read requests answered from a state database alone: `runs` with its
filters and the details `cronrd show` adds to a job.

They take a connection and plain values (no daemon objects), so the daemon
answers them on its connection and the CLI answers them from the database
opened read-only when the daemon is down (offline.py)."""

from __future__ import annotations

import os
from typing import Any, Callable

import apsw

from ...errors import CronrdError, RequestError
from ...jobspec.as_written import written
from ...ops import requests as R
from ...schedule import Trigger, iso_utc, make_trigger, parse_iso, parse_schedule
from ...schedule.calendars import CalendarTrigger
from ...state.calendars import job_trigger
from ...state import queries as Q
from ...state import checkpoints, planned, run_params

RECENT_RUNS = 10   # `cronrd show`: the last runs


def job_view(job: dict, last, default_tz: str,
             next_fire: Callable[[dict, dict], int | None]) -> dict:
    """A job as listings show it (``job``: a row of ``queries.jobs``;
    ``last``: its last run; ``next_fire(job, spec dict)``: its next fire
    time, from the scheduler on a leader, from the cursor elsewhere)."""
    spec = job["spec"]
    d = spec if isinstance(spec, dict) else spec.to_dict()
    return {
        "name": job["name"], "schedule": d["schedule"],
        "timezone": d["timezone"] or default_tz,
        "command": d["command"], "enabled": d["enabled"],
        "paused": job["paused"], "description": d["description"],
        "source": job["source"], "next_fire": iso_utc(next_fire(job, d)),
        "conflict": job.get("conflict"), "sources": job.get("sources", []),
        "last_fire": iso_utc(job["cursor"]) if job["cursor"] else None,
        "last_run": last.view() if last else None,
        "concurrency": d["concurrency"], "catchup": d["catchup"],
        "run_on": d["run_on"], "digest": job["digest"],
        "watch": d.get("watch") is not None,
    }


def need_job_or_history(conn, job: str) -> None:
    """Refuse a job name that is neither defined nor in the history."""
    if Q.jobs(conn, name=job) or Q.job_has_runs(conn, job):
        return
    raise RequestError(f"no job named {job!r}; `cronrd jobs` lists the known jobs")


def runs_listing(conn: apsw.Connection, req: R.ListRuns, default_tz: str,
                 applied_index: int) -> dict[str, Any]:
    """`cronrd runs`: the newest runs matching the filters (job, state,
    kind, node, fire times in [since, until), run ids below ``before``),
    each with its job's time zone; and the recorded gaps of skipped fire
    times when skipped runs are asked for."""
    job, states, kinds, node = req.job, req.state, req.kind, req.node
    since, until, before, limit = req.since, req.until, req.before, req.limit
    if job is not None:
        need_job_or_history(conn, job)
    runs = Q.list_runs(conn, job, states, limit, kind=kinds, node=node, since=since,
                       until=until, before=before)
    zones: dict[str, str] = {}
    views = []
    for r in runs:
        if r.job not in zones:
            spec = Q.job_spec(conn, r.job)
            zones[r.job] = (spec.timezone if spec is not None else None) or default_tz
        view = r.view()
        view["timezone"] = zones[r.job]
        views.append(view)
    run_params.add_to_views(conn, views)
    checkpoints.views(conn, views)
    if views:  # the parent runs each child run consumed (one query for the page)
        lineage: dict[int, list[dict]] = {}
        for rid, parent, prid in conn.execute(
                "SELECT run_id, parent_job, parent_run_id FROM run_lineage WHERE run_id "
                "BETWEEN ? AND ? ORDER BY run_id, parent_job",
                (min(r.run_id for r in runs), max(r.run_id for r in runs))):
            lineage.setdefault(rid, []).append({"job": parent, "run_id": prid})
        for view in views:
            if view["run_id"] in lineage:
                view["lineage"] = lineage[view["run_id"]]
    gaps: list[dict] = []
    if (states is None or "skipped" in states) and kinds is None and node is None:
        gaps = [g for g in Q.list_gaps(conn, job, limit)
                if (since is None or parse_iso(g["last"]) >= since)
                and (until is None or parse_iso(g["first"]) < until)]
    return {"runs": views, "gaps": gaps, "applied_index": applied_index}


def is_done(schedule: str, tz: str, cursor: float | None) -> bool:
    """An ``@at`` job whose one fire time was handled: done (it stays
    listed with its run)."""
    if not schedule.lstrip().lower().startswith("@at"):
        return False
    try:
        at = make_trigger(parse_schedule(schedule), tz).next_after(-1)
    except CronrdError:
        return False
    return at is not None and float(cursor or 0) >= at


def next_fires(schedule: str, tz: str, after: float, count: int,
               trigger: Trigger | None = None) -> list[str]:
    """The next ``count`` fire times of a schedule (or of ``trigger``: a
    job's, with its calendar) after ``after`` (ISO UTC)."""
    try:
        sched = parse_schedule(schedule)
    except CronrdError:
        return []
    if sched.kind in ("reboot", "after") or count <= 0:
        return []
    trigger = trigger or make_trigger(sched, tz)
    out: list[str] = []
    t: int | None = int(after)
    while len(out) < count:
        assert t is not None  # the loop ends at the first None
        t = trigger.next_after(t)
        if t is None:
            break
        out.append(iso_utc(t))
    return out


def job_details(conn, job: dict, view: dict, now: float, count: int,
                problems: list[str]) -> dict[str, Any]:
    """What `cronrd show` adds to a job's listing fields: why it is paused
    (and by whom), the maintenance pause, its state in words, the problems
    of its file (it keeps its last good version), its next ``count`` fire
    times, its last runs and its active ones."""
    name = job["name"]
    maintenance = Q.pause_note(conn, "")
    pause = Q.pause_note(conn, name) if job["paused"] else None
    enabled = view["enabled"]
    if job["paused"]:
        state = "paused"
    elif not enabled:
        state = "disabled"
    else:
        state = "active"
    if maintenance is not None and state == "active":
        state = "paused (maintenance)"
    upcoming: list[str] = []
    skips: dict[str, str] = {}
    if state == "active":
        start = max(float(job["cursor"] or 0), now)
        trigger = None
        spec = job.get("spec")
        if spec is not None and spec.calendar is not None:
            try:
                trigger = job_trigger(conn, spec, zone=view["timezone"])
            except CronrdError:
                trigger = None
        upcoming = next_fires(view["schedule"], view["timezone"], start, count, trigger)
        if isinstance(trigger, CalendarTrigger):   # the ones its calendar skips, and why
            skips = {t: why for t in upcoming
                     if (why := trigger.skip_reason(parse_iso(t))) is not None}
        if not upcoming and is_done(view["schedule"], view["timezone"], job["cursor"]):
            state = "done"
    return {
        "planned": [p.view() for p in planned.plans(conn, name)],
        "state": state,
        "pause": pause,
        "maintenance": maintenance,
        "file_problems": problems,
        "last_good": bool(problems),
        "next_fires": upcoming,
        "next_skips": skips,
        "recent_runs": checkpoints.views(conn, run_params.add_to_views(
            conn, [r.view() for r in Q.list_runs(conn, name, None, RECENT_RUNS)])),
        "active_runs": checkpoints.views(conn, run_params.add_to_views(
            conn, [r.view() for r in Q.active_runs_of(conn, name)])),
    }


MAX_GRAPH = 10_000  # jobs `cronrd graph` shows at most


def dependency_graph(conn, job: str | None = None) -> dict:
    """The dependency graph (``job``: its ancestors and descendants), each
    job with its schedule, trigger rule, parents and last run:
    ``{"jobs": [...], "edges": [[parent, child], ...], "truncated": bool}``.
    A parent no job defines is listed with ``"missing": true``."""
    edges: set[tuple[str, str]] = set()
    if job is None:
        rows = conn.execute("SELECT parent, child FROM job_deps ORDER BY parent, child "
                            "LIMIT ?", (MAX_GRAPH * 4,))
        edges = {(p, c) for p, c in rows}
    else:
        if Q.job_spec(conn, job) is None and not any(conn.execute(
                "SELECT 1 FROM job_deps WHERE parent=? LIMIT 1", (job,))):
            raise RequestError(f"no job named {job!r}; `cronrd jobs` lists the known jobs")
        for column, other in (("child", "parent"), ("parent", "child")):
            todo, seen = [job], {job}
            while todo and len(seen) < MAX_GRAPH:
                name = todo.pop()
                for (nxt,) in conn.execute(
                        f"SELECT {other} FROM job_deps WHERE {column}=? ORDER BY {other}",
                        (name,)):
                    edges.add((nxt, name) if other == "parent" else (name, nxt))
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
    names = sorted({n for e in edges for n in e} | ({job} if job else set()))
    truncated = len(names) > MAX_GRAPH
    names = names[:MAX_GRAPH]
    last = Q.last_runs(conn, names)
    jobs = []
    for name in names:
        spec = Q.job_spec(conn, name)
        run = last.get(name)
        entry: dict[str, Any] = {
            "name": name, "missing": spec is None,
            "schedule": spec.schedule if spec else None,
            "trigger_rule": spec.trigger_rule if spec and spec.depends_on else None,
            "parents": [d.to_dict() for d in spec.depends_on] if spec else [],
            "last_run": None if run is None else {
                "run_id": run.run_id, "state": run.state.value,
                "fire_time": iso_utc(run.fire_time), "reason": run.reason}}
        jobs.append(entry)
    kept = set(names)
    return {"jobs": jobs, "edges": [[p, c] for p, c in sorted(edges) if p in kept and c in kept],
            "truncated": truncated}


__all__ = ["job_view", "runs_listing", "job_details", "next_fires", "need_job_or_history",
           "dependency_graph", "RECENT_RUNS"]


def pools_view(conn, config=None) -> dict:
    """`cronrd pools`: each pool in force (the leader's daemon config's) with
    its slots in use, the runs holding them and the number waiting; and
    where this node's own config says otherwise (it would put its pools in
    force when it leads)."""
    from ...state import pools as PL
    rows = PL.usage(conn)
    mine = {} if config is None else {p.name: p for p in config.pools}
    for row in rows:
        p = mine.get(row["pool"])
        here = None if p is None else {"slots": p.slots, "scope": p.scope}
        if here != ({"slots": row["slots"], "scope": row["scope"]} if row["defined"] else None):
            row["this_node_config"] = here
    named = {r["pool"] for r in rows}
    for name, p in sorted(mine.items()):
        if name not in named:
            rows.append({"pool": name, "slots": None, "scope": None, "defined": False,
                         "in_use": 0, "waiting": 0, "runs": [],
                         "this_node_config": {"slots": p.slots, "scope": p.scope}})
    return {"pools": rows}


def pools_brief(conn) -> list[dict]:
    """`cronrd status`'s line: each pool's slots in use and runs waiting."""
    from ...state import pools as PL
    return [{k: p[k] for k in ("pool", "slots", "scope", "in_use", "waiting")}
            for p in PL.usage(conn)]


def as_written(view: dict, node_id: str, jobs_dir: str) -> dict[str, Any]:
    """A job's file as written, if this node has it (``view``: the job's
    view, with its sources): the path, the job's first line and the lines
    that define it; else which node has it, and why not. Only a YAML file
    inside this node's ``jobs_dir`` is read: the path comes from the
    replicated state, which another member may have written."""
    mine = [s for s in view.get("sources") or [] if s.get("node") == node_id]
    path = mine[0]["source"] if mine else None
    name = view["spec"]["name"]
    if path and _in_dir(full := os.path.join(jobs_dir, path), jobs_dir):
        found = written(full, name)
        if found is not None:
            return {"node": node_id, "path": path, "line": found[0], "lines": found[1]}
    others = sorted({s.get("node") for s in view.get("sources") or []} - {node_id})
    why = (f"the file is on node {others[0]}: `cronrd show {name}` there shows it as written"
           if others and not path else "its file cannot be read here now (changed or "
           "removed since); the definition in force is below")
    return {"node": None if path else (others[0] if others else None),
            "path": path or view.get("source"), "line": None, "lines": None, "why": why}


def _in_dir(path: str, directory: str) -> bool:
    base, real = os.path.realpath(directory), os.path.realpath(path)
    return (os.path.commonpath([base, real]) == base and real != base
            and real.endswith((".yaml", ".yml")))

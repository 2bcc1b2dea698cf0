"""Jobs and the daemon: status, jobs, show, graph, explain, pause, resume,
reload."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..config import config_path, start_hint
from ..errors import UsageError
from ..runtime.clock import Clock
from .base import (Ctx, RUN_HEADERS, _ago, _echo_heartbeats, _echo_inputs, complete_jobs,
                   consistent_option, emit_json, printable, read_args, run_row, table)


def _conflict_text(value: Any) -> str:
    """One line for a job's conflict entry (a string, or a structure the daemon sends)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("message", "text", "reason"):
            if isinstance(value.get(key), str):
                return value[key]
    return json.dumps(value, sort_keys=True)


def _clock_text(offset_ms, error_ms=None) -> str:
    """'12ms ahead of the cluster's clock (+-1ms)', '1.5s behind ...', 'in step
    with ...', 'not measured yet against ...'."""
    if not isinstance(offset_ms, (int, float)):
        return "not measured yet against the cluster's clock"
    a = abs(offset_ms)
    size = f"{a / 1000:.1f}s" if a >= 1000 else f"{a:.0f}ms"
    err = f" (+-{error_ms:.0f}ms)" if isinstance(error_ms, (int, float)) and error_ms >= 1 else ""
    if a < 0.5:
        return f"in step with the cluster's clock{err}"
    return f"{size} {'ahead of' if offset_ms > 0 else 'behind'} the cluster's clock{err}"


def _versions_text(v: object) -> None:
    """The cluster version lines of `cronrd status` (cluster/versions.py)."""
    if not isinstance(v, dict):
        return
    cv, applies = v.get("cluster_version"), v.get("applies")
    click.echo(f"cluster   version {cv}" + (
        f" (this node applies up to {applies})" if applies != cv else ""))
    if v.get("mixed"):
        releases = ", ".join(f"{node} {m.get('release') or 'unknown'}"
                             for node, m in sorted((v.get("members") or {}).items()))
        click.echo(f"MIXED     the members run different releases ({releases}); the cluster "
                   f"version stays {cv} until every member runs the newest (`cronrd cluster "
                   "members` shows each one's)")


def _workers_text(workers) -> None:
    """One line for the worker agents: how many are connected (on the
    leader), and each one that is not."""
    if not workers:
        return
    known = [w for w in workers if w.get("connected") is not None]
    if not known:
        click.echo(f"workers   {len(workers)} registered (the leader knows which are "
                   "connected: `cronrd cluster members` there)")
        return
    up = [w for w in known if w["connected"]]
    running = sum(w.get("running") or 0 for w in up)
    click.echo(f"workers   {len(up)}/{len(workers)} connected, {running} runs running on them")
    for w in known:
        if not w["connected"]:
            click.echo(f"DOWN      worker {w['node']}: not connected to the leader")


@click.command()
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Ctx, consistent, as_json):
    """Show this node's role, the leader, jobs, running runs and conflicts."""
    st = obj.client().call("status", read_args(consistent))
    if as_json:
        emit_json(st)
        return
    starting = "" if st.get("ready", True) else " (starting up)"
    click.echo(f"node      {st.get('node_id', '?')}{starting}")
    if st.get("offline"):
        click.echo(f"daemon    NOT RUNNING: the state below is this node's copy as of "
                   f"{st.get('state_as_of')}; start it with "
                   f"{start_hint(config_path(obj.config_arg))}")
    role = st.get("role") or "unknown"
    term = st.get("term")
    leader = st.get("leader")
    click.echo(f"role      {role}" + (f", term {term}" if term is not None else ""))
    if not st.get("offline"):
        click.echo(f"leader    {leader}" if leader else
                   "leader    none known (an election is running, or no majority of the "
                   "members can reach each other)")
    cert = st.get("certificate")
    if isinstance(cert, dict):
        click.echo(f"cert      serial {cert.get('serial')}, valid until {cert.get('not_after')}"
                   f" ({cert.get('days_left')} days)")
        if cert.get("warning"):
            click.echo(f"WARNING   {cert['warning']}")
    if "max_clock_offset_ms" in st:
        click.echo("clock     " + _clock_text(st.get("clock_offset_ms"), st.get("clock_error_ms")))
        if st.get("clock_off"):
            click.echo(f"WARNING   this node's clock is beyond cluster.max_clock_offset "
                       f"({st['max_clock_offset_ms']:g}ms): check its time sync "
                       "(timedatectl, chronyc tracking)")
    if st.get("peer_transport") == "insecure":
        click.echo("peer transport: INSECURE (no TLS, anyone reaching the port can impersonate "
                   "a node" + ("; allow_network: reachable beyond loopback)"
                               if st.get("insecure_network") else "; loopback only)"))
    if "version" in st:
        up = st.get("uptime_s")
        faces = st.get("faces")
        click.echo(f"version   {st['version']}, pid {st.get('pid', '?')}"
                   + (f", up {up:.0f}s" if isinstance(up, (int, float)) else "")
                   + (f"; faces pid {faces.get('pid')}" if isinstance(faces, dict) else "")
                   + (f" (started {faces['starts']} times: see event=faces_died)"
                      if isinstance(faces, dict) and (faces.get("starts") or 0) > 1 else ""))
    _versions_text(st.get("versions"))
    m = st.get("maintenance")
    if m:
        click.echo(f"PAUSED    every job is paused for maintenance{_pause_text(m)}; fire "
                   "times are recorded as skipped until `cronrd resume --all`")
    _workers_text(st.get("workers"))
    for d in st.get("down") or []:
        click.echo(f"DOWN      member {d['id']}: " + (
            "never reached from this node" if d.get("last_contact_s") is None else
            f"last heard from {_ago(d['last_contact_s'])}"))
    if "jobs" in st:
        click.echo(f"jobs      {st['jobs']} ({st.get('paused', 0)} paused), "
                   f"{st.get('running', 0)} running, {st.get('assigned', 0)} about to start")
    if st.get("pools"):
        click.echo("pools     " + ", ".join(
            f"{p['pool']} {p['in_use']}/{'-' if p['slots'] is None else p['slots']}"
            + (" per node" if p.get("scope") == "node" else "")
            + (f" ({p['waiting']} waiting)" if p["waiting"] else "") for p in st["pools"])
            + "; `cronrd pools` for more")
    idx = []
    if st.get("commit_index") is not None:
        idx.append(f"commit index {st['commit_index']}")
    if st.get("applied_index") is not None:
        idx.append(f"applied index {st['applied_index']}")
    digest = st.get("state_digest")
    if idx or digest:
        click.echo("state     " + ", ".join(idx + ([f"digest {digest[:16]}"] if digest else [])))
    if st.get("http"):
        click.echo(f"http      {st['http']} (web UI and API, /metrics)")
    if "socket" in st:
        click.echo(f"paths     socket {st['socket']}\n          data {st.get('data_dir')}\n"
                   f"          logs {st.get('log_dir')}\n          jobs {st.get('jobs_dir')}")
    conflicts = st.get("conflicts") or []
    if conflicts:
        click.echo(f"conflicts {len(conflicts)} job(s) defined differently on different "
                   "nodes:")
        for c in conflicts:
            click.echo(f"  {_conflict_text(c)}")
    problems = st.get("problems") or []
    if problems:
        click.echo(f"problems  {len(problems)} (`cronrd validate` checks the job files):")
        for p in problems:
            click.echo(f"  {p}")


JOBS_PAGE = 1000  # jobs asked for at once: the first page prints while the next is read


def job_pages(client, consistent: bool, match: str | None):
    """Every job, a page at a time (the daemon's `jobs` with limit/after)."""
    after = None
    while True:
        page = client.call("jobs", read_args(consistent, {"limit": JOBS_PAGE, "after": after,
                                                          "match": match}))
        yield page["jobs"]
        after = page["next"]
        if after is None:
            return
        consistent = False  # the first page waited for the cluster already


@click.command()
@click.argument("pattern", required=False)
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def jobs(obj: Ctx, pattern, consistent, as_json):
    """List jobs with their next fire time and last run (PATTERN: only the
    names it matches, shell-style, e.g. 'backup-*'). Printed a page at a
    time: the first lines come at once however many jobs there are."""
    if as_json:
        # One JSON list, a job per line, written as the daemon streams it:
        # its text is not decoded and encoded again here.
        out = sys.stdout
        first = [True]

        def write(msg: dict) -> None:
            if msg.get("data"):
                out.write(("[\n" if first[0] else ",\n") + msg["data"])
                out.flush()
                first[0] = False
        obj.client().call("jobs", read_args(consistent, {"stream": True, "match": pattern}),
                          on_message=write)
        out.write("[]\n" if first[0] else "\n]\n")
        return
    pages = job_pages(obj.client(), consistent, pattern)
    headers = ["job", "schedule", "state", "next fire", "last run"]
    widths: list[int] | None = None
    conflicts: list[str] = []
    last_good: list[str] = []
    for page in pages:
        out = []
        for j in page:
            state = "paused" if j["paused"] else ("disabled" if not j["enabled"] else "active")
            if state == "active" and not j["next_fire"] and \
                    j["schedule"].lstrip().lower().startswith("@at"):
                state = "done"   # its one fire time was handled
            if j.get("watch"):
                state += " (watch)"
            if j.get("file_problem"):
                state += " (last good)"
                last_good.append(f"{j['name']}: {j['file_problem']}")
            if j.get("conflict") is not None:
                state += " CONFLICT"
                text = _conflict_text(j["conflict"])
                conflicts.append(text if j["name"] in text else f"{j['name']}: {text}")
            last = j["last_run"]
            out.append([j["name"], j["schedule"], state, j["next_fire"],
                        f"{last['state']} {last['fire_time']}" if last else None])
        widths = table(out, headers, widths, header=widths is None)
    if widths is None:
        table([], headers)
    if conflicts:
        click.echo("\nCONFLICT: defined differently on different nodes; the job keeps its "
                   "last agreed version until the job files agree:")
        for c in conflicts:
            click.echo(f"  {c}")
    if last_good:
        click.echo("\nLAST GOOD: these jobs keep running their last good version because "
                   "their file has a problem (`cronrd validate`):")
        for c in last_good:
            click.echo(f"  {c}")


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--next", "count", default=5, show_default=True, type=click.IntRange(0, 100),
              help="How many next fire times to show.")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def show(obj: Ctx, job, count, consistent, as_json):
    """Everything about one job: state, definition, source file(s), next
    fire times, running runs and the last runs."""
    j = obj.client().call("job", read_args(consistent, {"name": job, "next": count}))
    if as_json:
        emit_json(j)
        return
    print_job(j, Clock().now())


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--dot", is_flag=True, help="Graphviz DOT (pipe it to `dot -Tsvg`).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def graph(obj: Ctx, job, dot, consistent, as_json):
    """The dependency graph (depends_on), each job with its last run; with
    JOB, only its ancestors and descendants."""
    g = obj.client().call("graph", read_args(consistent, {"job": job}))
    if as_json:
        emit_json(g)
    elif dot:
        click.echo(graph_dot(g))
    else:
        click.echo(graph_text(g, job))


def _graph_label(j: dict) -> str:
    if j["missing"]:
        return "(no such job)"
    last = j["last_run"]
    state = "never ran" if last is None else f"{last['state']} {last['fire_time']}"
    if last is not None and last["state"] in ("skipped", "waiting", "failed") and last["reason"]:
        state += f" ({last['reason']})"
    rule = f", {j['trigger_rule']}" if j["trigger_rule"] else ""
    return f"[{j['schedule']}{rule}] {state}"


def graph_text(g: dict, focus: str | None = None) -> str:
    """The graph as indented trees from the jobs without parents; a job
    reached again (a fan-in) is named with "(see above)"."""
    by_name = {j["name"]: j for j in g["jobs"]}
    children: dict[str, list[str]] = {}
    has_parent: set[str] = set()
    for parent, child in g["edges"]:
        children.setdefault(parent, []).append(child)
        has_parent.add(child)
    if not by_name:
        return "no job has depends_on"
    lines: list[str] = []
    shown: set[str] = set()

    def walk(name: str, prefix: str, last: bool, top: bool) -> None:
        mark = "" if top else ("`-- " if last else "|-- ")
        here = " <" if name == focus else ""
        if name in shown:
            lines.append(f"{prefix}{mark}{name}{here} (see above)")
            return
        shown.add(name)
        lines.append(f"{prefix}{mark}{name}{here}  {_graph_label(by_name[name])}")
        kids = sorted(children.get(name, ()))
        inner = prefix + ("" if top else ("    " if last else "|   "))
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    roots = [n for n in sorted(by_name) if n not in has_parent]
    for root in roots or sorted(by_name)[:1]:
        walk(root, "", True, True)
    for name in sorted(by_name):  # in a cycle only
        if name not in shown:
            walk(name, "", True, True)
    if g.get("truncated"):
        lines.append("... more jobs not shown; name one: cronrd graph JOB")
    return "\n".join(lines)


def graph_dot(g: dict) -> str:
    """The graph in Graphviz DOT: an edge from each parent to its child."""
    colours = {"succeeded": "palegreen", "failed": "salmon", "timed_out": "salmon",
               "lost": "salmon", "cancelled": "lightgrey", "skipped": "lightgrey",
               "running": "lightblue", "waiting": "khaki", "pending": "khaki",
               "assigned": "khaki"}

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace(
            "\n", "\\n") + '"'

    out = ["digraph cronrd {", "  rankdir=LR;", "  node [shape=box, style=filled];"]
    for j in g["jobs"]:
        last = j["last_run"]
        state = "missing" if j["missing"] else (last["state"] if last else "never ran")
        label = f"{j['name']}\n{j['schedule'] or 'no such job'}\n{state}"
        out.append(f"  {q(j['name'])} [label={q(label)}, fillcolor="
                   f"{colours.get(state, 'white')}];")
    within = {(p["job"], j["name"]): p.get("within") for j in g["jobs"] for p in j["parents"]}
    for parent, child in g["edges"]:
        w = within.get((parent, child))
        attr = f' [label="within {w:g}s", style=dashed]' if w else ""
        out.append(f"  {q(parent)} -> {q(child)}{attr};")
    out.append("}")
    return "\n".join(out)


def _pause_text(p: dict | None) -> str:
    if not p:
        return ""
    by = f" by {p['by']}" if p.get("by") else ""
    note = f": {p['note']}" if p.get("note") else ""
    return printable(f"{by} at {p.get('at')}{note}")


def print_job(j: dict, now: float) -> None:
    import yaml
    state = j.get("state") or ("paused" if j["paused"] else "active")
    if state == "paused":
        state += _pause_text(j.get("pause")) + "; `cronrd resume " + j["name"] + "` ends it"
    elif state == "disabled":
        state += " (enabled: false in its job file)"
    elif state.startswith("paused (maintenance)"):
        state = "paused for maintenance" + _pause_text(j.get("maintenance")) + \
            "; `cronrd resume --all` ends it"
    if j.get("file_problems"):
        state += ", running its last good version because its file has problems:"
    click.echo(f"job        {j['name']}")
    click.echo(f"state      {state}")
    for p in j.get("file_problems") or []:
        click.echo(f"             {p}")
    if j.get("conflict") is not None:
        click.echo(f"CONFLICT   {_conflict_text(j['conflict'])}")
    if j.get("description"):
        click.echo(f"about      {j['description']}")
    click.echo(f"schedule   {j['schedule']}  ({j['timezone']})")
    cmd = j["command"]
    text = cmd.rstrip("\n") if isinstance(cmd, str) else json.dumps(cmd)
    click.echo("command    " + text.replace("\n", "\n           "))
    sources = j.get("sources") or []
    if sources:
        click.echo("source     " + "\n           ".join(
            f"{s.get('node')}: {s.get('source')}" + ("" if s.get("digest") == j.get("digest")
                                                     else " (a different definition)")
            for s in sources))
    elif j.get("source"):
        click.echo(f"source     {j['source']}")
    nxt = j.get("next_fires") or []
    if nxt:
        from ..schedule import format_fire, parse_iso
        skips = j.get("next_skips") or {}
        click.echo("next       " + "\n           ".join(
            format_fire(parse_iso(t), j["timezone"])
            + (f"  skipped: {skips[t]}" if t in skips else "") for t in nxt))
    elif state == "done":
        click.echo("next       none (its one fire time, @at, was handled)")
    else:
        click.echo("next       none (" + ("not scheduled while " + state.split(" ")[0]
                                          if not state.startswith("active") else
                                          "the schedule fires no more, or only at boot")
                   + ")")
    plans = j.get("planned") or []
    if plans:
        from ..schedule import format_fire, parse_iso
        click.echo("planned    " + "\n           ".join(
            f"{format_fire(parse_iso(p['due']), j['timezone'])}  plan {p['plan_id']} by "
            f"{p['by']}" for p in plans) + "\n           (`cronrd cancel --plan ID` removes one)")
    active = j.get("active_runs") or []
    if active:
        click.echo(f"active     {len(active)} run(s):")
        table([run_row(r, now, False) for r in active], RUN_HEADERS)
        _echo_heartbeats(active, now)
    recent = j.get("recent_runs") or []
    click.echo(f"\nlast {len(recent)} run(s):" if recent else "\nno runs yet")
    if recent:
        table([run_row(r, now, False) for r in recent], RUN_HEADERS)
        _echo_inputs(recent)
    written = j.get("written") or {}
    if written.get("lines"):
        click.echo(f"\nas written in {written['path']} (on {written['node']}):")
        width = len(str(written["lines"][-1][0]))
        for n, line in written["lines"]:
            click.echo(f"  {n:>{width}}  {line}".rstrip())
    elif "effective" not in j:   # a daemon before 0.3.0: its normalised definition
        click.echo("\ndefinition:")
        text = yaml.safe_dump(j.get("spec") or {}, sort_keys=False, default_flow_style=False)
        click.echo("  " + text.rstrip("\n").replace("\n", "\n  "))
    else:
        click.echo(f"\nas written: {written.get('why') or 'its file is not readable here'}")
    if j.get("effective"):
        click.echo("\nin force (* from the file; the rest are defaults):")
        width = max(len(k) for k, _, _ in j["effective"])
        for key, value, default in j["effective"]:
            mark = " " if default else "*"
            click.echo(f"  {mark} {key:<{width}}  " + str(value).replace(
                "\n", "\n" + " " * (width + 6)))


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@click.option("--at", "at", metavar="TIME", help="The fire time to explain: ISO 8601, UTC "
              "unless it has an offset (2026-03-29T01:00:00Z, 2026-03-29T03:00+02:00).")
@click.option("--next", "next_", is_flag=True, help="Explain the next fire time: what would "
              "happen to it now.")
@click.option("--local", is_flag=True, help="--at is the wall clock of the job's time zone "
              "(2026-03-29T02:30).")
@consistent_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def explain(obj: Ctx, job, at, next_, local, consistent, as_json):
    """Why JOB did (not) run at a fire time, or what will happen at one: the
    schedule and its daylight-saving rule, the job's definition, pauses (who,
    why), catch-up, overlap, a child's parents and trigger rule, placement and
    every attempt, then a verdict. Without --at or --next: its latest fire
    time. An @after child: --at T is the fire time of one of its records (the
    newest parent fire time it consumed); --next is its gate now (which
    parents it waits for)."""
    if at is not None and next_:
        raise UsageError("give --at TIME or --next, not both")
    if local and at is None:
        raise UsageError("--local says how to read --at TIME: give --at too")
    args: dict[str, Any] = {"job": job}
    if at is not None:
        args["at"] = at
    if local:
        args["local"] = True
    if next_:
        args["next"] = True
    res = obj.client().call("explain", read_args(consistent, args))
    if as_json:
        emit_json(res)
        return
    if res.get("at") is None:   # an @after child's next generation: no time yet
        click.echo(f"{'explain':<11} {res['job']}: its next generation (now {res['now']}, "
                   f"{res['timezone']}) - still to come")
    else:
        click.echo(f"{'explain':<11} {res['job']} at {res['at']} ({res['local']}, "
                   f"{res['timezone']})" + (" - still to come" if res.get("future") else ""))
    for step in res["steps"]:
        click.echo(f"{step['step']:<11} {step['text']}")
    click.echo(f"{'verdict':<11} {res['verdict']['text']}")


def _job_or_all(job: str | None, all_jobs: bool, command: str) -> None:
    if all_jobs and job:
        raise UsageError(f"give a JOB or --all, not both (`cronrd {command} --all`)")
    if not all_jobs and not job:
        raise UsageError(f"name the job to {command} (`cronrd jobs` lists them), or pass "
                         f"--all for every job")


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--all", "all_jobs", is_flag=True, help="Every job, for maintenance (root): "
              "`cronrd resume --all` ends it; jobs paused on their own stay paused.")
@click.option("--note", default="", metavar="TEXT", help="Why (shown by show and status).")
@click.pass_obj
def pause(obj: Ctx, job, all_jobs, note):
    """Stop scheduling a job (or --all); its fire times are recorded as skipped."""
    _job_or_all(job, all_jobs, "pause")
    res = obj.client().call("pause", {"job": job, "all": all_jobs, "note": note})
    if all_jobs:
        click.echo("every job paused for maintenance; `cronrd resume --all` ends it"
                   if res["changed"] else "already paused for maintenance (note updated)")
        return
    click.echo(f"{job} paused" if res["changed"] else f"{job} was already paused")


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@click.option("--all", "all_jobs", is_flag=True, help="End the maintenance pause of every job.")
@click.pass_obj
def resume(obj: Ctx, job, all_jobs):
    """Schedule a paused job again, or end `pause --all` (missed fires stay skipped)."""
    _job_or_all(job, all_jobs, "resume")
    res = obj.client().call("resume", {"job": job, "all": all_jobs})
    if all_jobs:
        click.echo("maintenance pause ended; jobs are scheduled again" if res["changed"]
                   else "there was no maintenance pause")
        return
    click.echo(f"{job} resumed" if res["changed"] else f"{job} was not paused")


@click.command()
@click.pass_obj
def reload(obj: Ctx):
    """Re-read the job files now (as SIGHUP does)."""
    res = obj.client().call("reload")
    click.echo(f"{res['jobs']} jobs, {res['changes']} changed")
    if res.get("waiting"):
        click.echo(f"from {res['waiting']} on, waiting for another node that reads the same "
                   "bytes: their jobs are copied from it when it is done (`cronrd status` "
                   "shows the count)", err=True)
    for p in res["problems"]:
        click.echo(p, err=True)
    if res["problems"]:
        sys.exit(1)

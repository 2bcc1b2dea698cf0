"""One seed, end to end: namespaces, a cluster, jobs, the seed's faults, heal,
convergence, checks. Everything started is stopped and removed in the end,
also on an error or Ctrl-C; the work directory (every node's daemon log, the
execution files, the run records) is kept when a check fails or on request.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cronrd.schedule import parse_duration
from harness import wait_for

from .actions import run_fault, sleep_until
from .checker import ACTIVE, Execution, Report, check, epoch
from .net import Lab
from .nodes import FaultCluster, build_preload, faketime_lib
from .schedule import CLOCK_KINDS, KINDS, Fault, make_schedule

NODE_IDS = ("a", "b", "c", "d", "e")
RUNS_LIMIT = 100000
# Job i: schedule, seconds it runs, on_node_loss. Every second and every two
# seconds; some runs last long enough to be in flight when a fault hits.
JOB_SHAPES = [("* * * * * *", 0, "retry"), ("* * * * * *", 1.5, "retry"),
              ("*/2 * * * * *", 0.3, "retry"), ("* * * * * *", 0.2, "retry"),
              ("*/2 * * * * *", 0, "fail"), ("* * * * * *", 3, "retry")]


@dataclass
class Options:
    seed: int
    duration: float = 60.0          # faults start within this many seconds
    nodes: int = 3
    jobs: int = 12
    node_timeout: str = "10s"       # cronrd's defaults
    election_timeout: str = "500ms"
    max_clock_offset: float = 0.5   # cronrd's default cluster.max_clock_offset
    early_slack: float = 0.05
    warmup: float = 5.0             # steady state before the first fault
    after: float = 10.0             # steady state after the heal, still judged
    kinds: list[str] | None = None
    max_lateness: float | None = None   # a failure above this (None: reported only)
    stuck_timeout: float = 60.0
    keep: bool = False
    log_level: str = "info"


@dataclass
class SeedResult:
    seed: int
    schedule: list[Fault]
    faults: list[dict] = field(default_factory=list)
    report: Report | None = None
    error: str | None = None
    kept: str | None = None
    evidence: list[str] = field(default_factory=list)
    window: tuple[int, int] | None = None

    def failures(self) -> dict[str, int]:
        out = dict(self.report.failures()) if self.report else {}
        if self.error:
            out["error"] = 1
        return out

    @property
    def ok(self) -> bool:
        return not self.failures()


def jobs_body(n: int, out_dir: Path) -> dict:
    jobs = []
    for i in range(n):
        schedule, runs_for, on_loss = JOB_SHAPES[i % len(JOB_SHAPES)]
        # The start, as the job sees it on the true clock: `date` without any
        # LD_PRELOAD (the daemon's faketime must not reach it).
        line = ('echo "$CRONRD_JOB $CRONRD_FIRE_TIME $CRONRD_ATTEMPT $CRONRD_NODE '
                '$(env -u LD_PRELOAD date +%s.%N) $CRONRD_RUN_ID" '
                f'>> {out_dir}/exec-$CRONRD_NODE.log')
        jobs.append({"name": f"fj{i:02d}", "schedule": schedule,
                     "command": line + (f"; sleep {runs_for}" if runs_for else ""),
                     "catchup": "all", "concurrency": "allow", "on_node_loss": on_loss})
    return {"jobs": jobs}


def read_executions(out_dir: Path) -> list[Execution]:
    out = []
    for path in sorted(out_dir.glob("exec-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            e = Execution.parse(line)
            if e is not None:
                out.append(e)
    return out


def probe(work: Path, lab: Lab) -> tuple[dict[str, str | None], str | None]:
    """Why each optional fault mechanism is unavailable here (None: it works)."""
    reasons: dict[str, str | None] = {
        "netem": lab.qdisc_works("netem", "delay", "1ms"),
        "tbf": lab.qdisc_works("tbf", "rate", "1mbit", "burst", "16kb", "latency", "400ms"),
        "faketime": None if faketime_lib() else "faketime not installed (apt-get install faketime)",
    }
    if reasons["netem"]:
        reasons["netem"] = f"tc netem unavailable ({reasons['netem']}; the kernel needs sch_netem)"
    lib, why = build_preload(work)
    reasons["fsync"] = why
    probe_dir = work / "tmpfs-probe"
    probe_dir.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "cfx-probe", str(probe_dir)],
                         capture_output=True, text=True)
    if res.returncode == 0:
        subprocess.run(["umount", str(probe_dir)], capture_output=True)
        reasons["tmpfs"] = None
    else:
        reasons["tmpfs"] = f"cannot mount a tmpfs: {res.stderr.strip()}"
    probe_dir.rmdir()
    return reasons, lib


def run_seed(opts: Options, log: Callable[[str], None] = print) -> SeedResult:
    node_ids = list(NODE_IDS[:opts.nodes])
    nt = parse_duration(opts.node_timeout)
    kinds = opts.kinds or [k for k in KINDS if k != "split" or opts.nodes >= 5]
    schedule = make_schedule(opts.seed, opts.duration, node_ids, nt, kinds)
    result = SeedResult(opts.seed, schedule)
    work = Path(tempfile.mkdtemp(prefix=f"cfx-{opts.seed}-", dir="/tmp"))
    out_dir = work / "out"
    out_dir.mkdir()
    c = None
    log(f"seed {opts.seed}: {len(schedule)} faults over {opts.duration:g} s, {opts.nodes} nodes, "
        f"{opts.jobs} jobs, node_timeout {opts.node_timeout}; work dir {work}")
    try:
        with Lab(node_ids) as lab:
            try:
                reasons, preload = probe(work, lab)
                wanted = lambda kinds: {f.target for f in schedule if f.kind in kinds}  # noqa: E731
                c = FaultCluster(lab, work, node_timeout=opts.node_timeout,
                                 election_timeout=opts.election_timeout,
                                 clock_nodes=wanted(CLOCK_KINDS) if not reasons["faketime"] else (),
                                 fsync_nodes=(set(node_ids) if any(
                                     f.kind == "slow-fsync-leader" for f in schedule)
                                     else wanted(("slow-fsync",))),
                                 disk_nodes=wanted(("disk-full",)) if not reasons["tmpfs"] else (),
                                 preload=preload, log_level=opts.log_level)
                names = [j["name"] for j in jobs_body(opts.jobs, out_dir)["jobs"]]
                specs = {j["name"]: j for j in jobs_body(opts.jobs, out_dir)["jobs"]}
                c.write_job("faultsuite", jobs_body(opts.jobs, out_dir))
                c.start()
                wait_for(lambda: all(n.call("status", timeout=2)["jobs"] == opts.jobs for n in c),
                         40, what="every node to load the jobs", on_fail=c.logs)
                t_ready = time.time()
                first = int(t_ready) + 3
                origin = t_ready + opts.warmup
                for i, f in enumerate(schedule):
                    result.faults.append(run_fault(c, f, origin, opts.seed, i, reasons, log))
                # Heal everything (each fault healed itself; this is the belt and braces).
                lab.heal_all()
                for nid in c.clock_file:
                    c.set_clock(nid, 0.0)
                for nid in c.fsync_file:
                    c.set_fsync_delay(nid, 0)
                for nid in c.fill_file:
                    c.free_disk(nid)
                started = c.heal_processes()
                if started:
                    log(f"  heal: started {', '.join(started)} again")
                c.wait_all_ready(timeout=60)
                c.leader(timeout=30)
                t_heal = time.time()
                log(f"  healed at +{t_heal - origin:.1f} s; {opts.after:g} s of steady state")
                sleep_until(t_heal + opts.after)
                # The end of the judged window: pause every job so the state settles.
                lead = c.leader(timeout=30)
                for name in names:
                    wait_for(lambda name=name: lead.call("pause", {"job": name}, timeout=10) or True,
                             30, what=f"pause {name}")
                t_pause = time.time()
                last = int(t_pause) - 3
                result.window = (first, last)

                def settled():
                    runs = lead.call("runs", {"limit": RUNS_LIMIT}, timeout=60)["runs"]
                    return [r for r in runs if r["state"] in ACTIVE
                            and epoch(r["fire_time"]) <= last] or None
                stuck = _until_none(settled, opts.stuck_timeout)
                try:
                    c.converged(timeout=60)
                    digests = True
                except AssertionError:
                    digests = False
                runs = lead.call("runs", {"limit": RUNS_LIMIT}, timeout=60)["runs"]
                execs = read_executions(out_dir)
                done = [f for f in result.faults if not f.get("skipped")]
                rep = check(runs, execs, {n: specs[n] for n in names}, first, last, done,
                            max_offset=opts.max_clock_offset, slack=opts.early_slack,
                            stuck=stuck, max_lateness=opts.max_lateness)
                rep.digests_equal = digests
                if not digests:
                    rep.notes.append("state digests differ: " + "; ".join(
                        f"{n.config['node_id']}={_digest(n)}" for n in c))
                result.report = rep
                (work / "runs.json").write_text(json.dumps(runs))
                if not result.ok:
                    result.evidence = evidence(rep, runs, c)
            finally:
                if c is not None:      # before the namespaces go
                    c.stop_restarting()
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    except BaseException:          # Ctrl-C, SIGTERM: clean up, then stop
        _cleanup(c, work, keep=opts.keep)
        raise
    keep = opts.keep or not result.ok
    _cleanup(c, work, keep=keep)
    if keep:
        result.kept = str(work)
    return result


def _cleanup(c: FaultCluster | None, work: Path, keep: bool) -> None:
    if c is None:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        return
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    for n in c:
        try:
            shutil.copy(n.log_file, logs / f"{n.config['node_id']}.log")
        except OSError:
            pass
    c.cleanup()
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


def _digest(node) -> str:
    try:
        st = node.call("status", timeout=2)
        return f"{st['state_digest'][:12]}@{st['applied_index']}"
    except Exception as exc:
        return f"? ({exc})"


def _until_none(pred, timeout: float):
    """Poll ``pred`` until it returns None; its last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        try:
            value = pred()
        except Exception:
            value = value or []
            time.sleep(0.2)
            continue
        if value is None:
            return []
        time.sleep(0.2)
    return value or []


def evidence(rep: Report, runs: list[dict], c: FaultCluster, limit: int = 6) -> list[str]:
    """For the first anomalies: their records and the daemons' log lines that
    name the fire time or the run ids."""
    from cronrd.schedule import iso_utc
    picks: list[tuple[str, str, int]] = []
    for name in ("dup_records", "dup_exec", "early", "at_most_once", "missed", "unrecorded"):
        for item in getattr(rep, name)[:2]:
            picks.append((name, item[0], item[1]))
    for r in rep.stuck[:2]:
        picks.append(("stuck", r["job"], int(epoch(r["fire_time"]))))
    out = []
    for what, job, t in picks[:limit]:
        iso = iso_utc(t)
        recs = [r for r in runs if r["job"] == job and r["fire_time"] == iso]
        out.append(f"{what}: {job} @ {iso}")
        for r in recs:
            out.append("  record " + json.dumps({k: r.get(k) for k in (
                "run_id", "kind", "attempt", "state", "node", "started_at", "finished_at",
                "reason")}))
        ids = {f"run={r['run_id']} " for r in recs} | {f"run_id={r['run_id']} " for r in recs}
        for n in c:
            try:
                text = n.log_file.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if iso in line or any(i in line + " " for i in ids):
                    out.append(f"  [{n.config['node_id']}] {line[:300]}")
    return out[:200]

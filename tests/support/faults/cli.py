"""Long mode: many seeds, a table per seed, totals and lateness per fault kind.

    python bench/faults.py --seeds 20 --duration 120
    python bench/faults.py --seed 1234              # replay one seed
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys

from .checker import Report, percentile
from .net import missing_tools
from .runner import Options, SeedResult, run_seed
from .schedule import KINDS

COLUMNS = ("dup_records", "missed", "dup_exec", "unrecorded", "early", "at_most_once", "stuck",
           "too_late")


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}"


def summary_row(r: SeedResult) -> str:
    rep = r.report
    if rep is None:
        return f"{r.seed:>10}  ERROR {r.error}"
    st = rep.lateness_stats()
    cells = [f"{len(getattr(rep, c)):>5}" for c in COLUMNS]
    return (f"{r.seed:>10} {len(r.faults):>6} {rep.fires_expected:>6} {rep.executions:>6} "
            + " ".join(cells)
            + f" {'yes' if rep.digests_equal else 'NO':>7} {len(rep.retried):>7} "
              f"{ms(st['p50']):>6} {ms(st['p99']):>6} {ms(st['max']):>6}"
            + ("" if r.ok else "  FAIL " + " ".join(f"{k}={v}" for k, v in r.failures().items())))


HEADER = (f"{'seed':>10} {'faults':>6} {'fires':>6} {'execs':>6} "
          + " ".join(f"{c[:5]:>5}" for c in COLUMNS)
          + f" {'digests':>7} {'retried':>7} {'p50ms':>6} {'p99ms':>6} {'maxms':>6}")


def kind_table(results: list[SeedResult]) -> list[str]:
    """Lateness and anomalies per fault kind over every seed."""
    late: dict[str, list[float]] = {}
    count: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for r in results:
        for f in r.faults:
            if f.get("skipped"):
                skipped[f["kind"]] = f["skipped"]
            else:
                count[f["kind"]] = count.get(f["kind"], 0) + 1
        if r.report:
            for kind, vals in r.report.by_kind.items():
                late.setdefault(kind, []).extend(vals)
    lines = [f"{'fault kind':>14} {'times':>5} {'fires':>6} {'p50ms':>6} {'p99ms':>6} "
             f"{'maxms':>6} {'>1s':>5}"]
    for kind in sorted(late, key=lambda k: (k != "(no fault)", k)):
        v = late[kind]
        lines.append(f"{kind:>14} {count.get(kind, '-'):>5} {len(v):>6} "
                     f"{ms(percentile(v, 50)):>6} {ms(percentile(v, 99)):>6} "
                     f"{ms(max(v)):>6} {sum(1 for x in v if x > 1.0):>5}")
    for kind, why in sorted(skipped.items()):
        if kind not in count:
            lines.append(f"{kind:>14} not made here: {why}")
    return lines


def print_result(r: SeedResult) -> None:
    for f in r.faults:
        if f.get("exited"):
            print(f"  seed {r.seed}: daemon(s) exited on their own during {f['kind']}: "
                  f"{', '.join(f['exited'])}")
    rep = r.report
    if rep is not None:
        for note in rep.notes:
            print(f"  note: {note}")
        for name in COLUMNS:
            items = getattr(rep, name)
            if items:
                print(f"  {name}: {len(items)}, e.g. {items[:3]}")
        if rep.retried:
            print(f"  retried (at-least-once after a node was declared lost, reported): "
                  f"{len(rep.retried)}, e.g. {rep.retried[:3]}")
        if rep.unexecuted:
            print(f"  never executed (record states): {len(rep.unexecuted)}, e.g. "
                  f"{rep.unexecuted[:3]}")
    if r.error:
        print(f"  error: {r.error}")
    for line in r.evidence:
        print("  " + line)
    if r.kept:
        print(f"  kept: {r.kept} (logs/, out/, runs.json)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="fresh random seeds to run (default 5)")
    ap.add_argument("--seed", type=int, action="append", help="run this seed (repeatable)")
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds within which the faults start (default 120)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--node-timeout", default="10s")
    ap.add_argument("--election-timeout", default="500ms")
    ap.add_argument("--kinds", help="comma-separated fault kinds (default all): "
                                    + ", ".join(KINDS))
    ap.add_argument("--max-lateness", type=float, default=None,
                    help="seconds; a fire first executed later is a failure (default: reported)")
    ap.add_argument("--keep", action="store_true", help="keep every work directory")
    ap.add_argument("--json", action="store_true", help="one JSON line per seed at the end")
    ap.add_argument("--log-level", default="info", choices=("debug", "info", "warning"),
                    help="the daemons' log_level (debug: every clock report and fence)")
    args = ap.parse_args(argv)
    problems = missing_tools()
    if problems:
        print("cannot run the fault suite here: " + "; ".join(problems), file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, _f: sys.exit(128 + signum))
    seeds = args.seed or [random.SystemRandom().randrange(1, 10 ** 9) for _ in range(args.seeds)]
    kinds = args.kinds.split(",") if args.kinds else None
    results = []
    for seed in seeds:
        opts = Options(seed=seed, duration=args.duration, nodes=args.nodes, jobs=args.jobs,
                       node_timeout=args.node_timeout, election_timeout=args.election_timeout,
                       kinds=kinds, max_lateness=args.max_lateness, keep=args.keep,
                       log_level=args.log_level)
        r = run_seed(opts, log=lambda s: print(s, flush=True))
        results.append(r)
        print(HEADER)
        print(summary_row(r), flush=True)
        print_result(r)
    print()
    print(HEADER)
    for r in results:
        print(summary_row(r))
    totals = {c: sum(len(getattr(r.report, c)) for r in results if r.report) for c in COLUMNS}
    allv = [v for r in results if r.report for v in r.report.lateness.values()]
    print(f"{'total':>10} {sum(len(r.faults) for r in results):>6} "
          f"{sum(r.report.fires_expected for r in results if r.report):>6} "
          f"{sum(r.report.executions for r in results if r.report):>6} "
          + " ".join(f"{totals[c]:>5}" for c in COLUMNS)
          + f" {sum(1 for r in results if r.report and not r.report.digests_equal):>7} "
            f"{sum(len(r.report.retried) for r in results if r.report):>7} "
            f"{ms(percentile(allv, 50)):>6} {ms(percentile(allv, 99)):>6} "
            f"{ms(max(allv) if allv else None):>6}")
    print("columns: dup_r(ecords) same (job, fire, attempt) recorded twice; missed: an expected "
          "fire time without a record; dup_e(xec): one attempt executed twice; unrec(orded): an "
          "execution without a record; early: started > max_clock_offset + 50 ms before its "
          "fire time (true clock); at_mo(st_once): on_node_loss fail executed twice; stuck: "
          "pending/assigned/running after the heal; too_l(ate): over --max-lateness; "
          "digests: 'NO' counts seeds whose nodes disagree; retried: fire times executed by "
          "two attempts (at-least-once, reported); lateness: first execution of a fire time")
    print()
    for line in kind_table(results):
        print(line)
    failed = [r.seed for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} seeds passed"
          + (f"; failed: {failed} (replay: python bench/faults.py --seed N)" if failed else ""))
    if args.json:
        for r in results:
            print(json.dumps(as_json(r)))
    return 1 if failed else 0


def as_json(r: SeedResult) -> dict:
    rep: Report | None = r.report
    return {"seed": r.seed, "ok": r.ok, "failures": r.failures(), "error": r.error,
            "faults": [{k: f.get(k) for k in ("kind", "target", "skipped")} for f in r.faults],
            "lateness": rep.lateness_stats() if rep else None,
            "retried": len(rep.retried) if rep else None, "kept": r.kept}

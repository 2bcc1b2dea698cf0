#!/usr/bin/env python3
"""API read benchmark (issue 16): how fast are the HTTP API's main reads with
100,000 jobs and 1,000,000 runs in history, next to the same reads over the
control socket?

1. Writes ``--jobs`` jobs in ``--files`` job files (each at its own minute and
   hour of the day, command ``true``: bench/scale.py's fleet, without its
   every-second job), starts a daemon (HTTP on a free loopback port), waits
   until it shows every job, makes a viewer token, and stops it.
2. Writes ``--runs`` finished run records straight into its state database
   (in fire-time order, so run ids grow with time as they do live): one
   "hot" job gets ``--hot-runs`` (one a minute), the others ten each (one a
   day over the last ten days) until the total is reached; 90 % succeeded,
   8 % failed, 2 % skipped. The records' triggers count the outcomes; the
   per-job histograms are then rebuilt from the records with the same
   statements a migration uses (state/schema.py SEED_JOB_HISTOGRAMS).
3. Starts the daemon again on that state and measures, each ``--n`` times on
   one keep-alive HTTP connection (p50/p99 in ms, wall time per request
   including reading the body):

   * ``GET /api/v1/jobs?limit=100`` (the first page, then pages after random
     names: keyset paging, so any page should cost the same);
   * ``GET /api/v1/runs?job=HOT&limit=100`` and the same for a job with ten
     runs, and ``GET /api/v1/runs?limit=100`` (every job, newest first);
   * ``GET /api/v1/runs/{id}`` of random run ids, when the server has that
     route (a 404 for a run that exists means it does not: skipped, said so);

   next to the control socket's ``jobs``, ``runs`` and ``run`` requests from
   this process (one connection per request, as the CLI makes), and
   ``cronrd runs HOT --limit 100 --json`` as a process (``--cli-n`` times:
   interpreter start included). Then one ``GET /metrics`` (a render: the
   first scrape), its size and sample count, and a second one (cached).

The last line is ``RESULT jobs_p99_ms=... runs_job_p99_ms=... run_p99_ms=...
metrics_s=...``. Target (issue 16): p99 <= 50 ms for a page of 100.

    python bench/api.py --jobs 2000 --runs 20000 --hot-runs 2000   # quick
    python bench/api.py                                            # 100k / 1M
"""

from __future__ import annotations

import argparse
import functools
import http.client
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import apsw

print = functools.partial(print, flush=True)  # noqa: A001 (progress as it happens)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import Node, wait_for  # noqa: E402
from scale import jobs_known, peak_rss_mb, write_fleet  # noqa: E402

from cronrd.client import Client  # noqa: E402
from cronrd.state.schema import SEED_JOB_HISTOGRAMS  # noqa: E402

DAY = 86400
COLS = ("job", "origin", "kind", "fire_time", "attempt", "target", "state", "node", "token",
        "due_at", "created_at", "started_at", "finished_at", "exit_code", "reason")


def record(job: str, fire: int, i: int) -> tuple:
    """One finished scheduled run of ``job`` at ``fire`` (``i`` varies it)."""
    r = i % 50
    if r == 0:  # 2 % skipped
        return (job, "schedule", "scheduled", fire, 1, "", "skipped", None, None, None,
                fire - 0.1, None, fire + 0.0, None, "overlap: run still running")
    state, code = ("failed", 1) if r <= 4 else ("succeeded", 0)  # 8 % failed
    start = fire + (i % 97) / 100.0
    return (job, "schedule", "scheduled", fire, 1, "", state, "n1", i, float(fire),
            fire - 0.1, start, start + 0.5 + (i % 600) / 10.0, code, None)


def fill(db: str, names: list[str], runs: int, hot_runs: int, now: float) -> dict:
    """Write ``runs`` records: ``hot_runs`` for names[0] (one a minute up to
    two minutes ago), ten (a day apart) for each next name until the total."""
    hot, others = names[0], names[1:1 + max(0, runs - hot_runs) // 10]
    day0 = int(now) - 10 * DAY   # the ten days up to now: the last 24 h hold a full day
    hot_first = int(now) - 120 - 60 * hot_runs
    conn = apsw.Connection(db)
    conn.execute("PRAGMA busy_timeout=10000")
    sql = (f"INSERT INTO runs({', '.join(COLS)}) VALUES({', '.join('?' * len(COLS))})")
    t0 = time.monotonic()
    n = 0
    with conn:
        for d in range(10):  # a day's records at a time, in fire-time order
            lo = day0 + d * DAY
            batch = [record(job, lo + (k * 37) % DAY, k * 10 + d)
                     for k, job in enumerate(others, start=1)]
            if d == 9:  # the hot job's runs: from hot_first on, into the last day's batch
                batch += [record(hot, hot_first + 60 * m, m) for m in range(hot_runs)]
            batch.sort(key=lambda r: r[3])
            conn.executemany(sql, batch)
            n += len(batch)
        conn.execute("DELETE FROM job_histograms")
        for stmt in SEED_JOB_HISTOGRAMS:
            conn.execute(stmt)
    took = time.monotonic() - t0
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cold = others[len(others) // 2] if others else hot
    conn.close()
    return {"runs": n, "fill_s": took, "hot": hot, "cold": cold}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary(ms: list[float]) -> str:
    return f"p50 {statistics.median(ms):7.1f} ms   p99 {pct(ms, 99):7.1f} ms   (n={len(ms)})"


class Http:
    def __init__(self, url: str, token: str, cookie: bool = False):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        self.headers = ({"Cookie": f"cronrd_session={token}"} if cookie else
                        {"Authorization": f"Bearer {token}"})

    def get(self, path: str) -> tuple[int, bytes, float]:
        t0 = time.perf_counter()
        self.conn.request("GET", path, headers=self.headers)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body, (time.perf_counter() - t0) * 1000


def timed(fn, n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--hot-runs", type=int, default=10_000,
                    help="records of the one job with many (history_max_runs_per_job "
                         "keeps 10,000)")
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--dag", type=int, default=300,
                    help="jobs in a dependency tree besides the fleet (the graph's pages)")
    ap.add_argument("--n", type=int, default=200, help="requests per measured read")
    ap.add_argument("--cli-n", type=int, default=10, help="`cronrd runs` processes")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds between the restart and the first measurement (the "
                         "start's own work, such as the first gc.freeze, is not steady "
                         "state)")
    ap.add_argument("--warmup", type=int, default=10, help="unmeasured requests per read")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--job-histograms", type=int, default=None, metavar="N",
                    help="http.job_histograms (default: the daemon's, 10,000 jobs)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    rng = random.Random(16)
    http_cfg = {"listen": "127.0.0.1:0"}
    if args.job_histograms is not None:
        http_cfg["job_histograms"] = args.job_histograms
    node = Node("n1", log_level="info", http=http_cfg)

    def loaded(want: int):
        if node.proc.poll() is not None:
            raise SystemExit(f"the daemon exited ({node.proc.returncode}):\n"
                             + node.daemon_log()[-3000:])
        return jobs_known(node) >= want
    try:
        write_fleet(node.jobs_dir, args.jobs, args.files)
        (node.jobs_dir / "tick.yaml").unlink()  # no every-second job: reads only
        write_dag(node.jobs_dir, args.dag)
        t0 = time.monotonic()
        node.start(wait=False)
        wait_for(lambda: loaded(args.jobs + args.dag), args.timeout, interval=0.5,
                 what=f"{args.jobs + args.dag} jobs loaded")
        print(f"loaded {args.jobs} jobs in {time.monotonic() - t0:.1f} s")
        token = node.cli("token", "create", "--name", "bench", "--role", "viewer"
                         ).stdout.strip()
        node.terminate()
        names = [n for (n,) in apsw.Connection(str(Path(node.config["data_dir"]) / "state.db"))
                 .execute("SELECT name FROM jobs ORDER BY name")]
        info = fill(str(Path(node.config["data_dir"]) / "state.db"), names, args.runs,
                    args.hot_runs, time.time())
        print(f"wrote {info['runs']} run records in {info['fill_s']:.1f} s "
              f"(hot job {info['hot']}, a job with ten: {info['cold']})")
        t0 = time.monotonic()
        node.start(wait=False)
        node.wait_ready(timeout=args.timeout)
        wait_for(lambda: loaded(args.jobs), args.timeout, interval=0.5,
                 what="the jobs after the restart")
        print(f"restarted on that state in {time.monotonic() - t0:.1f} s; measuring "
              f"from {args.settle:g} s later")
        time.sleep(args.settle)
        url = node.call("status")["http"]
        api = Http(url, token)
        res = {}
        hot, cold = info["hot"], info["cold"]

        def http_read(label: str, paths: list[str], client=api, tag="HTTP") -> list[float]:
            for p in paths[:args.warmup]:
                client.get(p)
            ms = []
            for p in paths:
                status, body, took = client.get(p)
                if status != 200:
                    raise SystemExit(f"{label}: GET {p} answered {status}: {body[:300]!r}")
                ms.append(took)
            print(f"  {tag:6s} {label:34s} {summary(ms)}")
            slow = sorted(range(len(ms)), key=lambda i: -ms[i])[:3]
            if ms and pct(ms, 99) > 2 * statistics.median(ms):  # where the tail is
                print("         the slowest: " + ", ".join(
                    f"#{i + 1} {ms[i]:.0f} ms" for i in sorted(slow)))
            return ms

        def sock_read(label: str, cmd: str, argss: list[dict]) -> list[float]:
            c = Client(node.socket, timeout=600)
            for a in argss[:args.warmup]:
                c.call(cmd, a)
            ms = timed(lambda i: c.call(cmd, argss[i]), len(argss))
            print(f"  socket {label:34s} {summary(ms)}")
            return ms

        after = [None] + [rng.choice(names) for _ in range(args.n - 1)]
        print(f"\nreads of a page of 100, {args.jobs} jobs, {info['runs']} runs:")
        jobs_paths = ["/api/v1/jobs?limit=100" + (
            "" if a is None else "&cursor=" + _cursor({"after": a})) for a in after]
        res["jobs"] = http_read("GET /api/v1/jobs?limit=100", jobs_paths)
        sock_read("jobs {limit: 100, after}", "jobs",
                  [{"limit": 100, **({} if a is None else {"after": a})} for a in after])
        res["runs_job"] = http_read("GET /api/v1/runs?job=HOT&limit=100",
                                    [f"/api/v1/runs?job={hot}&limit=100"] * args.n)
        sock_read("runs {job: HOT, limit: 100}", "runs",
                  [{"job": hot, "limit": 100}] * args.n)
        http_read("GET /api/v1/runs?job=TEN&limit=100",
                  [f"/api/v1/runs?job={cold}&limit=100"] * args.n)
        sock_read("runs {job: TEN, limit: 100}", "runs",
                  [{"job": cold, "limit": 100}] * args.n)
        res["runs_all"] = http_read("GET /api/v1/runs?limit=100",
                                    ["/api/v1/runs?limit=100"] * args.n)
        sock_read("runs {limit: 100}", "runs", [{"limit": 100}] * args.n)
        top = node.call("runs", {"limit": 1})["runs"][0]["run_id"]
        ids = [rng.randint(1, top) for _ in range(args.n)]
        status, body, _ = api.get(f"/api/v1/runs/{ids[0]}")
        if status == 404 and node.call("run", {"run_id": ids[0]}):
            print("  HTTP   GET /api/v1/runs/{id}                 skipped: this server has "
                  "no such route (404 for a run that exists; the api helper adds it)")
        else:
            res["run"] = http_read("GET /api/v1/runs/{id}", [f"/api/v1/runs/{i}" for i in ids])
        sock_read("run {run_id}", "run", [{"run_id": i} for i in ids])
        # the web UI's pages, as a browser with a session cookie gets them
        page = Http(url, login(url, token), cookie=True)

        def ui_read(label: str, paths: list[str]) -> list[float]:
            return http_read(label, paths, client=page, tag="UI")
        print("\nthe web UI's pages (HTML, a session cookie):")
        n_ui = max(args.n // 4, 20)
        res["ui_overview"] = ui_read("GET / (overview)", ["/"] * n_ui)
        res["ui_jobs"] = ui_read("GET /jobs (a page of 50)", ["/jobs"] * n_ui)
        res["ui_search"] = ui_read("GET /jobs?q=PATTERN", [f"/jobs?q={hot[:6]}*"] * n_ui)
        res["ui_job"] = ui_read("GET /jobs/HOT (grid, explain)", [f"/jobs/{hot}"] * n_ui)
        res["ui_runs"] = ui_read("GET /runs?job=HOT", [f"/runs?job={hot}"] * n_ui)
        res["ui_run"] = ui_read("GET /runs/{id}", [f"/runs/{i}" for i in ids[:n_ui]])
        # Issue 33: the pictures (server time to a page with its data; the
        # browser draws it), each wanted <= 300 ms
        print("\nthe pictures (issue 33; the target: <= 300 ms each):")
        res["ui_overview_1d"] = ui_read("GET /?span=1d (overview, a day)", ["/?span=1d"] * n_ui)
        res["ui_timeline_1h"] = ui_read("GET /timeline?span=1h", ["/timeline?span=1h"] * n_ui)
        res["ui_timeline_1d"] = ui_read("GET /timeline?span=1d (cut at 2,000)",
                                        ["/timeline?span=1d"] * n_ui)
        res["ui_graph"] = ui_read(f"GET /graph ({args.dag} jobs in a DAG)", ["/graph"] * n_ui)
        res["ui_graph_job"] = ui_read("GET /graph?job=dag-00001", ["/graph?job=dag-00001"] * n_ui)
        pictures = ("ui_overview", "ui_overview_1d", "ui_job", "ui_timeline_1h",
                    "ui_timeline_1d", "ui_graph", "ui_graph_job")
        over = [k for k in pictures if statistics.median(res[k]) > 300]
        print("  " + ("every picture's page within 300 ms (p50)" if not over else
                      "OVER 300 ms (p50): " + ", ".join(over)))
        cli = timed(lambda i: subprocess.run(
            [sys.executable, "-m", "cronrd", "--config", str(node.config_path), "runs", hot,
             "--limit", "100", "--json"], stdout=subprocess.DEVNULL, check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)}), args.cli_n)
        print(f"  CLI    cronrd runs HOT --limit 100 --json  {summary(cli)} "
              "(a process: interpreter start included)")

        print(f"\ndaemon peak RSS before any scrape {peak_rss_mb(node.proc.pid) or 0:.0f} MB")
        print("/metrics at that size:")
        raw = http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port,
                                         timeout=600)
        for what in ("first scrape (renders)", "second scrape (cached)"):
            t0 = time.perf_counter()
            raw.request("GET", "/metrics")
            page = raw.getresponse().read()
            took = time.perf_counter() - t0
            res.setdefault("metrics", took)
            samples = sum(1 for line in page.splitlines() if line and not line.startswith(b"#"))
            print(f"  {what:24s} {took:6.2f} s   {len(page) / 1e6:6.1f} MB   "
                  f"{samples} samples")
        print(f"daemon peak RSS after {peak_rss_mb(node.proc.pid) or 0:.0f} MB")

        def p99(key):
            return f"{pct(res[key], 99):.1f}" if key in res else "-"
        print(f"RESULT jobs_p99_ms={p99('jobs')} runs_job_p99_ms={p99('runs_job')} "
              f"runs_all_p99_ms={p99('runs_all')} run_p99_ms={p99('run')} "
              + " ".join(f"{k}_p99_ms={p99(k)}" for k in (
                  "ui_overview", "ui_jobs", "ui_search", "ui_job", "ui_runs", "ui_run",
                  "ui_overview_1d", "ui_timeline_1h", "ui_timeline_1d", "ui_graph",
                  "ui_graph_job"))
              + " "
              f"metrics_s={res['metrics']:.2f}")
    finally:
        if args.keep:
            print(f"kept {node.base}")
            node.terminate()
        else:
            node.cleanup()


def write_dag(jobs_dir: Path, n: int) -> None:
    """``n`` jobs in a binary tree of dependencies: dag-00000 daily, each
    other after its parent (the graph page's subject)."""
    import yaml
    jobs = [{"name": "dag-00000", "schedule": "0 5 * * *", "command": "true"}] + [
        {"name": f"dag-{i:05d}", "schedule": "@after",
         "depends_on": [{"job": f"dag-{(i - 1) // 2:05d}"}], "command": "true"}
        for i in range(1, n)]
    if n:
        (jobs_dir / "dag.yaml").write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))


def login(url: str, token: str) -> str:
    """A web UI session for ``token`` (POST /login): its cookie's value."""
    from urllib.parse import urlencode
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/login", body=urlencode({"token": token, "next": "/"}),
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    r = conn.getresponse()
    r.read()
    for raw in r.headers.get_all("Set-Cookie") or []:
        name, _, rest = raw.partition("=")
        if name == "cronrd_session":
            return rest.split(";", 1)[0]
    raise SystemExit(f"POST /login answered {r.status} without a session cookie")


def _cursor(value: dict) -> str:
    from cronrd.runtime.http.api import encode_cursor
    return encode_cursor(value)


if __name__ == "__main__":
    main()

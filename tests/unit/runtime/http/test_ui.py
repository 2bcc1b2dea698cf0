"""The web UI's login, session cookie, CSRF and role checks
(cronrd/runtime/http/ui.py) through aiohttp's test client, with the
daemon's Handlers faked (what reaches them, as whom) and its tokens and
sessions in a real state machine (state/tokens.py)."""

from __future__ import annotations

import asyncio
import re

from aiohttp.test_utils import TestClient, TestServer

from cronrd.config import HttpConfig, HttpTLS
from cronrd.ops import requests as R
from cronrd.runtime.control.access import check_job
from cronrd.runtime.http.server import HttpServer
from cronrd.runtime.http.session import COOKIE, SESSION_TTL, csrf_token
from cronrd.state import commands as C
from cronrd.state import tokens as T
from tests.support.web_sessions import FakeConfig, StateLog, session_cookie, session_of
from cronrd.runtime.http.ui import _safe_next, layout_graph

NOW = 1_800_000_000.0
TOKENS = {
    "v": {"name": "grafana", "role": "viewer", "jobs": "", "expires_at": None},
    "o": {"name": "ops", "role": "operator", "jobs": "", "expires_at": None},
    "b": {"name": "backups", "role": "operator", "jobs": "backup-*", "expires_at": None},
    "old": {"name": "old", "role": "admin", "jobs": "", "expires_at": NOW},
}


class FakeMetrics:
    async def page(self) -> bytes:
        return b""


class FakeHandlers:
    """The Handlers the UI's writes call; records (what, args, caller)."""

    def __init__(self):
        self.calls = []
        self.audits = []
        self.config = FakeConfig()
        self.log = StateLog(TOKENS, NOW)
        self.conn = self.log.conn  # the event feed's (http/stream.py)

    async def h_pause(self, args, caller):
        # as the daemon's handler: a token acts on the jobs its glob covers
        # (control/access.py; the refusal is the handler's, audited there)
        check_job(caller, f"cronrd pause {args.job}", None, args.job)
        self.calls.append(("pause", args, caller))
        return {}

    async def h_run_now(self, args, caller):
        self.calls.append(("run_now", args, caller))
        return {"run_id": 7, "state": "pending"}

    async def _audit(self, caller, command, target, allowed, detail=""):
        self.audits.append((caller.name, command, target, allowed))


def serve(body, tls: bool = False, now=lambda: NOW):
    reads = FakeHandlers()
    state = reads.log
    cfg = HttpConfig(listen=("127.0.0.1", 0),
                     tls=HttpTLS("c.pem", "k.pem") if tls else None)
    server = HttpServer(cfg, is_ready=lambda: True, status=lambda: {}, metrics=FakeMetrics(),
                        find_token=state.find_token, find_session=state.find_session,
                        now=now, reads=reads)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            return await body(client, reads)
    return asyncio.run(main())


def cookie(key: str) -> dict:
    return session_cookie(key, TOKENS)


def csrf(key: str) -> str:
    return csrf_token(session_of(key))


def set_cookie_value(resp) -> str:
    return re.match(f"{COOKIE}=([^;]*);", resp.headers["Set-Cookie"]).group(1)


def test_pages_send_you_to_the_login_form_without_a_session():
    async def body(client, reads):
        r = await client.get("/jobs?q=x", allow_redirects=False)
        assert r.status == 303 and r.headers["Location"].startswith("/login?next=")
        r = await client.get("/login")
        assert r.status == 200 and 'name="token"' in await r.text()
        assert r.headers["Content-Type"].startswith("text/html")
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
        r = await client.get("/jobs", headers=cookie("nosuch"), allow_redirects=False)
        assert r.status == 303  # an unknown token is no session
        r = await client.get("/jobs", headers=cookie("old"), allow_redirects=False)
        assert r.status == 303  # nor an expired one
    serve(body)


def test_login_starts_a_session_whose_cookie_is_not_the_token():
    async def body(client, reads):
        r = await client.post("/login", data={"token": "o", "next": "/jobs"},
                              allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/jobs"
        c = r.headers["Set-Cookie"]
        value = set_cookie_value(r)
        assert value not in TOKENS and T.by_secret(reads.conn, value) is None
        assert value.startswith("s1.") and len(value) > 40
        assert "HttpOnly" in c and "SameSite=Strict" in c and "Secure" not in c
        assert f"Max-Age={int(SESSION_TTL)}" in c
        started = reads.log.proposed[-1]
        assert isinstance(started, C.StartSession) and started.name == "ops"
        assert started.session_hash == T.token_hash(value) and started.expires_at == \
            NOW + SESSION_TTL
        # the session works, and not as a bearer token
        r = await client.get("/api/v1/whoami", headers={"Cookie": f"{COOKIE}={value}"})
        assert r.status == 200 and (await r.json())["name"] == "ops"
        r = await client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {value}"})
        assert r.status == 401
        for bad in ("nosuch", "old", ""):
            r = await client.post("/login", data={"token": bad}, allow_redirects=False)
            assert r.status == 401 and "Set-Cookie" not in r.headers
        r = await client.post("/login", data={"token": "o"}, allow_redirects=False,
                              headers={"Origin": "http://elsewhere.example"})
        assert r.status == 403 and "Set-Cookie" not in r.headers
    serve(body)


def test_the_cookie_is_a_secure_host_cookie_when_the_server_speaks_tls():
    async def body(client, reads):
        r = await client.post("/login", data={"token": "o"}, allow_redirects=False)
        c = r.headers["Set-Cookie"]
        assert c.startswith("__Host-cronrd_session=s1.") and "Secure" in c
        assert "Path=/" in c and "Domain" not in c
    serve(body, tls=True)


def test_a_write_needs_the_sessions_csrf_token():
    async def body(client, reads):
        for form in ({"note": "x"}, {"note": "x", "csrf": csrf("v")},
                     {"note": "x", "csrf": ""}):
            r = await client.post("/jobs/db/pause", data=form, headers=cookie("o"))
            assert r.status == 403 and "CSRF" in await r.text()
        assert reads.calls == []
        r = await client.post("/jobs/db/pause", data={"note": "x", "csrf": csrf("o")},
                              headers=cookie("o"), allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/jobs/db"
        # the header works as well as the field
        r = await client.post("/jobs/db/run", headers={**cookie("o"),
                                                       "X-CSRF-Token": csrf("o")},
                              allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/runs/7"
        (what, args, caller), (what2, _, _) = reads.calls
        assert (what, args, what2) == ("pause", R.PauseJob(job="db", note="x"), "run_now")
        # the Handlers check the token's role and glob again (control/access.py)
        assert caller.name == "token:ops" and caller.uid == -1 and not caller.privileged
        assert caller.token["role"] == "operator"
        assert caller.describe() == "token 'ops' (role operator)"
        r = await client.post("/jobs/db/pause", data={"csrf": csrf("o")})
        assert r.status == 401  # no session at all
    serve(body)


def test_a_viewer_is_refused_and_the_refusal_audited():
    async def body(client, reads):
        r = await client.post("/jobs/db/pause", data={"csrf": csrf("v")},
                              headers=cookie("v"))
        assert r.status == 403 and "needs operator" in await r.text()
        assert reads.calls == []
        assert reads.audits == [("token:grafana", "pause", "db", False)]
    serve(body)


def test_a_token_limited_to_some_jobs_acts_on_those_only():
    async def body(client, reads):
        r = await client.post("/jobs/db/pause", data={"csrf": csrf("b")},
                              headers=cookie("b"))
        assert r.status == 403 and "backup-*" in await r.text()
        r = await client.post("/jobs/backup-db/pause", data={"csrf": csrf("b")},
                              headers=cookie("b"), allow_redirects=False)
        assert r.status == 303 and [c[1].job for c in reads.calls] == ["backup-db"]
    serve(body)


def test_logout_ends_the_session_and_clears_the_cookie():
    async def body(client, reads):
        r = await client.post("/logout", data={"csrf": "wrong"}, headers=cookie("o"))
        assert r.status == 403
        r = await client.post("/logout", data={"csrf": csrf("o")}, headers=cookie("o"),
                              allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/login"
        assert re.search(f"{COOKIE}=\"\"; .*Max-Age=0", r.headers["Set-Cookie"])
        assert isinstance(reads.log.proposed[-1], C.EndSession)
        # the cookie kept (copied elsewhere) no longer works, on pages or the API
        r = await client.get("/jobs", headers=cookie("o"), allow_redirects=False)
        assert r.status == 303 and r.headers["Location"].startswith("/login")
        r = await client.get("/api/v1/whoami", headers=cookie("o"))
        assert r.status == 401 and "session has ended" in (await r.json())["detail"]
        # the token itself stays valid
        r = await client.get("/api/v1/whoami", headers={"Authorization": "Bearer o"})
        assert r.status == 200
    serve(body)


def test_the_api_takes_the_cookie_and_wants_csrf_on_its_writes():
    async def body(client, reads):
        r = await client.get("/api/v1/whoami", headers=cookie("v"))
        assert r.status == 200 and (await r.json())["name"] == "grafana"
        r = await client.post("/api/v1/whoami", headers=cookie("v"))
        assert r.status == 403 and "X-CSRF-Token" in (await r.json())["detail"]
        r = await client.post("/api/v1/whoami", headers={**cookie("v"),
                                                         "X-CSRF-Token": csrf("v")})
        assert r.status == 405  # past the session's checks
        r = await client.post("/api/v1/whoami", headers={"Authorization": "Bearer v"})
        assert r.status == 405  # a bearer token needs no CSRF
    serve(body)


def test_after_login_only_a_local_path():
    assert _safe_next("/jobs/a?x=1") == "/jobs/a?x=1"
    for bad in (None, "", "//evil.example/", "https://evil.example/", "/\\evil", "jobs"):
        assert _safe_next(bad) == "/"


def test_the_graph_puts_each_job_right_of_its_parents():
    jobs = [{"name": n, "missing": False, "last_run": None} for n in ("a", "b", "c", "d")]
    g = layout_graph(jobs, [["a", "b"], ["b", "c"], ["a", "c"], ["c", "a"]])  # a cycle too
    x = {b["name"]: b["x"] for b in g["boxes"]}
    assert x["a"] < x["b"] < x["c"] and x["d"] == x["a"] or x["d"] <= x["b"]
    assert len(g["paths"]) == 4 and g["width"] > max(x.values())


def _crosses(seg, box) -> bool:
    """Does an axis-parallel segment pass through the inside of a box?"""
    (x1, y1), (x2, y2) = seg
    lo_x, hi_x, lo_y, hi_y = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
    return (lo_x < box["x"] + box["w"] and hi_x > box["x"]
            and lo_y < box["y"] + box["h"] and hi_y > box["y"])


def test_no_arrow_of_the_graph_runs_under_a_box_and_each_box_says_schedule_and_state():
    """Issue 33 (2): an edge was drawn under a box (a straight line across a
    column), and boxes were bare names."""
    names = ["extract", "fx-rates", "transform", "load", "report", "audit"]
    jobs = [{"name": n, "missing": False, "schedule": "@hourly",
             "last_run": {"state": "failed"} if n == "load" else None} for n in names]
    edges = [["extract", "transform"], ["fx-rates", "transform"], ["transform", "load"],
             ["extract", "load"], ["extract", "report"], ["load", "report"],
             ["fx-rates", "audit"], ["report", "audit"], ["audit", "fx-rates"]]  # and back
    g = layout_graph(jobs, edges)
    boxes = {b["name"]: b for b in g["boxes"]}
    for path in g["paths"]:
        pts = path["points"]
        segments = list(zip(pts, pts[1:]))
        assert all(a[0] == b[0] or a[1] == b[1] for a, b in segments), path  # axis-parallel
        for seg in segments:
            for box in g["boxes"]:
                assert not _crosses(seg, box), (path["from"], path["to"], box["name"])
        (sx, sy), (ex, ey) = pts[0], pts[-1]
        parent, child = boxes[path["from"]], boxes[path["to"]]
        assert sx == parent["x"] + parent["w"] and ex == child["x"]
        assert parent["y"] < sy < parent["y"] + parent["h"]
        assert child["y"] < ey < child["y"] + child["h"]
    assert boxes["load"]["detail"] == "@hourly · failed" and boxes["load"]["state"] == "failed"
    assert boxes["extract"]["detail"] == "@hourly · never ran"


def test_the_job_chart_has_a_point_per_fire_time_coloured_by_its_last_attempt():
    """Issue 33 (2): the job page's duration and start lateness per fire
    time, the outcome as colour (a series each), from the runs' views."""
    from cronrd.runtime.http.ui import job_chart
    runs = [  # newest first, as the page reads them
        {"fire_time": "2026-12-05T10:02:00Z", "attempt": 1, "state": "running",
         "started_at": "2026-12-05T10:02:00.200Z", "finished_at": None},
        {"fire_time": "2026-12-05T10:01:00Z", "attempt": 2, "state": "succeeded",
         "started_at": "2026-12-05T10:01:30.000Z", "finished_at": "2026-12-05T10:01:31.500Z"},
        {"fire_time": "2026-12-05T10:01:00Z", "attempt": 1, "state": "failed",
         "started_at": "2026-12-05T10:01:00.050Z", "finished_at": "2026-12-05T10:01:01.000Z"},
        {"fire_time": "2026-12-05T10:00:00Z", "attempt": 1, "state": "failed",
         "started_at": "2026-12-05T10:00:00.120Z", "finished_at": "2026-12-05T10:00:02.120Z"},
        {"fire_time": "2026-12-05T09:59:00Z", "attempt": 1, "state": "skipped",
         "started_at": None, "finished_at": "2026-12-05T09:59:00Z"},   # never ran: no point
    ]
    c = job_chart(runs)
    t0 = 1796464800.0      # 10:00:00Z
    assert c["x"] == [t0, t0 + 60, t0 + 120]
    dur, late = c["series"]["duration"], c["series"]["lateness"]
    assert dur["failed"] == [2.0, None, None]          # 10:00 failed for good
    assert dur["succeeded"] == [None, 1.5, None]       # 10:01: its retry's duration
    assert dur["other"] == [None, None, None]          # 10:02 still running: no duration
    assert late["succeeded"] == [None, 0.05, None]     # lateness of the first attempt
    assert late["other"] == [None, None, 0.2]


def test_timeline_bars_that_overlap_on_a_node_get_lanes_and_stay_in_the_window():
    """Issue 33 (2): a Gantt of runs across nodes; two runs at once on one
    node must not draw over each other, a bar never leaves the window."""
    from cronrd.runtime.http.ui import layout_timeline
    t0 = 1796464800
    bars = [
        {"run_id": 1, "job": "a", "node": "n1", "start": t0 - 50, "end": t0 + 100,
         "state": "succeeded", "running": False},
        {"run_id": 2, "job": "b", "node": "n1", "start": t0 + 50, "end": t0 + 200,
         "state": "failed", "running": False},
        {"run_id": 3, "job": "c", "node": "n1", "start": t0 + 150, "end": t0 + 4000,
         "state": "running", "running": True},
        {"run_id": 4, "job": "d", "node": "n2", "start": t0 + 10, "end": t0 + 10.01,
         "state": "succeeded", "running": False},
    ]
    g = layout_timeline({"start": t0, "end": t0 + 3600, "now": t0 + 3600,
                         "nodes": ["n1", "n2"], "bars": bars}, width=1000)
    by = {b["run_id"]: b for b in g["bars"]}
    assert by[1]["x"] == g["left"]                      # clipped at the window's start
    assert by[3]["x"] + by[3]["w"] == g["left"] + 1000  # and at its end
    assert by[1]["y"] == by[3]["y"] != by[2]["y"]       # 1 and 2 overlap: two lanes
    assert by[4]["w"] >= 1.5                            # a short run stays visible
    n1, n2 = g["rows"]
    assert n1["h"] == 2 * 16 and by[4]["y"] >= n1["y"] + n1["h"]
    assert [k["label"] for k in g["ticks"]][:2] == ["10:10", "10:20"]


def test_the_calendar_lays_days_out_by_weekday_with_the_worst_outcome():
    from cronrd.runtime.http.ui import layout_calendar
    days = [{"day": "2026-11-30", "counts": {"succeeded": 3, "failed": 1}},   # a Monday
            {"day": "2026-12-01", "counts": {"succeeded": 4}},
            {"day": "2026-12-02", "counts": {}},
            {"day": "2026-12-07", "counts": {"skipped": 2}}]
    cal = layout_calendar(days)
    cells = {c["day"]: c for c in cal["cells"]}
    assert (cells["2026-11-30"]["cls"], cells["2026-11-30"]["level"]) == ("failed", 1)
    assert (cells["2026-12-01"]["cls"], cells["2026-12-01"]["level"]) == ("succeeded", 4)
    assert (cells["2026-12-02"]["cls"], cells["2026-12-02"]["level"]) == ("none", 0)
    assert cells["2026-12-01"]["y"] > cells["2026-11-30"]["y"]      # Tuesday below Monday
    assert cells["2026-12-01"]["x"] == cells["2026-11-30"]["x"]     # in the same week
    assert "1 failed, 3 succeeded" in cells["2026-11-30"]["title"]
    assert [m["label"] for m in cal["months"]] == ["Nov", "Dec"]


def test_the_calendar_ahead_shows_fire_times_and_the_days_a_calendar_excludes():
    """Issue 35: the job page's calendar honours the job's calendar: days
    ahead hold its planned fire times, skipped ones, and excluded days."""
    import datetime as dt

    import apsw

    from cronrd.runtime.http.ui import layout_calendar, upcoming_days
    from cronrd.schedule import parse_iso
    from cronrd.schedule.calendars import Calendar
    from cronrd.state import calendars as CAL
    from cronrd.state.machine import StateMachine

    sm = StateMachine(apsw.Connection(":memory:"))
    xmas = dt.date(2026, 12, 25).toordinal()
    with sm.conn:
        CAL.set_all(sm.conn, {"de": Calendar("de", days=frozenset({xmas})).to_dict(),
                              "weekdays": Calendar("weekdays", frozenset(range(5))).to_dict()})
    spec = {"name": "j", "schedule": "0 18 * * *", "command": "true",
            "calendar": {"skip": ["de"], "only": ["weekdays"]}}
    today = dt.date(2026, 12, 20)
    days = upcoming_days(sm.conn, spec, "Europe/Berlin", today,
                         parse_iso("2026-12-20T12:00:00Z"))
    by = {d["day"]: d for d in days}
    assert len(days) == 28 and days[0]["day"] == "2026-12-21"
    assert by["2026-12-24"]["counts"] == {"planned": 1} and not by["2026-12-24"]["note"]
    assert by["2026-12-25"]["counts"] == {"skipped": 1}
    assert by["2026-12-25"]["note"] == "excluded: 2026-12-25 (fri) is in calendar de"
    cells = {c["day"]: c for c in layout_calendar(days)["cells"]}
    assert cells["2026-12-24"]["cls"] == "planned" and cells["2026-12-25"]["cls"] == "skipped"
    assert cells["2026-12-26"]["cls"] == "skipped"   # a Saturday: not in weekdays
    assert "is not in calendar weekdays" in cells["2026-12-26"]["title"]
    shifted = dict(spec, calendar={"skip": ["de"], "only": ["weekdays"], "shift": "next"})
    by = {d["day"]: d for d in upcoming_days(sm.conn, shifted, "Europe/Berlin", today,
                                             parse_iso("2026-12-20T12:00:00Z"))}
    assert by["2026-12-27"]["counts"] == {"excluded": 1}          # nothing fires: moved
    assert by["2026-12-28"]["counts"] == {"planned": 1}           # Fri, Sat, Sun -> Mon: one

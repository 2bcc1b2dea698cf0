"""Attacks on the HTTP surface (issue 16): the API, the web UI and their
session, through aiohttp's test client with the daemon's Handlers faked.
Each test is one way in that must stay shut."""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import os
import sqlite3

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cronrd.config import HttpConfig, HttpTLS
from cronrd.runtime.http import server as http_server
from cronrd.runtime.http.server import HttpServer
from cronrd.runtime.http.ui import _safe_next
from tests.support.web_sessions import StateLog, session_cookie

NOW = 1_800_000_000.0
TOKENS = {
    "adm": {"name": "adm", "role": "admin", "jobs": "", "expires_at": None,
            "created_at": NOW},
    # "db-" then anything but x, as fnmatch (control/access.py) reads it
    "neg": {"name": "neg", "role": "viewer", "jobs": "db-[!x]*", "expires_at": None,
            "created_at": NOW},
    "caret": {"name": "caret", "role": "viewer", "jobs": "db-[^x]*", "expires_at": None,
              "created_at": NOW},
    "web": {"name": "web", "role": "operator", "jobs": "web-*", "expires_at": None,
            "created_at": NOW},
}
JOBS = ["db-a", "db-x1", "web-1"]
_GLOB = sqlite3.connect(":memory:")


def sql_glob(name: str, pattern: str) -> bool:
    """SQLite's GLOB, as queries.jobs filters job names."""
    return bool(_GLOB.execute("SELECT ? GLOB ?", (name, pattern)).fetchone()[0])


class FakeMetrics:
    async def page(self) -> bytes:
        return b""


class FakeConn:
    def execute(self, *a):
        return iter(())


class FakeConfig:
    pools = ()
    node_id = "n1"
    timezone = "UTC"


class FakeClock:
    def now(self):
        return NOW


class FakeHandlers:
    def __init__(self):
        self.conn = FakeConn()
        self.config = FakeConfig()
        self.clock = FakeClock()
        self.calls = []

    def table(self):
        return {}

    async def h_jobs(self, req):  # a ListJobs (ops/requests.py)
        names = [n for n in JOBS if req.match is None or sql_glob(n, req.match)]
        return {"jobs": [{"name": n, "paused": False, "enabled": True, "last_run": None,
                          "next_fire": None} for n in names], "next": None}

    async def h_status(self, args):
        return {"node_id": "n1", "leader": "n1", "jobs": 3, "running": 0, "paused": 0}

    async def h_cluster_members(self, args):
        return {"leader": "n1", "members": []}

    @staticmethod
    def bind(*values):
        """As SQLite binds a parameter: an int beyond 64 bits fails."""
        for v in values:
            if isinstance(v, (int, float)) and not -2 ** 63 <= v < 2 ** 63:
                raise OverflowError("int too big to convert")

    async def h_runs(self, req):  # a ListRuns: its times parsed at the edge (ops/typed.py)
        self.bind(req.before, req.since, req.until)
        return {"runs": []}

    async def h_audit(self, req):  # an Audit (ops/workflows.py)
        self.bind(req.before)
        return {"records": []}

    async def h_alerts(self, req):
        return {"alerts": [{"alert_id": i, "job": j, "kind": "start_within"}
                           for i, j in enumerate(JOBS)]}

    async def h_dead_letter(self, req):
        return {"dead_letter": [{"run_id": i, "job": j} for i, j in enumerate(JOBS)]}

    async def _audit(self, *a, **kw):
        pass


def serve(body, cfg: HttpConfig | None = None):
    reads = FakeHandlers()
    reads.log = state = StateLog(TOKENS, NOW)  # tokens and sessions as the daemon keeps them
    reads.conn = state.conn  # ... and the event feed reads them there
    server = HttpServer(cfg or HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=lambda: {}, metrics=FakeMetrics(),
                        find_token=state.find_token, find_session=state.find_session,
                        now=lambda: NOW, reads=reads)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            return await body(client, reads)
    return asyncio.run(main())


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def cookie(secret: str) -> dict:
    """The cookie of the session the token ``secret`` has begun."""
    return session_cookie(secret, TOKENS)


@pytest.mark.parametrize("secret", ["neg", "caret"])
def test_a_bracket_glob_token_lists_no_job_outside_its_glob(secret):
    """SQLite's GLOB reads [!x] and [^x] otherwise than fnmatch: the listing
    must not show a job the token may not see."""
    allowed = [n for n in JOBS if fnmatch.fnmatchcase(n, TOKENS[secret]["jobs"])]
    assert allowed in (["db-a"], ["db-x1"])  # fnmatch: [^x] is "^ or x"
    async def body(client, reads):
        r = await client.get("/api/v1/jobs", headers=bearer(secret))
        assert r.status == 200
        names = [j["name"] for j in (await r.json())["items"]]
        assert names == allowed
        r = await client.get("/jobs", headers=cookie(secret))
        assert r.status == 200
        html = await r.text()
        assert all((f">{n}<" in html) == (n in allowed) for n in JOBS), html
    serve(body)


def test_the_overview_counts_only_the_tokens_alerts_and_dead_letters():
    async def body(client, reads):
        r = await client.get("/", headers=cookie("web"))
        assert r.status == 200
        html = await r.text()
        # one late alert and one dead letter of web-*, not the three of all jobs
        assert "<b>1</b><span>late (SLA)</span>" in html, html
        assert "<b>1</b><span>dead letter</span>" in html
    serve(body)


def test_a_certificate_write_from_another_site_is_refused(monkeypatch):
    """A browser sends its client certificate to any page's request, as it
    sends a cookie: a write another site's page makes with it is CSRF."""
    monkeypatch.setattr(http_server, "principal", lambda peercert, roles: {
        "name": "cert:ops", "role": "operator", "jobs": "", "expires_at": None,
        "created_at": None, "node": None})
    cfg = HttpConfig(listen=("127.0.0.1", 0), tls=HttpTLS(
        "c.pem", "k.pem", "ca.pem", (("ops", "operator", ""),)))

    async def body(client, reads):
        r = await client.get("/api/v1/whoami")
        assert r.status == 200 and (await r.json())["name"] == "cert:ops"
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
            r = await client.post("/api/v1/validate", data=b"", headers=headers)
            assert r.status == 403, (headers, r.status)
        # a client that is not a browser (no Origin), or the server's own page
        r = await client.post("/api/v1/validate", data=b"")
        assert r.status == 200
        own = f"http://{client.host}:{client.port}"
        r = await client.post("/api/v1/validate", data=b"", headers={
            "Origin": own, "Sec-Fetch-Site": "same-origin"})
        assert r.status == 200
    serve(body, cfg)


def test_after_login_no_path_a_browser_reads_as_another_site():
    """Browsers drop tabs and newlines from a URL: "/<TAB>/evil" is "//evil"."""
    for bad in ("/\t/evil.example", "/\n/evil.example", "/\r/evil.example",
                "/ /evil.example", "/\x00/evil.example", "/\x0b/x"):
        assert _safe_next(bad) == "/", repr(bad)
    assert _safe_next("/jobs/a%20b?q=x") == "/jobs/a%20b?q=x"


def test_login_redirects_only_to_a_local_path():
    async def body(client, reads):
        r = await client.post("/login", data={"token": "adm", "next": "/\t/evil.example"},
                              allow_redirects=False)
        assert r.status == 303 and r.headers["Location"] == "/"
    serve(body)


def test_a_login_from_a_sandboxed_page_is_refused():
    """Origin: null is what a sandboxed iframe of another site sends."""
    async def body(client, reads):
        for headers in ({"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
            r = await client.post("/login", data={"token": "adm"}, headers=headers,
                                  allow_redirects=False)
            assert r.status == 403 and "Set-Cookie" not in r.headers, headers
        r = await client.post("/login", data={"token": "adm"}, allow_redirects=False,
                              headers={"Sec-Fetch-Site": "same-origin"})
        assert r.status == 303
    serve(body)


@pytest.mark.parametrize("path", ["/api/v1/jobs?limit=%C2%B2", "/api/v1/runs?limit=%C2%B2",
                                  "/api/v1/runs/%C2%B2", "/api/v1/runs/%C2%B2/log",
                                  "/api/v1/audit?limit=%C2%B2"])
def test_a_digit_that_is_no_number_is_a_bad_request(path):
    """"²".isdigit() is True, int("²") fails: 400, never a 500."""
    async def body(client, reads):
        r = await client.get(path, headers=bearer("adm"))
        assert r.status == 400, (path, r.status, await r.text())
    serve(body)


@pytest.mark.parametrize("path", ["/runs?before=%C2%B2", "/runs/%C2%B2",
                                  "/audit?before=%C2%B2", "/alerts?before=%C2%B2"])
def test_a_ui_page_given_a_digit_that_is_no_number_does_not_fail(path):
    async def body(client, reads):
        r = await client.get(path, headers=cookie("adm"))
        assert r.status < 500, (path, r.status, await r.text())
    serve(body)


def test_api_answers_are_never_sniffed_as_html():
    """A run's log is text/plain the job wrote: a browser must not render it."""
    async def body(client, reads):
        for path in ("/api/v1/whoami", "/healthz", "/api/v1/nosuch"):
            r = await client.get(path, headers=bearer("adm"))
            assert r.headers.get("X-Content-Type-Options") == "nosniff", path
    serve(body)


def test_huge_numbers_are_bad_requests_not_failures():
    """A number SQLite cannot hold (a cursor, an offset, a page's before)."""
    from cronrd.runtime.http.api import encode_cursor
    huge = str(10 ** 30)

    async def body(client, reads):
        for path in ("/api/v1/runs/1/log?offset=" + huge,
                     "/api/v1/audit?cursor=" + encode_cursor({"before": 10 ** 30}),
                     "/api/v1/runs?cursor=" + encode_cursor({"before": 10 ** 30}),
                     "/api/v1/runs?since=" + "9" * 400):
            r = await client.get(path, headers=bearer("adm"))
            assert r.status == 400, (path, r.status, await r.text())
        for path in ("/runs?before=" + huge, "/audit?before=" + huge):
            r = await client.get(path, headers=cookie("adm"))
            assert r.status < 500, (path, r.status, await r.text())
    serve(body)


def test_an_admin_token_limited_to_some_jobs_has_no_power_over_every_job():
    """Making tokens (an unlimited one, too), draining a node and pausing
    every job reach past a --jobs glob: they need an unlimited admin."""
    from cronrd.errors import PermissionDenied
    from cronrd.runtime.control.access import Caller, check_admin
    limited = Caller.of_token({"name": "dbadm", "role": "admin", "jobs": "db-*",
                               "expires_at": None})
    with pytest.raises(PermissionDenied, match=r"db-\*"):
        check_admin(limited, "cronrd token create root2")
    check_admin(Caller.of_token({"name": "adm", "role": "admin", "jobs": "",
                                 "expires_at": None}), "cronrd token create x")


def test_a_body_nested_too_deep_for_json_is_a_bad_request():
    async def body(client, reads):
        r = await client.post("/api/v1/jobs/db-a/pause", data=b"[" * 200_000,
                              headers=bearer("adm"))
        assert r.status == 400, (r.status, await r.text())
        deep = base64.urlsafe_b64encode(b"[" * 5000).decode()
        r = await client.get("/api/v1/runs?cursor=" + deep, headers=bearer("adm"))
        assert r.status == 400, (r.status, await r.text())
    serve(body)


def test_a_job_pattern_is_short():
    """Each new pattern is compiled and cached (fnmatch keeps 32,768): a
    client sending long ones would fill the daemon's memory."""
    async def body(client, reads):
        long = "a" * 201 + "*"
        r = await client.get("/api/v1/jobs?match=" + long, headers=bearer("neg"))
        assert r.status == 400, (r.status, await r.text())
        r = await client.get("/jobs?q=" + long, headers=cookie("neg"))
        assert r.status == 400, r.status
        r = await client.get("/api/v1/jobs?match=db-*", headers=bearer("neg"))
        assert r.status == 200
    serve(body)


@pytest.mark.parametrize("sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"])
def test_a_connection_that_sends_no_whole_request_is_closed(monkeypatch, sent):
    """Each open connection holds one of the daemon's file descriptors (the
    jobs' logs, Raft's sockets): an idle or half-sent one is not kept."""
    monkeypatch.setattr(http_server, "IDLE_TIMEOUT", 0.5)
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=lambda: {}, metrics=FakeMetrics())

    async def main():
        task = await _serving(server)
        try:
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(sent)
            await writer.drain()
            # closed by the server well before the deadline (EOF or a 4xx)
            await asyncio.wait_for(reader.read(), timeout=10)
            writer.close()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_connections_beyond_the_cap_are_closed_at_once(monkeypatch):
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(http_server, "LOCAL_RESERVE", 0)  # (the reserve: its own test)
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=lambda: {}, metrics=FakeMetrics())

    async def get(reader, writer) -> bytes:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)

    async def main():
        task = await _serving(server)
        try:
            idle = [await asyncio.open_connection(*server.address) for _ in range(3)]
            await asyncio.sleep(0.1)
            extra = await asyncio.open_connection(*server.address)
            assert await asyncio.wait_for(extra[0].read(), timeout=10) == b""
            extra[1].close()
            idle[0][1].close()
            await asyncio.sleep(0.1)
            assert (await get(*await asyncio.open_connection(*server.address))
                    ).startswith(b"HTTP/1.1 200")
            for _, w in idle[1:]:
                w.close()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_a_refused_requests_target_cannot_drive_the_admins_terminal(capsys):
    """A viewer's refused POST /api/v1/jobs/<ESC>]52;...<BEL>/pause is audited
    with that name as its target: `cronrd audit` prints it as text."""
    from cronrd.cli.base import table
    table([[1, "\x1b]52;c;ZWNobyBwd25lZA==\x07x\x9b2J\r\nfake"]], ["id", "target"])
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\r"), repr(out)
    assert out.count("\n") == 2  # the header and one row
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07x\\x9b2J\\r\\nfake" in out

    from cronrd.cli.jobs import _pause_text
    assert "\x1b" not in _pause_text({"by": "token 'op' (role operator)", "at": "t",
                                       "note": "\x1b[2Jgone"})


def test_a_jobs_source_outside_the_jobs_dir_is_never_opened(tmp_path):
    """The state names a job's source file; whoever can commit a record
    could name any file (/dev/zero, /etc/shadow): only jobs_dir's are read.
    (The API's source_line and the file as written come from as_written.)"""
    from cronrd.runtime.control.reads import as_written
    jobs_dir = tmp_path / "cronrd.d"
    jobs_dir.mkdir()
    (jobs_dir / "x.yaml").write_text("\nname: x\nschedule: '@daily'\ncommand: 'true'\n")
    outside = tmp_path / "secret.yaml"
    outside.write_text("name: x\nschedule: '@daily'\ncommand: 'true'\n")
    (jobs_dir / "zero.yaml").symlink_to("/dev/zero")
    os.mkfifo(jobs_dir / "fifo.yaml")

    def source_line(name: str, source: str) -> int | None:
        view = {"spec": {"name": name}, "source": source,
                "sources": [{"node": "n1", "source": source, "digest": "d"}]}
        return as_written(view, "n1", str(jobs_dir))["line"]
    assert source_line("x", "x.yaml") == 2
    assert source_line("x", str(jobs_dir / "x.yaml")) == 2
    for source in (str(outside), "../secret.yaml", "/dev/zero", "zero.yaml", "fifo.yaml"):
        assert source_line("x", source) is None, source


def test_an_admin_token_limited_to_some_jobs_lists_no_tokens():
    TOKENS["dbadm"] = {"name": "dbadm", "role": "admin", "jobs": "db-*",
                       "expires_at": None, "created_at": NOW}
    try:
        async def body(client, reads):
            r = await client.get("/api/v1/tokens", headers=bearer("dbadm"))
            assert r.status == 403 and "db-*" in (await r.json())["detail"]
            r = await client.get("/api/v1/tokens", headers=bearer("adm"))
            assert r.status == 200
        serve(body)
    finally:
        del TOKENS["dbadm"]


@pytest.mark.parametrize("path,headers", [
    ("/api/v1/runs/%C2%B2/log/stream", {}),
    ("/api/v1/runs/" + "9" * 30 + "/log/stream", {}),                # OverflowError in SQLite
    ("/api/v1/runs/1/log/stream", {"Last-Event-ID": "\u00c2\u00b2"}),  # "²" sent as UTF-8
    ("/api/v1/events", {"Last-Event-ID": "\u00c2\u00b2"}),
    ("/api/v1/events?last_event_id=" + "7" * 5000, {}),
    ("/api/v1/events?last_event_id=%C2%B2", {}),
])
def test_odd_numbers_on_the_streams_are_bad_requests_before_any_stream(path, headers):
    """Issue 32 point 9: a 400 with a message, never a 200 whose stream then
    dies with a traceback (or a 500)."""
    async def body(client, reads):
        r = await client.get(path, headers={**bearer("adm"), **headers})
        assert r.status == 400, (path, r.status, await r.text())
        assert "whole number" in (await r.json())["detail"]
    serve(body)


@pytest.mark.parametrize("at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", float("nan"),
                                1e300, -1, "0001-01-01T00:00:00"])
def test_explain_at_a_time_beyond_its_years_is_a_usage_error(at):
    """Issue 32 point 9: `explain?at=0001-...` and `9999-12-31...` answered 500
    (a datetime overflow inside explain); a UsageError is a 400."""
    from zoneinfo import ZoneInfo

    from cronrd.errors import UsageError
    from cronrd.explain.subject import resolve_time
    local = isinstance(at, str) and not at.endswith("Z")
    with pytest.raises(UsageError, match="from 1970 to 9998"):
        resolve_time(at, local, ZoneInfo("Europe/Berlin"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300, -5.0])
def test_a_time_given_as_a_number_out_of_range_is_a_bad_request(value):
    from cronrd.errors import UsageError
    from cronrd.runtime.http.writes import _time_arg
    with pytest.raises(UsageError, match="between the years 1970 and 9999"):
        _time_arg(value, "from")
    assert _time_arg(1767225600.5, "from") == 1767225600


def test_metrics_under_token_auth_name_only_the_tokens_jobs(monkeypatch):
    """Issue 32 point 6: a `db-*` viewer scraping /metrics saw every
    job_name. Escaped label values (a quote, a backslash) are read as the
    text format writes them."""
    page = (b'# HELP cronrd_job_running Runs running.\n# TYPE cronrd_job_running gauge\n'
            b'cronrd_job_running{job_name="db-a"} 1.0\n'
            b'cronrd_job_running{job_name="web-1"} 2.0\n'
            b'cronrd_job_running{job_name="web-\\"db-a\\""} 3.0\n'
            b'cronrd_job_runs_total{job_name="db-b",origin="scheduled",outcome="failed"} 4.0\n'
            b'cronrd_raft_term 7.0\n')

    class Page(FakeMetrics):
        async def page(self):
            return page
    reads = FakeHandlers()
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0), metrics_auth="token"),
                        is_ready=lambda: True, status=lambda: {}, metrics=Page(),
                        find_token=TOKENS.get, now=lambda: NOW, reads=reads)

    async def main():
        async with TestClient(TestServer(server.app)) as client:
            r = await client.get("/metrics", headers=bearer("neg"))   # db-[!x]*
            limited = await r.text()
            r = await client.get("/metrics", headers=bearer("adm"))
            return limited, await r.text()
    limited, whole = asyncio.run(main())
    assert whole == page.decode()
    assert 'job_name="db-a"' in limited and 'job_name="db-b"' in limited
    assert "web-" not in limited and "cronrd_raft_term 7.0" in limited
    assert "# TYPE cronrd_job_running gauge" in limited


async def _serving(server) -> asyncio.Task:
    task = asyncio.create_task(server.run())
    for _ in range(500):
        if server.address is not None:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError("the test server did not listen")


async def _from(address: str, server):
    """A connection to the server from the loopback address ``address``."""
    return await asyncio.open_connection(*server.address, local_addr=(address, 0))


async def _healthz(conn) -> bytes:
    reader, writer = conn
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    return await asyncio.wait_for(reader.read(), timeout=10)


def test_one_address_cannot_take_every_connection_and_the_host_keeps_a_reserve(monkeypatch):
    """Issue 32 point 3: 256 slow connections from one client held every slot;
    the UI, API, /metrics, hooks and /healthz were down meanwhile."""
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 6)
    monkeypatch.setattr(http_server, "PER_ADDRESS", 3)
    monkeypatch.setattr(http_server, "LOCAL_RESERVE", 2)
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=lambda: {}, metrics=FakeMetrics())

    async def main():
        task = await _serving(server)
        try:
            held = [await _from("127.0.0.2", server) for _ in range(3)]
            await asyncio.sleep(0.1)
            fourth = await _from("127.0.0.2", server)   # over its address's share
            assert await asyncio.wait_for(fourth[0].read(), timeout=10) == b""
            assert (await _healthz(await _from("127.0.0.3", server))).startswith(b"HTTP/1.1 200")
            held += [await _from("127.0.0.3", server) for _ in range(3)]   # all 6 taken
            await asyncio.sleep(0.1)
            other = await _from("127.0.0.4", server)
            assert await asyncio.wait_for(other[0].read(), timeout=10) == b""
            # the host's own operator (127.0.0.1) still gets in
            assert (await _healthz(await _from("127.0.0.1", server))).startswith(b"HTTP/1.1 200")
            for _, w in held:
                w.close()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_a_body_sent_a_byte_at_a_time_is_cut_off_at_the_body_deadline(monkeypatch):
    monkeypatch.setattr(http_server, "BODY_TIMEOUT", 0.5)
    server = HttpServer(HttpConfig(listen=("127.0.0.1", 0)), is_ready=lambda: True,
                        status=lambda: {}, metrics=FakeMetrics())

    async def main():
        task = await _serving(server)
        try:
            reader, writer = await _from("127.0.0.2", server)
            writer.write(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                         b"Content-Type: application/x-www-form-urlencoded\r\n\r\nt")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), timeout=10)  # closed after it
            assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
            reader, writer = await _from("127.0.0.2", server)
            writer.write(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                         b"Connection: close\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), timeout=10)
            assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())

"""The web UI (cronrd/runtime/http/ui.py) through a real daemon: login with
a token and the session it starts, pages that need it, CSRF on every browser
write, roles and job globs checked by the server, writes audited with the
token's name, and every list paged."""

from __future__ import annotations

import http.client
import json
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


class Browser:
    """A cookie-keeping HTTP client that does not follow redirects."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict | None = None,
                headers: dict | None = None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
        hdrs = dict(headers or {})
        body = None
        if form is not None:
            body = urlencode(form)
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode()
        for raw in resp.headers.get_all("Set-Cookie") or []:
            name, _, rest = raw.partition("=")
            value = rest.split(";", 1)[0]
            if value in ('""', "") or "Max-Age=0" in raw or "expires=Thu, 01 Jan 1970" in raw:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        conn.close()
        return resp, text

    def get(self, path: str):
        return self.request("GET", path)

    def post(self, path: str, form: dict | None = None, headers: dict | None = None):
        return self.request("POST", path, form or {}, headers)

    def login(self, secret: str):
        resp, text = self.post("/login", {"token": secret, "next": "/"})
        assert resp.status == 303, text
        return resp

    def csrf(self, path: str = "/jobs") -> str:
        resp, text = self.get(path)
        assert resp.status == 200, text
        return re.search(r'name="csrf" value="([0-9a-f]+)"', text).group(1)


def tokens(node) -> dict[str, str]:
    out = {}
    for name, role, extra in (("ops", "operator", ()), ("watch", "viewer", ()),
                              ("root", "admin", ()), ("bk", "operator", ("--jobs", "bk-*"))):
        res = node.cli("token", "create", "--name", name, "--role", role, *extra)
        assert res.returncode == 0, res.stderr
        out[name] = res.stdout.strip()
    return out


def test_login_sets_an_httponly_strict_cookie_that_opens_the_pages(node):
    node.write_job("hello", {"schedule": "@yearly", "command": "echo hi"})
    node.start()
    url = node.call("status")["http"]
    sec = tokens(node)
    b = Browser(url)
    resp, _ = b.get("/jobs?q=hel")
    loc = urlsplit(resp.headers["Location"])
    assert resp.status == 303 and loc.path == "/login"
    assert parse_qs(loc.query)["next"] == ["/jobs?q=hel"]
    resp, text = b.get("/login")
    assert resp.status == 200 and 'name="token"' in text
    resp, text = b.post("/login", {"token": "crd_wrong", "next": "/"})
    assert resp.status == 401 and "unknown, revoked or expired" in text and not b.cookies
    resp = b.login(sec["watch"])
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    # a session of its own, never the token (other ports of the host see it)
    assert b.cookies["cronrd_session"].startswith("s1.")
    assert sec["watch"] not in b.cookies["cronrd_session"]
    assert f"Max-Age={12 * 3600}" in cookie
    for path in ("/", "/jobs", "/jobs/hello", "/runs", "/graph", "/backfills", "/alerts",
                 "/nodes"):
        resp, text = b.get(path)
        assert resp.status == 200, (path, text)
        assert "watch · viewer" in text
    resp, text = b.get("/jobs/hello")
    assert "echo hi" in text and "hello.yaml" in text and "Run now" not in text
    # Issue 33 (3): the file as written, numbered, and the values in force
    written = text.split('id="written">')[1].split("</pre>")[0]
    assert '<span class="ln">1</span>schedule: \'@yearly\'' in written.replace("&#39;", "\'")
    assert 'id="effective"' in text and "from the file" in text and ">default<" in text
    # Issue 33 (6): the overview's tiles lead to their lists and say what
    # they count; open alerts are listed there
    resp, text = b.get("/")
    for href in ("/nodes", "/jobs", "/runs?state=running", "/runs?state=failed", "/alerts",
                 "/jobs?state=paused", "/alerts#dead-letter"):
        assert 'class="tile' in text and f'href="{href}"' in text, href
    assert "late (SLA)" in text and "later than their job's sla allows" in text
    assert 'id="open-alerts"' in text and "no open alert" in text
    resp, text = b.get("/audit")  # admin only
    assert resp.status == 403 and "needs the role admin" in text
    # the session opens the API too (reads need no CSRF)
    resp, text = b.get("/api/v1/whoami")
    assert resp.status == 200 and json.loads(text)["name"] == "watch"
    # a login may only go on to a page of this server
    other = Browser(url)
    resp, _ = other.post("/login", {"token": sec["watch"], "next": "//evil.example/"})
    assert resp.headers["Location"] == "/"
    third = Browser(url)
    resp, _ = third.post("/login", {"token": sec["watch"]},
                         headers={"Origin": "http://evil.example"})
    assert resp.status == 403 and not third.cookies
    # log out: the cookie goes, the pages want a login again
    resp, _ = b.post("/logout", {"csrf": b.csrf()})
    assert resp.status == 303 and resp.headers["Location"] == "/login"
    assert "cronrd_session" not in b.cookies
    assert b.get("/")[0].status == 303
    # a revoked token ends its sessions at once
    b.login(sec["watch"])
    assert node.cli("token", "revoke", "watch").returncode == 0
    wait_for(lambda: b.get("/")[0].status == 303, what="the revoked session refused")


def test_browser_writes_need_the_csrf_token_and_an_operator_role(node):
    node.write_job("hello", {"schedule": "@yearly", "command": "echo hi"})
    node.write_job("bk-db", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    sec = tokens(node)
    ops = Browser(url)
    ops.login(sec["ops"])
    csrf = ops.csrf("/jobs/hello")
    # no CSRF token: refused, nothing done
    resp, text = ops.post("/jobs/hello/pause", {"note": "x"})
    assert resp.status == 403 and "CSRF" in text
    resp, _ = ops.post("/jobs/hello/pause", {"note": "x", "csrf": "0" * 64})
    assert resp.status == 403
    assert not node.call("job", {"name": "hello"})["paused"]
    # with it: paused with the note, audited as the token
    resp, text = ops.post("/jobs/hello/pause", {"note": "disk full", "csrf": csrf})
    assert resp.status == 303, text
    job = node.call("job", {"name": "hello"})
    assert job["paused"] and job["pause"]["note"] == "disk full"
    assert job["pause"]["by"] == "token 'ops' (role operator)"
    resp, text = ops.get("/jobs/hello")
    assert "disk full" in text and 'id="resume"' in text
    resp, _ = ops.post("/jobs/hello/resume", {"csrf": csrf})
    assert resp.status == 303 and not node.call("job", {"name": "hello"})["paused"]
    resp, _ = ops.post("/jobs/hello/run", {"csrf": csrf})
    assert resp.status == 303
    run_id = int(resp.headers["Location"].rsplit("/", 1)[1])
    wait_for(lambda: node.call("run", {"run_id": run_id})["state"] == "succeeded",
             what="the run started from the UI")
    poll = json.loads(ops.get(f"/runs/{run_id}/log?offset=0")[1])
    assert poll["text"] == "hi\n" and poll["state"] == "succeeded" and not poll["active"]
    assert ops.get(f"/runs/{run_id}")[0].status == 200
    records = node.call("audit", {"limit": 20})["records"]
    done = {(a["user"], a["command"], a["target"], a["allowed"]) for a in records}
    assert {("token:ops", "pause", "hello", 1), ("token:ops", "resume", "hello", 1),
            ("token:ops", "run_now", "hello", 1)} <= {
        (u, c, t, int(al)) for u, c, t, al in done}
    # the session cookie on the API: a write without the CSRF header is refused
    resp, text = ops.post("/api/v1/jobs")
    assert resp.status == 403 and "X-CSRF-Token" in json.loads(text)["detail"]
    resp, _ = ops.post("/api/v1/jobs", headers={"X-CSRF-Token": csrf})
    assert resp.status == 405  # past the checks: the route takes no POST
    # a viewer: the server refuses (not just the page), and audits the refusal
    viewer = Browser(url)
    viewer.login(sec["watch"])
    vcsrf = viewer.csrf("/jobs/hello")
    for path in ("/jobs/hello/pause", "/jobs/hello/run", "/jobs/hello/resume"):
        resp, text = viewer.post(path, {"csrf": vcsrf, "note": "no"})
        assert resp.status == 403 and "needs operator" in text, path
    assert not node.call("job", {"name": "hello"})["paused"]
    wait_for(lambda: any(a["user"] == "token:watch" and not a["allowed"]
                         for a in node.call("audit", {"limit": 20})["records"]),
             what="the viewer's refusal audited")
    # a token limited to bk-*: its jobs only
    bk = Browser(url)
    bk.login(sec["bk"])
    bcsrf = bk.csrf("/jobs")
    resp, text = bk.get("/jobs")
    assert "bk-db" in text and "/jobs/hello" not in text
    assert bk.get("/jobs/hello")[0].status == 403
    assert bk.post("/jobs/hello/pause", {"csrf": bcsrf})[0].status == 403
    # ... and that refusal is in the audit log, as the API's are (issue 32 point 7)
    wait_for(lambda: any(r["target"] == "hello" and r["user"] == "token:bk"
                         and r["command"] == "pause" and not r["allowed"]
                         for r in node.call("audit", {"limit": 50})["records"]),
             what="the UI's refusal outside the glob audited")
    assert bk.post("/jobs/bk-db/pause", {"csrf": bcsrf})[0].status == 303
    assert ops.get(f"/runs/{run_id}")[0].status == 200
    assert bk.get(f"/runs/{run_id}")[0].status == 403
    assert bk.get(f"/runs/{run_id}/log")[0].status == 403
    # the admin sees the audit log, paged
    adm = Browser(url)
    adm.login(sec["root"])
    resp, text = adm.get("/audit")
    assert resp.status == 200 and "token:ops" in text


def test_every_list_pages(node):
    for i in range(53):
        node.write_job(f"j{i:03d}", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    b = Browser(url)
    b.login(tokens(node)["ops"])
    resp, text = b.get("/jobs")
    names = re.findall(r'href="/jobs/(j\d+)"', text)
    assert len(set(names)) == 50 and "j052" not in names
    nxt = re.search(r'href="([^"]+)" id="next"', text).group(1).replace("&amp;", "&")
    resp, text = b.get(nxt)
    assert set(re.findall(r'href="/jobs/(j\d+)"', text)) == {"j050", "j051", "j052"}
    assert 'id="next"' not in text
    resp, text = b.get("/jobs?q=j05")
    assert set(re.findall(r'href="/jobs/(j\d+)"', text)) == {"j050", "j051", "j052"}
    # runs: 53 manual runs, pages of 50 by id
    csrf = b.csrf()
    for i in range(53):
        assert b.post(f"/jobs/j{i:03d}/run", {"csrf": csrf})[0].status == 303
    resp, text = b.get("/runs")
    first = re.findall(r'<td><a href="/runs/(\d+)">', text)
    assert len(first) == 50
    nxt = re.search(r'href="([^"]+)" id="next"', text).group(1).replace("&amp;", "&")
    rest = re.findall(r'<td><a href="/runs/(\d+)">', b.get(nxt)[1])
    assert len(rest) == 3 and max(map(int, rest)) < min(map(int, first))


def test_a_session_goes_on_on_another_node_when_its_node_dies(cluster):
    c = cluster()
    c.write_job("hello", {"schedule": "@yearly", "command": "echo hi"})
    c.start()
    lead = c.leader()
    first, second = c.followers()
    secret = lead.cli("token", "create", "--name", "ops", "--role", "operator").stdout.strip()
    b = Browser(first.call("status")["http"])
    wait_for(lambda: b.post("/login", {"token": secret})[0].status == 303,
             what="the token on the first follower")
    csrf = b.csrf("/jobs/hello")
    resp, text = b.post("/jobs/hello/run", {"csrf": csrf})
    assert resp.status == 303, text
    run_id = int(resp.headers["Location"].rsplit("/", 1)[1])
    # the log, from whichever node ran it
    wait_for(lambda: json.loads(b.get(f"/runs/{run_id}/log?offset=0")[1])["text"] == "hi\n",
             timeout=20, what="the run's log through the first follower")
    first.kill9()
    # the same cookie and CSRF token on another node
    other = Browser(second.call("status")["http"])
    other.cookies = dict(b.cookies)
    # (the second node may apply the login's StartSession a moment later)
    wait_for(lambda: other.get("/jobs/hello")[0].status == 200,
             what="the session on the second node")
    resp, text = other.get("/jobs/hello")
    assert resp.status == 200 and "ops · operator" in text
    resp, text = other.post("/jobs/hello/pause", {"csrf": csrf, "note": "moved"})
    assert resp.status == 303, text
    wait_for(lambda: second.call("job", {"name": "hello"})["paused"], what="paused")
    assert second.call("job", {"name": "hello"})["pause"]["by"] == "token 'ops' (role operator)"
    poll = json.loads(other.get(f"/runs/{run_id}/log?offset=0")[1])
    assert poll["state"] == "succeeded"
    assert poll["text"] == "hi\n" or "could not be read" in (poll["error"] or "") \
        or first.config["node_id"] in (poll["error"] or "")


def test_backfill_preview_and_start_alert_ack_from_the_pages(node):
    node.write_job("hourly", {"schedule": "0 * * * *", "command": "true"})
    node.write_job("bad", {"schedule": "@yearly", "command": "exit 2"})
    node.start()
    url = node.call("status")["http"]
    b = Browser(url)
    b.login(tokens(node)["ops"])
    csrf = b.csrf("/jobs/hourly")
    form = {"csrf": csrf, "from": "2026-11-01T00:00", "to": "2026-11-01T03:00",
            "reprocess": "missing", "note": "gap"}
    resp, text = b.post("/jobs/hourly/backfill", {**form, "go": "preview"})
    assert resp.status == 200 and "dry run" in text and "2026-11-01 01:00:00Z" in text
    assert node.call("backfills", {})["backfills"] == []  # a preview changes nothing
    # a long range: the first and last 50 fire times, the count of those between
    resp, text = b.post("/jobs/hourly/backfill", {**form, "from": "2026-10-01T00:00",
                                                  "go": "preview"})
    assert resp.status == 200 and "… 648 more fire times …" in text, text
    assert "2026-10-01 00:00:00Z" in text and "2026-11-01 03:00:00Z" in text
    assert "create 748" in text
    resp, text = b.post("/jobs/hourly/backfill", {**form, "go": "start"})
    assert resp.status == 303 and resp.headers["Location"] == "/backfills", text
    (bf,) = node.call("backfills", {})["backfills"]
    assert bf["job"] == "hourly" and bf["who"] == "token 'ops' (role operator)"
    resp, text = b.get("/backfills")
    assert resp.status == 200 and f"<td>{bf['id']}</td>" in text
    resp, text = b.post("/jobs/hourly/backfill", {**form, "from": "yesterday"})
    assert resp.status == 400 and "bad time" in text
    # rerun one of the backfilled fire times; explain another
    # (once the backfill's runs are over: the job forbids overlap, and a
    # rerun while its 02:00 or 03:00 run still runs is refused for it)
    node.wait_runs(lambda rs: any(r["fire_time"] == "2026-11-01T01:00:00Z" and
                                  r["state"] == "succeeded" for r in rs)
                   and sum(r["state"] == "succeeded" for r in rs) >= 4
                   and not any(r["state"] in ("pending", "assigned", "running", "queued",
                                              "waiting") for r in rs), job="hourly")
    resp, text = b.post("/jobs/hourly/rerun", {"csrf": csrf, "at": "2026-11-01T01:00"})
    assert resp.status == 303 and resp.headers["Location"].startswith("/runs/"), text
    wait_for(lambda: any(r["kind"] == "rerun" for r in node.call(
        "runs", {"job": "hourly", "limit": 20})["runs"]), what="the rerun")
    resp, text = b.get("/jobs/hourly?explain_at=2026-11-01T02:00Z")
    assert resp.status == 200 and "2026-11-01 02:00:00Z" in text and 'id="verdict"' in text
    # a failed run opens an alert; ack it from the alerts page
    run_id = node.call("run_now", {"job": "bad"})["run_id"]
    wait_for(lambda: node.call("alerts", {})["alerts"], what="the failed run's alert")
    (alert,) = node.call("alerts", {})["alerts"]
    resp, text = b.get("/alerts")
    assert resp.status == 200 and f"/alerts/{alert['alert_id']}/ack" in text
    resp, _ = b.post(f"/alerts/{alert['alert_id']}/ack", {"csrf": csrf, "note": "known"})
    assert resp.status == 303
    wait_for(lambda: not node.call("alerts", {})["alerts"], what="the alert acked")
    assert b.get(f"/runs/{run_id}")[0].status == 200


def test_the_overview_counts_fire_times_that_failed_for_good_not_attempts_a_retry_made_good(
        node, tmp_path):
    """Issue 33 (6): "failed 24 h" counted a failed attempt whose retry
    succeeded."""
    mark = tmp_path / "tried"
    node.write_job("flaky", {"schedule": "@yearly", "retries": {"max": 1, "delay": "100ms"},
                             "command": f"test -e {mark} || {{ touch {mark}; exit 1; }}"})
    node.write_job("broken", {"schedule": "@yearly", "command": "false"})
    node.start()
    for job in ("flaky", "broken"):
        node.cli("run-now", job, "--wait")
    assert [r["state"] for r in node.runs("flaky")] == ["succeeded", "failed"]
    b = Browser(node.call("status")["http"])
    b.login(tokens(node)["watch"])
    _, text = b.get("/")
    tile = re.search(r'href="/runs\?state=failed"[^>]*><b>(\d+)', text)
    assert tile and tile.group(1) == "1", text
    failures = text.split('id="failures"')[1].split("</table>")[0]
    assert "/jobs/broken" in failures and "/jobs/flaky" not in failures


def _json_script(text: str, ident: str) -> dict:
    raw = text.split(f'id="{ident}">')[1].split("</script>")[0]
    return json.loads(raw.replace("&#34;", '"').replace("&#39;", "'").replace("&amp;", "&"))


def test_pictures_of_time_show_what_the_daemon_ran(node):
    """Issue 33 (2): the overview's activity, the timeline across nodes and
    a job's calendar, from a real daemon's runs; bad windows refused with
    what to do."""
    node.write_job("tick", {"schedule": "@every 1s", "command": "true"})
    node.write_job("broken", {"schedule": "@yearly", "command": "false"})
    node.start()
    node.cli("run-now", "broken", "--wait")
    wait_for(lambda: sum(r["state"] == "succeeded" for r in node.runs("tick")) >= 3,
             what="three fire times of tick ran")
    me = node.runs("broken")[0]["node"]
    b = Browser(node.call("status")["http"])
    b.login(tokens(node)["watch"])

    resp, text = b.get("/?span=1h")
    assert resp.status == 200, text
    act = _json_script(text, "activity-data")
    assert act["step"] == 60 and len(act["x"]) == 60
    assert sum(act["outcomes"]["succeeded"]) >= 3 and sum(act["outcomes"]["failed"]) == 1
    assert max(v for v in act["lateness"]["p99"] if v is not None) < 5
    assert list(act["running"]) == [me]
    resp, text = b.get("/?span=2w")
    assert resp.status == 400 and "pick one of 1h, 6h, 1d, 7d" in text

    resp, text = b.get("/timeline")
    assert resp.status == 200 and 'id="timeline"' in text, text
    failed = next(r for r in node.runs("broken"))
    bar = re.search(rf'<a href="/runs/{failed["run_id"]}" class="bar" data-run="\d+" '
                    rf'data-node="([^"]+)" data-job="broken">.*?class="(\w+)"', text)
    assert bar and bar.groups() == (me, "bad"), text
    assert f">{me}</text>" in text
    resp, text = b.get("/timeline?start=2026-12-05T10:00:00Z&end=2026-12-05T09:00:00Z")
    assert resp.status == 400 and "give start before end" in text
    resp, text = b.get("/timeline?start=2026-11-01T00:00:00Z&end=2026-12-05T00:00:00Z")
    assert resp.status == 400 and "at most 7 days" in text
    resp, text = b.get("/timeline?start=yesterday")
    assert resp.status == 400

    resp, text = b.get("/jobs/tick")
    cells = re.findall(r'<rect [^>]*class="day (\w+) l(\d)" data-day="([\d-]+)"', text)
    assert len(cells) == 84 + 28      # the last 84 days, today included, and 28 ahead
    past, ahead = cells[:84], cells[84:]
    assert past[-1][0] in ("succeeded", "running") and past[-1][1] != "0", past[-1]
    assert {c[0] for c in past[:-2]} == {"none"}   # a new job: nothing before yesterday
    assert ahead[0][0] == "planned"   # (an every-second job: its next fire times)

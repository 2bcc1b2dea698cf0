"""API v1 through real daemons (issue 16, the "api" part): every route
authorised (401 without a token, 403 for a role too low, 403 for a job
outside the token's ``--jobs`` glob), bad input answered 400 problem+json,
writes audited as ``token:NAME``, ``Idempotency-Key`` honoured, a node
drained through the API on a cluster."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


def call(url: str, method: str, path: str, secret: str | None = None, body=None,
         headers: dict | None = None) -> tuple[int, dict, object]:
    """(status, headers, JSON or text) of one request to /api/v1/PATH."""
    data = None
    hdrs = dict(headers or {})
    if secret:
        hdrs["Authorization"] = f"Bearer {secret}"
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url + "/api/v1/" + path, data=data, method=method,
                                 headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            status, h, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        status, h, raw = exc.code, exc.headers, exc.read()
    ctype = h.get("Content-Type", "")
    return status, h, json.loads(raw) if "json" in ctype else raw.decode()


def problem(res, status: int) -> dict:
    got, h, doc = res
    assert got == status, (got, doc)
    assert h["Content-Type"].startswith("application/problem+json"), h["Content-Type"]
    assert doc["status"] == status and doc["title"]
    return doc


def token(node, name: str, role: str, jobs: str | None = None) -> str:
    res = node.cli("token", "create", "--name", name, "--role", role,
                   *(("--jobs", jobs) if jobs else ()))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def audited(node, user: str, command: str, target: str, allowed: bool = True) -> dict:
    """Wait for the audit record (refusals are replicated on the side)."""
    def find():
        for rec in node.call("audit", {"limit": 200})["records"]:
            if (rec["user"], rec["command"], rec["target"], rec["allowed"]) == \
                    (user, command, target, allowed):
                return rec
        return None
    return wait_for(find, what=f"audit {user} {command} {target} allowed={allowed}")


@pytest.fixture
def api_node(node):
    node.write_job("db-backup", {"schedule": "@yearly", "command": "echo hello; echo world",
                                 "timezone": "Europe/Paris"})
    node.write_job("db-sleep", {"schedule": "@yearly", "command": "sleep 60"})
    node.write_job("db-fail", {"schedule": "@yearly", "command": "false",
                               "on_final_failure": "dead_letter",
                               "retries": {"max": 1, "delay": "100ms"}})
    node.write_job("web-report", {"schedule": "@yearly", "command": "echo web"})
    node.start()
    node.url = node.call("status")["http"]
    node.viewer = token(node, "v", "viewer")
    node.op = token(node, "op", "operator", "db-*")
    node.admin = token(node, "adm", "admin")
    return node


def fill(path: str) -> str:
    """A route's path with its parameters filled in."""
    return re.sub(r"{(\w+)}", lambda m: "1" if m.group(1) in ("id", "run_id") else "x",
                  path).removeprefix("/api/v1/")


def test_every_route_is_listed_and_refuses_no_token_and_a_role_too_low(api_node):
    n = api_node
    status, _, doc = call(n.url, "GET", "openapi.json")
    assert status == 200
    routes = [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]
    want = {("GET", "/api/v1/cluster"), ("GET", "/api/v1/nodes"),
            ("POST", "/api/v1/nodes/{node}/drain"), ("POST", "/api/v1/nodes/{node}/undrain"),
            ("GET", "/api/v1/jobs/{name}"), ("GET", "/api/v1/jobs/{name}/explain"),
            ("POST", "/api/v1/jobs/{name}/pause"), ("POST", "/api/v1/jobs/{name}/resume"),
            ("GET", "/api/v1/jobs/{name}/graph"), ("GET", "/api/v1/graph"),
            ("POST", "/api/v1/jobs/{name}/run"), ("GET", "/api/v1/runs/{run_id}"),
            ("POST", "/api/v1/runs/{run_id}/cancel"), ("POST", "/api/v1/jobs/{name}/rerun"),
            ("GET", "/api/v1/runs/{run_id}/log"), ("GET", "/api/v1/backfills"),
            ("POST", "/api/v1/backfills"), ("POST", "/api/v1/backfills/{id}/pause"),
            ("POST", "/api/v1/backfills/{id}/resume"), ("POST", "/api/v1/backfills/{id}/cancel"),
            ("GET", "/api/v1/alerts"), ("POST", "/api/v1/alerts/{id}/ack"),
            ("GET", "/api/v1/dead-letter"), ("POST", "/api/v1/dead-letter/{run_id}/requeue"),
            ("POST", "/api/v1/dead-letter/{run_id}/discard"), ("GET", "/api/v1/pools"),
            ("GET", "/api/v1/audit"), ("POST", "/api/v1/tokens"),
            ("DELETE", "/api/v1/tokens/{name}"), ("POST", "/api/v1/validate")}
    assert want <= {(m, p) for m, p, _ in routes}
    assert any(p["in"] == "path" for p in doc["paths"]["/api/v1/runs/{run_id}"]["get"]
               ["parameters"])
    for method, path, op in routes:
        role = op.get("x-cronrd-role")
        if role is None:
            continue
        problem(call(n.url, method, fill(path), None, {} if method == "POST" else None), 401)
        problem(call(n.url, method, fill(path), "crd_nosuch", None), 401)
        if role in ("operator", "admin"):
            doc = problem(call(n.url, method, fill(path), n.viewer,
                               {} if method == "POST" else None), 403)
            assert doc["needed"] == role, (method, path)
        if role == "admin":
            problem(call(n.url, method, fill(path), n.op, {} if method == "POST" else None),
                    403)


def test_job_detail_explain_graph_and_the_token_glob_on_reads(api_node):
    n = api_node
    status, _, job = call(n.url, "GET", "jobs/db-backup?next=3", n.op)
    assert status == 200 and job["name"] == "db-backup"
    assert job["timezone"] == "Europe/Paris" and job["spec"]["command"].startswith("echo")
    assert job["source"].endswith("db-backup.yaml") and job["source_line"] >= 1
    assert len(job["next_fires"]) == 3 and all(t.endswith("Z") for t in job["next_fires"])
    assert job["next_fire"].endswith("Z")
    # outside the operator token's glob db-*: refused, even to read
    doc = problem(call(n.url, "GET", "jobs/web-report", n.op), 403)
    assert "db-*" in doc["detail"]
    problem(call(n.url, "GET", "jobs/web-report/explain", n.op), 403)
    problem(call(n.url, "GET", "jobs/web-report/graph", n.op), 403)
    assert call(n.url, "GET", "jobs/web-report", n.viewer)[0] == 200  # no glob
    problem(call(n.url, "GET", "jobs/nosuch", n.viewer), 404)
    problem(call(n.url, "GET", "jobs/db-backup?next=many", n.viewer), 400)
    status, _, ex = call(n.url, "GET", "jobs/db-backup/explain?next=true", n.viewer)
    assert status == 200 and ex["job"] == "db-backup"
    problem(call(n.url, "GET", "jobs/db-backup/explain?at=yesterday", n.viewer), 400)
    status, _, graph = call(n.url, "GET", "graph", n.op)
    assert status == 200 and all(j["name"].startswith("db-") for j in graph["jobs"])
    status, _, graph = call(n.url, "GET", "jobs/db-backup/graph", n.viewer)
    assert status == 200 and [j["name"] for j in graph["jobs"]] == ["db-backup"]
    status, _, cl = call(n.url, "GET", "cluster", n.viewer)
    assert status == 200 and cl["leader"] == cl["node_id"] and cl["jobs"] == 4
    status, _, nodes = call(n.url, "GET", "nodes", n.viewer)
    assert status == 200 and [x["node"] for x in nodes["items"]] == [cl["node_id"]]
    status, _, pools = call(n.url, "GET", "pools", n.viewer)
    assert status == 200 and isinstance(pools, dict)


def test_pause_resume_run_cancel_rerun_and_log_audited_as_the_token(api_node):
    n = api_node
    status, _, res = call(n.url, "POST", "jobs/db-backup/pause", n.op, {"note": "disk full"})
    assert status == 200 and res["job"] == "db-backup"
    assert n.call("job", {"name": "db-backup"})["pause"]["note"] == "disk full"
    audited(n, "token:op", "pause", "db-backup")
    # refused: outside the glob, a role too low, bad input; the state unchanged
    doc = problem(call(n.url, "POST", "jobs/web-report/pause", n.op, {"note": "x"}), 403)
    assert "db-*" in doc["detail"]
    audited(n, "token:op", "pause", "web-report", allowed=False)
    problem(call(n.url, "POST", "jobs/db-backup/resume", n.viewer, {}), 403)
    rec = audited(n, "token:v", "POST /api/v1/jobs/{name}/resume", "db-backup", allowed=False)
    assert "has the role viewer" in rec["detail"] and rec["uid"] == -1
    problem(call(n.url, "POST", "jobs/db-backup/resume", n.op, b"{not json"), 400)
    problem(call(n.url, "POST", "jobs/db-backup/resume", n.op, [1, 2]), 400)
    problem(call(n.url, "POST", "jobs/db-backup/pause", n.op, {"note": 5}), 400)
    problem(call(n.url, "POST", "jobs/db-backup/pause", n.op, {"note": "x" * 2000}), 400)
    # a missing job within the token's glob is 404; outside it, 403 as for a
    # job that exists (tests/security/test_token_existence_oracle.py)
    problem(call(n.url, "POST", "jobs/db-nosuch/pause", n.op, {}), 404)
    problem(call(n.url, "POST", "jobs/nosuch/pause", n.op, {}), 403)
    assert not n.call("job", {"name": "web-report"})["paused"]
    assert call(n.url, "POST", "jobs/db-backup/resume", n.op, {})[0] == 200
    assert not n.call("job", {"name": "db-backup"})["paused"]
    audited(n, "token:op", "resume", "db-backup")

    # run now, its detail and its log as byte ranges
    status, _, res = call(n.url, "POST", "jobs/db-backup/run", n.op, {})
    assert status == 202 and res["job"] == "db-backup"
    run_id = res["run_id"]
    audited(n, "token:op", "run_now", "db-backup")
    n.wait_runs(lambda rs: any(r["run_id"] == run_id and r["state"] == "succeeded"
                               for r in rs), job="db-backup")
    status, _, run = call(n.url, "GET", f"runs/{run_id}", n.op)
    assert status == 200 and run["state"] == "succeeded" and run["timezone"] == "Europe/Paris"
    assert [a["run_id"] for a in run["attempts"]] == [run_id]
    status, h, text = call(n.url, "GET", f"runs/{run_id}/log?offset=0&length=3", n.op)
    assert status == 200 and text == "hel" and h["X-Cronrd-More"] == "true"
    status, h, text = call(n.url, "GET", f"runs/{run_id}/log?offset="
                           f"{h['X-Cronrd-Next-Offset']}", n.op)
    assert text == "lo\nworld\n" and h["X-Cronrd-More"] == "false"
    problem(call(n.url, "GET", f"runs/{run_id}/log?offset=-1", n.op), 400)
    problem(call(n.url, "GET", f"runs/{run_id}/log?length=0", n.op), 400)
    problem(call(n.url, "GET", "runs/abc", n.op), 400)
    problem(call(n.url, "GET", "runs/99999", n.op), 404)
    problem(call(n.url, "POST", "jobs/db-backup/run", n.op, {"params": {"x": "1"}}), 400)
    # a run of a job outside the glob: neither read nor its log
    web = call(n.url, "POST", "jobs/web-report/run", n.admin, {})[2]["run_id"]
    problem(call(n.url, "GET", f"runs/{web}", n.op), 403)
    problem(call(n.url, "GET", f"runs/{web}/log", n.op), 403)
    problem(call(n.url, "POST", f"runs/{web}/cancel", n.op, {}), 403)
    audited(n, "token:adm", "run_now", "web-report")

    # cancel
    sleeper = call(n.url, "POST", "jobs/db-sleep/run", n.op, {})[2]["run_id"]
    n.wait_runs(lambda rs: any(r["run_id"] == sleeper and r["state"] == "running"
                               for r in rs), job="db-sleep")
    # Issue 33 (6): a run-now its concurrency forbids now is a conflict with
    # the state (409), not bad input (400).
    doc = problem(call(n.url, "POST", "jobs/db-sleep/run", n.op, {}), 409)
    assert "not started" in doc["detail"], doc
    status, _, res = call(n.url, "POST", f"runs/{sleeper}/cancel", n.op, {})
    assert status == 200 and res["run_id"] == sleeper
    audited(n, "token:op", "cancel", str(sleeper))
    n.wait_runs(lambda rs: any(r["run_id"] == sleeper and r["state"] == "cancelled"
                               for r in rs), job="db-sleep")
    problem(call(n.url, "POST", f"runs/{sleeper}/cancel", n.op, {}), 400)  # already over



def test_idempotency_key_returns_the_first_answer_and_does_it_once(api_node):
    n = api_node
    key = {"Idempotency-Key": "7f1b2c3d-run-once"}
    s1, h1, first = call(n.url, "POST", "jobs/db-backup/run", n.op, {}, key)
    s2, h2, again = call(n.url, "POST", "jobs/db-backup/run", n.op, {}, key)
    assert s1 == s2 == 202 and first == again
    assert h2["Idempotent-Replayed"] == "true" and h1.get("Idempotent-Replayed") is None
    n.wait_runs(lambda rs: any(r["run_id"] == first["run_id"] and r["state"] == "succeeded"
                               for r in rs), job="db-backup")
    runs = [r for r in n.runs("db-backup") if r["kind"] == "manual"]
    assert [r["run_id"] for r in runs] == [first["run_id"]]  # done once
    # the same key with another body: refused; another token: its own keys
    doc = problem(call(n.url, "POST", "jobs/db-backup/run", n.op, {"key": "k2"}, key), 422)
    assert "another request" in doc["detail"]
    s3, h3, other = call(n.url, "POST", "jobs/db-backup/run", n.admin, {}, key)
    assert s3 == 202 and other["run_id"] != first["run_id"]
    assert h3.get("Idempotent-Replayed") is None
    # a refused request is not kept: the same key may be retried
    problem(call(n.url, "POST", "jobs/db-nosuch/pause", n.op, {}, {"Idempotency-Key": "p"}),
            404)
    problem(call(n.url, "POST", "jobs/db-backup/pause", n.op, {},
                 {"Idempotency-Key": "x" * 300}), 400)
    s4, _, _ = call(n.url, "POST", "jobs/db-backup/pause", n.op, {"note": "a"},
                    {"Idempotency-Key": "pause-1"})
    assert call(n.url, "POST", "jobs/db-backup/resume", n.op, {})[0] == 200
    s5, h5, _ = call(n.url, "POST", "jobs/db-backup/pause", n.op, {"note": "a"},
                     {"Idempotency-Key": "pause-1"})
    assert s4 == s5 == 200 and h5["Idempotent-Replayed"] == "true"
    assert not n.call("job", {"name": "db-backup"})["paused"]  # not paused again
    pauses = [r for r in n.call("audit", {"limit": 200})["records"]
              if (r["user"], r["command"]) == ("token:op", "pause")]
    assert len(pauses) == 1


def test_backfills_alerts_and_the_dead_letter(api_node):
    n = api_node
    # Europe/Paris: @yearly fires at 23:00 UTC on 31 December
    body = {"job": "db-backup", "from": "2019-06-01T00:00:00Z", "to": "2022-06-01T00:00:00Z"}
    status, _, plan = call(n.url, "POST", "backfills", n.op, {**body, "dry_run": True})
    assert status == 200 and plan["total"] == 3 and len(plan["lines"]) == 3
    problem(call(n.url, "POST", "backfills", n.op, {**body, "job": "web-report"}), 403)
    problem(call(n.url, "POST", "backfills", n.viewer, body), 403)
    problem(call(n.url, "POST", "backfills", n.op, {**body, "from": "last week"}), 400)
    problem(call(n.url, "POST", "backfills", n.op, {"job": "db-backup"}), 400)
    problem(call(n.url, "POST", "backfills", n.op, {**body, "order": "random"}), 400)
    status, _, bf = call(n.url, "POST", "backfills", n.op, {**body, "parallel": 3})
    assert status == 202
    audited(n, "token:op", "backfill", "db-backup")
    status, _, page = call(n.url, "GET", "backfills?limit=1", n.viewer)
    assert status == 200 and page["items"][0]["id"] == bf["backfill"]
    assert page["items"][0]["from"] == "2019-06-01T00:00:00Z"
    assert page["items"][0]["timezone"] == "Europe/Paris"
    problem(call(n.url, "GET", "backfills?cursor=nonsense", n.viewer), 400)
    wait_for(lambda: call(n.url, "GET", "backfills?limit=1", n.viewer)[2]["items"][0]
             ["counts"]["done"] == 3, what="the backfill done")
    # rerun one of its fire times
    problem(call(n.url, "POST", "jobs/db-backup/rerun", n.op, {}), 400)
    problem(call(n.url, "POST", "jobs/db-backup/rerun", n.op, {"at": "soon"}), 400)
    problem(call(n.url, "POST", "jobs/db-backup/rerun", n.op,
                 {"at": "2020-12-31T12:00:00Z"}), 400)  # not a fire time
    at = "2020-12-31T23:00:00Z"
    status, _, res = call(n.url, "POST", "jobs/db-backup/rerun", n.op,
                          {"at": at, "dry_run": True})
    assert status == 200 and res["dry_run"] is True and res["fire_time"] == at
    status, _, res = call(n.url, "POST", "jobs/db-backup/rerun", n.op, {"at": at})
    assert status == 202 and res["fire_time"] == at
    audited(n, "token:op", "rerun", "db-backup")
    # pause, resume, cancel a backfill still running
    status, _, slow = call(n.url, "POST", "backfills", n.op,
                           {"job": "db-sleep", "from": "2010-01-01T00:00:00Z",
                            "to": "2020-01-01T00:00:00Z"})
    assert status == 202
    bid = slow["backfill"]
    for verb in ("pause", "resume", "cancel"):
        status, _, res = call(n.url, "POST", f"backfills/{bid}/{verb}", n.op, {})
        assert status == 200, res
    audited(n, "token:op", "backfill_state", str(bid))
    problem(call(n.url, "POST", "backfills/9999/pause", n.op, {}), 404)

    # a failed run: an alert and a dead letter
    run_id = call(n.url, "POST", "jobs/db-fail/run", n.op, {})[2]["run_id"]
    dead = wait_for(lambda: call(n.url, "GET", "dead-letter", n.viewer)[2]["items"],
                    what="the dead letter")
    # the dead letter holds the last attempt; the run's detail lists both
    status, _, run = call(n.url, "GET", f"runs/{run_id}", n.op)
    assert [(a["attempt"], a["state"]) for a in run["attempts"]] == [(1, "failed"),
                                                                      (2, "failed")]
    assert dead[0]["run_id"] == run["attempts"][1]["run_id"]
    assert dead[0]["run"]["state"] == "failed"
    assert dead[0]["fire_time"].endswith("Z") and dead[0]["timezone"] == "UTC"
    alerts = wait_for(lambda: call(n.url, "GET", "alerts?job=db-fail", n.op)[2]["items"],
                      what="the failure alert")
    problem(call(n.url, "GET", "alerts?job=web-report", n.op), 403)
    aid = alerts[0]["alert_id"]
    problem(call(n.url, "POST", f"alerts/{aid}/ack", n.viewer, {}), 403)
    problem(call(n.url, "POST", f"alerts/{aid}/ack", n.op, {"note": ["x"]}), 400)
    problem(call(n.url, "POST", "alerts/999999/ack", n.op, {}), 404)
    status, _, res = call(n.url, "POST", f"alerts/{aid}/ack", n.op, {"note": "known"})
    assert status == 200
    audited(n, "token:op", "alert_ack", str(aid))
    assert aid not in [a["alert_id"] for a in call(n.url, "GET", "alerts", n.op)[2]["items"]]
    problem(call(n.url, "POST", "dead-letter/999999/discard", n.op, {}), 404)
    last = dead[0]["run_id"]
    status, _, res = call(n.url, "POST", f"dead-letter/{last}/discard", n.op,
                          {"note": "bad input"})
    assert status == 200
    audited(n, "token:op", "dead_letter_action", str(last))
    assert call(n.url, "GET", "dead-letter", n.viewer)[2]["items"] == []


def test_audit_tokens_and_validate(api_node):
    n = api_node
    call(n.url, "POST", "jobs/db-backup/pause", n.op, {})
    status, _, page = call(n.url, "GET", "audit?limit=2", n.admin)
    assert status == 200 and len(page["items"]) == 2 and page["next_cursor"]
    status, _, more = call(n.url, "GET", f"audit?limit=2&cursor={page['next_cursor']}",
                           n.admin)
    assert max(r["audit_id"] for r in more["items"]) < min(r["audit_id"]
                                                          for r in page["items"])
    problem(call(n.url, "GET", "audit?limit=0", n.admin), 400)
    # tokens: made and revoked by an admin token, audited as it
    status, _, made = call(n.url, "POST", "tokens", n.admin,
                           {"name": "ci", "role": "operator", "jobs": "db-*",
                            "expires": 3600})
    assert status == 201 and made["token"].startswith("crd_")
    audited(n, "token:adm", "token_create", "ci")
    assert call(n.url, "GET", "whoami", made["token"])[2]["role"] == "operator"
    problem(call(n.url, "POST", "tokens", n.admin, {"name": "x", "role": "god"}), 400)
    problem(call(n.url, "POST", "tokens", n.admin, {"name": "bad name!", "role": "viewer"}),
            400)
    problem(call(n.url, "POST", "tokens", n.admin, {"role": "viewer"}), 400)
    problem(call(n.url, "POST", "tokens", n.admin, {"name": "ci", "role": "viewer"}), 400)
    problem(call(n.url, "DELETE", "tokens/nosuch", n.admin), 404)
    assert call(n.url, "DELETE", "tokens/ci", n.admin)[0] == 200
    audited(n, "token:adm", "token_revoke", "ci")
    problem(call(n.url, "GET", "whoami", made["token"]), 401)
    # validate: problems with their lines, nothing stored
    bad = b"name: fresh\nschedule: '61 * * * *'\ncommand: true\n"
    status, _, res = call(n.url, "POST", "validate", n.viewer, bad,
                          {"Content-Type": "application/yaml"})
    assert status == 200 and res["valid"] is False
    assert res["problems"][0]["line"] == 2 and "schedule" in res["problems"][0]["message"]
    ok = b"schedule: '@daily'\ncommand: echo hi\n"
    status, _, res = call(n.url, "POST", "validate?name=fresh.yaml", n.viewer, ok,
                          {"Content-Type": "application/yaml"})
    assert status == 200 and res == {"valid": True, "jobs": ["fresh"], "problems": []}
    problem(call(n.url, "POST", "validate", n.viewer, b"\xff\xfe"), 400)
    problem(call(n.url, "POST", "validate?name=../x.yaml", n.viewer, ok), 400)
    problem(call(n.url, "GET", "jobs/fresh", n.viewer), 404)
    # a node of a one-host daemon cannot be drained
    problem(call(n.url, "POST", "nodes/x/drain", n.admin, {}), 400)


def test_a_node_drained_through_a_follower_gets_no_new_runs(cluster):
    c = cluster()
    # sleeping runs: the leader spreads them by load (without the drain: on every node)
    c.write_job("spread", {"schedule": "@yearly", "command": "sleep 2; echo slept",
                           "concurrency": "allow"})
    c.start()
    follower = c.followers()[0]
    fid = follower.config["node_id"]
    url = follower.call("status")["http"]
    admin = token(follower, "adm", "admin")
    op = token(follower, "op", "operator")
    wait_for(lambda: call(url, "GET", "whoami", admin)[0] == 200, what="the token applied")
    problem(call(url, "POST", f"nodes/{fid}/drain", op, {}), 403)
    status, _, res = call(url, "POST", f"nodes/{fid}/drain", admin, {"note": "disk swap"})
    assert status == 200 and res == {"node": fid, "drained": True}
    problem(call(url, "POST", "nodes/nosuch/drain", admin, {}), 400)
    audited(c.leader(), "token:adm", "node_drain", fid)
    nodes = {x["node"]: x for x in call(url, "GET", "nodes", op)[2]["items"]}
    assert nodes[fid]["drained"]["note"] == "disk swap"
    assert nodes[fid]["drained"]["by"] == "token 'adm' (role admin)"
    runs = [call(url, "POST", "jobs/spread/run", op, {}) for _ in range(6)]
    assert all(r[0] == 202 for r in runs), runs
    ids = [r[2]["run_id"] for r in runs]
    done = wait_for(lambda: (lambda rs: rs if len(rs) == 6 else None)(
        [r for r in follower.runs("spread") if r["run_id"] in ids and r["state"] ==
         "succeeded"]), 40, what="the six runs")
    assert fid not in {r["node"] for r in done}
    # a run's log through a node that did not run it; a read after the write
    status, h, text = call(url, "GET", f"runs/{done[0]['run_id']}/log?consistent=true", op)
    assert status == 200 and text == "slept\n" and h["X-Cronrd-More"] == "false"
    assert call(url, "POST", f"nodes/{fid}/undrain", admin, {})[0] == 200
    wait_for(lambda: call(url, "GET", "nodes", op)[2]["items"] and
             all(x["drained"] is None for x in call(url, "GET", "nodes", op)[2]["items"]),
             what="undrained")
    # the same from the CLI (root on any node), shown by `cronrd cluster members`
    leader = c.leader()
    res = leader.cli("cluster", "drain", fid, "--note", "kernel update")
    assert res.returncode == 0 and f"cronrd cluster undrain {fid}" in res.stdout, res.stderr
    wait_for(lambda: "(drained)" in follower.cli("cluster", "members").stdout,
             what="members shows the drain")
    member = {m["id"]: m for m in follower.call("cluster_members")["members"]}[fid]
    assert member["drained"]["note"] == "kernel update"
    audited(leader, "root", "node_drain", fid)
    assert leader.cli("cluster", "undrain", fid).returncode == 0
    wait_for(lambda: "(drained)" not in follower.cli("cluster", "members").stdout,
             what="members shows the undrain")


def test_a_client_certificate_writes_as_cert_name(node_factory, tmp_path):
    import ssl

    from cronrd.runtime.peers import tls
    tls.init_ca(tmp_path)
    server = tls.issue_node_cert(tmp_path, "web")
    deploy = tls.issue_node_cert(tmp_path, "deploy")
    node = node_factory(http={"listen": "127.0.0.1:0", "tls": {
        "cert": server.cert, "key": server.key, "client_ca": server.ca,
        "client_roles": {"deploy": "operator"}}})
    node.write_job("a", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    ctx = ssl.create_default_context(cafile=server.ca)
    ctx.load_cert_chain(deploy.cert, deploy.key)
    req = urllib.request.Request(url + "/api/v1/jobs/a/pause", data=b'{"note": "release"}',
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        assert r.status == 200
    assert node.call("job", {"name": "a"})["pause"]["note"] == "release"
    rec = audited(node, "cert:deploy", "pause", "a")
    assert rec["uid"] == -1


def test_a_token_reruns_and_backfills_downstream_only_within_its_glob(node):
    """`--downstream` reruns the child records too: a token limited to db-*
    may not rerun web-child that way, nor plan it (its dry run names it)."""
    node.write_job("db-parent", {"schedule": "0 0 1 1 *", "timezone": "UTC",
                                 "command": "true"})
    node.write_job("web-child", {"schedule": "@after", "command": "true",
                                 "depends_on": [{"job": "db-parent"}]})
    node.write_job("db-child", {"schedule": "@after", "command": "true",
                                "depends_on": [{"job": "db-parent"}]})
    node.start()
    url = node.call("status")["http"]
    op = token(node, "op", "operator", "db-*")
    full = token(node, "full", "operator")
    t = "2026-01-01T00:00:00Z"
    res = node.cli("backfill", "db-parent", "--from", t, "--to", t)
    assert res.returncode == 0, res.stderr
    node.wait_runs(lambda rs: sum(r["job"].endswith("child") and r["state"] == "succeeded"
                                  for r in rs) == 2, what="the children's first runs")
    for body in ({"at": t, "downstream": True}, {"at": t, "downstream": True,
                                                 "dry_run": True}):
        doc = problem(call(url, "POST", "jobs/db-parent/rerun", op, body), 403)
        assert "web-child" in doc["detail"], doc
    for dry in (True, False):
        doc = problem(call(url, "POST", "backfills", op, {
            "job": "db-parent", "from": t, "to": t, "downstream": True, "dry_run": dry}), 403)
        assert "web-child" in doc["detail"], doc
    assert len(node.runs("web-child")) == 1
    audited(node, "token:op", "rerun", "db-parent", allowed=False)
    # without --downstream, or with a token for every job, it is done
    status, _, res = call(url, "POST", "jobs/db-parent/rerun", op, {"at": t, "dry_run": True})
    assert status == 200, res
    status, _, res = call(url, "POST", "jobs/db-parent/rerun", full,
                          {"at": t, "downstream": True})
    assert status == 202, res
    node.wait_runs(lambda rs: len([r for r in rs if r["job"] == "web-child"]) == 2,
                   what="web-child rerun downstream by the unlimited token")


def test_a_run_planned_through_the_api_is_listed_and_cancelled(api_node):
    """Issue 35: POST .../run with at plans a run; the job lists it; POST
    /plans/ID/cancel removes it; a token limited to other jobs cannot."""
    n = api_node
    wait_for(lambda: n.call("status")["versions"]["cluster_version"] >= 2, 30,
             what="cluster version 2")
    status, _, plan = call(n.url, "POST", "jobs/db-backup/run", n.op, {"at": "+2h"})
    assert status == 202 and plan["state"] == "planned" and plan["job"] == "db-backup", plan
    status, _, job = call(n.url, "GET", "jobs/db-backup", n.viewer)
    assert [p["plan_id"] for p in job["planned"]] == [plan["plan_id"]]
    other = call(n.url, "POST", "jobs/web-report/run", n.admin, {"at": "+2h"})[2]
    problem(call(n.url, "POST", f"plans/{other['plan_id']}/cancel", n.op, {}), 403)
    problem(call(n.url, "POST", "jobs/db-backup/run", n.op, {"at": "yesterday"}), 400)
    status, _, res = call(n.url, "POST", f"plans/{plan['plan_id']}/cancel", n.op, {})
    assert status == 200 and res["state"] == "cancelled"
    problem(call(n.url, "POST", f"plans/{plan['plan_id']}/cancel", n.op, {}), 404)
    assert call(n.url, "GET", "jobs/db-backup", n.viewer)[2]["planned"] == []
    assert n.runs("db-backup") == []

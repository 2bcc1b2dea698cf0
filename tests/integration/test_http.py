"""The daemon's HTTP server (issue 16) through real daemons: /healthz,
/readyz and /metrics over TCP, a port that is taken, the server turned off,
and requests that must not hurt the daemon."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronrd.schedule import parse_iso
from harness import wait_for

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_health_readiness_and_metrics_of_a_running_daemon(node):
    node.write_job("ok", {"schedule": "* * * * * *", "command": "true"})
    node.write_job("idle", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    assert url.startswith("http://127.0.0.1:")
    assert "http " in node.cli("status").stdout  # `cronrd status` names it too
    assert get(url + "/healthz")[0] == 200
    status, ctype, body = get(url + "/readyz")
    assert status == 200 and json.loads(body) == {"ready": True, "role": "leader",
                                                  "leader": "n1"}
    node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="ok")
    wait_for(lambda: ("cronrd_job_last_success_timestamp_seconds", (("job_name", "ok"),))
             in samples(get(url + "/metrics")[2]), what="a last success in /metrics")
    status, ctype, body = get(url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    got = samples(body)
    assert got[("cronrd_raft_is_leader", ())] == 1
    assert got[("cronrd_node_up", (("node", "n1"),))] == 1
    assert got[("cronrd_raft_applied_index", ())] > 0
    ok = (("job_name", "ok"), ("origin", "schedule"), ("outcome", "succeeded"))
    assert got[("cronrd_job_runs_total", ok)] >= 1
    assert got[("cronrd_job_runs_total", (("job_name", "idle"), ("origin", "schedule"),
                                          ("outcome", "failed")))] == 0
    next_idle = got[("cronrd_job_next_fire_timestamp_seconds", (("job_name", "idle"),))]
    assert parse_iso(node.call("job", {"name": "idle"})["next_fire"]) == next_idle
    assert "event=http_handler_failed" not in node.daemon_log()


def test_bad_requests_do_not_hurt_the_daemon(node):
    node.start()
    url = node.call("status")["http"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    for junk in (b"\x00\xff garbage\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n" +
                 b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nContent-Length: -5\r\n\r\n", b"GET /he"):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(200)
            assert not reply or reply.startswith(b"HTTP/1.") and b" 200 " not in reply[:15]
    status, ctype, body = get(url + "/nosuch")
    assert status == 404 and ctype.startswith("application/problem+json")
    assert json.loads(body)["status"] == 404
    assert get(url + "/healthz")[0] == 200
    assert node.call("status")["ready"] and node.proc.poll() is None


def test_a_taken_port_leaves_the_jobs_running_and_is_tried_again(node_factory):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    node = node_factory(http={"listen": f"127.0.0.1:{port}"})
    node.write_job("ok", {"schedule": "* * * * * *", "command": "true"})
    try:
        node.start()
        wait_for(lambda: node.daemon_log().count("event=http_failed") >= 2,
                 what="http_failed logged at two attempts")
        status = node.call("status")
        assert status["http"] is None
        # Issue 33 (5): the problem shows in status, and the log says it once
        # per attempt without a traceback.
        assert [p for p in status["problems"] if f"cannot listen on 127.0.0.1:{port}" in p
                and "http: {listen:" in p], status["problems"]
        assert "Traceback" not in node.daemon_log()
        assert "event=service_failed" not in node.daemon_log()
        node.wait_runs(lambda rs: any(r["state"] == "succeeded" for r in rs), job="ok")
    finally:
        holder.close()
    url = wait_for(lambda: node.call("status")["http"], timeout=20, what="the port bound")
    assert url == f"http://127.0.0.1:{port}" and get(url + "/healthz")[0] == 200
    assert not [p for p in node.call("status")["problems"] if "cannot listen" in p]


def test_the_server_can_be_turned_off(node_factory):
    node = node_factory(http={"enabled": False})
    node.start()
    assert node.call("status")["http"] is None
    assert "event=http_listening" not in node.daemon_log()


def api(url: str, path: str, secret: str | None) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/api/v1/" + path, headers={
        "Authorization": f"Bearer {secret}"} if secret else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_tokens_made_with_the_cli_open_the_api_by_role(node):
    node.start()
    url = node.call("status")["http"]
    res = node.cli("token", "create", "--name", "grafana", "--role", "viewer",
                   "--expires", "90d")
    assert res.returncode == 0, res.stderr
    viewer = res.stdout.strip()
    assert res.stdout == viewer + "\n" and viewer.startswith("crd_")  # alone on stdout
    assert "not shown again" in res.stderr
    admin = node.cli("token", "create", "--name", "ops", "--role", "admin").stdout.strip()
    # stored hashed only
    assert viewer.encode() not in (node.base / "state" / "state.db").read_bytes()
    status, doc = api(url, "whoami", viewer)
    assert status == 200 and doc["name"] == "grafana" and doc["role"] == "viewer"
    assert doc["expires_at"].endswith("Z")
    assert api(url, "whoami", None)[0] == 401
    status, doc = api(url, "tokens", viewer)
    assert status == 403 and doc["needed"] == "admin"
    status, doc = api(url, "tokens", admin)
    assert status == 200 and [t["name"] for t in doc["tokens"]] == ["grafana", "ops"]
    listed = node.cli("token", "list")
    assert listed.returncode == 0 and "grafana" in listed.stdout and viewer not in listed.stdout
    again = node.cli("token", "create", "--name", "grafana", "--role", "admin")
    assert again.returncode == 1 and "exists already" in again.stderr
    assert node.cli("token", "revoke", "grafana").returncode == 0
    status, doc = api(url, "whoami", viewer)
    assert status == 401 and "unknown or revoked" in doc["detail"]
    records = node.call("audit", {"limit": 20})["records"]
    assert {("token_create", "grafana"), ("token_create", "ops"), ("token_revoke", "grafana")} \
        <= {(a["command"], a["target"]) for a in records}


def test_jobs_and_runs_through_the_api_page_like_the_cli(node):
    for name in ("a", "b", "c"):
        node.write_job(name, {"schedule": "@yearly", "command": "true"})
    node.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    viewer = node.cli("token", "create", "--name", "v", "--role", "viewer").stdout.strip()
    status, doc = api(url, "jobs?limit=3", viewer)
    assert status == 200 and [j["name"] for j in doc["items"]] == ["a", "b", "c"]
    status, doc = api(url, f"jobs?limit=3&cursor={doc['next_cursor']}", viewer)
    assert [j["name"] for j in doc["items"]] == ["tick"] and doc["next_cursor"] is None
    assert doc["items"][0]["schedule"] == "* * * * * *"
    node.wait_runs(lambda rs: sum(r["state"] == "succeeded" for r in rs) >= 3, job="tick")
    status, doc = api(url, "runs?job=tick&state=succeeded&limit=2&consistent=true", viewer)
    assert status == 200 and len(doc["items"]) == 2 and doc["next_cursor"]
    first = [r["run_id"] for r in doc["items"]]
    status, doc = api(url, f"runs?job=tick&state=succeeded&limit=2&cursor={doc['next_cursor']}",
                      viewer)
    assert doc["items"] and max(r["run_id"] for r in doc["items"]) < min(first)
    assert api(url, "runs?job=nosuch", viewer)[0] == 400
    status, doc = api(url, "openapi.json", None)
    assert status == 200 and "/api/v1/runs" in doc["paths"]


def test_a_cluster_every_node_serves_and_a_token_made_on_a_follower_works_everywhere(cluster):
    c = cluster()
    c.write_job("tick", {"schedule": "* * * * * *", "command": "true"})
    c.start()
    lead = c.leader()
    follower = c.followers()[0]
    res = follower.cli("token", "create", "--name", "ops", "--role", "admin")
    assert res.returncode == 0, res.stderr
    secret = res.stdout.strip()
    for n in c:
        url = n.call("status")["http"]
        wait_for(lambda: api(url, "whoami", secret)[0] == 200,
                 what=f"the token on {n.config['node_id']}")
        got = samples(get(url + "/metrics")[2])
        leads = 1 if n is lead else 0
        assert got[("cronrd_raft_is_leader", ())] == leads
        assert {k[1][0][1] for k in got if k[0] == "cronrd_node_up"} == {"a", "b", "c"}
        assert (("cronrd_job_next_fire_timestamp_seconds", (("job_name", "tick"),)) in got) \
            == bool(leads)
        assert get(url + "/readyz")[0] == 200


def test_metrics_can_ask_for_a_token(node_factory):
    node = node_factory(http={"listen": "127.0.0.1:0", "metrics_auth": "token"})
    node.start()
    url = node.call("status")["http"]
    status, ctype, body = get(url + "/metrics")
    assert status == 401 and ctype.startswith("application/problem+json")
    assert get(url + "/healthz")[0] == 200          # health stays open
    viewer = node.cli("token", "create", "--name", "prom", "--role", "viewer").stdout.strip()
    req = urllib.request.Request(url + "/metrics",
                                 headers={"Authorization": f"Bearer {viewer}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200 and b"cronrd_raft_is_leader" in r.read()

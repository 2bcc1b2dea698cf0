"""Issue 32 point 6: a token limited to some jobs (`--jobs GLOB`) learns
nothing of the jobs outside its glob. A write to a hidden job answered 403
and one to a missing job 404: an oracle of which jobs exist."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from harness import wait_for


def post(url: str, secret: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {secret}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


WRITES = [("/api/v1/jobs/{job}/pause", {}), ("/api/v1/jobs/{job}/resume", {}),
          ("/api/v1/jobs/{job}/run", {}),
          ("/api/v1/jobs/{job}/rerun", {"at": "2026-01-01T00:00:00Z"}),
          ("/api/v1/backfills", {"job": "{job}", "from": "2026-01-01T00:00:00Z",
                                 "to": "2026-01-02T00:00:00Z", "dry_run": True})]


def fill(template, job: str):
    if isinstance(template, str):
        return template.replace("{job}", job)
    if isinstance(template, dict):
        return {k: fill(v, job) for k, v in template.items()}
    return template


def test_a_hidden_job_and_a_missing_one_get_the_same_answer(node):
    node.write_job("db-nightly", {"schedule": "@yearly", "command": "true"})
    node.write_job("web-deploy", {"schedule": "@yearly", "command": "true"})
    node.start()
    res = node.cli("token", "create", "--name", "dbops", "--role", "operator", "--jobs", "db-*")
    assert res.returncode == 0, res.stderr
    secret = res.stdout.strip()
    url = wait_for(lambda: node.call("status")["http"], what="HTTP")
    for path, body in WRITES:
        hidden = post(url, secret, fill(path, "web-deploy"), fill(body, "web-deploy"))
        missing = post(url, secret, fill(path, "web-nosuch"), fill(body, "web-nosuch"))
        assert hidden[0] == missing[0] == 403, (path, hidden, missing)
        assert hidden[1]["detail"].replace("web-deploy", "X") == \
            missing[1]["detail"].replace("web-nosuch", "X"), (path, hidden, missing)
        # within its glob a missing job is still a plain 404
        assert post(url, secret, fill(path, "db-nosuch"), fill(body, "db-nosuch"))[0] == 404


def get(url: str, secret: str, path: str) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_admin_limited_to_some_jobs_reads_only_their_audit_records(node):
    node.write_job("db-nightly", {"schedule": "@yearly", "command": "true"})
    node.write_job("web-deploy", {"schedule": "@yearly", "command": "true"})
    node.start()

    def token(name: str, *jobs: str) -> str:
        res = node.cli("token", "create", "--name", name, "--role", "admin", *jobs)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()
    root, dbadm = token("root-api"), token("dbadm", "--jobs", "db-*")
    url = wait_for(lambda: node.call("status")["http"], what="HTTP")
    for job in ("web-deploy", "db-nightly"):
        assert post(url, root, f"/api/v1/jobs/{job}/pause", {})[0] == 200
    targets = wait_for(lambda: (lambda t: t if {"web-deploy", "db-nightly"} <= t else None)(
        {r["target"] for r in get(url, root, "/api/v1/audit")[1]["items"]}), what="records")
    assert "web-deploy" in targets   # the unlimited admin reads every record
    status, doc = get(url, dbadm, "/api/v1/audit?limit=1")
    assert status == 200 and [r["target"] for r in doc["items"]] == ["db-nightly"]
    seen = {r["target"] for r in get(url, dbadm, "/api/v1/audit")[1]["items"]}
    assert seen == {"db-nightly"}, seen


def test_lineage_and_pools_name_no_job_outside_the_tokens_glob(node_factory):
    node = node_factory(pools={"shared": {"slots": 4}})
    # a db- job after a secret job, and a secret job holding a slot of the shared pool
    node.write_job("sec-extract", {"schedule": "@yearly", "command": "true"})
    node.write_job("db-load", {"schedule": "@after", "depends_on": [{"job": "sec-extract"}],
                               "command": "true"})
    node.write_job("sec-hold", {"schedule": "@yearly", "pool": "shared", "command": "sleep 30"})
    node.write_job("db-hold", {"schedule": "@yearly", "pool": "shared", "command": "sleep 30"})
    node.start()
    res = node.cli("token", "create", "--name", "dbview", "--role", "viewer", "--jobs", "db-*")
    assert res.returncode == 0, res.stderr
    viewer = res.stdout.strip()
    url = wait_for(lambda: node.call("status")["http"], what="HTTP")
    node.call("run_now", {"job": "sec-extract"})
    child = wait_for(lambda: [r for r in node.runs(job="db-load") if r.get("lineage")],
                     what="db-load after sec-extract")[0]
    status, run = get(url, viewer, f"/api/v1/runs/{child['run_id']}")
    assert status == 200 and run["lineage"] == [] and run["lineage_hidden"] == 1
    listed = get(url, viewer, "/api/v1/runs?job=db-load")[1]["items"]
    assert listed and all("sec-" not in json.dumps(r) for r in listed)
    held = {node.call("run_now", {"job": j})["run_id"]: j for j in ("sec-hold", "db-hold")}
    wait_for(lambda: sum(len(p["runs"]) for p in node.call("pools")["pools"]) == 2,
             what="both runs holding slots")
    (pool,) = get(url, viewer, "/api/v1/pools")[1]["pools"]
    assert pool["in_use"] == 2   # counts stay; only names (run ids) are confined
    assert [held[r] for r in pool["runs"]] == ["db-hold"]

"""Webhook triggers through real daemons: POST /api/v1/hooks/NAME signed with
the hook's HMAC key starts the jobs that list it under triggers:, once per
dedupe key, on any node (http/hooks.py)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest
import yaml

from cronrd.runtime.http.hooks import sign
from harness import wait_for

pytestmark = pytest.mark.integration

KEY = b"k3y-for-the-deploy-hook-0123456789"


def post(url: str, hook: str, body: bytes, secret: bytes | None = KEY,
         stamp: float | None = None, signature: str | None = None) -> tuple[int, dict]:
    ts = str(int(time.time() if stamp is None else stamp))
    headers = {"Content-Type": "application/json", "X-Cronrd-Timestamp": ts}
    if signature is not None:
        headers["X-Cronrd-Signature"] = signature
    elif secret is not None:
        headers["X-Cronrd-Signature"] = sign(secret, ts, body)
    req = urllib.request.Request(f"{url}/api/v1/hooks/{hook}", data=body, headers=headers,
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def hook_config(base) -> dict:
    path = base / "deploy.secret"
    path.write_bytes(KEY + b"\n")
    os.chmod(path, 0o600)
    return {"deploy": {"secret_file": str(path), "dedupe": "$.delivery.id",
                       "replay_window": "2m"}}


def test_a_signed_hook_starts_its_jobs_once_per_key(node_factory, tmp_path):
    node = node_factory(hooks=hook_config(tmp_path))
    for name in ("build", "notify"):
        node.write_job(name, {"schedule": "@yearly", "command": f"echo {name}",
                              "triggers": ["deploy"]})
    node.write_job("unrelated", {"schedule": "@yearly", "command": "true"})
    node.write_job("needs", {"schedule": "@yearly", "command": "true", "triggers": ["deploy"],
                             "params": {"target": {"required": True}}})
    node.start()
    url = node.call("status")["http"]
    body = json.dumps({"delivery": {"id": "d-1"}, "ref": "main"}).encode()

    # refused: a wrong key, a changed body, no signature, an old timestamp, no such hook
    assert post(url, "deploy", body, secret=b"wrong-key-wrong-key-wrong")[0] == 401
    ts = str(int(time.time()))
    status, doc = post(url, "deploy", body + b" ", stamp=float(ts),
                       signature=sign(KEY, ts, body))
    assert status == 401 and "signature does not match" in doc["detail"]
    assert post(url, "deploy", body, secret=None)[0] == 401
    status, doc = post(url, "deploy", body, stamp=time.time() - 600)
    assert status == 401 and "X-Cronrd-Timestamp" in doc["detail"]
    assert post(url, "nosuch", body)[0] == 404
    assert node.call("runs", {"job": "build"})["runs"] == []  # nothing started

    status, doc = post(url, "deploy", body)
    assert status == 202, doc
    assert sorted(r["job"] for r in doc["runs"]) == ["build", "notify"]
    assert doc["errors"][0]["job"] == "needs" and "--param target" in doc["errors"][0]["detail"]
    assert doc["key"] == "hook:deploy:d-1"
    first = {r["job"]: r["run_id"] for r in doc["runs"]}
    node.wait_runs(lambda rs: rs and rs[0]["state"] == "succeeded", job="build")
    # The same delivery again (a new signature, a new timestamp): no second run.
    status, doc = post(url, "deploy", body)
    assert status == 200 and all(r["existing"] for r in doc["runs"])
    assert {r["job"]: r["run_id"] for r in doc["runs"]} == first
    assert len(node.call("runs", {"job": "build"})["runs"]) == 1
    # A new key starts them again.
    status, doc = post(url, "deploy", json.dumps({"delivery": {"id": "d-2"}}).encode())
    assert status == 202 and len(doc["runs"]) == 2
    assert len(node.call("runs", {"job": "build"})["runs"]) == 2
    assert node.call("runs", {"job": "unrelated"})["runs"] == []
    # A body without the dedupe field is refused (and starts nothing).
    status, doc = post(url, "deploy", b'{"ref": "main"}')
    assert status == 400 and "$.delivery.id" in doc["detail"]
    # A paused job is not started by its hook.
    assert node.cli("pause", "notify").returncode == 0
    status, doc = post(url, "deploy", json.dumps({"delivery": {"id": "d-3"}}).encode())
    assert [r["job"] for r in doc["runs"]] == ["build"]
    assert doc["errors"][0]["job"] == "notify" and "paused" in doc["errors"][0]["detail"]
    assert node.call("runs", {"job": "needs"})["runs"] == []
    audit = node.call("audit", {"limit": 50})["records"]
    assert any(a["command"] == "hook" and a["user"] == "hook:deploy" for a in audit)
    assert "event=http_handler_failed" not in node.daemon_log()


def test_a_key_used_on_one_node_starts_nothing_on_another(cluster, tmp_path):
    c = cluster()
    hooks = hook_config(tmp_path)
    for n in c:  # every node has the hook (the sender may reach any of them)
        n.config["hooks"] = hooks
        n.config_path.write_text(yaml.safe_dump(n.config))
    c.write_job("build", {"schedule": "@yearly", "command": "true", "triggers": ["deploy"]})
    c.start()
    a, b = c.followers()[0], c.leader()
    body = json.dumps({"delivery": {"id": "x-9"}}).encode()
    status, doc = post(a.call("status")["http"], "deploy", body)
    assert status == 202 and len(doc["runs"]) == 1
    run_id = doc["runs"][0]["run_id"]
    status, doc = wait_for(lambda: (r := post(b.call("status")["http"], "deploy", body))[0]
                           != 503 and r, what="the repeat on the leader")
    assert status == 200 and doc["runs"][0]["run_id"] == run_id
    # the leader changes; the key still holds
    old = c.leader()
    old.kill9()
    new = c.leader(timeout=30)
    assert new is not old
    status, doc = post(new.call("status")["http"], "deploy", body)
    assert status == 200 and doc["runs"][0]["run_id"] == run_id
    assert len(new.call("runs", {"job": "build"})["runs"]) == 1
    # Without a majority nothing can be committed: 503, send again later.
    rest = [n for n in c.running() if n is not new]
    for n in rest:
        n.kill9()
    status, doc = post(new.call("status")["http"], "deploy",
                       json.dumps({"delivery": {"id": "x-10"}}).encode())
    assert status == 503 and "send it again" in doc["detail"], doc

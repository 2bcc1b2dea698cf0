"""Issue 32 point 7: the audit log says what the cluster decided. A request
the caller was allowed to make but apply then refused was recorded only as
allowed; logins and failed logins were not recorded at all."""

from __future__ import annotations

import http.client
from urllib.parse import urlencode, urlsplit

import pytest

from cronrd.errors import CronrdError
from harness import wait_for


def records(node) -> list[dict]:
    return node.call("audit", {"limit": 200})["records"]


def test_a_request_allowed_then_refused_is_audited_as_refused(node):
    node.write_job("nightly", {"schedule": "@yearly", "command": "true"})
    node.start()
    # allowed (root may rerun), then refused: the time is no fire time of it
    with pytest.raises(CronrdError, match="not a fire time"):
        node.call("rerun", {"job": "nightly", "at": 1_767_225_601})
    got = wait_for(lambda: (lambda rs: rs if len(rs) == 2 else None)(
        [r for r in records(node) if r["command"] == "rerun"]), 15, what="both records")
    assert [r["allowed"] for r in got] == [False, True]   # newest first
    assert got[0]["target"] == "nightly"
    assert got[0]["detail"].startswith("refused after it was allowed: cannot rerun")


def post_form(url: str, path: str, form: dict) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=15)
    conn.request("POST", path, body=urlencode(form),
                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    status = conn.getresponse().status
    conn.close()
    return status


def test_logins_and_failed_logins_are_audited(node):
    node.start()
    res = node.cli("token", "create", "--name", "ui-ops", "--role", "operator")
    assert res.returncode == 0, res.stderr
    url = wait_for(lambda: node.call("status")["http"], what="HTTP")
    assert post_form(url, "/login", {"token": res.stdout.strip(), "next": "/"}) == 303
    assert post_form(url, "/login", {"token": "crd_" + "0" * 40, "next": "/"}) == 401
    ok = wait_for(lambda: [r for r in records(node) if r["command"] == "login"
                           and r["allowed"]], what="the login audited")
    assert ok[0]["user"] == "token:ui-ops" and ok[0]["target"] == "ui-ops"
    bad = wait_for(lambda: [r for r in records(node) if r["command"] == "login"
                            and not r["allowed"]], what="the failed login audited")
    assert "127.0.0.1" in bad[0]["user"] and "crd_0000" not in str(bad[0])  # no secret kept

"""Issue 32, point 1: backfill planning as a denial of service. A dry run or
a forced create over decades of a minutely job, from an operator token
limited by ``--jobs``, planned 1,000,001 fire times before it was refused;
a second create was refused only after 11 s of planning and audited as
allowed. Now, through the API of a live daemon: the range is counted
first (a refusal plans at most MAX_FIRES + 1), ``force`` is an admin's,
"one open backfill per job" is checked before planning, a dry run answers
a capped excerpt, and every create's outcome is audited as the cluster
decided it. (The availability half, a fire time kept on time meanwhile, is
bench/hostile_load.py's and the unit tests' of runtime/leader.)"""

from __future__ import annotations

import json

import pytest

from cronrd.decisions import backfill as BD
from tests.security.test_token_confinement import post

pytestmark = pytest.mark.integration

DECADES = {"from": "2000-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}   # 13.7M minutes


def token(node, name: str, role: str, *extra: str) -> str:
    res = node.cli("token", "create", "--name", name, "--role", role, *extra)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def audit(node) -> list[dict]:
    res = node.cli("audit", "--json", "--limit", "100")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    return out["records"] if isinstance(out, dict) else out


def test_decades_of_a_minutely_job_are_refused_by_count_and_force_is_an_admins(node):
    node.write_job("db-minutely", {"schedule": "* * * * *", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    ops = token(node, "dbops", "operator", "--jobs", "db-*")
    admin = token(node, "root", "admin")
    # a dry run over 26 years: refused by counting, naming the bound
    status, body = post(url, ops, "/api/v1/backfills",
                        {"job": "db-minutely", **DECADES, "dry_run": True})
    assert status == 400 and f"more than {BD.MAX_FIRES} fire times" in body["detail"], body
    # force is an admin's, refused before any planning, and audited as refused
    status, body = post(url, ops, "/api/v1/backfills",
                        {"job": "db-minutely", **DECADES, "force": True})
    assert status == 403 and "admin" in body["detail"], body
    # even an admin's force stops at the hard bound (a log entry has a size)
    status, body = post(url, admin, "/api/v1/backfills",
                        {"job": "db-minutely", **DECADES, "dry_run": True, "force": True})
    assert status == 400 and f"more than {BD.HARD_MAX_FIRES} fire times" in body["detail"]
    # a dry run within the bound answers an excerpt, not every fire time
    days = {"from": "2025-01-01T00:00:00Z", "to": "2025-01-06T23:59:00Z"}  # 8,640
    status, body = post(url, ops, "/api/v1/backfills",
                        {"job": "db-minutely", **days, "dry_run": True})
    assert status == 200 and body["total"] == 6 * 1440
    assert len(body["lines"]) == 2 * BD.DRY_RUN_LINES and body["omitted"] == \
        6 * 1440 - 2 * BD.DRY_RUN_LINES
    # one open backfill per job, checked before the second is planned
    day = {"from": "2025-01-01T00:00:00Z", "to": "2025-01-01T23:59:00Z"}
    status, first = post(url, ops, "/api/v1/backfills", {"job": "db-minutely", **day})
    assert status == 202, first  # accepted: its runs follow
    status, body = post(url, ops, "/api/v1/backfills",
                        {"job": "db-minutely", **DECADES})
    assert status == 400 and "still open" in body["detail"], body
    records = [r for r in audit(node) if r.get("command") == "backfill"]
    refused = [r for r in records if not r["allowed"]]
    assert any("admin" in (r.get("detail") or "") for r in refused), records
    assert any("still open" in (r.get("detail") or "") for r in refused), records
    assert sum(1 for r in records if r["allowed"]) == 1, records

"""Who may do what (cronrd/runtime/control/access.py): the HTTP API's token caller."""

from __future__ import annotations

import pytest

from cronrd.errors import PermissionDenied
from cronrd.jobspec import JobSpec
from cronrd.runtime.control.access import Caller, check_admin, check_job, check_token_sees


def tok(role: str, jobs: str = "") -> Caller:
    return Caller.of_token({"name": "ci", "role": role, "jobs": jobs, "expires_at": None})


def spec(name: str) -> JobSpec:
    return JobSpec(name=name, schedule="@daily", command="true", user="root")


def test_a_token_caller_is_named_for_its_token_and_never_privileged():
    c = tok("admin")
    assert (c.uid, c.gid, c.pid, c.name) == (-1, -1, 0, "token:ci")
    assert not c.privileged
    assert c.describe() == "token 'ci' (role admin)"
    # a client certificate's principal (http_certs.principal) keeps its name
    cert = Caller.of_token({"name": "cert:backup.example", "role": "operator", "jobs": "",
                            "expires_at": None, "created_at": None, "node": None})
    assert cert.name == "cert:backup.example" and not cert.privileged
    assert cert.describe() == "certificate 'backup.example' (role operator)"


@pytest.mark.parametrize("role,ok", [("viewer", False), ("operator", True), ("admin", True)])
def test_a_token_acts_on_a_job_from_operator_up(role, ok):
    if ok:
        check_job(tok(role), "cronrd pause backup", spec("backup"))
    else:
        with pytest.raises(PermissionDenied, match="needs an operator or admin token"):
            check_job(tok(role), "cronrd pause backup", spec("backup"))


def test_a_token_acts_only_on_the_jobs_its_glob_matches():
    op = tok("operator", "db-*")
    check_job(op, "cronrd pause db-backup", spec("db-backup"))
    with pytest.raises(PermissionDenied, match="only on the jobs matching 'db-\\*'"):
        check_job(op, "cronrd pause web", spec("web"))
    # a job that is gone: by its name; no name, no glob match
    check_job(op, "cronrd cancel 5", None, "db-old")
    with pytest.raises(PermissionDenied):
        check_job(op, "cronrd cancel 5", None)
    check_token_sees(tok("viewer", "db-*"), "read", "db-x")
    with pytest.raises(PermissionDenied):
        check_token_sees(tok("viewer", "db-*"), "read", "web")
    check_token_sees(tok("viewer"), "read", "anything")


def test_only_an_admin_token_passes_the_admin_check():
    check_admin(tok("admin"), "cronrd token create")
    for role in ("viewer", "operator"):
        with pytest.raises(PermissionDenied, match="needs an admin token"):
            check_admin(tok(role), "cronrd token create")
    # uid -1 is not root, whatever the token
    assert not Caller(uid=-1, gid=-1, pid=0, name="").privileged

"""Hostile pings (issue 35): who may say a watch's job ran. On the control
socket: root, the daemon's user or the watch's own user, never another
local user (a refusal is audited); with an API token: one of role ping (or
operator, admin) whose --jobs names the watch; a viewer's or another
watch's token is refused; bad input is a usage error, never a crash."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from cronrd.errors import CronrdError, PermissionDenied, UsageError
from cronrd.runtime.control import handlers as H
from cronrd.runtime.control.access import Caller
from cronrd.state import commands as C
from tests.unit.runtime.leader.test_backfills_requests import Clock, Proposals
from tests.unit.state.test_state import T0, Log

OWNER = 54321      # the watch's user:
STRANGER = 54322   # a local user who may reach the socket, nothing more

ROOT = Caller(uid=0, gid=0, pid=1, name="root")


def token(role: str, jobs: str = "") -> Caller:
    return Caller.of_token({"name": "t", "role": role, "jobs": jobs})


def handlers():
    log = Log()
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))
    log.put("w", schedule="*/10 * * * *", command="", watch={"grace": 600.0},
            user=str(OWNER))
    log.fire(T0 + 600, "w")
    props = Proposals(log)
    cfg = SimpleNamespace(timezone="UTC", jobs_dir="/etc/cronrd.d", node_id="n1")
    h = H.Handlers(cfg, Clock(), log.sm.conn, log.sm, props, None, None, None, None,
                   started_at=T0, is_ready=lambda: True)
    return h, props


def ping(h, caller, **args):
    return asyncio.run(h.table()["ping"]({"job": "w", **args}, caller))


def pings(props) -> list[C.Ping]:
    return [c for c in props.proposed if isinstance(c, C.Ping)]


@pytest.mark.parametrize("caller", [ROOT, Caller(uid=OWNER, gid=OWNER, pid=2, name=""),
                                    token("ping", "w"), token("ping", "w*"),
                                    token("operator")])
def test_who_may_ping(caller):
    h, props = handlers()
    assert ping(h, caller)["state"] == "succeeded"
    (p,) = pings(props)
    assert p.by == caller.describe() and p.node == "n1"


@pytest.mark.parametrize("caller, said", [
    (Caller(uid=STRANGER, gid=STRANGER, pid=3, name="mallory"), "needs root or user"),
    (token("viewer"), "needs a token of role ping, operator or admin"),
    (token("ping", "other-*"), "may not ping 'w'"),
])
def test_who_may_not_ping_and_the_refusal_is_audited(caller, said):
    h, props = handlers()
    with pytest.raises(PermissionDenied, match=said):
        ping(h, caller)
    assert pings(props) == []
    audits = [c for c in props.proposed if isinstance(c, C.Audit)]
    assert audits and not audits[-1].allowed and audits[-1].command == "ping"


@pytest.mark.parametrize("args, err", [
    ({"what": "boom"}, UsageError), ({"what": "x" * 10_000}, CronrdError),
    ({"exit_code": 256}, CronrdError), ({"exit_code": "1; rm -rf /"}, CronrdError),
    ({"job": "nope"}, CronrdError), ({"job": None}, CronrdError),
])
def test_bad_pings_are_refused_without_a_crash(args, err):
    h, props = handlers()
    with pytest.raises(err):
        ping(h, ROOT, **args)
    assert pings(props) == []

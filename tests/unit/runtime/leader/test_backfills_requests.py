"""A backfill request is bounded before it runs (issue 29 point 2, issue 32
point 1): the handler (runtime/control/handlers.py h_backfill) refuses ``force``
to anyone but an admin and a second open backfill of a job before any fire
time is generated, generates at most one fire time more than the request
may take, and caps a dry run's answer (first and last lines plus counts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from cronrd.decisions import backfill as D
from cronrd.ops import workflows as OW
from cronrd.errors import PermissionDenied, RequestError
from cronrd.runtime.leader import backfills as B
from cronrd.runtime.control import handlers as H
from cronrd.runtime.control import workflows as W
from cronrd.runtime.control.access import Caller
from cronrd.schedule import iso_utc
from cronrd.state import commands as C

from ...state.test_state import T0, Log

MIN = 60
N = 50  # D.DRY_RUN_LINES: a dry run shows the first and the last N fire times
YEAR = 365 * 86400
OWNER = 54321  # the uid the job runs as (a socket caller who is not root)

ROOT = Caller(uid=0, gid=0, pid=1, name="root")
JOB_USER = Caller(uid=OWNER, gid=OWNER, pid=2, name="")


def token(name: str, role: str, jobs: str = "") -> Caller:
    return Caller.of_token({"name": name, "role": role, "jobs": jobs})


class Proposals:
    """The log: applies each command at once, keeps what was proposed."""

    def __init__(self, log: Log):
        self.l = log
        self.proposed: list = []

    def propose(self, cmd) -> asyncio.Future:
        self.proposed.append(cmd)
        fut = asyncio.get_running_loop().create_future()
        try:
            fut.set_result(self.l.apply(cmd))
        except Exception as exc:  # apply refused it: so does the future
            fut.set_exception(exc)
        return fut

    def audits(self) -> list[tuple[bool, str]]:
        return [(c.allowed, c.detail) for c in self.proposed if isinstance(c, C.Audit)]


class Clock:
    def now(self):
        return T0 + 5

    def monotonic(self):
        return 100.0


def handlers(schedule="* * * * *"):
    log = Log()
    log.put(schedule=schedule, user=str(OWNER))
    props = Proposals(log)
    cfg = SimpleNamespace(timezone="UTC", jobs_dir="/etc/cronrd.d", node_id="n1")
    h = H.Handlers(cfg, Clock(), log.sm.conn, log.sm, props, None, None, None, None,
                   started_at=T0, is_ready=lambda: True)
    return h, props


@pytest.fixture
def generated(monkeypatch):
    """How many fire times the request path generated (every trigger it made)."""
    count = [0]
    real = B.trigger_of

    class Counting:
        def __init__(self, trigger):
            self.t = trigger

        def fires_between(self, *a, **kw):
            for f in self.t.fires_between(*a, **kw):
                count[0] += 1
                yield f

        def __getattr__(self, name):
            return getattr(self.t, name)
    monkeypatch.setattr(B, "trigger_of",
                        lambda spec, tz, conn=None: Counting(real(spec, tz, conn)))
    return count


def request(h, caller, first, last, **kw):
    """Through the control table, as the socket does: parsed into a Backfill
    at the edge (ops/workflows.py), then handled."""
    args = {"job": "j", "from": first, "to": last, **kw}
    return asyncio.run(h.table()["backfill"](args, caller))


def test_a_refused_range_costs_at_most_the_limit_plus_one_fire_time(generated):
    """26 years of a minutely job (13.7 million fire times): refused once the
    count passes 10,000, not after planning a million."""
    h, props = handlers()
    with pytest.raises(RequestError) as exc:
        request(h, ROOT, T0 - 26 * YEAR, T0 - MIN, dry_run=True)
    assert generated[0] <= D.MAX_FIRES + 1
    msg = str(exc.value)
    assert "more than 10000 fire times" in msg
    assert "narrow the range" in msg and "an admin passes --force" in msg
    # a create is refused the same way, and that refusal is audited as one
    generated[0] = 0
    with pytest.raises(RequestError) as exc:
        request(h, ROOT, T0 - 26 * YEAR, T0 - MIN)
    assert generated[0] <= D.MAX_FIRES + 1
    assert "more than 10000 fire times" in str(exc.value)
    assert [a for a, _d in props.audits()] == [False]
    assert not [c for c in props.proposed if isinstance(c, C.CreateBackfill)]


@pytest.mark.parametrize("caller, needs", [
    (JOB_USER, "needs root"),
    (token("op", "operator"), "needs an admin token"),
    (token("dba", "admin", "j*"), "needs an admin token for every job"),
])
def test_force_is_for_admins_only_and_refused_before_planning(generated, caller, needs):
    h, props = handlers()
    for dry_run in (True, False):
        with pytest.raises(PermissionDenied) as exc:
            request(h, caller, T0 - 20 * MIN, T0 - MIN, force=True, dry_run=dry_run)
        msg = str(exc.value)
        assert "cronrd backfill j --force" in msg and needs in msg
        assert "without --force a backfill takes up to 10000 fire times" in msg
    assert generated[0] == 0                                 # nothing was planned
    assert [a for a, _d in props.audits()] == [False, False]  # audited as refused
    assert needs in props.audits()[0][1]
    # the same caller without force may backfill the job
    res = request(h, caller, T0 - 3 * MIN, T0 - MIN, dry_run=True)
    assert res["total"] == 3


@pytest.mark.parametrize("caller", [ROOT, token("adm", "admin")])
def test_an_admin_may_force(caller):
    h, _props = handlers()
    first = T0 - (D.MAX_FIRES + 5) * MIN
    res = request(h, caller, first, T0 - MIN, force=True, dry_run=True)
    assert res["total"] == D.MAX_FIRES + 5
    with pytest.raises(RequestError, match="more than 10000 fire times"):
        request(h, caller, first, T0 - MIN, dry_run=True)


def test_a_second_open_backfill_is_refused_before_planning(generated):
    h, props = handlers()
    first = request(h, ROOT, T0 - 3 * MIN, T0 - MIN)
    assert first["backfill"] == 1 and first["total"] == 3
    generated[0] = 0
    props.proposed.clear()
    with pytest.raises(RequestError) as exc:
        request(h, ROOT, T0 - 20 * MIN, T0 - 10 * MIN)
    assert generated[0] == 0                 # refused before any fire time is generated
    msg = str(exc.value)
    assert props.audits() == [(False, msg)]  # audited as refused, not as allowed
    assert "has backfill 1 still open" in msg
    assert "`cronrd backfill cancel 1`" in msg and "wait for it" in msg
    assert not [c for c in props.proposed if isinstance(c, C.CreateBackfill)]
    # a dry run still plans while it is open; once it is cancelled, a new one goes
    assert request(h, ROOT, T0 - 10 * MIN, T0 - MIN, dry_run=True)["total"] == 10
    asyncio.run(h.h_backfill_state(OW.BackfillState(id=1, state="cancelled"), ROOT))
    assert request(h, ROOT, T0 - 10 * MIN, T0 - 5 * MIN)["backfill"] == 2


def test_a_dry_run_answers_the_first_and_last_lines_and_counts_the_rest(monkeypatch):
    h, props = handlers()
    conn = props.l.sm.conn  # a record in the middle: skipped, counted, not shown
    conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (T0 - 600 * MIN,))
    props.l.fire(T0 - 500 * MIN)
    conn.execute("UPDATE jobs SET cursor=? WHERE name='j'", (T0,))
    notes = []
    real_note = W._downstream_note

    def note(*a):
        notes.append(a)
        return real_note(*a)
    monkeypatch.setattr(W, "_downstream_note", note)
    first, last = T0 - 1000 * MIN, T0 - MIN
    res = request(h, ROOT, first, last, dry_run=True, downstream=True)
    n = N
    assert res["total"] == 1000
    assert len(res["lines"]) == 2 * n
    assert res["omitted"] == 1000 - 2 * n and res["omitted_after"] == n
    assert res["lines"][0][0] == iso_utc(first) and res["lines"][-1][0] == iso_utc(last)
    assert res["lines"][n - 1][0] == iso_utc(first + (n - 1) * MIN)
    assert res["lines"][n][0] == iso_utc(last - (n - 1) * MIN)
    assert res["counts"] == {"create": 999, "reprocess": 0, "skip": 1}
    assert len(notes) == 2 * n  # --downstream notes for the lines shown only
    # a short range is answered whole
    res = request(h, ROOT, T0 - 3 * MIN, T0 - MIN, dry_run=True)
    assert len(res["lines"]) == 3 and res["omitted"] == 0 and "omitted_after" not in res
    assert D.DRY_RUN_LINES == N

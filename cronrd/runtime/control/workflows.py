"""The control commands of the workflows: backfill, backfills, pools,
rerun, alerts, dead letter, audit, notifications, notify test."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import PermissionDenied, RequestError
from ...schedule import iso_utc
from ...state import commands as C
from ...state import queries as Q
from ..leader import backfills as B
from . import notifications as NH
from ...decisions import backfill as BD
from ...state import backfill as BF
from ...state import alerts as AL
from ...state import downstream as DS
from ...ops import workflows as W
from .access import Caller, check_admin
from .reads import pools_view

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged


def _downstream_note(conn, job: str, t: int, d) -> str:
    """What a backfill's --downstream adds to a fire time (its dry run)."""
    if d.action == "skip" or getattr(d, "attempt", 1) <= 1:
        return ""
    try:
        order, _ = DS.closure(conn, job, t)
    except DS.TooMany as exc:
        return f"; downstream: {exc}"
    if not order:
        return ""
    names = ", ".join(f"{j}@{iso_utc(ft)}" for j, ft in order[:5])
    more = f" and {len(order) - 5} more" if len(order) > 5 else ""
    return f"; then downstream: {names}{more}"


class WorkflowRequests(_Host):
    """The workflows part of Handlers (handlers.py): its state, log and guard."""

    # -- backfill and rerun (runtime/leader/backfills.py, state/backfill.py) -----------------
    async def h_backfill(self, req: W.Backfill, caller: Caller) -> dict:
        """Plan (``dry_run``) or start a backfill of ``job`` from ``from`` to ``to``.

        Bounded before it runs: who may, ``force`` (admins only) and, for a
        create, "one open backfill per job" are checked before any fire time
        is generated; then at most one fire time more than the request may
        take is generated (B.plan), and a dry run answers the first and last
        BD.DRY_RUN_LINES of them with counts. A create's refusal is audited
        as refused, its go-ahead as allowed (before it is proposed)."""
        name = req.job
        await self._job_for(caller, "backfill", name, change=False)
        first, last = req.from_, req.to
        reprocess, order, parallel, note = req.reprocess, req.order, req.parallel, req.note
        dry_run, force, downstream = req.dry_run, req.force, req.downstream
        await self._authorize_job(caller, "backfill", name, name, change=False)
        if downstream:
            await self._authorize_downstream(caller, "backfill", name)
        if force:  # up to BD.HARD_MAX_FIRES fire times planned: for an admin only
            what = f"cronrd backfill {name} --force"

            def check_force():
                try:
                    check_admin(caller, what)
                except PermissionDenied as exc:
                    raise PermissionDenied(f"{exc}; without --force a backfill takes up to "
                                           f"{BD.MAX_FIRES} fire times") from None
            await self._authorize(caller, "backfill", name, what, check_force, change=False)
        spec = self._job_spec(name)
        try:
            BF.check_job(spec, name, RequestError)
            assert spec is not None  # check_job refused a job that is gone
            other = None if dry_run else BF.open_backfill(self.conn, name)
            if other is not None:
                raise RequestError(
                    f"job {name!r} has backfill {other} still open; one backfill per job at "
                    f"a time: wait for it to end (`cronrd backfills {other}`) or cancel it "
                    f"(`cronrd backfill cancel {other}`), then ask again")
            times, lines = B.plan(self.conn, spec, self.config.timezone, first, last,
                                  reprocess, order, force)
        except RequestError as exc:
            if not dry_run:  # a create's outcome is audited, refusals too
                await self._audit(caller, "backfill", name, False, str(exc))
            raise
        out = {"job": name, "total": len(times),
               "limit": BD.limit(parallel, spec.concurrency),
               "concurrency": spec.concurrency, "counts": BD.counts(lines)}
        if dry_run:
            shown, omitted = BD.excerpt(lines)
            out["lines"] = [[iso_utc(t), d.line() + (_downstream_note(self.conn, name, t, d)
                                                     if downstream else "")]
                            for t, d in shown]
            out["omitted"] = omitted
            if omitted:  # the fire times left out lie between lines[:n] and lines[n:]
                out["omitted_after"] = BD.DRY_RUN_LINES
            return out
        await self._audit(caller, "backfill", name, True)
        res = await self.log.propose(C.CreateBackfill(
            job=name, fire_times=times, from_time=first, to_time=last, reprocess=reprocess,
            parallel=parallel, order=order, at=self.clock.now(), note=note,
            who=caller.describe(), downstream=downstream))
        return {**out, **res, "lines": []}

    async def h_backfills(self, req: W.ListBackfills) -> dict:
        await self._barrier(req.consistent)
        bid = req.id
        rows = BF.listing(self.conn, bid, req.limit)
        if bid is not None and not rows:
            raise RequestError(f"no backfill with id {bid}; `cronrd backfills` lists them")
        out: dict[str, Any] = {"backfills": rows}
        if bid is not None and req.items:
            out["items"] = [[iso_utc(t), st, note, rid, outcome]
                            for t, st, note, rid, outcome in BF.items(self.conn, bid)]
        return out

    async def h_pools(self, req: W.Pools) -> dict:
        """The pools in force, their slots in use and runs waiting (state/pools.py)."""
        await self._barrier(req.consistent)
        return pools_view(self.conn, self.config)

    async def h_backfill_state(self, req: W.BackfillState, caller: Caller) -> dict:
        bid, state = req.id, req.state
        rows = BF.listing(self.conn, bid, 1)
        if not rows:
            raise RequestError(f"no backfill with id {bid}; `cronrd backfills` lists them")
        await self._authorize_job(caller, "backfill_state", str(bid), rows[0]["job"],
                                  change=True)
        return await self.log.propose(C.SetBackfillState(backfill=bid, state=state,
                                                         at=self.clock.now(),
                                                         who=caller.describe()))

    async def h_rerun(self, req: W.Rerun, caller: Caller) -> dict:
        """A new attempt of the record of ``job`` at fire time ``at``."""
        name = req.job
        await self._job_for(caller, "rerun", name)
        at = req.at
        await self._authorize_job(caller, "rerun", name, name, change=True)
        downstream = req.downstream
        if downstream:
            await self._authorize_downstream(caller, "rerun", name)
        spec = self._job_spec(name)
        BF.check_job(spec, name, RequestError)
        t = B.rerun_time(self.conn, spec, self.config.timezone, at)
        if req.dry_run:
            try:
                order, _edges = DS.closure(self.conn, name, t)
            except DS.TooMany as exc:
                raise RequestError(f"{exc}; rerun without --downstream, then the children "
                                   "one by one") from None
            return {"job": name, "fire_time": iso_utc(t), "dry_run": True,
                    "downstream": [[j, iso_utc(ft)] for j, ft in order]
                    if downstream else []}
        res = await self.log.propose(C.Rerun(job=name, fire_time=t, at=self.clock.now(),
                                             who=caller.describe(), downstream=downstream))
        if "downstream" in res:
            res = {**res, "downstream": [[j, iso_utc(ft)] for j, ft in res["downstream"]]}
        return {**res, "job": name, "fire_time": iso_utc(t)}

    # -- alerts and the dead letter (state/alerts.py, runtime/leader/sla_watch.py) ------------
    async def h_alerts(self, req: W.ListAlerts) -> dict:
        await self._barrier(req.consistent)
        rows = AL.alerts(self.conn, include_closed=req.all, job=req.job, limit=req.limit)
        for r in rows:  # every time as RFC 3339, as the event stream has them
            for key in ("fire_time", "opened_at", "closed_at"):
                r[key] = iso_utc(r[key])
        return {"alerts": rows}

    async def h_alert_ack(self, req: W.AckAlert, caller: Caller) -> dict:
        alert_id, note = req.id, req.note
        row = next(iter(self.conn.execute("SELECT job FROM alerts WHERE alert_id=?",
                                          (alert_id,))), None)
        if row is None:
            raise RequestError(f"no alert with id {alert_id}; `cronrd alerts --all` lists "
                               "them")
        await self._authorize_job(caller, "alert_ack", str(alert_id), row[0], change=True)
        return await self.log.propose(C.AckAlert(alert_id=alert_id, note=note,
                                                 at=self.clock.now(), who=caller.describe()))

    async def h_dead_letter(self, req: W.ListDeadLetter) -> dict:
        await self._barrier(req.consistent)
        rows = AL.dead_letters(self.conn, include_closed=req.all, limit=req.limit)
        for r in rows:
            for key in ("fire_time", "at", "closed_at"):
                r[key] = iso_utc(r[key])
            run = Q.get_run(self.conn, r["run_id"])
            r["run"] = run.view() if run is not None else None
        return {"dead_letter": rows}

    async def h_dead_letter_action(self, req: W.DeadLetterAction, caller: Caller) -> dict:
        run_id, action, note = req.run_id, req.action, req.note
        row = next(iter(self.conn.execute("SELECT job FROM dead_letter WHERE run_id=?",
                                          (run_id,))), None)
        if row is None:
            raise RequestError(f"run {run_id} is not in the dead letter; `cronrd dead-letter "
                               "list` lists what is")
        await self._authorize_job(caller, "dead_letter_action", str(run_id), row[0],
                                  change=True)
        return await self.log.propose(C.DeadLetterAction(
            run_id=run_id, action=action, note=note, at=self.clock.now(),
            who=caller.describe()))

    async def h_audit(self, req: W.Audit) -> dict:
        await self._barrier(req.consistent)
        return {"records": Q.audit(self.conn, req.limit, req.before),
                "applied_index": Q.applied_index(self.conn)}

    async def h_notifications(self, req: W.Notifications) -> dict:
        await self._barrier(req.consistent)
        return NH.notifications(self.conn, self.config, req)

    async def h_notify_test(self, req: W.NotifyTest) -> dict:
        return await NH.notify_test(self.config, self.clock, req)

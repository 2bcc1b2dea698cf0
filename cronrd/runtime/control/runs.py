"""The control commands about runs: runs, run, run-now (and following its
attempts), cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import CronrdError, PermissionDenied, RequestError, ScheduleError, UsageError
from ...state.tokens import job_allowed, role_allows
from ...jobspec import JobSpec
from ...jobspec.params import check_run_params
from ...ops import requests as R
from ...state import commands as C
from ...model import run_states
from ...state import planned, run_params
from ...schedule import at_time, iso_utc
from ...state import queries as Q
from .access import Caller, check_job
from .server import Stream
from .reads import runs_listing

if TYPE_CHECKING:
    from .server import HandlersHost as _Host
else:
    _Host = object  # at run time Handlers (handlers.py) is the host: the MRO is unchanged


def run_now_inputs(job: str, spec: JobSpec, req: R.RunNow) -> tuple[dict[str, str], str]:
    """`run-now --param NAME=VALUE --key KEY`: the values checked against the
    job's params: (canonical text) and the key; UsageError naming what is
    wrong and what is allowed."""
    given, key = req.params, req.key
    if key:
        problem = run_params.key_problem(key)
        if problem:
            raise UsageError(f"--key {key!r}: {problem}")
    return check_run_params(job, spec.params, given), key




# Manual runs of one job held waiting (for a pool's slot, behind its running
# run, for a dependency): more are refused. 60 run-nows of one job once
# filled a shared pool's queue and made another job miss its start_deadline
# (issue 32 point 8). Runs that can start at once are not counted.
MAX_QUEUED_MANUAL = 10
MAX_PLAN_AHEAD = 366 * 86400   # a planned run is at most this far ahead


class TooManyQueued(RequestError):
    http_status = 409


def check_manual_queue(conn, job: str, key: str | None) -> None:
    """Refuse one more manual run of ``job`` while MAX_QUEUED_MANUAL wait to
    start (a repeated key is no new run: it answers the existing one)."""
    if key is not None and run_params.run_of_key(conn, job, key) is not None:
        return
    queued = Q.queued_manual(conn, job)
    if queued >= MAX_QUEUED_MANUAL:
        raise TooManyQueued(f"{queued} manual runs of {job} are waiting to start already (at "
                            f"most {MAX_QUEUED_MANUAL}); wait for them, or cancel some "
                            f"(`cronrd runs {job} --state waiting`, `cronrd cancel RUN`)")


class RunRequests(_Host):
    """The runs part of Handlers (handlers.py): its state, log and guard."""

    async def h_runs(self, req: R.ListRuns) -> dict[str, Any]:
        await self._barrier(req.consistent)
        return runs_listing(self.conn, req, self.config.timezone, Q.applied_index(self.conn))

    async def h_run(self, req: R.ShowRun) -> dict[str, Any]:
        await self._barrier(req.consistent)
        run_id = req.run_id
        run = Q.get_run(self.conn, run_id)
        if run is None:
            raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent runs")
        from ...state.dependencies import lineage
        view = run_params.add_to_views(self.conn, [run.view()])[0]
        from ...state.checkpoints import views as heartbeat_views
        heartbeat_views(self.conn, [view])
        consumed = lineage(self.conn, run_id)
        if consumed:
            view["lineage"] = consumed  # the parent runs it consumed
        return view

    async def h_run_now(self, req: R.RunNow, caller: Caller) -> Any:
        name = req.job
        job = await self._job_for(caller, "run_now", name)
        await self._authorize_job(caller, "run_now", name, name, change=True)
        wait = req.wait
        params, key = run_now_inputs(name, job["spec"], req)
        if job["spec"].watch is not None:
            raise RequestError(f"{name!r} is a watch: it runs nothing here; its job pings it "
                               f"(`cronrd ping {name}`)")
        if req.at:
            return await self._plan_run(name, job["spec"], req, params, key, caller)
        check_manual_queue(self.conn, name, req.key)
        # The leader places it (node ""), honouring run_on.
        res = await self.log.propose(C.ManualRun(job=name, node="", at=self.clock.now(),
                                                 params=params, key=key))
        run_id = res["run_id"]
        if not wait:
            return {"run_id": run_id, "state": res["state"],
                    **({"existing": True} if res.get("existing") else {}),
                    **({"reason": res["reason"]} if res.get("reason") else {})}
        return Stream(self._follow_attempts(run_id))

    async def h_ping(self, req: R.Ping, caller: Caller) -> dict[str, Any]:
        """A watch's ping from ``caller``: whoever reaches the socket, or an
        API token of role ping (or operator) whose jobs glob covers it."""
        what = f"cronrd ping {req.job}"
        spec = self._job_spec(req.job)

        def check() -> None:
            # a token: of role ping (or operator, admin), its --jobs naming the
            # watch; on the socket: root, the daemon's user, or the watch's user:
            if caller.token is None:
                check_job(caller, what, spec, req.job)
                return
            if not role_allows(caller.token["role"], "ping"):
                raise PermissionDenied(f"permission denied: `{what}` needs a token of role "
                                       f"ping, operator or admin; you are {caller.describe()}")
            if not job_allowed(caller.token.get("jobs") or "", req.job):
                raise PermissionDenied(f"token {caller.token.get('name')!r} may not ping "
                                       f"{req.job!r} (its --jobs does not name it)")
        # (a refusal is audited; a ping is recorded with who sent it, on its run)
        await self._authorize(caller, "ping", req.job, what, check, change=False)
        by = caller.describe()
        if req.what not in R.PING_KINDS:
            raise UsageError(f"a ping is one of {', '.join(R.PING_KINDS)} (got {req.what!r})")
        job = Q.job_spec(self.conn, req.job)
        if job is None or job.watch is None:
            raise RequestError(f"{req.job!r} is not a watch"
                               + (" (it is a job: cronrd runs it and knows when it ran)"
                                  if job is not None else "")
                               + "; `cronrd jobs` lists the watches (state: watch)")
        what = "fail" if req.exit_code else req.what
        res = await self.log.propose(C.Ping(job=req.job, what=what, node=self.config.node_id,
                                            by=by[:200], at=self.clock.now(),
                                            exit_code=req.exit_code))
        return {"job": req.job, **res}

    async def _plan_run(self, name: str, spec: JobSpec, req: R.RunNow, params: dict,
                        key: str, caller: Caller) -> dict[str, Any]:
        """`run-now --at TIME`: a planned run (state/planned.py)."""
        if req.wait:
            raise UsageError("--wait and --at do not go together: a planned run starts "
                             "later; `cronrd runs JOB` shows it once it has")
        now = self.clock.now()
        tz = spec.timezone or self.config.timezone
        try:
            due = at_time(req.at, tz, now)
        except ScheduleError as exc:
            raise UsageError(f"--at {req.at!r}: {exc.message}") from None
        if due <= now:
            raise UsageError(f"--at {req.at!r} is {iso_utc(due)}, not later than now "
                             f"({iso_utc(now)}); leave out --at to run it now")
        if due - now > MAX_PLAN_AHEAD:
            raise UsageError(f"--at {req.at!r} is more than a year ahead; put it in a job "
                             "file with schedule: \"@at TIME\" instead")
        res = await self.log.propose(C.PlanRun(job=name, due=due, by=caller.describe(),
                                               at=now, params=params, key=key))
        return {**res["plan"], "state": "planned"}

    async def _follow_attempts(self, run_id: int):
        """Wait for the run and any retries; yield each attempt's end."""
        while True:
            run = await self._wait_run(run_id)
            yield {"event": run.view()}
            nxt = Q.next_attempt(self.conn, run)
            if nxt is None:
                yield {"result": run.view()}
                return
            run_id = nxt

    async def h_cancel(self, req: R.CancelRun, caller: Caller) -> dict[str, Any]:
        """Cancel run ``run_id``, or every active run of ``job``. A run
        stops with its job's kill_grace; a cancelled run is not retried."""
        job = req.job
        if req.plan is not None:
            plan = planned.get(self.conn, req.plan)
            if plan is None:
                raise RequestError(f"no planned run {req.plan}: it started or was cancelled; "
                                   "`cronrd runs` lists runs, `cronrd next JOB` the plans")
            await self._authorize_job(caller, "cancel", f"plan {req.plan}", plan.job,
                                      change=True)
            res = await self.log.propose(C.CancelPlan(plan_id=req.plan, by=caller.describe(),
                                                      at=self.clock.now()))
            return {**res["plan"], "state": "cancelled"}
        if job is not None:
            self._job_or_error(job)
            await self._authorize_job(caller, "cancel", job, job, change=True)
            runs = Q.active_runs_of(self.conn, job)
        else:
            run_id = req.run_id
            if run_id is None:
                raise UsageError("missing argument 'run_id'")
            run = Q.get_run(self.conn, run_id)
            if run is None:
                raise RequestError(f"no run with id {run_id}; `cronrd runs` lists recent "
                                   "runs")
            await self._authorize_job(caller, "cancel", str(run_id), run.job, change=True)
            if run.state not in run_states.ACTIVE:
                raise RequestError(f"run {run_id} of job {run.job!r} is already "
                                   f"{run.state}; there is nothing to cancel")
            runs = [run]
        reason = f"cancelled by {caller.describe()} (`cronrd cancel`)"
        out = []
        for run in runs:
            try:
                await self.log.propose(C.CancelRun(run_id=run.run_id, reason=reason,
                                                   at=self.clock.now()))
            except CronrdError:
                if len(runs) == 1:
                    raise
                continue  # it ended meanwhile
            out.append((Q.get_run(self.conn, run.run_id) or run).view())
        if job is not None:
            return {"job": job, "runs": out}
        return out[0]

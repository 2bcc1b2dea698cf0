"""Apply for watches (jobspec/watch.py): a dead man's switch for jobs that
run elsewhere.

* A fire time of a watch makes a run record that runs nothing: ``waiting``,
  with no node, "waiting for a ping until T (grace G)".
* A ping (``Ping``) goes to the oldest open run of the watch (``start``: the
  oldest still waiting; ``success`` / ``fail``: the oldest running, else the
  oldest waiting), due at most EARLY before the ping (a legacy host's clock
  may be ahead). ``start`` moves it to ``running``; ``success`` to
  ``succeeded``; ``fail`` to ``failed`` with the exit code. A ping with no
  open run to take it is recorded all the same, as a run of its own (kind
  ``ping``), saying so: a ping is never lost.
* The leader proposes ``WatchMissed`` for an open run whose grace is over
  (runtime/leader/watches.py): the run ends ``failed``, "missed: no ping
  ...", which raises the ``failed`` alert and its notifications once (apply
  refuses a second).
No retries: nothing here can run again."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import apsw

from ..errors import Refused
from ..model.run import SELECT as SELECT_RUNS, Run
from ..schedule import human_duration, iso_utc
from . import commands as C
from .apply_common import ApplyBase
from .effects import Effect

if TYPE_CHECKING:
    from ..jobspec import JobSpec

EARLY = 300.0        # seconds before its fire time a ping may come and count for it
PINGS = ("start", "success", "fail")


def waiting_reason(fire_time: int, spec: "JobSpec") -> str:
    assert spec.watch is not None
    return (f"waiting for a ping until {iso_utc(fire_time + spec.watch.grace)} (grace "
            f"{human_duration(spec.watch.grace)}; `cronrd ping {spec.name}`)")


def open_runs(conn: apsw.Connection, job: str) -> list[Run]:
    """The watch's runs that still wait for a ping, oldest fire time first."""
    return [Run.from_row(r) for r in conn.execute(
        f"{SELECT_RUNS} WHERE job=? AND state IN ('waiting', 'running') "
        "ORDER BY fire_time, run_id", (job,))]


def overdue(conn: apsw.Connection, now: float, limit: int = 1000) -> list[tuple[int, str]]:
    """(run id, job) of the watches' open runs whose grace is over (an
    index range of watch_waits: the leader asks every duty interval)."""
    return [(run_id, job) for run_id, job in conn.execute(
        "SELECT watch_waits.run_id, watch_waits.job FROM watch_waits JOIN runs USING(run_id) "
        "WHERE until <= ? AND runs.state IN ('waiting', 'running') ORDER BY until LIMIT ?",
        (now, limit))]


def forget(conn: apsw.Connection, run_id: int) -> None:
    """Run ``run_id`` ended: it waits for no ping any more."""
    conn.execute("DELETE FROM watch_waits WHERE run_id=?", (run_id,))


class WatchesApply(ApplyBase):

    def _watch_fire(self, index: int, cmd: C.Fire, spec: "JobSpec") -> dict[str, Any]:
        """A fire time of a watch: a record that waits for its ping; or,
        when a ping came up to EARLY before it (the job's host clock a
        little fast: the fire is committed only a moment ahead), the record
        of that ping's outcome."""
        run = self._insert_run(index, job=cmd.job, origin="schedule", kind=cmd.kind,
                               fire_time=cmd.fire_time, attempt=1, state="waiting", node=None,
                               due_at=cmd.due_at, at=cmd.at,
                               reason=waiting_reason(cmd.fire_time, spec), target=cmd.target)
        assert spec.watch is not None
        self.conn.execute("INSERT INTO watch_waits(run_id, job, until) VALUES(?,?,?)",
                          (run.run_id, cmd.job, cmd.fire_time + spec.watch.grace))
        for stray_id, at in list(self.conn.execute(
                "SELECT run_id, at FROM watch_strays WHERE job=? AND at >= ? "
                "ORDER BY at, run_id LIMIT 1",
                (cmd.job, cmd.fire_time - min(EARLY, spec.watch.grace)))):
            self.conn.execute("DELETE FROM watch_strays WHERE run_id=?", (stray_id,))
            return self._adopt(run, self._get_run(stray_id), effects=[])
        return {"run_id": run.run_id, "state": "waiting", "watch": True}

    def _adopt(self, run: Run, stray: Run, effects: list[Effect]) -> dict[str, Any]:
        """``run`` takes the ping that came just before its fire time."""
        early = f"its ping came {human_duration(run.fire_time - (stray.started_at or 0))} " \
                f"before the fire time (run {stray.run_id}): is that host's clock fast?"
        if stray.state == "running":    # its end ping comes to this run
            self._finish(stray, "cancelled", stray.started_at or 0,
                         reason=f"a start ping taken by fire time {iso_utc(run.fire_time)}'s "
                                f"run {run.run_id}", effects=effects)
            self.conn.execute("UPDATE runs SET state='running', started_at=?, reason=? "
                              "WHERE run_id=?", (stray.started_at, f"started; {early}",
                                                 run.run_id))
            return {"run_id": run.run_id, "state": "running", "watch": True}
        self.conn.execute("UPDATE runs SET started_at=? WHERE run_id=?",
                          (stray.started_at, run.run_id))
        self._finish(self._get_run(run.run_id), stray.state.value, stray.finished_at or 0,
                     reason=f"{stray.state.value}; {early}", exit_code=stray.exit_code,
                     effects=effects)
        return {"run_id": run.run_id, "state": stray.state.value, "watch": True}

    def _apply_ping(self, index: int, cmd: C.Ping, effects: list[Effect]) -> dict[str, Any]:
        spec = self._job_spec(cmd.job)
        if spec is None or spec.watch is None:
            raise Refused(f"{cmd.job!r} is not a watch"
                          + ("" if spec is None else " (it is a job: cronrd runs it)")
                          + "; `cronrd jobs` lists the watches")
        if cmd.what not in PINGS:
            raise Refused(f"ping: {cmd.what!r} is not one of {', '.join(PINGS)}")
        if cmd.exit_code is not None and (not isinstance(cmd.exit_code, int)
                                          or not 0 <= cmd.exit_code <= 255):
            raise Refused("ping: an exit code is 0 to 255")
        by = f"ping from {cmd.by} via {cmd.node}"
        runs = [r for r in open_runs(self.conn, cmd.job) if r.fire_time <= cmd.at + EARLY]
        if cmd.what == "start":
            run = next((r for r in runs if r.state == "waiting"), None)
            if run is None:
                return self._stray_ping(index, cmd, spec, by, effects)
            self.conn.execute("UPDATE runs SET state='running', started_at=?, reason=? "
                              "WHERE run_id=?",
                              (cmd.at, f"started ({by}); waiting for its end ping until "
                                       f"{iso_utc(run.fire_time + spec.watch.grace)}",
                               run.run_id))
            return {"run_id": run.run_id, "state": "running"}
        run = next((r for r in runs if r.state == "running"), None) or \
            next((r for r in runs if r.state == "waiting"), None)
        if run is None:
            return self._stray_ping(index, cmd, spec, by, effects)
        failed = cmd.what == "fail" or bool(cmd.exit_code)
        state = "failed" if failed else "succeeded"
        code = cmd.exit_code if cmd.exit_code is not None else (1 if failed else 0)
        self.conn.execute("UPDATE runs SET started_at=COALESCE(started_at, ?) WHERE run_id=?",
                          (cmd.at, run.run_id))
        reason = f"{'failed' if failed else 'succeeded'} ({by})"
        self._finish(self._get_run(run.run_id), state, cmd.at, reason=reason, exit_code=code,
                     effects=effects)
        return {"run_id": run.run_id, "state": state}

    def _stray_ping(self, index: int, cmd: C.Ping, spec: "JobSpec", by: str,
                    effects: list[Effect]) -> dict[str, Any]:
        """A ping no open run takes: recorded as a run of its own."""
        last = next(iter(self.conn.execute(
            "SELECT run_id, fire_time, state FROM runs WHERE job=? AND origin='schedule' "
            "ORDER BY fire_time DESC LIMIT 1", (cmd.job,))), None)
        why = "no fire time of the watch waited for it"
        late = last is not None and last[2] == "failed"
        if last is not None and late:
            why += (f" (the last, {iso_utc(last[1])}, was recorded missed: run {last[0]}; "
                    "this ping is late)")
        failed = cmd.what == "fail" or bool(cmd.exit_code)
        state = "running" if cmd.what == "start" else "failed" if failed else "succeeded"
        run = self._insert_run(index, job=cmd.job, origin="manual", kind="ping",
                               fire_time=int(cmd.at), attempt=1, state="waiting", node=None,
                               due_at=cmd.at, at=cmd.at,
                               reason=f"{cmd.what} ({by}): {why}")
        # a fire time due within EARLY takes it (its record is made only a
        # moment ahead); older strays are forgotten, keeping the table small
        self.conn.execute("DELETE FROM watch_strays WHERE job=? AND at < ?",
                          (cmd.job, cmd.at - 2 * EARLY))
        if not late:   # (a late ping is its missed fire time's, not the next one's)
            self.conn.execute("INSERT INTO watch_strays(run_id, job, at) VALUES(?,?,?)",
                              (run.run_id, cmd.job, cmd.at))
        self.conn.execute("UPDATE runs SET started_at=? WHERE run_id=?", (cmd.at, run.run_id))
        if state == "running":   # its end ping is awaited within the grace
            self.conn.execute("UPDATE runs SET state='running' WHERE run_id=?", (run.run_id,))
            assert spec.watch is not None
            self.conn.execute("INSERT INTO watch_waits(run_id, job, until) VALUES(?,?,?)",
                              (run.run_id, cmd.job, cmd.at + spec.watch.grace))
        else:
            code = cmd.exit_code if cmd.exit_code is not None else (1 if failed else 0)
            self._finish(self._get_run(run.run_id), state, cmd.at, exit_code=code,
                         effects=effects)
        return {"run_id": run.run_id, "state": state, "stray": True}

    def _apply_watch_missed(self, index: int, cmd: C.WatchMissed,
                            effects: list[Effect]) -> dict[str, Any]:
        run = self._get_run(cmd.run_id)
        spec = self._job_spec(run.job)
        if run.state not in ("waiting", "running"):
            forget(self.conn, run.run_id)
            raise Refused(f"run {cmd.run_id} is {run.state.value}: its ping came, or it was "
                          "recorded missed already")
        if spec is None or spec.watch is None:
            # its watch was removed, or is a job now: nothing will ping this run
            self._finish(run, "cancelled", cmd.at, reason=f"{run.job!r} is no longer a watch "
                         "(removed, or made a job): its ping is not waited for", effects=effects)
            return {"run_id": run.run_id, "state": "cancelled"}
        until = run.fire_time + spec.watch.grace
        if cmd.at < until:   # its grace grew since: it waits until then
            self.conn.execute("UPDATE watch_waits SET until=? WHERE run_id=?",
                              (until, run.run_id))
            return {"run_id": run.run_id, "state": run.state.value, "until": until}
        what = "no end ping" if run.state == "running" else "no ping"
        reason = (f"missed: {what} within its grace ({human_duration(spec.watch.grace)}) of "
                  f"{iso_utc(run.fire_time)}: did the job run where it should?")
        self._finish(run, "failed", cmd.at, reason=reason, effects=effects)
        return {"run_id": run.run_id, "state": "failed"}

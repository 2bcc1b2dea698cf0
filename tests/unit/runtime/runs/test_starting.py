"""May a run start here (cronrd/runtime/runs/starting.py): max_running, per
job and per node, and accept_jobs_from."""

from __future__ import annotations

import apsw

from cronrd.jobspec import JobSpec
from cronrd.runtime.runs.active import ActiveRun, InFlight
from cronrd.runtime.runs.starting import over_cap, refused_source
from cronrd.state import commands as C
from cronrd.state import run_life as L
from cronrd.state.machine import StateMachine
from cronrd.model.run import Run
from cronrd.model.run_states import RunState

T0 = 1_800_000_000


def run(job="j", run_id=1) -> Run:
    return Run(run_id=run_id, job=job, origin="schedule", kind="scheduled", fire_time=T0,
               attempt=1, target="", state=RunState.ASSIGNED, node="n1", token=2, due_at=T0,
               created_at=T0 - 1)


def active(job, life, run_id=1) -> ActiveRun:
    return ActiveRun(run=run(job, run_id), spec=None, key=f"k{run_id}", log_path="/l",
                     kill_grace=1.0, life=life)


def flight(*lives) -> InFlight:
    """An InFlight holding runs of (job, life) pairs, run ids 1, 2, ..."""
    f = InFlight()
    for i, (job, life) in enumerate(lives, 1):
        f.add(active(job, life, i))
    return f


def test_max_running_counts_the_runs_holding_a_slot():
    spec = JobSpec(name="j", schedule="* * * * *", command="true", max_running=2)
    started = L.Life(phase=L.Phase.STARTED, pid=5, started_at=T0)
    waiting = L.Life(phase=L.Phase.WAITING, pid=6)
    told_to_go = L.Life(phase=L.Phase.WAITING, pid=7, stop_state="skipped", stop_reason="x")
    done = L.Life(phase=L.Phase.DONE)
    assert over_cap(flight(("j", started), ("j", told_to_go), ("j", done)),
                    run(), spec, "n1", 10) is None
    assert over_cap(flight(("j", started), ("j", waiting)), run(), spec, "n1", 10) == (
        "max_running (2) of job j reached on node n1")
    assert over_cap(flight(("k", started), ("k", waiting)), run(), spec, "n1", 3) is None
    assert over_cap(flight(("k", started), ("k", waiting), ("k", started)),
                    run(), spec, "n1", 3) == "max_running (3) reached on node n1"


def test_in_flight_counts_slots_as_lives_change_and_runs_leave():
    waiting = L.Life(phase=L.Phase.WAITING, pid=6)
    f = flight(("j", waiting), ("j", waiting), ("k", waiting))
    assert (f.slots, f.job_slots) == (3, {"j": 2, "k": 1})
    a, b, c = f.by_id[1], f.by_id[2], f.by_id[3]
    a.life = L.Life(phase=L.Phase.WAITING, pid=6, stop_state="skipped", stop_reason="x")
    f.recount(a)  # told to go away unrun: its slot is free
    assert (f.slots, f.job_slots) == (2, {"j": 1, "k": 1})
    f.recount(a)  # counting twice changes nothing
    assert f.slots == 2
    f.remove(c)
    f.remove(c)
    assert (f.slots, f.job_slots, list(f.by_job)) == (1, {"j": 1}, ["j"])
    assert [x.run.run_id for x in f.of_job("j")] == [1, 2]
    f.remove(a)
    f.remove(b)
    assert (f.slots, f.job_slots, f.by_id, f.by_key, f.by_job) == (0, {}, {}, {}, {})


def test_accept_jobs_from_wants_the_definition_in_force_from_a_trusted_node():
    sm = StateMachine(apsw.Connection(":memory:"))
    spec = {"name": "j", "schedule": "* * * * *", "command": "true"}
    with sm.conn:
        sm.apply(1, C.PutJob(name="j", spec=spec, digest="d1", source="/a/j.yaml", at=T0,
                             node="a"))
    assert refused_source(sm.conn, "n1", None, "j") is None
    assert refused_source(sm.conn, "n1", ["a"], "j") is None
    said = refused_source(sm.conn, "n1", ["b"], "j")
    assert said.startswith("node n1 runs only jobs defined by b (accept_jobs_from); "
                           "the definition of j in force comes from a")

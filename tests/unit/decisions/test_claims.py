"""The leader's side of claims (cronrd/decisions/claims.py): which runs
nobody claimed in time, as a function of the runs and ``now``."""

from __future__ import annotations

import dataclasses

from cronrd.decisions import claims
from cronrd.model.run import Run
from cronrd.model.run_states import RunState

T0 = 1_800_000_000.0
G = claims.CLAIM_GRACE


def run(run_id=1, **kw) -> Run:
    base = Run(run_id=run_id, job="j", origin="schedule", kind="scheduled", fire_time=int(T0),
               attempt=1, target="", state=RunState.ASSIGNED, node="a", token=5, due_at=T0,
               created_at=T0 - 1, assigned_at=T0 - 0.7)
    return dataclasses.replace(base, **kw)


def test_a_run_must_be_claimed_a_grace_after_its_fire_time_or_its_placement():
    assert claims.claim_deadline(run()) == T0 + G
    # Placed after its fire time (a manual run, a retry, a catch-up): from then.
    assert claims.claim_deadline(run(assigned_at=T0 + 3)) == T0 + 3 + G
    # Each move gives the next node one grace more.
    assert claims.claim_deadline(run(moved_from="b")) == T0 + 2 * G
    assert claims.claim_deadline(run(moved_from="b,c")) == T0 + 3 * G
    assert claims.moves(run()) == 0 and claims.moves(run(moved_from="b,c")) == 2
    # A node whose clock is behind the leader's asks that much later; ahead: no change.
    assert claims.claim_deadline(run(), behind=0.3) == T0 + G + 0.3
    assert claims.claim_deadline(run(), behind=-0.3) == T0 + G
    assert claims.overdue(T0 + G + 0.1, [run()], behind={"a": 0.3}) == []
    # A node answering the leader is slow, not gone: STUCK_AFTER more.
    S = claims.STUCK_AFTER
    assert claims.overdue(T0 + G + S - 0.01, [run()], responsive={"a"}) == []
    assert len(claims.overdue(T0 + G + S, [run()], responsive={"a"})) == 1
    assert claims.next_deadline([run()], after=T0, responsive={"a"}) == T0 + G + S


def test_only_assigned_unclaimed_movable_runs_past_their_deadline_are_overdue():
    runs = [run(1), run(2, claimed_at=T0 - 0.01), run(3, target="a"),
            run(4, state=RunState.RUNNING), run(5, due_at=T0 + 10), run(6, node=None),
            run(7, moved_from="b")]
    assert claims.overdue(T0 + G - 0.001, runs) == []
    assert [r.run_id for r in claims.overdue(T0 + G, runs)] == [1]
    assert [r.run_id for r in claims.overdue(T0 + 2 * G, runs)] == [1, 7]
    assert [r.run_id for r in claims.overdue(T0 + 11, runs)] == [1, 5, 7]


def test_the_next_deadline_is_the_earliest_one_still_to_come():
    runs = [run(1), run(2, due_at=T0 + 1), run(3, due_at=T0 - 5, claimed_at=T0 - 6),
            run(4, due_at=T0 + 0.5, target="a")]
    assert claims.next_deadline(runs, after=T0) == T0 + G
    assert claims.next_deadline(runs, after=T0 + G) == T0 + 1 + G
    assert claims.next_deadline(runs, after=T0 + 2) is None
    assert claims.next_deadline([], after=T0) is None


def test_a_node_on_a_slow_disk_is_not_given_more_time_for_its_claims():
    """It answers heartbeats at once (slow, not gone) but learns of the runs
    placed on it only once its one-second log write is done: its runs waited
    STUCK_AFTER and started 2.3 s late (fault suite, slow-fsync)."""
    ages = {"a": 0.05, "b": 0.05, "c": 3.0, "d": None}
    assert claims.on_their_way(ages, slow_disks=[], within=0.4) == {"a", "b"}
    way = claims.on_their_way(ages, slow_disks=["b"], within=0.4)
    assert way == {"a"}
    r = run(node="b")
    assert len(claims.overdue(T0 + G, [r], responsive=way)) == 1   # moved at the grace
    assert claims.overdue(T0 + G, [run(node="a")], responsive=way) == []

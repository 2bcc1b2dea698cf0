"""Pool decisions (cronrd/decisions/pools.py): admission, release order,
the reasons."""

from __future__ import annotations

from cronrd.decisions import pools as D

W = D.Waiter


def test_admit_needs_room_and_nobody_ahead():
    assert D.admit(2, 1, 1, 0) and not D.admit(2, 2, 1, 0) and not D.admit(2, 0, 1, 1)
    assert not D.admit(2, 1, 2, 0)


def test_release_order_is_on_time_then_priority_then_fire_time_and_stops_at_a_misfit():
    ws = [W(1, 1, 0, 10), W(2, 1, 5, 20), W(3, 1, 5, 15), W(4, 1, 99, 1, late=True)]
    assert D.release(4, ws) == [3, 2, 1, 4]
    assert D.release(2, ws) == [3, 2]
    assert D.release(3, [W(1, 2, 9, 1), W(2, 2, 0, 2), W(3, 1, 0, 3)]) == [1]  # 2 does not fit


def test_release_by_node_passes_over_runs_pinned_to_a_full_node():
    ws = [(W(1, 1, 9, 1), "n1"), (W(2, 1, 0, 2), ""), (W(3, 1, 0, 3), "n2")]
    assert D.release_by_node({"n1": 0, "n2": 1}, 1, 1, ws) == [2]
    assert D.release_by_node({"n1": 1, "n2": 1}, 2, 1, ws) == [1, 2]
    assert D.release_by_node({"n1": 1, "n2": 1}, 1, 1, ws) == [1]   # one released, not placed


def test_a_run_that_can_never_fit_is_passed_over_not_waited_behind():
    ws = [W(1, 3, 9, 1), W(2, 1, 0, 2)]
    assert D.release(2, ws, 2) == [2]
    assert D.release(2, ws) == []               # without the pool's slots: strict order
    assert D.release_by_node({"n1": 2}, 2, 2, [(w, "") for w in ws]) == [2]


def test_reasons_say_what_to_do():
    assert D.reason("db", 2, 2) == "pool db: 2/2 slots in use"
    assert D.reason("db", 1, 1, node="n1", ahead=2) == \
        "pool db: 1/1 slots in use on node n1, 2 runs ahead"
    assert D.reason("db", 0, 2, need=3).endswith("lower pool_slots or raise the pool's slots "
                                                 "in the daemon config")
    assert "add it under pools:" in D.reason("db", 0, 0, defined=False)

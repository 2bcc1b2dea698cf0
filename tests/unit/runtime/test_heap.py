"""The GC policy: freezes the long-lived heap, fully collects only at a
quiet moment between gates."""

from __future__ import annotations

import asyncio
import gc

import pytest

from cronrd.runtime import heap as H
from cronrd.runtime.clock import Clock


@pytest.fixture(autouse=True)
def _thawed():
    yield
    gc.unfreeze()


def test_no_gate_means_now():
    assert H.quiet_start(100.0, []) == 100.0


def test_a_gate_far_enough_away_is_not_in_the_way():
    assert H.quiet_start(100.0, [101.0], quiet=0.5) == 100.0


def test_a_gate_due_soon_moves_the_start_just_past_it():
    assert H.quiet_start(100.0, [100.3], quiet=0.5) == pytest.approx(100.3 + H.AFTER_GATE)


def test_gates_close_together_are_all_waited_for():
    start = H.quiet_start(100.0, [100.7, 100.3, 101.1, 103.0], quiet=0.5)
    assert start == pytest.approx(101.1 + H.AFTER_GATE)
    # A window long enough between two gates is taken.
    assert H.quiet_start(100.0, [100.3, 100.9], quiet=0.5) == pytest.approx(100.3 + H.AFTER_GATE)


def test_a_gate_already_past_its_time_is_not_waited_for():
    assert H.quiet_start(100.0, [99.0], quiet=0.5) == 100.0


def test_freeze_takes_the_live_heap_out_of_the_collections():
    gc.unfreeze()
    keep = [[i] for i in range(1000)]  # noqa: F841 - objects that live on
    h = H.Heap(Clock(), lambda: [])
    h.freeze()
    assert gc.get_freeze_count() >= 1000 and h.freezes == 1


def test_a_full_collection_frees_cycles_frozen_meanwhile_and_waits_for_the_gate():
    class Cycle:
        pass

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    gc.freeze()
    del a, b
    clock = Clock()
    due = clock.now() + 0.2
    started = []
    real_unfreeze = gc.unfreeze

    def unfreeze():
        started.append(clock.now())
        real_unfreeze()

    h = H.Heap(clock, lambda: [due])
    gc_unfreeze, gc.unfreeze = gc.unfreeze, unfreeze
    try:
        found = asyncio.run(asyncio.wait_for(h.full_collection(), 5))
    finally:
        gc.unfreeze = gc_unfreeze
    assert found >= 2 and h.full_collections == 1
    assert started and started[0] >= due + H.AFTER_GATE - 0.001
    assert gc.get_freeze_count() > 0  # frozen again afterwards

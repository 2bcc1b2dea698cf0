"""Gates (cronrd/runtime/runs/gates.py): the runs due at one time wait
behind one pipe; it opens at that time, waits a bounded while for runs not
ready yet, and lets through as many as the executor releases."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from cronrd.runtime.runs.gates import READY_WAIT, Gates
from virtual_time import run_virtual
from cronrd.state import run_life as L


class Clock:
    """Wall time that follows the loop's (virtual) clock, from a fixed start
    that a test may step."""

    def __init__(self):
        self.t0 = 1_800_000_000.0

    def now(self) -> float:
        return self.t0 + self.monotonic()

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()


def act(ready=True):
    return SimpleNamespace(life=L.Life(phase=L.Phase.WAITING, pid=10, ready=ready, claim="won"),
                           gate=None)


def test_the_runs_due_at_one_time_share_a_gate_that_opens_then():
    async def main():
        clock = Clock()
        released = []
        gates = Gates(clock, lambda g: (released.append((g, clock.now())), g.open(1)))
        due = clock.now() + 0.05
        gate = gates.at(due)
        assert gates.at(due) is gate and gates.at(due + 1) is not gate and gates
        gate.runs += [act(), act()]
        rfd = os.dup(gate.rfd)
        await asyncio.sleep(0.2)
        (got, at), = released
        assert got is gate and at >= due
        assert due not in gates.by_due
        assert os.read(rfd, 100) == b"\n\n"  # two bytes per run let through, then EOF
        assert os.read(rfd, 100) == b""
        os.close(rfd)
        gates.close_all()
        assert not gates
    run_virtual(main())


def test_a_gate_waits_for_a_run_not_ready_until_it_is():
    async def main():
        clock = Clock()
        released = []
        gates = Gates(clock, lambda g: (released.append(clock.now()), g.open(0)))
        gate = gates.at(clock.now())
        slow = act(ready=False)
        slow.gate = gate
        gate.runs += [act(), slow]
        await asyncio.sleep(0.1)
        assert released == [] and gate.waiting
        slow.life = L.Life(phase=L.Phase.WAITING, pid=11, ready=True, claim="won")
        gates.settled(slow)
        assert len(released) == 1 and not gate.waiting
    run_virtual(main())


def test_a_gate_waits_at_most_ready_wait():
    async def main():
        clock = Clock()
        released = []
        gates = Gates(clock, lambda g: (released.append(clock.now()), g.open(0)))
        start = clock.now()
        gate = gates.at(start - READY_WAIT + 0.1)  # due a while ago: READY_WAIT from now
        gate.runs.append(act(ready=False))
        assert gate.ready_by >= start + READY_WAIT - 0.01
        await asyncio.sleep(0.05)
        assert released == [] and gate.waiting
        await asyncio.sleep(READY_WAIT + 0.2)
        assert len(released) == 1 and released[0] >= gate.ready_by
    run_virtual(main())


def test_closing_every_gate_lets_nobody_through():
    async def main():
        clock = Clock()
        gates = Gates(clock, lambda g: (_ for _ in ()).throw(AssertionError("released")))
        gate = gates.at(clock.now() + 0.05)
        rfd = os.dup(gate.rfd)
        gates.close_all()
        assert not gates
        await asyncio.sleep(0.1)  # its timer was cancelled
        assert os.read(rfd, 10) == b""
        os.close(rfd)
    run_virtual(main())


def test_the_pending_gates_times_are_what_the_heap_waits_for():
    """The GC's full collection waits for a quiet moment between these
    (runtime/heap.py); the daemon hands it ``gates.times``."""
    async def main():
        clock = Clock()
        gates = Gates(clock, lambda g: g.open(0))
        first, second = clock.now() + 30, clock.now() + 60
        gates.at(first)
        gates.at(second)
        gates.at(first)
        assert sorted(gates.times()) == [first, second]
        gates.close_all()
        assert gates.times() == []
    run_virtual(main())


def test_claims_are_asked_before_the_gate_and_again_at_it_for_runs_held_back():
    """In a cluster a gate asks for its runs' claims ``lead`` before its time
    and opens only for runs whose claim is decided; runs whose claim was held
    back then (the node was fenced a moment) are asked for again at the gate."""
    async def main():
        clock = Clock()
        released, asked = [], []
        withhold = {"on": True}

        def claim(gate):
            asked.append((clock.now() - gate.due, [a.life.claim for a in gate.runs]))
            for a in gate.runs:
                if not withhold["on"] and a.life.claim == "none":
                    a.life = L.step(a.life, L.ClaimAsked())[0]
                    a.life = L.step(a.life, L.ClaimDecided(True))[0]
                    gates.settled(a)
        gates = Gates(clock, lambda g: (released.append(clock.now()), g.open(0)), claim,
                      lead=lambda: 0.05)
        due = clock.now() + 0.1
        gate = gates.at(due)
        run = act()
        run.life = L.Life(phase=L.Phase.WAITING, pid=10, ready=True)  # claim: none
        run.gate = gate
        gate.runs.append(run)
        await asyncio.sleep(0.07)
        assert len(asked) == 1 and -0.06 < asked[0][0] < -0.04  # lead before its time
        assert released == []
        withhold["on"] = False  # the fence has cleared
        await asyncio.sleep(0.1)
        assert len(asked) == 2 and asked[1][0] >= 0 and run.life.claim == "won"
        assert len(released) == 1
    run_virtual(main())


def test_a_gate_whose_claims_settle_while_it_looks_is_released_once():
    """Found by bench/hostile_load.py (issue 29): a gate that waited for a
    claim asked for it again at its next look; the claim was decided at
    once, settling the gate, which released it from inside that look; the
    look went on and released it a second time: a write to, and a close of,
    pipe ends already closed (EBADF), or, had the numbers been reused
    meanwhile, of another gate's pipe or a socket."""
    async def main():
        clock = Clock()
        released = []
        withhold = {"on": True}

        def claim(gate):
            for a in gate.runs:
                if not withhold["on"] and a.life.claim == "none":
                    a.life = L.step(a.life, L.ClaimAsked())[0]
                    a.life = L.step(a.life, L.ClaimDecided(True))[0]
                    gates.settled(a)
        gates = Gates(clock, lambda g: (released.append(g), g.open(1)), claim,
                      lead=lambda: 0.01)
        gate = gates.at(clock.now() + 0.03)
        run = act()
        run.life = L.Life(phase=L.Phase.WAITING, pid=10, ready=True)  # claim: none
        run.gate = gate
        gate.runs.append(run)
        rfd = os.dup(gate.rfd)
        await asyncio.sleep(0.08)
        assert released == [] and gate.waiting   # its claim held back: it waits
        withhold["on"] = False
        gates._due(gate)                        # its next look (the timer's)
        assert released == [gate]
        assert os.read(rfd, 100) == b"\n\n" and os.read(rfd, 100) == b""
        os.close(rfd)
        gate.close()                            # a second close closes nothing
        gates.close_all()
    run_virtual(main())


def test_a_closed_gate_never_writes_or_closes_again():
    async def main():
        gates = Gates(Clock(), lambda g: None)
        gate = gates.at(Clock().now() + 60)
        gate.close()
        r, w = os.pipe()   # the numbers may be reused by the next pipe
        try:
            gate.open(3)   # refused: it is closed
            gate.close()
            os.write(w, b"x")
            assert os.read(r, 10) == b"x"       # the new pipe is untouched
        finally:
            os.close(r)
            os.close(w)
        gates.close_all()
    run_virtual(main())


def test_a_node_fenced_at_its_gates_time_releases_at_once_not_by_its_stepped_back_clock():
    """Found by the fault suite (clock-jump seeds): a node whose wall clock
    stepped 30 s back after its runs' claims were won kept them at their gate
    for 30 s by that clock, then (fenced) said they were lost: they ran 30 s
    late elsewhere. A fenced node's gate opens at its timer (monotonic): the
    executor finds it fenced and hands the runs back at once."""
    async def main():
        clock = Clock()
        fence = {"why": None}
        released = []
        gates = Gates(clock, lambda g: (released.append(asyncio.get_running_loop().time()), g.open(0)),
                      fence=lambda: fence["why"])
        start = asyncio.get_running_loop().time()
        gate = gates.at(clock.now() + 0.05)
        gate.runs.append(act())
        clock.t0 -= 30.0                     # the wall clock steps 30 s back
        fence["why"] = "has its clock 30.0s behind the cluster's"
        for _ in range(100):
            if released:
                break
            await asyncio.sleep(0.01)
        assert released and released[0] - start < 0.5
        # Within bounds (not fenced), a small step back is this node's clock:
        # the gate waits for it.
        fence["why"] = None
        released.clear()
        gate = gates.at(clock.now() + 0.05)
        gate.runs.append(act())
        clock.t0 -= 0.3
        await asyncio.sleep(0.2)
        assert released == []
        await asyncio.sleep(0.3)
        assert len(released) == 1
        gates.close_all()
    run_virtual(main())


def test_a_fenced_node_does_not_wait_for_runs_that_are_not_ready():
    """Nothing starts on a fenced node: waiting READY_WAIT for a supervisor
    only delays the runs' move to another node."""
    async def main():
        clock = Clock()
        released = []
        gates = Gates(clock, lambda g: (released.append(asyncio.get_running_loop().time()), g.open(0)),
                      fence=lambda: "had no fresh lease from the leader")
        start = asyncio.get_running_loop().time()
        gate = gates.at(clock.now() + 0.02)
        gate.runs.append(act(ready=False))
        for _ in range(100):
            if released:
                break
            await asyncio.sleep(0.01)
        assert released and released[0] - start < READY_WAIT / 4
        gates.close_all()
    run_virtual(main())

"""Where a fire runs: the leader's choice of node, made before proposing.

``apply`` must stay deterministic, so the choice is made here, on the
leader, from what it knows now (which members answer, their tags, whether a
node is draining, how many runs each one has) and travels inside the
command. Rules, for a job's ``run_on``:

* ``any``: one healthy, eligible node, least loaded first (load = runs
  assigned or running there, plus the ones this leader has placed since it
  last counted); ties go to a per-(job, fire time) rotation so that equal
  nodes share the work evenly.
* ``all``: one run per member, keyed by node (``target``); a member that is
  down or draining gets a ``skipped`` record for that fire time instead.
* node ids / ``{tags: [...]}``: only those members; tags must all match.

No eligible node means a ``skipped`` record that says why (guarantee 2).
"""

from __future__ import annotations

import hashlib
from typing import Callable

from ...decisions.placement import TAKES_RUNS, Choice, NodeView, fits, no_executor, takes
from ...jobspec import JobSpec
from ...state import pools as PL
from ...state import queries as Q


class Placement:
    def __init__(self, conn, nodes: Callable[[], list[NodeView]]):
        self.conn = conn
        self.nodes = nodes
        self._load: dict[str, int] | None = None
        self._members: list[NodeView] | None = None

    def begin(self) -> None:
        """Look at the members and count their runs afresh (call once per
        batch of fires, not once per fire)."""
        self._load = None
        self._members = None

    def _views(self) -> list[NodeView]:
        if self._members is None:
            self._members = self.nodes()
        return self._members

    def _loads(self) -> dict[str, int]:
        if self._load is None:
            self._load = dict(Q.active_by_node(self.conn))
        return self._load

    def choose(self, spec: JobSpec, fire_time: int) -> list[Choice]:
        mode, values = spec.run_on.mode, spec.run_on.values
        members = [n for n in self._views() if takes(spec, n)]
        if not members and spec.executor_type != "local" and \
                any(fits(spec.run_on, n) for n in self._views()):
            return [Choice("", "", no_executor(spec.executor_type,
                                               spec.run_on.mode != "any"))]
        if not members and mode == "nodes":
            return [Choice("", "", f"no eligible node: run_on {', '.join(values)} names "
                                   "no member of the cluster")]
        if not members and mode == "tags":
            return [Choice("", "", f"no eligible node: no member has tags "
                                   f"{', '.join(values)}")]
        if mode == "all":
            return [Choice(n.id, n.id, None) if n.healthy and n.state in TAKES_RUNS
                    else Choice("", n.id, f"node {n.id} cannot run it: {n.why_not}")
                    for n in members]
        ready = _trusted([n for n in members if n.healthy and n.state in TAKES_RUNS])
        if not ready:
            why = "; ".join(f"{n.id}: {n.why_not}" for n in members)
            return [Choice("", "", f"no eligible node is up ({why})")]
        node = self.pick(self.with_room(spec, [n.id for n in ready]), f"{spec.name}/{fire_time}")
        return [Choice(node, "", None)]

    def offered(self, spec: JobSpec) -> bool:
        """Does any member that ``run_on`` allows offer the job's executor
        (up or not)? A member without it never will, short of a restart."""
        return spec.executor_type == "local" or any(takes(spec, n) for n in self._views())

    def with_room(self, spec: JobSpec, nodes: list[str]) -> list[str]:
        """For a job in a node-scoped pool: the nodes with a free slot for it,
        if any (else all: apply has the run wait for one, state/pools.py)."""
        if not spec.pool or not nodes:
            return nodes
        conf = PL.defined(self.conn, spec.pool)
        if conf is None or conf[1] != "node":
            return nodes
        room = [n for n in nodes
                if PL.in_use(self.conn, spec.pool, n) + spec.slots_needed <= conf[0]]
        return room or nodes

    def eligible(self, spec: JobSpec, *, trusted: bool = True) -> list[str]:
        """The members that may take a run of ``spec`` now (for a retry);
        with ``trusted``, those that did not miss a claim lately first."""
        ready = [n for n in self._views() if n.healthy and
                 n.state in TAKES_RUNS and takes(spec, n)]
        return [n.id for n in (_trusted(ready) if trusted else ready)]

    def pick(self, candidates: list[str], key: str) -> str:
        load = self._loads()
        spin = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big")
        order = sorted(candidates)
        start = spin % len(order)
        order = order[start:] + order[:start]
        best = min(order, key=lambda n: load.get(n, 0))  # min keeps the first of equals
        load[best] = load.get(best, 0) + 1
        return best


def _trusted(nodes: list[NodeView]) -> list[NodeView]:
    """The nodes that did not miss a claim lately and whose disks are not
    slow, if any; else those that did not miss a claim; else all of them (a
    suspect is still better than no run)."""
    return ([n for n in nodes if not n.suspect and n.slow_disk is None]
            or [n for n in nodes if not n.suspect] or nodes)

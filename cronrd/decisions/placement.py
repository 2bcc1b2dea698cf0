"""The vocabulary of placing runs on nodes (pure): what the leader knows of
a member (NodeView), which members take runs (TAKES_RUNS), whether a job's
``run_on`` allows a node (fits), and a choice (Choice). The choosing itself,
which counts runs in the state, is the leader's (runtime/leader/placement.py);
these are shared with the members' views (runtime/cluster/) and explain."""

from __future__ import annotations

from dataclasses import dataclass

from ..jobspec import JobSpec, RunOn


# A member takes runs when it answers and is up, or has no record yet (an
# initial member still starting: its executor holds what it is given until
# it has settled its state, so nothing is lost by assigning early). Joining
# (still catching up) and draining (stopping) members get none.
TAKES_RUNS = frozenset({"up", "unknown"})


def fits(run_on: RunOn, node: NodeView, executor: str = "local") -> bool:
    """Does ``run_on`` allow this node at all (up or not), and does it offer
    the job's ``executor`` (a node announces the executors it has beyond
    local as tags ``executor:NAME``: runtime/runs/executors.py)?"""
    if executor != "local" and f"executor:{executor}" not in node.tags:
        return False
    if run_on.mode == "nodes":
        return node.id in run_on.values
    if run_on.mode == "tags":
        return set(run_on.values) <= node.tags
    return True


def takes(spec: JobSpec, node: NodeView) -> bool:
    """``fits`` for a job ``spec``: its run_on and executor, and, on a worker
    agent, no heartbeat_timeout (a run there has no control socket to beat
    through: it would be timed out; docs/workers.md)."""
    return fits(spec.run_on, node, spec.executor_type) and not (
        node.worker and spec.heartbeat_timeout is not None)


@dataclass(frozen=True)
class Choice:
    node: str          # where it runs ("" for a skip)
    target: str        # the per-node key of a run_on: all run, "" otherwise
    skip: str | None   # the reason it does not run, or None


@dataclass(frozen=True)
class NodeView:
    id: str
    healthy: bool
    state: str               # up | draining | unknown
    tags: frozenset[str]
    why_not: str = ""        # why it cannot take runs now
    suspect: bool = False    # missed a claim lately: others first (decisions/claims.py)
    slow_disk: str | None = None  # why its disk is slow (decisions/disk.py): others first
    worker: bool = False     # a worker agent (no control socket: no heartbeats from its runs)


def no_executor(executor: str, narrowed: bool = False) -> str:
    """Why no member fits a job whose executor none of them offers
    (``narrowed``: none of those its run_on allows)."""
    who = "no member that its run_on allows" if narrowed else "no member"
    return (f"no eligible node: {who} offers the {executor} executor"
            + (" (podman is not installed there: apt-get install podman on the nodes that "
               "should run it, then restart cronrd on them)" if executor == "container"
               else ""))

"""Applying the commands about nodes: their info, losing a node's runs,
removing a node, and pruning history.

A part of the state machine (machine.py), which is one of these
classes each: the methods use its connection and one another."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import __version__
from . import checkpoints as CK
from . import commands as C
from . import alerts as AL
from . import downstream as DS
from . import events as EV
from . import deliveries as DL
from . import pause_log
from . import pools as PL
from . import run_params as RP
from . import versions as V
from ..model.run import SELECT as SELECT_RUNS, Run
from ..errors import Refused
from ..model.run_states import ACTIVE, sql_in
from .schema import (NODE_STATES)
from .apply_common import PRUNE_BATCH, ApplyBase, canon

if TYPE_CHECKING:
    from .effects import Effect


class NodesApply(ApplyBase):
    """The nodes part of StateMachine."""

    def _apply_node_info(self, index: int, cmd: C.NodeInfo, effects: list[Effect]) -> dict[str, Any]:
        if cmd.state not in NODE_STATES:
            raise Refused(f"node {cmd.node}: state {cmd.state!r} is not one of "
                          f"{', '.join(NODE_STATES)}")
        tags = canon(sorted({str(t) for t in cmd.tags}))
        old = None
        for old in self.conn.execute("SELECT state, addr, tags, since FROM nodes WHERE node=?",
                                     (cmd.node,)):
            pass
        if old is not None and old[:3] == (cmd.state, cmd.addr, tags):
            return {"changed": False}
        since = old[3] if old is not None and old[0] == cmd.state else cmd.at
        self.conn.execute(
            "INSERT INTO nodes(node, state, addr, tags, since) VALUES(?,?,?,?,?) "
            "ON CONFLICT(node) DO UPDATE SET state=excluded.state, addr=excluded.addr,"
            " tags=excluded.tags, since=excluded.since",
            (cmd.node, cmd.state, cmd.addr, tags, since))
        return {"changed": True}

    def _apply_worker_info(self, index: int, cmd: C.WorkerInfo,
                           effects: list[Effect]) -> dict[str, Any]:
        if not V.at_least(self.conn, V.WORKERS):
            raise Refused(f"worker {cmd.node}: workers need cluster version {V.WORKERS}")
        if not (isinstance(cmd.capacity, int) and not isinstance(cmd.capacity, bool)
                and 0 < cmd.capacity <= 100_000):
            raise Refused(f"worker {cmd.node}: capacity {cmd.capacity!r} is not 1..100000")
        if any(True for _ in self.conn.execute(
                "SELECT 1 FROM denied WHERE kind='node' AND value=?", (cmd.node,))):
            raise Refused(f"worker {cmd.node} was removed from the cluster")
        tags = canon(sorted({str(t) for t in cmd.tags}))
        old = None
        for old in self.conn.execute("SELECT tags, capacity, version, since FROM workers "
                                     "WHERE node=?", (cmd.node,)):
            pass
        if old is not None and old[:3] == (tags, cmd.capacity, str(cmd.version)):
            return {"changed": False}
        self.conn.execute(
            "INSERT INTO workers(node, tags, capacity, version, since) VALUES(?,?,?,?,?) "
            "ON CONFLICT(node) DO UPDATE SET tags=excluded.tags, capacity=excluded.capacity,"
            " version=excluded.version, since=excluded.since",
            (cmd.node, tags, cmd.capacity, str(cmd.version), cmd.at))
        return {"changed": True}

    def _apply_set_cluster_version(self, index: int, cmd: C.SetClusterVersion,
                                   effects: list[Effect]) -> dict[str, Any]:
        if not isinstance(cmd.version, int) or isinstance(cmd.version, bool):
            raise Refused(f"cluster version {cmd.version!r} is not a whole number")
        if cmd.version > V.APPLY_VERSION:
            # Not a refusal: the members that can apply it go on by its rules.
            raise V.NewerLog(
                f"log entry {index} raises the cluster version to {cmd.version}; this cronrd "
                f"{__version__} applies versions up to {V.APPLY_VERSION}: "
                f"{V.upgrade_hint(cmd.version)}; this node stops applying here rather than "
                "go on by rules the other members no longer follow")
        current = V.recorded(self.conn)
        if cmd.version <= current:
            raise Refused(f"the cluster is at version {current} already; a cluster version is "
                          "never lowered")
        set_meta = ("INSERT INTO meta(key, value) VALUES(?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value")
        self.conn.execute(set_meta, ("cluster_version", cmd.version))
        self.conn.execute(set_meta, ("cluster_version_index", index))
        self.conn.execute(set_meta, ("cluster_version_at", cmd.at))
        # An older release must refuse this database from now on.
        self.conn.execute(set_meta, ("schema_version", V.SCHEMA_LOCK[cmd.version]))
        return {"cluster_version": cmd.version, "was": current}

    def _lose_runs(self, index: int, node: str, at: float, reason: str, effects: list[Effect]) -> dict[str, Any]:
        lost, retries = [], []
        for row in list(self.conn.execute(
                f"{SELECT_RUNS} WHERE state IN ('pending',"
                "'assigned','running') AND state != 'pending' AND node=? ORDER BY run_id",
                (node,))):
            run = Run.from_row(row)
            # An assigned run nobody claimed cannot have started (a node
            # starts only what its committed claim gave it): it is run again
            # whatever on_node_loss says.
            unclaimed = run.state == "assigned" and run.claimed_at is None
            retry = self._finish(run, "lost", at, effects=effects, index=index,
                                 reason=f"{reason}; it had not started (never claimed)"
                                 if unclaimed else reason, not_started=unclaimed)
            lost.append(run.run_id)
            if retry is not None:
                retries.append(retry)
        return {"lost": lost, "retries": retries}


    def _apply_node_lost(self, index: int, cmd: C.NodeLost, effects: list[Effect]) -> dict[str, Any]:
        # a lost node finishes no job file it was reading: others need not wait
        self.conn.execute("DELETE FROM file_claims WHERE node=?", (cmd.node,))
        return self._lose_runs(index, cmd.node, cmd.at, cmd.reason, effects)


    def _apply_remove_node(self, index: int, cmd: C.RemoveNode, effects: list[Effect]) -> dict[str, Any]:
        self.conn.execute("DELETE FROM nodes WHERE node=?", (cmd.node,))
        removed = bool(self.conn.changes())
        self.conn.execute("DELETE FROM workers WHERE node=?", (cmd.node,))  # (none before v2)
        removed = removed or bool(self.conn.changes())
        self.conn.execute("DELETE FROM join_tokens WHERE node=?", (cmd.node,))
        self.conn.execute("DELETE FROM node_drains WHERE node=?", (cmd.node,))
        why = f"node {cmd.node} was removed from the cluster"
        if cmd.deny:
            self._deny("node", cmd.node, why, cmd.at)
        if cmd.serial:
            self._deny("serial", cmd.serial, why, cmd.at)
        had = list(self.conn.execute(
            "SELECT name, digest FROM job_sources WHERE node=? ORDER BY name", (cmd.node,)))
        self.conn.execute("DELETE FROM job_sources WHERE node=?", (cmd.node,))
        # Its files too: if it joins again, they are read again, not skipped.
        self.conn.execute("DELETE FROM source_files WHERE node=?", (cmd.node,))
        self.conn.execute("DELETE FROM file_claims WHERE node=?", (cmd.node,))
        deleted = []
        for name, digest in had:  # first, so runs of a job that goes are not retried
            self._reconcile(name, cmd.at, effects)
            self._forget_specs(name, [digest])
            if self._job(name) is None:
                deleted.append(name)
        result = self._lose_runs(index, cmd.node, cmd.at,
                                 f"node {cmd.node} was removed from the cluster", effects)
        return {"removed": removed, "jobs_removed": deleted, **result}


    def _apply_prune(self, index: int, cmd: C.Prune, effects: list[Effect]) -> dict[str, Any]:
        self.conn.execute(
            f"DELETE FROM runs WHERE state NOT IN {sql_in(ACTIVE)} AND "
            "COALESCE(finished_at, created_at) < ?", (cmd.before,))
        runs = self.conn.changes()
        self.conn.execute("DELETE FROM gaps WHERE created_at < ?", (cmd.before,))
        self.conn.execute("DELETE FROM late_reports WHERE finished_at < ?", (cmd.before,))
        self.conn.execute("DELETE FROM audit WHERE at < ?", (cmd.before,))
        pause_log.prune(self.conn, cmd.before)
        more = False
        if isinstance(cmd.keep, int) and not isinstance(cmd.keep, bool) and cmd.keep > 0:
            # An every-second job makes 86,400 records a day: a count keeps
            # the newest ``keep`` of each job whatever its rate.
            budget = PRUNE_BATCH
            for job, _count in list(self.conn.execute(
                    "SELECT job, COUNT(*) FROM runs GROUP BY job HAVING COUNT(*) > ? "
                    "ORDER BY job", (cmd.keep,))):
                cutoff = next(iter(self.conn.execute(
                    "SELECT run_id FROM runs WHERE job=? ORDER BY run_id DESC LIMIT 1 OFFSET ?",
                    (job, cmd.keep - 1))))[0]
                self.conn.execute(
                    f"DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs WHERE job=? AND "
                    f"run_id < ? AND state NOT IN {sql_in(ACTIVE)} ORDER BY run_id LIMIT ?)",
                    (job, cutoff, budget))
                runs += self.conn.changes()
                budget -= self.conn.changes()
                if budget <= 0:  # maybe more: the next Prune goes on
                    more = True
                    break
        RP.prune(self.conn)
        self.conn.execute("DELETE FROM run_retries WHERE run_id NOT IN (SELECT run_id FROM runs)")
        DS.prune(self.conn)
        CK.prune(self.conn)
        EV.prune(self.conn, cmd.before)
        PL.prune(self.conn)
        DL.prune(self.conn)
        AL.prune(self.conn, cmd.before)
        return {"runs_deleted": runs, **({"more": True} if more else {})}

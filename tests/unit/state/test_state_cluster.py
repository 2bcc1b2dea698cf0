"""The replicated state for a cluster: job definitions from several nodes,
node membership, lost runs waiting for the leader to place them."""

from __future__ import annotations

import hashlib
import json
import random

import apsw
import pytest

from cronrd.errors import StateError
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from cronrd.state.schema import SCHEMA_VERSION
from tests.unit.state.test_state import T0, Log, spec


class Cluster(Log):
    def put_on(self, node, name="j", at=T0, **over):
        s = spec(name=name, **over)
        return self.apply(C.PutJob(name=name, spec=s, digest=digest(s), at=at, node=node,
                                   source=f"/etc/{node}/{name}.yaml"))

    def job(self, name="j"):
        return next((j for j in Q.jobs(self.sm.conn) if j["name"] == name), None)

    def start(self, run_id, node="n1"):
        run = self.run(run_id)
        return self.apply(C.RunStarted(run_id=run_id, token=run.token, node=node, pid=7,
                                       started_at=run.due_at, log_path="/l"))

    def kinds(self, kind):
        return [e for e in self.effects if e.kind == kind]

    def claim(self, node, *run_ids, at=T0):
        return self.apply(C.ClaimRuns(node=node, at=at, claims=[
            [rid, self.run(rid).token] for rid in run_ids]))

    def move(self, run_id, to, at=T0 + 2, token=None):
        run = self.run(run_id)
        return self.apply(C.ReplaceRuns(moves=[[run_id, run.token if token is None else
                                                token, to]], at=at, reason="not claimed"))


def digest(s: dict) -> str:
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()


# -- job definitions from several nodes ---------------------------------------------
def test_identical_definitions_from_two_nodes_are_one_job():
    c = Cluster()
    assert c.put_on("a")["created"] is True
    c.effects.clear()
    res = c.put_on("b", at=T0 + 1)
    assert res["conflict"] is None and res["created"] is False
    (job,) = Q.jobs(c.sm.conn)
    assert job["conflict"] is None and job["cursor"] == T0
    assert [(s["node"], s["source"]) for s in job["sources"]] == [
        ("a", "/etc/a/j.yaml"), ("b", "/etc/b/j.yaml")]
    assert job["source"] == "/etc/b/j.yaml"   # the most recently changed node's path
    assert c.put_on("b", at=T0 + 2) == {"changed": False}
    assert Q.job_sources(c.sm.conn, "a") == {
        "j": {"digest": digest(spec()), "source": "/etc/a/j.yaml"}}
    assert Q.job_sources(c.sm.conn, "zz") == {}


def test_a_differing_definition_is_a_conflict_and_the_agreed_version_stays():
    c = Cluster()
    c.put_on("a", command="echo one")
    c.put_on("b", command="echo one")
    agreed = c.job()
    c.effects.clear()
    res = c.put_on("b", at=T0 + 5, command="echo two")
    assert res["changed"] is True and "make the job files identical" in res["conflict"]
    job = c.job()
    assert job["conflict"].startswith("node a defines job 'j' differently from node b")
    assert (job["spec"], job["digest"], job["source"]) == (
        agreed["spec"], agreed["digest"], agreed["source"])
    assert [e.job for e in c.kinds("jobs_changed")] == ["j"]
    # Fires still use the agreed version (here: its concurrency and enabled flag).
    assert c.fire(T0 + 10, node="a")["state"] == "assigned"
    c.effects.clear()
    assert c.put_on("b", at=T0 + 6, command="echo two") == {"changed": False}
    assert c.kinds("jobs_changed") == []


def test_resolving_the_conflict_clears_it():
    c = Cluster()
    c.put_on("a")
    c.put_on("b")
    c.put_on("b", command="different")
    assert c.job()["conflict"] is not None
    c.effects.clear()
    res = c.put_on("b", at=T0 + 9)            # b's file fixed: identical again
    assert res["changed"] is True and res["conflict"] is None
    assert c.job()["conflict"] is None and c.job()["spec"].command == "true"
    assert [e.job for e in c.kinds("jobs_changed")] == ["j"]


def test_agreeing_on_a_new_version_updates_the_job():
    c = Cluster()
    c.put_on("a", concurrency="allow")
    c.put_on("b", concurrency="allow")
    ahead = c.fire(T0 + 50, node="a")["run_id"]
    c.put_on("a", at=T0 + 1, concurrency="allow", enabled=False)
    assert c.job()["spec"].enabled is True and c.run(ahead).state == "assigned"
    c.put_on("b", at=T0 + 2, concurrency="allow", enabled=False)
    assert c.job()["spec"].enabled is False and c.job()["conflict"] is None
    assert c.run(ahead).state == "skipped"


def test_three_way_conflict_names_every_group():
    c = Cluster()
    c.put_on("a")
    c.put_on("b", command="two")
    c.put_on("c", command="three")
    text = c.job()["conflict"]
    assert text.startswith("node a defines job 'j' differently from node b and node c")
    # The node holding the version in force goes away: the others still disagree.
    c.apply(C.RemoveJob(name="j", node="a", at=T0 + 1))
    job = c.job()
    assert job["spec"].command == "true"
    assert job["conflict"].startswith("node b defines job 'j' differently from node c")
    assert job["conflict"].endswith(f"version with digest {digest(spec())[:8]} stays in force)")
    c.put_on("c", command="two", at=T0 + 2)
    assert c.job()["spec"].command == "two" and c.job()["conflict"] is None


def test_job_disappears_only_when_the_last_node_removes_it():
    c = Cluster()
    c.put_on("a", concurrency="allow")
    c.put_on("b", concurrency="allow")
    rid = c.fire(T0 + 5, node="a")["run_id"]
    assert c.apply(C.RemoveJob(name="j", node="a", at=T0 + 1)) == {
        "removed": "j", "sources_left": 1}
    assert c.job()["sources"] == [{"node": "b", "digest": digest(spec(concurrency="allow")),
                                   "source": "/etc/b/j.yaml"}]
    assert c.run(rid).state == "assigned"
    with pytest.raises(Refused, match="no job"):
        c.apply(C.RemoveJob(name="nope", node="a", at=T0 + 1))
    c.apply(C.RemoveJob(name="j", node="b", at=T0 + 2))
    assert c.job() is None and c.run(rid).state == "cancelled"
    with pytest.raises(Refused, match="no job"):
        c.apply(C.RemoveJob(name="j", node="b", at=T0 + 3))


def test_removing_a_conflicting_source_resolves_the_conflict():
    c = Cluster()
    c.put_on("a")
    c.put_on("b", command="other")
    c.apply(C.RemoveJob(name="j", node="b", at=T0 + 1))
    assert c.job()["conflict"] is None and c.job()["spec"].command == "true"


# -- nodes -----------------------------------------------------------------------------
def test_node_info_is_idempotent_and_tags_are_a_set():
    c = Cluster()
    assert c.apply(C.NodeInfo(node="a", state="up", addr="10.0.0.1:7000",
                              tags=("ssd", "eu"), at=T0)) == {"changed": True}
    # Through the log the tags arrive as a list; order does not matter either.
    cmd = C.decode(C.NodeInfo(node="a", state="up", addr="10.0.0.1:7000",
                              tags=["eu", "ssd"], at=T0 + 5).encode())
    assert c.apply(cmd) == {"changed": False}
    assert Q.nodes(c.sm.conn) == [{"node": "a", "state": "up", "addr": "10.0.0.1:7000",
                                   "tags": ["eu", "ssd"], "since": T0}]
    assert c.apply(C.NodeInfo(node="a", state="draining", addr="10.0.0.1:7000",
                              tags=["eu", "ssd"], at=T0 + 9)) == {"changed": True}
    assert Q.nodes(c.sm.conn)[0]["since"] == T0 + 9
    with pytest.raises(Refused, match="not one of joining, up, draining"):
        c.apply(C.NodeInfo(node="a", state="gone", addr="", tags=(), at=T0))


def test_node_lost_retries_its_runs_as_pending_and_the_leader_places_them():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    c.start(rid, node="a")
    c.effects.clear()
    res = c.apply(C.NodeLost(node="a", at=T0 + 30, reason="node a missed heartbeats"))
    assert res["lost"] == [rid] and len(res["retries"]) == 1
    lost = c.run(rid)
    assert lost.state == "lost" and lost.reason == "node a missed heartbeats"
    retry = c.run(res["retries"][0])
    assert (retry.state, retry.attempt, retry.node, retry.token, retry.kind) == (
        "pending", 2, None, None, "retry")
    assert retry.due_at == T0 + 30
    assert [e.run.run_id for e in c.kinds("pending")] == [retry.run_id]
    assert c.kinds("assign") == []
    assert [r.run_id for r in Q.pending_runs(c.sm.conn)] == [retry.run_id]
    assert Q.count_active(c.sm.conn) == {"pending": 1}
    # The leader does not put it straight back where it was lost.
    assert Q.lost_by(c.sm.conn, retry) == ("a", T0 + 30)
    assert Q.lost_by(c.sm.conn, lost) is None   # attempt 1: nothing before it
    # Idempotent: nothing left to lose.
    assert c.apply(C.NodeLost(node="a", at=T0 + 31, reason="again")) == {
        "lost": [], "retries": []}
    c.effects.clear()
    res = c.apply(C.AssignRun(run_id=retry.run_id, node="b", at=T0 + 32))
    placed = c.run(retry.run_id)
    assert (placed.state, placed.node, placed.token) == ("assigned", "b", c.index)
    assert res["token"] == c.index and placed.due_at == T0 + 30
    assert [e.run for e in c.kinds("assign")] == [placed]
    assert Q.pending_runs(c.sm.conn) == [] and Q.active_by_node(c.sm.conn) == {"b": 1}
    with pytest.raises(Refused, match="not pending"):
        c.apply(C.AssignRun(run_id=retry.run_id, node="c", at=T0 + 33))
    # The placed retry reports with its new token from its new node.
    c.start(placed.run_id, node="b")
    assert Q.active_by_node(c.sm.conn) == {"b": 1}


def test_a_manual_run_without_a_node_waits_for_the_leader():
    c = Cluster()
    c.put_on("a")
    res = c.apply(C.ManualRun(job="j", node="", at=T0 + 1))
    assert res["state"] == "pending" and [e.run.run_id for e in c.kinds("pending")] == [
        res["run_id"]]
    run = c.run(res["run_id"])
    assert (run.node, run.token, run.due_at) == (None, None, T0 + 1)
    c.apply(C.AssignRun(run_id=res["run_id"], node="b", at=T0 + 2))
    assert c.run(res["run_id"]).state == "assigned"


def test_on_node_loss_fail_is_not_retried_and_says_so():
    c = Cluster()
    c.put_on("a", on_node_loss="fail")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    c.claim("a", rid)  # claimed: it may have started
    res = c.apply(C.NodeLost(node="a", at=T0 + 30, reason="node a missed heartbeats"))
    assert res == {"lost": [rid], "retries": []}
    assert c.run(rid).reason == ("node a missed heartbeats; not retried "
                                    "(on_node_loss: fail)")
    assert Q.pending_runs(c.sm.conn) == []


def test_a_lost_retry_may_itself_be_lost_only_within_the_policy():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    c.claim("a", rid)  # each attempt claimed: each may have run
    (retry,) = c.apply(C.NodeLost(node="a", at=T0 + 2, reason="x"))["retries"]
    c.apply(C.AssignRun(run_id=retry, node="b", at=T0 + 3))
    c.claim("b", retry)
    res = c.apply(C.NodeLost(node="b", at=T0 + 4, reason="y"))
    assert res == {"lost": [retry], "retries": []}   # attempt 2 used the one lost retry
    assert c.run(rid).state == "lost"


def test_pending_runs_can_be_cancelled_and_go_with_their_job():
    c = Cluster()
    c.put_on("a", concurrency="allow")
    r1 = c.fire(T0 + 1, node="a")["run_id"]
    r2 = c.fire(T0 + 2, node="a")["run_id"]
    p1, p2 = c.apply(C.NodeLost(node="a", at=T0 + 3, reason="x"))["retries"]
    assert {r1, r2}.isdisjoint({p1, p2})
    c.apply(C.CancelRun(run_id=p1, reason="operator", at=T0 + 4))
    assert c.run(p1).state == "cancelled"
    # Prune keeps pending runs however old.
    c.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000))
    assert c.run(p2).state == "pending"
    c.apply(C.RemoveJob(name="j", node="a", at=T0 + 5))
    assert c.run(p2).state == "cancelled"


def test_remove_node_cleans_its_sources_and_runs():
    c = Cluster()
    c.apply(C.NodeInfo(node="a", state="up", addr="a:1", tags=(), at=T0))
    c.apply(C.NodeInfo(node="b", state="up", addr="b:1", tags=(), at=T0))
    c.put_on("a", "shared")
    c.put_on("b", "shared")
    c.put_on("b", "shared", command="b's own", at=T0 + 1)   # conflict with a
    c.put_on("a", "only_a", concurrency="allow")
    shared = c.fire(T0 + 1, "shared", node="a")["run_id"]
    c.start(shared, node="a")
    mine = c.fire(T0 + 20, "only_a", node="a")["run_id"]
    c.effects.clear()
    res = c.apply(C.RemoveNode(node="a", at=T0 + 10))
    assert res["removed"] is True and res["jobs_removed"] == ["only_a"]
    assert res["lost"] == [shared] and len(res["retries"]) == 1
    assert c.run(shared).reason == "node a was removed from the cluster"
    assert c.run(mine).state == "cancelled"           # its job went with the node
    assert [n["node"] for n in Q.nodes(c.sm.conn)] == ["b"]
    assert Q.job_sources(c.sm.conn, "a") == {}
    job = c.job("shared")
    assert job["conflict"] is None and job["spec"].command == "b's own"
    assert c.job("only_a") is None
    assert {e.job for e in c.kinds("jobs_changed")} == {"shared", "only_a"}
    again = c.apply(C.RemoveNode(node="a", at=T0 + 11))
    assert again == {"removed": False, "jobs_removed": [], "lost": [], "retries": []}


# -- reports ---------------------------------------------------------------------------
def test_a_repeated_finish_report_is_a_duplicate_but_a_stale_token_is_late():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1)["run_id"]
    token = c.run(rid).token
    c.finish(rid, "succeeded")
    assert c.finish(rid, "succeeded") == {"state": "succeeded", "duplicate": True}
    assert list(c.sm.conn.execute("SELECT COUNT(*) FROM late_reports")) == [(0,)]
    assert c.finish(rid, "failed", exit_code=3) == {"state": "succeeded", "late": True}
    assert c.finish(rid, "succeeded", token=token - 1) == {"state": "succeeded",
                                                            "late": True}
    assert list(c.sm.conn.execute("SELECT COUNT(*) FROM late_reports")) == [(2,)]


def test_a_report_for_a_pending_run_is_late():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="n1")["run_id"]
    token = c.run(rid).token
    (retry,) = c.apply(C.NodeLost(node="n1", at=T0 + 2, reason="x"))["retries"]
    # The old node comes back and reports the first attempt, then one for the retry.
    assert c.finish(rid, "succeeded", token=token)["late"] is True
    assert c.finish(retry, "succeeded", token=token)["late"] is True
    assert c.run(retry).state == "pending"


# -- schema upgrade --------------------------------------------------------------------
V1_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value);
CREATE TABLE jobs(name TEXT PRIMARY KEY, spec TEXT NOT NULL, digest TEXT NOT NULL,
    source TEXT NOT NULL, paused INTEGER NOT NULL DEFAULT 0, cursor INTEGER NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE runs(run_id INTEGER PRIMARY KEY, job TEXT NOT NULL, origin TEXT NOT NULL,
    kind TEXT NOT NULL, fire_time INTEGER NOT NULL, attempt INTEGER NOT NULL,
    target TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, node TEXT, token INTEGER,
    due_at REAL, created_at REAL NOT NULL, started_at REAL, finished_at REAL, pid INTEGER,
    exit_code INTEGER, signal INTEGER, log_path TEXT, reason TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX runs_key ON runs(job, fire_time, target, attempt) WHERE origin = 'schedule';
CREATE INDEX runs_job ON runs(job, run_id);
CREATE INDEX runs_active ON runs(state) WHERE state IN ('assigned', 'running');
CREATE TABLE gaps(gap_id INTEGER PRIMARY KEY, job TEXT NOT NULL, first INTEGER NOT NULL,
    last INTEGER NOT NULL, count INTEGER NOT NULL, reason TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE late_reports(report_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL,
    node TEXT NOT NULL, token INTEGER NOT NULL, state TEXT NOT NULL, exit_code INTEGER,
    signal INTEGER, finished_at REAL, log_path TEXT, received_index INTEGER NOT NULL);
INSERT INTO meta VALUES('schema_version', 1), ('applied_index', 7), ('chain', 'abc');
"""


def test_a_version_1_database_is_upgraded_with_this_node_as_the_source(tmp_path):
    path = str(tmp_path / "state.db")
    conn = apsw.Connection(path)
    conn.execute(V1_SCHEMA)
    s = spec(name="old")
    conn.execute("INSERT INTO jobs VALUES('old', ?, 'd1', '/etc/cronrd.d/old.yaml', 1, ?, ?, ?)",
                 (json.dumps(s), T0 + 60, T0, T0 + 5))
    conn.close()
    sm = StateMachine(apsw.Connection(path), node_id="n1")
    assert sm.applied_index == 7 and sm.state_digest == "abc"
    assert list(sm.conn.execute("SELECT value FROM meta WHERE key='schema_version'")) == [
        (SCHEMA_VERSION,)]
    (job,) = Q.jobs(sm.conn)
    assert (job["paused"], job["cursor"], job["conflict"]) == (True, T0 + 60, None)
    assert job["sources"] == [{"node": "n1", "digest": "d1", "source": "/etc/cronrd.d/old.yaml"}]
    plan = list(sm.conn.execute("EXPLAIN QUERY PLAN SELECT * FROM runs "
                                f"WHERE {Q.ACTIVE_SQL} AND state='pending'"))
    assert "runs_active" in plan[0][3]
    # The upgraded state goes on: an unchanged file from this node changes nothing,
    # a second node's identical file agrees, and reopening does not migrate again.
    c = Cluster()
    c.sm, c.index = sm, 7
    assert c.apply(C.PutJob(name="old", spec=s, digest="d1", source="/etc/cronrd.d/old.yaml",
                            at=T0 + 100, node="n1")) == {"changed": False}
    c.apply(C.PutJob(name="old", spec=s, digest="d1", source="/x", at=T0 + 101, node="n2"))
    assert c.job("old")["conflict"] is None
    sm.conn.close()
    again = StateMachine(apsw.Connection(path), node_id="other")
    assert [s["node"] for s in Q.jobs(again.conn)[0]["sources"]] == ["n1", "n2"]


def test_a_newer_schema_is_refused():
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
                 "INSERT INTO meta VALUES('schema_version', 99)")
    with pytest.raises(StateError, match="upgrade cronrd"):
        StateMachine(conn)


# -- commands and determinism ----------------------------------------------------------
NEW_COMMANDS = [
    C.PutJob(name="j", spec=spec(), digest="d", source="/f", at=1.5, node="a"),
    C.RemoveJob(name="j", at=2.0, node="a"),
    C.NodeInfo(node="a", state="up", addr="h:1", tags=("x", "y"), at=1.0),
    C.NodeInfo(node="a", state="draining", addr="h:1", tags=[], at=1.0),
    C.NodeLost(node="a", at=3.0, reason="silent"),
    C.RemoveNode(node="a", at=4.0),
    C.AssignRun(run_id=3, node="b", at=5.0),
    C.Audit(node="a", uid=1000, user="alice", pid=42, command="pause", target="j",
            allowed=False, at=6.0, detail="permission denied"),
    C.SetPools(pools=[["db", 2, "cluster"], ["gpu", 1, "node"]], at=7.0),
    C.StartDeadline(run_id=3, at=8.0),
]


@pytest.mark.parametrize("cmd", NEW_COMMANDS, ids=lambda c: c.op)
def test_new_commands_round_trip(cmd):
    assert C.decode(cmd.encode()) == cmd
    assert C.decode(cmd.encode()).encode() == cmd.encode()


def test_old_encodings_without_a_node_still_decode():
    assert C.decode(b'{"op":"remove_job","name":"j","at":1.0}') == C.RemoveJob(name="j", at=1.0)


def random_cluster_commands(rng: random.Random, n: int) -> list[C.Command]:
    """A plausible cluster history; a shadow machine lets the leader's
    placements (AssignRun) and the reports mostly name live runs."""
    shadow = StateMachine(apsw.Connection(":memory:"))
    cmds: list[C.Command] = []
    t = T0
    for i in range(1, n + 1):
        t += rng.choice([0, 1, 1, 2, 5])
        name, node = rng.choice("jk"), rng.choice("abc")
        runs = Q.list_runs(shadow.conn, limit=20)
        run = rng.choice(runs) if runs and rng.random() < 0.8 else None
        rid, token = (run.run_id, run.token or 0) if run else (rng.randint(1, 40), 1)
        k = rng.random()
        if k < 0.2:
            s = spec(name=name, command=rng.choice(["one", "two"]),
                     on_node_loss=rng.choice(["retry", "retry", "fail"]),
                     retries={"max": rng.randint(0, 2), "delay": 1.0, "backoff": 2.0,
                              "max_delay": 60.0, "jitter": 0.0}, concurrency="allow")
            cmd = C.PutJob(name=name, spec=s, digest=digest(s), source=f"/{node}", at=t,
                           node=node)
        elif k < 0.25:
            cmd = C.RemoveJob(name=name, at=t, node=node)
        elif k < 0.45:
            cmd = C.Fire(job=name, fire_time=t + rng.randint(-2, 2), kind="scheduled",
                         node=node, due_at=t, at=t)
        elif k < 0.55:
            cmd = C.RunStarted(run_id=rid, token=token, node=run.node if run else node,
                               pid=1, started_at=t, log_path="/l")
        elif k < 0.68:
            cmd = C.RunFinished(
                run_id=rid, token=token, node=(run.node or node) if run else node,
                state=rng.choice(["succeeded", "failed", "lost"]), exit_code=0, signal=None,
                started_at=t, finished_at=t + 1, log_path="/l")
        elif k < 0.76:
            cmd = C.NodeLost(node=node, at=t, reason=f"{node} silent")
        elif k < 0.88:
            pending = Q.pending_runs(shadow.conn)
            cmd = C.AssignRun(run_id=pending[0].run_id if pending else rid, node=node, at=t)
        elif k < 0.95:
            cmd = C.NodeInfo(node=node, state=rng.choice(["up", "draining"]),
                             addr=f"{node}:1", tags=rng.sample(["x", "y", "z"], 2), at=t)
        elif k < 0.97:
            cmd = C.CancelRun(run_id=rid, reason="op", at=t)
        else:
            cmd = C.RemoveNode(node=node, at=t)
        cmds.append(cmd)
        with shadow.conn:
            try:
                shadow.apply(i, cmd)
            except Refused:
                pass
    return cmds


def replay(cmds):
    sm = StateMachine(apsw.Connection(":memory:"))
    results = []
    for i, cmd in enumerate(cmds, 1):
        with sm.conn:
            try:
                results.append(sm.apply(i, C.decode(cmd.encode())))
            except Refused as exc:
                results.append(str(exc))
    return sm, results


@pytest.mark.parametrize("seed", range(10))
def test_cluster_histories_are_deterministic(seed):
    cmds = random_cluster_commands(random.Random(seed), 300)
    (sm1, r1), (sm2, r2) = replay(cmds), replay(cmds)
    assert (sm1.full_digest(), sm1.state_digest) == (sm2.full_digest(), sm2.state_digest)
    assert r1 == r2
    ops = {c.op for c, r in zip(cmds, r1) if not isinstance(r, str)}
    assert {"node_lost", "assign_run", "put_job", "node_info", "run_finished"} <= ops
    # Invariants: pending runs have no node; active runs are on a node with a token.
    for run in Q.list_runs(sm1.conn, limit=10_000):
        if run.state == "pending":
            assert run.node is None and run.token is None
        elif run.state in ("assigned", "running"):
            assert run.node is not None and run.token is not None
    # Every job has a source; every source has a job.
    names = {j["name"] for j in Q.jobs(sm1.conn)}
    assert names == {n for (n,) in sm1.conn.execute("SELECT name FROM job_sources")}
    assert all(j["sources"] for j in Q.jobs(sm1.conn))


def test_full_digest_covers_sources_and_nodes():
    sm, _ = replay([C.NodeInfo(node="a", state="up", addr="a:1", tags=(), at=T0)])
    before = sm.full_digest()
    with sm.conn:
        sm.conn.execute("UPDATE nodes SET addr='elsewhere'")
    assert sm.full_digest() != before
    sm, _ = replay([C.PutJob(name="j", spec=spec(), digest="d", source="/f", at=T0, node="a")])
    before = sm.full_digest()
    with sm.conn:
        sm.conn.execute("UPDATE job_sources SET source='/g'")
    assert sm.full_digest() != before


def test_run_started_reported_twice_is_a_duplicate_not_a_cancel():
    c = Cluster()
    c.put_on("a")
    run_id = c.apply(C.ManualRun(job="j", node="a", at=T0 + 1))["run_id"]
    first = c.start(run_id, node="a")
    c.effects.clear()
    again = c.start(run_id, node="a")
    assert first == {"state": "running", "cancel": False}
    assert again["duplicate"] is True and again["cancel"] is False
    assert not c.kinds("cancel")
    assert c.run(run_id).state == "running"


@pytest.mark.parametrize("policy", ["retry", "fail"])
def test_a_lost_run_that_never_started_is_always_retried(policy):
    """Fenced at its gate (the node vouches nothing ran): another attempt,
    whatever on_node_loss and however many attempts were lost this way."""
    c = Cluster()
    c.put_on("a", on_node_loss=policy)
    run_id = c.apply(C.ManualRun(job="j", node="a", at=T0 + 1))["run_id"]
    for attempt in range(1, 5):
        run = c.run(run_id)
        assert run.attempt == attempt
        res = c.apply(C.RunFinished(run_id=run_id, token=run.token, node=run.node,
                                    state="lost", exit_code=None, signal=None,
                                    started_at=None, finished_at=T0 + 2, log_path=None,
                                    reason="fenced", not_started=True))
        run_id = res["retry_run_id"]
        assert run_id is not None and c.run(run_id).state == "pending"
        c.apply(C.AssignRun(run_id=run_id, node="b", at=T0 + 3))
    # Without the node's word that nothing ran, the policy decides as before.
    run = c.run(run_id)
    res = c.apply(C.RunFinished(run_id=run_id, token=run.token, node="b", state="lost",
                                exit_code=None, signal=None, started_at=None,
                                finished_at=T0 + 4, log_path=None, reason="gone"))
    assert res["retry_run_id"] is None


def test_node_lost_first_then_the_node_says_it_never_started_gives_a_retry():
    """In a partition the leader's NodeLost commits before the cut-off node's
    own report; with on_node_loss: fail NodeLost retries nothing, but the
    node's word that nothing ran does."""
    c = Cluster()
    c.put_on("a", on_node_loss="fail")
    run_id = c.apply(C.ManualRun(job="j", node="a", at=T0 + 1))["run_id"]
    c.claim("a", run_id)  # claimed, then cut off: fenced at its gate
    run = c.run(run_id)
    assert c.apply(C.NodeLost(node="a", at=T0 + 5, reason="silent"))["retries"] == []
    res = c.apply(C.RunFinished(run_id=run_id, token=run.token, node="a", state="lost",
                                exit_code=None, signal=None, started_at=None,
                                finished_at=T0 + 6, log_path=None, reason="fenced",
                                not_started=True))
    assert res["duplicate"] is True
    retry = c.run(res["retry_run_id"])
    assert (retry.state, retry.attempt, retry.node) == ("pending", 2, None)
    # Said again: still one retry.
    again = c.apply(C.RunFinished(run_id=run_id, token=run.token, node="a", state="lost",
                                  exit_code=None, signal=None, started_at=None,
                                  finished_at=T0 + 6, log_path=None, reason="fenced",
                                  not_started=True))
    assert again["retry_run_id"] is None


# -- audit ------------------------------------------------------------------------------
def test_audit_records_are_kept_in_order_paged_and_pruned_with_the_history():
    c = Cluster()
    for i, (uid, allowed) in enumerate([(0, True), (65534, False), (1000, True)]):
        assert c.apply(C.Audit(node="a", uid=uid, user=f"u{uid}", pid=100 + i,
                               command="pause", target="j", allowed=allowed, at=T0 + i,
                               detail="" if allowed else "permission denied"))["audit_id"]
    recs = Q.audit(c.sm.conn)
    assert [(r["uid"], r["pid"], r["allowed"]) for r in recs] == [
        (1000, 102, True), (65534, 101, False), (0, 100, True)]
    assert recs[1] == {"audit_id": 2, "at": "2027-01-15T08:00:01Z", "node": "a",
                       "uid": 65534, "user": "u65534", "pid": 101, "command": "pause",
                       "target": "j", "allowed": False, "detail": "permission denied"}
    assert [r["audit_id"] for r in Q.audit(c.sm.conn, limit=1, before=3)] == [2]
    before = c.sm.full_digest()
    c.apply(C.Prune(before=T0 + 1, at=T0 + 10))
    assert [r["audit_id"] for r in Q.audit(c.sm.conn)] == [3, 2]
    assert c.sm.full_digest() != before


def test_a_version_2_database_gains_the_audit_table(tmp_path):
    path = str(tmp_path / "state.db")
    sm = StateMachine(apsw.Connection(path))
    sm.conn.execute("DROP TABLE audit; UPDATE meta SET value=2 WHERE key='schema_version'")
    sm.conn.close()
    sm = StateMachine(apsw.Connection(path))
    assert list(sm.conn.execute("SELECT value FROM meta WHERE key='schema_version'")) == [
        (SCHEMA_VERSION,)]
    with sm.conn:
        sm.apply(1, C.Audit(node="a", uid=0, user="root", pid=1, command="reload", target="",
                            allowed=True, at=T0))
    assert Q.audit(sm.conn)[0]["command"] == "reload"


def test_removing_a_node_denies_its_id_and_certificate_and_adding_it_lifts_the_id(tmp_path):
    sm = StateMachine(apsw.Connection(str(tmp_path / "s.db")))
    with sm.conn:
        sm.apply(1, C.JoinToken(node="d", token_hash="ab" * 32, addr="h:1", at=T0))
        assert Q.join_token(sm.conn, "d")["hash"] == "ab" * 32
        sm.apply(2, C.RemoveNode(node="d", at=T0, serial="0x1234"))
    assert Q.denied(sm.conn) == {"node": {"d": "node d was removed from the cluster"},
                                 "serial": {"0x1234": "node d was removed from the cluster"}}
    assert Q.join_token(sm.conn, "d") is None
    before = sm.full_digest()
    with sm.conn:
        sm.apply(3, C.Deny(kind="node", value="d", reason="added again", at=T0, lift=True))
    assert Q.denied(sm.conn)["node"] == {} and "0x1234" in Q.denied(sm.conn)["serial"]
    assert sm.full_digest() != before
    with sm.conn, pytest.raises(Refused):
        sm.apply(4, C.Deny(kind="host", value="x", reason="?", at=T0))


def test_a_version_3_database_gains_the_deny_and_join_token_tables(tmp_path):
    path = str(tmp_path / "state.db")
    sm = StateMachine(apsw.Connection(path))
    sm.conn.execute("DROP TABLE denied; DROP TABLE join_tokens; "
                    "UPDATE meta SET value=3 WHERE key='schema_version'")
    sm.conn.close()
    sm = StateMachine(apsw.Connection(path))
    with sm.conn:
        sm.apply(1, C.Deny(kind="serial", value="0xff", reason="rotated", at=T0))
    assert Q.denied(sm.conn)["serial"] == {"0xff": "rotated"}


# -- claims: who starts a run is decided by the log ---------------------------------------
def test_a_claim_is_won_by_the_runs_node_with_its_token_and_again_when_retried():
    c = Cluster()
    c.put_on("a")
    r1 = c.fire(T0 + 1, node="a")["run_id"]
    r2 = c.fire(T0 + 2, node="b")["run_id"]
    res = c.apply(C.ClaimRuns(node="a", at=T0 + 0.9, claims=[
        [r1, c.run(r1).token], [r2, c.run(r2).token], [999, 1]]))
    assert res["won"] == [r1]
    assert res["lost"] == {str(r2): "moved to node b", "999": "no such run"}
    assert c.run(r1).claimed_at == T0 + 0.9 and c.run(r2).claimed_at is None
    # The same claim again (a retried proposal) is won again; the time stays.
    assert c.claim("a", r1, at=T0 + 5)["won"] == [r1]
    assert c.run(r1).claimed_at == T0 + 0.9
    c.start(r1, node="a")
    assert c.claim("a", r1)["won"] == [r1]  # claimed and running: still its own
    # A wrong token (an older placement) loses.
    res = c.apply(C.ClaimRuns(node="b", at=T0, claims=[[r2, c.run(r2).token - 1]]))
    assert res == {"won": [], "lost": {str(r2): "moved to node b"}}


def test_a_malformed_claim_or_move_is_refused_and_changes_nothing():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    before = c.sm.full_digest()
    for claims in ([], "x", [[rid]], [["1", 2]], [[True, 1]], [[rid, None]]):
        with pytest.raises(Refused):
            c.apply(C.ClaimRuns(node="a", at=T0, claims=claims))
    for moves in ([], [[rid, 1]], [[rid, "t", "b"]]):
        with pytest.raises(Refused):
            c.apply(C.ReplaceRuns(moves=moves, at=T0, reason="x"))
    assert c.run(rid).claimed_at is None and c.run(rid).node == "a"
    assert c.sm.full_digest() != before  # only the applied index moved
    assert Q.get_run(c.sm.conn, rid).state == "assigned"


def test_an_unclaimed_run_moves_and_the_old_claim_then_loses():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    old = c.run(rid)
    assert old.assigned_at is not None
    c.effects.clear()
    res = c.move(rid, "b", at=T0 + 1.3)
    assert res == {"moved": [rid], "kept": []}
    run = c.run(rid)
    assert (run.node, run.token, run.assigned_at, run.moved_from) == ("b", c.index,
                                                                      T0 + 1.3, "a")
    assert run.reason == "moved from a: not claimed" and run.attempt == 1
    assert [(e.kind, e.run.node) for e in c.effects] == [("moved", "a"), ("assign", "b")]
    assert c.apply(C.ClaimRuns(node="a", at=T0 + 1.4, claims=[[rid, old.token]]))[
        "won"] == []  # the move came first in the log: a does not start it
    assert c.claim("b", rid, at=T0 + 1.5)["won"] == [rid]
    # Claimed: it stays put, whoever asks.
    assert c.move(rid, "c")["moved"] == []
    assert c.run(rid).moved_from == "a"
    view = c.run(rid).view()
    assert view["moved_from"] == ["a"] and view["claimed_at"] is not None


def test_a_run_is_not_moved_claimed_stale_to_its_own_node_or_when_per_node():
    c = Cluster()
    c.put_on("a")
    claimed = c.fire(T0 + 1, node="a")["run_id"]
    c.claim("a", claimed)
    assert c.move(claimed, "b")["kept"] == [claimed]
    rid = c.fire(T0 + 2, node="a")["run_id"]
    assert c.move(rid, "b", token=c.run(rid).token - 1)["kept"] == [rid]  # stale
    assert c.move(rid, "a")["kept"] == [rid]                               # same node
    per_node = c.fire(T0 + 3, node="a", target="a")["run_id"]
    assert c.move(per_node, "b")["kept"] == [per_node]
    c.apply(C.CancelRun(run_id=rid, at=T0, reason="x"))
    assert c.move(rid, "b")["kept"] == [rid]                               # ended


def test_node_loss_reruns_what_its_node_never_claimed_whatever_the_policy():
    c = Cluster()
    c.put_on("a", on_node_loss="fail")
    unclaimed = c.fire(T0 + 1, node="a")["run_id"]
    claimed = c.fire(T0 + 2, node="a")["run_id"]
    c.claim("a", claimed)
    res = c.apply(C.NodeLost(node="a", at=T0 + 30, reason="node a is silent"))
    assert res["lost"] == [unclaimed, claimed] and len(res["retries"]) == 1
    assert c.run(unclaimed).reason == "node a is silent; it had not started (never claimed)"
    assert "not retried (on_node_loss: fail)" in c.run(claimed).reason
    (retry,) = Q.pending_runs(c.sm.conn)
    assert (retry.fire_time, retry.attempt) == (c.run(unclaimed).fire_time, 2)


def test_a_lost_attempts_late_word_is_written_into_its_record():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    c.claim("a", rid)
    c.start(rid, node="a")
    c.apply(C.NodeLost(node="a", at=T0 + 30, reason="node a is silent"))
    run = c.run(rid)
    c.apply(C.RunFinished(run_id=rid, token=run.token, node="a", state="succeeded",
                          exit_code=0, signal=None, started_at=T0 + 1, finished_at=T0 + 2,
                          log_path="/l", pid=7))
    after = c.run(rid)
    assert after.state == "lost" and after.exit_code == 0
    assert after.reason.endswith("node a reported later that it ran: succeeded (exit 0)")
    # The same report again (a forward retried after a timeout, the outbox
    # replayed at restart) does not repeat the note.
    c.apply(C.RunFinished(run_id=rid, token=run.token, node="a", state="succeeded",
                          exit_code=0, signal=None, started_at=T0 + 1, finished_at=T0 + 2,
                          log_path="/l", pid=7))
    assert c.run(rid).reason.count("reported later") == 1, c.run(rid).reason
    (retry,) = Q.pending_runs(c.sm.conn)  # attempt 2 stands (it may have run already)
    assert retry.attempt == 2


def test_a_not_started_report_for_a_run_moved_away_is_dropped():
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    old = c.run(rid)
    c.move(rid, "b")
    res = c.apply(C.RunFinished(run_id=rid, token=old.token, node="a", state="lost",
                                exit_code=None, signal=None, started_at=None,
                                finished_at=T0 + 2, log_path=None, not_started=True))
    assert res == {"state": "assigned", "late": True}
    assert c.run(rid).node == "b"
    assert list(c.sm.conn.execute("SELECT COUNT(*) FROM late_reports")) == [(0,)]


def test_a_version_4_database_gains_the_claim_columns_and_keeps_its_runs(tmp_path):
    path = str(tmp_path / "state.db")
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    c.sm.conn.execute(f"VACUUM INTO '{path}'")
    old = apsw.Connection(path)
    for column in ("assigned_at", "claimed_at", "moved_from"):
        old.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    old.execute("UPDATE meta SET value=4 WHERE key='schema_version'")
    old.close()
    sm = StateMachine(apsw.Connection(path))
    run = Q.get_run(sm.conn, rid)
    assert (run.state, run.node, run.claimed_at, run.assigned_at) == ("assigned", "a", None,
                                                                      None)
    assert sm._meta("schema_version") == SCHEMA_VERSION == 6
    sm.apply(sm.applied_index + 1, C.ClaimRuns(node="a", at=T0, claims=[[rid, run.token]]))
    assert Q.get_run(sm.conn, rid).claimed_at == T0


def test_a_run_handed_back_before_its_fire_time_is_retried_at_that_time_not_at_once():
    """Found by the fault suite (seed 516617770): a daemon stopping before
    the fire time hands its run back; attempt 2 started 0.6 s early, due
    when it was handed back."""
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 10, node="a", due_at=T0 + 10, at=T0 + 9.3)["run_id"]
    run = c.run(rid)
    res = c.apply(C.RunFinished(run_id=rid, token=run.token, node="a", state="lost",
                                exit_code=None, signal=None, started_at=None,
                                finished_at=T0 + 9.4, log_path=None, not_started=True,
                                reason="node a stopped before the run was due"))
    retry = c.run(res["retry_run_id"])
    assert (retry.attempt, retry.due_at) == (2, T0 + 10)
    # Lost after its time: the retry is due at once.
    rid2 = c.fire(T0 + 20, node="a")["run_id"]
    c.claim("a", rid2)
    (r2,) = c.apply(C.NodeLost(node="a", at=T0 + 25, reason="silent"))["retries"]
    assert c.run(r2).due_at == T0 + 25



def test_a_claim_without_a_time_is_refused_so_a_won_run_is_always_claimed():
    """A ClaimRuns from a peer whose ``at`` is not a number (null) was won
    but left claimed_at NULL: the leader could then move a run its node had
    been told it may start, and two nodes started it."""
    c = Cluster()
    c.put_on("a")
    rid = c.fire(T0 + 1, node="a")["run_id"]
    token = c.run(rid).token
    for at in (None, "soon", True, [1]):
        with pytest.raises(Refused):
            c.apply(C.ClaimRuns(node="a", at=at, claims=[[rid, token]]))
    assert c.run(rid).claimed_at is None
    assert c.claim("a", rid, at=T0 + 0.9)["won"] == [rid]
    assert c.move(rid, "b")["kept"] == [rid]


"""Identical job files on many nodes (issue 12): one node parses a big change,
the others copy its record instead of parsing and sending the same jobs.

The state machine side (a copy is the same change as the puts it stands
for; a record that changed is refused; a file whose jobs change loses its
record; claims) and the watcher side (a node copies, waits for another
node's claim, gives the leader a grace to claim first), against the real
state machine on the one-member log."""

from __future__ import annotations

import asyncio
import json

import apsw

from cronrd.runtime.jobfiles import watcher as W
from cronrd.runtime.log.local import LocalLog
from cronrd.state import commands as C
from cronrd.state.apply import apply_batch
from cronrd.state.machine import CLAIM_TTL, StateMachine

from .test_watcher import T0

DIGEST = "d" * 64


class Clock:
    def __init__(self):
        self.mono = 0.0

    def now(self):
        return T0 + self.mono

    def monotonic(self):
        return self.mono


class Proposer:
    """The one-member log, recording what is proposed; ``leader`` says
    whether this node leads (a follower's watcher behaves differently)."""

    def __init__(self, log, leader=True):
        self.log, self.sent, self.is_leader = log, [], leader

    def propose(self, cmd):
        self.sent.append(cmd)
        return self.log.propose(cmd)


def fleet(path, files: int, per: int, tag: str = "") -> None:
    path.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        body = "jobs:\n" + "".join(
            f"  - name: f{f}j{i:04d}\n    schedule: '{i % 60} * * * *'\n"
            f"    command: 'echo {tag}{i}'\n" for i in range(per))
        (path / f"fleet{f}.yaml").write_text(body)


def node(sm, jobs_dir, name, leader=True, clock=None):
    prop = Proposer(LocalLog(sm), leader)
    return prop, W.Watcher(str(jobs_dir), prop, sm.conn, clock or Clock(), node=name)


def run(coro):
    return asyncio.run(coro)


def rows(conn, sql, *args):
    return [tuple(r) for r in conn.execute(sql, args)]


def sources(conn, node):
    return rows(conn, "SELECT name, digest, source FROM job_sources WHERE node=? ORDER BY name",
                node)


def records(conn, node):
    return rows(conn, "SELECT path, digest, jobs FROM source_files WHERE node=? ORDER BY path",
                node)


# -- the state machine ---------------------------------------------------------------------

class Machine:
    def __init__(self):
        self.sm = StateMachine(apsw.Connection(":memory:"))
        self.index = 0

    def apply(self, cmd):
        self.index += 1
        results, effects = apply_batch(self.sm, [(self.index, cmd.encode())])
        result = results[self.index]
        if isinstance(result, BaseException):
            raise result
        return result, effects

    def table(self, sql):
        return rows(self.sm.conn, sql)


def put(name, text, path):
    import hashlib
    return [name, hashlib.sha256(text.encode()).hexdigest(), path, text]


def spec(name, minute):
    return json.dumps({"name": name, "schedule": f"{minute} * * * *", "command": "true"},
                      sort_keys=True, separators=(",", ":"))


def a_file(m: Machine, at: float = T0, path: str = "/a/jobs.yaml", n: int = 5):
    puts = [put(f"j{i}", spec(f"j{i}", i), path) for i in range(n)]
    m.apply(C.SyncJobs(node="a", at=at, puts=puts, files=[[path, DIGEST, n]]))
    return puts


def test_a_copy_is_the_same_change_as_the_puts_it_stands_for():
    by_puts, by_copy = Machine(), Machine()
    for m in (by_puts, by_copy):
        puts = a_file(m)
        # b defines one of them differently already: not the simple case
        m.apply(C.SyncJobs(node="b", at=T0 + 1, puts=[put("j3", spec("j3", 33), "/b/x.yaml")]))
    result_puts, eff_puts = by_puts.apply(C.SyncJobs(
        node="b", at=T0 + 2, puts=[[n, d, "/b/jobs.yaml", None] for n, d, _p, _t in puts],
        files=[["/b/jobs.yaml", DIGEST, 5]]))
    result_copy, eff_copy = by_copy.apply(C.SyncJobs(
        node="b", at=T0 + 2, copies=[["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, "j0", "j4"]],
        files=[["/b/jobs.yaml", DIGEST, 5]]))
    assert result_copy == result_puts
    assert sorted((e.kind, e.job) for e in eff_copy) == sorted((e.kind, e.job) for e in eff_puts)
    for table in ("jobs", "job_sources", "specs", "source_files"):
        assert by_copy.table(f"SELECT * FROM {table} ORDER BY 1, 2") == \
            by_puts.table(f"SELECT * FROM {table} ORDER BY 1, 2")


def test_the_common_copy_adds_sources_and_names_the_newest_file():
    m = Machine()
    a_file(m)
    result, effects = m.apply(C.SyncJobs(
        node="b", at=T0 + 1, copies=[["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, "j0", "j4"]],
        files=[["/b/jobs.yaml", DIGEST, 5]]))
    assert result == {"changed": 5, "created": 0, "removed": 0}
    assert [(n, src) for n, _d, src in sources(m.sm.conn, "b")] == \
        [(f"j{i}", "/b/jobs.yaml") for i in range(5)]
    assert m.table("SELECT DISTINCT source FROM jobs") == [("/b/jobs.yaml",)]
    assert {e.kind for e in effects} == {"job_source_moved"}  # nothing to schedule anew
    assert records(m.sm.conn, "b") == [("/b/jobs.yaml", DIGEST, 5)]
    # in parts: each names the first and last job it takes
    m2 = Machine()
    a_file(m2)
    for first, last in (("j0", "j1"), ("j2", "j4")):
        m2.apply(C.SyncJobs(node="b", at=T0 + 1, copies=[
            ["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, first, last]]))
    assert sources(m2.sm.conn, "b") == sources(m.sm.conn, "b")


def test_a_copy_whose_record_changed_or_went_is_refused_and_records_nothing():
    m = Machine()
    a_file(m)
    copy = ["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, "j0", "j4"]
    for bad in ([*copy[:1], "e" * 64, *copy[2:]],            # other bytes
                [*copy[:4], 6, *copy[5:]],                  # other count
                [*copy[:3], "/a/other.yaml", *copy[4:]],    # no such record
                [*copy[:2], "b", *copy[3:]]):               # its own
        result, _ = m.apply(C.SyncJobs(node="b", at=T0 + 1, copies=[bad],
                                       files=[["/b/jobs.yaml", DIGEST, 5]]))
        assert result["copy_refused"] == ["/b/jobs.yaml"]
        assert sources(m.sm.conn, "b") == [] and records(m.sm.conn, "b") == []


def test_a_file_whose_jobs_change_loses_its_record_so_no_one_copies_half_of_a_change():
    """A node's look sends a changed file's jobs over several commands and
    records the file last. In between, the old record named the old bytes
    while some jobs were new already: a copy then took a mix of both."""
    m = Machine()
    puts = a_file(m)
    # a's file changed: its first command (of two) carries j0 only
    m.apply(C.SyncJobs(node="a", at=T0 + 5, puts=[put("j0", spec("j0", 59), "/a/jobs.yaml")]))
    assert records(m.sm.conn, "a") == []
    result, _ = m.apply(C.SyncJobs(node="b", at=T0 + 6, copies=[
        ["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, "j0", "j4"]]))
    assert result["copy_refused"] == ["/b/jobs.yaml"] and sources(m.sm.conn, "b") == []
    # a job moved to another of a's files, or removed: that file's record goes too
    m2 = Machine()
    a_file(m2)
    m2.apply(C.SyncJobs(node="a", at=T0 + 1, puts=[[*puts[1][:2], "/a/other.yaml", None]]))
    assert records(m2.sm.conn, "a") == []
    m3 = Machine()
    a_file(m3)
    m3.apply(C.SyncJobs(node="a", at=T0 + 1, removes=["j2"]))
    assert records(m3.sm.conn, "a") == []
    # unchanged puts and the command that records the file keep it
    m4 = Machine()
    a_file(m4)
    m4.apply(C.SyncJobs(node="a", at=T0 + 1, puts=[puts[0]], files=[]))
    assert records(m4.sm.conn, "a") == [("/a/jobs.yaml", DIGEST, 5)]


def test_the_first_claim_holds_until_released_or_stale():
    m = Machine()
    result, _ = m.apply(C.SyncJobs(node="a", at=T0, claims=[[DIGEST, "/a/jobs.yaml"]]))
    assert "claimed_by" not in result
    result, _ = m.apply(C.SyncJobs(node="b", at=T0 + 1, claims=[[DIGEST, "/b/jobs.yaml"]]))
    assert result["claimed_by"] == {DIGEST: "a"}
    m.apply(C.SyncJobs(node="a", at=T0 + 2, release=True))
    result, _ = m.apply(C.SyncJobs(node="b", at=T0 + 3, claims=[[DIGEST, "/b/jobs.yaml"]]))
    assert "claimed_by" not in result
    assert m.table("SELECT digest, node FROM file_claims") == [(DIGEST, "b")]
    # a node that claimed and went silent holds others back CLAIM_TTL at most
    result, _ = m.apply(C.SyncJobs(node="c", at=T0 + 3 + CLAIM_TTL + 1,
                                   claims=[[DIGEST, "/c/jobs.yaml"]]))
    assert "claimed_by" not in result
    # a node lost or removed claims nothing any more
    m.apply(C.NodeLost(node="c", at=T0 + 100, reason="test"))
    assert m.table("SELECT * FROM file_claims") == []


# -- the watcher -----------------------------------------------------------------------------

def test_a_node_copies_the_files_another_node_loaded_instead_of_parsing_them(tmp_path):
    sm = StateMachine(apsw.Connection(":memory:"))
    fleet(tmp_path / "a", files=3, per=1500)
    fleet(tmp_path / "b", files=3, per=1500)
    _, wa = node(sm, tmp_path / "a", "a")
    assert run(wa.reload())["files_parsed"] == 3
    prop, wb = node(sm, tmp_path / "b", "b", leader=False)
    res = run(wb.reload())
    assert (res["files_parsed"], res["files_copied"], res["jobs"]) == (0, 3, 4500)
    assert not any(c.puts for c in prop.sent)
    # in parts: at most MAX_PUTS jobs a command
    names = [n for n, *_ in sources(sm.conn, "a")]
    weights = [sum(sum(1 for n in names if c[5] <= n <= c[6]) for c in cmd.copies)
               for cmd in prop.sent]
    assert sum(weights) == 4500 and max(weights) <= W.MAX_PUTS
    want = [(n, d, src.replace("/a/", "/b/")) for n, d, src in sources(sm.conn, "a")]
    assert sources(sm.conn, "b") == want
    assert [r[1:] for r in records(sm.conn, "b")] == [r[1:] for r in records(sm.conn, "a")]
    # and a restart of b finds its own records: nothing parsed, nothing copied
    _, wb2 = node(sm, tmp_path / "b", "b", leader=False)
    res = run(wb2.reload())
    assert (res["files_parsed"], res.get("files_copied", 0), res["files_unchanged"]) == (0, 0, 3)


def test_a_file_differing_in_one_byte_is_parsed_not_copied(tmp_path):
    sm = StateMachine(apsw.Connection(":memory:"))
    fleet(tmp_path / "a", files=2, per=10)
    fleet(tmp_path / "b", files=2, per=10)
    with open(tmp_path / "b" / "fleet1.yaml", "a") as f:
        f.write("# b's\n")
    run(node(sm, tmp_path / "a", "a")[1].reload())
    res = run(node(sm, tmp_path / "b", "b")[1].reload())
    assert (res["files_parsed"], res["files_copied"]) == (1, 1)


def test_a_node_waits_for_another_nodes_claim_and_removes_nothing_meanwhile(tmp_path):
    sm = StateMachine(apsw.Connection(":memory:"))
    fleet(tmp_path / "b", files=1, per=2, tag="old")
    (tmp_path / "b" / "zzz.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    prop, wb = node(sm, tmp_path / "b", "b")
    run(wb.reload())
    assert [n for n, *_ in sources(sm.conn, "b")] == ["f0j0000", "f0j0001", "zzz"]
    # a big change to fleet0.yaml, which a (with the same bytes) claimed
    fleet(tmp_path / "b", files=1, per=3000)
    fleet(tmp_path / "a", files=1, per=3000)
    digest = W.scan_job_file(str(tmp_path / "b" / "fleet0.yaml"), None, parse=False).digest
    run(_propose(sm, C.SyncJobs(node="a", at=T0, claims=[[digest, "/a/fleet0.yaml"]])))
    prop.sent.clear()
    res = run(wb.reload())
    assert res["waiting"] == str(tmp_path / "b" / "fleet0.yaml") and res["again"]
    assert prop.sent == [] or not any(c.puts or c.removes or c.copies for c in prop.sent)
    # zzz (after the file it waits at) is not removed, nor are fleet0's old jobs
    assert [n for n, *_ in sources(sm.conn, "b")] == ["f0j0000", "f0j0001", "zzz"]
    # a loads it (its look claims, parses and releases): b copies it
    run(node(sm, tmp_path / "a", "a")[1].reload())
    assert rows(sm.conn, "SELECT * FROM file_claims") == []
    res = run(wb.reload())
    assert (res["files_copied"], res["jobs"], res.get("waiting")) == (1, 3001, None)
    assert len(sources(sm.conn, "b")) == 3001


def test_a_follower_leaves_the_leader_a_grace_to_claim_a_big_change_first(tmp_path):
    sm = StateMachine(apsw.Connection(":memory:"))
    fleet(tmp_path / "b", files=2, per=3000)
    clock = Clock()
    prop, wb = node(sm, tmp_path / "b", "b", leader=False, clock=clock)
    res = run(wb.reload())
    assert res["waiting"] == str(tmp_path / "b" / "fleet0.yaml") and prop.sent == []
    clock.mono += W.CLAIM_GRACE / 2
    assert run(wb.reload())["waiting"] and prop.sent == []
    # nobody claimed it: the follower claims it and loads it itself, with
    # the definitions (nobody else has them)
    clock.mono += W.CLAIM_GRACE
    res = run(wb.reload())
    assert "waiting" not in res and res["jobs"] == 6000 and res["files_parsed"] == 2
    assert prop.sent[0].claims and all(p[3] for c in prop.sent for p in c.puts)
    assert rows(sm.conn, "SELECT * FROM file_claims") == []


async def _propose(sm, cmd):
    return await LocalLog(sm).propose(cmd)


def test_a_look_with_changes_reads_nothing_while_a_new_leaders_clock_is_unmeasured(tmp_path):
    """A leader elected a moment ago held back the new jobs of the files it
    read meanwhile, and read those files again at its next look (10,000
    jobs of a load parsed twice): for HOLD_PATIENCE it reads nothing."""
    sm = StateMachine(apsw.Connection(":memory:"))
    fleet(tmp_path / "a", files=2, per=3)
    clock, why = Clock(), {"v": "has not measured its clock against the cluster's yet"}
    prop = Proposer(LocalLog(sm))
    w = W.Watcher(str(tmp_path / "a"), prop, sm.conn, clock, node="a", hold=lambda: why["v"])
    res = run(w.reload())
    assert res["held"] == why["v"] and res["again"] and res["files_parsed"] == 0
    assert prop.sent == [] and sources(sm.conn, "a") == []
    clock.mono += W.HOLD_PATIENCE  # held this long: read, the new jobs held back as before
    res = run(w.reload())
    assert res["files_parsed"] == 2 and res["held"] and sources(sm.conn, "a") == []
    why["v"] = None
    res = run(w.reload())
    assert "held" not in res and len(sources(sm.conn, "a")) == 6
    # a look without changes is not held at all
    assert "held" not in run(w.reload()) and w._held_since is None


def test_a_malformed_copy_or_claim_from_a_peer_is_refused_and_changes_nothing():
    import pytest
    from cronrd.errors import Refused
    m = Machine()
    a_file(m)
    before = {t: m.table(f"SELECT * FROM {t} ORDER BY 1, 2")
              for t in ("jobs", "job_sources", "source_files", "file_claims")}
    good = ["/b/jobs.yaml", DIGEST, "a", "/a/jobs.yaml", 5, "j0", "j4"]
    for bad in (dict(copies=[good[:5]]),                       # no part
                dict(copies=[[*good[:4], True, *good[5:]]]),    # count not an int
                dict(copies=[[*good[:5], "j4", "j0"]]),         # part backwards
                dict(copies=[[*good[:1], "short", *good[2:]]]),  # not a digest
                dict(copies="all"), dict(claims=[[DIGEST]]), dict(claims=[["x", "/p"]]),
                dict(claims=[[DIGEST, ""]]), dict(release="yes")):
        with pytest.raises(Refused):
            m.apply(C.SyncJobs(node="b", at=T0 + 1, **bad))
    assert {t: m.table(f"SELECT * FROM {t} ORDER BY 1, 2") for t in before} == before

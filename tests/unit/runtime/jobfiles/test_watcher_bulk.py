"""Loading job files in bulk (issue 12): SyncJobs commands, definitions kept
once, files not parsed again when their bytes did not change, a job moved
between files kept (not removed and created again), and the paged reads.
Against the real state machine on the one-member log."""

from __future__ import annotations

import asyncio
import hashlib
import json

import apsw
import pytest

from cronrd.errors import RequestError
from cronrd.runtime.jobfiles import watcher as W
from cronrd.runtime.log.local import LocalLog
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.state.forwarded import check_forwarded
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine

from .test_watcher import T0, Clock


class Counting:
    def __init__(self, log):
        self.log, self.sent = log, []

    def propose(self, cmd):
        self.sent.append(cmd)
        return self.log.propose(cmd)


def fleet(path, files: int, per: int, command: str = "true") -> None:
    for f in range(files):
        body = "jobs:\n" + "".join(
            f"  - name: f{f}j{i:04d}\n    schedule: '{i % 60} * * * *'\n    command: '{command}'\n"
            for i in range(per))
        (path / f"fleet{f}.yaml").write_text(body)


def setup(tmp_path, node="n1", sm=None):
    sm = sm or StateMachine(apsw.Connection(":memory:"))
    prop = Counting(LocalLog(sm))
    return sm, prop, W.Watcher(str(tmp_path), prop, sm.conn, Clock(), node=node)


def run(coro):
    return asyncio.run(coro)


def test_thousands_of_jobs_are_a_handful_of_commands_and_unchanged_files_are_not_parsed(tmp_path):
    fleet(tmp_path, files=3, per=1500)
    sm, prop, w = setup(tmp_path)
    res = run(w.reload())
    assert res["jobs"] == 4500 and len(Q.job_names(sm.conn)) == 4500
    assert all(isinstance(c, C.SyncJobs) for c in prop.sent)
    # bounded by jobs and by bytes (a Raft entry): ~500 such jobs a command,
    # after one that claims the files (a big load: another node with the
    # same bytes waits for this one's records and copies them)
    claim, *sent = prop.sent
    assert [c[1] for c in claim.claims] == [str(tmp_path / f"fleet{f}.yaml") for f in range(3)]
    assert (claim.puts, claim.copies, claim.release) == ([], [], False)
    assert len(sent) <= 12 and sent[-1].release and not any(c.release for c in sent[:-1])
    assert sm.conn.execute("SELECT count(*) FROM file_claims").fetchone()[0] == 0
    assert all(len(c.puts) <= W.MAX_PUTS and len(c.encode()) <= 1.5 * W.MAX_BYTES
               for c in prop.sent)
    # A restarted daemon (a new watcher on the same state) reads the bytes,
    # finds their digests in the state and parses nothing.
    sm2, prop2, w2 = setup(tmp_path, sm=sm)
    res = run(w2.reload())
    assert (res["files_parsed"], res["files_unchanged"], res["jobs"]) == (0, 3, 4500)
    assert prop2.sent == []
    # One job changed: that file is parsed and only that job proposed.
    text = (tmp_path / "fleet1.yaml").read_text().replace(
        "name: f1j0007\n    schedule: '7 * * * *'", "name: f1j0007\n    schedule: '8 * * * *'")
    (tmp_path / "fleet1.yaml").write_text(text)
    res = run(w2.reload())
    assert (res["files_parsed"], res["changes"]) == (1, 1)
    cmd, record = prop2.sent  # the job, then the file's new digest
    assert [p[0] for p in cmd.puts] == ["f1j0007"] and cmd.removes == []
    assert [f[0] for f in record.files] == [str(tmp_path / "fleet1.yaml")] and not record.puts
    assert Q.job_spec(sm.conn, "f1j0007").schedule == "8 * * * *"


def test_a_definition_is_stored_once_however_many_nodes_have_it(tmp_path):
    fleet(tmp_path, files=1, per=50)
    sm, prop, w = setup(tmp_path, node="a")
    run(w.reload())
    _, prop_b, w_b = setup(tmp_path, node="b", sm=sm)
    run(w_b.reload())
    # b's identical definitions travel as digests only, and are stored once.
    assert all(p[3] is None for c in prop_b.sent for p in c.puts)
    (specs,) = next(iter(sm.conn.execute("SELECT COUNT(*) FROM specs")))
    (sources,) = next(iter(sm.conn.execute("SELECT COUNT(*) FROM job_sources")))
    assert (specs, sources) == (50, 100)
    assert Q.conflicts(sm.conn) == []
    # a's file goes: its sources go, the jobs stay (b has them), no definition lost.
    (tmp_path / "fleet0.yaml").unlink()
    run(w.reload())
    assert len(Q.job_names(sm.conn)) == 50
    assert Q.job_spec(sm.conn, "f0j0003").schedule == "3 * * * *"


def test_a_job_moved_to_another_file_keeps_its_history(tmp_path):
    (tmp_path / "a.yaml").write_text("jobs:\n  - name: x\n    schedule: '@daily'\n"
                                     "    command: 'true'\n")
    sm, prop, w = setup(tmp_path)
    run(w.reload())
    created = list(sm.conn.execute("SELECT created_at, cursor FROM jobs WHERE name='x'"))
    (tmp_path / "a.yaml").unlink()
    (tmp_path / "z.yaml").write_text("jobs:\n  - name: x\n    schedule: '@daily'\n"
                                     "    command: 'true'\n")
    res = run(w.reload())
    assert res["changes"] == 1 and prop.sent[-1].removes == []  # moved, not removed
    assert list(sm.conn.execute("SELECT created_at, cursor FROM jobs WHERE name='x'")) == created
    assert Q.jobs(sm.conn, name="x")[0]["source"] == str(tmp_path / "z.yaml")


def test_a_name_taken_by_an_earlier_file_is_a_problem_of_the_unchanged_later_file(tmp_path):
    (tmp_path / "b.yaml").write_text("jobs:\n  - name: x\n    schedule: '@daily'\n"
                                     "    command: 'b'\n")
    sm, prop, w = setup(tmp_path)
    run(w.reload())
    (tmp_path / "a.yaml").write_text("jobs:\n  - name: x\n    schedule: '@hourly'\n"
                                     "    command: 'a'\n")
    res = run(w.reload())
    assert res["problems"] == [f"{tmp_path}/b.yaml:2:11: duplicate job name 'x': already "
                               f"defined at {tmp_path}/a.yaml:2; rename one of them"]
    assert Q.job_spec(sm.conn, "x").command == "a"  # the first file (by name) wins
    # the file with the problem is not remembered as synced: it is read again
    assert [p for (p,) in sm.conn.execute("SELECT path FROM source_files")] == [
        str(tmp_path / "a.yaml")]


def test_a_file_that_goes_bad_keeps_its_jobs_and_is_read_again(tmp_path):
    fleet(tmp_path, files=1, per=3)
    sm, prop, w = setup(tmp_path)
    run(w.reload())
    (tmp_path / "fleet0.yaml").write_text("jobs: [\n")
    res = run(w.reload())
    assert len(res["kept"]) == 3 and len(Q.job_names(sm.conn)) == 3
    assert list(sm.conn.execute("SELECT path FROM source_files")) == []


def sync(sm, index, **kw):
    cmd = C.SyncJobs(node=kw.pop("node", "n1"), at=T0, **kw)
    with sm.conn:
        return sm.apply(index, cmd)[0]


def canon(name, schedule="@daily"):
    from cronrd.jobspec import JobSpec
    return JobSpec(name=name, schedule=schedule, command="true").canonical()


def test_sync_jobs_checks_digests_and_asks_again_for_a_definition_it_lacks():
    sm = StateMachine(apsw.Connection(":memory:"))
    text, digest = canon("a")
    with pytest.raises(Refused, match="not the sha256"):
        sync(sm, 1, puts=[["a", "0" * 64, "/f.yaml", text]])
    res = sync(sm, 2, puts=[["a", digest, "/f.yaml", None]], files=[["/f.yaml", "d", 1]])
    assert res["need_spec"] == ["a"] and Q.job_names(sm.conn) == []
    assert list(sm.conn.execute("SELECT * FROM source_files")) == []  # not complete: not recorded
    res = sync(sm, 3, puts=[["a", digest, "/f.yaml", text]], files=[["/f.yaml", "d", 1]])
    assert res["created"] == 1 and "need_spec" not in res
    with pytest.raises(Refused, match="named twice"):
        sync(sm, 4, puts=[["b", digest, "/f.yaml", None]], removes=["b"])
    assert sm.full_digest()  # the specs and source_files tables are part of it


def test_another_node_with_the_same_job_under_another_path_does_not_reschedule_it():
    """Nodes that keep the same jobs under different paths: the newest
    source names the job's file (job_source_moved: the executor's cached
    spec goes), but nothing changed for the scheduler (jobs_changed made
    the leader rebuild every job's trigger once per node: seconds at
    100,000 jobs, bench/scale.py --cluster)."""
    sm = StateMachine(apsw.Connection(":memory:"))
    text, digest = canon("a")
    effects = []
    cmd = C.SyncJobs(node="n1", at=T0, puts=[["a", digest, "/etc/n1/f.yaml", text]])
    with sm.conn:
        effects += sm.apply(1, cmd)[1]
    assert [(e.kind, e.job) for e in effects] == [("jobs_changed", "a")]
    cmd = C.SyncJobs(node="n2", at=T0 + 1, puts=[["a", digest, "/etc/n2/f.yaml", None]])
    with sm.conn:
        res, more = sm.apply(2, cmd)
    assert [(e.kind, e.job) for e in more] == [("job_source_moved", "a")]
    assert Q.job_spec(sm.conn, "a").source == "/etc/n2/f.yaml"
    cmd = C.SyncJobs(node="n3", at=T0 + 2, puts=[["a", digest, "/etc/n2/f.yaml", None]])
    with sm.conn:
        assert sm.apply(3, cmd)[1] == []  # the same path: nothing at all


def test_a_forwarded_sync_is_checked_like_a_job_file_and_known_definitions_are_not_resent():
    text, digest = canon("a")
    cmd = C.SyncJobs(node="b", at=T0, puts=[["a", digest, "/f.yaml", text]])
    with pytest.raises(Exception, match="speaks only for itself"):
        check_forwarded(cmd, "c")
    assert check_forwarded(cmd, "b").puts == [["a", digest, "/f.yaml", text]]
    known = check_forwarded(cmd, "b", known=lambda name, d: (name, d) == ("a", digest))
    assert known.puts == [["a", digest, "/f.yaml", None]]
    # a definition the validators refuse, or one whose text is not canonical
    bad = json.loads(text)
    bad["schedule"] = "61 * * * *"
    bad_text = json.dumps(bad, sort_keys=True, separators=(",", ":"))
    bad_digest = hashlib.sha256(bad_text.encode()).hexdigest()
    with pytest.raises(RequestError, match="validators"):
        check_forwarded(C.SyncJobs(node="b", at=T0, puts=[["a", bad_digest, "/f", bad_text]]),
                        "b")
    spaced = json.dumps(json.loads(text), sort_keys=True)
    with pytest.raises(RequestError, match="canonical"):
        check_forwarded(C.SyncJobs(node="b", at=T0, puts=[
            ["a", hashlib.sha256(spaced.encode()).hexdigest(), "/f", spaced]]), "b")


def test_jobs_are_read_a_page_at_a_time(tmp_path):
    fleet(tmp_path, files=1, per=25)
    sm, prop, w = setup(tmp_path)
    run(w.reload())
    seen, after = [], None
    while True:
        page = Q.jobs(sm.conn, after=after, limit=10)
        seen += [j["name"] for j in page]
        if len(page) < 10:
            break
        after = page[-1]["name"]
    assert seen == sorted(Q.job_names(sm.conn)) and len(seen) == 25
    assert all(j["sources"] == [{"node": "n1", "digest": j["digest"],
                                 "source": str(tmp_path / "fleet0.yaml")}]
               for j in Q.jobs(sm.conn, after="f0j0010", limit=3))
    assert [j["name"] for j in Q.jobs(sm.conn, glob="f0j000[1-3]")] == [
        "f0j0001", "f0j0002", "f0j0003"]
    assert Q.count_jobs(sm.conn) == (25, 0)


def test_a_version_5_database_keeps_its_definitions_once(tmp_path):
    text, digest = canon("a")
    sm = StateMachine(apsw.Connection(":memory:"))
    sync(sm, 1, puts=[["a", digest, "/f.yaml", text]])
    sync(sm, 2, node="n2", puts=[["a", digest, "/g.yaml", None]])
    path = str(tmp_path / "v5.db")
    sm.conn.execute(f"VACUUM INTO '{path}'")
    old = apsw.Connection(path)  # the version 5 shape: a spec column in both tables
    old.execute("""
        ALTER TABLE jobs ADD COLUMN spec TEXT;
        UPDATE jobs SET spec = (SELECT spec FROM specs WHERE specs.name = jobs.name);
        CREATE TABLE js(name TEXT NOT NULL, node TEXT NOT NULL, spec TEXT NOT NULL,
            digest TEXT NOT NULL, source TEXT NOT NULL, updated_at REAL NOT NULL,
            PRIMARY KEY(name, node));
        INSERT INTO js SELECT name, node, (SELECT spec FROM specs s WHERE s.name = j.name),
            digest, source, updated_at FROM job_sources j;
        DROP TABLE job_sources; ALTER TABLE js RENAME TO job_sources;
        DROP TABLE specs; DROP TABLE source_files;
        UPDATE meta SET value = 5 WHERE key = 'schema_version';""")
    old.close()
    up = StateMachine(apsw.Connection(path))
    assert up._meta("schema_version") == 6
    assert list(up.conn.execute("SELECT name, digest, spec FROM specs")) == [("a", digest, text)]
    assert "spec" not in {r[1] for r in up.conn.execute("PRAGMA table_info(jobs)")}
    assert Q.job_spec(up.conn, "a").schedule == "@daily"
    assert [s["node"] for s in Q.jobs(up.conn)[0]["sources"]] == ["n1", "n2"]


def test_a_listing_reads_the_same_fields_as_the_whole_definition():
    from cronrd.jobspec import JobSpec
    sm = StateMachine(apsw.Connection(":memory:"))
    specs = [JobSpec(name="a", schedule="@daily", command="true"),
             JobSpec(name="b", schedule="5 4 * * *", command=("x", "y z"), enabled=False,
                     description="d\u00e9j\u00e0", timezone="Europe/Berlin")]
    for i, job in enumerate(specs):
        text, digest = job.canonical()
        sync(sm, i + 1, puts=[[job.name, digest, "/f.yaml", text]])
    # an older version's definition, without the keys added since
    with sm.conn:
        sm.conn.execute("UPDATE specs SET spec=? WHERE name='a'",
                        (json.dumps({"name": "a", "schedule": "@daily", "command": "true"}),))
    for listed, whole in zip(Q.jobs(sm.conn, as_dicts=True), Q.jobs(sm.conn)):
        full = whole["spec"].to_dict()
        assert listed["spec"] == {k: full.get(k) for k, _ in Q.VIEW_KEYS}  # (watch, calendar: when set)


def test_bulk_commands_leave_the_state_one_job_at_a_time_would():
    """SyncJobs' fast paths (new jobs, another node's identical definition)
    against PutJob/RemoveJob applied one by one, over random changes of three
    nodes' files: the same jobs, sources and definitions."""
    import random
    from cronrd.jobspec import JobSpec
    rng = random.Random(7)
    bulk = StateMachine(apsw.Connection(":memory:"))
    single = StateMachine(apsw.Connection(":memory:"))
    have = {n: {} for n in ("a", "b", "c")}
    bi = si = 0
    for step in range(80):  # two steps share each time: ties of updated_at too
        node = rng.choice("abc")
        puts, removes, singles = [], [], []
        for name in rng.sample([f"j{i}" for i in range(12)], rng.randint(1, 6)):
            if name in have[node] and rng.random() < 0.3:
                removes.append(name)
                singles.append(C.RemoveJob(name=name, at=T0 + step // 2, node=node))
                del have[node][name]
                continue
            job = JobSpec(name=name, schedule=rng.choice(["@daily", "@hourly"]),
                          command="true")
            text, digest = job.canonical()
            source = rng.choice(["/x.yaml", "/y.yaml", "/z.yaml"])
            if have[node].get(name) == (digest, source):
                continue
            have[node][name] = (digest, source)
            puts.append([name, digest, source, text])
            singles.append(C.PutJob(name=name, spec=json.loads(text), digest=digest,
                                    source=source, at=T0 + step // 2, node=node))
        bi += 1
        with bulk.conn:
            bulk.apply(bi, C.SyncJobs(node=node, at=T0 + step // 2, puts=puts, removes=removes))
        for cmd in singles:
            si += 1
            with single.conn:
                single.apply(si, cmd)
    for table in ("jobs", "job_sources", "specs"):
        rows = [list(sm.conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3"))
                for sm in (bulk, single)]
        if table == "specs":
            rows = [[r[1:] for r in t] for t in rows]  # rowids differ
        assert rows[0] == rows[1], table
    assert Q.conflicts(bulk.conn) == Q.conflicts(single.conn)


def test_listing_text_from_sqlite_matches_the_dict_views():
    """`jobs --json`'s JSON built by SQLite against the views built in Python
    (handlers._job_view, without next_fire and last_run), old definitions
    and conflicts included."""
    from cronrd.jobspec import JobSpec
    from cronrd.schedule import iso_utc
    sm = StateMachine(apsw.Connection(":memory:"))
    a = JobSpec(name="a", schedule="@daily", command="true")
    b = JobSpec(name="b", schedule="5 4 * * *", command=("x", "y z"), enabled=False,
                description="d\u00e9j\u00e0 \"q\"", timezone="Europe/Berlin")
    b2 = JobSpec(name="b", schedule="6 4 * * *", command="other")
    for i, (job, node) in enumerate([(a, "n1"), (b, "n1"), (b2, "n2")]):
        text, digest = job.canonical()
        sync(sm, i + 1, node=node, puts=[[job.name, digest, f"/{node}/f.yaml", text]])
    with sm.conn:  # an older version's definition, without the keys added since
        sm.conn.execute("UPDATE specs SET spec=? WHERE name='a'",
                        (json.dumps({"name": "a", "schedule": "@daily", "command": "true"}),))
        sm.conn.execute("UPDATE jobs SET paused=1 WHERE name='a'")
    texts = Q.job_view_texts(sm.conn, "UTC")
    for (name, text, *_), job in zip(texts, Q.jobs(sm.conn, as_dicts=True), strict=True):
        d = job["spec"]
        want = {"name": job["name"], "schedule": d["schedule"],
                "timezone": d["timezone"] or "UTC", "command": d["command"],
                "enabled": d["enabled"], "paused": job["paused"],
                "description": d["description"], "source": job["source"],
                "conflict": job["conflict"], "sources": job["sources"],
                "last_fire": iso_utc(job["cursor"]) if job["cursor"] else None,
                "concurrency": d["concurrency"], "catchup": d["catchup"],
                "run_on": d["run_on"], "digest": job["digest"],
                "watch": d.get("watch") is not None}
        assert json.loads(text) == want
    assert json.loads(texts[1][1])["conflict"]  # b is defined differently by n1 and n2
    assert [t[0] for t in Q.job_view_texts(sm.conn, "UTC", after="a", glob="b*")] == ["b"]


def test_a_follower_asks_by_digest_first_and_sends_what_the_state_lacks_next(tmp_path):
    fleet(tmp_path, files=1, per=4)
    sm = StateMachine(apsw.Connection(":memory:"))

    class Follower(Counting):
        is_leader = False

    prop = Follower(LocalLog(sm))
    w = W.Watcher(str(tmp_path), prop, sm.conn, Clock(), node="b")
    res = run(w.reload())
    # Nobody had these definitions: all asked by digest, all wanted, looked at again.
    assert res.get("again") and [p[3] for p in prop.sent[0].puts] == [None] * 4
    assert Q.job_names(sm.conn) == []
    res = run(w.reload())
    assert not res.get("again") and all(p[3] for p in prop.sent[1].puts)
    assert len(Q.job_names(sm.conn)) == 4
    # A definition another node committed first is never sent as text (its
    # file differs from this node's in a comment: parsed, asked by digest).
    a_dir = tmp_path / "a"
    a_dir.mkdir()
    (a_dir / "more.yaml").write_text("# a's\nschedule: '@daily'\ncommand: 'true'\n")
    (tmp_path / "more.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    _, _, w_a = setup(a_dir, node="a", sm=sm)
    run(w_a.reload())
    prop.sent.clear()
    res = run(w.reload())
    assert [(p[0], p[3]) for c in prop.sent for p in c.puts] == [("more", None)]
    assert res["files_parsed"] == 1 and "files_copied" not in res


# -- found by review (each failed before its fix) ------------------------------------------
from cronrd.errors import NotLeader  # noqa: E402


class FailFirst:
    """A proposer whose first SyncJobs is lost (no leader for a moment)."""
    def __init__(self, log):
        self.log, self.sent, self.failed = log, [], False

    def propose(self, cmd):
        self.sent.append(cmd)
        if not self.failed:
            self.failed = True
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(NotLeader("no leader"))
            return fut
        return self.log.propose(cmd)


def test_file_record_not_written_when_an_earlier_command_of_the_file_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "MAX_PUTS", 10)
    fleet(tmp_path, files=1, per=15)
    sm = StateMachine(apsw.Connection(":memory:"))
    prop = FailFirst(LocalLog(sm))
    w = W.Watcher(str(tmp_path), prop, sm.conn, Clock(), node="n1")
    res = run(w.reload())
    assert res.get("again")
    run(w.reload())   # the next look must finish the job
    assert len(Q.job_names(sm.conn)) == 15


def test_a_removed_node_that_comes_back_gets_its_jobs_again(tmp_path):
    fleet(tmp_path, files=1, per=3)
    sm, prop, w = setup(tmp_path, node="n3")
    run(w.reload())
    assert len(Q.job_names(sm.conn)) == 3
    # `cluster remove n3` (RemoveNode forgets its job files)...
    run(_propose(sm, C.RemoveNode(node="n3", at=2e9, deny=False)))
    assert Q.job_names(sm.conn) == []
    # ... and n3 joins again with the same files: its jobs must come back
    sm, prop, w = setup(tmp_path, node="n3", sm=sm)
    run(w.reload())
    assert len(Q.job_names(sm.conn)) == 3


def test_remove_node_forgets_the_definitions_only_it_had(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fleet(tmp_path / "a", files=1, per=3)
    fleet(tmp_path / "b", files=1, per=3, command="false")   # n3 disagrees
    sm, _, wa = setup(tmp_path / "a", node="n1")
    run(wa.reload())
    _, _, wb = setup(tmp_path / "b", node="n3", sm=sm)
    run(wb.reload())
    assert list(sm.conn.execute("SELECT COUNT(*) FROM specs")) == [(6,)]
    run(_propose(sm, C.RemoveNode(node="n3", at=2e9, deny=False)))
    # n3's definitions are referred to by nothing now
    assert list(sm.conn.execute("SELECT COUNT(*) FROM specs")) == [(3,)]


async def _propose(sm, cmd):
    return await LocalLog(sm).propose(cmd)


class FailNth:
    def __init__(self, log, n):
        self.log, self.sent, self.n = log, [], n

    def propose(self, cmd):
        self.sent.append(cmd)
        if len(self.sent) == self.n:
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(NotLeader("no leader"))
            return fut
        return self.log.propose(cmd)


def job(name, cmd="true"):
    return f"  - name: {name}\n    schedule: '@daily'\n    command: '{cmd}'\n"


def test_a_job_moved_to_a_later_file_when_the_move_fails_once(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text("jobs:\n" + job("x") + job("a1"))
    (tmp_path / "b.yaml").write_text("jobs:\n" + job("b1"))
    sm = StateMachine(apsw.Connection(":memory:"))
    prop = FailNth(LocalLog(sm), 0)
    w = W.Watcher(str(tmp_path), prop, sm.conn, Clock(), node="n1")
    run(w.reload())
    monkeypatch.setattr(W, "MAX_PUTS", 1)
    # x moves from a.yaml to b.yaml; a.yaml gains a2
    (tmp_path / "a.yaml").write_text("jobs:\n" + job("a1") + job("a2"))
    (tmp_path / "b.yaml").write_text("jobs:\n" + job("b1") + job("x"))
    prop.n = len(prop.sent) + 2       # the command with x's put is lost once
    run(w.reload())
    res = run(w.reload())
    res = run(w.reload())
    assert res["problems"] == []      # no duplicate x reported in b.yaml
    assert Q.jobs(sm.conn, name="x")[0]["source"] == str(tmp_path / "b.yaml")


def test_a_worker_answer_over_the_limit_does_not_shift_later_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "PARSER_BYTES", 0)
    monkeypatch.setattr(W, "MAX_PARSERS", 1)
    monkeypatch.setattr(W, "PARSER_ANSWER", 4000)
    (tmp_path / "a.yaml").write_text("jobs:\n" + "".join(job(f"a{i}") for i in range(2000)))
    for f in "bcdef":
        (tmp_path / f"{f}.yaml").write_text("jobs:\n" + job(f"{f}1"))
    sm = StateMachine(apsw.Connection(":memory:"))
    w = W.Watcher(str(tmp_path), FailNth(LocalLog(sm), 0), sm.conn, Clock(), node="n1")
    run(w.reload())
    for f in "bcdef":
        assert Q.jobs(sm.conn, name=f"{f}1")[0]["source"] == str(tmp_path / f"{f}.yaml")


def test_file_records_go_in_bounded_commands_after_the_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(W, "MAX_PUTS", 2)
    fleet(tmp_path, files=5, per=1)
    sm, prop, w = setup(tmp_path)
    run(w.reload())
    records = [c.files for c in prop.sent if c.files]
    assert [len(r) for r in records] == [2, 2, 1]
    assert all(not c.puts for c in prop.sent if c.files)  # after every job command
    assert prop.sent.index(next(c for c in prop.sent if c.files)) == len(
        [c for c in prop.sent if c.puts])


@pytest.mark.parametrize("field, value", [
    ("puts", "not a list"), ("puts", [["a", "0" * 64, "/f"]]), ("puts", [[1, "0" * 64, "/f", None]]),
    ("puts", [["a", "short", "/f", None]]), ("puts", [["", "0" * 64, "/f", None]]),
    ("puts", [["a", "0" * 64, "/f", 5]]), ("removes", [""]), ("removes", [3]),
    ("files", [["/f", "d"]]), ("files", [["/f", "d", True]]), ("files", [[1, None, 0]]),
])
def test_a_malformed_sync_is_refused_whole_and_changes_nothing(field, value):
    sm = StateMachine(apsw.Connection(":memory:"))
    before = sm.full_digest()
    kw = {"puts": [], "removes": [], "files": [], field: value}
    with pytest.raises(Refused, match="sync_jobs"):
        sync(sm, 1, **kw)
    assert Q.job_names(sm.conn) == [] and list(sm.conn.execute("SELECT * FROM specs")) == []
    assert sm.full_digest() == before  # (this helper's transaction rolled back whole)

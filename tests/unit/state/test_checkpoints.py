"""Checkpoints and heartbeats in the replicated state: authorised by the
attempt's token (only its hash is kept), fenced so that a stale attempt
cannot save or beat, bounded in size, and handed to a retry."""

from __future__ import annotations

import pytest

from cronrd.state import checkpoints as CK
from cronrd.state import commands as C
from cronrd.state import forwarded
from cronrd.errors import Refused
from cronrd.state.effects import RunStuck
from tests.unit.state.test_state import T0, Log

TOKEN = "a" * 64
OTHER = "b" * 64


def started(log: Log, rid: int, token: str = TOKEN, node: str = "n1") -> None:
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node=node, pid=40 + rid,
                           started_at=run.due_at, log_path="/l",
                           secret=CK.token_hash(token)))


def save(log: Log, rid: int, value: str, token: str = TOKEN, node: str = "n1", at=None):
    return log.apply(C.SaveCheckpoint(run_id=rid, token_hash=CK.token_hash(token),
                                      value=value, node=node,
                                      at=at if at is not None else T0 + 5))


def beat(log: Log, rid: int, token: str = TOKEN, at=None, **kw):
    return log.apply(C.Heartbeat(run_id=rid, token_hash=CK.token_hash(token), node="n1",
                                 at=at if at is not None else T0 + 5, **kw))


def retried(log: Log, **over) -> tuple[int, int]:
    """A job with one retry; its first attempt started and saved 'step-3'."""
    over.setdefault("retries", {"max": 2, "delay": 1.0, "backoff": 1.0, "max_delay": 10.0,
                                "jitter": 0.0})
    log.put(**over)
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    save(log, rid, "step-3")
    retry = log.finish(rid, "failed", exit_code=1)["retry_run_id"]
    return rid, retry


def test_only_the_hash_of_the_token_is_kept_and_a_save_is_per_record():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    assert CK.stored_hash(log.sm.conn, rid) == CK.token_hash(TOKEN) != TOKEN
    assert save(log, rid, "offset=10") == {"run_id": rid, "attempt": 1}
    save(log, rid, "offset=20", at=T0 + 6)
    ck = CK.of_record(log.sm.conn, log.run(rid))
    assert (ck["value"], ck["attempt"], ck["at"]) == ("offset=20", 1, T0 + 6)
    # the token never reaches the state, in any table
    for table in ("run_heartbeats", "checkpoints", "runs"):
        assert TOKEN not in repr(list(log.sm.conn.execute(f"SELECT * FROM {table}")))


def test_a_wrong_token_or_another_nodes_word_is_refused():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    with pytest.raises(Refused, match="token does not belong to run"):
        save(log, rid, "x", token=OTHER)
    with pytest.raises(Refused, match="runs on node n1, not on n2"):
        save(log, rid, "x", node="n2")
    with pytest.raises(Refused, match="no such run"):
        save(log, rid + 100, "x")
    assert CK.of_record(log.sm.conn, log.run(rid)) is None


def test_a_run_that_reported_no_token_cannot_save():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=4,
                           started_at=T0 + 1, log_path="/l"))
    with pytest.raises(Refused, match="token does not belong"):
        save(log, rid, "x")


def test_a_stale_attempt_cannot_overwrite_the_newer_ones_checkpoint():
    log = Log()
    first, second = retried(log)
    # the first attempt's process is still alive somewhere and tries again
    with pytest.raises(Refused, match="attempt 2 has replaced it"):
        save(log, first, "step-9")
    with pytest.raises(Refused, match="attempt 2 has replaced it"):
        beat(log, first)
    started(log, second, token=OTHER)
    save(log, second, "step-5", token=OTHER)
    with pytest.raises(Refused, match="replaced"):
        save(log, first, "step-1")
    ck = CK.of_record(log.sm.conn, log.run(second))
    assert (ck["value"], ck["attempt"]) == ("step-5", 2)


def test_a_finished_attempt_cannot_save():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    log.finish(rid)
    with pytest.raises(Refused, match="is succeeded, not running"):
        save(log, rid, "late")


def test_values_are_bounded_text():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    save(log, rid, "é" * (CK.MAX_VALUE // 2))  # exactly 64 KiB of UTF-8
    with pytest.raises(Refused, match=r"65537 bytes, more than the 65536 bytes \(64 KiB\)"):
        save(log, rid, "x" * (CK.MAX_VALUE + 1))
    with pytest.raises(Refused, match="NUL"):
        save(log, rid, "a\x00b")
    assert CK.of_record(log.sm.conn, log.run(rid))["value"] == "é" * (CK.MAX_VALUE // 2)


def test_a_retry_gets_the_last_checkpoint_in_its_environment():
    log = Log()
    first, second = retried(log)
    assert CK.env(log.sm.conn, log.run(first)) == {}
    assert CK.env(log.sm.conn, log.run(second)) == {
        "CRONRD_CHECKPOINT": "step-3", "CRONRD_CHECKPOINT_ATTEMPT": "1"}
    # its retry in turn gets the newest value, whoever saved it
    started(log, second, token=OTHER)
    third = log.finish(second, "failed", exit_code=1)["retry_run_id"]
    assert CK.env(log.sm.conn, log.run(third))["CRONRD_CHECKPOINT"] == "step-3"


def test_a_rerun_starts_afresh_and_its_retries_use_its_own_checkpoints():
    log = Log()
    first, second = retried(log, retries={"max": 5, "delay": 1.0, "backoff": 1.0,
                                          "max_delay": 10.0, "jitter": 0.0})
    started(log, second, token=OTHER)
    log.apply(C.CancelRun(run_id=log.finish(second, "failed", exit_code=1)["retry_run_id"],
                          reason="operator", at=T0 + 40))
    rerun = log.apply(C.Rerun(job="j", fire_time=T0 + 1, at=T0 + 50))["run_id"]
    assert CK.env(log.sm.conn, log.run(rerun)) == {}
    log.apply(C.AssignRun(run_id=rerun, node="n1", at=T0 + 50))
    started(log, rerun)
    retry = log.finish(rerun, "failed", exit_code=1)["retry_run_id"]
    assert CK.env(log.sm.conn, log.run(retry)) == {}  # the rerun saved nothing
    started(log, retry)
    save(log, retry, "fresh")
    last = log.finish(retry, "failed", exit_code=1)["retry_run_id"]
    assert CK.env(log.sm.conn, log.run(last)) == {"CRONRD_CHECKPOINT": "fresh",
                                                  "CRONRD_CHECKPOINT_ATTEMPT": "5"}


def test_a_heartbeat_records_progress_and_message_and_they_are_shown():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    beat(log, rid, progress=0.4, message="table 2 of 5", at=T0 + 3)
    beat(log, rid, at=T0 + 4)  # keeps the last progress and message
    assert CK.heartbeat_of(log.sm.conn, rid) == (T0 + 4, 0.4, "table 2 of 5")
    [view] = CK.views(log.sm.conn, [log.run(rid).view()])
    assert (view["progress"], view["heartbeat_message"]) == (0.4, "table 2 of 5")
    assert view["heartbeat_at"].endswith("Z")
    with pytest.raises(Refused, match="progress must be a number from 0 to 1"):
        beat(log, rid, progress=1.5)
    with pytest.raises(Refused, match="longer than 1000"):
        beat(log, rid, message="m" * 1001)


def test_heartbeat_timeout_ends_a_silent_run_timed_out_and_retries_it():
    log = Log()
    log.put(heartbeat_timeout=300.0, retries={"max": 1, "delay": 1.0, "backoff": 1.0,
                                              "max_delay": 10.0, "jitter": 0.0})
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    beat(log, rid, at=T0 + 100)
    with pytest.raises(Refused, match="within its heartbeat_timeout"):
        log.apply(C.HeartbeatTimeout(run_id=rid, at=T0 + 399))
    assert [(r.run_id, t, last) for r, t, last in CK.running_with_timeouts(
        log.sm.conn)] == [(rid, 300.0, T0 + 100)]
    log.effects.clear()
    res = log.apply(C.HeartbeatTimeout(run_id=rid, at=T0 + 400))
    run = log.run(rid)
    assert run.state == "timed_out"
    assert run.reason == "heartbeat_timeout: no heartbeat for 5m"
    assert log.run(res["retry_run_id"]).attempt == 2
    assert any(isinstance(e, RunStuck) and e.run.run_id == rid for e in log.effects)
    with pytest.raises(Refused, match="not running"):
        log.apply(C.HeartbeatTimeout(run_id=rid, at=T0 + 500))


def test_heartbeat_timeout_counts_from_the_start_and_needs_the_field():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    with pytest.raises(Refused, match="has no heartbeat_timeout"):
        log.apply(C.HeartbeatTimeout(run_id=rid, at=T0 + 10_000))
    assert CK.running_with_timeouts(log.sm.conn) == []
    log.put(heartbeat_timeout=60.0)
    assert [t for _r, t, _l in CK.running_with_timeouts(log.sm.conn)] == [60.0]
    log.apply(C.HeartbeatTimeout(run_id=rid, at=T0 + 61))
    assert log.run(rid).reason == "heartbeat_timeout: no heartbeat for 1m"


def test_the_same_commands_give_the_same_state_on_every_node_and_prune_forgets():
    a, b = Log(), Log()
    for log in (a, b):
        retried(log)
    assert a.sm.full_digest() == b.sm.full_digest()
    a.sm.conn.execute("UPDATE checkpoints SET value='other'")
    assert a.sm.full_digest() != b.sm.full_digest()
    b.apply(C.CancelRun(run_id=2, reason="x", at=T0 + 60))
    b.apply(C.Prune(before=T0 + 10_000, at=T0 + 10_000))
    assert list(b.sm.conn.execute("SELECT * FROM checkpoints")) == []
    assert list(b.sm.conn.execute("SELECT * FROM run_heartbeats")) == []


def test_a_follower_forwards_its_own_saves_only_and_never_a_timeout():
    cmd = C.SaveCheckpoint(run_id=1, token_hash="h", value="v", node="n2", at=T0)
    assert forwarded.check_forwarded(cmd, "n2") is cmd
    with pytest.raises(Exception, match="speaks only for itself"):
        forwarded.check_forwarded(cmd, "n3")
    with pytest.raises(Exception, match="leader alone"):
        forwarded.check_forwarded(C.HeartbeatTimeout(run_id=1, at=T0), "n2")


def test_run_started_without_a_secret_encodes_as_before():
    cmd = C.RunStarted(run_id=1, token=2, node="n1", pid=3, started_at=T0, log_path="/l")
    assert b"secret" not in cmd.encode()
    again = C.decode(C.RunStarted(run_id=1, token=2, node="n1", pid=3, started_at=T0,
                                  log_path="/l", secret="f" * 64).encode())
    assert again.secret == "f" * 64


def test_the_heartbeat_timeout_duty_reads_the_running_runs_not_the_history():
    """The leader looks every second: its cost follows the runs running, not
    the runs table (the history of 100,000 jobs), by index runs_active."""
    from tests.unit.state.test_start_deadline import _vm_steps
    log = Log()
    log.put(heartbeat_timeout=300.0)
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    done = log.fire(T0 + 2)["run_id"]
    log.finish(done)
    conn = log.sm.conn
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "run_id"]

    def history(n, base):  # finished records of other fire times, copies of ``done``
        with conn:
            conn.execute(
                f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
                f"INSERT INTO runs({','.join(cols)}) SELECT "
                + ",".join("fire_time + ? + i" if c == "fire_time" else c for c in cols)
                + " FROM runs, k WHERE run_id=?", (n, base, done))
    history(50, 1000)
    few = _vm_steps(conn, lambda: CK.running_with_timeouts(conn))
    history(5000, 2000)
    many = _vm_steps(conn, lambda: CK.running_with_timeouts(conn))
    assert [r.run_id for r, _t, _l in CK.running_with_timeouts(conn)] == [rid]
    assert many <= few + 5


def test_text_that_is_not_utf8_is_refused_with_the_reason():
    """A lone surrogate (JSON "\\ud800" from the control socket) is not
    UTF-8: refused as such, before the log, not failing inside apply."""
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)
    assert "UTF-8" in CK.value_problem("a\ud800b")
    assert "UTF-8" in CK.message_problem("a\ud800b")
    with pytest.raises(Refused, match="checkpoint refused: .*UTF-8"):
        save(log, rid, "a\ud800b")
    with pytest.raises(Refused, match="heartbeat refused: .*UTF-8"):
        beat(log, rid, message="a\ud800b")


def test_a_heartbeat_made_before_the_end_is_recorded_after_it_and_an_older_one_never_wins():
    # Found in review: heartbeats are held back up to a second, so a job's
    # last `heartbeat --progress 1` often reached the log after its end and
    # was refused; and a held-back beat could overwrite a newer one.
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    started(log, rid)                                 # started at T0 + 1
    beat(log, rid, at=T0 + 3, progress=0.5, message="half")
    beat(log, rid, at=T0 + 2, progress=0.2, message="older")     # older: no change
    assert CK.heartbeat_of(log.sm.conn, rid)[1:] == (0.5, "half")
    log.finish(rid, at=T0 + 10)
    beat(log, rid, at=T0 + 9.5, progress=1.0, message="done")   # made before the end
    assert CK.heartbeat_of(log.sm.conn, rid) == (T0 + 9.5, 1.0, "done")
    with pytest.raises(Refused, match="is succeeded, not running"):
        beat(log, rid, at=T0 + 11, progress=1.0)    # after the end: refused
    with pytest.raises(Refused, match="is succeeded, not running"):
        save(log, rid, "late", at=T0 + 9)           # checkpoints: only while running

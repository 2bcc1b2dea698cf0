"""The replicated state machine: apply is deterministic and keeps the
guarantees (one record per fire time, fencing, retries) by itself."""

from __future__ import annotations

import random

import apsw
import pytest

from cronrd.errors import StateError
from cronrd.state import commands as C
from cronrd.state import queries as Q
from cronrd.errors import Refused
from cronrd.state.machine import StateMachine
from cronrd.state.effects import CancelRequested, RunDone
from replay import Replay

T0 = 1_800_000_000  # 2027-01-15T08:00:00Z


def spec(**over):
    base = {"name": "j", "schedule": "* * * * * *", "command": "true",
            "concurrency": "forbid", "retries": {"max": 0, "delay": 10.0, "backoff": 2.0,
                                                  "max_delay": 3600.0, "jitter": 0.0},
            "on_node_loss": "retry", "enabled": True}
    base.update(over)
    return base


class Log:
    """Applies commands in order, like the one-member log does."""

    def __init__(self):
        self.sm = StateMachine(apsw.Connection(":memory:"))
        self.index = 0
        self.effects = []

    def apply(self, cmd):
        self.index += 1
        refused = None
        with self.sm.conn:  # like LocalLog: a refusal still commits the index
            try:
                result, effects = self.sm.apply(self.index, cmd)
            except Refused as exc:
                refused = exc
        if refused is not None:
            raise refused
        self.effects.extend(effects)
        return result

    def put(self, name="j", at=T0, **over):
        s = spec(name=name, **over)
        return self.apply(C.PutJob(name=name, spec=s, digest=str(sorted(s.items())),
                                   source=f"/etc/cronrd.d/{name}.yaml", at=at))

    def fire(self, t, name="j", **kw):
        kw.setdefault("kind", "scheduled")
        kw.setdefault("node", "n1")
        kw.setdefault("due_at", t)
        kw.setdefault("at", t - 0.1)
        return self.apply(C.Fire(job=name, fire_time=t, **kw))

    def run(self, run_id):
        return Q.get_run(self.sm.conn, run_id)

    def finish(self, run_id, state="succeeded", at=None, exit_code=0, token=None):
        run = self.run(run_id)
        return self.apply(C.RunFinished(
            run_id=run_id, token=run.token if token is None else token, node="n1",
            state=state, exit_code=exit_code, signal=None, started_at=run.due_at,
            finished_at=at if at is not None else run.due_at + 1, log_path="/l"))


def test_a_fire_time_gets_exactly_one_record():
    log = Log()
    log.put()
    first = log.fire(T0 + 1)
    assert first["state"] == "assigned"
    with pytest.raises(Refused, match="already handled"):
        log.fire(T0 + 1)
    with pytest.raises(Refused, match="already handled"):
        log.fire(T0)  # at or before the cursor
    assert len(Q.list_runs(log.sm.conn, "j")) == 1
    # A refused command still advances the applied index and changes nothing else.
    assert log.sm.applied_index == log.index


def test_new_job_cursor_starts_at_creation():
    log = Log()
    log.put(at=T0 + 0.5)
    with pytest.raises(Refused):
        log.fire(T0)
    assert log.fire(T0 + 1)["state"] == "assigned"


def test_fires_are_assigned_and_the_executor_applies_the_overlap_policy():
    # A fire is committed ahead of its time, so apply cannot know what will
    # still run at the fire time: it assigns, the executor decides at the gate.
    log = Log()
    log.put("f", concurrency="forbid")
    log.fire(T0 + 1, "f")
    assert log.fire(T0 + 2, "f")["state"] == "assigned"
    rid = Q.list_runs(log.sm.conn, "f")[0].run_id
    res = log.apply(C.RunFinished(
        run_id=rid, token=log.run(rid).token, node="n1", state="skipped",
        exit_code=None, signal=None, started_at=None, finished_at=T0 + 2,
        log_path=None, reason="overlap: run 1 still running at the fire time"))
    assert res["retry_run_id"] is None
    assert log.run(rid).state == "skipped" and "overlap" in log.run(rid).reason


def test_manual_run_with_replace_cancels_the_running_run():
    log = Log()
    log.put("r", concurrency="replace")
    rid = log.fire(T0 + 1, "r")["run_id"]
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=42,
                           started_at=T0 + 1, log_path="/l"))
    log.effects.clear()
    log.apply(C.ManualRun(job="r", node="n1", at=T0 + 2))
    cancels = [e for e in log.effects if isinstance(e, CancelRequested)]
    assert [e.run.run_id for e in cancels] == [rid]
    assert log.run(rid).cancel_requested == 1


def test_paused_and_disabled_fires_are_skipped_with_reason():
    log = Log()
    log.put()
    log.apply(C.SetPaused(name="j", paused=True, at=T0))
    r = log.fire(T0 + 1)
    assert r["state"] == "skipped" and r["reason"].startswith("paused")
    log.put("d", enabled=False)
    r = log.fire(T0 + 1, "d")
    assert r["state"] == "skipped" and r["reason"].startswith("disabled")


def test_failed_run_is_retried_with_backoff_as_a_new_attempt_of_the_same_fire():
    log = Log()
    log.put(retries={"max": 2, "delay": 10.0, "backoff": 3.0, "max_delay": 3600.0,
                     "jitter": 0.0})
    rid = log.fire(T0 + 1)["run_id"]
    res = log.finish(rid, "failed", at=T0 + 5, exit_code=1)
    second = log.run(res["retry_run_id"])
    assert (second.attempt, second.kind, second.fire_time) == (2, "retry", T0 + 1)
    assert second.due_at == T0 + 5 + 10.0          # delay * backoff**0
    res = log.finish(second.run_id, "timed_out", at=T0 + 100, exit_code=None)
    third = log.run(res["retry_run_id"])
    assert third.attempt == 3 and third.due_at == T0 + 100 + 30.0  # 10 * 3**1
    res = log.finish(third.run_id, "failed", at=T0 + 200, exit_code=1)
    assert res["retry_run_id"] is None                 # max 2 retries used up


def test_lost_run_retried_by_default_but_not_with_on_node_loss_fail():
    log = Log()
    log.put("r")
    log.put("f", on_node_loss="fail")
    r = log.finish(log.fire(T0 + 1, "r")["run_id"], "lost", exit_code=None)
    assert log.run(r["retry_run_id"]).attempt == 2
    f = log.finish(log.fire(T0 + 1, "f")["run_id"], "lost", exit_code=None)
    assert f["retry_run_id"] is None


def test_stale_report_is_kept_as_history_and_does_not_overwrite():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    token = log.run(rid).token
    log.finish(rid, "succeeded")
    late = log.finish(rid, "failed", exit_code=9, token=token - 1)
    assert late == {"state": "succeeded", "late": True}
    assert log.run(rid).state == "succeeded" and log.run(rid).exit_code == 0
    rows = list(log.sm.conn.execute("SELECT run_id, state, exit_code FROM late_reports"))
    assert rows == [(rid, "failed", 9)]


def test_start_report_with_wrong_token_is_refused():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    with pytest.raises(Refused, match="stale"):
        log.apply(C.RunStarted(run_id=rid, token=999, node="n1", pid=1, started_at=T0,
                               log_path="/l"))
    assert log.run(rid).state == "assigned"


def test_start_after_cancel_tells_the_node_to_stop():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    token = log.run(rid).token
    log.apply(C.CancelRun(run_id=rid, reason="operator", at=T0))
    res = log.apply(C.RunStarted(run_id=rid, token=token, node="n1", pid=7,
                                 started_at=T0 + 1, log_path="/l"))
    assert res["cancel"] is True and log.run(rid).state == "cancelled"


def test_remove_job_cancels_unstarted_runs_and_keeps_history():
    log = Log()
    log.put(concurrency="allow")
    done = log.fire(T0 + 1)["run_id"]
    log.finish(done)
    pending = log.fire(T0 + 2)["run_id"]
    log.apply(C.RemoveJob(name="j", at=T0 + 3))
    assert log.run(pending).state == "cancelled"
    assert log.run(done).state == "succeeded"
    with pytest.raises(Refused, match="no job"):
        log.fire(T0 + 4)


def test_gap_record_moves_the_cursor():
    log = Log()
    log.put()
    log.apply(C.RecordGap(job="j", first=T0 + 1, last=T0 + 5000, count=5000,
                          reason="catch-up", at=T0 + 6000))
    with pytest.raises(Refused):
        log.fire(T0 + 4000)
    assert log.fire(T0 + 5001)["state"] == "assigned"
    assert Q.list_gaps(log.sm.conn, "j")[0]["count"] == 5000


def test_manual_run_respects_forbid_and_is_keyed_apart_from_schedule():
    log = Log()
    log.put()
    rid = log.fire(T0 + 1)["run_id"]
    # Assigned ahead of its fire time is not "running": the gate decides later.
    m0 = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 0.5))
    log.finish(m0["run_id"])
    run = log.run(rid)
    log.apply(C.RunStarted(run_id=rid, token=run.token, node="n1", pid=9,
                           started_at=T0 + 1, log_path="/l"))
    with pytest.raises(Refused, match="not started"):
        log.apply(C.ManualRun(job="j", node="n1", at=T0 + 1))
    log.finish(rid)
    m = log.apply(C.ManualRun(job="j", node="n1", at=T0 + 1))
    assert log.run(m["run_id"]).kind == "manual"


def test_reboot_fire_is_keyed_by_boot_time_and_ignores_the_cursor():
    log = Log()
    log.put(at=T0 + 100)
    assert log.fire(T0, boot=True)["state"] == "assigned"
    with pytest.raises(Refused, match="already exists"):
        log.fire(T0, boot=True)


def test_prune_deletes_only_old_finished_runs():
    log = Log()
    log.put(concurrency="allow")
    old = log.fire(T0 + 1)["run_id"]
    log.finish(old, at=T0 + 2)
    active = log.fire(T0 + 3)["run_id"]
    res = log.apply(C.Prune(before=T0 + 1000, at=T0 + 1000))
    assert res["runs_deleted"] == 1
    assert log.run(old) is None and log.run(active).state == "assigned"
    # The cursor still protects the pruned fire time.
    with pytest.raises(Refused):
        log.fire(T0 + 1)


def test_prune_keeps_the_newest_records_of_each_job_in_bounded_steps(monkeypatch):
    from cronrd.state import apply_nodes
    monkeypatch.setattr(apply_nodes, "PRUNE_BATCH", 4)  # where Prune reads it
    log = Log()
    log.put(concurrency="allow")
    log.put(name="k", concurrency="allow")
    done = []
    for t in range(1, 9):  # 8 finished runs of j, 2 of k, then one still running of j
        done.append(log.fire(T0 + t)["run_id"])
        log.finish(done[-1], at=T0 + t + 0.5)
    for t in range(1, 3):
        log.finish(log.fire(T0 + t, name="k")["run_id"], at=T0 + t + 0.5)
    active = log.fire(T0 + 20)["run_id"]
    res = log.apply(C.Prune(before=T0 - 1, at=T0 + 30, keep=3))
    assert res == {"runs_deleted": 4, "more": True}  # a bounded step
    res = log.apply(C.Prune(before=T0 - 1, at=T0 + 30, keep=3))
    assert res == {"runs_deleted": 2}
    left = [r.run_id for r in Q.list_runs(log.sm.conn, job="j", limit=100)]
    assert left == [active, done[-1], done[-2]]  # the newest 3 records, the running one kept
    assert len(Q.list_runs(log.sm.conn, job="k", limit=100)) == 2  # under the cap
    assert log.apply(C.Prune(before=T0 - 1, at=T0 + 30, keep=3)) == {"runs_deleted": 0}
    with pytest.raises(Refused):  # cursors still protect what was pruned
        log.fire(T0 + 1)


def test_reapplying_an_index_is_an_error():
    log = Log()
    log.put()
    with pytest.raises(StateError, match="already applied"):
        with log.sm.conn:
            log.sm.apply(1, C.SetPaused(name="j", paused=True, at=T0))


def test_commands_round_trip_and_garbage_is_rejected():
    cmds = [C.PutJob(name="j", spec=spec(), digest="d", source="/f", at=1.5),
            C.Fire(job="j", fire_time=5, kind="scheduled", node="n", due_at=5.2, at=4.9),
            C.RunFinished(run_id=1, token=2, node="n", state="failed", exit_code=1,
                          signal=None, started_at=1.0, finished_at=2.0, log_path=None),
            C.Prune(before=1.0, at=2.0),
            C.ClaimRuns(node="n", claims=[[1, 2]], at=3.0),
            C.ReplaceRuns(moves=[[1, 2, "m"]], at=3.0, reason="not claimed")]
    for cmd in cmds:
        assert C.decode(cmd.encode()) == cmd
    # Not an object at all (a peer's forwarded batch may hold anything).
    for junk in (b"", b"{}", b'{"op": "nope"}', b'{"op": "prune"}', b"\xff", b"42", b"[]",
                 b'"op"', b"null"):
        with pytest.raises(StateError):
            C.decode(junk)


def random_commands(rng: random.Random, n: int) -> list[C.Command]:
    """A plausible random history: jobs come and go, fires, starts, results."""
    cmds: list[C.Command] = []
    t = T0
    for _ in range(n):
        t += rng.choice([0, 1, 1, 2, 5])
        name = rng.choice("abc")
        kind = rng.random()
        if kind < 0.15:
            s = spec(name=name, concurrency=rng.choice(["allow", "forbid", "replace"]),
                     retries={"max": rng.randint(0, 2), "delay": 1.0, "backoff": 2.0,
                              "max_delay": 60.0, "jitter": rng.choice([0.0, 5.0])})
            cmds.append(C.PutJob(name=name, spec=s, digest=str(rng.random()),
                                 source="/x", at=t))
        elif kind < 0.2:
            cmds.append(C.SetPaused(name=name, paused=rng.random() < 0.5, at=t))
        elif kind < 0.6:
            cmds.append(C.Fire(job=name, fire_time=t + rng.randint(-2, 2), kind="scheduled",
                               node="n1", due_at=t, at=t))
        elif kind < 0.75:
            cmds.append(C.RunStarted(run_id=rng.randint(1, 40), token=rng.randint(1, 80),
                                     node="n1", pid=100, started_at=t, log_path="/l"))
        elif kind < 0.95:
            cmds.append(C.RunFinished(
                run_id=rng.randint(1, 40), token=rng.randint(1, 80), node="n1",
                state=rng.choice(["succeeded", "failed", "timed_out", "lost"]),
                exit_code=rng.randint(0, 3), signal=None, started_at=t, finished_at=t + 1,
                log_path="/l"))
        else:
            cmds.append(C.RemoveJob(name=name, at=t))
    return cmds


def apply_all(cmds, batch: int) -> tuple[str, list]:
    sm = StateMachine(apsw.Connection(":memory:"))
    results = []
    index = 0
    for i in range(0, len(cmds), batch):
        with sm.conn:
            for cmd in cmds[i:i + batch]:
                index += 1
                try:
                    res, _ = sm.apply(index, C.decode(cmd.encode()))
                    results.append(("ok", res))
                except Refused as exc:
                    results.append(("refused", str(exc)))
    return (sm.full_digest(), sm.state_digest), results


@pytest.mark.parametrize("seed", range(25))
def test_apply_is_deterministic(seed):
    cmds = random_commands(random.Random(seed), 300)
    d1, r1 = apply_all(cmds, batch=1)
    d2, r2 = apply_all(cmds, batch=37)   # batching into transactions changes nothing
    assert d1 == d2 and r1 == r2
    assert any(kind == "ok" for kind, _ in r1) and any(kind == "refused" for kind, _ in r1)


def test_digest_differs_when_state_differs():
    cmds = random_commands(random.Random(1), 100)
    d1, _ = apply_all(cmds, 1)
    d2, _ = apply_all(cmds[:-5], 1)
    assert d1 != d2


def test_every_scheduled_key_is_unique_in_random_histories():
    for seed in range(10):
        cmds = random_commands(random.Random(seed), 400)
        replay = Replay()
        for cmd in cmds:
            replay.apply(cmd)
        sm = replay.sm
        rows = list(sm.conn.execute(
            "SELECT job, fire_time, target, attempt, COUNT(*) FROM runs "
            "WHERE origin='schedule' GROUP BY 1,2,3,4 HAVING COUNT(*) > 1"))
        assert rows == []


def test_pause_skips_fires_committed_ahead_but_not_retries_or_due_runs():
    log = Log()
    log.put(concurrency="allow")
    due = log.fire(T0 + 1)["run_id"]             # due before the pause
    ahead = log.fire(T0 + 5)["run_id"]           # committed ahead, due after it
    log.effects.clear()
    log.apply(C.SetPaused(name="j", paused=True, at=T0 + 2))
    assert log.run(due).state == "assigned"
    assert log.run(ahead).state == "skipped"
    assert log.run(ahead).reason.startswith("paused")
    assert [e.run.run_id for e in log.effects if isinstance(e, RunDone)] == [ahead]


def test_disabling_a_job_skips_fires_committed_ahead():
    log = Log()
    log.put(concurrency="allow")
    ahead = log.fire(T0 + 5)["run_id"]
    log.put(concurrency="allow", enabled=False, at=T0 + 2)
    assert log.run(ahead).state == "skipped"
    assert log.run(ahead).reason.startswith("disabled")


def test_maintenance_pause_skips_every_job_and_leaves_own_pauses_alone():
    log = Log()
    log.put("a")
    log.put("b")
    log.apply(C.SetPaused(name="b", paused=True, at=T0, note="own", by="uid 0 (root)"))
    ahead = log.fire(T0 + 5, "a")          # committed ahead of its fire time
    assert ahead["state"] == "assigned"
    r = log.apply(C.SetPaused(name="", paused=True, at=T0 + 1, note="kernel upgrade",
                              by="uid 0 (root)"))
    assert r == {"changed": True, "paused": True}
    assert log.run(ahead["run_id"]).state == "skipped"   # follows the pause at once
    r = log.fire(T0 + 6, "a")
    assert r["state"] == "skipped"
    assert "maintenance" in r["reason"] and "kernel upgrade" in r["reason"]
    assert "resume --all" in r["reason"]
    assert Q.pause_note(log.sm.conn, "") == {"note": "kernel upgrade", "by": "uid 0 (root)",
                                             "at": "2027-01-15T08:00:01Z"}
    assert log.apply(C.SetPaused(name="", paused=False, at=T0 + 7)) == {
        "changed": True, "paused": False}
    assert log.fire(T0 + 8, "a")["state"] == "assigned"
    # b was paused on its own: it still is, with its note
    assert log.fire(T0 + 8, "b")["reason"].startswith("paused")
    assert Q.pause_note(log.sm.conn, "b")["note"] == "own"
    log.apply(C.SetPaused(name="b", paused=False, at=T0 + 9))
    assert Q.pause_note(log.sm.conn, "b") is None
    assert log.apply(C.SetPaused(name="", paused=False, at=T0 + 10))["changed"] is False


def test_a_set_paused_from_before_notes_decodes_with_empty_note():
    cmd = C.decode(b'{"op":"set_paused","name":"j","paused":true,"at":1.0}')
    assert (cmd.note, cmd.by) == ("", "")


def test_full_digest_reads_every_replicated_table():
    from cronrd.state.machine import DIGEST_TABLES
    log = Log()
    tables = {name for (name,) in log.sm.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    assert tables - {"meta"} == {t for t, _ in DIGEST_TABLES}


def test_every_command_type_has_its_applier_in_the_table():
    from cronrd.state import commands as C
    from cronrd.state.machine import APPLIERS
    assert set(APPLIERS) == set(C.COMMANDS.values())
    for cls, method in APPLIERS.items():
        assert method.__name__ == "_apply_" + cls.op


def _at_v2(log):
    log.apply(C.SetClusterVersion(version=2, members={"n1": "0.3.0"}, at=T0))


def test_exit_rules_decide_state_and_retry_and_the_reason_names_the_rule():
    log = Log()
    _at_v2(log)
    log.put(success_exit_codes=[0, 3],
            retries={"max": 2, "delay": 10.0, "backoff": 2.0, "max_delay": 3600.0,
                     "jitter": 0.0, "not_on_exit_codes": [2]})
    a = log.fire(T0 + 1)["run_id"]
    res = log.finish(a, "failed", exit_code=3)
    assert res["state"] == "succeeded" and res["retry_run_id"] is None
    assert "exit 3 counts as success" in log.run(a).reason
    b = log.fire(T0 + 2)["run_id"]
    res = log.finish(b, "failed", exit_code=2)
    assert res["retry_run_id"] is None
    assert log.run(b).reason == "exit 2 is not in success_exit_codes (0, 3); not retried: " \
                                "exit 2 is in retries.not_on_exit_codes (2)"
    c = log.fire(T0 + 3)["run_id"]
    res = log.finish(c, "failed", exit_code=1)
    assert log.run(res["retry_run_id"]).attempt == 2
    assert "retried (retries.retry_on lists failure): attempt 2 of 3" in log.run(c).reason


def test_before_version_2_the_exit_rules_are_not_applied():
    """A log written before the raise is replayed by the old rules."""
    log = Log()
    log.put(success_exit_codes=[0, 3],
            retries={"max": 1, "delay": 10.0, "backoff": 2.0, "max_delay": 3600.0,
                     "jitter": 0.0, "not_on_exit_codes": [3]})
    a = log.fire(T0 + 1)["run_id"]
    res = log.finish(a, "failed", exit_code=3)
    assert res["state"] == "failed" and res["retry_run_id"] is not None
    assert log.run(a).reason is None


def test_a_report_sent_again_is_a_duplicate_when_success_exit_codes_changed_its_state():
    """Review of issue 35: the recorded state (succeeded) differs from the
    report's (failed, exit 3), and a re-sent report became a late report."""
    log = Log()
    _at_v2(log)
    log.put(success_exit_codes=[0, 3])
    rid = log.fire(T0 + 1)["run_id"]
    log.finish(rid, "failed", exit_code=3)
    again = log.finish(rid, "failed", exit_code=3)
    assert again.get("duplicate") and again["state"] == "succeeded"
    assert list(log.sm.conn.execute("SELECT COUNT(*) FROM late_reports")) == [(0,)]

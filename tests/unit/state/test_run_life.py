"""The local run life cycle (cronrd/state/run_life.py): pure, no processes."""

from __future__ import annotations

import signal

import pytest

from cronrd.state import run_life as L

EXIT0 = 0
EXIT3 = 3 << 8           # raw wait status of exit(3)
KILLED_BY_TERM = signal.SIGTERM


def spawned(switch=False, pid=4242, claim="won"):
    life, acts = L.step(L.Life(switch=switch, claim=claim), L.Spawned(pid))
    assert acts == []
    return life


def started(at=100.0):
    life, acts = L.step(spawned(), L.GateOpen(at))
    assert acts == [] and life.phase is L.Phase.STARTED and life.started_at == at
    return life


def test_table_only_moves_forward():
    for phase, nxt in L.TRANSITIONS.items():
        assert phase not in nxt
    assert L.TRANSITIONS[L.Phase.DONE] == frozenset()
    with pytest.raises(L.IllegalTransition):
        L.step(L.Life(), L.GateOpen(1.0))  # no process yet: it cannot pass a gate


def test_ready_means_spawned_without_a_user_switch_and_said_ready_with_one():
    assert spawned().ready
    life = spawned(switch=True)
    assert not life.ready
    life, _ = L.step(life, L.Ready())
    assert life.ready


def test_success_and_failure_and_signal():
    for status, state, code, sig, reason in (
            (EXIT0, "succeeded", 0, None, None),
            (EXIT3, "failed", 3, None, "exit code 3"),
            (KILLED_BY_TERM, "failed", None, signal.SIGTERM, "killed by signal SIGTERM")):
        life, acts = L.step(started(), L.Exited(status, 10, 105.0))
        assert life.over
        assert acts == [L.Report(state, reason, exit_code=code, signal=sig, started_at=100.0,
                                 finished_at=105.0)]


def test_timeout_terminates_and_the_exit_is_reported_as_timed_out():
    life, acts = L.step(started(), L.Stop("timed_out", "timed out after 5s (timeout)"))
    assert acts == [L.Terminate(4242)]
    # A second stop (a cancel racing the timeout) keeps the first reason but signals again.
    life, acts = L.step(life, L.Stop("cancelled", "by hand"))
    assert life.stop_state == "timed_out" and acts == [L.Terminate(4242)]
    life, acts = L.step(life, L.Exited(KILLED_BY_TERM, 0, 106.0))
    assert acts[0].state == "timed_out" and acts[0].signal == signal.SIGTERM


def test_skip_at_the_gate_kills_the_waiting_shell_and_reports_skipped_without_a_log():
    life, acts = L.step(spawned(), L.GateOpen(100.0, "skipped", "overlap: forbid"))
    assert acts == [L.KillWaiting(4242)] and not life.started
    life, acts = L.step(life, L.Exited(signal.SIGKILL, 0, 100.1))
    assert acts == [L.DropLog(), L.Report("skipped", "overlap: forbid", finished_at=100.1,
                                          log_kept=False)]


def test_fenced_run_is_lost_not_started_so_it_is_placed_again():
    life, _ = L.step(spawned(), L.GateOpen(100.0, "lost", "no lease"))
    _, acts = L.step(life, L.Exited(signal.SIGKILL, 0, 100.1))
    assert acts[-1].state == "lost" and acts[-1].not_started


def test_final_while_waiting_is_not_reported_again():
    life, acts = L.step(spawned(), L.Stop("final", "cancelled"))
    assert acts == [L.KillWaiting(4242)]
    _, acts = L.step(life, L.Exited(signal.SIGKILL, 0, 1.0))
    assert acts == [L.DropLog()]


def test_stopped_before_its_pid_is_known_is_killed_when_it_arrives():
    life, acts = L.step(L.Life(), L.Stop("cancelled", "by hand"))
    assert acts == []
    life, acts = L.step(life, L.Spawned(77))
    assert acts == [L.KillWaiting(77)]


def test_waiting_shell_that_exits_by_itself_reports_why_from_its_output():
    _, acts = L.step(spawned(switch=True), L.Exited(126 << 8, 40, 99.0))
    assert acts == [L.Report("failed", None, finished_at=99.0, early=True, log_kept=True,
                             status=126 << 8)]


def test_daemon_stopping_defers_runs_that_never_started():
    _, acts = L.step(spawned(), L.Exited(75 << 8, 0, 99.0, accepting=False))
    assert acts == [L.DropLog(), L.Defer()]


def test_spawn_failure_is_a_failed_report_with_127():
    life, acts = L.step(L.Life(), L.SpawnFailed("EMFILE"))
    assert life.over and acts == [L.Report("failed", "cannot start the run: EMFILE",
                                           exit_code=127)]


def test_unknown_end_is_lost_and_late_news_changes_nothing():
    life, acts = L.step(started(), L.Exited(None, 0, 200.0))
    assert acts[0].state == "lost" and acts[0].exit_code is None
    for ev in (L.Exited(EXIT0, 0, 201.0), L.Stop("cancelled", "x"), L.Spawned(5), L.Ready()):
        assert L.step(life, ev) == (life, [])


def test_slots_count_runs_that_will_or_do_run():
    assert L.Life().holds_slot and spawned().holds_slot and started().holds_slot
    skipped, _ = L.step(spawned(), L.GateOpen(1.0, "skipped", "x"))
    assert not skipped.holds_slot
    stopping, _ = L.step(started(), L.Stop("timed_out", "x"))
    assert stopping.holds_slot  # its processes still run until they exit


def test_decided_states_are_checked():
    with pytest.raises(ValueError):
        L.step(started(), L.Stop("succeeded", "a node cannot decide success"))


# -- claims (a cluster: a run passes its gate only with its claim won) ------------------
def test_a_run_never_passes_its_gate_without_its_claim_won():
    for claim in ("none", "asking"):
        life = spawned(claim=claim)
        assert not life.at_gate_ready  # its gate waits for the claim
        with pytest.raises(L.IllegalTransition):
            L.step(life, L.GateOpen(1.0))


def test_a_claim_is_asked_once_and_decided_once():
    life = spawned(claim="none")
    life, acts = L.step(life, L.ClaimAsked())
    assert (life.claim, acts) == ("asking", [])
    assert L.step(life, L.ClaimAsked())[0] == life
    life, acts = L.step(life, L.ClaimDecided(True))
    assert (life.claim, acts, life.at_gate_ready) == ("won", [], True)
    # A retried claim's answer changes nothing.
    assert L.step(life, L.ClaimDecided(False, "moved"))[0] == life
    life, acts = L.step(life, L.GateOpen(5.0))
    assert life.phase is L.Phase.STARTED


def test_a_lost_claim_stops_the_waiting_run_unreported():
    life = L.step(spawned(claim="none"), L.ClaimAsked())[0]
    life, acts = L.step(life, L.ClaimDecided(False, "moved to node b"))
    assert life.claim == "lost" and life.stop_state == "final" and life.at_gate_ready
    assert acts == [L.KillWaiting(4242)]
    life, acts = L.step(life, L.Exited(9, 0, 7.0))
    assert life.over and all(not isinstance(a, L.Report) for a in acts)
    # Lost before its process was known: killed when its pid arrives.
    life = L.step(L.Life(), L.ClaimDecided(False, "moved"))[0]
    assert L.step(life, L.Spawned(77))[1] == [L.KillWaiting(77)]

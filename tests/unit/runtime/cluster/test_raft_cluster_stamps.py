"""What the leader commits of a member's forwarded command: the times it
decides by are its own (cronrd/runtime/cluster/raft_cluster.py: stamped_by_leader)."""

from __future__ import annotations

import pytest

from cronrd.errors import RequestError
from cronrd.runtime.cluster.raft_cluster import stamped_by_leader
from cronrd.state import commands as C

NOW = 1_800_000_000.0


def finished(started, ended, state="lost"):
    return C.RunFinished(run_id=7, token=3, node="c", state=state, exit_code=None,
                         signal=None, started_at=started, finished_at=ended, log_path=None)


def test_a_run_end_from_a_fast_clock_is_taken_as_the_leaders_now():
    """A node 30 s fast reported a run lost at its clock's time; the retry
    is due when the run ended, so it waited 30 s (fault suite, clock-jump)."""
    cmd = stamped_by_leader(finished(None, NOW + 30.0), NOW)
    assert cmd.finished_at == NOW and cmd.started_at is None
    cmd = stamped_by_leader(finished(NOW + 29.0, NOW + 30.0, "succeeded"), NOW)
    assert cmd.started_at == NOW and cmd.finished_at == NOW


def test_times_in_the_past_are_the_members_to_say():
    """A report that waited in the outbox while the leader was away keeps
    the time the run really ended (and a clock behind only makes a retry
    due sooner, never later)."""
    cmd = finished(NOW - 40.0, NOW - 35.0, "succeeded")
    assert stamped_by_leader(cmd, NOW) == cmd
    started = C.RunStarted(run_id=7, token=3, node="c", pid=10, started_at=NOW - 2.0,
                           log_path="/x")
    assert stamped_by_leader(started, NOW) == started
    assert stamped_by_leader(
        C.RunStarted(run_id=7, token=3, node="c", pid=10, started_at=NOW + 30.0,
                     log_path="/x"), NOW).started_at == NOW


def test_a_commands_at_is_always_the_leaders():
    for at in (NOW - 100.0, NOW + 100.0):
        cmd = C.NodeLost(node="b", at=at, reason="silent")
        assert stamped_by_leader(cmd, NOW).at == NOW


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_run_time_that_is_not_a_finite_number_is_refused(bad):
    """A member's report decodes with NaN (JSON allows it), and min() keeps a
    NaN: its retry would be due at NaN. The leader refuses it."""
    with pytest.raises(RequestError, match="finite"):
        stamped_by_leader(finished(None, bad), NOW)
    with pytest.raises(RequestError, match="finite"):
        stamped_by_leader(finished(bad, NOW), NOW)
    with pytest.raises(RequestError, match="finite"):
        stamped_by_leader(C.RunStarted(run_id=7, token=3, node="c", pid=10, started_at=bad,
                                       log_path="/x"), NOW)

"""Integration: `cronrd logs` against a real daemon and real runs: streams
kept apart, timestamps, no output, head and tail over max_log_bytes, -n,
--since, and -f following the job into its next runs."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

import pytest

from cronrd.schedule import parse_iso
from harness import REPO

pytestmark = pytest.mark.integration


def run_and_wait(node, job, n=1):
    res = node.cli("run-now", job, "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    return node.runs(job)[0]


def test_stdout_and_stderr_apart_and_interleaved_by_default(node):
    node.write_job("mixed", {"schedule": "@yearly", "command":
                             "echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; echo out2"})
    node.start()
    run = run_and_wait(node, "mixed")
    both = node.cli("logs", "mixed")
    assert both.returncode == 0 and both.stdout == "out1\nerr1\nout2\n", both.stderr
    # Issue 33 (6): a run's id is enough; the job is its.
    by_id = node.cli("logs", "--run", str(run["run_id"]))
    assert by_id.returncode == 0 and by_id.stdout == both.stdout, by_id.stderr
    neither = node.cli("logs")
    assert neither.returncode != 0 and "cronrd logs --run ID" in neither.stderr
    err = node.cli("logs", "mixed", "--stderr")
    assert err.returncode == 0 and err.stdout == "err1\n", err.stderr
    out = node.cli("logs", "mixed", "--stdout")
    assert out.returncode == 0 and out.stdout == "out1\nout2\n", out.stderr
    last = node.cli("logs", "mixed", "-n", "2")
    assert last.returncode == 0 and last.stdout == "err1\nout2\n", last.stderr


def test_timestamps_say_when_each_line_came(node):
    node.write_job("slow", {"schedule": "@yearly",
                            "command": "echo one; sleep 1.2; echo two >&2"})
    node.start()
    run = run_and_wait(node, "slow")
    res = node.cli("logs", "slow", "--timestamps")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [ln.split(" ", 1)[1] for ln in lines] == ["one", "two"]
    stamps = [ln.split(" ", 1)[0] for ln in lines]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", s) for s in stamps)
    seconds = [parse_iso(s[:19] + "Z") + int(s[20:23]) / 1000 for s in stamps]
    assert seconds[1] - seconds[0] >= 1.0
    assert parse_iso(run["started_at"]) - 1 <= seconds[0] <= parse_iso(run["finished_at"]) + 1


def test_a_run_without_output_says_so(node):
    node.write_job("quiet", {"schedule": "@yearly", "command": "true"})
    node.start()
    run = run_and_wait(node, "quiet")
    res = node.cli("logs", "quiet")
    assert res.returncode == 0 and res.stdout == ""
    assert res.stderr.strip() == (f"run {run['run_id']} succeeded at {run['finished_at']}, "
                                  "no output")
    nosuch = node.cli("logs", "nosuch")
    assert nosuch.returncode == 1 and "nosuch" in nosuch.stderr


def test_over_max_log_bytes_the_head_a_note_and_the_tail_are_shown(node):
    node.write_job("loud", {"schedule": "@yearly", "max_log_bytes": "1KiB", "command":
                            'i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done; '
                            "echo the-error >&2"})
    node.start()
    run_and_wait(node, "loud")
    everything = "".join(f"line {i}\n" for i in range(500)) + "the-error\n"
    res = node.cli("logs", "loud")
    assert res.returncode == 0, res.stderr
    dropped = len(everything) - 1024
    assert res.stdout.startswith(everything[:512])
    assert res.stdout.endswith(everything[-512:])
    assert (f"cronrd: {dropped} bytes dropped here (max_log_bytes 1KiB keeps the first "
            "512 bytes and the last 512 bytes)\n") in res.stdout
    err = node.cli("logs", "loud", "--stderr")
    assert err.stdout.endswith("the-error\n") and "line 499" not in err.stdout


def test_since_shows_the_runs_started_since_with_a_header_each(node):
    node.write_job("twice", {"schedule": "@yearly", "command": "echo run-$CRONRD_RUN_ID"})
    node.start()
    first = run_and_wait(node, "twice")
    second = run_and_wait(node, "twice")
    res = node.cli("logs", "twice", "--since", "1h")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"-- run {first['run_id']} (attempt 1), started {first['started_at']} on node n1 --",
        f"run-{first['run_id']}",
        f"-- run {second['run_id']} (attempt 1), started {second['started_at']} on node n1 --",
        f"run-{second['run_id']}"]
    later = node.cli("logs", "twice", "--since", "2099-01-01T00:00:00Z")
    assert later.returncode == 0 and later.stdout == ""
    assert "no run of twice started since 2099-01-01T00:00:00Z" in later.stderr
    bad = node.cli("logs", "twice", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since 'yesterday-ish'" in bad.stderr


class Lines:
    """A follower's stdout, line by line, each wait bounded."""

    def __init__(self, proc):
        self.proc, self.buf = proc, b""

    def next(self, timeout=20.0) -> str:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no line within {timeout}s (got {self.buf!r})"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                assert chunk, f"the follower ended (got {self.buf!r})"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


def follower(node, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "cronrd", "--config", str(node.config_path), "logs", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_follow_of_a_job_without_runs_waits_for_its_first(node):
    node.write_job("fresh", {"schedule": "@yearly", "command": "echo hello"})
    node.start()
    proc = follower(node, "fresh", "-f")
    try:
        out = Lines(proc)
        run_id = node.call("run_now", {"job": "fresh"})["run_id"]
        assert out.next().startswith(f"-- run {run_id} (attempt 1), started ")
        assert out.next() == "hello"
    finally:
        proc.terminate()
        proc.wait(10)
    nosuch = node.cli("logs", "nosuch", "-f")
    assert nosuch.returncode == 1 and "nosuch" in nosuch.stderr


def test_follow_goes_on_into_the_jobs_next_runs(node):
    node.write_job("again", {"schedule": "@yearly",
                             "command": "echo start-$CRONRD_RUN_ID; echo oops >&2"})
    node.start()
    first = run_and_wait(node, "again")
    follower = subprocess.Popen(
        [sys.executable, "-m", "cronrd", "--config", str(node.config_path), "logs", "again",
         "-f", "--stdout"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        out = Lines(follower)
        assert out.next() == (f"-- run {first['run_id']} (attempt 1), started "
                              f"{first['started_at']} on node n1 --")
        assert out.next() == f"start-{first['run_id']}"
        second = run_and_wait(node, "again")
        assert out.next() == (f"-- run {second['run_id']} (attempt 1), started "
                              f"{second['started_at']} on node n1 --")
        assert out.next() == f"start-{second['run_id']}"
        assert follower.poll() is None  # still following
    finally:
        follower.terminate()
        follower.wait(10)


def test_a_retry_waiting_for_its_time_is_not_the_run_shown(node):
    node.write_job("flaky", {"schedule": "@yearly", "retries": {"max": 1, "delay": "1h"},
                             "command": "echo attempt-$CRONRD_ATTEMPT; exit 1"})
    node.start()
    node.call("run_now", {"job": "flaky"})
    runs = node.wait_runs(lambda rs: len(rs) == 2 and rs[1]["state"] == "failed"
                          and rs[0]["state"] in ("pending", "assigned"),
                          job="flaky", what="a retry waiting for its time")
    retry, failed = runs
    latest = node.cli("logs", "flaky")
    assert latest.returncode == 0 and latest.stdout == "attempt-1\n", latest.stderr
    waiting = node.cli("logs", "flaky", "--run", str(retry["run_id"]))
    assert waiting.returncode == 0 and waiting.stdout == ""
    assert waiting.stderr.strip() == (f"run {retry['run_id']} has not started yet "
                                      f"({retry['state']})")


def test_with_the_daemon_down_logs_reads_the_same_way(node):
    node.write_job("mixed", {"schedule": "@yearly", "command": "echo out; sleep 0.2; "
                             "echo err >&2; sleep 0.2; echo more"})
    node.write_job("quiet", {"schedule": "@yearly", "command": "true"})
    node.start()
    mixed = run_and_wait(node, "mixed")
    quiet = run_and_wait(node, "quiet")
    node.terminate()
    res = node.cli("logs", "mixed", "--stderr")
    assert res.returncode == 0 and res.stdout == "err\n", res.stderr
    by_id = node.cli("logs", "--run", str(mixed["run_id"]), "--stderr")
    assert by_id.returncode == 0 and by_id.stdout == "err\n", by_id.stderr
    assert "daemon not running" in res.stderr
    assert node.cli("logs", "mixed", "-n", "2").stdout == "err\nmore\n"
    stamped = node.cli("logs", "mixed", "--timestamps").stdout.splitlines()
    assert [ln.split(" ", 1)[1] for ln in stamped] == ["out", "err", "more"]
    res = node.cli("logs", "quiet")
    assert res.returncode == 0 and res.stdout == ""
    assert (f"run {quiet['run_id']} succeeded at {quiet['finished_at']}, no output"
            in res.stderr)
    since = node.cli("logs", "mixed", "--since", "1h")
    assert since.stdout.startswith("-- run ") and since.stdout.endswith("out\nerr\nmore\n")
    assert node.cli("logs", "nosuch").returncode == 1

"""Run log files (cronrd/runtime/runs/logs.py): retention takes a log's
sidecars (index, tail ring) with it, and leaves none behind."""

from __future__ import annotations

import os

from cronrd.runtime.runs.logs import prune_logs, remove_run_log

SIDECARS = (".idx", ".tail", ".tidx")


def make_log(path, mtime):
    for suffix in ("", *SIDECARS):
        with open(str(path) + suffix, "wb") as f:
            f.write(b"x")
    os.utime(path, (mtime, mtime))


def test_pruned_logs_take_their_sidecars_along(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    old, new, busy = job / "a-r1.log", job / "a-r2.log", job / "a-r3.log"
    make_log(old, 1000)
    make_log(new, 99_000)
    make_log(busy, 1000)
    removed = prune_logs(str(tmp_path), max_age=10_000, max_files=10, now=100_000,
                         active={str(busy)})
    assert removed == 1
    assert sorted(os.listdir(job)) == sorted(
        [n + s for n in ("a-r2.log", "a-r3.log") for s in ("", *SIDECARS)])


def test_sidecars_whose_log_is_gone_are_removed(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    make_log(job / "a-r1.log", 99_000)
    os.unlink(job / "a-r1.log")  # removed by hand
    (job / "notes.txt").write_text("not ours")
    prune_logs(str(tmp_path), max_age=10_000, max_files=10, now=100_000)
    assert os.listdir(job) == ["notes.txt"]


def test_a_dropped_log_goes_with_whatever_sidecars_it_has(tmp_path):
    (tmp_path / "a.log").write_bytes(b"")
    (tmp_path / "a.log.idx").write_bytes(b"")
    remove_run_log(str(tmp_path / "a.log"))
    assert os.listdir(tmp_path) == []

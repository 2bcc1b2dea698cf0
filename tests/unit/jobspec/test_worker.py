"""The job-file parser process (cronrd/jobspec/worker.py): a real worker
started with the command the watcher uses, JSON lines in and out."""

from __future__ import annotations

import json
import os
import subprocess

from cronrd.jobspec import JobSpec
from cronrd.jobspec.worker import argv, problems_of, scan_for_sync


def test_a_worker_answers_each_file_and_survives_a_bad_request(tmp_path):
    good = tmp_path / "a.yaml"
    good.write_text("jobs:\n  - name: x\n    schedule: '@daily'\n    command: 'true'\n"
                    "  - name: y\n    schedule: '61 * * * *'\n    command: 'true'\n")
    proc = subprocess.Popen(argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        proc.stdin.write("not json\n")
        proc.stdin.write(json.dumps({"path": str(good), "allowed": [os.geteuid()],
                                     "known": None}) + "\n")
        proc.stdin.flush()
        bad = json.loads(proc.stdout.readline())
        assert "error" in bad
        answer = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        assert proc.wait(10) == 0
    text, digest = JobSpec(name="x", schedule="@daily", command="true").canonical()
    assert answer["jobs"] == [["x", 2, text, digest]]
    (problem,) = problems_of(answer)
    assert (problem.line, "invalid schedule '61 * * * *'") == (
        6, problem.message[:len("invalid schedule '61 * * * *'")])
    # the same answer as in the daemon's own thread
    assert scan_for_sync(str(good), {os.geteuid()}, None) == answer


def test_an_unchanged_file_is_not_parsed(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("schedule: '@daily'\ncommand: 'true'\n")
    first = scan_for_sync(str(f), {os.geteuid()}, None)
    again = scan_for_sync(str(f), {os.geteuid()}, first["digest"])
    assert again["unchanged"] and again["jobs"] == [] and first["jobs"][0][0] == "a"


def test_a_worker_checks_pools_it_is_given(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("schedule: '@daily'\ncommand: 'true'\npool: dbb\n")
    proc = subprocess.Popen(argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        proc.stdin.write(json.dumps({"path": str(path), "allowed": [os.geteuid()],
                                     "known": None, "pools": {"db": 2}}) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        assert proc.wait(10) == 0
    (problem,) = problems_of(answer)
    assert (problem.line, problem.col) == (3, 7) and problem.message.startswith(
        "unknown pool 'dbb'")
    assert answer == scan_for_sync(str(path), {os.geteuid()}, None, {"db": 2})
    assert answer["digest"] != scan_for_sync(str(path), {os.geteuid()}, None)["digest"]

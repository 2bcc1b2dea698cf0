"""Run records (cronrd/runtime/runs/records.py): parsing what a supervisor
wrote, cut-short lines, and never naming a process that is not the run's."""

from __future__ import annotations

import json
import os

from cronrd.runtime.runs import records
from cronrd.runtime.runs.supervisor import boot_id, start_ticks


def write(path, *events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)


def test_a_full_record_reads_back(tmp_path):
    me = os.getpid()
    path = write(tmp_path / "12.abc",
                 {"event": "spawned", "boot": boot_id(), "sup": me, "sup_start": start_ticks(me),
                  "pid": me, "pid_start": start_ticks(me), "at": 1.0},
                 {"event": "started", "at": 2.0},
                 {"event": "exited", "status": 3 << 8, "started": True, "written": 10, "at": 3.0},
                 {"event": "closed", "written": 10, "at": 3.1})
    rec = records.read(path)
    assert (rec.run_id, rec.key, rec.started_at, rec.status, rec.written) == \
        (12, "12.abc", 2.0, 3 << 8, 10)
    assert rec.this_boot() and rec.closed and not rec.supervisor_alive()  # closed: done
    assert not rec.job_alive()  # exited: never signalled again


def test_a_line_cut_short_by_a_crash_is_ignored(tmp_path):
    path = tmp_path / "5.k"
    path.write_text(json.dumps({"event": "spawned", "boot": boot_id(), "pid": 1}) + "\n"
                    + '{"event": "exited", "stat')
    rec = records.read(str(path))
    assert rec.run_id == 5 and rec.status is None and not rec.exited


def test_a_pid_whose_start_time_differs_is_not_the_job(tmp_path):
    # pid 1 exists, but it is not a process the supervisor started.
    path = write(tmp_path / "7.k", {"event": "spawned", "boot": boot_id(), "sup": 1,
                                    "sup_start": 12345678, "pid": 1, "pid_start": 12345678})
    rec = records.read(path)
    assert not rec.job_alive() and not rec.supervisor_alive()


def test_another_boots_pids_name_nothing(tmp_path):
    me = os.getpid()
    path = write(tmp_path / "8.k", {"event": "spawned", "boot": "another-boot", "sup": me,
                                    "sup_start": start_ticks(me), "pid": me,
                                    "pid_start": start_ticks(me)})
    rec = records.read(path)
    assert not rec.this_boot() and not rec.job_alive() and not rec.supervisor_alive()


def test_junk_files_and_wrong_types_are_not_records(tmp_path):
    (tmp_path / "notify").write_text("x")
    (tmp_path / "supervised-since").write_text("")
    os.symlink("/etc/passwd", tmp_path / "9.link")
    write(tmp_path / "10.k", {"event": "spawned", "pid": "1", "sup": True, "boot": 5},
          ["not", "a", "dict"], {"event": "exited", "status": "0"})
    found = records.scan(str(tmp_path))
    assert list(found) == [10]  # the symlink is not followed, the rest are not records
    (rec,) = found[10]
    assert rec.pid is None and rec.sup is None and rec.boot is None and not rec.exited


def test_first_supervised_start_is_true_once(tmp_path):
    assert records.first_supervised_start(str(tmp_path))
    assert not records.first_supervised_start(str(tmp_path))

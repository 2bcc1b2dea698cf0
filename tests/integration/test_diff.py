"""Integration (issue 35): `cronrd diff` as a CI step runs it: real
processes on a pair of real-looking job directories (a schedule moved
across Berlin's spring-forward, a new job that over-commits a pool, a
parent removed), exit codes 0/1/2, --json; and a directory against the
running cluster, whose recorded durations make an SLA unmeetable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import REPO, wait_for

pytestmark = pytest.mark.integration

START = "2027-03-25T00:00:00Z"


def files(d: Path, **jobs: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, body in jobs.items():
        (d / f"{name}.yaml").write_text(textwrap.dedent(body))
    return d


def cronrd(*args: str, config: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "cronrd"] + (["--config", str(config)] if config else [])
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


BACKUP_OLD = """\
    description: Nightly database backup
    schedule: "0 1 * * *"
    timezone: Europe/Berlin
    command: /usr/local/bin/backup --full
    pool: db
    timeout: 45m
    """
ETL = """\
    jobs:
      - name: extract
        schedule: "0 4 * * *"
        timezone: Europe/Berlin
        command: /opt/etl/extract
      - name: load
        schedule: "@after"
        depends_on: [extract]
        command: /opt/etl/load
    """


def test_diff_two_directories_a_dst_change_a_pool_conflict_and_exit_codes(tmp_path):
    cfg = tmp_path / "cronrd.yaml"
    cfg.write_text("node_id: ci\ntimezone: UTC\npools:\n  db: {slots: 1}\n")
    old = files(tmp_path / "old", backup=BACKUP_OLD, etl=ETL,
                reindex='schedule: "0 3 * * 0"\ncommand: /usr/local/bin/reindex\npool: db\n'
                        'timeout: 1h\n')
    new = files(tmp_path / "new",
                backup=BACKUP_OLD.replace('"0 1 * * *"', '"30 2 * * *"'),
                etl=ETL.replace("      - name: extract\n        schedule: \"0 4 * * *\"\n"
                                "        timezone: Europe/Berlin\n"
                                "        command: /opt/etl/extract\n", ""),
                reindex='schedule: "0 3 * * 0"\ncommand: /usr/local/bin/reindex\npool: db\n'
                        'timeout: 1h\n',
                vacuum='schedule: "45 2 * * *"\ntimezone: Europe/Berlin\n'
                       'command: /usr/local/bin/vacuum\npool: db\ntimeout: 30m\n')

    res = cronrd("diff", str(old), str(new), "--from", START, config=cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout
    assert "job backup: changed (schedule)" in out
    assert ("dst: 2027-03-28: the clocks go forward in Europe/Berlin; 02:30 does not exist "
            "that day: it runs at 2027-03-28T01:00:00Z, the jump") in out
    assert "job extract: removed, 7 fire time(s) no longer run" in out
    assert "depends_on: depends on extract, which the new set does not define" in out
    assert "job vacuum: added, 7 fire time(s)" in out
    assert "pool db: 2 slots wanted at 2027-03-25T01:45:00Z (backup, vacuum), it has 1" in out
    assert out.rstrip().endswith("4 job(s) changed, 1 unchanged, 1 pool conflict(s)")

    doc = json.loads(cronrd("diff", str(old), str(new), "--from", START, "--json",
                            config=cfg).stdout)
    assert doc["changed"] is True and doc["unchanged"] == ["reindex"]
    backup = next(j for j in doc["jobs"] if j["job"] == "backup")
    assert backup["fire_times"]["old"] == backup["fire_times"]["new"] == 7
    assert ["2027-03-28T00:00:00Z", "2027-03-28T01:00:00Z"] in backup["fire_times"]["moved"]
    assert doc["pools"] and doc["problems"] == []

    same = cronrd("diff", str(old), str(old), config=cfg)
    assert same.returncode == 0 and "0 job(s) changed" in same.stdout, same.stderr
    (new / "broken.yaml").write_text('schedule: "61 * * * *"\ncommand: x\n')
    bad = cronrd("diff", str(old), str(new), config=cfg)
    assert bad.returncode == 2 and f"{new}/broken.yaml:1:" in bad.stdout, bad.stdout
    gone = cronrd("diff", str(old), str(tmp_path / "nope"), config=cfg)
    assert gone.returncode == 2 and "no such directory or job file" in gone.stderr


def test_diff_a_directory_against_the_running_cluster(node, tmp_path):
    node.write_job("slow", {"schedule": "@yearly", "command": "sleep 1.2"})
    node.start()
    for _ in range(2):
        assert node.cli("run-now", "slow", "--wait").returncode == 0
    new = files(tmp_path / "new", slow='schedule: "@yearly"\ncommand: sleep 1.2\n'
                                       'sla: {finish_within: 1s}\n')
    res = node.cli("diff", "cluster", str(new), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    (slow,) = doc["jobs"]
    assert slow["change"] == "changed" and slow["keys"] == ["sla"]
    (sla,) = [n["text"] for n in slow["notes"] if n["kind"] == "sla"]
    assert sla.startswith("sla.finish_within 1s cannot be met: its runs take 1s2")
    wait_for(lambda: node.cli("diff", "cluster", str(node.jobs_dir)).returncode == 0, 10,
             what="the cluster and its own jobs_dir agreeing")

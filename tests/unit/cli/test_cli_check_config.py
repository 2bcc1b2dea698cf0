"""`cronrd check-config` and `cronrd validate` on a directory holding a daemon
config, through click's CliRunner (no daemon)."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from cronrd.cli import main

ROOT = Path(__file__).resolve().parents[3]


def run(*argv, env=None):
    return CliRunner().invoke(main, list(argv), env=env, catch_exceptions=False)


def write_config(tmp_path, text: str, name: str = "cronrd.yaml") -> Path:
    (tmp_path / "jobs").mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = "node_id: n1\njobs_dir: jobs\ndata_dir: state\nlog_dir: logs\nsocket: run/cronrd.sock\n"


def test_a_good_single_host_config_is_one_line_of_what_was_found(tmp_path):
    path = write_config(tmp_path, GOOD)
    res = run("check-config", str(path))
    assert res.exit_code == 0, res.output
    assert res.stdout == (f"{path}: ok: node n1, jobs_dir {tmp_path}/jobs, data_dir "
                          f"{tmp_path}/state, single host (no cluster section)\n")
    assert not (tmp_path / "state").exists()  # checking creates nothing


def test_a_good_cluster_config_names_its_members(tmp_path):
    path = write_config(tmp_path, GOOD + (
        "cluster:\n"
        "  listen: 127.0.0.1:7001\n"
        "  initial_members: {n1: 127.0.0.1:7001, n2: 127.0.0.1:7002}\n"
        "  insecure: true\n"))
    res = run("check-config", str(path))
    assert res.exit_code == 0, res.output
    assert res.stdout.endswith(", cluster node listening on 127.0.0.1:7001, initial members "
                               "n1, n2, INSECURE (no TLS)\n"), res.stdout


def test_every_problem_is_reported_at_once_then_a_count(tmp_path):
    (tmp_path / "afile").write_text("")
    path = write_config(tmp_path, (
        "node_id: n1\n"                                   # 1
        "jobs_dir: jobs\n"                                # 2
        "data_dir: afile/state\n"                         # 3
        "log_levl: debug\n"                               # 4
        "cluster:\n"                                      # 5
        "  listen: 127.0.0.1:7001\n"                      # 6
        "  initial_members: {n1: 127.0.0.1:7001}\n"       # 7
        "  tls: {ca: ca.crt, cert: n1.crt, key: n1.key}\n"))  # 8
    res = run("check-config", str(path))
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [
        f"{path}:3:11", f"{path}:4:1", f"{path}:8:13", f"{path}:8:27", f"{path}:8:40"], lines
    assert "data_dir" in lines[0] and "cannot be created" in lines[0]
    assert "unknown key 'log_levl' (did you mean 'log_level'?)" in lines[1]
    assert [line.split(": ", 2)[1] for line in lines[2:]] == [
        "cluster.tls.ca", "cluster.tls.cert", "cluster.tls.key"]
    assert res.stderr == f"5 problems in {path}\n"


def test_the_default_is_the_config_the_cli_uses(tmp_path, monkeypatch):
    path = write_config(tmp_path, GOOD)
    other = write_config(tmp_path, "node_id: n2\nmax_running: -1\njobs_dir: jobs\n", "other.yaml")
    res = run("--config", str(path), "check-config")
    assert res.exit_code == 0 and res.stdout.startswith(f"{path}: ok: node n1")
    res = run("check-config", env={"CRONRD_CONFIG": str(other)})
    assert res.exit_code == 1 and res.stdout.startswith(f"{other}:2:14: max_running")
    # An explicit FILE wins over both.
    res = run("--config", str(other), "check-config", str(path),
              env={"CRONRD_CONFIG": str(other)})
    assert res.exit_code == 0, res.output


def test_a_missing_or_broken_file_is_one_problem(tmp_path):
    res = run("check-config", str(tmp_path / "nope.yaml"))
    assert res.exit_code == 1
    assert res.stdout.startswith(f"config file {tmp_path}/nope.yaml not found; pass --config")
    path = write_config(tmp_path, "node_id: [n1\n")
    res = run("check-config", str(path))
    assert res.exit_code == 1
    assert res.stdout.startswith(f"{path}:2:1: not valid YAML")
    assert res.stderr == f"1 problem in {path}\n"


# -- validate: a daemon config among the job files ---------------------------------------

def test_validate_names_a_config_and_points_at_its_jobs_dir(tmp_path, monkeypatch):
    path = write_config(tmp_path, GOOD)
    (tmp_path / "jobs" / "ok.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    (tmp_path / "broken.yaml").write_text("schedule: '@daily'\n")
    monkeypatch.chdir(tmp_path)
    res = run("validate", "--no-permissions", ".")
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [
        "./cronrd.yaml: this is a daemon config, not a job file; check it with "
        "`cronrd check-config ./cronrd.yaml`; its jobs_dir is jobs: `cronrd validate jobs`",
        "./broken.yaml:1:1: missing required key 'command' (for example command: "
        "/usr/local/bin/backup.sh)"]
    assert res.stderr == "1 problem(s); 1 daemon config(s) not checked; 0 job(s) valid\n"
    # The commands it names work as typed.
    assert run("check-config", "./cronrd.yaml").exit_code == 0
    res = run("validate", "--no-permissions", "jobs")
    assert res.exit_code == 0 and res.stderr == "1 job(s) valid\n"
    assert path.exists()


def test_validate_the_shipped_examples_directory(monkeypatch):
    monkeypatch.chdir(ROOT)
    res = run("validate", "--no-permissions", "examples")
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    # No job problems: the config is not read as a job; the example jobs and
    # the cluster configs, in subdirectories, are pointed at.
    assert lines[0].startswith(
        "examples/cronrd.yaml: this is a daemon config, not a job file; check it with "
        "`cronrd check-config examples/cronrd.yaml`"), lines
    assert "`cronrd validate examples/jobs`" in res.stdout
    assert ("examples/cluster: a subdirectory with YAML files, which neither validate nor "
            "the daemon reads; check them with `cronrd validate examples/cluster`") in lines
    assert res.stderr == "0 problem(s); 1 daemon config(s) not checked; 0 job(s) valid\n"


def test_validate_tells_job_files_from_configs(tmp_path):
    # Keys both may have (timezone, max_running) do not make a job file a config;
    # a misspelt config key does not stop a config from being one.
    (tmp_path / "job.yaml").write_text("timezone: UTC\nmax_running: 2\nschedule: bad\n")
    (tmp_path / "conf.yaml").write_text("nodeid: x\ndata_dir: /tmp/x\n")
    (tmp_path / "list.yaml").write_text("jobs:\n  - {name: a, node_id: x}\n")
    res = run("validate", "--no-permissions", str(tmp_path))
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines[0] == (f"{tmp_path}/conf.yaml: this is a daemon config, not a job file; "
                        f"check it with `cronrd check-config {tmp_path}/conf.yaml`"
                        + ("; its jobs_dir is /etc/cronrd.d: `cronrd validate /etc/cronrd.d`"
                           if os.path.isdir("/etc/cronrd.d") else ""))
    assert all(line.startswith((f"{tmp_path}/job.yaml:", f"{tmp_path}/list.yaml:"))
               for line in lines[1:]), lines
    assert any(line.startswith(f"{tmp_path}/job.yaml:") for line in lines)
    assert any(line.startswith(f"{tmp_path}/list.yaml:") for line in lines)


def test_validate_points_at_subdirectories_it_does_not_read(tmp_path, monkeypatch):
    (tmp_path / "top.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    for sub in ("more", "empty", ".hidden"):
        (tmp_path / sub).mkdir()
    (tmp_path / "more" / "a.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    (tmp_path / ".hidden" / "b.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    (tmp_path / "empty" / "notes.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    res = run("validate", "--no-permissions", ".")
    assert res.exit_code == 0  # a note, not a problem: the daemon does not read them either
    assert res.stdout == ("./more: a subdirectory with YAML files, which neither validate nor "
                          "the daemon reads; check them with `cronrd validate ./more`\n")
    assert res.stderr == "1 job(s) valid\n"
    res = run("validate", "--no-permissions", ".", "more")  # given too: no note
    assert res.exit_code == 0 and res.stdout == "" and res.stderr == "2 job(s) valid\n"
    res = run("validate", "--no-permissions", "./more")
    assert res.exit_code == 0 and res.stderr == "1 job(s) valid\n"


def test_validate_points_at_the_jobs_next_to_a_config_whose_jobs_dir_is_missing(tmp_path):
    # As in a checkout: the example config names a live jobs_dir made later,
    # its example jobs are in a subdirectory next to it.
    (tmp_path / "cronrd.yaml").write_text("node_id: n1\njobs_dir: ../live/jobs\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    res = run("validate", "--no-permissions", str(tmp_path))
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [
        f"{tmp_path}/cronrd.yaml: this is a daemon config, not a job file; check it with "
        f"`cronrd check-config {tmp_path}/cronrd.yaml`",
        f"{tmp_path}/jobs: a subdirectory with YAML files, which neither validate nor the "
        f"daemon reads; check them with `cronrd validate {tmp_path}/jobs`"]


def test_validate_warns_of_a_notifier_the_config_does_not_define(tmp_path):
    path = write_config(tmp_path, GOOD + "notifiers:\n  chat: {type: command, command: 'true'}\n")
    job = tmp_path / "jobs" / "j.yaml"
    job.write_text("schedule: '@daily'\ncommand: 'true'\nnotify: [chat, {to: pager}]\n")
    res = run("--config", str(path), "validate", "--no-permissions", str(tmp_path / "jobs"))
    assert res.exit_code == 0  # a warning: another host's config may define it
    assert res.stdout.splitlines() == [
        f"{job}:1:1: warning: job j: notify names 'pager', which the daemon config {path} "
        "does not define under notifiers: (defined: chat); its events would reach nobody there"]
    assert res.stderr == "1 job(s) valid, 1 warning(s) about this host\n"


def test_check_config_names_the_notifiers_and_checks_their_secret_files(tmp_path):
    path = write_config(tmp_path, GOOD + (
        "notifiers:\n  page: {type: command, command: 'true'}\n"
        "  chat: {type: webhook, url: 'http://127.0.0.1:9/x', secret_file: chat.secret}\n"
        "notify: [page]\n"))
    res = run("check-config", str(path))
    assert res.exit_code == 1
    assert f"notifiers.chat.secret_file: cannot read {tmp_path / 'chat.secret'}" in res.stdout
    (tmp_path / "chat.secret").write_text("k\n")
    res = run("check-config", str(path))
    assert res.exit_code == 0, res.stdout
    assert res.stdout.rstrip().endswith("; notifiers chat (webhook), page (command), default "
                                        "notify: page")


def test_validate_names_a_calendar_the_config_lacks(tmp_path, monkeypatch):
    """Issue 35: a job's calendar: must name the config's calendars, as the
    daemon requires when it loads the file."""
    path = write_config(tmp_path, GOOD + "calendars:\n  closures: {dates: [2026-12-24]}\n")
    (tmp_path / "jobs" / "ok.yaml").write_text(
        "schedule: '@daily'\ncommand: 'true'\ncalendar: {skip: [closures, weekends]}\n")
    (tmp_path / "jobs" / "typo.yaml").write_text(
        "schedule: '@daily'\ncommand: 'true'\ncalendar:\n  skip: [closure]\n")
    res = run("--config", str(path), "validate", "--no-permissions")
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [
        f"{tmp_path}/jobs/typo.yaml:4: job 'typo': calendar names 'closure', which the daemon "
        "config does not define (it defines: closures, weekdays, weekends); add it under "
        "calendars: in the daemon config or fix the name"]


def test_validate_warns_of_an_at_time_that_has_passed(tmp_path):
    """Issue 35: a job loaded after its @at time never fires; validate says so."""
    (tmp_path / "old.yaml").write_text('schedule: "@at 2020-01-01T00:00:00Z"\ncommand: "true"\n')
    (tmp_path / "new.yaml").write_text('schedule: "@at 2999-01-01T00:00:00Z"\ncommand: "true"\n')
    res = run("validate", "--no-permissions", str(tmp_path))
    assert res.exit_code == 0
    assert res.stdout.splitlines() == [
        f"{tmp_path}/old.yaml:1:1: warning: job old: its @at time (2020-01-01T00:00:00Z) has "
        "passed: a job loaded now never fires (its schedule starts when it is first loaded); "
        "a one-off run now is `cronrd run-now old`"]

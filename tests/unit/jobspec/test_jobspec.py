"""Job files -> JobSpec: every validation path, positions, permissions, directories."""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
from pathlib import Path

import pytest

from cronrd.jobspec import (
    DirResult,
    FileResult,
    JobSpec,
    Limits,
    Problem,
    RetryPolicy,
    RunOn,
    check_file_permissions,
    load_job_file,
    load_jobs_dir,
    parse_job_text,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "jobs"
BASE = 'schedule: "0 3 * * *"\ncommand: /bin/true\n'


def problems(text: str, path: str = "job.yaml") -> list[str]:
    return [str(p) for p in parse_job_text(text, path).problems]


def one_problem(text: str, path: str = "job.yaml") -> str:
    found = problems(text, path)
    assert len(found) == 1, found
    return found[0]


def job(text: str, path: str = "job.yaml") -> JobSpec:
    result = parse_job_text(text, path)
    assert result.problems == (), [str(p) for p in result.problems]
    assert len(result.jobs) == 1
    return result.jobs[0]


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(textwrap.dedent(text))
    os.chmod(path, mode)
    return path


# --------------------------------------------------------------------------
# valid jobs
# --------------------------------------------------------------------------


def test_minimal_job_gets_defaults_and_name_from_file_stem():
    spec = job("# nightly\n" + BASE, "/etc/cronrd.d/db-backup.yaml")
    assert spec == JobSpec(name="db-backup", schedule="0 3 * * *", command="/bin/true",
                           source="/etc/cronrd.d/db-backup.yaml", line=2)
    assert spec.concurrency == "forbid" and spec.catchup == "latest"
    assert spec.retries == RetryPolicy(max=0, delay=10.0, backoff=2.0, max_delay=3600.0, jitter=0.0)
    assert spec.run_on == RunOn("any", ())
    assert spec.kill_grace == 10.0 and spec.catchup_window == 86400.0
    assert spec.max_log_bytes == 10 * 1024 * 1024 and spec.timeout is None and spec.enabled is True


def test_yml_extension_stem():
    assert job(BASE, "/d/report.v2.yml").name == "report.v2"


def test_every_field_is_parsed():
    spec = job("""
name: full
description: |
  Does everything.
schedule: "*/5 * * * *"
timezone: Europe/Berlin
command: [/usr/bin/env, "--", "x y"]
user: "1000"
group: 100
env: {PATH: /usr/bin, LANG: C.UTF-8, _X: ""}
working_dir: /srv/app
timeout: 1h30m
kill_grace: 500ms
concurrency: replace
retries: {max: 3, delay: 30s, backoff: 1.5, max_delay: 10m, jitter: 2s}
catchup: all
catchup_window: 2h
jitter: 15
run_on: {tags: [web, db]}
on_node_loss: fail
enabled: false
max_log_bytes: 1MiB
""", "/x/whatever.yaml")
    assert spec == JobSpec(
        name="full", schedule="*/5 * * * *", command=("/usr/bin/env", "--", "x y"),
        timezone="Europe/Berlin", user="1000", group="100",
        env=(("LANG", "C.UTF-8"), ("PATH", "/usr/bin"), ("_X", "")), working_dir="/srv/app",
        timeout=5400.0, kill_grace=0.5, concurrency="replace",
        retries=RetryPolicy(max=3, delay=30.0, backoff=1.5, max_delay=600.0, jitter=2.0),
        catchup="all", catchup_window=7200.0, jitter=15.0, run_on=RunOn("tags", ("db", "web")),
        on_node_loss="fail", enabled=False, description="Does everything.",
        max_log_bytes=1048576, source="/x/whatever.yaml", line=2,
    )


@pytest.mark.parametrize("text, expected", [
    ("retries: 4", RetryPolicy(max=4)),
    ("retries: {max: 2}", RetryPolicy(max=2)),
    ("retries: {backoff: 1}", RetryPolicy(backoff=1.0)),
    ("retries: {}", RetryPolicy()),
])
def test_retries_forms(text, expected):
    assert job(BASE + text).retries == expected


@pytest.mark.parametrize("text, expected", [
    ("run_on: any", RunOn("any", ())),
    ("run_on: all", RunOn("all", ())),
    ("run_on: node-3", RunOn("nodes", ("node-3",))),
    ("run_on: [n2, n1]", RunOn("nodes", ("n1", "n2"))),
    ("run_on: {tags: [gpu]}", RunOn("tags", ("gpu",))),
])
def test_run_on_forms(text, expected):
    assert job(BASE + text).run_on == expected


@pytest.mark.parametrize("text, attr, expected", [
    ("timeout: null", "timeout", None),
    ("timeout: 30", "timeout", 30.0),
    ("heartbeat_timeout: 5m", "heartbeat_timeout", 300.0),
    ("timezone: ~", "timezone", None),
    ("user:", "user", None),
    ("user: 0", "user", "0"),
    ("working_dir: null", "working_dir", None),
    ("max_log_bytes: 2048", "max_log_bytes", 2048),
    ("max_log_bytes: 1024", "max_log_bytes", 1024),
    ("kill_grace: 0", "kill_grace", 0.0),
    ("jitter: 1m", "jitter", 60.0),
    ("schedule: '@every 5s'", "schedule", "@every 5s"),
    ("command: '  echo hi  '", "command", "  echo hi  "),
])
def test_optional_values(text, attr, expected):
    if text.startswith(("schedule", "command")):
        key = text.split(":")[0]
        base = "\n".join(line for line in BASE.splitlines() if not line.startswith(key)) + "\n"
    else:
        base = BASE
    assert getattr(job(base + text), attr) == expected


def test_merge_keys_share_defaults_and_own_keys_win():
    result = parse_job_text("""
x-defaults: &defaults
  timeout: 5m
  concurrency: allow
jobs:
  - <<: *defaults
    name: a
    schedule: "@hourly"
    command: a
    timeout: 1m
  - <<: *defaults
    name: b
    schedule: "@daily"
    command: b
""", "many.yaml")
    assert result.problems == ()
    a, b = result.jobs
    assert (a.name, a.timeout, a.concurrency) == ("a", 60.0, "allow")
    assert (b.name, b.timeout, b.concurrency) == ("b", 300.0, "allow")
    assert (a.line, b.line) == (6, 11)


def test_empty_jobs_list_is_valid_and_empty():
    assert parse_job_text("jobs: []\n", "f.yaml") == FileResult("f.yaml", (), ())


# --------------------------------------------------------------------------
# one field wrong: exact position and message (the bad line is line 3)
# --------------------------------------------------------------------------

BAD_FIELD_CASES = [
    ("concurrency: sometimes", "3:14: concurrency must be one of allow, forbid, replace, queue "
                               "(got 'sometimes')"),
    ("concurrency: no", "3:14: concurrency must be one of allow, forbid, replace, queue "
                        "(got no, which YAML reads as the boolean false)"),
    ("concurrency: forbidd", "3:14: concurrency must be one of allow, forbid, replace, queue "
                             "(got 'forbidd'; did you mean 'forbid'?)"),
    ("catchup: off", "3:10: catchup must be one of none, latest, all "
                     "(got off, which YAML reads as the boolean false)"),
    ("catchup: 3", "3:10: catchup must be one of none, latest, all (got the number 3)"),
    ("on_node_loss: ignore", "3:15: on_node_loss must be one of retry, fail (got 'ignore')"),
    ("on_node_loss: ~", "3:15: on_node_loss must be one of retry, fail (got an empty value (null)); "
                        "remove the key to use the default"),
    ("heartbeat_timeout: 0", "3:20: heartbeat_timeout must be greater than 0 (got 0)"),
    ("triggers: deploy", "3:11: triggers must be a non-empty list of hook names, e.g. "
                         "triggers: [deploy] (the daemon config's hooks:) (got 'deploy')"),
    ("executor: ~", "3:11: executor must be local or a mapping with type: and its keys; e.g. "
                    "executor: {type: container, image: localhost/tools:1, network: none} "
                    "(got an empty value (null))"),
    ("heartbeat_timeout: null", "3:20: heartbeat_timeout must be a duration such as 30s, 5m or "
                                "1h30m (got an empty value (null)); remove the key"),
    ("timeout: 0", "3:10: timeout must be greater than 0 (got 0); use timeout: null for no timeout"),
    ("timeout: 0s", "3:10: timeout must be greater than 0 (got 0s); use timeout: null for no timeout"),
    ("timeout: soon", "3:10: timeout: bad duration 'soon': use a number with units ms, s, m, h, d, w, "
                      "e.g. 30s or 1h30m"),
    ("timeout: -5s", "3:10: timeout: bad duration '-5s': must not be negative; use a number with units "
                     "ms, s, m, h, d, w, e.g. 30s or 1h30m"),
    ("timeout: [1]", "3:10: timeout must be a duration such as 30s, 5m or 1h30m (got a list)"),
    ("timeout: yes", "3:10: timeout must be a duration such as 30s, 5m or 1h30m "
                     "(got yes, which YAML reads as the boolean true)"),
    ("kill_grace: ~", "3:13: kill_grace must be a duration such as 30s, 5m or 1h30m (got an empty value "
                      "(null)); remove the key to use the default"),
    ("kill_grace: -1", "3:13: kill_grace: bad duration '-1': must not be negative; use a number with units "
                       "ms, s, m, h, d, w, e.g. 30s or 1h30m"),
    ("catchup_window: 1y", "3:17: catchup_window: bad duration '1y': use a number with units ms, s, m, h, "
                           "d, w, e.g. 30s or 1h30m"),
    ("jitter: 2021-01-01", "3:9: jitter must be a duration such as 30s, 5m or 1h30m "
                           "(got 2021-01-01, which YAML reads as a date)"),
    ("retries: -1", "3:10: retries must be a whole number >= 0 (got -1)"),
    ("retries: 1.5", "3:10: retries must be a count (a whole number >= 0) or a mapping with keys max, "
                     "delay, backoff, max_delay, jitter, retry_on, not_on_exit_codes (got the number 1.5)"),
    ("retries: yes", "3:10: retries must be a count (a whole number >= 0) or a mapping with keys max, "
                     "delay, backoff, max_delay, jitter, retry_on, not_on_exit_codes (got yes, which YAML "
                     "reads as the boolean true)"),
    ("retries: {max: x}", "3:16: retries.max must be a whole number >= 0 (got 'x')"),
    ("retries: {backoff: 0.5}", "3:20: retries.backoff must be a number >= 1 (got 0.5); "
                                "use 1 for a constant delay"),
    ("retries: {backoff: fast}", "3:20: retries.backoff must be a number >= 1, the factor each delay is "
                                 "multiplied by (got 'fast')"),
    ("retries: {delay: forever}", "3:18: retries.delay: bad duration 'forever': use a number with units "
                                  "ms, s, m, h, d, w, e.g. 30s or 1h30m"),
    ("retries: {backof: 2}", "3:11: unknown key 'backof' in retries (did you mean 'backoff'?)"),
    ("retries: {tries: 3}", "3:11: unknown key 'tries' in retries; valid keys are: max, delay, backoff, "
                            "max_delay, jitter"),
    ("run_on: []", "3:9: run_on must not be an empty list; list at least one node id or write run_on: any"),
    ("run_on: 5", "3:9: run_on must be any, all, a node id, a list of node ids, or a mapping "
                  "{tags: [...]} (got the number 5)"),
    ("run_on: [a, a]", "3:13: node id 'a' is listed twice in run_on"),
    ("run_on: [a, 5]", "3:13: each entry of run_on must be a non-empty node id string "
                       "(got the number 5); quote it"),
    ("run_on: [all]", "3:10: 'all' is a run_on mode, not a node id; write run_on: all"),
    ("run_on: {tag: [a]}", "3:10: unknown key 'tag' in run_on (did you mean 'tags'?)"),
    ("run_on: {tags: []}", "3:16: run_on.tags must not be an empty list; list at least one tag"),
    ("run_on: {tags: web}", "3:16: run_on.tags must be a non-empty list of tag strings (got 'web')"),
    ("run_on: {}", "3:9: run_on mapping needs tags: [TAG, ...]"),
    ("enabled: 1", "3:10: enabled must be true or false (got the number 1)"),
    ("enabled: 'yes'", "3:10: enabled must be true or false (got 'yes')"),
    ("description: 5", "3:14: description must be a string (got the number 5); quote it"),
    ("description: [a]", "3:14: description must be a string (got a list)"),
    ("max_log_bytes: 10", "3:16: max_log_bytes must be at least 1024 bytes (1KiB) (got 10)"),
    ("max_log_bytes: lots", "3:16: max_log_bytes: bad size 'lots': use a whole number of bytes or a number "
                            "with a unit B, KB, MB, GB, KiB, MiB, GiB, e.g. 10MiB"),
    ("max_log_bytes: true", "3:16: max_log_bytes must be a size such as 10MiB, 512KiB or a number of bytes "
                            "(got the boolean true)"),
    ("timezone: Europe/Berln", "3:11: unknown time zone 'Europe/Berln': use an IANA name such as "
                               "Europe/Berlin or UTC (did you mean Europe/Berlin"),
    ("timezone: 5", "3:11: timezone must be an IANA time zone name such as Europe/Berlin "
                    "(got the number 5); quote it"),
    ("user: [root]", "3:7: user must be a user name or numeric id (got a list)"),
    ("user: a b", "3:7: user must be a user name or numeric id without spaces or ':' (got 'a b')"),
    ("user: -1", "3:7: user must be a name or a numeric id >= 0 (got -1)"),
    ("group: true", "3:8: group must be a group name or numeric id (got the boolean true); quote it"),
    ("env: [A]", "3:6: env must be a mapping of NAME: \"value\" (got a list)"),
    ("env: {PORT: 8080}", "3:13: env value for 'PORT' must be a string (got the number 8080); "
                          "quote it: PORT: \"8080\""),
    ("env: {DEBUG: true}", "3:14: env value for 'DEBUG' must be a string (got the boolean true); "
                           "quote it: DEBUG: \"true\""),
    ("env: {A: }", "3:9: env value for 'A' must be a string (got an empty value (null)); "
                   "write A: \"\" for an empty value"),
    ("env: {CRONRD_RUN_KEY: x}", "3:7: environment variable 'CRONRD_RUN_KEY' is reserved: cronrd sets "
                                 "CRONRD_* variables itself; choose another name"),
    ("env: {1A: a}", "3:7: invalid environment variable name '1A': use letters, digits and '_', "
                     "not starting with a digit"),
    ("env: {A-B: a}", "3:7: invalid environment variable name 'A-B': use letters, digits and '_', "
                      "not starting with a digit"),
    ("working_dir: srv/app", "3:14: working_dir must be an absolute path starting with / "
                             "(got 'srv/app'); ~ and $VARIABLES are not expanded"),
    ("working_dir: 5", "3:14: working_dir must be an absolute path (got the number 5); quote it"),
    ("name: -bad", "3:7: invalid job name '-bad': use letters, digits, '_', '.' and '-', starting with "
                   "a letter or digit, at most 100 characters"),
    ("name: " + "a" * 101, "3:7: invalid job name '" + "a" * 101 + "': use letters, digits, '_', '.' "
                           "and '-', starting with a letter or digit, at most 100 characters"),
    ("name: 5", "3:7: name must be a string (got the number 5); quote it"),
    ("frobnicate: 1", "3:1: unknown key 'frobnicate'; valid keys are: name, description, schedule, timezone, "
                      "command, user, group, env, working_dir, timeout, kill_grace, concurrency, retries, "
                      "catchup, catchup_window, jitter, run_on, on_node_loss, enabled, max_log_bytes"),
    ("timout: 5s", "3:1: unknown key 'timout' (did you mean 'timeout'?)"),
    ("calendar: [weekdays]", "3:11: calendar must be a mapping with skip, only, shift or "
                             "business_day, e.g. calendar: {skip: [de-holidays], only: "
                             "[weekdays], shift: next} (got a list)"),
    ("success_exit_codes: 0", "3:21: success_exit_codes must be a non-empty list of exit codes "
                              "(0-255) or ranges, e.g. success_exit_codes: [0, 3] or [2, 64-78] "
                              "(got the number 0)"),
    ("max_running: 0", "3:14: max_running must be a whole number >= 1 (got 0)"),
    ("max_running: many", "3:14: max_running must be a whole number >= 1 (got 'many')"),
    ("max_queued: many", "3:13: max_queued must be a whole number >= 1 (got 'many')"),
    ("shell: bash", "3:8: shell must be the absolute path of a shell such as /bin/bash, without "
                    "spaces or arguments (got 'bash')"),
    ("shell: /bin/bash -e", "3:8: shell must be the absolute path of a shell"),
    ("shell: ", "3:7: shell must be the absolute path of a shell such as /bin/bash (got an empty "
                "value (null)); remove the key to use the default"),
    ("nice: 20", "3:7: nice must be a whole number from -20 (most favoured) to 19 (least) (got 20)"),
    ("nice: low", "3:7: nice must be a whole number from -20 (most favoured) to 19 (least) "
                  "(got 'low')"),
    ("ioclass: rt", "3:10: ioclass must be one of none, realtime, best-effort, idle (got 'rt')"),
    ("ioprio: 8", "3:9: ioprio must be a whole number from 0 (highest) to 7 (lowest) (got 8)"),
    ("umask: 0899", "3:8: umask must be an octal mask from 0000 to 0777 such as \"0027\" "
                    "(got '0899')"),
    ("umask: 1777", "3:8: umask must be an octal mask from 0000 to 0777"),
    ("umask: [1]", "3:8: umask must be an octal mask from 0000 to 0777 such as \"0027\" (got a list)"),
    ("env_file: etc/x", "3:11: env_file must be an absolute path starting with / (or -/ for a "
                        "file that may be missing) (got 'etc/x')"),
    ("limits: 5", "3:9: limits must be a mapping with one or more of memory, cpu, tasks, "
                  "open_files, e.g. limits: {memory: 512MiB, cpu: 50%} (got the number 5)"),
    ("limits: {}", "3:9: limits must be a mapping with one or more of memory, cpu"),
    ("limits: {memory: 1KiB}", "3:18: limits.memory must be from 1MiB to 1PiB (got 1KiB)"),
    ("limits: {memory: lots}", "3:18: limits.memory: bad size 'lots'"),
    ("limits: {cpu: 0%}", "3:15: limits.cpu must be a percentage of one CPU such as 50% (200% is "
                          "two CPUs) (got '0%')"),
    ("limits: {cpu: half}", "3:15: limits.cpu must be a percentage of one CPU"),
    ("limits: {tasks: 0}", "3:17: limits.tasks must be a whole number >= 1 (got 0)"),
    ("limits: {open_files: 4}", "3:22: limits.open_files must be a whole number >= 16 (got 4)"),
    ("limits: {open_files: 9999999}", "3:22: limits.open_files must be at most 1048576"),
    ("limits: {swap: 1G}", "3:10: unknown key 'swap' in limits; valid keys are: memory, cpu, "
                           "tasks, open_files"),
    ("depends_on: extract", "3:13: depends_on must be a list of parents, each - job: NAME"),
    ("depends_on: []", "3:13: depends_on must be a list of parents, each - job: NAME "
                       "(optionally with within: DURATION), e.g. depends_on: [{job: extract}] "
                       "(got an empty list)"),
    ("depends_on: [{job: a, within: 0s}]", "3:31: depends_on[0].within must be greater than 0"),
    ("depends_on: [{jbo: a}]", "3:15: unknown key 'jbo' in depends_on[0] (did you mean 'job'?)"),
    ("depends_on: [a, a]", "3:17: depends_on[1]: job 'a' is listed twice in depends_on"),
    ("depends_on: [{job: 'a b'}]", "3:20: invalid job name 'a b'"),
    ("trigger_rule: all", "3:15: trigger_rule must be one of all_succeeded, none_failed, "
                          "all_finished, any_succeeded, any_failed (got 'all')"),
    ("trigger_rule: none_failed", "3:1: trigger_rule applies only to a job with depends_on"),
    ("on_upstream_failure: retry", "3:22: on_upstream_failure must be one of skip, fail"),
    ("wait_for_upstream: soon", "3:20: wait_for_upstream: "),
    ("params: [a]", "3:9: params must be a mapping of NAME: default-value or NAME: {type: "),
    ("pool: [db]", "3:7: pool must be the name of a pool of the daemon config's pools: "
                   "(got a list)"),
    ("pool_slots: 0", "3:13: pool_slots must be a whole number >= 1 (got 0)"),
    ("priority: high", "3:11: priority must be a whole number from -1000 to 1000; higher runs "
                       "first (got 'high')"),
    ("priority: 1001", "3:11: priority must be a whole number from -1000 to 1000"),
    ("start_deadline: 0s", "3:17: start_deadline must be greater than 0"),
    ("backfill_priority: x", "3:20: backfill_priority must be a whole number from -1000 to "
                             "1000; higher runs first (got 'x')"),
    ("notify: [{to: chat, on: [faild]}]", "3:26: notify on: unknown event 'faild' (did you "
                                          "mean 'failed'?); events: failed, retrying"),
    ("sla: 5m", "3:6: sla must be a mapping with one or more of start_within, "),
    ("sla: {finish_by: 6}", "3:18: sla.finish_by must be a time of day HH:MM"),
    ("sla: {finish_by: '25:00'}", "3:18: sla.finish_by must be a time of day HH:MM"),
    ("sla: {start_within: 0s}", "3:21: sla.start_within must be greater than 0"),
    ("sla: {failure_tolerance: 0}", "3:26: sla.failure_tolerance must be a whole number >= 1"),
    ("sla: {start_witin: 5m}", "3:7: unknown key 'start_witin' in sla (did you mean "),
    ("on_final_failure: retry", "3:19: on_final_failure must be one of none, dead_letter"),
    ("yes: 1", "3:1: keys must be strings (got yes, which YAML reads as the boolean true); quote it: \"yes\""),
]


@pytest.mark.parametrize("line, expected", BAD_FIELD_CASES, ids=[c[0][:30] for c in BAD_FIELD_CASES])
def test_bad_field_reports_exact_position_and_message(line, expected):
    result = parse_job_text(BASE + line + "\n", "/etc/cronrd.d/job.yaml")
    assert result.jobs == ()  # a job with any problem is not used
    assert len(result.problems) == 1, [str(p) for p in result.problems]
    got = str(result.problems[0])
    if line == "env: {A: }":
        # An empty value in a flow mapping has no text of its own: libyaml
        # (used when PyYAML has it) marks it one column later than PyYAML's
        # pure-Python parser. Either column points at the right place.
        got = got.replace("job.yaml:3:10:", "job.yaml:3:9:")
    assert got.startswith("/etc/cronrd.d/job.yaml:" + expected)


def test_every_job_key_has_a_bad_value_case():
    from cronrd.jobspec import JOB_KEYS

    covered = {line.split(":")[0] for line, _ in BAD_FIELD_CASES}
    assert set(JOB_KEYS) - {"schedule", "command"} <= covered


@pytest.mark.parametrize("text, expected", [
    ('schedule: 61 * * * *\ncommand: x\n',
     "job.yaml:1:11: invalid schedule '61 * * * *': minute field '61' is out of range 0-59"),
    # quoted: the column points at the bad field inside the string
    ('command: x\nschedule: "0 61 * * *"\n',
     "job.yaml:2:14: invalid schedule '0 61 * * *': hour field '61' is out of range 0-23"),
    ("command: x\nschedule: '@dayly'\n",
     "job.yaml:2:12: invalid schedule '@dayly': unknown schedule '@dayly': use one of"),
    ('schedule: 5\ncommand: x\n',
     'job.yaml:1:11: schedule must be a string such as "*/5 * * * *" or "@daily" (got the number 5); quote it'),
    ('schedule: ""\ncommand: x\n',
     'job.yaml:1:11: schedule must not be empty; write e.g. schedule: "0 3 * * *"'),
    ('command: x\n',
     'job.yaml:1:1: missing required key \'schedule\' (for example schedule: "0 3 * * *")'),
    ('schedul: "@daily"\ncommand: x\n',  # the typo is reported, "missing schedule" is not
     "job.yaml:1:1: unknown key 'schedul' (did you mean 'schedule'?)"),
    ('schedule: "@daily"\n',
     "job.yaml:1:1: missing required key 'command' (for example command: /usr/local/bin/backup.sh)"),
    ('schedule: "@daily"\ncommand: ""\n',
     "job.yaml:2:10: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
     "strings (argv) (got an empty string)"),
    ('schedule: "@daily"\ncommand: []\n',
     "job.yaml:2:10: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
     "strings (argv) (got an empty list)"),
    ('schedule: "@daily"\ncommand:\n',
     "job.yaml:2:9: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
     "strings (argv) (got an empty value (null))"),
    ('schedule: "@daily"\ncommand: 5\n',
     "job.yaml:2:10: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
     "strings (argv) (got the number 5); quote it"),
    ('schedule: "@daily"\ncommand: {a: b}\n',
     "job.yaml:2:10: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
     "strings (argv) (got a mapping)"),
    ('schedule: "@daily"\ncommand: [sleep, 5]\n',
     "job.yaml:2:18: command[1] must be a string (got the number 5); quote it"),
    ('schedule: "@daily"\ncommand: ["", x]\n',
     "job.yaml:2:11: command[0] (the program to run) must not be empty"),
])
def test_schedule_and_command_errors(text, expected):
    assert one_problem(text).startswith(expected)


def test_all_problems_of_a_job_are_reported_together_in_file_order():
    assert problems("schedule: 61 * * * *\ncommand: 5\nconcurrency: x\n") == [
        "job.yaml:1:11: invalid schedule '61 * * * *': minute field '61' is out of range 0-59",
        "job.yaml:2:10: command must be a non-empty string (run with /bin/sh -c) or a non-empty list of "
        "strings (argv) (got the number 5); quote it",
        "job.yaml:3:14: concurrency must be one of allow, forbid, replace, queue (got 'x')",
    ]


def test_invalid_name_from_file_stem():
    assert one_problem(BASE, "/d/my job.yaml") == (
        "/d/my job.yaml:1:1: the job name 'my job' comes from the file name and is not valid (letters, "
        "digits, '_', '.' and '-', starting with a letter or digit, at most 100 characters); rename the "
        "file or add name:")
    assert job("name: my-job\n" + BASE, "/d/my job.yaml").name == "my-job"


# --------------------------------------------------------------------------
# YAML structure
# --------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("schedule: '@daily'\ncommand: [a, b\n",
     "job.yaml:3:1: invalid YAML: expected ',' or ']', but got '<stream end>' "
     "(while parsing a flow sequence at line 2, column 10)"),
    ("schedule: '@daily'\ncommand: a: b\n", "job.yaml:2:11: invalid YAML: mapping values are not allowed here"),
    ("command: x\nschedule: */5 * * * *\n",
     'job.yaml:2:11: invalid YAML: a value starting with * is read as an alias; quote it, '
     'e.g. schedule: "*/5 * * * *"'),
    ("command: x\nschedule: @daily\n",
     'job.yaml:2:11: invalid YAML: a value cannot start with @ unless it is quoted; quote it, '
     'e.g. schedule: "@daily"'),
    ("schedule: '@daily'\ncommand: x\n---\nschedule: '@daily'\n",
     "job.yaml:3:1: invalid YAML: but found another document (expected a single document in the stream "
     "at line 1, column 1)"),
    ("schedule: '@daily'\ncommand: \"a\x07\"\n",
     "job.yaml:2:12: invalid YAML: special characters are not allowed"),
    ("", "job.yaml:1:1: the file is empty; a job file holds one job"),
    ("# only a comment\n", "job.yaml:1:1: the file is empty"),
    ("- schedule: x\n", "job.yaml:1:1: a job file holds one job (a mapping with schedule:, command:, ...) or "
                        "jobs: followed by a list of jobs (got a list); put the list under jobs:"),
    ("just text\n", "job.yaml:1:1: a job file holds one job"),
])
def test_yaml_structure_errors(text, expected):
    result = parse_job_text(text, "job.yaml")
    assert result.jobs == ()
    assert len(result.problems) == 1, [str(p) for p in result.problems]
    assert str(result.problems[0]).startswith(expected)


def test_duplicate_keys_in_one_mapping():
    assert problems(BASE + "timeout: 5s\ntimeout: 6s\nenv: {A: a, A: b}\n") == [
        "job.yaml:4:1: duplicate key 'timeout' (first given at line 3); remove one of them",
        "job.yaml:5:13: duplicate key 'A' (first given at line 5); remove one of them",
    ]


def test_jobs_list_needs_names_and_mappings():
    text = """\
jobs:
  - schedule: "@daily"
    command: a
  - just-a-string
  - name: ok
    schedule: "@daily"
    command: b
"""
    result = parse_job_text(text, "many.yaml")
    assert [str(p) for p in result.problems] == [
        "many.yaml:2:5: this job has no name; add name: (required for every job in a jobs: list)",
        "many.yaml:4:5: job #2 under jobs: must be a mapping with name:, schedule:, command: ... "
        "(got 'just-a-string')",
    ]
    assert [j.name for j in result.jobs] == ["ok"]
    assert result.jobs[0].line == 5


def test_jobs_must_be_a_list_and_stand_alone():
    assert one_problem("jobs: {}\n") == "job.yaml:1:7: jobs must be a list of job mappings (got a mapping)"
    assert problems("jobs:\nschedule: x\n") == [
        "job.yaml:1:6: jobs must be a list of job mappings (got an empty value (null))",
        "job.yaml:2:1: unknown top-level key 'schedule' next to jobs:; a file with jobs: holds only the "
        "list, so move 'schedule' into each entry (keys starting with x- are ignored and can hold &anchors)",
    ]
    nested = "jobs:\n  - name: a\n    schedule: '@daily'\n    command: x\n    jobs: []\n"
    assert one_problem(nested) == "job.yaml:5:5: jobs: belongs at the top level of a file, not inside a job"


def test_one_bad_and_one_good_job_yields_the_good_one():
    text = """\
jobs:
  - name: bad
    schedule: "0 25 * * *"
    command: x
  - name: good
    schedule: "0 5 * * *"
    command: y
"""
    result = parse_job_text(text, "/d/two.yaml")
    assert [str(p) for p in result.problems] == [
        "/d/two.yaml:3:18: invalid schedule '0 25 * * *': hour field '25' is out of range 0-23"]
    assert [(j.name, j.line, j.source) for j in result.jobs] == [("good", 5, "/d/two.yaml")]


def test_duplicate_names_within_a_file_error_on_the_later_one():
    text = """\
jobs:
  - name: a
    schedule: "@daily"
    command: x
  - name: a
    schedule: "@hourly"
    command: y
"""
    result = parse_job_text(text, "f.yaml")
    assert [str(p) for p in result.problems] == [
        "f.yaml:5:11: duplicate job name 'a': already defined at f.yaml:2; rename one of them"]
    assert [(j.name, j.schedule) for j in result.jobs] == [("a", "@daily")]


# --------------------------------------------------------------------------
# canonical form
# --------------------------------------------------------------------------


def test_process_controls_are_parsed():
    spec = job(BASE + "shell: /bin/bash\nnice: -5\nioclass: best-effort\nioprio: 7\n"
                      "umask: 0027\nenv_file: -/etc/default/app\n"
                      "limits: {memory: 512MiB, cpu: 50%, tasks: 100, open_files: 1024}\n")
    assert (spec.shell, spec.nice, spec.ioclass, spec.ioprio) == ("/bin/bash", -5,
                                                                  "best-effort", 7)
    assert spec.umask == 0o027 and spec.env_file == "-/etc/default/app"
    assert spec.limits == Limits(memory=512 << 20, cpu=50.0, tasks=100, open_files=1024)
    # The text of a umask is octal however YAML would read it.
    for text in ("0027", "027", "27", '"0027"', "'27'"):
        assert job(BASE + f"umask: {text}\n").umask == 0o027, text
    assert job(BASE + "limits: {cpu: 150}\n").limits == Limits(cpu=150.0)
    assert job(BASE + "ioprio: 2\n").ioclass is None  # best-effort is implied at launch


def test_ioprio_with_a_class_without_levels_is_refused():
    assert one_problem(BASE + "ioclass: idle\nioprio: 3\n") == (
        "job.yaml:4:9: ioprio does not apply to ioclass idle (only realtime and best-effort "
        "have levels); remove it")


def test_a_queued_job_bounds_its_queue_and_only_it_may():
    spec = job(BASE + "concurrency: queue\nmax_queued: 5\n")
    assert (spec.concurrency, spec.max_queued) == ("queue", 5)
    back = JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back.max_queued == 5 and back.digest() == spec.digest()
    # Unset, it is not in the definition: digests of older jobs stay as they were.
    assert "max_queued" not in job(BASE + "concurrency: queue\n").to_dict()
    assert one_problem(BASE + "concurrency: queue\nmax_queued: 0\n") == (
        "job.yaml:4:13: max_queued must be a whole number >= 1 (got 0)")
    assert one_problem(BASE + "concurrency: queue\nmax_queued: 10001\n") == (
        "job.yaml:4:13: max_queued must be at most 10000 (got 10001): a longer queue never "
        "drains; run the job more often or for less time")
    assert one_problem(BASE + "max_queued: 5\n") == (
        "job.yaml:3:1: max_queued applies only to concurrency: queue (this job has "
        "concurrency: forbid); remove it or set concurrency: queue")


def test_process_controls_round_trip_and_leave_older_digests_alone():
    plain = job(BASE)
    assert not {"shell", "nice", "ioclass", "ioprio", "umask", "env_file",
                "limits"} & plain.to_dict().keys()
    spec = job(BASE + "shell: /bin/bash\nnice: 3\numask: '0077'\nenv_file: /e\n"
                      "ioclass: idle\nlimits: {memory: 2GiB, cpu: 25%}\n", "/d/x.yaml")
    d = json.loads(json.dumps(spec.to_dict()))
    assert d["limits"] == {"memory": 2 << 30, "cpu": 25.0} and d["umask"] == 0o077
    back = JobSpec.from_dict(d, source="/d/x.yaml", line=1)
    assert back == spec and back.digest() == spec.digest()
    assert spec.digest() != plain.digest()
    assert job(BASE + "nice: 3\n").digest() != job(BASE + "nice: 4\n").digest()


def test_to_dict_from_dict_round_trip_and_json_safety():
    spec = job(BASE + "env: {B: '2', A: '1'}\nretries: {max: 2}\nrun_on: [n1]\n", "/d/x.yaml")
    d = spec.to_dict()
    assert "source" not in d and "line" not in d
    assert d["env"] == [["A", "1"], ["B", "2"]]
    assert d["run_on"] == {"mode": "nodes", "values": ["n1"]}
    assert d["retries"] == {"max": 2, "delay": 10.0, "backoff": 2.0, "max_delay": 3600.0, "jitter": 0.0}
    via_json = json.loads(json.dumps(d))
    back = JobSpec.from_dict(via_json, source="/d/x.yaml", line=1)
    assert back == spec
    assert hash(back) == hash(spec)
    assert back.digest() == spec.digest()


def test_from_dict_argv_and_missing_keys_take_defaults():
    spec = JobSpec.from_dict({"name": "n", "schedule": "@daily", "command": ["a", "b"],
                              "env": {"Z": "1", "A": "2"}, "future_field": 1})
    assert spec.command == ("a", "b")
    assert spec.env == (("A", "2"), ("Z", "1"))
    assert spec.retries == RetryPolicy() and spec.source == "" and spec.line == 0


def test_digest_ignores_yaml_key_order_source_and_line():
    a = job("""
schedule: "0 3 * * *"
command: [tar, czf, /tmp/x.tgz, /etc]
env: {A: "1", B: "2"}
retries: {max: 3, delay: 1m}
timeout: 10m
""", "/a/job.yaml")
    b = job("""# different order, units and location
timeout: 600
retries: {delay: 60s, max: 3}
env: {B: "2", A: "1"}
command: [tar, czf, /tmp/x.tgz, /etc]
schedule: "0 3 * * *"
""", "/b/job.yaml")
    assert (a.source, a.line) != (b.source, b.line)
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64 and int(a.digest(), 16) >= 0
    changed = job(BASE.replace("/bin/true", "/bin/false"), "/a/job.yaml")
    assert changed.digest() != job(BASE, "/a/job.yaml").digest()


def test_digest_is_stable_across_processes():
    # a fixed definition must hash the same everywhere (it is compared across nodes)
    spec = JobSpec(name="n", schedule="@daily", command="true")
    canonical = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
    import hashlib

    assert spec.digest() == hashlib.sha256(canonical.encode()).hexdigest()


# --------------------------------------------------------------------------
# files on disk
# --------------------------------------------------------------------------


def test_load_job_file_ok(tmp_path):
    path = write(tmp_path / "a.yaml", BASE)
    result = load_job_file(str(path))
    assert result.problems == () and result.jobs[0].name == "a" and result.jobs[0].source == str(path)


@pytest.mark.parametrize("mode, expected", [
    (0o664, "it is writable by group (mode 0664)"),
    (0o646, "it is writable by others (mode 0646)"),
    (0o666, "it is writable by group and others (mode 0666)"),
])
def test_group_or_world_writable_file_is_refused(tmp_path, mode, expected):
    path = write(tmp_path / "a.yaml", BASE, mode)
    result = load_job_file(str(path))
    assert result.jobs == ()
    assert [str(p) for p in result.problems] == [
        f"{path}: refusing job file: {expected}; run: chmod go-w {path}"]


def test_wrong_owner_is_refused(tmp_path):
    path = write(tmp_path / "a.yaml", BASE)
    owner = os.stat(path).st_uid
    other = owner + 4242
    problem = check_file_permissions(str(path), {other})
    assert problem is not None and (problem.line, problem.col) == (0, 0)
    assert problem.message.startswith(f"refusing job file: it is owned by uid {owner}")
    assert f"not by uid {other}" in problem.message
    assert problem.message.endswith(f"; run: chown {other} {path}")
    assert load_job_file(str(path), allowed_uids={other}).jobs == ()
    # owner allowed explicitly, and by default (root and the effective uid)
    assert check_file_permissions(str(path), {owner}) is None
    assert check_file_permissions(str(path), None) is None


def test_wrong_owner_and_writable_reported_together(tmp_path):
    path = write(tmp_path / "a.yaml", BASE, 0o666)
    owner = os.stat(path).st_uid
    message = check_file_permissions(str(path), {0, owner + 1} - {owner}).message
    assert "owned by" in message and "writable by group and others (mode 0666)" in message
    assert f"chmod go-w {path}" in message and "chown" in message


def test_non_regular_files_are_refused(tmp_path):
    d = tmp_path / "dir.yaml"
    d.mkdir()
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo, 0o644)
    assert check_file_permissions(str(d), None).message == (
        "refusing job file: it is not a regular file (it is a directory); job files must be regular files")
    assert check_file_permissions(str(fifo), None).message == (
        "refusing job file: it is not a regular file (it is a named pipe); job files must be regular files")
    assert load_job_file(str(fifo)).problems[0].line == 0  # and it did not block on the pipe


def test_symlinks_are_checked_through_to_their_target(tmp_path):
    good = write(tmp_path / "target.txt", BASE)
    link = tmp_path / "link.yaml"
    link.symlink_to(good)
    assert check_file_permissions(str(link), None) is None
    assert load_job_file(str(link)).jobs[0].name == "link"

    os.chmod(good, 0o664)
    problem = check_file_permissions(str(link), None)
    assert problem.message == (f"refusing job file: its symlink target {good} is writable by group "
                               f"(mode 0664); run: chmod go-w {good}")

    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "which does not exist" in check_file_permissions(str(dangling), None).message


def test_missing_file_and_non_utf8(tmp_path):
    assert str(load_job_file(str(tmp_path / "gone.yaml")).problems[0]) == (
        f"{tmp_path}/gone.yaml: refusing job file: it does not exist")
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"schedule: '@daily'\ncommand: caf\xe9\n")
    os.chmod(path, 0o644)
    assert str(load_job_file(str(path)).problems[0]) == (
        f"{path}:2:13: job file is not valid UTF-8 (byte 0xe9); save it as UTF-8")


# --------------------------------------------------------------------------
# directories
# --------------------------------------------------------------------------


def test_missing_directory_is_one_problem(tmp_path):
    result = load_jobs_dir(str(tmp_path / "cronrd.d"))
    assert result.jobs == {}
    assert [str(p) for p in result.problems] == [
        f"{tmp_path}/cronrd.d: job directory {tmp_path}/cronrd.d does not exist; "
        f"create it with: install -d -m 0755 {tmp_path}/cronrd.d"]
    not_dir = write(tmp_path / "file", "x")
    assert "is not a directory" in load_jobs_dir(str(not_dir)).problems[0].message


def test_directory_loads_only_job_files_in_sorted_order(tmp_path):
    for name in ["b.yaml", "a.yml", ".hidden.yaml", "c.yaml~", "d.yaml.swp", "e.yaml.dpkg-old",
                 "f.yaml.dpkg-new", "notes.txt", "README", ".#g.yaml"]:
        write(tmp_path / name, BASE)
    result = load_jobs_dir(str(tmp_path))
    assert isinstance(result, DirResult)
    assert [os.path.basename(f.path) for f in result.files] == ["a.yml", "b.yaml"]
    assert sorted(result.jobs) == ["a", "b"] and result.problems == []


def test_duplicate_names_across_files_error_on_the_later_file(tmp_path):
    write(tmp_path / "10-first.yaml", "name: shared\n" + BASE)
    write(tmp_path / "20-second.yaml", """\
jobs:
  - name: other
    schedule: "@daily"
    command: x
  - name: shared
    schedule: "@hourly"
    command: y
""")
    result = load_jobs_dir(str(tmp_path))
    assert [str(p) for p in result.problems] == [
        f"{tmp_path}/20-second.yaml:5:11: duplicate job name 'shared': already defined at "
        f"{tmp_path}/10-first.yaml:1; rename one of them"]
    assert result.jobs["shared"].source == f"{tmp_path}/10-first.yaml"
    assert result.jobs["shared"].schedule == "0 3 * * *"
    assert sorted(result.jobs) == ["other", "shared"]
    second = result.files[1]
    assert [j.name for j in second.jobs] == ["other"]


def test_refused_file_does_not_stop_the_others(tmp_path):
    write(tmp_path / "bad.yaml", BASE, 0o666)
    write(tmp_path / "good.yaml", BASE)
    write(tmp_path / "broken.yaml", "schedule: [\n")
    result = load_jobs_dir(str(tmp_path))
    assert list(result.jobs) == ["good"]
    assert [(os.path.basename(p.path), p.line) for p in result.problems] == [
        ("bad.yaml", 0), ("broken.yaml", 2)]


def test_problem_str():
    assert str(Problem("/etc/cronrd.d/x.yaml", 4, 1, "unknown key 'schedul' (did you mean 'schedule'?)")) == (
        "/etc/cronrd.d/x.yaml:4:1: unknown key 'schedul' (did you mean 'schedule'?)")


def test_problem_str_of_a_whole_file_has_no_position():
    # A problem of the file itself (unreadable, refused) has no line: it
    # reads FILE: message, never FILE:0:0: message.
    assert str(Problem("/etc/cronrd.d/x.yaml", 0, 0, "refusing job file: it does not exist")) == (
        "/etc/cronrd.d/x.yaml: refusing job file: it does not exist")
    assert str(Problem("/etc/cronrd.d/x.yaml", 3, 0, "not valid UTF-8")) == (
        "/etc/cronrd.d/x.yaml:3: not valid UTF-8")


# --------------------------------------------------------------------------
# shipped examples
# --------------------------------------------------------------------------

EXAMPLE_FILES = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "cronrd.yaml")


def test_expected_examples_exist():
    assert {p.stem for p in EXAMPLE_FILES} >= {
        "backup", "hourly-report", "cleanup", "heartbeat", "flaky-sync", "per-user"}


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_validates(path):
    result = parse_job_text(path.read_text(), str(path))
    assert result.problems == (), [str(p) for p in result.problems]
    assert len(result.jobs) == 1
    spec = result.jobs[0]
    assert spec.name == path.stem and spec.description
    # runnable by a non-root user: nothing needs root or writes outside $HOME / $TMPDIR / /tmp
    command = spec.command if isinstance(spec.command, str) else " ".join(spec.command)
    assert "sudo" not in command and "/var/" not in command and "/etc/" not in command


def test_example_specifics():
    by_name = {p.stem: parse_job_text(p.read_text(), str(p)).jobs[0] for p in EXAMPLE_FILES}
    backup = by_name["backup"]
    assert backup.schedule == "30 2 * * *" and backup.catchup == "latest"
    assert backup.timeout and backup.retries.max >= 1
    assert by_name["flaky-sync"].retries.backoff > 1 and by_name["flaky-sync"].timeout
    assert by_name["heartbeat"].schedule == "@every 5s"
    assert by_name["per-user"].user
    assert "find" in by_name["cleanup"].command
    # the ETL example: extract -> transform -> load, with a fan-in at load
    assert [d.job for d in by_name["transform"].depends_on] == ["extract"]
    assert [(d.job, d.within) for d in by_name["load"].depends_on] == [
        ("transform", None), ("fx-rates", 26 * 3600.0)]
    assert by_name["load"].schedule == by_name["transform"].schedule == "@after"
    from cronrd.jobspec.dependencies import check_dependencies
    assert check_dependencies(by_name) == []


def test_permission_checks_can_be_skipped_but_not_the_regular_file_check(tmp_path):
    path = write(tmp_path / "a.yaml", BASE, 0o666)
    assert load_job_file(str(path)).jobs == ()
    assert load_job_file(str(path), check_permissions=False).jobs[0].name == "a"
    other = os.stat(path).st_uid + 1
    result = load_jobs_dir(str(tmp_path), allowed_uids={other}, check_permissions=False)
    assert list(result.jobs) == ["a"] and result.problems == []
    os.mkfifo(tmp_path / "p.yaml", 0o644)
    result = load_jobs_dir(str(tmp_path), check_permissions=False)
    assert [str(p) for p in result.problems] == [
        f"{tmp_path}/p.yaml: refusing job file: it is not a regular file (it is a named pipe); "
        "job files must be regular files"]


def test_nul_character_anywhere_in_a_job_is_refused():
    # A NUL can reach neither argv, the environment nor a path: refuse it here
    # rather than fail at every fire.
    result = parse_job_text('schedule: "@hourly"\ncommand: "echo a\\0b"\n'
                            'env: {A: "x\\0"}\n', "/etc/cronrd.d/nul.yaml")
    assert result.jobs == ()
    assert [str(p) for p in result.problems] == [
        "/etc/cronrd.d/nul.yaml:2:10: command contains a NUL character (\\0), which no "
        "command, environment variable or path can hold; remove it",
        "/etc/cronrd.d/nul.yaml:3:6: env contains a NUL character (\\0), which no command, "
        "environment variable or path can hold; remove it"]


def test_sla_and_on_final_failure_round_trip_and_leave_other_digests_alone():
    text = BASE + ('sla: {start_within: 5m, finish_by: "6:00", failure_tolerance: 2}\n'
                   "on_final_failure: dead_letter\n")
    (job,) = parse_job_text(text, "/etc/cronrd.d/job.yaml").jobs
    assert job.sla.start_within == 300 and job.sla.finish_by == "06:00"
    assert job.sla.failure_tolerance == 2 and job.on_final_failure == "dead_letter"
    assert JobSpec.from_dict(job.to_dict()) == dataclasses.replace(job, source="", line=0)
    (plain,) = parse_job_text(BASE, "/etc/cronrd.d/job.yaml").jobs
    assert "sla" not in plain.to_dict() and "on_final_failure" not in plain.to_dict()

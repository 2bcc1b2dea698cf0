"""Reading the config file: every problem at once, each at FILE:LINE:COL and
naming its key, the way job files report theirs; a good file gives the same
Config as before."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cronrd import cli
from cronrd.config import load_config, parse_config
from cronrd.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def problems_of(tmp_path, text: str) -> list[str]:
    path = tmp_path / "cronrd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    lines = str(err.value).splitlines()
    assert [str(p) for p in err.value.problems] == lines  # one line per problem
    prefix = f"{path}:"
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix):] for line in lines]


def test_three_problems_are_reported_together_with_line_and_column(tmp_path):
    got = problems_of(tmp_path, (
        "node_id: n1\n"
        "shutdown:\n"
        "  mode: wait\n"
        "  grace: soon\n"
        "log_levl: debug\n"
        "max_running: 0\n"))
    assert got == [
        "4:10: shutdown.grace: bad duration 'soon': use a number with units ms, s, m, h, d, "
        "w, e.g. 30s or 1h30m",
        "5:1: unknown key 'log_levl' (did you mean 'log_level'?)",
        "6:14: max_running must be a positive whole number, the most runs this node runs at "
        "once (got 0); the default is 256",
    ]


def test_problems_in_the_cluster_section_point_at_their_keys_and_values(tmp_path):
    got = problems_of(tmp_path, (
        "node_id: a\n"                         # 1
        "timezone: Europe/Berln\n"             # 2
        "cluster:\n"                           # 3
        "  initial_members:\n"                 # 4
        "    a: 127.0.0.1:7000\n"              # 5
        "    b: 10.0.0.2\n"                    # 6
        "  insecure: true\n"                   # 7
        "  tags: [ssd, ssd]\n"                 # 8
        "  lisen: 127.0.0.1:7000\n"))          # 9
    assert [g.split(": ", 1)[0] for g in got] == ["2:11", "3:1", "6:8", "8:15", "9:3"]
    assert got[0].startswith("2:11: timezone: unknown time zone 'Europe/Berln'")
    assert "(did you mean Europe/Berlin" in got[0]
    # a missing key is reported where its section starts
    assert got[1].startswith("3:1: cluster.listen is required")
    assert got[2].startswith("6:8: cluster.initial_members.b: address '10.0.0.2' has no port")
    assert got[3] == "8:15: cluster.tags lists 'ssd' twice; remove one"
    assert got[4].startswith("9:3: unknown key cluster.lisen (did you mean 'listen'?)")


def test_duplicate_and_non_string_keys_are_problems_as_in_job_files(tmp_path):
    got = problems_of(tmp_path, (
        "node_id: n1\n"
        "log_level: info\n"
        "log_level: debug\n"
        "cluster:\n"
        "  listen: 127.0.0.1:7000\n"
        "  insecure: true\n"
        "  initial_members:\n"
        "    n1: 127.0.0.1:7000\n"
        "    7: 127.0.0.1:7001\n"))
    assert got == [
        "3:1: duplicate key 'log_level' (first given at line 2); remove one of them",
        "9:5: keys must be strings (got the number 7)",
    ]


def test_one_mistake_is_one_problem(tmp_path):
    """Checks that depend on a bad value are skipped, not reported again."""
    got = problems_of(tmp_path, (
        "node_id: a\n"
        "cluster:\n"
        "  listen: 10.0.0.1:7000\n"
        "  initial_members: {a: 10.0.0.1:7000}\n"
        "  insecure: {allow_networks: true}\n"
        "  election_timeout: 1ms\n"
        "  node_timeout: 1s\n"))
    assert [g.split(": ", 1)[0] for g in got] == ["5:14", "6:21"], got
    assert "unknown key cluster.insecure.allow_networks (did you mean 'allow_network'?)" in got[0]
    assert "cluster.election_timeout must be between" in got[1]


def test_values_without_a_file_report_every_problem_without_positions():
    with pytest.raises(ConfigError) as err:
        parse_config({"log_level": "loud", "max_running": 0, "data_dir": None},
                     "/etc/cronrd/cronrd.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 3 and all(ln.startswith("/etc/cronrd/cronrd.yaml: ") for ln in lines)
    assert any("data_dir must be a non-empty string" in ln and "remove the key to use the "
               "default /var/lib/cronrd" in ln for ln in lines), lines
    assert [p.line for p in err.value.problems] == [0, 0, 0]


def test_a_file_that_is_not_yaml_is_still_one_problem(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\nlog_level: [info\n")
    with pytest.raises(ConfigError, match=r"cronrd.yaml:3:1: not valid YAML"):
        load_config(str(path))


GOOD = """\
node_id: a
data_dir: state
log_dir: logs
jobs_dir: ~/jobs.d
socket: run/cronrd.sock
socket_group: cronrd
timezone: Europe/Berlin
log_retention: {max_age: 7d, max_files_per_job: 20}
history_retention: 2w
history_max_runs_per_job: 500
shutdown: {mode: stop, grace: 1m30s}
log_level: debug
watch_interval: 250ms
max_running: 12
accept_jobs_from: [self, b]
cluster:
  listen: "[::1]:7100"
  initial_members:
    a: "[::1]:7100"
    b: localhost:7101
  join: false
  tls: {ca: tls/ca.crt, cert: tls/a.crt, key: tls/a.key}
  tags: [ssd, eu-west]
  node_timeout: 1m
  election_timeout: 0.5
"""


def test_a_good_config_loads_as_yaml_safe_load_then_parse_config_read_it(tmp_path):
    (tmp_path / "tls").mkdir()
    for name in ("ca.crt", "a.crt", "a.key"):
        (tmp_path / "tls" / name).write_text("x")
    path = tmp_path / "cronrd.yaml"
    path.write_text(GOOD)
    cfg = load_config(str(path))
    assert cfg == parse_config(yaml.safe_load(GOOD), str(path))
    assert cfg.data_dir == str(tmp_path / "state") and cfg.shutdown_mode == "stop"
    assert cfg.shutdown_grace == 90.0 and cfg.watch_interval == 0.25
    assert cfg.history_max_runs_per_job == 500
    assert cfg.accept_jobs_from == ("a", "b") and cfg.cluster.tags == ("ssd", "eu-west")
    assert cfg.cluster.tls.key == str(tmp_path / "tls" / "a.key")
    assert cfg.cluster.members_dict() == {"a": ("::1", 7100), "b": ("localhost", 7101)}


def test_merge_keys_work_as_before(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("shutdown: &s {mode: stop, grace: 5s}\n"
                    "log_retention:\n  <<: {max_age: 1d}\n  max_files_per_job: 3\n")
    cfg = load_config(str(path))
    assert cfg == parse_config(yaml.safe_load(path.read_text()), str(path))
    assert cfg.log_max_age == 86400.0 and cfg.log_max_files_per_job == 3


@pytest.mark.parametrize("name", ["examples/cluster/a.yaml", "examples/cluster/b.yaml",
                                  "examples/cluster/c.yaml", "packaging/debian/cronrd.yaml"])
def test_shipped_configs_load_as_before(name):
    path = ROOT / name
    assert load_config(str(path)) == parse_config(yaml.safe_load(path.read_text()) or {},
                                                  str(path))


def test_the_daemon_command_prints_every_problem_and_exits_1(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\nshutdown: {grace: soon}\nlog_levl: debug\nmax_running: 0\n")
    res = CliRunner().invoke(cli.main, ["--config", str(path), "daemon"])
    assert res.exit_code == 1
    out = res.output.splitlines()
    assert out[0].startswith(f"{path}:2:19: shutdown.grace: bad duration 'soon'")
    assert out[1].startswith(f"{path}:3:1: unknown key 'log_levl'")
    assert out[2].startswith(f"{path}:4:14: max_running must be a positive whole number")
    assert out[3] == (f"cronrd: 3 problems in {path}; the daemon did not start. Fix them, "
                      f"then check again with `cronrd check-config {path}`")
    # The same lines as check-config prints for the file (which also reports
    # that the default jobs_dir /etc/cronrd.d is missing, if it is).
    check = CliRunner().invoke(cli.main, ["check-config", str(path)])
    assert check.exit_code == 1
    assert [line for line in check.stdout.splitlines() if "jobs_dir" not in line] == out[:3]


@pytest.mark.parametrize("value", ["0", "-3", "many", "true", "1.5"])
def test_history_max_runs_per_job_is_a_positive_whole_number(tmp_path, value):
    path = tmp_path / "cronrd.yaml"
    path.write_text(f"history_max_runs_per_job: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    assert "history_max_runs_per_job must be a positive whole number" in str(err.value)


# -- the file system: what the daemon's start and `cronrd check-config` look at ----------

def test_problems_of_the_file_system_come_with_the_others_at_their_keys(tmp_path):
    (tmp_path / "afile").write_text("not a directory\n")
    (tmp_path / "ca.crt").write_text("")
    path = tmp_path / "cronrd.yaml"
    path.write_text(
        "node_id: a\n"                              # 1
        "data_dir: afile/state\n"                   # 2
        "log_dir: logs\n"                           # 3
        "jobs_dir: nowhere\n"                       # 4
        "max_running: 0\n"                          # 5
        "cluster:\n"                                # 6
        "  listen: 127.0.0.1:7000\n"                # 7
        "  initial_members: {a: 127.0.0.1:7000}\n"  # 8
        "  tls:\n"                                  # 9
        "    ca: ca.crt\n"                          # 10
        "    cert: a.crt\n"                         # 11
        "    key: afile\n")                         # 12
    with pytest.raises(ConfigError) as err:
        load_config(str(path), daemon_files=True, jobs_dir_exists=True)
    lines = str(err.value).splitlines()
    assert [str(p) for p in err.value.problems] == lines
    got = {line.split(": ", 1)[0].removeprefix(f"{path}:"): line.split(": ", 1)[1]
           for line in lines}
    assert sorted(got) == ["11:11", "2:11", "4:11", "5:14"], lines
    assert got["2:11"] == (f"data_dir {tmp_path}/afile/state cannot be created: "
                           f"{tmp_path}/afile is not a directory; point data_dir elsewhere "
                           f"or move {tmp_path}/afile away")
    assert got["4:11"].startswith(f"jobs_dir {tmp_path}/nowhere does not exist: the daemon "
                                  "would start but run no jobs; create it (mkdir -p "
                                  f"{tmp_path}/nowhere)")
    assert got["5:14"].startswith("max_running must be a positive whole number")
    assert got["11:11"].startswith(f"cluster.tls.cert: {tmp_path}/a.crt does not exist")


def test_the_file_system_is_looked_at_only_when_asked(tmp_path):
    # status, jobs, ... read the config for its socket: a missing jobs_dir or a
    # data_dir that cannot be created is no reason for them to fail.
    (tmp_path / "afile").write_text("")
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: a\ndata_dir: afile/state\njobs_dir: nowhere\n")
    assert load_config(str(path)).data_dir == str(tmp_path / "afile" / "state")
    with pytest.raises(ConfigError) as err:
        load_config(str(path), daemon_files=True)  # the daemon: jobs_dir may come later
    assert [p.line for p in err.value.problems] == [2]
    (tmp_path / "nowhere").mkdir()
    path.write_text("node_id: a\njobs_dir: nowhere\ndata_dir: d\nlog_dir: l\nsocket: s.sock\n")
    assert load_config(str(path), daemon_files=True, jobs_dir_exists=True).node_id == "a"


def test_a_default_directory_is_reported_without_a_position(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: a\ndata_dir: d\nlog_dir: l\nsocket: s.sock\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path), jobs_dir_exists=True)  # jobs_dir: the default /etc/cronrd.d
    if os.path.isdir("/etc/cronrd.d"):
        pytest.skip("this host has /etc/cronrd.d")
    assert str(err.value) == (f"{path}: jobs_dir /etc/cronrd.d does not exist: the daemon "
                              "would start but run no jobs; create it (mkdir -p /etc/cronrd.d) "
                              "or point jobs_dir at the directory of your job files")


@pytest.mark.skipif(os.geteuid() != 0, reason="the ownership checks apply to root")
def test_as_root_every_directory_others_can_change_is_reported_at_its_key(tmp_path):
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    for name in ("data", "logs", "jobs"):
        (base / name).mkdir()
        os.chmod(base / name, 0o777)
    path = base / "cronrd.yaml"
    path.write_text("node_id: a\ndata_dir: data\nlog_dir: logs\njobs_dir: jobs\n"
                    "socket: s.sock\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path), daemon_files=True)
    got = [(p.line, p.col) for p in err.value.problems]
    assert got == [(2, 11), (3, 10), (4, 11)], str(err.value)
    assert all("writable by group and others (mode 0777)" in p.message
               for p in err.value.problems)
    assert f"chmod go-w {base}/logs" in err.value.problems[1].message


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_files_are_loaded_as_the_transport_will(tmp_path):
    res = CliRunner().invoke(cli.main, ["cluster", "init-tls", str(tmp_path / "tls"),
                                        "--nodes", "a,b"])
    assert res.exit_code == 0, res.output
    (tmp_path / "jobs").mkdir()
    path = tmp_path / "cronrd.yaml"
    head = ("node_id: a\njobs_dir: jobs\ndata_dir: d\nlog_dir: l\nsocket: s.sock\n"
            "cluster:\n  listen: 127.0.0.1:7000\n"
            "  initial_members: {a: 127.0.0.1:7000, b: 127.0.0.1:7001}\n")
    path.write_text(head + "  tls: {ca: tls/ca.crt, cert: tls/a.crt, key: tls/b.key}\n")
    load_config(str(path))  # without the file system checks: paths only
    with pytest.raises(ConfigError) as err:
        load_config(str(path), daemon_files=True)
    assert str(err.value) == (
        f"{path}:9:47: cluster.tls.key: {tmp_path}/tls/b.key is not the private key of "
        f"{tmp_path}/tls/a.crt, or not a PEM key (KEY_VALUES_MISMATCH); `cronrd cluster "
        "init-tls DIR --nodes ...` creates them")
    path.write_text(head + "  tls: {ca: tls/ca.key, cert: tls/a.crt, key: tls/a.key}\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path), daemon_files=True)
    assert str(err.value).startswith(
        f"{path}:9:13: cluster.tls.ca: {tmp_path}/tls/ca.key is not a PEM certificate")
    path.write_text(head + "  tls: {ca: tls/ca.crt, cert: tls/a.crt, key: tls/a.key}\n")
    assert load_config(str(path), daemon_files=True).cluster.tls.cert == f"{tmp_path}/tls/a.crt"


def test_the_start_hint_names_systemd_only_for_the_packaged_config():
    from cronrd.config import DEFAULT_CONFIG_PATH, start_hint
    assert start_hint(DEFAULT_CONFIG_PATH) == "`systemctl start cronrd`"
    assert start_hint(None) == "`systemctl start cronrd`"
    assert start_hint("examples/cronrd.yaml") == "`cronrd daemon --config examples/cronrd.yaml`"

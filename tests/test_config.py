"""Daemon config parsing and the systemd notifier."""

from __future__ import annotations

import os
import socket

import pytest

from cronrd.config import config_path, load_config, parse_config
from cronrd.errors import ConfigError
from cronrd.runtime.sdnotify import Notifier


def test_defaults_and_relative_paths(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("node_id: n1\ndata_dir: state\ntimezone: Europe/Berlin\n")
    cfg = load_config(str(cfg_file))
    assert cfg.node_id == "n1"
    assert cfg.data_dir == str(tmp_path / "state")  # relative to the config file
    assert cfg.jobs_dir == "/etc/cronrd.d" and cfg.socket == "/run/cronrd/cronrd.sock"
    assert cfg.shutdown_mode == "wait" and cfg.shutdown_grace == 30.0
    assert cfg.log_max_age == 30 * 86400 and cfg.log_max_files_per_job == 500
    assert cfg.state_db == str(tmp_path / "state" / "state.db")


@pytest.mark.parametrize("raw, message", [
    ([1], "must be a mapping"),
    ({"node_ID": "x"}, "unknown key 'node_ID' (did you mean 'node_id'?)"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"shutdown": {"mode": "later"}}, "shutdown.mode must be 'wait' or 'stop'"),
    ({"shutdown": {"grace": "soon"}}, "bad duration"),
    ({"log_retention": {"max_files_per_job": 0}}, "positive integer"),
    ({"log_retention": {"keep": 1}}, "unknown log_retention key"),
    ({"log_level": "loud"}, "log_level must be"),
    ({"data_dir": 5}, "data_dir must be a non-empty string"),
    ({"cluster": {"listen": "x"}}, "not supported by this version yet"),
])
def test_bad_config_is_refused_with_a_clear_message(raw, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, "/etc/cronrd/cronrd.yaml")
    assert message in str(exc.value)
    assert str(exc.value).startswith("/etc/cronrd/cronrd.yaml: ")


def test_missing_and_broken_files(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="not found; pass --config"):
        load_config(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("node_id: [x\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:1: not valid YAML"):
        load_config(str(bad))
    monkeypatch.setenv("CRONRD_CONFIG", "/x/y.yaml")
    assert config_path(None) == "/x/y.yaml"
    assert config_path("/a.yaml") == "/a.yaml"
    monkeypatch.delenv("CRONRD_CONFIG")
    assert config_path(None) == "/etc/cronrd/cronrd.yaml"


def test_notifier_sends_datagrams_and_is_a_noop_without_socket(tmp_path):
    assert Notifier({}).ready() is False
    path = str(tmp_path / "n.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.bind(path)
        n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000",
                      "WATCHDOG_PID": str(os.getpid())})
        assert n.watchdog_interval == 4.0
        assert n.ready("3 jobs") and n.watchdog() and n.stopping()
        got = [s.recv(100).decode() for _ in range(3)]
    assert got == ["READY=1\nSTATUS=3 jobs", "WATCHDOG=1", "STOPPING=1"]
    other = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval is None  # the watchdog is for another process


def test_notifier_abstract_socket_address():
    assert Notifier({"NOTIFY_SOCKET": "@sd/notify"}).address == "\0sd/notify"


def test_cli_default_config_path_matches_config_module():
    # cli.py keeps its own copy so that `cronrd --version` need not import YAML.
    from cronrd import cli, config
    assert cli.DEFAULT_CONFIG_PATH == config.DEFAULT_CONFIG_PATH

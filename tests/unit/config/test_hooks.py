"""The daemon config's ``hooks:`` (cronrd/config/hooks.py)."""

from __future__ import annotations

import os

import pytest

from cronrd.config import load_config, parse_config
from cronrd.config.hooks import parse_hooks
from cronrd.config.problems import ConfigProblems
from cronrd.errors import ConfigError


def test_hooks_are_parsed_sorted_with_their_defaults():
    cfg = parse_config({"node_id": "n1", "hooks": {
        "z": {"secret_file": "/etc/z.key"},
        "deploy": {"secret_file": "/etc/d.key", "dedupe": "$.delivery.id",
                   "replay_window": "2m"}}})
    assert [h.name for h in cfg.hooks] == ["deploy", "z"]
    deploy, z = cfg.hooks
    assert deploy.dedupe == ("delivery", "id") and deploy.replay_window == 120
    assert z.dedupe is None and z.replay_window == 300 and z.secret is None
    assert parse_config({"node_id": "n1"}).hooks == ()


@pytest.mark.parametrize("hooks, message", [
    ([1], "hooks must be a mapping"),
    ({"d": 2}, "hooks.d must be a mapping {secret_file: FILE"),
    ({"d": {}}, "hooks.d.secret_file is required"),
    ({"d": {"secret_file": "/k", "dedupe": "id"}}, "hooks.d.dedupe must be a field of the "
                                                   "JSON body such as $.id"),
    ({"d": {"secret_file": "/k", "replay_window": "3d"}}, "hooks.d.replay_window must be"),
    ({"d": {"secret": "/k"}}, "unknown key hooks.d.secret (did you mean 'secret_file'?)"),
    ({"-d": {"secret_file": "/k"}}, "hook name '-d' is not valid"),
])
def test_bad_hooks_are_refused_with_what_to_do(hooks, message):
    with pytest.raises(ConfigError) as exc:
        parse_config({"node_id": "n1", "hooks": hooks}, "/etc/cronrd/cronrd.yaml")
    assert message in str(exc.value)


def test_a_bad_hook_is_reported_at_its_line(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\nhooks:\n  deploy:\n    secret_file: k\n    dedupe: id\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    assert str(exc.value).startswith(f"{path}:5:")


def test_the_daemon_reads_the_secret_and_refuses_one_others_can_read(tmp_path):
    key = tmp_path / "k"
    key.write_bytes(b"0123456789abcdef-secret\n")
    os.chmod(key, 0o600)
    report = ConfigProblems("c.yaml")
    [hook] = parse_hooks({"d": {"secret_file": "k"}}, str(tmp_path), report, load_secrets=True)
    assert not report.problems and hook.secret == b"0123456789abcdef-secret"
    assert hook.secret_file == str(key)
    os.chmod(key, 0o644)
    report = ConfigProblems("c.yaml")
    assert parse_hooks({"d": {"secret_file": "k"}}, str(tmp_path), report,
                       load_secrets=True) == ()
    assert "chmod 600" in str(report.problems[0])
    short = tmp_path / "s"
    short.write_bytes(b"short")
    os.chmod(short, 0o600)
    report = ConfigProblems("c.yaml")
    parse_hooks({"d": {"secret_file": str(short)}, "e": {"secret_file": "nope"}},
                str(tmp_path), report, load_secrets=True)
    assert "16 to 4096 bytes" in str(report.problems[0])
    assert "does not exist" in str(report.problems[1])

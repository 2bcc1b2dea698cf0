"""Daemon config parsing (the package cronrd/config/ as a whole)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cronrd.config import (ClusterConfig, config_path, format_address, load_config,
                           parse_address, parse_config)
from cronrd.errors import ConfigError


def test_defaults_and_relative_paths(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("node_id: n1\ndata_dir: state\ntimezone: Europe/Berlin\n")
    cfg = load_config(str(cfg_file))
    assert cfg.node_id == "n1"
    assert cfg.data_dir == str(tmp_path / "state")  # relative to the config file
    assert cfg.jobs_dir == "/etc/cronrd.d" and cfg.socket == "/run/cronrd/cronrd.sock"
    assert cfg.shutdown_mode == "detach" and cfg.shutdown_grace == 30.0
    assert cfg.log_max_age == 30 * 86400 and cfg.log_max_files_per_job == 500
    assert cfg.state_db == str(tmp_path / "state" / "state.db")


@pytest.mark.parametrize("raw, message", [
    ([1], "must be a mapping"),
    ({"node_ID": "x"}, "unknown key 'node_ID' (did you mean 'node_id'?)"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"shutdown": {"mode": "later"}}, "shutdown.mode must be 'detach', 'wait' or 'stop'"),
    ({"shutdown": {"grace": "soon"}}, "bad duration"),
    ({"shutdown": {"mod": "stop"}}, "unknown shutdown key 'mod'"),
    ({"log_retention": {"max_files_per_job": 0}}, "positive integer"),
    ({"log_retention": {"keep": 1}}, "unknown log_retention key"),
    ({"log_level": "loud"}, "log_level must be"),
    ({"data_dir": 5}, "data_dir must be a non-empty string"),
    ({"cluster": ["x"]}, "cluster must be a mapping"),
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


def test_cli_default_config_path_matches_config_module():
    # cli/base.py keeps its own copy so that `cronrd --version` need not import YAML.
    from cronrd import cli, config
    assert cli.DEFAULT_CONFIG_PATH == config.DEFAULT_CONFIG_PATH


# -- cluster: --------------------------------------------------------------------------------
CFG = "/etc/cronrd/cronrd.yaml"


def cluster(**over) -> dict:
    """A valid config with an insecure 3-node cluster section, keys overridden
    (network addresses, so the insecure mode needs allow_network)."""
    section = {"listen": "0.0.0.0:7000",
               "initial_members": {"a": "10.0.0.1:7000", "b": "10.0.0.2:7000",
                                   "c": "10.0.0.3:7000"},
               "insecure": {"allow_network": True}}
    section.update(over)
    return {"node_id": "a", "cluster": {k: v for k, v in section.items() if v is not ...}}


def test_no_cluster_section_is_a_one_node_cluster(tmp_path):
    cfg = parse_config({"node_id": "n1", "data_dir": str(tmp_path)}, CFG)
    assert cfg.cluster is None
    assert parse_config({"cluster": None}, CFG).cluster is None
    assert cfg.raft_db == str(tmp_path / "raft.db")
    assert cfg.local_db == str(tmp_path / "local.db")


def test_cluster_defaults():
    c = parse_config(cluster(), CFG).cluster
    assert isinstance(c, ClusterConfig)
    assert c.listen == ("0.0.0.0", 7000)
    assert c.members_dict() == {"a": ("10.0.0.1", 7000), "b": ("10.0.0.2", 7000),
                                "c": ("10.0.0.3", 7000)}
    assert type(c.members_dict()) is dict and c.initial_members["b"] == ("10.0.0.2", 7000)
    assert c.join is False and c.tls is None and c.insecure is True
    assert c.tags == () and c.node_timeout == 10.0 and c.election_timeout == 0.5


def test_cluster_every_key_set(tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir()
    for name in ("ca.crt", "a.crt", "a.key"):
        (tls / name).write_text("x")
    cfg_file = tmp_path / "cronrd.yaml"
    cfg_file.write_text(
        "node_id: a\n"
        "cluster:\n"
        "  listen: \"[::]:7100\"\n"
        "  initial_members:\n"
        "    a: \"[fd00::1]:7100\"\n"
        "    b: b.example.net:7100\n"
        "  join: false\n"
        "  tls: {ca: tls/ca.crt, cert: tls/a.crt, key: ./tls/../tls/a.key}\n"
        "  tags: [ssd, eu-west]\n"
        "  node_timeout: 1m\n"
        "  election_timeout: 500ms\n")
    c = load_config(str(cfg_file)).cluster
    assert c.listen == ("::", 7100)
    assert c.members_dict() == {"a": ("fd00::1", 7100), "b": ("b.example.net", 7100)}
    # TLS paths are relative to the directory of the config file.
    assert (c.tls.ca, c.tls.cert, c.tls.key) == (str(tls / "ca.crt"), str(tls / "a.crt"),
                                                 str(tls / "a.key"))
    assert c.insecure is False and c.tags == ("ssd", "eu-west")
    assert c.node_timeout == 60.0 and c.election_timeout == 0.5
    assert hash(c) == hash(load_config(str(cfg_file)).cluster)
    assert c == load_config(str(cfg_file)).cluster
    with pytest.raises(Exception):
        c.join = True  # frozen
    with pytest.raises(TypeError):
        c.initial_members["z"] = ("h", 1)  # read-only mapping


def test_join_may_omit_self():
    c = parse_config(cluster(join=True, initial_members={"b": "10.0.0.2:7000"}), CFG).cluster
    assert c.join is True and c.members_dict() == {"b": ("10.0.0.2", 7000)}


def test_tls_file_missing_names_it_and_suggests_init_tls(tmp_path):
    (tmp_path / "ca.crt").write_text("x")
    (tmp_path / "a.crt").write_text("x")
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("node_id: a\ncluster:\n  listen: 127.0.0.1:7000\n"
                        "  initial_members: {a: 127.0.0.1:7000}\n"
                        "  tls: {ca: ca.crt, cert: a.crt, key: a.key}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(str(cfg_file))
    msg = str(exc.value)
    assert msg.startswith(f"{cfg_file}:5:39: cluster.tls.key: {tmp_path / 'a.key'} does not "
                          "exist")  # the line and column of the value
    assert "cronrd cluster init-tls" in msg
    (tmp_path / "a.key").mkdir()
    with pytest.raises(ConfigError, match="a.key is not a regular file"):
        load_config(str(cfg_file))


@pytest.mark.parametrize("over, message", [
    ({"listen": ...}, "cluster.listen is required"),
    ({"listen": 7000}, "cluster.listen must be a string \"HOST:PORT\""),
    ({"listen": "0.0.0.0"}, "cluster.listen '0.0.0.0' has no port"),
    ({"listen": ":7000"}, "use 0.0.0.0 or [::] to listen on every interface"),
    ({"listen": "h:0"}, "must be a number from 1 to 65535"),
    ({"listen": "h:http"}, "must be a number from 1 to 65535"),
    ({"listen": "::1:7000"}, "write an IPv6 address in brackets, e.g. \"[::1]:7000\""),
    ({"listen": "[nope]:7000"}, "is not an IPv6 address"),
    ({"listen": "[::1]7000"}, "is not \"[IPV6]:PORT\""),
    ({"lisen": "h:1"}, "unknown key cluster.lisen (did you mean 'listen'?)"),
    ({"initial_members": ...}, "cluster.initial_members is required"),
    ({"initial_members": {}}, "including this node (a: ...) unless join: true"),
    ({"initial_members": ["a"]}, "cluster.initial_members must be a mapping"),
    ({"initial_members": {"b": "h:1"}}, "must list this node ('a')"),
    ({"initial_members": {"a": "h:1", 5: "h:2"}}, "node id 5 must be a string; quote it"),
    ({"initial_members": {"a": "h:1", "-x": "h:2"}}, "'-x' is not a valid node id"),
    ({"initial_members": {"a": "h:1", "b": "h"}}, "cluster.initial_members.b: address 'h' "
                                                   "has no port"),
    ({"initial_members": {"a": "h:1", "b": "h:1"}}, "a and b have the same address h:1"),
    ({"join": "yes"}, "cluster.join must be true or false"),
    ({"join": True, "initial_members": {"a": "h:1"}}, "must list the members of the running"),
    ({"insecure": ...}, "cluster needs tls: {ca: FILE, cert: FILE, key: FILE}"),
    ({"insecure": False}, "only on a loopback or isolated test network"),
    ({"insecure": "true"}, "cluster.insecure must be true, false or {allow_network: true}"),
    ({"tls": {"ca": "a", "cert": "b", "key": "c"}}, "both tls and insecure: true"),
    ({"insecure": ..., "tls": "dir"}, "cluster.tls must be a mapping {ca: FILE"),
    ({"insecure": ..., "tls": {"ca": "x", "cert": "y"}}, "cluster.tls.key is required"),
    ({"insecure": ..., "tls": {"ca": "x", "crt": "y"}}, "unknown key cluster.tls.crt "
                                                        "(did you mean 'cert'?)"),
    ({"tags": "ssd"}, "cluster.tags must be a list of strings"),
    ({"tags": ["ssd", 3]}, "each entry of cluster.tags must be a non-empty string"),
    ({"tags": ["ssd", "ssd"]}, "cluster.tags lists 'ssd' twice"),
    ({"tags": ["executor:container"]}, "is announced by the node itself"),
    ({"node_timeout": "1s"}, "cluster.node_timeout must be at least 2.5s (got 1s): three "
                             "election timeouts"),
    ({"election_timeout": "5s", "node_timeout": "9s"}, "cluster.node_timeout must be at "
                                                        "least 16s (got 9s)"),
    ({"election_timeout": "0.2s", "node_timeout": "1.5s"}, "cluster.node_timeout must be at "
                                                           "least 2s (got 1.5s)"),
    ({"node_timeout": "soon"}, "cluster.node_timeout: bad duration 'soon'"),
    ({"election_timeout": "100ms"}, "cluster.election_timeout must be between 0.2s and 60s"),
    ({"election_timeout": "2m"}, "cluster.election_timeout must be between 0.2s and 60s"),
    ({"max_clock_offset": "1ms"}, "cluster.max_clock_offset must be between 10ms and 3600s"),
    ({"max_clock_offset": "2h"}, "cluster.max_clock_offset must be between 10ms and 3600s"),
    ({"max_clock_offset": "soon"}, "cluster.max_clock_offset: "),
    ({"election_timeout": -1}, "cluster.election_timeout: bad duration"),
])
def test_bad_cluster_section_is_refused_with_a_clear_message(over, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(cluster(**over), CFG)
    assert str(exc.value).startswith(f"{CFG}: "), str(exc.value)
    assert message in str(exc.value), str(exc.value)


def test_cluster_node_id_must_be_certificate_safe():
    raw = cluster(initial_members={"a b": "h:1"})
    raw["node_id"] = "a b"
    with pytest.raises(ConfigError, match="node_id 'a b' cannot name a cluster node"):
        parse_config(raw, CFG)


def test_tls_unreadable_directory_is_left_to_the_daemon(tmp_path, monkeypatch):
    # A CLI user in socket_group may not be able to look into the TLS directory;
    # that must not stop `cronrd status` from finding the socket.
    real_stat = os.stat

    def stat(p, *a, **kw):
        if str(p).startswith(str(tmp_path / "secret")):
            raise PermissionError(13, "Permission denied", str(p))
        return real_stat(p, *a, **kw)
    monkeypatch.setattr(os, "stat", stat)
    raw = cluster(insecure=..., tls={"ca": "secret/ca.crt", "cert": "secret/a.crt",
                                     "key": "secret/a.key"})
    c = parse_config(raw, str(tmp_path / "c.yaml")).cluster
    assert c.tls.key == str(tmp_path / "secret" / "a.key")


@pytest.mark.parametrize("text, addr", [
    ("127.0.0.1:7101", ("127.0.0.1", 7101)),
    ("node-1.example.net:1", ("node-1.example.net", 1)),
    ("[::1]:65535", ("::1", 65535)),
    (" [fe80::1]:7000 ", ("fe80::1", 7000)),
])
def test_parse_and_format_address(text, addr):
    assert parse_address(text) == addr
    assert parse_address(format_address(addr)) == addr


def test_the_quick_start_keeps_its_live_jobs_out_of_examples():
    """A user's experiments in the quick start's jobs directory must not
    reach the test suite, which validates examples/jobs."""
    root = Path(__file__).resolve().parents[3]
    cfg = load_config(str(root / "examples" / "cronrd.yaml"))
    assert cfg.jobs_dir == str(root / ".cronrd-demo" / "jobs")
    assert not Path(cfg.jobs_dir).is_relative_to(root / "examples")
    readme = (root / "README.md").read_text()
    assert "-t .cronrd-demo/jobs examples/jobs/*.yaml" in readme


def test_example_cluster_configs_load():
    root = Path(__file__).resolve().parents[3] / "examples" / "cluster"
    cfgs = {n: load_config(str(root / f"{n}.yaml")) for n in ("a", "b", "c")}
    members = {n: c.cluster.members_dict() for n, c in cfgs.items()}
    assert members["a"] == members["b"] == members["c"] == {
        "a": ("127.0.0.1", 7101), "b": ("127.0.0.1", 7102), "c": ("127.0.0.1", 7103)}
    for n, c in cfgs.items():
        assert c.node_id == n and c.cluster.insecure and not c.cluster.join
        assert c.cluster.listen == members[n][n]
        # the quick start's live job files, never examples/ (the tests read that)
        assert c.jobs_dir == str(root.parent.parent / ".cronrd-demo" / "jobs")
    for attr in ("data_dir", "log_dir", "socket"):
        values = {getattr(c, attr) for c in cfgs.values()}
        assert len(values) == 3, attr
        assert all(f"/.cronrd-cluster/{n}/" in getattr(cfgs[n], attr) for n in cfgs)
    # Issue 33 (5): each node an HTTP port of its own, none the quick start's
    # node's default (all three took 127.0.0.1:8177, so two could not serve).
    http = {c.http.listen for c in cfgs.values()}
    assert None not in http and len(http) == 3 and ("127.0.0.1", 8177) not in http
    text = (root / "a.yaml").read_text()
    assert "tls" in text  # the comment that points at production use


def test_cluster_keys_are_documented():
    from cronrd.config import CLUSTER_KEYS, TLS_KEYS
    import re
    root = Path(__file__).resolve().parents[3]
    text = (root / "man" / "cronrd.8").read_text().replace("\\-", "-")
    section = text.split(".B cluster\n", 1)[1] if ".B cluster\n" in text else ""
    missing = [k for k in CLUSTER_KEYS + TLS_KEYS
               if not re.search(rf"^\.(B|BR|BI) {k}\b", section, re.M)]
    assert not missing, f"cluster keys without an entry in man/cronrd.8: {missing}"

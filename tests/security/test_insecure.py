"""`insecure: true` (no TLS on the peer port) only where nobody else can reach it.

Without TLS a node believes whatever id a connection claims, so anyone who
reaches the peer port can impersonate a node and run commands as root on
every host. It was accepted on any address with one warning at start, and
`cronrd status` did not show it.
"""

from __future__ import annotations

import json

import pytest
import yaml

from cluster_harness import free_port
from cronrd.config import is_loopback, parse_config
from cronrd.errors import ConfigError
from harness import wait_for

CFG = "/etc/cronrd/cronrd.yaml"


def raw(listen: str, members: dict, insecure=True, **extra) -> dict:
    return {"node_id": "a", "cluster": {"listen": listen, "initial_members": members,
                                        "insecure": insecure, **extra}}


@pytest.mark.parametrize("listen, members, key, addr", [
    ("0.0.0.0:7000", {"a": "127.0.0.1:7000"}, "cluster.listen", "0.0.0.0:7000"),
    ("[::]:7000", {"a": "127.0.0.1:7000"}, "cluster.listen", "[::]:7000"),
    ("10.0.0.1:7000", {"a": "10.0.0.1:7000"}, "cluster.listen", "10.0.0.1:7000"),
    ("127.0.0.1:7000", {"a": "127.0.0.1:7000", "b": "10.0.0.1:7000"},
     "cluster.initial_members.b", "10.0.0.1:7000"),
    ("127.0.0.1:7000", {"a": "127.0.0.1:7000", "b": "node-b.example.net:7000"},
     "cluster.initial_members.b", "node-b.example.net:7000"),
    ("127.0.0.1:7000", {"a": "127.0.0.1:7000", "b": "[fe80::1]:7000"},
     "cluster.initial_members.b", "[fe80::1]:7000"),
])
def test_insecure_true_is_refused_on_a_non_loopback_address(listen, members, key, addr):
    with pytest.raises(ConfigError) as err:
        parse_config(raw(listen, members), CFG)
    msg = str(err.value)
    assert msg.startswith(f"{CFG}: cluster.insecure: true is refused because {key} is {addr}, "
                          "which is not a loopback address"), msg
    assert "cronrd cluster init-tls" in msg and "insecure: {allow_network: true}" in msg


def test_insecure_true_is_refused_for_the_members_a_joining_node_contacts():
    with pytest.raises(ConfigError, match="cluster.initial_members.b is 10.0.0.2:7000"):
        parse_config(raw("127.0.0.1:7001", {"b": "10.0.0.2:7000"}, join=True), CFG)


@pytest.mark.parametrize("listen, members", [
    ("127.0.0.1:7000", {"a": "127.0.0.1:7000", "b": "127.0.0.1:7001"}),
    ("127.0.0.21:7000", {"a": "127.0.0.21:7000", "b": "127.255.0.22:7000"}),
    ("[::1]:7000", {"a": "[::1]:7000", "b": "localhost:7001"}),
    ("LOCALHOST:7000", {"a": "localhost:7000", "b": "[::ffff:127.0.0.2]:7000"}),
])
def test_insecure_true_is_accepted_on_loopback(listen, members):
    c = parse_config(raw(listen, members), CFG).cluster
    assert c.insecure is True and c.insecure_network is False and c.tls is None


@pytest.mark.parametrize("listen", ["0.0.0.0:7000", "10.0.0.1:7000", "[::]:7000"])
def test_allow_network_accepts_any_address(listen):
    members = {"a": "10.0.0.1:7000", "b": "node-b.example.net:7000"}
    c = parse_config(raw(listen, members, insecure={"allow_network": True}), CFG).cluster
    assert c.insecure is True and c.insecure_network is True


@pytest.mark.parametrize("insecure, message", [
    ({"allow_network": False}, "cluster.insecure.allow_network must be true (got False)"),
    ({}, "cluster.insecure.allow_network must be true (got None)"),
    ({"allow_networks": True}, "unknown key cluster.insecure.allow_networks (did you mean "
                               "'allow_network'?)"),
    ("yes", "cluster.insecure must be true, false or {allow_network: true} (got 'yes')"),
])
def test_malformed_insecure_is_refused(insecure, message):
    with pytest.raises(ConfigError) as err:
        parse_config(raw("10.0.0.1:7000", {"a": "10.0.0.1:7000"}, insecure=insecure), CFG)
    assert message in str(err.value), str(err.value)


def test_tls_and_insecure_mapping_together_are_refused():
    with pytest.raises(ConfigError, match="both tls and insecure"):
        parse_config(raw("10.0.0.1:7000", {"a": "10.0.0.1:7000"},
                         insecure={"allow_network": True},
                         tls={"ca": "a", "cert": "b", "key": "c"}), CFG)


@pytest.mark.parametrize("host, expect", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("localhost", True),
    ("localhost.", True), ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False),
    ("10.0.0.1", False), ("128.0.0.1", False), ("localhost.example.com", False),
    ("my-host", False),
])
def test_is_loopback(host, expect):
    assert is_loopback(host) is expect


# -- real daemons --------------------------------------------------------------------------
@pytest.mark.integration
def test_the_daemon_refuses_to_start_insecure_on_every_interface(node_factory):
    port = free_port("127.0.0.1")
    node = node_factory(node_id="a", cluster={
        "listen": f"0.0.0.0:{port}", "initial_members": {"a": f"127.0.0.1:{port}"},
        "insecure": True})
    node.start(wait=False)
    assert node.proc.wait(30) == 1
    log = node.daemon_log()
    assert "cluster.insecure: true is refused because cluster.listen is " \
           f"0.0.0.0:{port}" in log, log


@pytest.mark.integration
def test_status_shows_the_insecure_mode_on_every_call(node_factory):
    host = "127.0.0.31"
    port = free_port(host)
    node = node_factory(node_id="a", cluster={
        "listen": f"{host}:{port}", "initial_members": {"a": f"{host}:{port}"},
        "insecure": True})
    node.start()
    line = ("peer transport: INSECURE (no TLS, anyone reaching the port can impersonate a "
            "node; loopback only)")
    for _ in range(2):  # every call, not once at start
        human = node.cli("status")
        assert human.returncode == 0 and line in human.stdout.splitlines(), human.stdout
    st = json.loads(node.cli("status", "--json").stdout)
    assert st["peer_transport"] == "insecure" and st["insecure_network"] is False
    # a member added at run time must be on loopback too
    res = node.cli("cluster", "add", "d", "10.0.0.4:7000")
    assert res.returncode == 2, res
    assert "refusing to add d at 10.0.0.4:7000: this cluster runs with insecure: true" \
        in res.stderr, res.stderr
    assert [m["id"] for m in node.call("cluster_members")["members"]] == ["a"]
    assert node.terminate(timeout=30) == 0

    # The same node, allowed on the network (still on loopback here).
    cfg = dict(node.config)
    cfg["cluster"] = {**cfg["cluster"], "insecure": {"allow_network": True}}
    node.config_path.write_text(yaml.safe_dump(cfg))
    node.start()
    human = node.cli("status")
    assert ("peer transport: INSECURE (no TLS, anyone reaching the port can impersonate a "
            "node; allow_network: reachable beyond loopback)") in human.stdout, human.stdout
    st = wait_for(lambda: json.loads(node.cli("status", "--json").stdout), 10,
                  what="status --json")
    assert st["peer_transport"] == "insecure" and st["insecure_network"] is True
    assert node.terminate(timeout=30) == 0

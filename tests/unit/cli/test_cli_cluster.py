"""The cluster commands of the CLI, and what the read commands send and show.

The fake daemon (tests/support/fake_daemon.py, the `daemon` fixture) speaks
the control protocol of cronrd/runtime/control/server.py on a Unix socket and answers
from a table of canned results.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cronrd.cli import main
from cronrd.cli.base import every_command
from fake_daemon import FakeDaemon

ROOT = Path(__file__).resolve().parents[3]


def cli(d: FakeDaemon | None, *argv: str):
    pre = ["--socket", d.path] if d is not None else []
    return CliRunner().invoke(main, pre + list(argv), catch_exceptions=False)


MEMBERS = {
    "leader": "b",
    "members": [
        {"id": "a", "address": "10.0.0.1:7000", "role": "voter", "reachable": True,
         "last_contact": None, "last_contact_s": None, "leader": False, "self": True,
         "state": "up", "tags": ["ssd"], "clock_offset_ms": 1.5,
         "version": {"release": "0.3.0", "applies": 2, "recorded": 1, "answered": True}},
        {"id": "b", "address": "10.0.0.2:7000", "role": "voter", "reachable": True,
         "last_contact": "2026-11-29T10:00:00Z", "last_contact_s": 0.25, "leader": True,
         "self": False, "state": "up", "tags": [], "clock_offset_ms": -0.4,
         "version": {"release": "0.3.0", "applies": 2, "recorded": 1, "answered": True}},
        {"id": "c", "address": "[fd00::3]:7000", "role": "learner", "reachable": False,
         "last_contact": "2026-11-29T09:55:00Z", "last_contact_s": 305.0, "leader": False,
         "self": False, "state": "draining", "tags": ["eu", "gpu"],
         "clock_offset_ms": 30012.0,
         "version": {"release": "0.2.0 or older", "applies": 1, "recorded": 1,
                     "answered": True}},
    ],
    "cluster_version": 1, "mixed": True,
}


# -- cluster members -----------------------------------------------------------------------
def test_members_table(daemon):
    d = daemon(cluster_members=MEMBERS)
    res = cli(d, "cluster", "members")
    assert res.exit_code == 0, res.output
    assert d.requests == [{"cmd": "cluster_members", "args": {}}]
    lines = res.output.splitlines()
    assert re.split(r"\s{2,}", lines[0]) == ["ID", "ADDRESS", "ROLE", "REACHABLE",
                                             "LAST-CONTACT", "LEADER", "CLOCK", "VERSION",
                                             "TAGS"]
    a, b, c = lines[1:4]
    assert a.startswith("a *") and "10.0.0.1:7000" in a and "ssd" in a and "+2ms" in a
    assert re.search(r"^b\s+10\.0\.0\.2:7000\s+voter\s+yes\s+0\.2s ago\s+yes\s+0ms\s+"
                     r"0\.3\.0 \(2\)\s+-$", b), b
    assert "learner (draining)" in c and " NO " in c and "5m05s ago" in c and "eu,gpu" in c
    assert "+30.0s" in c
    assert "[fd00::3]:7000" in c and "0.2.0 or older (1)" in c
    assert "cluster version 1: MIXED releases; it rises once every member runs the " \
        "newest" in res.output
    assert "leader: b" in res.output and "* this node" in res.output


def test_members_json_and_no_leader(daemon):
    d = daemon(cluster_members=MEMBERS)
    res = cli(d, "cluster", "members", "--json")
    assert res.exit_code == 0 and json.loads(res.output) == MEMBERS
    d2 = daemon(cluster_members={"leader": None, "members": []})
    res = cli(d2, "cluster", "members")
    assert res.exit_code == 0 and "no leader known" in res.output


# -- cluster add / remove / transfer-leader ------------------------------------------------------
def test_add_sends_node_and_address_and_shows_the_answer(daemon):
    d = daemon(cluster_add={"node": "d", "address": "10.0.0.4:7000", "role": "learner",
                            "hint": "promoted to voter once caught up (voters: 3)"})
    res = cli(d, "cluster", "add", "d", "10.0.0.4:7000")
    assert res.exit_code == 0, res.output
    assert d.requests == [{"cmd": "cluster_add",
                           "args": {"node": "d", "address": "10.0.0.4:7000",
                                    "token": False}}]
    assert "added d at 10.0.0.4:7000 as learner" in res.output
    assert "promoted to voter once caught up (voters: 3)" in res.output
    assert "join: true" in res.output  # the next step on the new node


def test_add_with_a_token_prints_it_and_the_config_to_use(daemon):
    d = daemon(cluster_add={"node": "d", "address": "10.0.0.4:7000", "role": "expected",
                            "token": "tok-123"})
    res = cli(d, "cluster", "add", "d", "10.0.0.4:7000", "--token")
    assert res.exit_code == 0, res.output
    assert d.requests[0]["args"]["token"] is True
    assert "tok-123" in res.output and "join: {token: tok-123}" in res.output


def test_add_without_hint_explains_promotion(daemon):
    d = daemon(cluster_add={"role": "learner"})
    res = cli(d, "cluster", "add", "e", "[::1]:7005")
    assert res.exit_code == 0
    assert d.requests[0]["args"] == {"node": "e", "address": "[::1]:7005", "token": False}
    assert "voter once it has caught up" in res.output and "odd" in res.output


@pytest.mark.parametrize("argv, message", [
    (["bad id", "h:1"], "not a valid node id"),
    (["d", "10.0.0.4"], "has no port"),
    (["d", "h:99999"], "from 1 to 65535"),
    (["d", "::1:7000"], "in brackets"),
])
def test_add_refuses_bad_arguments_before_calling(daemon, argv, message):
    d = daemon(cluster_add={"role": "learner"})
    res = CliRunner().invoke(main, ["--socket", d.path, "cluster", "add", *argv])
    assert res.exit_code == 2 and message in res.output, res.output
    assert d.requests == []


def test_remove(daemon):
    d = daemon(cluster_remove={"removed": "c"})
    res = cli(d, "cluster", "remove", "c")
    assert res.exit_code == 0, res.output
    assert d.requests == [{"cmd": "cluster_remove", "args": {"node": "c"}}]
    assert "removed c" in res.output


def test_transfer_leader_with_and_without_a_target(daemon):
    d = daemon(cluster_transfer_leader={"leader": "c"})
    res = cli(d, "cluster", "transfer-leader", "c")
    assert res.exit_code == 0 and "the leader is now c" in res.output
    res = cli(d, "cluster", "transfer-leader")
    assert res.exit_code == 0
    assert [r["args"] for r in d.requests] == [{"node": "c"}, {"node": None}]
    assert all(r["cmd"] == "cluster_transfer_leader" for r in d.requests)


def test_daemon_refusals_map_to_exit_codes(daemon):
    d = daemon(cluster_remove={"__error__": "this node is not the leader; the leader is b"},
               cluster_add={"__error__": "node 'a' is already a member", "code": 2})
    res = CliRunner().invoke(main, ["--socket", d.path, "cluster", "remove", "c"])
    assert res.exit_code == 1 and "not the leader; the leader is b" in res.output
    res = CliRunner().invoke(main, ["--socket", d.path, "cluster", "add", "a", "h:1"])
    assert res.exit_code == 2 and "already a member" in res.output


def test_no_daemon_names_the_socket(tmp_path):
    sock = str(tmp_path / "none.sock")
    res = CliRunner().invoke(main, ["--socket", sock, "cluster", "members"])
    assert res.exit_code == 1 and sock in res.output and "cronrd daemon" in res.output


# -- --consistent ---------------------------------------------------------------------------
STATUS = {
    "node_id": "a", "role": "follower", "leader": "b", "ready": True, "version": "0.1.0",
    "pid": 42, "uptime_s": 12.0, "jobs": 3, "paused": 1, "running": 0, "assigned": 1,
    "term": 7, "commit_index": 120, "applied_index": 118,
    "state_digest": "0123456789abcdef0123456789abcdef", "problems": [],
    "conflicts": ["backup: defined differently on a (/etc/cronrd.d/b.yaml) and c"],
    "socket": "/run/cronrd/cronrd.sock", "data_dir": "/var/lib/cronrd",
    "log_dir": "/var/log/cronrd", "jobs_dir": "/etc/cronrd.d",
}

JOB = {"name": "backup", "schedule": "0 2 * * *", "paused": False, "enabled": True,
       "next_fire": "2026-11-30T02:00:00Z", "last_run": None, "conflict": None}


@pytest.mark.parametrize("argv, cmd, args", [
    (["status"], "status", {}),
    (["status", "--consistent"], "status", {"consistent": True}),
    (["jobs"], "jobs", {"limit": 1000, "after": None, "match": None}),
    (["jobs", "--consistent"], "jobs", {"limit": 1000, "after": None, "match": None,
                                        "consistent": True}),
    (["runs", "backup", "--limit", "3"], "runs", {"job": "backup", "limit": 3}),
    (["runs", "--consistent"], "runs",
     {"limit": 20, "consistent": True}),
])
def test_reads_send_consistent_only_when_asked(daemon, argv, cmd, args):
    d = daemon(status=STATUS, jobs={"jobs": [JOB], "next": None}, runs={"runs": [], "gaps": []})
    res = cli(d, *argv)
    assert res.exit_code == 0, res.output
    assert d.requests == [{"cmd": cmd, "args": args}]


def test_consistent_is_explained_in_help():
    for cmd in ("status", "jobs", "runs"):
        out = CliRunner().invoke(main, [cmd, "--help"]).output
        assert "--consistent" in out and "ReadIndex" in out, cmd


# -- status and jobs rendering -----------------------------------------------------------------
def test_status_shows_raft_fields_and_conflicts(daemon):
    d = daemon(status=STATUS)
    out = cli(d, "status").output
    assert re.search(r"^role\s+follower, term 7$", out, re.M), out
    assert re.search(r"^leader\s+b$", out, re.M)
    assert "commit index 120, applied index 118, digest 0123456789abcdef" in out
    assert "0123456789abcdef0123" not in out  # short digest
    assert re.search(r"^conflicts\s+1 job", out, re.M)
    assert "  backup: defined differently on a" in out


def test_status_tolerates_missing_keys(daemon):
    d = daemon(status={"node_id": "a"})
    res = cli(d, "status")
    assert res.exit_code == 0, res.output
    assert "node      a" in res.output and "none known" in res.output


def test_jobs_marks_conflicts_and_lists_them_under_the_table(daemon):
    # The daemon's text names the job; a text that does not is prefixed with it.
    text = ("node a defines job 'report' differently from node c (digests 1234abcd, "
            "5678ef01); make the job files identical on every node")
    other = dict(JOB, name="report", schedule="@hourly", conflict=text)
    third = dict(JOB, name="sync", conflict={"message": "a and b disagree"})
    d = daemon(jobs={"jobs": [JOB, other, third], "next": None})
    out = cli(d, "jobs").output
    rows = {line.split()[0]: line for line in out.splitlines()[1:4]}
    assert "CONFLICT" not in rows["backup"] and "active CONFLICT" in rows["report"]
    assert "active CONFLICT" in rows["sync"]
    tail = out.split("CONFLICT:", 1)[1].splitlines()
    assert f"  {text}" in tail and "  sync: a and b disagree" in tail


# -- cluster init-tls ------------------------------------------------------------------------
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="the openssl command is not installed")


def _subject(cert: Path) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-subject"],
                          capture_output=True, text=True, check=True).stdout


@needs_openssl
def test_init_tls_writes_ca_and_node_files_without_a_config(tmp_path, monkeypatch):
    monkeypatch.setenv("CRONRD_CONFIG", str(tmp_path / "absent.yaml"))
    d = tmp_path / "tls"
    res = cli(None, "cluster", "init-tls", str(d), "--nodes", "a, b,c")
    assert res.exit_code == 0, res.output
    for name in ("ca.crt", "ca.key", "a.crt", "a.key", "b.crt", "b.key", "c.crt", "c.key"):
        assert (d / name).is_file(), name
    for name in ("ca.key", "a.key"):
        assert (d / name).stat().st_mode & 0o077 == 0
    assert "CN = b" in _subject(d / "b.crt") or "CN=b" in _subject(d / "b.crt")
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(d / "ca.crt"),
                             str(d / "c.crt")], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr
    out = res.output
    assert "created the cluster CA" in out and str(d / "a.key") in out
    assert "ca.key offline" in out and "tls: {ca:" in out


@needs_openssl
def test_init_tls_reuses_the_ca_and_refuses_to_overwrite(tmp_path):
    d = tmp_path / "tls"
    assert cli(None, "cluster", "init-tls", str(d), "--nodes", "a").exit_code == 0
    ca = (d / "ca.crt").read_bytes()
    a_crt = (d / "a.crt").read_bytes()

    res = cli(None, "cluster", "init-tls", str(d), "--nodes", "a,b")
    assert res.exit_code == 1 and "already has a certificate or key for a" in res.output
    assert "--force" in res.output and not (d / "b.crt").exists()

    res = cli(None, "cluster", "init-tls", str(d), "--nodes", "b")
    assert res.exit_code == 0 and "kept the existing cluster CA" in res.output
    assert (d / "ca.crt").read_bytes() == ca

    res = cli(None, "cluster", "init-tls", str(d), "--nodes", "a", "--force")
    assert res.exit_code == 0 and (d / "a.crt").read_bytes() != a_crt
    assert (d / "ca.crt").read_bytes() == ca

    # ca.key kept offline, as advised: a new CA must not silently replace ca.crt.
    (d / "ca.key").rename(tmp_path / "ca.key.offline")
    res = cli(None, "cluster", "init-tls", str(d), "--nodes", "c")
    assert res.exit_code == 1 and "ca.key does not" in res.output
    assert (d / "ca.crt").read_bytes() == ca and not (d / "c.crt").exists()


@pytest.mark.parametrize("nodes, message", [
    ("a,bad id", "not a valid node id"),
    ("a,a", "twice"),
    (" , ", "at least one node id"),
])
def test_init_tls_usage_errors(tmp_path, nodes, message):
    res = CliRunner().invoke(main, ["cluster", "init-tls", str(tmp_path / "t"), "--nodes", nodes])
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "t").exists()


def test_init_tls_without_openssl_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no openssl here
    res = CliRunner().invoke(main, ["cluster", "init-tls", str(tmp_path / "t"), "--nodes", "a"])
    assert res.exit_code == 1 and "openssl" in res.output and "install" in res.output


# -- docs ------------------------------------------------------------------------------------
def _man() -> str:
    return (ROOT / "man" / "cronrd.8").read_text().replace("\\-", "-").replace("\\&", "")


def test_cluster_subcommands_and_options_are_in_the_man_page():
    text = _man()
    group = every_command()["cluster"]
    for name, cmd in group.commands.items():
        assert re.search(rf"^\.B cluster {re.escape(name)}\b", text, re.M), name
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert opt in text, f"cluster {name} {opt}"
    for word in ("--consistent", "ReadIndex", "conflict", "openssl", "cryptography"):
        assert word in text, word


def test_jobs_are_read_and_printed_a_page_at_a_time(daemon, monkeypatch):
    import cronrd.cli.jobs as cli_module
    monkeypatch.setattr(cli_module, "JOBS_PAGE", 2)
    names = [f"job{i}" for i in range(5)]

    def page(args):
        rest = [n for n in names if args["after"] is None or n > args["after"]]
        got = rest[:args["limit"]]
        return {"jobs": [{**JOB, "name": n} for n in got],
                "next": got[-1] if len(got) == args["limit"] else None}
    d = daemon(jobs=page)
    text = cli(d, "jobs", "job*").output.splitlines()
    assert [r["args"]["after"] for r in d.requests] == [None, "job1", "job3"]
    assert text[0].split() == ["JOB", "SCHEDULE", "STATE", "NEXT", "FIRE", "LAST", "RUN"]
    assert [line.split()[0] for line in text[1:]] == names  # one header, pages line up
    assert d.requests[-1]["args"]["match"] == "job*"


def test_jobs_json_writes_the_daemons_stream_as_one_list(daemon):
    pages = [[{**JOB, "name": "a"}, {**JOB, "name": "b"}], [{**JOB, "name": "c"}]]
    d = daemon(jobs=lambda args: {"jobs": 3})
    d.stream = [{"data": ",\n".join(json.dumps(j) for j in p)} for p in pages]
    out = cli(d, "jobs", "--json", "c*").output
    assert [j["name"] for j in json.loads(out)] == ["a", "b", "c"]
    assert d.requests == [{"cmd": "jobs", "args": {"stream": True, "match": "c*"}}]
    empty = daemon(jobs=lambda args: {"jobs": 0})
    assert json.loads(cli(empty, "jobs", "--json").output) == []


def test_reload_says_when_it_waits_for_another_node_reading_the_same_files(daemon):
    d = daemon(reload={"jobs": 3000, "changes": 0, "problems": [], "again": True,
                       "waiting": "/etc/cronrd.d/fleet.yaml"})
    res = cli(d, "reload")
    assert res.exit_code == 0 and res.output.startswith("3000 jobs, 0 changed")
    assert "from /etc/cronrd.d/fleet.yaml on, waiting for another node" in res.output
    quiet = daemon(reload={"jobs": 3, "changes": 1, "problems": []})
    assert cli(quiet, "reload").output == "3 jobs, 1 changed\n"

"""The everyday commands of the CLI (cronrd/cli/) against a fake daemon
(tests/support/fake_daemon.py): what they send, what they print, how they
fail. Behaviour that depends on a real daemon is in
tests/integration/test_daemon.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cronrd.cli import main
from cronrd.cli.base import hoist_global_options

STATUS = {"node_id": "a", "role": "leader", "leader": "a", "term": 3, "jobs": 2,
          "paused": 0, "running": 0, "assigned": 0}


def run(*argv: str, **kw):
    return CliRunner().invoke(main, list(argv), catch_exceptions=False, **kw)


# -- global options before or after the subcommand --------------------------------------
@pytest.mark.parametrize("argv", [
    ["--socket", "{s}", "status"],
    ["status", "--socket", "{s}"],
    ["status", "--socket={s}"],
    ["--json", "status", "--socket", "{s}"],
])
def test_socket_option_before_or_after_the_subcommand(daemon, argv):
    d = daemon(status=STATUS)
    res = run(*[a.replace("{s}", d.path) for a in argv])
    assert res.exit_code == 0, res.output
    assert [r["cmd"] for r in d.requests] == ["status"]
    if "--json" in argv:
        assert json.loads(res.output)["node_id"] == "a"
    else:
        assert "role      leader, term 3" in res.output


def test_config_option_after_the_subcommand_is_the_config(tmp_path, daemon):
    d = daemon(status=STATUS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"node_id: a\nsocket: {d.path}\ndata_dir: {tmp_path}/data\n"
                   f"log_dir: {tmp_path}/logs\njobs_dir: {tmp_path}/jobs\n")
    res = run("status", "--config", str(cfg))
    assert res.exit_code == 0, res.output
    assert d.requests and d.requests[0]["cmd"] == "status"


def test_nested_group_takes_the_options_too(daemon):
    d = daemon(cluster_members={"leader": None, "members": []})
    res = run("cluster", "members", "--socket", d.path, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"leader": None, "members": []}


def test_hoisting_leaves_arguments_after_double_dash_and_option_values_alone():
    subs = {"status", "logs"}
    assert hoist_global_options(["logs", "j", "--", "--config", "x"], subs) == \
        ["logs", "j", "--", "--config", "x"]
    assert hoist_global_options(["--config", "status", "status"], subs) == \
        ["--config", "status", "status"]
    assert hoist_global_options(["--json", "logs", "j"], subs) == ["logs", "j", "--json"]


def test_the_no_daemon_hint_is_a_command_that_parses(tmp_path):
    """The error names `cronrd daemon --config FILE`: that order must parse."""
    res = run("status", "--socket", str(tmp_path / "none.sock"))
    assert res.exit_code == 1
    assert "cronrd daemon --config FILE" in res.output
    res = run("daemon", "--config", str(tmp_path / "missing.yaml"))
    assert "No such option" not in res.output
    assert "missing.yaml" in res.output and res.exit_code == 1


# -- shell completion ---------------------------------------------------------------------
def complete(argv_words: list[str], env_extra: dict | None = None) -> list[str]:
    """What bash completion offers for the last word (click's protocol)."""
    env = {"_CRONRD_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(argv_words),
           "COMP_CWORD": str(len(argv_words) - 1), **(env_extra or {})}
    res = CliRunner().invoke(main, [], env=env, prog_name="cronrd",
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return [line.split(",", 1)[1] for line in res.output.splitlines() if "," in line]


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F"),
                                           ("zsh", "#compdef cronrd"),
                                           ("fish", "complete --no-files --command cronrd")])
def test_completion_prints_the_script_for_each_shell(shell, marker):
    res = run("completion", shell)
    assert res.exit_code == 0
    assert marker in res.output and "_CRONRD_COMPLETE" in res.output


def test_completion_offers_commands_and_options():
    assert {"show", "status"} <= set(complete(["cronrd", "s"]))
    assert "--since" in complete(["cronrd", "runs", "--s"])


def test_completion_offers_job_names_from_the_daemon(daemon):
    d = daemon(jobs=lambda args: {"jobs": [{"name": n} for n in ("backup", "backfill")
                                           if n.startswith(args["match"].rstrip("*"))],
                                  "next": None})
    assert complete(["cronrd", "--socket", d.path, "show", "ba"]) == ["backup", "backfill"]
    assert complete(["cronrd", "--socket", d.path, "logs", "backu"]) == ["backup"]
    assert d.requests[0]["args"]["match"] == "ba*"


def test_completion_without_a_daemon_offers_nothing_and_says_nothing(tmp_path):
    assert complete(["cronrd", "--socket", str(tmp_path / "none"), "show", "b"]) == []


# -- run-now --param / --key ------------------------------------------------------------
def test_run_now_sends_params_and_key_and_says_when_the_key_had_a_run(daemon):
    d = daemon(run_now={"run_id": 9, "state": "running", "existing": True})
    res = run("--socket", d.path, "run-now", "load", "--param", "day=2026-01-01",
              "--param", "expr=a=b", "--key", "k1")
    assert res.exit_code == 0, res.output
    assert d.requests[0]["args"] == {"job": "load", "wait": False, "key": "k1",
                                     "params": {"day": "2026-01-01", "expr": "a=b"}}
    assert res.output.startswith("run 9 of load was already made with key k1 (running); "
                                 "no new run started")


@pytest.mark.parametrize("argv,words", [
    (["--param", "day"], "--param 'day': write NAME=VALUE, e.g. --param day=2026-01-01"),
    (["--param", "=x"], "write NAME=VALUE"),
    (["--param", "a=1", "--param", "a=2"], "--param a is given twice"),
])
def test_run_now_bad_param_options_are_usage_errors(daemon, argv, words):
    d = daemon(run_now={"run_id": 1, "state": "pending"})
    res = run("--socket", d.path, "run-now", "load", *argv)
    assert res.exit_code == 2 and words in res.output
    assert d.requests == []


# -- pools --------------------------------------------------------------------------------
POOLS = {"pools": [
    {"pool": "db", "slots": 2, "scope": "cluster", "defined": True, "in_use": 2,
     "waiting": 3, "runs": [7, 9]},
    {"pool": "gpu", "slots": 1, "scope": "node", "defined": True, "in_use": 1,
     "waiting": 0, "runs": [8], "by_node": {"n1": 1}, "this_node_config": None},
    {"pool": "etl", "slots": None, "scope": None, "defined": False, "in_use": 0,
     "waiting": 1, "runs": []}]}


def test_pools_lists_slots_in_use_waiting_runs_and_differences(daemon):
    d = daemon(pools=POOLS)
    res = run("--socket", d.path, "pools")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == ["POOL", "SCOPE", "IN", "USE", "WAITING", "RUNS", "NOTE"]
    assert lines[1].split()[:5] == ["db", "cluster", "2/2", "3", "7,9"]
    assert "1/1 (n1: 1)" in lines[2] and "this node's config: no such pool" in lines[2]
    assert "not in force: the leader's config does not define it" in lines[3]
    assert json.loads(run("--socket", d.path, "pools", "--json").output) == POOLS
    assert run("--socket", daemon(pools={"pools": []}).path, "pools").output.startswith(
        "no pools (define them under pools: in the daemon config)")


def test_status_has_a_pools_line(daemon):
    d = daemon(status={**STATUS, "pools": [
        {"pool": "db", "slots": 2, "scope": "cluster", "in_use": 2, "waiting": 3},
        {"pool": "gpu", "slots": 1, "scope": "node", "in_use": 0, "waiting": 0}]})
    out = run("--socket", d.path, "status").output
    assert "pools     db 2/2 (3 waiting), gpu 0/1 per node; `cronrd pools` for more" in out


# -- alerts and the dead letter ------------------------------------------------------
@pytest.mark.parametrize("argv, said", [
    (["alerts", "ack", "x"], "alerts ack takes alert ids (`cronrd alerts` lists them), "
                             "not 'x'"),
    (["alerts", "close", "3"], "use `cronrd alerts` to list, or `cronrd alerts ack ID"),
    (["dead-letter", "requeue", "y"], "dead-letter requeue takes a run id"),
    (["dead-letter", "discard", "5"], "discarding needs --note TEXT"),
    (["dead-letter", "drop", "5"], "use `cronrd dead-letter list`"),
    (["backfill", "pause", "z"], "backfill pause takes a backfill id"),
])
def test_alerts_and_dead_letter_refuse_bad_arguments_before_asking(daemon, argv, said):
    d = daemon()
    res = run("--socket", d.path, *argv)
    assert res.exit_code == 2 and said in res.output, res.output
    assert d.requests == []


def test_alerts_ack_and_dead_letter_requeue_send_what_was_asked(daemon):
    d = daemon(alert_ack={"alert_id": 4, "state": "acked"},
               dead_letter_action={"run_id": 9, "state": "requeued", "new_run_id": 12,
                                   "attempt": 3, "job": "etl"})
    res = run("--socket", d.path, "alerts", "ack", "4", "--note", "disk replaced")
    assert res.exit_code == 0 and "alert 4 acked" in res.output
    res = run("--socket", d.path, "dead-letter", "requeue", "9")
    assert res.exit_code == 0 and "run 9 requeued as run 12 (attempt 3)" in res.output
    assert [(r["cmd"], r["args"]) for r in d.requests] == [
        ("alert_ack", {"id": 4, "note": "disk replaced"}),
        ("dead_letter_action", {"run_id": 9, "action": "requeue", "note": ""})]


# -- the command table (cli/base.py COMMANDS) ------------------------------------------
def test_every_command_of_the_table_loads_under_its_own_name():
    from cronrd.cli.base import COMMANDS, every_command
    found = every_command()
    assert sorted(found) == sorted(COMMANDS) and len(found) >= 30
    for name, cmd in found.items():
        assert cmd.name == name, (name, cmd.name)
    # and nothing else registers commands behind the table's back
    import cronrd.cli.base as B
    assert not B.main.commands


def test_a_command_loads_only_its_own_module():
    """`cronrd next` (a local command) loads neither the cluster's commands
    nor the runs': a fresh interpreter, so nothing is loaded beforehand."""
    import subprocess
    import sys
    code = ("import sys\nfrom cronrd.cli import main\n"
            "try:\n    main(['next', '@hourly', '-n', '1'])\nexcept SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(m for m in sys.modules "
            "if m.startswith('cronrd.cli.'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=str(__import__("pathlib").Path(__file__).parents[3]))
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert "cronrd.cli.local" in loaded, res.stdout + res.stderr
    assert "cronrd.cli.cluster" not in loaded and "cronrd.cli.runs" not in loaded, loaded


def test_run_durations_read_as_seconds_not_second_and_milliseconds():
    """Issue 33 (6): a running run of 1.1 s printed as `1s100ms+`."""
    from cronrd.cli.base import run_row
    run = {"run_id": 7, "job": "j", "fire_time": "2026-12-05T10:00:00Z", "kind": "scheduled",
           "attempt": 1, "node": "a", "state": "running", "timezone": "UTC",
           "started_at": "2026-12-05T10:00:00Z", "finished_at": None, "exit_code": None,
           "signal": None, "reason": None, "due_at": None}
    t0 = 1796464800.0   # 2026-12-05T10:00:00Z
    assert run_row(run, t0 + 1.1, False)[8] == "1.1s+"
    assert run_row({**run, "finished_at": "2026-12-05T10:01:15Z", "state": "succeeded"},
                   t0 + 999, False)[8] == "1m15s"
    assert run_row(run, t0 + 12.4, False)[8] == "12s+"


def test_token_list_columns_are_as_wide_as_their_widest_cell(monkeypatch):
    """Issue 33 (6): a long name and an expired token's note ran together."""
    import cronrd.cli.base as base

    class Fake:
        def call(self, cmd, args=None, **kw):
            assert cmd == "token_list"
            return {"tokens": [
                {"name": "ci-deploy-pipeline-of-the-db-team", "role": "operator",
                 "jobs": "db-*", "expires_at": "2026-12-01T00:00:00Z", "expired": True,
                 "created_at": "2026-11-01T00:00:00Z", "node": "a"},
                {"name": "ro", "role": "viewer", "jobs": None, "expires_at": None,
                 "created_at": "2026-11-02T00:00:00Z", "node": "b"}]}
    monkeypatch.setattr(base.Ctx, "client", lambda self, **kw: Fake())
    res = CliRunner().invoke(main, ["token", "list"])
    assert res.exit_code == 0, res.output
    head, first, second = res.output.splitlines()
    cols = [head.index(h) for h in ("ROLE", "JOBS", "EXPIRES", "CREATED")]
    for line in (first, second):
        for c in cols:
            assert line[c - 2:c] == "  " and line[c] != " ", (line, c)
    assert "2026-12-01T00:00:00Z (expired)" in first and "never" in second

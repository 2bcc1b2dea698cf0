"""The cluster version (state/versions.py): recorded in the log, chosen by
apply from the log and not from the code, never lowered; what only a newer
cronrd applies stops apply instead of being skipped; a state or snapshot
of a newer version is refused with both versions named."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

import apsw
import pytest

from cronrd import __version__
from cronrd.errors import Refused
from cronrd.state import commands as C
from cronrd.state import versions as V
from cronrd.state.apply import apply_batch
from cronrd.state.machine import StateMachine
from tests.unit.state.test_state import T0, Log, spec


def raise_to(version: int, at: float = T0) -> C.SetClusterVersion:
    return C.SetClusterVersion(version=version, members={"n1": "0.3.0"}, at=at)


def meta(sm: StateMachine, key: str):
    for (value,) in sm.conn.execute("SELECT value FROM meta WHERE key=?", (key,)):
        return value
    return None


def test_a_log_without_a_version_is_at_version_1_the_rules_of_0_2_0():
    log = Log()
    assert V.recorded(log.sm.conn) == V.BASE == 1
    assert meta(log.sm, "schema_version") == 6  # cronrd 0.2.0 opens it


def test_raising_the_version_records_it_and_locks_out_0_2_0():
    log = Log()
    before = log.sm.full_digest()
    assert log.apply(raise_to(2)) == {"cluster_version": 2, "was": 1}
    assert V.recorded(log.sm.conn) == 2 and V.at_least(log.sm.conn, 2)
    assert meta(log.sm, "cluster_version_index") == log.index
    # schema 7: cronrd 0.2.0 refuses it ("newer than this cronrd knows (6)")
    assert meta(log.sm, "schema_version") == 7
    assert log.sm.full_digest() != before  # the version is part of the state


@pytest.mark.parametrize("version", [1, 2])
def test_the_version_is_never_lowered_nor_raised_to_itself(version):
    log = Log()
    log.apply(raise_to(2))
    with pytest.raises(Refused, match="never lowered"):
        log.apply(raise_to(version))
    assert V.recorded(log.sm.conn) == 2


def test_a_version_this_code_cannot_apply_stops_apply_and_commits_nothing():
    sm = StateMachine(apsw.Connection(":memory:"))
    newer = V.APPLY_VERSION + 1
    with pytest.raises(V.NewerLog) as err:
        apply_batch(sm, [(1, raise_to(1 + 1)), (2, raise_to(newer))])
    text = str(err.value)
    assert f"log entry 2 raises the cluster version to {newer}" in text
    assert f"cronrd {__version__} applies versions up to {V.APPLY_VERSION}" in text
    assert "upgrade cronrd on this node" in text
    assert sm.applied_index == 0 and V.recorded(sm.conn) == 1  # the batch did not commit


@pytest.mark.parametrize("entry, what", [
    ({"op": "rebalance_everything", "at": 1.0}, "a command of kind 'rebalance_everything'"),
    ({"op": "prune", "before": 1.0, "at": 1.0, "shard": 3}, "a prune command with field(s) shard"),
])
def test_an_unknown_command_kind_or_field_stops_apply_never_skipped(entry, what):
    """cronrd 0.2.0 skipped such an entry (as undecodable) and went on: a
    node of an older version then applied the rest of the log by its own
    rules beside members that applied the entry."""
    sm = StateMachine(apsw.Connection(":memory:"))
    with pytest.raises(V.NewerLog) as err:
        apply_batch(sm, [(1, C.Prune(before=0.0, at=1.0)), (2, json.dumps(entry).encode())])
    assert f"log entry 2 is {what}, which this cronrd does not know" in str(err.value)
    assert "stops applying here rather than skip it" in str(err.value)
    assert sm.applied_index == 0


def test_garbage_that_no_cronrd_writes_is_still_skipped_alike_everywhere():
    sm = StateMachine(apsw.Connection(":memory:"))
    results, _ = apply_batch(sm, [(1, b"\x00not json"), (2, b'{"no_op": 1}')])
    assert sm.applied_index == 2 and all(isinstance(r, Exception) for r in results.values())


@dataclass(frozen=True)
class _Shiny(C.Command):
    """A command as the next version would write one (not registered)."""

    op: ClassVar[str] = "prune"
    added: ClassVar[dict[str, int]] = {"keep_last": 3, "labels": 3}
    before: float
    at: float
    keep_last: int = 0
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


def test_an_added_field_at_its_default_is_left_out_so_older_nodes_decode_it():
    plain = _Shiny(before=1.0, at=2.0)
    assert json.loads(plain.encode()) == {"op": "prune", "before": 1.0, "at": 2.0}
    assert C.decode(plain.encode()) == C.Prune(before=1.0, at=2.0)
    assert V.needs(plain) == 1
    V.check_proposable(plain, 1)
    used = dataclasses.replace(plain, keep_last=5)
    assert json.loads(used.encode())["keep_last"] == 5 and V.needs(used) == 3
    labelled = dataclasses.replace(plain, labels={"team": "db"})  # a default_factory field
    assert json.loads(labelled.encode())["labels"] == {"team": "db"}
    assert V.needs(labelled) == 3
    with pytest.raises(Refused) as err:
        V.check_proposable(used, 2)
    assert "needs cluster version 3" in str(err.value)
    assert "the cluster is at version 2" in str(err.value)
    assert "`cronrd cluster members` shows their versions" in str(err.value)


def test_apply_refuses_a_kind_the_recorded_version_does_not_allow(monkeypatch):
    """The proposers' gate has a backstop: apply refuses, alike everywhere."""
    monkeypatch.setattr(C.Prune, "since", 2)
    log = Log()
    with pytest.raises(Refused, match="prune needs cluster version 2"):
        log.apply(C.Prune(before=0.0, at=T0))
    assert log.sm.applied_index == 1  # refused, not stopped: the index moved on
    log.apply(raise_to(2))
    assert log.apply(C.Prune(before=0.0, at=T0)) is not None


def test_a_state_database_of_a_newer_cluster_version_is_refused_at_start(tmp_path):
    path = str(tmp_path / "state.db")
    sm = StateMachine(apsw.Connection(path))
    with sm.conn:
        sm.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (7,))
        sm.conn.execute("INSERT INTO meta VALUES('cluster_version', ?)", (V.APPLY_VERSION + 1,))
        sm.conn.execute("UPDATE meta SET value='9.9.9' WHERE key='written_by'")
    sm.conn.close()
    with pytest.raises(V.NewerLog) as err:
        StateMachine(apsw.Connection(path))
    text = str(err.value)
    assert f"this node's state database is at cluster version {V.APPLY_VERSION + 1} " \
           "(written by cronrd 9.9.9)" in text
    assert f"this cronrd {__version__} applies versions up to {V.APPLY_VERSION}" in text
    assert "running an older cronrd than the cluster's version is refused" in text


def test_a_database_opened_by_this_code_names_its_maker():
    sm = StateMachine(apsw.Connection(":memory:"))
    assert meta(sm, "written_by") == __version__


def test_replaying_the_same_log_gives_the_same_digest_whichever_version_it_reaches():
    """Two nodes, the same entries, one of them in one batch: the recorded
    version travels in the log, so they agree before and after the raise."""
    cmds = [C.SetPools(pools=[["db", 1, "node"]], at=T0),
            C.PutJob(name="a", spec=spec(name="a", pool="db"), digest="da", source="/a",
                     at=T0, node="n1"),
            raise_to(2, T0 + 1), C.Prune(before=0.0, at=T0 + 2)]
    one = StateMachine(apsw.Connection(":memory:"))
    apply_batch(one, list(enumerate(cmds, 1)))
    other = StateMachine(apsw.Connection(":memory:"))
    for i, cmd in enumerate(cmds, 1):
        apply_batch(other, [(i, cmd.encode())])
    assert one.full_digest() == other.full_digest()
    assert one.state_digest == other.state_digest

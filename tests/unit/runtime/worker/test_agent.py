"""The worker agent (worker/agent.py): known by its certificate, and what
the leader says becomes the executor's effects."""

from __future__ import annotations

import asyncio

import pytest

from cronrd.config import parse_config
from cronrd.errors import ConfigError, RequestError
from cronrd.runtime.peers import tls as T
from cronrd.runtime.worker.agent import WorkerAgent
from cronrd.runtime.worker.view import WorkerView
from tests.unit.runtime.cluster.test_worker_hub import _hub, _state


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    T.init_tls(d, ["a"], days=2, worker_ids=["wk1"])
    return d


def _agent(tmp_path, certs, name="wk1", cert="wk1"):
    cfg = parse_config({"node_id": name, "data_dir": str(tmp_path / "d"), "worker": {
        "servers": ["127.0.0.1:1"], "tls": {"ca": str(certs / "ca.crt"),
                                            "cert": str(certs / f"{cert}.crt"),
                                            "key": str(certs / f"{cert}.key")}}})
    return WorkerAgent(cfg)


def test_a_worker_is_the_name_in_its_worker_certificate(tmp_path, certs):
    _agent(tmp_path, certs)._check_name()
    with pytest.raises(ConfigError, match="node_id 'wk2' is not the name in"):
        _agent(tmp_path, certs, name="wk2")._check_name()
    with pytest.raises(ConfigError, match="is not a worker's certificate"):
        _agent(tmp_path, certs, name="a", cert="a")._check_name()


class FakeExecutor:
    def __init__(self):
        self.effects = []

    def on_effects(self, effects):
        self.effects.extend(effects)


def test_the_leaders_messages_become_the_executors_effects(tmp_path, certs):
    log, mine, _ = _state()
    agent = _agent(tmp_path, certs)
    agent.view, agent.executor = WorkerView("wk1"), FakeExecutor()
    sent = _hub(log).assignment(log.run(mine))
    agent._message({"op": "assigned", **sent})
    agent._message({"op": "effect", "kind": "cancel", "run": sent["run"]})
    agent._message({"op": "effect", "kind": "moved", "run": sent["run"]})
    agent._message({"op": "raft"})   # not a worker's message: logged, nothing done
    assert [e.kind for e in agent.executor.effects] == ["assign", "cancel", "moved"]
    assert agent.view.runs == {}
    other = dict(sent, run=[*sent["run"][:8], "wk2", *sent["run"][9:]])
    with pytest.raises(RequestError, match="did not run on worker wk1"):
        asyncio.run(agent._read_log({"run": other["run"], "offset": 0}))
    with pytest.raises(RequestError, match="offset must be"):
        asyncio.run(agent._read_log({"run": sent["run"], "offset": "0"}))


def test_a_cancel_sent_while_the_worker_was_away_is_acted_on_at_its_return(tmp_path, certs):
    from cronrd.state import commands as C
    log, mine, _ = _state()
    run = log.run(mine)
    log.apply(C.RunStarted(run_id=mine, token=run.token, node="wk1", pid=7,
                           started_at=run.due_at, log_path="/l"))
    log.apply(C.CancelRun(run_id=mine, at=run.due_at + 1, reason="stop it"))
    assert log.run(mine).cancel_requested
    agent = _agent(tmp_path, certs)
    agent.view, agent.executor, agent.first = WorkerView("wk1"), FakeExecutor(), False
    welcome = _hub(log)._welcome("wk1")
    agent._arrived(welcome)
    asyncio.run(agent._welcome(welcome))
    assert [e.kind for e in agent.executor.effects] == ["restored", "cancel"]
    assert agent.executor.effects[1].run.run_id == mine

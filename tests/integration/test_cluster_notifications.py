"""Integration: notifications in a cluster of three real daemons. An event's
delivery goes on after the leader is killed (kill -9) in the middle of its
retries: the next leader takes over the recorded attempts, the receiver gets
the event (signed, deduped by its id), and every node shows the same
attempts, made by two leaders."""

from __future__ import annotations

import json

import pytest
import yaml

from harness import wait_for
from receivers import WebhookReceiver

pytestmark = pytest.mark.integration


def test_delivery_survives_the_leaders_death_at_least_once(cluster, tmp_path):
    secret = tmp_path / "hook.secret"
    secret.write_bytes(b"cluster-secret")
    hook = WebhookReceiver(b"cluster-secret", fail_first=10**9)  # refuses until told
    try:
        c = cluster()
        for n in c:
            n.config["notifiers"] = {"chat": {
                "type": "webhook", "url": hook.url, "secret_file": str(secret),
                "retry_delay": "300ms", "max_retry_delay": "1s", "max_attempts": 100}}
            n.config["notify"] = [{"to": "chat", "on": ["failed"]}]
            n.config_path.write_text(yaml.safe_dump(n.config))
        c.write_job("bad", {"schedule": "@yearly", "command": "exit 4"})
        c.start()
        first = c.leader()
        assert first.cli("run-now", "bad", "--wait").returncode == 4
        # a few refused attempts, each recorded through the log
        wait_for(lambda: len(hook.requests) >= 2, what="refused attempts",
                 on_fail=c.logs)
        first.kill9()
        second = wait_for(lambda: c.leader() if c.leader() is not first else None, 20,
                          what="a new leader", on_fail=c.logs)
        hook.fail_first = 0  # the receiver is back
        wait_for(lambda: len(hook.events) == 1, 20, what="the event delivered",
                 on_fail=lambda: f"{hook.requests}\n" + c.logs())

        def listing(node):
            return json.loads(node.cli("notifications", "--json").stdout)["events"]
        wait_for(lambda: listing(second) and listing(second)[0]["delivered"],
                 what="recorded as delivered", on_fail=c.logs)
        first.start(wait=False)
        first.wait_ready(timeout=40)
        c.converged()
        [event] = listing(second)
        assert event["kind"] == "failed" and event["job"] == "bad"
        leaders = {a["leader"] for a in event["attempts"]}
        assert leaders == {first.config["node_id"], second.config["node_id"]}, event
        ok = [a for a in event["attempts"] if a["ok"]]
        assert len(ok) == 1 and ok[0]["leader"] == second.config["node_id"]
        numbers = [a["attempt"] for a in event["attempts"]]
        assert numbers == sorted(set(numbers))  # no attempt recorded twice
        assert all(r["valid"] and r["event_id"] == str(event["event_id"])
                   for r in hook.requests)
        assert list(hook.events) == [str(event["event_id"])]
        for n in c:
            assert listing(n) == [event]  # the same attempts on every node
    finally:
        hook.close()

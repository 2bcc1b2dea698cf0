"""Integration: a real daemon notifies real receivers. A failing job's
events reach a local HTTP receiver that checks every signature and dedupes
by event id (the first request is refused: the retry gets through) and an
aiosmtpd server; a success afterwards is one "recovered"; a launch failure
alerts; `cronrd notifications` shows the attempts, `cronrd notify test` sends
at once; a receiver that hangs does not delay the schedule."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime

import pytest

from cronrd.schedule import parse_iso
from harness import wait_for
from receivers import SmtpReceiver, WebhookReceiver

pytestmark = pytest.mark.integration

SECRET = b"s3cret-for-the-test"


@pytest.fixture
def receivers():
    made = []

    def make(cls, *a, **kw):
        obj = cls(*a, **kw)
        made.append(obj)
        return obj
    yield make
    for obj in made:
        obj.close()


def kinds(rx: WebhookReceiver) -> list[str]:
    return sorted(b["kind"] for b in rx.events.values())


def test_failure_retry_and_recovery_reach_a_signed_webhook_and_a_mail(node_factory, receivers,
                                                                       tmp_path):
    hook = receivers(WebhookReceiver, SECRET, fail_first=1)
    smtp = receivers(SmtpReceiver)
    secret = tmp_path / "chat.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    node = node_factory(notifiers={
        "chat": {"type": "webhook", "url": hook.url, "secret_file": str(secret),
                 "retry_delay": "200ms"},
        "oncall": {"type": "smtp", "to": ["ops@example.com"], "from": "cronrd@example.com",
                   "host": "127.0.0.1", "port": smtp.port, "retry_delay": "200ms"}},
        notify=[{"to": "oncall", "on": ["failed", "recovered"]}])
    ok = node.out / "ok"
    node.write_job("flaky", {
        "schedule": "@yearly", "command": f"test -f {ok} || exit 3",
        "retries": {"max": 1, "delay": "100ms"},
        "notify": [{"to": "chat", "on": ["failed", "retrying", "recovered"]}, "oncall"]})
    node.write_job("quiet", {"schedule": "@yearly", "command": "exit 1", "notify": []})
    node.start()
    assert node.cli("run-now", "flaky", "--wait").returncode == 3
    assert node.cli("run-now", "quiet", "--wait").returncode == 1
    wait_for(lambda: kinds(hook) == ["failed", "retrying"] and len(smtp.messages) == 1,
             what="retrying and failed at the webhook, failed by mail",
             on_fail=lambda: f"{hook.requests}\n{smtp.messages}\n" + node.daemon_log())
    # every request carried a good signature; the one refused (500) was sent again
    assert all(r["valid"] for r in hook.requests)
    assert len(hook.requests) == 3
    refused = hook.requests[0]["event_id"]
    assert [r["event_id"] for r in hook.requests].count(refused) == 2
    failed = next(b for b in hook.events.values() if b["kind"] == "failed")
    assert failed["job"] == "flaky" and failed["data"]["exit_code"] == 3
    assert failed["data"]["attempt"] == 2 and failed["data"]["final"] is True
    mail = smtp.messages[0]["message"]
    assert mail["Subject"] == "[cronrd] failed: flaky" and smtp.messages[0]["to"] == \
        ["ops@example.com"]
    assert mail["X-Cronrd-Event-Id"] == str(failed["event_id"])

    ok.touch()
    # (a manual run in the same second as the failed one would share its fire
    # time, and `run-now --wait` would follow that one's retry: wait it out)
    last = max(parse_iso(r["fire_time"]) for r in node.runs("flaky"))
    wait_for(lambda: time.time() >= last + 1.05, what="the next second")
    assert node.cli("run-now", "flaky", "--wait").returncode == 0
    wait_for(lambda: kinds(hook) == ["failed", "recovered", "retrying"]
             and len(smtp.messages) == 2, what="recovered at both",
             on_fail=lambda: f"{hook.requests}\n{smtp.messages}\n" + node.daemon_log())
    recovered = next(b for b in hook.events.values() if b["kind"] == "recovered")
    assert recovered["data"]["failed_event"] == failed["event_id"]
    assert smtp.messages[1]["message"]["Subject"] == "[cronrd] recovered: flaky"
    wait_for(lambda: time.time() >= last + 2.05, what="the next second")
    assert node.cli("run-now", "flaky", "--wait").returncode == 0  # no second recovery

    def listing():
        res = json.loads(node.cli("notifications", "--json").stdout)
        return {e["event_id"]: e for e in res["events"]}
    wait_for(lambda: all(e["delivered"] for e in listing().values()), what="all delivered")
    events = listing()
    assert sorted(e["kind"] for e in events.values() if e["job"] == "flaky") == \
        ["failed", "recovered", "retrying"]
    quiet = [e for e in events.values() if e["job"] == "quiet"]
    assert [(e["kind"], e["attempts"]) for e in quiet] == [("failed", [])]  # notify: []
    chat = [a for a in events[int(refused)]["attempts"] if a["notifier"] == "chat"]
    assert [(a["attempt"], a["ok"]) for a in chat] == [(1, False), (2, True)]
    assert "HTTP 500" in chat[0]["error"] and chat[0]["leader"] == "n1"
    text = node.cli("notifications", "flaky").stdout
    assert "failed: HTTP 500 Try Later" in text and "sent" in text
    assert len(hook.requests) == 4 and len(smtp.messages) == 2  # nothing sent twice
    assert SECRET.decode() not in node.daemon_log()

    res = node.cli("notify", "test", "chat")
    assert res.returncode == 0, res.stderr
    assert "delivered test event test-" in res.stdout
    test = [r for r in hook.requests if r["event_id"].startswith("test-")]
    assert len(test) == 1 and test[0]["valid"] and test[0]["body"]["test"] is True
    res = node.cli("notify", "test", "pager")
    assert res.returncode == 1 and "no notifier named 'pager'" in res.stderr

    node.terminate()  # with the daemon down, from the state database
    res = node.cli("notifications", "--json")
    assert res.returncode == 0 and "daemon not running" in res.stderr
    assert {e["event_id"] for e in json.loads(res.stdout)["events"]} == set(events)


def test_a_launch_failure_alerts(node, receivers):
    hook = receivers(WebhookReceiver)
    node.config.update(notifiers={"chat": {"type": "webhook", "url": hook.url}},
                       notify=["chat"])
    node.config_path.write_text(__import__("yaml").safe_dump(node.config))
    node.write_job("ghost", {"schedule": "@yearly", "command": "true",
                             "user": "no-such-user-cronrd"})
    node.start()
    node.cli("run-now", "ghost", "--wait")
    wait_for(lambda: kinds(hook) == ["launch_failed"], what="launch_failed",
             on_fail=lambda: f"{hook.requests}\n" + node.daemon_log())
    body = next(iter(hook.events.values()))
    assert body["job"] == "ghost" and "no-such-user-cronrd" in body["data"]["reason"]


def test_a_hanging_receiver_does_not_delay_the_schedule(node, receivers):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(50)  # connections are accepted by the kernel, never answered
    try:
        node.config.update(notifiers={"hang": {
            "type": "webhook", "url": f"http://127.0.0.1:{silent.getsockname()[1]}/x",
            "timeout": "2s", "retry_delay": "0s"}},
            notify=[{"to": "hang", "on": ["failed"]}])
        node.config_path.write_text(__import__("yaml").safe_dump(node.config))
        node.write_job("tick", {"schedule": "* * * * * *", "command": "exit 1"})
        node.start()
        runs = node.wait_runs(lambda rs: sum(r["state"] == "failed" for r in rs) >= 6,
                              job="tick", what="6 failed ticks", timeout=30)
        def exact(iso: str) -> float:  # (parse_iso keeps whole seconds)
            return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
        late = [exact(r["started_at"]) - exact(r["fire_time"]) for r in runs if r["started_at"]]
        assert max(late) < 0.5, late  # on time while every delivery hangs
        res = json.loads(node.cli("notifications", "--json").stdout)
        wait_for(lambda: any(a["error"].startswith("no answer within 2s")
                             for e in json.loads(node.cli("notifications", "--json")
                                                 .stdout)["events"]
                             for a in e["attempts"]), what="a timed-out attempt", timeout=20)
        assert res["notifiers"]["hang"]["type"] == "webhook"
    finally:
        silent.close()


def test_an_sla_miss_and_a_dead_lettered_run_reach_the_routes_that_want_them(node, receivers):
    hook = receivers(WebhookReceiver, SECRET)
    secret = node.base / "hook.secret"
    secret.write_bytes(SECRET)
    node.config.update(notifiers={"chat": {"type": "webhook", "url": hook.url,
                                           "secret_file": str(secret)}},
                       notify=[{"to": "chat", "on": ["sla_miss", "dead_lettered"]}])
    node.config_path.write_text(__import__("yaml").safe_dump(node.config))
    node.write_job("etl", {"schedule": "@yearly", "command": "exit 2",
                           "on_final_failure": "dead_letter"})
    node.write_job("slow", {"schedule": "*/3 * * * * *", "command": "sleep 60",
                            "sla": {"max_runtime": "1s"}})
    node.start()
    node.cli("run-now", "etl", "--wait")
    wait_for(lambda: {"dead_lettered", "sla_max_runtime"} <= set(kinds(hook)), 30,
             what="dead_lettered and sla_max_runtime",
             on_fail=lambda: f"{hook.requests}\n" + node.daemon_log())
    assert "failed" not in kinds(hook)  # not asked for
    assert all(r["valid"] for r in hook.requests)
    sla = next(b for b in hook.events.values() if b["kind"] == "sla_max_runtime")
    assert sla["job"] == "slow" and "longer than 1s" in sla["data"]["detail"]

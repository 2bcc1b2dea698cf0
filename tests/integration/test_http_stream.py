"""Server-Sent Events of API v1 through real daemons: a run's live log (and
its resume from Last-Event-ID, on the node that ran it and on another one)
and the stream of state changes (http/stream.py)."""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest

from harness import wait_for

pytestmark = pytest.mark.integration


class SSE:
    """A Server-Sent Events client: one GET, events read one at a time."""

    def __init__(self, url: str, path: str, secret: str | None,
                 last_id: str | None = None, timeout: float = 30.0):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        headers = {"Accept": "text/event-stream"}
        if secret:
            headers["Authorization"] = f"Bearer {secret}"
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        self.conn.request("GET", path, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.last_id: str | None = last_id

    def body(self) -> dict:
        return json.loads(self.resp.read())

    def next(self, deadline: float | None = None) -> tuple[str, dict, str | None] | None:
        """The next event (type, data, its id field or None); None at the end.
        Past ``deadline`` (time.monotonic()) an AssertionError, keep-alives or not."""
        event, data, eid = "message", [], None
        while True:
            assert deadline is None or time.monotonic() < deadline, "no event in time"
            raw = self.resp.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line == "":
                if eid is not None:
                    self.last_id = eid
                if data:
                    return event, json.loads("\n".join(data)), eid
                event, data, eid = "message", [], None
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                eid = value

    def until(self, pred, what: str, limit: int = 1000, timeout: float = 40.0
              ) -> list[tuple[str, dict, str | None]]:
        """Events up to and including the first for which ``pred`` holds."""
        seen: list = []
        deadline = time.monotonic() + timeout
        for _ in range(limit):
            try:
                ev = self.next(deadline)
            except AssertionError:
                raise AssertionError(f"no {what} within {timeout}s; got {seen}") from None
            assert ev is not None, f"the stream ended before {what}; got {seen}"
            seen.append(ev)
            if pred(ev):
                return seen
        raise AssertionError(f"no {what} in {limit} events: {seen}")

    def close(self) -> None:
        self.conn.close()


def token(node, role: str = "viewer", jobs: str | None = None, name: str = "v") -> str:
    res = node.cli("token", "create", "--name", name, "--role", role,
                   *(("--jobs", jobs) if jobs else ()))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


TALK = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.3; done; echo oops >&2"


def test_a_running_log_streams_live_and_resumes_from_last_event_id(node):
    node.write_job("talk", {"schedule": "@yearly", "command": TALK})
    node.write_job("other", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    viewer = token(node, jobs="talk")
    run_id = node.call("run_now", {"job": "talk"})["run_id"]
    s = SSE(url, f"/api/v1/runs/{run_id}/log/stream", viewer)
    assert s.status == 200 and s.resp.headers["Content-Type"].startswith("text/event-stream")
    kind, first, _ = s.next()
    assert kind == "run" and first["run_id"] == run_id
    events = s.until(lambda e: e[0] == "end", "the end event")
    s.close()
    logs = [e for e in events if e[0] == "log"]
    assert len(logs) >= 2  # it arrived as it was written, not at the end in one piece
    text = "".join(d["text"] for _, d, _ in logs)
    assert text == "".join(f"line{i}\n" for i in range(1, 7)) + "oops\n"
    assert {d["stream"] for _, d, _ in logs} == {"stdout", "stderr"}
    end = events[-1][1]
    assert end["state"] == "succeeded" and end["exit_code"] == 0
    # Every id is a byte position: resuming from one gives exactly the rest.
    ids = [int(i) for _, _, i in logs if i is not None]
    assert ids == sorted(ids) and ids[-1] == len(text.encode())
    cut = ids[0]
    again = SSE(url, f"/api/v1/runs/{run_id}/log/stream", viewer, last_id=str(cut))
    rest = again.until(lambda e: e[0] == "end", "the end event after a resume")
    again.close()
    assert "".join(d["text"] for k, d, _ in rest if k == "log") == text.encode()[cut:].decode()
    # ?offset= does the same for a client that cannot set the header
    q = SSE(url, f"/api/v1/runs/{run_id}/log/stream?offset={len(text.encode()) - 5}", viewer)
    assert "".join(d["text"] for k, d, _ in q.until(lambda e: e[0] == "end", "end")
                   if k == "log") == "oops\n"
    q.close()
    # the token's job glob, a bad id, no token
    other = node.call("run_now", {"job": "other"})["run_id"]
    denied = SSE(url, f"/api/v1/runs/{other}/log/stream", viewer)
    assert denied.status == 403 and "talk" in denied.body()["detail"]
    assert SSE(url, "/api/v1/runs/999999/log/stream", viewer).status == 404
    bad = SSE(url, f"/api/v1/runs/{run_id}/log/stream", viewer, last_id="x")
    assert bad.status == 400 and "Last-Event-ID" in bad.body()["detail"]
    assert SSE(url, f"/api/v1/runs/{run_id}/log/stream", None).status == 401
    doc = json.loads(_get(url, "/api/v1/openapi.json"))
    assert "/api/v1/runs/{run_id}/log/stream" in doc["paths"]
    assert "/api/v1/events" in doc["paths"] and "/api/v1/hooks/{name}" in doc["paths"]
    assert "event=http_handler_failed" not in node.daemon_log()


def _get(url: str, path: str) -> str:
    u = urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", path)
    body = c.getresponse().read().decode()
    c.close()
    return body


def test_the_event_stream_tells_runs_pauses_and_resumes_from_last_event_id(node):
    node.write_job("work", {"schedule": "@yearly", "command": "sleep 0.5; exit 3"})
    node.write_job("hidden", {"schedule": "@yearly", "command": "true"})
    node.start()
    url = node.call("status")["http"]
    viewer = token(node, jobs="w*")
    s = SSE(url, "/api/v1/events", viewer)
    assert s.status == 200
    node.call("run_now", {"job": "hidden"})
    run_id = node.call("run_now", {"job": "work"})["run_id"]
    got = s.until(lambda e: e[0] == "run_ended", "run_ended")
    kinds = [k for k, _, _ in got]
    assert kinds.index("run_started") < kinds.index("run_ended")
    started = next(d for k, d, _ in got if k == "run_started")
    assert started["run_id"] == run_id and started["job"] == "work"
    ended = got[-1][1]
    assert ended["state"] == "failed" and ended["exit_code"] == 3
    assert all(d.get("job") in (None, "", "work") for _, d, _ in got)  # not "hidden"
    # The failure opens an alert; acking it (a command without effects) is told too.
    got += s.until(lambda e: e[0] == "alert_raised", "alert_raised") \
        if "alert_raised" not in [k for k, _, _ in got] else []
    alert = next(d for k, d, _ in got if k == "alert_raised")
    assert alert["job"] == "work" and alert["kind"] == "failed" and alert["state"] == "open"
    node.call("alert_ack", {"id": alert["alert_id"], "note": "seen"})
    acked = s.until(lambda e: e[0] == "alert_acked", "alert_acked")[-1][1]
    assert acked["alert_id"] == alert["alert_id"] and acked["note"] == "seen"
    assert node.cli("pause", "work", "--note", "db move").returncode == 0
    paused = s.until(lambda e: e[0] == "job_paused", "job_paused")[-1][1]
    assert paused["job"] == "work" and paused["note"] == "db move"
    # The last id seen so far (the id of each batch's last event) is past the run.
    mark = s.last_id
    assert mark is not None and mark.isdigit()
    assert node.cli("resume", "work").returncode == 0
    s.until(lambda e: e[0] == "job_resumed", "job_resumed")
    s.close()
    # Reconnecting with that id replays what came after it, not what came before.
    again = SSE(url, "/api/v1/events", viewer, last_id=mark)
    replay = again.until(lambda e: e[0] == "job_resumed", "the resume, replayed")
    again.close()
    kinds = [k for k, _, _ in replay]
    assert "run_started" not in kinds and "run_ended" not in kinds
    assert all(int(i) > int(mark) for _, _, i in replay if i is not None)
    # An id from before the node's start is older than anything it kept: a
    # reset, then the stream goes on.
    node.terminate()
    node.start()
    url = node.call("status")["http"]
    old = SSE(url, "/api/v1/events", viewer, last_id="1")
    assert old.next(time.monotonic() + 20)[0] == "reset"
    assert node.cli("pause", "work").returncode == 0
    old.until(lambda e: e[0] == "job_paused", "job_paused after the reset")
    old.close()
    assert SSE(url, "/api/v1/events", None).status == 401


def test_a_follower_streams_a_log_from_the_node_that_ran_it(cluster):
    c = cluster()
    c.write_job("talk", {"schedule": "@yearly", "command": TALK, "run_on": ["a"]})
    c.start()
    secret = token(c.leader(), role="viewer")
    b = next(n for n in c if n.config["node_id"] == "b")
    run_id = b.call("run_now", {"job": "talk"})["run_id"]
    url = b.call("status")["http"]

    def streamed():
        s = SSE(url, f"/api/v1/runs/{run_id}/log/stream", secret)
        if s.status != 200:
            return None
        ev = s.until(lambda e: e[0] in ("end", "problem"), "end")
        s.close()
        return ev
    events = wait_for(lambda: (ev := streamed()) and ev[-1][0] == "end" and ev, timeout=30,
                      what="the log streamed on b")
    # The first event is the run as b knew it then (maybe not placed yet: b
    # applies the placement when its own log write of it ends); the end
    # names the node that ran it.
    assert events[0][0] == "run" and events[-1][1]["node"] == "a"
    text = "".join(d["text"] for k, d, _ in events if k == "log")
    assert text.startswith("line1\n") and text.endswith("oops\n")
    # resumable on b too
    s = SSE(url, f"/api/v1/runs/{run_id}/log/stream", secret, last_id=str(len(text) - 5))
    assert "".join(d["text"] for k, d, _ in s.until(lambda e: e[0] == "end", "end")
                   if k == "log") == "oops\n"
    s.close()


def test_events_resume_on_another_node_and_tell_a_change_of_leader(cluster):
    c = cluster()
    c.write_job("work", {"schedule": "@yearly", "command": "true"})
    c.start()
    lead = c.leader()
    secret = token(lead, role="viewer")
    f1, f2 = c.followers()
    u1, u2 = f1.call("status")["http"], f2.call("status")["http"]
    wait_for(lambda: SSE(u2, "/api/v1/events", secret).status == 200, what="the token on f2")
    s = wait_for(lambda: (x := SSE(u1, "/api/v1/events", secret)).status == 200 and x,
                 what="the token on f1")
    assert f1.cli("pause", "work", "--note", "one").returncode == 0
    s.until(lambda e: e[0] == "job_paused", "job_paused on f1")
    mark = s.last_id
    assert mark is not None
    assert f1.cli("resume", "work").returncode == 0
    s.until(lambda e: e[0] == "job_resumed", "job_resumed on f1")
    s.close()
    # The id f1 gave resumes on f2: what came after it, not what came before.
    moved = SSE(u2, "/api/v1/events", secret, last_id=mark)
    got = moved.until(lambda e: e[0] == "job_resumed", "job_resumed on f2")
    assert "reset" not in [k for k, _, _ in got]
    assert all(d.get("note") != "one" for k, d, _ in got if k == "job_paused") or \
        int(mark) < min(int(i) for _, _, i in got if i is not None)
    # A change of leader is an event on the followers' streams.
    lead.kill9()
    changed = moved.until(lambda e: e[0] == "leader_changed" and e[1]["leader"],
                          "leader_changed", limit=50)[-1][1]
    assert changed["leader"] in (f1.config["node_id"], f2.config["node_id"])
    moved.close()

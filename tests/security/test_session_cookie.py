"""Issue 32, point 4: the web UI's session cookie was the API token itself
(``cronrd_session=<token>``, no expiry). Browsers send a host's cookies to
every port of it (RFC 6265, section 8.5), so a listener on another port of
the same host received an admin token that worked as ``Bearer``, and
logging out did not end it. Now the cookie holds a session of its own:
never the token, refused as a bearer token, ended at logout and with its
token on every node of the cluster."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from cronrd.state import versions as V
from harness import wait_for
from tests.integration.test_ui import Browser

pytestmark = pytest.mark.integration


def api(url: str, path: str, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{url}/api/v1/{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


class OtherPort:
    """Another service on the same host: it keeps the Cookie header of
    every request a browser sends it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.seen: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536).decode(errors="replace")
                self.seen += [line.split(":", 1)[1].strip() for line in head.split("\r\n")
                              if line.lower().startswith("cookie:")]
                conn.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")

    def close(self) -> None:
        self.sock.close()


def make_token(node, name: str, role: str = "admin") -> str:
    res = node.cli("token", "create", "--name", name, "--role", role)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_cookie_another_port_sees_is_no_token_and_dies_at_logout(node):
    node.start()
    url = node.call("status")["http"]
    secret = make_token(node, "root")
    b = Browser(url)
    b.login(secret)
    # the browser sends the host's cookies to the other port too (the
    # client here does as browsers do: cookies are not port-scoped)
    other = OtherPort()
    try:
        spy = Browser(f"http://127.0.0.1:{other.port}")
        spy.cookies = dict(b.cookies)
        spy.get("/")
        wait_for(lambda: other.seen, what="the other port's request")
    finally:
        other.close()
    seen = other.seen[0]
    name, _, value = seen.partition("=")
    assert name == "cronrd_session" and secret not in seen and value.startswith("s1.")
    # what the other port saw is no token ...
    status, body = api(url, "whoami", {"Authorization": f"Bearer {value}"})
    assert status == 401, body
    # ... works as the browser's session (reads) until the browser logs out
    status, body = api(url, "whoami", {"Cookie": seen})
    assert status == 200 and body["name"] == "root"
    resp, _ = b.post("/logout", {"csrf": b.csrf()})
    assert resp.status == 303 and "cronrd_session" not in b.cookies
    status, body = api(url, "whoami", {"Cookie": seen})
    assert status == 401 and "session has ended" in body["detail"], body
    # the token itself goes on working
    assert api(url, "whoami", {"Authorization": f"Bearer {secret}"})[0] == 200
    # a new login is a new session; revoking the token ends it
    b.login(secret)
    again = "; ".join(f"{k}={v}" for k, v in b.cookies.items())
    assert again != seen and api(url, "whoami", {"Cookie": again})[0] == 200
    assert node.cli("token", "revoke", "root").returncode == 0
    wait_for(lambda: api(url, "whoami", {"Cookie": again})[0] == 401,
             what="the revoked token's session refused")


def test_a_session_works_on_every_node_and_a_logout_ends_it_everywhere(cluster):
    c = cluster()
    c.start()
    # sessions are replicated from cluster version 2 on (state/versions.py):
    # a new cluster raises its version once its members have answered
    wait_for(lambda: all(n.call("status")["versions"]["cluster_version"] == V.APPLY_VERSION
                         for n in c), timeout=60, what="the cluster version raised")
    lead = c.leader()
    secret = make_token(lead, "ops", "operator")
    follower = c.followers()[0]
    b = Browser(follower.call("status")["http"])
    wait_for(lambda: b.post("/login", {"token": secret, "next": "/"})[0].status == 303,
             what="a login on a follower")
    jar = "; ".join(f"{k}={v}" for k, v in b.cookies.items())
    urls = [n.call("status")["http"] for n in c]
    for url in urls:
        wait_for(lambda: api(url, "whoami", {"Cookie": jar})[0] == 200,
                 what=f"the session on {url}")
    resp, _ = b.post("/logout", {"csrf": b.csrf()})
    assert resp.status == 303
    for url in urls:
        wait_for(lambda: api(url, "whoami", {"Cookie": jar})[0] == 401,
                 what=f"the ended session refused on {url}")

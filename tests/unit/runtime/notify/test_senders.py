"""Sending one event through each notifier type to a real receiving end: a
signed webhook (checked by the receiver), a mail through an aiosmtpd server,
a command given the event's JSON on stdin; failures say what went wrong and
never block the event loop past the notifier's timeout."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from cronrd.config.notifiers import Notifier
from cronrd.runtime.notify import senders as N
from receivers import SmtpReceiver, WebhookReceiver

EVENT = {"event_id": 42, "kind": "failed", "job": "backup", "fire_time": 1_800_000_000,
         "run_id": 7, "at": 1_800_000_003.5, "data": {"state": "failed", "exit_code": 3,
                                                     "attempt": 2}}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "hook.secret"
    path.write_bytes(b"k3y\n")
    return str(path)


def test_the_webhook_is_signed_over_timestamp_and_body(secret_file):
    rx = WebhookReceiver(b"k3y")
    try:
        n = Notifier(name="chat", type="webhook", url=rx.url, secret_file=secret_file,
                     headers=(("X-Team", "ops"),))
        assert run(N.send(n, EVENT, "n1", time.time())) == "HTTP 204"
        [req] = rx.requests
        assert req["valid"], req
        assert req["event_id"] == "42" and req["headers"]["x-team"] == "ops"
        assert req["body"]["job"] == "backup" and req["body"]["fire_time"] == \
            "2027-01-15T08:00:00Z" and req["body"]["data"]["exit_code"] == 3
        assert req["headers"]["x-cronrd-signature"] == N.sign(
            b"k3y", req["headers"]["x-cronrd-timestamp"], N.payload(EVENT, "n1"))
    finally:
        rx.close()


def test_a_wrong_secret_or_a_5xx_is_a_failure_that_says_so(secret_file, tmp_path):
    rx = WebhookReceiver(b"other")
    try:
        n = Notifier(name="chat", type="webhook", url=rx.url, secret_file=secret_file)
        with pytest.raises(N.SendError, match=r"HTTP 401 Bad Signature from 127.0.0.1:\d+"):
            run(N.send(n, EVENT, "n1", time.time()))
        missing = Notifier(name="chat", type="webhook", url=rx.url,
                           secret_file=str(tmp_path / "nope"))
        with pytest.raises(N.SendError, match="cannot read secret_file .*nope: No such file"):
            run(N.send(missing, EVENT, "n1", time.time()))
    finally:
        rx.close()
    rx = WebhookReceiver(fail_first=1)
    try:
        n = Notifier(name="chat", type="webhook", url=rx.url)
        with pytest.raises(N.SendError, match="HTTP 500 Try Later"):
            run(N.send(n, EVENT, "n1", time.time()))
    finally:
        rx.close()


def test_a_receiver_that_is_down_or_silent_fails_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = Notifier(name="chat", type="webhook", url=f"http://127.0.0.1:{port}/x", timeout=2)
    with pytest.raises(N.SendError, match="cannot connect to 127.0.0.1"):
        run(N.send(n, EVENT, "n1", time.time()))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)  # accepts (the kernel does), never answers
    try:
        n = Notifier(name="chat", type="webhook",
                     url=f"http://127.0.0.1:{silent.getsockname()[1]}/x", timeout=0.5)

        async def meanwhile():
            ticks = 0
            send = asyncio.create_task(N.send(n, EVENT, "n1", time.time()))
            while not send.done():
                await asyncio.sleep(0.05)
                ticks += 1
            with pytest.raises(N.SendError, match=r"no answer within 0.5s"):
                send.result()
            return ticks
        start = time.monotonic()
        assert run(meanwhile()) >= 5          # the loop went on meanwhile
        assert time.monotonic() - start < 2.0
    finally:
        silent.close()


def test_a_mail_through_a_real_smtp_server_carries_the_event_id():
    rx = SmtpReceiver()
    try:
        n = Notifier(name="oncall", type="smtp", to=("ops@example.com", "b@example.com"),
                     sender="cronrd@example.com", host="127.0.0.1", port=rx.port)
        assert "mailed 2 recipient(s)" in run(N.send(n, EVENT, "n1", time.time()))
        [m] = rx.messages
        assert m["to"] == ["ops@example.com", "b@example.com"]
        msg = m["message"]
        assert msg["Subject"] == "[cronrd] failed: backup"
        assert msg["X-Cronrd-Event-Id"] == "42"
        assert msg["Message-ID"] == "<cronrd-event-42@n1>"
        text = msg.get_payload(decode=True).decode()
        assert "exit_code: 3" in text and "cronrd logs 7" in text
    finally:
        rx.close()
    n = Notifier(name="oncall", type="smtp", to=("a@b",), sender="c@d", host="127.0.0.1",
                 port=rx.port, timeout=2)
    with pytest.raises(N.SendError, match="SMTP 127.0.0.1"):
        run(N.send(n, EVENT, "n1", time.time()))


def test_the_command_gets_the_event_json_on_stdin(tmp_path):
    out = tmp_path / "got"
    n = Notifier(name="page", type="command",
                 command=f"cat > {out}; echo $CRONRD_EVENT_ID $CRONRD_EVENT_KIND >> {out}.env")
    assert run(N.send(n, EVENT, "n1", time.time())) == "command exited 0"
    assert json.loads(out.read_text())["event_id"] == 42
    assert (tmp_path / "got.env").read_text() == "42 failed\n"
    bad = Notifier(name="page", type="command", command="echo no pager >&2; exit 4")
    with pytest.raises(N.SendError, match="exited with status 4: no pager"):
        run(N.send(bad, EVENT, "n1", time.time()))
    slow = Notifier(name="page", type="command", command="sleep 30", timeout=0.3)
    start = time.monotonic()
    with pytest.raises(N.SendError, match="no answer within 0.3s"):
        run(N.send(slow, EVENT, "n1", time.time()))
    assert time.monotonic() - start < 3


def self_signed(tmp_path, name: str):
    """A server-side TLS context with a self-signed certificate for ``name``
    (its PEM: tmp_path/c.pem)."""
    import shutil
    import ssl
    import subprocess
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")],
                   check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    return ctx


def test_a_server_offering_starttls_with_a_self_signed_certificate_still_gets_mail(tmp_path):
    """Without starttls: true the mail goes in the clear, as configured; it is
    not upgraded to a TLS whose certificate check would fail."""
    ctx = self_signed(tmp_path, "mail.test")
    rx = SmtpReceiver(tls_context=ctx)
    try:
        n = Notifier(name="oncall", type="smtp", to=("ops@example.com",), sender="c@d",
                     host="127.0.0.1", port=rx.port, timeout=5)
        assert "mailed 1 recipient(s)" in run(N.send(n, EVENT, "n1", time.time()))
        tls = Notifier(name="oncall", type="smtp", to=("ops@example.com",), sender="c@d",
                       host="127.0.0.1", port=rx.port, timeout=5, starttls=True)
        with pytest.raises(N.SendError, match="(?i)certificate"):
            run(N.send(tls, EVENT, "n1", time.time()))  # asked for: verified, refused
        assert len(rx.messages) == 1
    finally:
        rx.close()


def test_an_https_webhook_is_verified_against_the_system_or_its_ca_file(tmp_path, secret_file):
    rx = WebhookReceiver(b"k3y", tls_context=self_signed(tmp_path, "localhost"))
    try:
        assert rx.url.startswith("https://localhost:")
        n = Notifier(name="chat", type="webhook", url=rx.url, secret_file=secret_file)
        with pytest.raises(N.SendError, match="TLS with localhost:.* failed: .*give its CA as "
                                              "ca_file"):
            run(N.send(n, EVENT, "n1", time.time()))
        trusted = Notifier(name="chat", type="webhook", url=rx.url, secret_file=secret_file,
                           ca_file=str(tmp_path / "c.pem"))
        assert run(N.send(trusted, EVENT, "n1", time.time())) == "HTTP 204"
        assert [r["valid"] for r in rx.requests] == [True]
    finally:
        rx.close()

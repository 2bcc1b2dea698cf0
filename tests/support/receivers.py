"""Real receiving ends for the notification tests: a local HTTP server that
checks cronrd's webhook signature and dedupes by event id, and an SMTP
server (aiosmtpd) that keeps the mails it is given. Both run in threads of
the test process and listen on 127.0.0.1 at a free port."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver:
    """POSTs are checked: X-Cronrd-Signature must be sha256=HMAC(secret,
    timestamp + "." + body) with X-Cronrd-Timestamp within ``max_skew``
    seconds (unless ``secret`` is None: unsigned), X-Cronrd-Event-Id must equal
    the body's event_id. ``fail_first``
    requests are answered 500; ``delay`` holds each answer (a slow receiver)."""

    def __init__(self, secret: bytes | None = None, *, fail_first: int = 0, delay: float = 0.0,
                 max_skew: float = 300.0, tls_context=None):
        self.secret = secret
        self.fail_first = fail_first
        self.delay = delay
        self.max_skew = max_skew
        self.requests: list[dict] = []      # every POST, checked
        self.events: dict[str, dict] = {}   # accepted, deduped by event id
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                req = outer.check(dict(self.headers), body)
                with outer.lock:
                    outer.requests.append(req)
                    n = len(outer.requests)
                if outer.delay:
                    time.sleep(outer.delay)
                if n <= outer.fail_first:
                    self.send_response(500, "Try Later")
                elif not req["valid"]:
                    self.send_response(401, "Bad Signature")
                else:
                    with outer.lock:
                        outer.events.setdefault(req["event_id"], req["body"])
                    self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls_context is not None:  # https (``tls_context``: the server's side)
            self.server.socket = tls_context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"  # (the cert's name)
        return f"{self.scheme}://{host}:{self.server.server_address[1]}/hook"

    def check(self, headers: dict, body: bytes) -> dict:
        h = {k.lower(): v for k, v in headers.items()}
        ts, sig, eid = (h.get("x-cronrd-timestamp", ""), h.get("x-cronrd-signature", ""),
                        h.get("x-cronrd-event-id", ""))
        want = "sha256=" + hmac.new(self.secret or b"", ts.encode() + b"." + body,
                                    hashlib.sha256).hexdigest()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        signed = self.secret is None or hmac.compare_digest(sig, want)
        valid = (signed and ts.isdigit()
                 and abs(time.time() - int(ts)) <= self.max_skew
                 and isinstance(parsed, dict) and str(parsed.get("event_id")) == eid)
        return {"valid": valid, "event_id": eid, "body": parsed, "headers": h}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """An aiosmtpd server on 127.0.0.1; ``messages`` are the mails it got."""

    def __init__(self, tls_context=None):
        """``tls_context``: the server offers STARTTLS with it."""
        from aiosmtpd.controller import Controller
        outer = self
        self.messages: list = []

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                msg = message_from_bytes(envelope.original_content)
                outer.messages.append({"from": envelope.mail_from,
                                       "to": list(envelope.rcpt_tos), "message": msg})
                return "250 OK"

        with socket.socket() as probe:  # (aiosmtpd's start cannot take port 0)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port,
                                     tls_context=tls_context)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()

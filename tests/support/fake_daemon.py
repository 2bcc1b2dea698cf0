"""A fake cronrd daemon for CLI tests.

It speaks the control protocol of cronrd/runtime/control/server.py on a Unix
socket: one JSON request line ``{"cmd", "args"}`` in, the messages of a
streaming command (``stream``), then one reply line ``{"ok": true,
"result": ...}`` (or ``{"ok": false, "code", "error"}``) out. It records
every request and answers from a table of canned results (a callable is
called with the request's args).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading


class FakeDaemon:
    def __init__(self, answers: dict):
        self.answers = answers              # cmd -> result, or Exception-like dict
        self.requests: list[dict] = []
        self.dir = tempfile.mkdtemp(prefix="crd-", dir="/tmp")  # short: sun_path <= 107
        self.path = os.path.join(self.dir, "c.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket):
        with conn, conn.makefile("rb") as rf:
            for line in rf:
                req = json.loads(line)
                self.requests.append(req)
                answer = self.answers.get(req["cmd"])
                if callable(answer):
                    answer = answer(req["args"])
                if isinstance(answer, dict) and answer.get("__error__"):
                    reply = {"ok": False, "code": answer.get("code", 1),
                             "error": answer["__error__"]}
                elif req["cmd"] not in self.answers:
                    reply = {"ok": False, "code": 2, "error": f"unknown command {req['cmd']!r}"}
                else:
                    for msg in getattr(self, "stream", []):  # a streaming command's messages
                        conn.sendall(json.dumps(msg).encode() + b"\n")
                    reply = {"ok": True, "result": answer}
                conn.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    cleanup = close

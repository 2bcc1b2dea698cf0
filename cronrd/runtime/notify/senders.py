"""Sending one event to one notifier (the edge): a webhook, a mail, a command.

Every send is bounded by the notifier's ``timeout`` and never blocks the
event loop: the webhook speaks HTTP/1.1 over asyncio streams, the mail goes
through aiosmtplib (an asyncio SMTP client), the command is an asyncio
subprocess killed (its process group) when its time is up. A failure raises
``SendError`` with what went wrong, never a secret.

Every delivery carries the event id, the receivers' dedupe key (the same
event may arrive twice: delivery is at least once):

* webhook: POST of the event's JSON with ``X-Cronrd-Event-Id``,
  ``X-Cronrd-Timestamp`` (Unix seconds) and, with a ``secret_file``,
  ``X-Cronrd-Signature: sha256=HEX``, the HMAC-SHA256 with the secret as key
  over ``TIMESTAMP + "." + BODY``; any 2xx answer is success.
* smtp: a text mail with ``X-Cronrd-Event-Id`` and a Message-ID made of it.
* command: ``/bin/sh -c COMMAND`` with the event's JSON on stdin and
  ``CRONRD_EVENT_ID``, ``CRONRD_EVENT_KIND``, ``CRONRD_JOB`` in its
  environment; exit status 0 is success.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import ssl
from email.message import EmailMessage
from urllib.parse import urlsplit

import aiosmtplib

from ... import __version__
from ...config.notifiers import Notifier
from ...schedule import iso_utc

MAX_SECRET = 4096          # bytes of a secret_file read
MAX_ANSWER = 64 * 1024     # bytes of a webhook's answer read (then the connection closes)
MAX_STDERR = 2048          # bytes of a command's output kept for the error


class SendError(Exception):
    """A delivery attempt failed; the message says how (no secrets)."""


def payload(event: dict, node_id: str, *, test: bool = False) -> bytes:
    """The event as the receivers get it (JSON, keys sorted): the same bytes
    for the same event and sender."""
    body = {"event_id": event["event_id"], "kind": event["kind"], "job": event["job"],
            "fire_time": None if event.get("fire_time") is None else iso_utc(event["fire_time"]),
            "run_id": event.get("run_id"), "at": iso_utc(event["at"]),
            "data": event.get("data") or {}, "sent_by": node_id}
    if test:
        body["test"] = True
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """``sha256=HEX``: HMAC-SHA256 over ``timestamp + "." + body``."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body,
                                hashlib.sha256).hexdigest()


def read_secret(path: str, key: str) -> bytes:
    """The secret in ``path`` (trailing newline dropped); SendError naming the
    file and the config key when it cannot be read. Never logged."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET + 1)
    except OSError as exc:
        raise SendError(f"cannot read {key} {path}: {exc.strerror}; create it, readable by "
                        "the daemon") from None
    if len(data) > MAX_SECRET:
        raise SendError(f"{key} {path} is larger than {MAX_SECRET} bytes; it holds one secret")
    data = data.rstrip(b"\r\n")
    if not data:
        raise SendError(f"{key} {path} is empty; write the secret into it")
    return data


async def send(n: Notifier, event: dict, node_id: str, now: float, *,
               test: bool = False) -> str:
    """Deliver ``event`` through ``n``; a short note of what was done, or SendError."""
    body = payload(event, node_id, test=test)
    try:
        async with asyncio.timeout(n.timeout):
            if n.type == "webhook":
                return await _webhook(n, event, body, now)
            if n.type == "smtp":
                return await _smtp(n, event, body, node_id, test)
            return await _command(n, event, body)
    except TimeoutError:
        raise SendError(f"no answer within {n.timeout:g}s (timeout of notifier "
                        f"{n.name!r})") from None


# -- webhook ------------------------------------------------------------------------------
async def _webhook(n: Notifier, event: dict, body: bytes, now: float) -> str:
    url = urlsplit(n.url)
    https = url.scheme == "https"
    port = url.port or (443 if https else 80)
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    ts = str(int(now))
    headers = [("Host", url.netloc.rsplit("@", 1)[-1]),
               ("User-Agent", f"cronrd/{__version__}"),
               ("Content-Type", "application/json"),
               ("Content-Length", str(len(body))),
               ("Connection", "close"),
               ("X-Cronrd-Event-Id", str(event["event_id"])),
               ("X-Cronrd-Event-Kind", event["kind"]),
               ("X-Cronrd-Timestamp", ts)]
    if n.secret_file:
        headers.append(("X-Cronrd-Signature",
                        sign(read_secret(n.secret_file, "secret_file"), ts, body)))
    headers += list(n.headers)
    head = f"POST {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    try:
        reader, writer = await asyncio.open_connection(
            url.hostname, port, ssl=_tls(n) if https else None, limit=MAX_ANSWER)
    except ssl.SSLError as exc:
        raise SendError(f"TLS with {url.hostname}:{port} failed: {exc.reason or exc}"
                        + ("; give its CA as ca_file" if "CERTIFICATE" in str(exc) else "")
                        ) from None
    except OSError as exc:
        raise SendError(f"cannot connect to {url.hostname}:{port}: "
                        f"{exc.strerror or exc}") from None
    try:
        writer.write(head.encode("latin-1") + b"\r\n" + body)
        await writer.drain()
        status_line = await reader.readline()
    except (OSError, asyncio.LimitOverrunError, ValueError) as exc:
        raise SendError(f"POST to {url.hostname}:{port} failed: {exc}") from None
    finally:
        writer.close()
    parts = status_line.decode("latin-1", "replace").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise SendError(f"{url.hostname}:{port} did not answer HTTP "
                        f"(got {status_line[:80]!r})")
    status = int(parts[1])
    if not 200 <= status < 300:
        reason = parts[2].strip() if len(parts) > 2 else ""
        raise SendError(f"HTTP {status} {reason}".rstrip() + f" from {url.hostname}:{port}")
    return f"HTTP {status}"


def _tls(n: Notifier) -> ssl.SSLContext:
    """The system's CAs, or the notifier's ``ca_file``; the host name checked."""
    try:
        return ssl.create_default_context(cafile=n.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise SendError(f"cannot load ca_file {n.ca_file}: {exc}") from None


# -- smtp ------------------------------------------------------------------------------------
def mail(n: Notifier, event: dict, body: bytes, node_id: str, test: bool) -> EmailMessage:
    msg = EmailMessage()
    fields = {"kind": event["kind"], "job": event["job"], "event_id": event["event_id"]}
    try:
        subject = n.subject.format(**fields)
    except (KeyError, IndexError, ValueError):
        subject = f"[cronrd] {event['kind']}: {event['job']}"
    msg["Subject"] = ("[test] " if test else "") + subject
    msg["From"] = n.sender
    msg["To"] = ", ".join(n.to)
    msg["X-Cronrd-Event-Id"] = str(event["event_id"])
    msg["Message-ID"] = f"<cronrd-event-{event['event_id']}@{node_id}>"
    data = event.get("data") or {}
    lines = [f"cronrd: {event['kind']} event of job {event['job']}", ""]
    if event.get("fire_time") is not None:
        lines.append(f"fire time: {iso_utc(event['fire_time'])}")
    if event.get("run_id") is not None:
        lines.append(f"run: {event['run_id']} (`cronrd explain {event['job']}`, "
                     f"`cronrd logs {event['run_id']}`)")
    for key in ("state", "attempt", "exit_code", "signal", "node", "reason"):
        if data.get(key) is not None:
            lines.append(f"{key}: {data[key]}")
    lines += ["", f"event id: {event['event_id']} (sent by {node_id})", "",
              json.dumps(json.loads(body), indent=2, sort_keys=True)]
    msg.set_content("\n".join(lines) + "\n")
    return msg


async def _smtp(n: Notifier, event: dict, body: bytes, node_id: str, test: bool) -> str:
    password = None
    if n.password_file:
        password = read_secret(n.password_file, "password_file").decode("utf-8", "replace")
    try:
        await aiosmtplib.send(mail(n, event, body, node_id, test), hostname=n.host,
                              # (start_tls None would try STARTTLS whenever offered:
                              # a local MTA's self-signed certificate would fail it)
                              port=n.port, use_tls=n.tls, start_tls=n.starttls,
                              username=n.username, password=password, timeout=n.timeout)
    except aiosmtplib.SMTPException as exc:
        raise SendError(f"SMTP {n.host}:{n.port}: {exc}") from None
    except OSError as exc:
        raise SendError(f"cannot connect to SMTP {n.host}:{n.port}: "
                        f"{exc.strerror or exc}") from None
    return f"mailed {len(n.to)} recipient(s) via {n.host}:{n.port}"


# -- command ---------------------------------------------------------------------------------
async def _command(n: Notifier, event: dict, body: bytes) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
           "CRONRD_EVENT_ID": str(event["event_id"]), "CRONRD_EVENT_KIND": event["kind"],
           "CRONRD_JOB": event["job"], "LANG": "C.UTF-8"}
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", n.command, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
            start_new_session=True, cwd="/")
    except OSError as exc:
        raise SendError(f"cannot start the command: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stderr is not None  # (PIPE both)
    try:
        try:
            proc.stdin.write(body)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it did not read its stdin: its exit status decides
        proc.stdin.close()
        err = b""
        while chunk := await proc.stderr.read(65536):  # (all of it: a full pipe blocks it)
            err = (err + chunk)[-MAX_STDERR:]
        status = await proc.wait()
    except BaseException:  # the timeout (cancelled): the command and its children go
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await asyncio.shield(proc.wait())
        raise
    if status != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()
        tail = f": {said[-1][:300]}" if said else ""
        how = f"signal {-status}" if status < 0 else f"status {status}"
        raise SendError(f"the command exited with {how}{tail}")
    return "command exited 0"

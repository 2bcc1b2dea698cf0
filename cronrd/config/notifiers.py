"""The daemon config's ``notifiers:`` (who can be told of events, and how) and
``notify:`` (the cluster-wide default of the jobs' ``notify``).

    notifiers:
      oncall: {type: smtp, to: [ops@example.com], from: cronrd@example.com,
               host: localhost, port: 25}
      chat:   {type: webhook, url: "https://hooks.example.com/x",
               secret_file: /etc/cronrd/chat.secret}
      page:   {type: command, command: /usr/local/bin/page-oncall}
    notify: [{to: oncall, on: [failed, recovered, launch_failed]}]

Secrets are never in the config itself: ``secret_file`` (the webhook's HMAC
key) and ``password_file`` (the SMTP login) are read by the daemon when it
sends; with ``daemon_files`` (the daemon's start, `cronrd check-config`)
they are checked to be readable. Their contents are never logged.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cronrd.errors import ScheduleError
from cronrd.jobspec.notify import NOTIFIER_NAME_RE, NotifyRoute, check_routes
from cronrd.schedule import parse_duration

from .problems import ConfigProblems

TYPES = ("smtp", "webhook", "command")
COMMON_KEYS = ("type", "timeout", "max_attempts", "retry_delay", "max_retry_delay")
TYPE_KEYS = {
    "smtp": ("to", "from", "host", "port", "tls", "starttls", "username", "password_file",
             "subject"),
    "webhook": ("url", "secret_file", "headers", "ca_file"),
    "command": ("command",),
}
MAX_NOTIFIERS = 64
MAX_ATTEMPTS_LIMIT = 100


@dataclass(frozen=True)
class Notifier:
    """One notifier of the config. Fields of other types keep their defaults."""
    name: str
    type: str                       # smtp | webhook | command
    timeout: float = 10.0           # one attempt's bound (connect, send, the command)
    max_attempts: int = 5           # then the delivery is given up (recorded so)
    retry_delay: float = 10.0       # before the 2nd attempt; doubled each time
    max_retry_delay: float = 600.0
    # webhook
    url: str = ""
    secret_file: str | None = None  # HMAC-SHA256 key of X-Cronrd-Signature
    ca_file: str | None = None      # https: trust this CA (PEM) instead of the system's
    headers: tuple[tuple[str, str], ...] = ()
    # smtp
    to: tuple[str, ...] = ()
    sender: str = ""                # the key "from"
    host: str = "localhost"
    port: int = 25
    tls: bool = False               # TLS from the start (port 465)
    starttls: bool = False          # STARTTLS after connecting
    username: str | None = None
    password_file: str | None = None
    subject: str = "[cronrd] {kind}: {job}"
    # command: run with /bin/sh -c, the event's JSON on its stdin
    command: str = ""

    def describe(self) -> str:
        """Where it sends, for listings (never a secret)."""
        if self.type == "webhook":
            return self.url
        if self.type == "smtp":
            return f"{', '.join(self.to)} via {self.host}:{self.port}"
        return self.command


@dataclass(frozen=True)
class Notifications:
    notifiers: dict = field(default_factory=dict)      # name -> Notifier (sorted)
    default: tuple[NotifyRoute, ...] = ()               # the cluster-wide notify

    def __hash__(self) -> int:
        return hash((tuple(self.notifiers.items()), self.default))


def parse_notifications(raw: dict, base: str, report: ConfigProblems, *,
                        daemon_files: bool = False) -> Notifications:
    """``notifiers`` and ``notify`` of the config ``raw``; problems to ``report``."""
    notifiers: dict[str, Notifier] = {}
    value = raw.get("notifiers")
    if value is not None and not isinstance(value, dict):
        report.add(("notifiers",), "notifiers must be a mapping of a name to {type: smtp|"
                                   "webhook|command, ...}")
        value = None
    if value and len(value) > MAX_NOTIFIERS:
        report.add(("notifiers",), f"notifiers has {len(value)} entries; at most "
                                   f"{MAX_NOTIFIERS}")
        value = None
    for name, spec in (value or {}).items():
        if not isinstance(name, str) or not NOTIFIER_NAME_RE.fullmatch(name):
            report.add(("notifiers", name), f"notifier name {name!r} must be letters, digits, "
                                            "'_', '.' and '-' (at most 64)", at_key=True)
            continue
        got = _notifier(name, spec, base, report, daemon_files)
        if got is not None:
            notifiers[name] = got
    routes, problems = check_routes(raw.get("notify"), "notify")
    for key, message in problems:
        report.add(("notify",) + key, message)
    for i, route in enumerate(routes or ()):
        if route.to not in (value or {}):  # (one defined with problems was reported)
            report.add(("notify", i, "to"), f"notify[{i}].to: no notifier named "
                                            f"{route.to!r} in notifiers"
                                            f"{_near(route.to, value or {})}")
    return Notifications(notifiers=dict(sorted(notifiers.items())), default=routes or ())


def _near(name: str, known) -> str:
    near = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {near[0]!r}?)" if near else "; define it under notifiers:"


def _notifier(name: str, spec: object, base: str, report: ConfigProblems,
              daemon_files: bool) -> Notifier | None:
    at = ("notifiers", name)
    dotted = f"notifiers.{name}"
    if not isinstance(spec, dict):
        report.add(at, f"{dotted} must be a mapping {{type: smtp|webhook|command, ...}}")
        return None
    before = len(report.problems)
    kind = spec.get("type")
    if kind not in TYPES:
        report.add(at + ("type",) if "type" in spec else at,
                   f"{dotted}.type must be smtp, webhook or command (got {kind!r})")
        return None
    known = COMMON_KEYS + TYPE_KEYS[kind]
    for key in spec:
        if key not in known:
            report.unknown(at, key, known)
    kw: dict = {"name": name, "type": kind}

    def duration(key: str, low: float, high: float) -> None:
        if key not in spec:
            return
        try:
            v = parse_duration(spec[key])
        except ScheduleError as exc:
            report.add(at + (key,), f"{dotted}.{key}: {exc.message}")
            return
        if not low <= v <= high:
            report.add(at + (key,), f"{dotted}.{key} must be between {low:g}s and {high:g}s "
                                    f"(got {v:g}s)")
            return
        kw[key] = v

    def string(key: str, attr: str | None = None, required: bool = False) -> None:
        v = spec.get(key)
        if v is None:
            if required:
                report.add(at, f"{dotted} needs {key}: (type {kind})")
            return
        if not isinstance(v, str) or not v.strip():
            report.add(at + (key,), f"{dotted}.{key} must be a non-empty string")
            return
        kw[attr or key] = v

    def path(key: str) -> None:
        v = spec.get(key)
        if v is None:
            return
        if not isinstance(v, str) or not v:
            report.add(at + (key,), f"{dotted}.{key} must be the path of a file")
            return
        full = os.path.normpath(os.path.join(base, os.path.expanduser(v)))
        if daemon_files and not os.access(full, os.R_OK):
            report.add(at + (key,), f"{dotted}.{key}: cannot read {full} (the daemon reads "
                                    "the secret from it when it sends); create it, readable "
                                    "by the daemon only (chmod 600)")
        kw[key] = full

    duration("timeout", 0.1, 300.0)
    duration("retry_delay", 0.0, 86400.0)
    duration("max_retry_delay", 0.0, 86400.0)
    attempts = spec.get("max_attempts", 5)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or \
            not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
        report.add(at + ("max_attempts",), f"{dotted}.max_attempts must be a whole number "
                                           f"from 1 to {MAX_ATTEMPTS_LIMIT} (got {attempts!r})")
    else:
        kw["max_attempts"] = attempts
    if kind == "webhook":
        string("url", required=True)
        url = kw.get("url")
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                report.add(at + ("url",), f"{dotted}.url must be an http:// or https:// URL "
                                          f"with a host (got {url!r})")
        path("secret_file")
        path("ca_file")
        headers = spec.get("headers") or {}
        if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k.strip() and "\n" not in k + v
                and "\r" not in k + v for k, v in headers.items()):
            report.add(at + ("headers",), f"{dotted}.headers must be a mapping of header "
                                          "names to one-line strings")
        else:
            kw["headers"] = tuple(sorted(headers.items()))
    elif kind == "smtp":
        to = spec.get("to")
        if isinstance(to, str):
            to = [to]
        if not isinstance(to, list) or not to or not all(
                isinstance(a, str) and "@" in a for a in to):
            report.add(at + ("to",) if "to" in spec else at,
                       f"{dotted}.to must be a list of mail addresses (got {to!r})")
        else:
            kw["to"] = tuple(to)
        string("from", "sender", required=True)
        if "@" not in kw.get("sender", "@"):
            report.add(at + ("from",), f"{dotted}.from must be a mail address")
        string("host")
        string("username")
        string("subject")
        port = spec.get("port", 25)
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            report.add(at + ("port",), f"{dotted}.port must be a port number (got {port!r})")
        else:
            kw["port"] = port
        for key in ("tls", "starttls"):
            if key in spec:
                if not isinstance(spec[key], bool):
                    report.add(at + (key,), f"{dotted}.{key} must be true or false")
                else:
                    kw[key] = spec[key]
        if kw.get("tls") and kw.get("starttls"):
            report.add(at + ("starttls",), f"{dotted}: tls and starttls exclude each other "
                                           "(tls: port 465; starttls: port 587)")
        path("password_file")
        if kw.get("password_file") and not kw.get("username"):
            report.add(at + ("password_file",), f"{dotted}.password_file needs username:")
        if kw.get("username") and not (kw.get("tls") or kw.get("starttls")) and \
                kw.get("host", "localhost") not in ("localhost", "127.0.0.1", "::1"):
            report.add(at + ("username",), f"{dotted}: a login to {kw.get('host')} needs "
                                           "tls: true or starttls: true (the password would "
                                           "cross the network in the clear)")
    else:
        string("command", required=True)
    if len(report.problems) > before:
        return None
    return Notifier(**kw)

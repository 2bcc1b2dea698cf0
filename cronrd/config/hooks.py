"""The ``hooks:`` section of the daemon config: the webhooks that start jobs
(``POST /api/v1/hooks/NAME``; the jobs list them under ``triggers:``).

::

    hooks:
      deploy:
        secret_file: /etc/cronrd/hooks/deploy.secret   # the HMAC key (trailing newline dropped)
        dedupe: $.delivery.id      # the body's field that names one delivery (optional)
        replay_window: 5m          # how old a signed timestamp may be (default 5m)

The secret file must not be readable by others (mode 0600 or 0640): whoever
holds the key can start the jobs. Every node of a cluster needs the same
hooks and secrets (the sender may reach any of them).
"""

from __future__ import annotations

import os
import re
import stat

from cronrd.jobspec.model import NAME_RE
from cronrd.schedule import parse_duration

from .model import HOOK_KEYS, HookConfig
from .problems import ConfigProblems

_EXAMPLE = "hooks: {deploy: {secret_file: /etc/cronrd/deploy.secret, dedupe: $.id}}"
MAX_SECRET = 4096            # bytes in a secret file
MIN_SECRET = 16              # a shorter key is too easy to guess
MAX_HOOKS = 1000
DEFAULT_REPLAY_WINDOW = 300.0
_PATH_RE = re.compile(r"\$(\.[A-Za-z0-9_-]+)+")


def parse_hooks(raw: object, base: str, report: ConfigProblems, *,
                load_secrets: bool = False) -> tuple[HookConfig, ...]:
    """The hooks, sorted by name (problems go to ``report``); with
    ``load_secrets`` (the daemon) each secret is read now."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or len(raw) > MAX_HOOKS:
        report.add(("hooks",), f"hooks must be a mapping of at most {MAX_HOOKS} hook names to "
                               f"{{secret_file: FILE, dedupe: $.FIELD}}, e.g. {_EXAMPLE}")
        return ()
    out = []
    for name, body in raw.items():
        key = ("hooks", name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            report.add(key, f"hook name {name!r} is not valid: use letters, digits, '_', '.' "
                            "and '-', starting with a letter or digit", at_key=True)
            continue
        if not isinstance(body, dict):
            report.add(key, f"hooks.{name} must be a mapping {{secret_file: FILE, dedupe: "
                            f"$.FIELD}}, e.g. {_EXAMPLE}")
            continue
        before = len(report.problems)
        for k in body:
            if k not in HOOK_KEYS:
                report.unknown(key, k, HOOK_KEYS)
        path = body.get("secret_file")
        if not isinstance(path, str) or not path:
            report.add(key + ("secret_file",), f"hooks.{name}.secret_file is required: the "
                       "file holding the HMAC key the sender signs with (e.g. made with "
                       "`head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE`)")
            path = None
        else:
            path = os.path.normpath(os.path.join(base, os.path.expanduser(path)))
        dedupe = body.get("dedupe")
        fields: tuple[str, ...] | None = None
        if dedupe is not None:
            if not isinstance(dedupe, str) or not _PATH_RE.fullmatch(dedupe):
                report.add(key + ("dedupe",), f"hooks.{name}.dedupe must be a field of the "
                           f"JSON body such as $.id or $.delivery.id (got {dedupe!r})")
            else:
                fields = tuple(dedupe[2:].split("."))
        window = DEFAULT_REPLAY_WINDOW
        if "replay_window" in body:
            try:
                window = parse_duration(str(body["replay_window"]))
            except Exception:
                window = -1.0
            if not 1.0 <= window <= 86400.0:
                report.add(key + ("replay_window",), f"hooks.{name}.replay_window must be a "
                           f"duration from 1s to 1d such as 5m (got {body['replay_window']!r})")
        secret = None
        if path is not None and load_secrets:
            secret = _load_secret(name, path, key, report)
        if len(report.problems) == before:
            out.append(HookConfig(name=name, secret_file=path, secret=secret, dedupe=fields,
                                  replay_window=window))
    return tuple(sorted(out, key=lambda h: h.name))


def _load_secret(name: str, path: str, key: tuple, report: ConfigProblems) -> bytes | None:
    where = key + ("secret_file",)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            report.add(where, f"hooks.{name}.secret_file: {path} is not a regular file")
            return None
        if st.st_mode & 0o004:
            report.add(where, f"hooks.{name}.secret_file: {path} is readable by every user; "
                              f"`chmod 600 {path}` (whoever reads it can start the jobs)")
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET + 1)
    except PermissionError:  # the CLI as another user; the daemon reads it (else: 503)
        return None
    except FileNotFoundError:
        report.add(where, f"hooks.{name}.secret_file: {path} does not exist; write the HMAC "
                          "key there (relative paths are relative to the config file)")
        return None
    except OSError as exc:
        report.add(where, f"hooks.{name}.secret_file: cannot read {path}: {exc.strerror}")
        return None
    data = data.rstrip(b"\r\n")  # as the webhook notifiers read theirs (notify/senders.py)
    if len(data) > MAX_SECRET or len(data) < MIN_SECRET:
        report.add(where, f"hooks.{name}.secret_file: the key in {path} must be "
                          f"{MIN_SECRET} to {MAX_SECRET} bytes (has {len(data)})")
        return None
    return data

"""Convert a crontab into a cronrd job file (YAML text plus problems).

Two formats exist and cannot be told apart reliably from the text alone:

* system format (``/etc/crontab``, ``/etc/cron.d/*``): five time fields (or
  an ``@special``), then a user column, then the command;
* user format (``crontab -e`` files, ``/var/spool/cron/...``): no user column.

``system=None`` means: system format when ``path`` is ``/etc/crontab`` or
lies under ``/etc/cron.d/``, user format otherwise. We never guess from the
content, because ``0 5 * * * root echo hi`` is valid in both formats with
different meanings; callers that know better pass ``system`` explicitly.

For a user crontab the jobs run as ``user`` when given, or as the crontab's
owner when ``path`` is a spool file (``/var/spool/cron/crontabs/NAME``,
``/var/spool/cron/NAME``, ``/var/spool/cron/tabs/NAME``). Without either,
the jobs get no ``user:`` and a problem says they would run as cronrd's own
user (usually root).

Cron semantics kept: every job gets ``catchup: none`` (cron does not run
missed times) and ``concurrency: allow`` (cron starts a run even while the
previous one is still going), and its command is a string run with
``/bin/sh -c``. An environment line applies to the job lines after it.

What cannot be converted is reported (``Problem`` with the line, column 1):
``MAILTO`` (cronrd does not send mail; the jobs are still converted),
dynamic loader variables ``LD_*`` (dropped: a user's crontab must not make
the programs a job starts load code by name),
commands containing an unescaped ``%`` (cron turns it into a newline and
feeds the rest to stdin; the job is skipped), ``@reboot`` when the schedule
parser does not know it, and lines that do not parse (skipped).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

import yaml

from cronrd.errors import ScheduleError
from cronrd.jobspec import ENV_KEY_RE, NAME_RE, Problem
from cronrd.schedule import parse_schedule, resolve_timezone

__all__ = ["ImportResult", "convert_crontab", "is_system_crontab_path"]


@dataclass
class ImportResult:
    yaml_text: str
    jobs: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


_SPECIALS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
    "@reboot": None,
}
_ENV_LINE = re.compile(r"""^([^\s='"#]+)\s*=\s*(.*)$""")
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MAIL_VARS = ("MAILTO", "MAILFROM", "CONTENT_TYPE", "CONTENT_TRANSFER_ENCODING")
_SPOOL_DIRS = ("/var/spool/cron/crontabs", "/var/spool/cron/tabs", "/var/spool/cron")
# Dynamic loader variables (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...): never
# carried over from a crontab, which an ordinary user writes.
_LOADER_PREFIX = "LD_"


def is_system_crontab_path(path: str) -> bool:
    p = os.path.normpath(os.path.abspath(path))
    return p == "/etc/crontab" or p.startswith("/etc/cron.d/")


def _spool_owner(path: str) -> str | None:
    p = os.path.normpath(os.path.abspath(path))
    parent, base = os.path.split(p)
    if parent in _SPOOL_DIRS and base and not base.startswith("."):
        return base
    return None


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _unescape_percent(command: str) -> str | None:
    """``\\%`` -> ``%``; None when an unescaped ``%`` is present."""
    out: list[str] = []
    i = 0
    while i < len(command):
        c = command[i]
        if c == "\\" and command[i + 1 : i + 2] == "%":
            out.append("%")
            i += 2
            continue
        if c == "%":
            return None
        out.append(c)
        i += 1
    return "".join(out)


def _job_name(command: str, lineno: int, used: set[str]) -> str:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the shell will complain, we only need a name
        words = command.split()
    while words and _ASSIGNMENT_WORD.match(words[0]):
        words.pop(0)  # FOO=bar cmd: name it after cmd
    first = words[0].strip("'\"") if words else ""
    base = os.path.basename(first.rstrip("/")) or first
    base = re.sub(r"[^A-Za-z0-9_]+", "-", base).strip("-_")
    if not base:
        base = "job"
    suffix = f"-l{lineno}"
    base = base[: 100 - len(suffix) - 3]
    name = base + suffix
    n = 2
    while name in used:
        name = f"{base}{suffix}-{n}"
        n += 1
    assert NAME_RE.fullmatch(name), name
    used.add(name)
    return name


def _schedule_for_special(special: str) -> tuple[str | None, str | None]:
    """(schedule, error) for an @special."""
    try:
        parse_schedule(special)
        return special, None
    except ScheduleError as e:
        expanded = _SPECIALS.get(special)
        if expanded is None:
            if special == "@reboot":
                return None, ("@reboot cannot be converted: cronrd schedules by time, not at boot; "
                              "start this command from a systemd unit instead; line skipped")
            return None, f"unknown special schedule {special!r} ({e.message}); line skipped"
        return expanded, None


def convert_crontab(text: str, *, path: str, system: bool | None = None,
                    user: str | None = None) -> ImportResult:
    """Convert crontab ``text`` (read from ``path``) to a cronrd job file.

    ``user`` (user format only) is the crontab's owner; see the module doc.
    """
    if system is None:
        system = is_system_crontab_path(path)
    problems: list[Problem] = []

    def problem(lineno: int, message: str) -> None:
        problems.append(Problem(path, lineno, 1, message))

    owner = None
    if not system:
        owner = user if user is not None else _spool_owner(path)

    env: dict[str, str] = {}
    timezone: str | None = None
    jitter: str | None = None
    jobs: list[dict] = []
    used: set[str] = set()

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue

        m = _ENV_LINE.match(line)
        if m:
            name, value = m.group(1), _unquote(m.group(2))
            if name in ("CRON_TZ", "TZ"):
                if not value:
                    timezone = None
                else:
                    try:
                        resolve_timezone(value)
                        timezone = value
                    except ScheduleError as e:
                        timezone = None
                        problem(lineno, f"{name}={value}: {e.message}; the jobs below use the "
                                        "daemon's time zone")
                if name == "CRON_TZ":
                    continue  # TZ is also passed to the command, as cron does
            if name in _MAIL_VARS:
                if name == "MAILTO" and not value:
                    continue  # MAILTO="" turns mail off: nothing to convert
                problem(lineno, f"{name}={value} cannot be converted: cronrd does not send mail; "
                                "job output is kept in its run log (cronrd logs JOB); "
                                "the jobs are converted without it")
                continue
            if name == "RANDOM_DELAY":
                if value.isdigit():
                    jitter = f"{int(value)}m" if int(value) else None
                else:
                    problem(lineno, f"RANDOM_DELAY={value} is not a number of minutes; ignored")
                continue
            if name.startswith(_LOADER_PREFIX):
                problem(lineno, f"{name} dropped: it is a dynamic loader variable, which makes "
                                "every program the job starts load or search for code it "
                                "names; cronrd does not carry loader variables (LD_*) over "
                                "from a crontab. If a job really needs it, set it inside its "
                                "command")
                continue
            if not ENV_KEY_RE.fullmatch(name) or name.startswith("CRONRD_"):
                problem(lineno, f"environment variable {name!r} cannot be carried over: cronrd "
                                "needs names of letters, digits and '_' not starting with CRONRD_; "
                                "ignored")
                continue
            if name == "SHELL" and value not in ("/bin/sh", "/usr/bin/sh"):
                problem(lineno, f"SHELL={value}: cronrd runs string commands with /bin/sh -c, not "
                                "$SHELL; SHELL is kept in env, but check the commands below for "
                                "shell-specific syntax (or write command: "
                                f"[{value}, -c, '...'])")
            env[name] = value
            continue

        body = line[1:] if line.startswith("-") else line  # cronie: "-" = do not log
        if body.startswith("@"):
            parts = body.split(None, 2 if system else 1)
            special = parts[0]
            need = 3 if system else 2
            if len(parts) < need:
                what = "a user and a command" if system else "a command"
                problem(lineno, f"expected {special} followed by {what}; line skipped")
                continue
            schedule, err = _schedule_for_special(special.lower())
            if err:
                problem(lineno, err)
                continue
        else:
            need = 7 if system else 6
            parts = body.split(None, need - 1)
            if len(parts) < need:
                what = "5 time fields, a user and a command" if system else "5 time fields and a command"
                hint = ""
                if not system and len(parts) >= 6:
                    hint = " (is this a system crontab with a user column? convert it with system=True)"
                problem(lineno, f"expected {what}, found {len(parts)} field(s){hint}; line skipped")
                continue
            schedule = " ".join(parts[:5])
            try:
                parse_schedule(schedule)
            except ScheduleError as e:
                problem(lineno, f"invalid schedule {schedule!r}: {e.message}; line skipped")
                continue
            parts = [schedule] + parts[5:]

        job_user = parts[1] if system else owner
        command = _unescape_percent(parts[-1])
        if command is None:
            problem(lineno, "the command contains %, which cron turns into a newline and feeds "
                            "the text after it to the command's stdin; cronrd cannot convert this "
                            r"faithfully: write \% for a literal %, or rewrite it (e.g. with printf "
                            "or a here-document); line skipped")
            continue

        job: dict = {"name": _job_name(command, lineno, used),
                     "description": f"imported from {path} line {lineno}",
                     "schedule": schedule}
        if timezone:
            job["timezone"] = timezone
        if job_user:
            job["user"] = job_user
        job["command"] = command
        if env:
            job["env"] = dict(env)
        if jitter:
            job["jitter"] = jitter
        job["catchup"] = "none"
        job["concurrency"] = "allow"
        jobs.append(job)

    if not system and owner is None and jobs:
        problems.insert(0, Problem(path, 0, 0, (
            "this is a user crontab and its owner is unknown, so the jobs have no user: and would "
            "run as the user cronrd runs as (root for the system daemon); add user: NAME to each "
            "job (the owner is known for spool files such as /var/spool/cron/crontabs/NAME)")))

    return ImportResult(_render(path, jobs, problems), jobs, problems)


def _render(path: str, jobs: list[dict], problems: list[Problem]) -> str:
    header = [
        f"# Converted from {path} by cronrd's crontab importer.",
        "# Cron's semantics are kept: catchup: none (cron does not run fire times it",
        "# missed while down) and concurrency: allow (cron starts a new run even while",
        "# the previous one is still running). Change them if you want cronrd's",
        "# defaults (catchup: latest, concurrency: forbid).",
    ]
    if problems:
        header.append("#")
        header.append("# Problems found while converting:")
        for p in problems:
            where = f"line {p.line}" if p.line else "file"
            header.append(f"#   {where}: {' '.join(p.message.split())}")
    body = yaml.safe_dump({"jobs": jobs}, sort_keys=False, default_flow_style=False,
                          allow_unicode=True, width=10**9)
    return "\n".join(header) + "\n" + body

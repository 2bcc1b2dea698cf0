"""Convert a crontab into a cronrd job file (YAML text, problems and warnings).

Two formats exist:

* system format (``/etc/crontab``, ``/etc/cron.d/*``): five time fields (or
  an ``@special``), then a user column, then the command;
* user format (``crontab -e`` files, ``/var/spool/cron/...``): no user column.

``system=None`` means: decide. ``/etc/crontab`` and ``/etc/cron.d/*`` are
system crontabs and spool files (``/var/spool/cron/crontabs/NAME``, ...) user
crontabs, as cron reads them. Any other file (a copy, standard input) is read
by its content, looking at every job line: it is a system crontab when the
field after the schedule is a user of this host on at least one line and on no
line something that cannot be a user (a path, a command, an option after it,
or nothing after it). ``ImportResult.format_note`` says which way it went and
why; callers that know better pass ``system`` explicitly.

For a user crontab the jobs run as ``user`` when given, or as the crontab's
owner when ``path`` is a spool file. Without either, the jobs get no
``user:`` and a warning says they would run as cronrd's own user.

Cron semantics kept: every job gets ``catchup: none`` (cron does not run
missed times) and ``concurrency: allow`` (cron starts a run even while the
previous one is still going), and its command is a string run with
``SHELL -c`` (``SHELL=`` in the crontab becomes each later job's ``shell:``;
the default is /bin/sh). An environment line applies to the job lines after it.

Job names are derived from the command (the program, plus its first telling
argument), never from line numbers, so converting the file again after an edit
keeps the other jobs' names. Jobs that would get the same name all get a short
hash of their schedule, user and command appended.

Two kinds of findings (``Problem`` with the line and column):

* ``problems``: a line could not be converted (skipped, or its setting
  dropped): commands with an unescaped ``%`` (cron turns it into a newline and
  feeds the rest to stdin), ``@reboot`` when the schedule parser does not know
  it, lines that do not parse, bad time zones, dynamic loader variables
  ``LD_*`` (a user's crontab must not make the programs a job starts load code
  by name), environment names cronrd cannot carry;
* ``warnings``: converted, but worth a look: ``MAILTO`` (mapped to ``notify:``
  a notifier named after its addresses, which the daemon config must define;
  ``MAILTO=""`` is ``notify: []``), bash syntax in a command that runs under /bin/sh,
  a user crontab whose owner is unknown.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml

from cronrd.errors import ScheduleError
from cronrd.jobspec import ENV_KEY_RE, NAME_RE, Problem
from cronrd.schedule import parse_schedule, resolve_timezone

__all__ = ["ImportResult", "convert_crontab", "is_system_crontab_path", "job_name_base",
           "bash_syntax"]


@dataclass
class ImportResult:
    yaml_text: str
    jobs: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # lines not converted
    warnings: list[Problem] = field(default_factory=list)  # converted, worth a look
    system: bool = False
    format_note: str = ""  # "FILE: read as a ... crontab (why); pass --... if it is not"
    format_why: str = ""  # the why alone ('' when the caller passed system=)
    job_lines: list[int] = field(default_factory=list)  # each job's line in the crontab


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
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_MAIL_VARS = ("MAILTO", "MAILFROM", "CONTENT_TYPE", "CONTENT_TRANSFER_ENCODING")
_SPOOL_DIRS = ("/var/spool/cron/crontabs", "/var/spool/cron/tabs", "/var/spool/cron")
# Dynamic loader variables (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...): never
# carried over from a crontab, which an ordinary user writes.
_LOADER_PREFIX = "LD_"
# What a user name can look like (useradd's default rule, a little wider).
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
_DEFAULT_SHELLS = ("/bin/sh", "/usr/bin/sh")
# Shells without bash's extensions: a command using them fails under these.
_POSIX_SHELLS = _DEFAULT_SHELLS + ("/bin/dash", "/usr/bin/dash")
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Shell builtins and keywords that can start a command (not found on PATH).
_SHELL_WORDS = frozenset(
    "cd test [ [[ true false : . source echo printf exec command eval export set unset "
    "umask ulimit wait trap shift read if then else elif fi for while until do done "
    "case esac ! { } ( ) function".split())


# What a MAILTO maps to: the notifier of its addresses, on failures (cron
# mailed any output; cronrd keeps output in the run log and notifies when a
# run fails or cannot start).
MAILTO_EVENTS = ("failed", "launch_failed")


def _addresses(value: str) -> list[str]:
    """MAILTO's addresses, a bare user name as USER@localhost."""
    return [a if "@" in a else f"{a}@localhost"
            for a in (x.strip() for x in value.split(",")) if a]


def mailto_notifier(value: str) -> str:
    """The notifier name a MAILTO value maps to: ``mailto-`` and the
    addresses, in the characters a notifier name may hold (at most 64)."""
    base = "mailto-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", value.strip().lower()).strip("-.")
    if len(base) > 64:
        base = base[:55].rstrip("-.") + "-" + hashlib.sha256(value.encode()).hexdigest()[:8]
    return base


def is_system_crontab_path(path: str) -> bool:
    p = os.path.normpath(os.path.abspath(path))
    return p == "/etc/crontab" or p.startswith("/etc/cron.d/")


def _spool_owner(path: str) -> str | None:
    p = os.path.normpath(os.path.abspath(path))
    parent, base = os.path.split(p)
    if parent in _SPOOL_DIRS and _USER_NAME.fullmatch(base):
        return base
    return None


def _host_user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except (KeyError, ValueError):
        return False


def _host_has_command(name: str, search_path: str) -> bool:
    return shutil.which(name, path=search_path) is not None


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


# -- job names -------------------------------------------------------------------------
# Commands that only prepare or guard the real one (cd / && x, [ -x x ] && x).
_GUARDS = frozenset("cd test [ [[ true false : sleep export set umask ulimit source .".split())
# Words that start a simple command without being its program.
_LEADING = frozenset("if then else elif do while until ! { } ( ) fi done".split())
# Wrappers that run the command after them: {name: (options taking a value, positionals)}.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "nohup": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
    "time": (frozenset({"-f", "-o"}), 0),
    "setsid": (frozenset(), 0),
    "chronic": (frozenset(), 0),
    "cronic": (frozenset(), 0),
    "run-one": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "flock": (frozenset({"-w", "--wait", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "sudo": (frozenset({"-u", "-g", "-C", "-p", "-r", "-t", "-U", "-h", "-D"}), 0),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "systemd-cat": (frozenset({"-t", "-p", "--identifier", "--priority"}), 0),
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_INTERPRETER = re.compile(r"(python|perl|ruby|php|node|nodejs|Rscript|lua|tclsh)[0-9.]*")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "\n"})
_REDIRECTS = re.compile(r"[0-9]*(<|>|>>|<<|<<<|>&|<&|&>|&>>|>\|)")
_EXTENSIONS = re.compile(r"\.(sh|bash|py|pl|rb|php|js|lua|r|conf|cfg|ini|ya?ml|json)$", re.I)
_NOISE_OPTIONS = frozenset({"", "quiet", "silent", "verbose", "debug", "report", "force", "yes"})
_UNTELLING = re.compile(r"""[$`*?\[\](){}<>|&;='"\\]""")


def _words(command: str) -> list[str]:
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:  # unbalanced quotes: the shell will complain, we only need a name
        return command.split()


def _segments(words: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(w)
    return [s for s in out if s]


def _option_value(words: list[str], option: str) -> str | None:
    for i, w in enumerate(words[:-1]):
        if w == option:
            return words[i + 1]
    return None


def _strip_wrappers(words: list[str]) -> list[str]:
    """The words from the program on: without leading keywords, assignments, wrappers."""
    i = 0
    while i < len(words):
        w = words[i]
        if w in _LEADING or _ASSIGNMENT_WORD.match(w):
            i += 1
            continue
        prog = os.path.basename(w)
        if prog not in _WRAPPERS:
            break
        takes_value, positionals = _WRAPPERS[prog]
        i += 1
        while i < len(words) and words[i].startswith("-") and words[i] != "-":
            i += 2 if words[i] in takes_value else 1
        if prog == "env":
            while i < len(words) and _ASSIGNMENT_WORD.match(words[i]):
                i += 1
        i += positionals
    return words[i:]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _telling(word: str) -> str:
    """A short slug for an argument, '' when it tells nothing (options, /dev/null, $x)."""
    if (not word or word.startswith("-") or word in ("/", "/dev/null")
            or _UNTELLING.search(word) or _REDIRECTS.fullmatch(word) or word.isdigit()):
        return ""
    if "://" in word:  # a URL: host and path
        return _slug(word.split("://", 1)[1])[:40].strip("-")
    base = os.path.basename(word.rstrip("/"))
    return _slug(_EXTENSIONS.sub("", base))[:40].strip("-")


def _after_redirects(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif _REDIRECTS.fullmatch(a):
            skip = True
        else:
            out.append(a)
    return out


def job_name_base(command: str, _depth: int = 0) -> str:
    """The name a job running ``command`` gets: its program plus a telling argument
    (``run-parts --report /etc/cron.daily`` -> ``run-parts-cron-daily``)."""
    segments = _segments(_words(command))
    stripped = [_strip_wrappers(s) for s in segments]
    main = next((s for s in stripped if s and os.path.basename(s[0]) not in _GUARDS), None)
    if main is None:
        main = next((s for s in stripped if s), [])
    if not main:
        return "job"
    prog = os.path.basename(main[0].rstrip("/")) or main[0]
    args = _after_redirects(main[1:])
    inner = _option_value(args, "-c") if (prog in _SHELLS or prog in ("su", "flock")) else None
    if inner is not None and _depth < 3:
        return job_name_base(inner, _depth + 1)
    if prog in _SHELLS or _INTERPRETER.fullmatch(prog):
        # the script is what tells: php /srv/app/artisan schedule:run -> artisan-schedule-run
        for k, a in enumerate(args):
            if a.startswith("-"):
                continue
            if "=" in a:
                continue
            if _telling(a):
                prog, args = a, args[k + 1:]
            break
    name = _slug(_EXTENSIONS.sub("", os.path.basename(prog.rstrip("/")) or prog))[:40].strip("-")
    if not name:
        name = "job"
    for a in args:
        t = _telling(a)
        if t and t != name:
            return f"{name}-{t}"
    for a in args:  # no telling operand: a long option then (poll --slow -> poll-slow)
        if a.startswith("--") and a[2:] not in _NOISE_OPTIONS:
            t = _telling(a[2:])
            if t and t != name:
                return f"{name}-{t}"
    return name


def _tie_hash(schedule: str, user: str | None, command: str) -> str:
    return hashlib.sha256(f"{schedule}\0{user or ''}\0{command}".encode()).hexdigest()[:6]


def _assign_names(jobs: list[dict]) -> None:
    bases = [job_name_base(j["command"])[:90] for j in jobs]
    counts: dict[str, int] = {}
    for b in bases:
        counts[b] = counts.get(b, 0) + 1
    used: set[str] = set()
    for job, base in zip(jobs, bases):
        name = base
        if counts[base] > 1:
            name = f"{base}-{_tie_hash(job['schedule'], job.get('user'), job['command'])}"
        n, candidate = 2, name
        while candidate in used:  # the very same line twice
            candidate = f"{name}-{n}"
            n += 1
        assert NAME_RE.fullmatch(candidate), candidate
        used.add(candidate)
        job["name"] = candidate


# -- bash syntax under /bin/sh ---------------------------------------------------------
_BASH_ONLY: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("<<<", re.compile(r"<<<")),
    ("[[", re.compile(r"(?:^|(?<=[\s;&|(!]))\[\[(?=\s)")),
    ("&>", re.compile(r"(?<![<>&])&>")),
    ("function", re.compile(r"(?:^|(?<=[;&|({]))\s*function\s+[A-Za-z_]")),
    ("=( array", re.compile(r"(?:^|(?<=[\s;&|(]))[A-Za-z_]\w*\+?=\(")),
    ("source", re.compile(r"(?:^|(?<=[;&|({]))\s*source\s")),
    ("<( process substitution", re.compile(r"(?<![\w$<>])[<>]\(")),
    ("(( arithmetic", re.compile(r"(?:^|(?<=[;&|]))\s*\(\(")),
    ("${var:offset}", re.compile(r"\$\{[A-Za-z_]\w*:[^-=?+}]")),
    ("${var/pattern/}", re.compile(r"\$\{[A-Za-z_]\w*/")),
    ("{a,b} brace expansion", re.compile(r"(?<!\$)\{[^\s{}]*(?:,|\.\.)[^\s{}]*\}")),
)
_MASK = "\x01"


def _mask(command: str) -> tuple[str, str, list[int]]:
    """(all quotes masked, single quotes masked, offsets of ``$'``): the command with
    quoted text, escaped characters and a trailing comment replaced by a filler of
    the same length, so patterns see only the shell's own syntax."""
    all_q, single_q, ansi = list(command), list(command), []
    state, i, n = "", 0, len(command)
    while i < n:
        c = command[i]
        if state == "'":
            all_q[i] = single_q[i] = _MASK
            if c == "'":
                state = ""
        elif state == '"':
            all_q[i] = _MASK
            if c == "\\" and i + 1 < n:
                all_q[i + 1] = single_q[i + 1] = _MASK
                i += 1
            elif c == '"':
                state = ""
        elif c == "\\" and i + 1 < n:
            all_q[i + 1] = single_q[i + 1] = _MASK
            i += 1
        elif c == "'":
            if i and command[i - 1] == "$":
                ansi.append(i - 1)
            all_q[i] = single_q[i] = _MASK
            state = "'"
        elif c == '"':
            all_q[i] = _MASK
            state = '"'
        elif c == "#" and (i == 0 or command[i - 1].isspace()):
            for k in range(i, n):
                all_q[k] = single_q[k] = _MASK
            break
        i += 1
    return "".join(all_q), "".join(single_q), ansi


def bash_syntax(command: str) -> list[tuple[int, str]]:
    """(offset, what) of each bash-only construct in ``command``, by offset."""
    masked, single, ansi = _mask(command)
    found = [(off, "$'...'") for off in ansi]
    for what, pattern in _BASH_ONLY:
        m = pattern.search(masked)
        if m:
            found.append((m.start() + len(m.group()) - len(m.group().lstrip()), what))
    m = re.search(r"\$\(\s*<", single)
    if m:
        found.append((m.start(), "$(<"))
    return sorted(found)


# -- the format ------------------------------------------------------------------------
def _user_column(body: str) -> tuple[str | None, str]:
    """(the field where a system crontab has its user, the rest of the line)."""
    parts = body.split(None, 2 if body.startswith("@") else 6)
    need = 3 if body.startswith("@") else 7
    if len(parts) < need:
        return (parts[need - 2] if len(parts) == need - 1 else None), ""
    return parts[need - 2], parts[need - 1]


def _decide_format(job_lines: list[tuple[int, str]], search_path: str,
                   user_exists: Callable[[str], bool],
                   has_command: Callable[[str, str], bool]) -> tuple[bool, str]:
    """(system?, why) from the job lines' user column."""
    users: list[str] = []
    unknown: list[str] = []
    for lineno, body in job_lines:
        candidate, rest = _user_column(body)
        if candidate is None:
            continue  # too short in either format: reported when converted
        if not rest:
            return False, f"line {lineno} has nothing after {candidate!r}, so that is the command"
        if not _USER_NAME.fullmatch(candidate):
            return False, f"line {lineno}: {candidate!r} cannot be a user name"
        is_user = user_exists(candidate)
        is_command = candidate in _SHELL_WORDS or has_command(candidate, search_path)
        if is_command and not is_user:
            return False, f"line {lineno}: {candidate!r} is a command, not a user"
        if is_command and rest.startswith("-"):
            return False, f"line {lineno}: {candidate!r} is a command followed by an option"
        if is_user and not is_command:
            users.append(candidate)
        elif not is_user:
            unknown.append(candidate)
    if users:
        shown = list(dict.fromkeys(users + unknown))
        listed = ", ".join(shown[:5]) + (", ..." if len(shown) > 5 else "")
        return True, f"each job line has a user column: {listed}"
    if unknown:
        listed = ", ".join(list(dict.fromkeys(unknown))[:5])
        return False, f"the field after the schedule ({listed}) is no user of this host"
    return False, "no job line has a user of this host after the schedule"


# -- converting ------------------------------------------------------------------------
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


def _split_job_line(body: str, system: bool) -> tuple[str | None, list[str], str | None]:
    """(schedule, [user,] command parts, error) of a job line's ``body``."""
    if body.startswith("@"):
        parts = body.split(None, 2 if system else 1)
        special = parts[0]
        if len(parts) < (3 if system else 2):
            what = "a user and a command" if system else "a command"
            return None, [], f"expected {special} followed by {what}; line skipped"
        schedule, err = _schedule_for_special(special.lower())
        if err:
            return None, [], err
        return schedule, parts[1:], None
    need = 7 if system else 6
    parts = body.split(None, need - 1)
    if len(parts) < need:
        what = "5 time fields, a user and a command" if system else "5 time fields and a command"
        hint = ""
        if not system and len(parts) >= 6:
            hint = " (is this a system crontab with a user column? convert it with --system)"
        return None, [], f"expected {what}, found {len(parts)} field(s){hint}; line skipped"
    schedule = " ".join(parts[:5])
    try:
        parse_schedule(schedule)
    except ScheduleError as e:
        return None, [], f"invalid schedule {schedule!r}: {e.message}; line skipped"
    return schedule, parts[5:], None


def _commented_job(raw: str, system: bool) -> tuple[str, int] | None:
    """(body, offset) of a commented-out job line, None for any other comment."""
    m = re.match(r"\s*#+\s*", raw)
    if not m:
        return None
    body = raw[m.end():].rstrip()
    if not body or _ENV_LINE.match(body):
        return None
    schedule, parts, err = _split_job_line(body[1:] if body.startswith("-") else body, system)
    if err or schedule is None:
        return None
    if system and (not _USER_NAME.fullmatch(parts[0]) or parts[0] == "user-name"):
        return None  # "# *  *  *  *  * user-name command to be executed": Debian's template
    if _unescape_percent(parts[-1]) is None:
        return None  # would not convert: it stays a comment
    return body, m.end()


def convert_crontab(text: str, *, path: str, system: bool | None = None,
                    user: str | None = None, include_commented: bool = False,
                    user_exists: Callable[[str], bool] = _host_user_exists,
                    has_command: Callable[[str, str], bool] = _host_has_command,
                    ) -> ImportResult:
    """Convert crontab ``text`` (read from ``path``, a name for messages) to a job file.

    ``user`` (user format only) is the crontab's owner; ``include_commented``
    turns commented-out job lines into ``enabled: false`` jobs. ``user_exists``
    and ``has_command`` look at this host, for telling the formats apart.
    """
    lines = text.splitlines()
    search_path = _DEFAULT_PATH
    job_lines: list[tuple[int, str]] = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        m = _ENV_LINE.match(line)
        if m and m.group(1) == "PATH":
            search_path = _unquote(m.group(2)) or search_path
        elif line and not line.startswith("#") and not m:
            job_lines.append((lineno, line[1:] if line.startswith("-") else line))

    format_note = why = ""
    if system is None:
        owner_from_path = _spool_owner(path)
        if is_system_crontab_path(path):
            system, why = True, "cron reads /etc/crontab and /etc/cron.d/* with a user column"
        elif owner_from_path is not None:
            system, why = False, f"a spool file of cron's, owned by {owner_from_path}"
        else:
            system, why = _decide_format(job_lines, search_path, user_exists, has_command)
        if system:
            format_note = f"{path}: read as a system crontab ({why}); pass --user if it is not"
        else:
            format_note = (f"{path}: read as a user crontab ({why}); pass --system if it has "
                           "a user column")

    problems: list[Problem] = []
    warnings: list[Problem] = []

    def problem(lineno: int, message: str) -> None:
        problems.append(Problem(path, lineno, 1, message))

    def warning(lineno: int, col: int, message: str) -> None:
        warnings.append(Problem(path, lineno, col, message))

    owner = None
    if not system:
        owner = user if user is not None else _spool_owner(path)

    env: dict[str, str] = {}
    timezone: str | None = None
    jitter: str | None = None
    shell: str | None = None
    # MAILTO: None (not set: the cluster default applies), [] (MAILTO="": no
    # mail, so no notifications) or the notify routes of its notifier
    notify: list | None = None
    jobs: list[dict] = []
    comments: list[list[str]] = []  # the comment lines to print before each job
    jobs_at: list[int] = []          # each job's line number
    pending: list[str] = []  # comments waiting for the next job

    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        enabled = True
        offset = len(raw) - len(raw.lstrip())
        if line.startswith("#"):
            found = _commented_job(raw, system) if include_commented else None
            if found is None:
                continue
            line, offset = found
            enabled = False

        m = _ENV_LINE.match(line) if enabled else None
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
            if name == "MAILTO":
                if not value:
                    notify = []  # MAILTO="" turns mail off: the jobs below notify nobody
                    continue
                notifier = mailto_notifier(value)
                notify = [{"to": notifier, "on": list(MAILTO_EVENTS)}]
                pending.append(f"# MAILTO={value}: the jobs below notify {notifier} (define it "
                               "under notifiers: in the daemon config)")
                warning(lineno, 1, f"MAILTO={value} becomes notify: {notifier} (on "
                                   f"{', '.join(MAILTO_EVENTS)}) for the jobs below; define it "
                                   "in the daemon config: notifiers: {" + notifier + ": {type: "
                                   f"smtp, to: [{', '.join(_addresses(value))}], from: "
                                   "cronrd@HOST}}. cron mailed any output; cronrd notifies on "
                                   "failure and keeps the output in the run log (cronrd logs JOB)")
                continue
            if name in _MAIL_VARS:
                pending.append(f"# {name}={value}: set it on the notifier (from: for MAILFROM)")
                warning(lineno, 1, f"{name}={value} is kept as a comment in the output: set it "
                                   "on the notifier MAILTO maps to (MAILFROM is its from:)")
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
            if name == "SHELL":
                if not value or value in _DEFAULT_SHELLS:
                    shell = None
                elif value.startswith("/"):
                    shell = value  # cron runs SHELL -c COMMAND: the job's shell: field
                else:
                    problem(lineno, f"SHELL={value}: cron needs the shell's full path (e.g. "
                                    "SHELL=/bin/bash); the jobs below run under /bin/sh")
                continue
            env[name] = value
            continue

        body = line[1:] if line.startswith("-") else line  # cronie: "-" = do not log
        schedule, parts, err = _split_job_line(body, system)
        if err:
            problem(lineno, err)
            continue
        assert schedule is not None
        job_user = parts[0] if system else owner
        raw_command = parts[-1]
        command = _unescape_percent(raw_command)
        if command is None:
            problem(lineno, "the command contains %, which cron turns into a newline and feeds "
                            "the text after it to the command's stdin; cronrd cannot convert this "
                            r"faithfully: write \% for a literal %, or rewrite it (e.g. with printf "
                            "or a here-document); line skipped")
            continue

        runs_under = shell or "/bin/sh"
        if runs_under in _POSIX_SHELLS:
            found_bash = bash_syntax(raw_command)
            if found_bash:
                start = offset + len(line) - len(raw_command)
                what = ", ".join(dict.fromkeys(w for _, w in found_bash))
                warning(lineno, start + found_bash[0][0] + 1,
                        f"uses bash syntax ({what}) but runs under {runs_under}; add "
                        "SHELL=/bin/bash to the crontab or rewrite the command")

        # No line number in the job itself: converting the file again after an edit
        # that shifts the lines leaves the other jobs unchanged (it is a comment).
        job: dict = {"name": "", "description": f"imported from {path}"}
        if not enabled:
            job["enabled"] = False
        job["schedule"] = schedule
        if timezone:
            job["timezone"] = timezone
        if job_user:
            job["user"] = job_user
        job["command"] = command
        if shell:
            job["shell"] = shell  # the job field is added by the per-job-controls work
        if env:
            job["env"] = dict(env)
        if jitter:
            job["jitter"] = jitter
        job["catchup"] = "none"
        job["concurrency"] = "allow"
        if notify is not None:
            job["notify"] = [dict(r) for r in notify]
        jobs.append(job)
        jobs_at.append(lineno)
        comments.append(pending + [f"# line {lineno}" + ("" if enabled else " (commented out)")])
        pending = []

    _assign_names(jobs)

    if not system and owner is None and jobs:
        warnings.insert(0, Problem(path, 0, 0, (
            "this is a user crontab and its owner is unknown, so the jobs have no user: and would "
            "run as the user cronrd runs as (root for the system daemon); add user: NAME to each "
            "job, or convert it again with --owner NAME")))

    text_out = _render(path, jobs, comments, pending, problems, warnings)
    return ImportResult(text_out, jobs, problems, warnings, bool(system), format_note, why,
                        jobs_at)


def _render(path: str, jobs: list[dict], comments: list[list[str]], trailing: list[str],
            problems: list[Problem], warnings: list[Problem]) -> str:
    header = [
        f"# Converted from {path} by cronrd's crontab importer.",
        "# Cron's semantics are kept: catchup: none (cron does not run fire times it",
        "# missed while down) and concurrency: allow (cron starts a new run even while",
        "# the previous one is still running). Change them if you want cronrd's",
        "# defaults (catchup: latest, concurrency: forbid).",
    ]
    for title, found in (("Lines not converted:", problems), ("Warnings:", warnings)):
        if found:
            header.append("#")
            header.append(f"# {title}")
            for p in found:
                where = f"line {p.line}" if p.line else "file"
                header.append(f"#   {where}: {' '.join(p.message.split())}")
    out = "\n".join(header) + "\n"
    if not jobs:
        return out + "\n".join(trailing + ["jobs: []", ""])
    out += "jobs:\n"
    for job, before in zip(jobs, comments):
        out += "".join(c + "\n" for c in before)
        out += yaml.safe_dump([job], sort_keys=False, default_flow_style=False,
                              allow_unicode=True, width=10**9)
    return out + "".join(c + "\n" for c in trailing)


def watches_from(res: ImportResult, text: str, path: str, grace: str = "1h",
                 url: str | None = None) -> str:
    """The crontab's jobs as watches (jobspec/watch.py), the first step of a
    migration: the lines keep running where they are, each ending with
    ``&& cronrd ping NAME``, and cronrd alerts when one does not ping. Each
    watch's comment says how to change its line. ``url``: the ping goes
    through a cronrd node's API (from a host that runs no cronrd)."""
    lines = text.splitlines()
    ping = "cronrd ping {name}" if url is None else f"cronrd ping --url {url} {{name}}"
    out = [f"# Watches for the jobs of {path}, made by `cronrd import-crontab --watch`.",
           "# The jobs keep running where they are: change each line of the crontab",
           "# as its comment says, so that it pings cronrd when it succeeds; cronrd",
           f"# alerts when a fire time passes its grace ({grace}) with no ping."]
    if url is not None:
        out.append("# The pings go through the API at " + url + ": set CRONRD_PING_TOKEN in")
        out.append("# the crontab to a token of role ping (`cronrd token create --role ping")
        out.append("# --jobs 'NAME'` on a cronrd node).")
    out.append("watches:")
    for job, lineno in zip(res.jobs, res.job_lines):
        if not job.get("enabled", True):
            continue
        watch = {"name": job["name"], "description": f"watch of {path} line {lineno}",
                 "schedule": job["schedule"]}
        if job.get("timezone"):
            watch["timezone"] = job["timezone"]
        watch["grace"] = grace
        line = lines[lineno - 1].strip()
        call = ping.format(name=job["name"])
        if "%" in line.replace("\\%", ""):
            out.append(f"  # line {lineno} has a % (what follows is the command's input): "
                       f"put `&& {call}` before its first %")
        else:
            out.append(f"  # line {lineno}: change it to")
            out.append(f"  #   {line} && {call}")
        out.append(yaml.safe_dump([watch], sort_keys=False, default_flow_style=False,
                                  allow_unicode=True, width=10**9).rstrip())
    if out[-1] == "watches:":
        out[-1] = "watches: []"
    return "\n".join(out) + "\n"

"""crontab -> cronrd job YAML: formats, env lines, specials, %, MAILTO, bad lines."""

from __future__ import annotations

import yaml

from cronrd.crontab_import import ImportResult, convert_crontab, is_system_crontab_path
from cronrd.jobspec import NAME_RE, JobSpec, parse_job_text

SYSTEM_CRONTAB = r"""# /etc/crontab: system-wide crontab
# Unlike any other crontab you don't have to run the `crontab'
# command to install the new version when you edit this file.

SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin

# Example of job definition:
# .---------------- minute (0 - 59)
# m h dom mon dow user	command
17 *	* * *	root    cd / && run-parts --report /etc/cron.hourly
25 6	* * *	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
@reboot root /usr/local/bin/warmup.sh
MAILTO=ops@example.com
CRON_TZ=Europe/Berlin
0 2 * * * backup /usr/local/bin/backup.sh --date $(date +\%F)
0 3 * * * root echo hi | mail -s x%y root
61 * * * * root /bin/bad-minute
* * * root
@weekly root
"""


def imported(text: str, **kw) -> ImportResult:
    result = convert_crontab(text, **kw)
    # the output must itself be a valid job file, with exactly the jobs reported
    checked = parse_job_text(result.yaml_text, "imported.yaml")
    assert checked.problems == (), [str(p) for p in checked.problems]
    assert [j.name for j in checked.jobs] == [j["name"] for j in result.jobs]
    return result


def specs(result: ImportResult) -> dict[str, JobSpec]:
    return {j.name: j for j in parse_job_text(result.yaml_text, "imported.yaml").jobs}


def test_system_crontab():
    result = imported(SYSTEM_CRONTAB, path="/etc/crontab")
    by_name = specs(result)
    assert list(by_name) == ["cd-l11", "test-l12", "warmup-sh-l13", "backup-sh-l16"]
    path_env = ("PATH", "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin")

    hourly = by_name["cd-l11"]
    assert hourly.schedule == "17 * * * *"
    assert hourly.user == "root"
    assert hourly.command == "cd / && run-parts --report /etc/cron.hourly"
    assert hourly.env == (path_env, ("SHELL", "/bin/sh"))
    assert (hourly.catchup, hourly.concurrency) == ("none", "allow")
    assert hourly.timezone is None
    assert hourly.description == "imported from /etc/crontab line 11"

    assert by_name["test-l12"].command == (
        "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }")
    assert by_name["warmup-sh-l13"].schedule == "@reboot"

    backup = by_name["backup-sh-l16"]
    assert backup.user == "backup"
    assert backup.timezone == "Europe/Berlin"  # CRON_TZ applies to the lines after it
    assert backup.command == "/usr/local/bin/backup.sh --date $(date +%F)"  # \% -> %
    assert ("MAILTO", "ops@example.com") not in backup.env and ("CRON_TZ", "Europe/Berlin") not in backup.env

    assert [str(p) for p in result.problems] == [
        "/etc/crontab:14:1: MAILTO=ops@example.com cannot be converted: cronrd does not send mail; job output "
        "is kept in its run log (cronrd logs JOB); the jobs are converted without it",
        "/etc/crontab:17:1: the command contains %, which cron turns into a newline and feeds the text after "
        r"it to the command's stdin; cronrd cannot convert this faithfully: write \% for a literal %, or "
        "rewrite it (e.g. with printf or a here-document); line skipped",
        "/etc/crontab:18:1: invalid schedule '61 * * * *': minute field '61' is out of range 0-59; "
        "line skipped",
        "/etc/crontab:19:1: expected 5 time fields, a user and a command, found 4 field(s); line skipped",
        "/etc/crontab:20:1: expected @weekly followed by a user and a command; line skipped",
    ]


def test_output_header_names_source_and_semantics_and_problems():
    text = convert_crontab(SYSTEM_CRONTAB, path="/etc/crontab").yaml_text
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0] == "# Converted from /etc/crontab by cronrd's crontab importer."
    joined = "\n".join(header)
    assert "catchup: none" in joined and "concurrency: allow" in joined
    assert "#   line 14: MAILTO=ops@example.com cannot be converted" in joined
    assert yaml.safe_load(text)["jobs"][0]["name"] == "cd-l11"


USER_CRONTAB = """\
# m h  dom mon dow   command
MAILTO=""
PATH = /home/alice/bin:/usr/bin:/bin
GREETING = "hello world"
*/10 * * * * /home/alice/bin/sync-mail.py --quiet
QUOTED='single quoted'
TZ=America/New_York
@daily $HOME/bin/backup.sh > /dev/null 2>&1
@midnight rm -f /tmp/alice-*.lock
@every 5m echo not-cron
-0 5 * * 1-5 FOO=bar nice -n 10 /opt/Report Tool/run.sh
30 7 * * * printf 'a\\%b\\n' x
0 0 1 1 *
0 8 * * mon echo week%start
"""


def test_user_crontab_with_env_lines_and_specials():
    result = imported(USER_CRONTAB, path="/var/spool/cron/crontabs/alice")
    by_name = specs(result)
    assert list(by_name) == ["sync-mail-py-l5", "backup-sh-l8", "rm-l9", "nice-l11", "printf-l12"]
    assert {j.user for j in by_name.values()} == {"alice"}  # the spool file's owner

    first = by_name["sync-mail-py-l5"]
    assert first.schedule == "*/10 * * * *"
    assert first.env == (("GREETING", "hello world"), ("PATH", "/home/alice/bin:/usr/bin:/bin"))
    assert first.timezone is None

    daily = by_name["backup-sh-l8"]
    assert daily.schedule == "@daily"
    assert daily.command == "$HOME/bin/backup.sh > /dev/null 2>&1"
    assert dict(daily.env) == {"GREETING": "hello world", "PATH": "/home/alice/bin:/usr/bin:/bin",
                               "QUOTED": "single quoted", "TZ": "America/New_York"}
    assert daily.timezone == "America/New_York"

    assert by_name["rm-l9"].schedule == "@midnight"
    nice = by_name["nice-l11"]  # leading "-" (cronie: do not log) is accepted
    assert nice.schedule == "0 5 * * 1-5"
    assert nice.command == "FOO=bar nice -n 10 /opt/Report Tool/run.sh"
    assert by_name["printf-l12"].command == "printf 'a%b\\n' x"

    messages = [str(p) for p in result.problems]
    assert messages == [
        "/var/spool/cron/crontabs/alice:10:1: unknown special schedule '@every' (@every needs a duration, "
        "e.g. '@every 5m'); line skipped",
        "/var/spool/cron/crontabs/alice:13:1: expected 5 time fields and a command, found 5 field(s); "
        "line skipped",
        "/var/spool/cron/crontabs/alice:14:1: the command contains %, which cron turns into a newline and "
        r"feeds the text after it to the command's stdin; cronrd cannot convert this faithfully: write \% "
        "for a literal %, or rewrite it (e.g. with printf or a here-document); line skipped",
    ]  # MAILTO="" turns mail off: nothing lost, no problem


def test_user_crontab_without_known_owner_warns_once():
    result = imported("0 * * * * /bin/true\n0 1 * * * /bin/false\n", path="/home/alice/my.crontab")
    assert [j.get("user") for j in result.jobs] == [None, None]
    assert len(result.problems) == 1
    p = result.problems[0]
    assert (p.path, p.line, p.col) == ("/home/alice/my.crontab", 0, 0)
    assert "no user:" in p.message and "add user: NAME to each job" in p.message

    given = imported("0 * * * * /bin/true\n", path="/home/alice/my.crontab", user="alice")
    assert given.problems == [] and given.jobs[0]["user"] == "alice"


def test_system_detection_by_path_and_explicit_override():
    line = "0 4 * * * root /usr/sbin/logrotate /etc/logrotate.conf\n"
    as_system = imported(line, path="/etc/cron.d/logrotate")
    assert as_system.jobs[0]["user"] == "root"
    assert as_system.jobs[0]["command"] == "/usr/sbin/logrotate /etc/logrotate.conf"
    # the same text as a user crontab: "root" is the command (no guessing from content)
    as_user = imported(line, path="/tmp/x", user="bob")
    assert as_user.jobs[0]["command"] == "root /usr/sbin/logrotate /etc/logrotate.conf"
    # explicit system=True wins over the path
    forced = imported(line, path="/tmp/x", system=True)
    assert forced.jobs[0]["user"] == "root" and forced.problems == []
    # and system=False wins over a system path
    assert "user" not in convert_crontab(line, path="/etc/crontab", system=False, user=None).jobs[0]

    assert is_system_crontab_path("/etc/crontab")
    assert is_system_crontab_path("/etc/cron.d/php")
    assert not is_system_crontab_path("/etc/cron.daily/php")
    assert not is_system_crontab_path("/var/spool/cron/crontabs/root")


def test_user_line_with_too_few_fields_hints_at_system_format():
    result = convert_crontab("0 4 * * * root\n", path="/tmp/x", user="u", system=False)
    assert result.jobs[0]["command"] == "root"  # valid as a user crontab line
    result = convert_crontab("0 4 * * *\n", path="/tmp/x", user="u")
    assert [str(p) for p in result.problems] == [
        "/tmp/x:1:1: expected 5 time fields and a command, found 5 field(s); line skipped"]
    assert result.jobs == []


def test_mail_settings_and_other_env_edge_cases():
    text = """\
MAILTO=root,ops@example.com
MAILFROM=cron@example.com
SHELL=/bin/bash
CRONRD_SECRET=x
RANDOM_DELAY=15
CRON_TZ=Mars/Olympus
0 * * * * echo $BASH_VERSION
"""
    result = imported(text, path="/tmp/c", user="u")
    job = result.jobs[0]
    assert job["env"] == {"SHELL": "/bin/bash"}
    assert job["jitter"] == "15m"
    assert "timezone" not in job
    lines = [(p.line, p.message.split(":")[0]) for p in result.problems]
    assert lines == [(1, "MAILTO=root,ops@example.com cannot be converted"),
                     (2, "MAILFROM=cron@example.com cannot be converted"),
                     (3, "SHELL=/bin/bash"),
                     (4, "environment variable 'CRONRD_SECRET' cannot be carried over"),
                     (6, "CRON_TZ=Mars/Olympus")]
    assert "cronrd runs string commands with /bin/sh -c" in result.problems[2].message
    assert "unknown time zone 'Mars/Olympus'" in result.problems[4].message
    assert specs(result)["echo-l7"].jitter == 900.0


def test_env_line_applies_only_to_later_lines_and_can_be_overridden():
    text = "0 1 * * * a\nX=1\n0 2 * * * b\nX=2\n0 3 * * * c\n"
    jobs = imported(text, path="/tmp/c", user="u").jobs
    assert [j.get("env") for j in jobs] == [None, {"X": "1"}, {"X": "2"}]


def test_names_are_sanitised_unique_and_valid():
    text = "".join(f"0 {h} * * * {cmd}\n" for h, cmd in enumerate([
        "/usr/local/bin/backup.sh",
        "'/opt/my tool/run'",
        "FOO=1 BAR=2 /usr/bin/python3.11 -m x",
        "[ -x /bin/x ] && /bin/x",
        "/very/" + "long" * 40 + ".sh",
        "__init__.py",
    ]))
    names = [j["name"] for j in imported(text, path="/tmp/c", user="u").jobs]
    assert names[:4] == ["backup-sh-l1", "run-l2", "python3-11-l3", "job-l4"]
    assert names[4].endswith("-l5") and len(names[4]) <= 100
    assert names[5] == "init__-py-l6"
    assert all(NAME_RE.fullmatch(n) for n in names) and len(set(names)) == len(names)


def test_comments_blank_lines_and_empty_crontab():
    result = imported("# nothing\n\n   \n\t# indented comment\n", path="/tmp/c", user="u")
    assert result.jobs == [] and result.problems == []
    assert yaml.safe_load(result.yaml_text) == {"jobs": []}


def test_yaml_output_quotes_values_that_need_it():
    text = "@hourly echo '*: yes' # not a comment\n*/5 * * * * true\n"
    result = imported(text, path="/tmp/c", user="u")
    by_name = specs(result)
    assert by_name["echo-l1"].command == "echo '*: yes' # not a comment"
    assert by_name["echo-l1"].schedule == "@hourly"
    assert by_name["true-l2"].schedule == "*/5 * * * *"

"""crontab -> cronrd job YAML: formats (and telling them apart), env lines, specials,
%, MAILTO, SHELL, commented-out jobs, bad lines. Names: test_crontab_import_names.py;
the command: test_crontab_import_cli.py."""

from __future__ import annotations

import yaml

from cronrd.crontab_import import (ImportResult, bash_syntax, convert_crontab,
                                   is_system_crontab_path)
from cronrd.jobspec import JobSpec, parse_job_text

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


# This host, as the format detection sees it (the real one differs between machines).
USERS = {"root", "backup", "www-data", "alice", "git", "nobody"}
COMMANDS = {"php", "git", "echo", "run-parts", "rm", "printf", "nice", "true", "false",
            "python3", "logrotate", "grep"}


def host(kw: dict) -> dict:
    kw.setdefault("user_exists", USERS.__contains__)
    kw.setdefault("has_command", lambda name, search_path: name in COMMANDS)
    return kw


def imported(text: str, **kw) -> ImportResult:
    result = convert_crontab(text, **host(kw))
    # the output must itself be a valid job file, with exactly the jobs reported
    checked = parse_job_text(result.yaml_text, "imported.yaml")
    problems, expected = list(checked.problems), [j["name"] for j in result.jobs]
    assert problems == [], [str(p) for p in problems]
    assert [j.name for j in checked.jobs] == expected
    return result


def specs(result: ImportResult) -> dict[str, JobSpec]:
    return {j.name: j for j in parse_job_text(result.yaml_text, "imported.yaml").jobs}


def test_system_crontab():
    result = imported(SYSTEM_CRONTAB, path="/etc/crontab")
    by_name = specs(result)
    assert list(by_name) == ["run-parts-cron-hourly", "run-parts-cron-daily", "warmup", "backup-date"]
    path_env = ("PATH", "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin")

    hourly = by_name["run-parts-cron-hourly"]
    assert hourly.schedule == "17 * * * *"
    assert hourly.user == "root"
    assert hourly.command == "cd / && run-parts --report /etc/cron.hourly"
    assert hourly.env == (path_env,)  # SHELL=/bin/sh is the default shell, not an env var
    assert (hourly.catchup, hourly.concurrency) == ("none", "allow")
    assert hourly.timezone is None
    assert hourly.description == "imported from /etc/crontab"
    assert "# line 11\n- name: run-parts-cron-hourly\n" in result.yaml_text

    assert by_name["run-parts-cron-daily"].command == (
        "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }")
    assert by_name["warmup"].schedule == "@reboot"

    backup = by_name["backup-date"]
    assert backup.user == "backup"
    assert backup.timezone == "Europe/Berlin"  # CRON_TZ applies to the lines after it
    assert backup.command == "/usr/local/bin/backup.sh --date $(date +%F)"  # \% -> %
    assert ("MAILTO", "ops@example.com") not in backup.env and ("CRON_TZ", "Europe/Berlin") not in backup.env

    assert [str(p) for p in result.problems] == [
        "/etc/crontab:17:1: the command contains %, which cron turns into a newline and feeds the text after "
        r"it to the command's stdin; cronrd cannot convert this faithfully: write \% for a literal %, or "
        "rewrite it (e.g. with printf or a here-document); line skipped",
        "/etc/crontab:18:1: invalid schedule '61 * * * *': minute field '61' is out of range 0-59; "
        "line skipped",
        "/etc/crontab:19:1: expected 5 time fields, a user and a command, found 4 field(s); line skipped",
        "/etc/crontab:20:1: expected @weekly followed by a user and a command; line skipped",
    ]
    # MAILTO is not an error: it becomes a notifier reference the config must define
    assert [str(p) for p in result.warnings] == [
        "/etc/crontab:14:1: MAILTO=ops@example.com becomes notify: mailto-ops-example.com (on "
        "failed, launch_failed) for the jobs below; define it in the daemon config: notifiers: "
        "{mailto-ops-example.com: {type: smtp, to: [ops@example.com], from: cronrd@HOST}}. cron "
        "mailed any output; cronrd notifies on failure and keeps the output in the run log "
        "(cronrd logs JOB)"]
    assert result.system and result.format_note == (
        "/etc/crontab: read as a system crontab (cron reads /etc/crontab and /etc/cron.d/* with a "
        "user column); pass --user if it is not")


def test_output_header_names_source_and_semantics_and_problems():
    text = convert_crontab(SYSTEM_CRONTAB, path="/etc/crontab").yaml_text
    header = [line for line in text[:text.index("jobs:")].splitlines()]
    assert header[0] == "# Converted from /etc/crontab by cronrd's crontab importer."
    joined = "\n".join(header)
    assert "catchup: none" in joined and "concurrency: allow" in joined
    assert "# Lines not converted:\n#   line 17: the command contains %" in joined
    assert "# Warnings:\n#   line 14: MAILTO=ops@example.com becomes notify: " in joined
    assert yaml.safe_load(text)["jobs"][0]["name"] == "run-parts-cron-hourly"


def test_mailto_becomes_a_notifier_reference_of_the_jobs_after_it():
    text = ("0 1 * * * root /bin/a\nMAILTO=ops@example.com\n0 2 * * * root /bin/b\n"
            "MAILTO=dev@example.com,root\n0 3 * * * root /bin/c\nMAILTO=\"\"\n"
            "0 4 * * * root /bin/d\n")
    result = imported(text, path="/etc/cron.d/x")
    assert result.problems == [] and [j["name"] for j in result.jobs] == ["a", "b", "c", "d"]
    by_name = specs(result)
    assert by_name["a"].notify is None        # before any MAILTO: the cluster default
    assert [r.to_dict() for r in by_name["b"].notify] == [
        {"to": "mailto-ops-example.com", "on": ["failed", "launch_failed"]}]
    assert [r.to for r in by_name["c"].notify] == ["mailto-dev-example.com-root"]
    assert by_name["d"].notify == ()          # MAILTO="": no mail, no notifications
    body = result.yaml_text[result.yaml_text.index("jobs:"):].splitlines()
    note = ("# MAILTO=ops@example.com: the jobs below notify mailto-ops-example.com (define it "
            "under notifiers: in the daemon config)")
    assert body[body.index(note) + 1:body.index(note) + 3] == ["# line 3", "- name: b"]
    assert [p.line for p in result.warnings] == [2, 4]
    assert "to: [dev@example.com, root@localhost]" in result.warnings[1].message


def test_a_long_mailto_gets_a_valid_notifier_name():
    from cronrd.crontab_import import mailto_notifier
    from cronrd.jobspec.notify import NOTIFIER_NAME_RE
    long = ",".join(f"person{i}@example.com" for i in range(10))
    name = mailto_notifier(long)
    assert NOTIFIER_NAME_RE.fullmatch(name) and len(name) <= 64
    assert name != mailto_notifier(long + ",x@example.com")


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
    assert list(by_name) == ["sync-mail", "backup", "rm", "report-run", "printf-x"]
    assert {j.user for j in by_name.values()} == {"alice"}  # the spool file's owner

    first = by_name["sync-mail"]
    assert first.schedule == "*/10 * * * *"
    assert first.env == (("GREETING", "hello world"), ("PATH", "/home/alice/bin:/usr/bin:/bin"))
    assert first.timezone is None

    daily = by_name["backup"]
    assert daily.schedule == "@daily"
    assert daily.command == "$HOME/bin/backup.sh > /dev/null 2>&1"
    assert dict(daily.env) == {"GREETING": "hello world", "PATH": "/home/alice/bin:/usr/bin:/bin",
                               "QUOTED": "single quoted", "TZ": "America/New_York"}
    assert daily.timezone == "America/New_York"

    assert by_name["rm"].schedule == "@midnight"
    nice = by_name["report-run"]  # leading "-" (cronie: do not log) is accepted
    assert nice.schedule == "0 5 * * 1-5"
    assert nice.command == "FOO=bar nice -n 10 /opt/Report Tool/run.sh"
    assert by_name["printf-x"].command == "printf 'a%b\\n' x"

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
    assert result.warnings == []
    assert not result.system and result.format_note == (
        "/var/spool/cron/crontabs/alice: read as a user crontab (a spool file of cron's, owned by "
        "alice); pass --system if it has a user column")


def test_user_crontab_without_known_owner_warns_once():
    result = imported("0 * * * * /bin/true\n0 1 * * * /bin/false\n", path="/home/alice/my.crontab")
    assert [j.get("user") for j in result.jobs] == [None, None]
    assert result.problems == [] and len(result.warnings) == 1
    p = result.warnings[0]
    assert (p.path, p.line, p.col) == ("/home/alice/my.crontab", 0, 0)
    assert "no user:" in p.message and "add user: NAME to each job" in p.message
    assert "--owner NAME" in p.message

    given = imported("0 * * * * /bin/true\n", path="/home/alice/my.crontab", user="alice")
    assert given.problems == given.warnings == [] and given.jobs[0]["user"] == "alice"


def test_system_detection_by_path_and_explicit_override():
    line = "0 4 * * * root /usr/sbin/logrotate /etc/logrotate.conf\n"
    as_system = imported(line, path="/etc/cron.d/logrotate")
    assert as_system.jobs[0]["user"] == "root"
    assert as_system.jobs[0]["command"] == "/usr/sbin/logrotate /etc/logrotate.conf"
    # a spool file is a user crontab whatever its content: "root" is the command
    as_user = imported(line, path="/var/spool/cron/crontabs/bob")
    assert as_user.jobs[0]["command"] == "root /usr/sbin/logrotate /etc/logrotate.conf"
    # explicit system=True wins over the path, and system=False over a system path
    forced = imported(line, path="/var/spool/cron/crontabs/bob", system=True)
    assert forced.jobs[0]["user"] == "root" and forced.problems == []
    assert forced.format_note == ""  # the caller decided: nothing to explain
    assert "user" not in convert_crontab(line, path="/etc/crontab", system=False, user=None).jobs[0]

    assert is_system_crontab_path("/etc/crontab")
    assert is_system_crontab_path("/etc/cron.d/php")
    assert not is_system_crontab_path("/etc/cron.daily/php")
    assert not is_system_crontab_path("/var/spool/cron/crontabs/root")


# A copy of a Debian /etc/crontab kept somewhere else.
COPIED_SYSTEM_CRONTAB = """\
SHELL=/bin/sh
17 *	* * *	root    cd / && run-parts --report /etc/cron.hourly
25 6	* * *	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
*/5 * * * * www-data php /var/www/artisan schedule:run
@reboot deploy /srv/app/warm-cache
"""


def test_a_system_crontab_elsewhere_is_told_by_its_user_column():
    result = imported(COPIED_SYSTEM_CRONTAB, path="/home/alice/crontab.bak")
    assert result.system
    assert [(j["user"], j["command"].split()[0]) for j in result.jobs] == [
        ("root", "cd"), ("root", "test"), ("www-data", "php"), ("deploy", "/srv/app/warm-cache")]
    assert result.format_note == (
        "/home/alice/crontab.bak: read as a system crontab (each job line has a user column: root, "
        "www-data, deploy); pass --user if it is not")
    assert result.warnings == []  # a system crontab names its users: no unknown owner


def test_a_user_crontab_elsewhere_stays_a_user_crontab():
    def note(text):
        result = imported(text, path="/tmp/c", user="u")
        assert not result.system and all(j["user"] == "u" for j in result.jobs)
        return result.format_note

    # a command where a user would be
    assert note("0 * * * * root /bin/x\n*/5 * * * * php /var/www/artisan run\n") == (
        "/tmp/c: read as a user crontab (line 2: 'php' is a command, not a user); pass --system "
        "if it has a user column")
    assert note("0 * * * * /usr/bin/php x\n") == (
        "/tmp/c: read as a user crontab (line 1: '/usr/bin/php' cannot be a user name); pass "
        "--system if it has a user column")
    # 'git' is both a user and a command here: an option after it means the command
    assert "line 1: 'git' is a command followed by an option" in note(
        "0 * * * * git -C /srv/repo pull\n0 1 * * * root /bin/x\n")
    # nothing after the user-like word: it is the command
    assert "line 1 has nothing after 'root', so that is the command" in note("0 * * * * root\n")
    assert "line 1 has nothing after 'backup'" in note("@daily backup\n")
    # a name-like word that is no user of this host (and no command): not enough
    assert note("0 * * * * deploy now\n") == (
        "/tmp/c: read as a user crontab (the field after the schedule (deploy) is no user of "
        "this host); pass --system if it has a user column")
    assert "no job line" in note("")
    # shell words are commands too
    assert "'cd' is a command" in note("0 * * * * cd /tmp && x\n")


def test_the_format_is_decided_by_every_line_not_the_first():
    text = "0 * * * * root /bin/a\n0 1 * * * root /bin/b\n0 2 * * * /opt/c.sh --now\n"
    result = imported(text, path="/tmp/c", user="u")
    assert not result.system and "line 3: '/opt/c.sh' cannot be a user name" in result.format_note


def test_user_line_with_too_few_fields_hints_at_system_format():
    result = convert_crontab("0 4 * * * root\n", path="/tmp/x", user="u", system=False)
    assert result.jobs[0]["command"] == "root"  # valid as a user crontab line
    result = convert_crontab("0 4 * * *\n", path="/tmp/x", user="u")
    assert [str(p) for p in result.problems] == [
        "/tmp/x:1:1: expected 5 time fields and a command, found 5 field(s); line skipped"]
    assert result.jobs == []
    result = convert_crontab("0 4 * * * root x\n0 4 * * * a b\n", path="/tmp/x", user="u",
                             system=False)
    assert result.problems == []
    result = convert_crontab("0 4 * * * root\n", path="/tmp/x", system=True)
    assert "found 6 field(s)" in result.problems[0].message


def job_notify(job: dict):
    from cronrd.jobspec.notify import routes_from_data
    return routes_from_data(job["notify"])


def test_mail_settings_and_other_env_edge_cases():
    text = """\
MAILTO=root,ops@example.com
MAILFROM=cron@example.com
SHELL=bash
CRONRD_SECRET=x
RANDOM_DELAY=15
CRON_TZ=Mars/Olympus
0 * * * * echo $HOME
"""
    result = imported(text, path="/tmp/c", user="u")
    job = result.jobs[0]
    assert "env" not in job and "shell" not in job
    assert job["jitter"] == "15m"
    assert "timezone" not in job
    lines = [(p.line, p.message.split(":")[0]) for p in result.problems]
    assert lines == [(3, "SHELL=bash"),
                     (4, "environment variable 'CRONRD_SECRET' cannot be carried over"),
                     (6, "CRON_TZ=Mars/Olympus")]
    assert "cron needs the shell's full path (e.g. SHELL=/bin/bash)" in result.problems[0].message
    assert "unknown time zone 'Mars/Olympus'" in result.problems[2].message
    assert [(p.line, p.message.split(" ")[0]) for p in result.warnings] == [
        (1, "MAILTO=root,ops@example.com"), (2, "MAILFROM=cron@example.com")]
    assert "MAILFROM is its from:" in result.warnings[1].message
    assert [r.to for r in job_notify(job)] == ["mailto-root-ops-example.com"]
    assert specs(result)["echo"].jitter == 900.0


def test_env_line_applies_only_to_later_lines_and_can_be_overridden():
    text = "0 1 * * * a\nX=1\n0 2 * * * b\nX=2\n0 3 * * * c\n"
    jobs = imported(text, path="/tmp/c", user="u").jobs
    assert [j.get("env") for j in jobs] == [None, {"X": "1"}, {"X": "2"}]


def test_comments_blank_lines_and_empty_crontab():
    result = imported("# nothing\n\n   \n\t# indented comment\n", path="/tmp/c", user="u")
    assert result.jobs == [] and result.problems == [] and result.warnings == []
    assert yaml.safe_load(result.yaml_text) == {"jobs": []}


def test_yaml_output_quotes_values_that_need_it():
    text = "@hourly echo '*: yes' # not a comment\n*/5 * * * * true\n"
    result = imported(text, path="/tmp/c", user="u")
    by_name = specs(result)
    assert by_name["echo"].command == "echo '*: yes' # not a comment"
    assert by_name["echo"].schedule == "@hourly"
    assert by_name["true"].schedule == "*/5 * * * *"


# -- commented-out jobs ------------------------------------------------------------------
COMMENTED = """\
# m h  dom mon dow   command
# For example, you can run a backup of all your user accounts
# at 5 a.m every week with:
# 0 5 * * 1 tar -zcf /var/backups/home.tgz /home/
#*/5 * * * * /usr/local/bin/poll --fast
##  @daily /usr/local/bin/rotate
#MAILTO=someone
# 99 * * * * /bin/not-a-schedule
# 0 1 * * * echo a%b
0 2 * * * /usr/local/bin/poll --slow
"""


def test_commented_out_job_lines_become_disabled_jobs_when_asked():
    plain = imported(COMMENTED, path="/tmp/c", user="u")
    assert [j["name"] for j in plain.jobs] == ["poll-slow"] and "enabled" not in plain.jobs[0]

    result = imported(COMMENTED, path="/tmp/c", user="u", include_commented=True)
    assert [(j["name"], j.get("enabled", True), j["schedule"]) for j in result.jobs] == [
        ("tar-home-tgz", False, "0 5 * * 1"),  # only lines that parse as jobs
        ("poll-fast", False, "*/5 * * * *"),
        ("rotate", False, "@daily"),
        ("poll-slow", True, "0 2 * * *"),
    ]
    assert "# line 4 (commented out)\n- name: tar-home-tgz\n" in result.yaml_text
    assert result.problems == [] and result.warnings == []  # a% in a comment: stays a comment
    assert all(not j.enabled for j in specs(result).values() if j.name != "poll-slow")


def test_commented_system_lines_need_a_user_column_and_skip_the_template():
    text = ("# *  *  *  *  * user-name command to be executed\n"
            "#17 * * * * root cd / && run-parts /etc/cron.hourly\n"
            "# 0 * * * * /bin/x\n"
            "0 0 * * * root /bin/y\n")
    result = imported(text, path="/etc/crontab", include_commented=True)
    assert [(j["name"], j.get("enabled", True), j["user"]) for j in result.jobs] == [
        ("run-parts-cron-hourly", False, "root"), ("y", True, "root")]


# -- SHELL and bash syntax ---------------------------------------------------------------
def test_shell_becomes_the_jobs_shell_field_not_env():
    text = ("0 1 * * * echo a\nSHELL=/bin/bash\nBASH_ENV=/etc/profile\n0 2 * * * echo b\n"
            "SHELL=/bin/sh\n0 3 * * * echo c\n")
    result = convert_crontab(text, **host({"path": "/tmp/c", "user": "u"}))
    # The job file's shell: field is added by the per-job-controls work (issue 13); until
    # it is merged, `cronrd validate` rejects it, so this checks the YAML produced.
    jobs = yaml.safe_load(result.yaml_text)["jobs"]
    assert [j.get("shell") for j in jobs] == [None, "/bin/bash", None]
    assert [j.get("env") for j in jobs] == [None, {"BASH_ENV": "/etc/profile"},
                                            {"BASH_ENV": "/etc/profile"}]
    assert result.problems == [] and result.warnings == []


def test_bash_syntax_under_sh_is_a_warning_with_its_column():
    text = ("0 1 * * * grep x <<< \"$y\"\n"
            "  0 2 * * * [[ -f /x ]] && cat $(</x) &>/dev/null\n"
            "0 3 * * * echo '<<< [[ {a,b}' \"{a,b}\" done # [[ \n"
            "SHELL=/bin/bash\n"
            "0 4 * * * grep x <<< y\n")
    result = imported(text, path="/tmp/c", user="u")
    assert [str(w) for w in result.warnings] == [
        "/tmp/c:1:18: uses bash syntax (<<<) but runs under /bin/sh; add SHELL=/bin/bash to the "
        "crontab or rewrite the command",
        "/tmp/c:2:13: uses bash syntax ([[, $(<, &>) but runs under /bin/sh; add SHELL=/bin/bash "
        "to the crontab or rewrite the command",
    ]  # quoted and commented text is not syntax; under bash it is fine
    assert result.problems == [] and len(result.jobs) == 4


def test_bash_syntax_detection():
    def found(cmd):
        return [w for _, w in bash_syntax(cmd)]

    assert found("cp /etc/{passwd,group} /backup") == ["{a,b} brace expansion"]
    assert found("for i in {1..5}; do echo $i; done") == ["{a,b} brace expansion"]
    assert found("function f { :; }; f") == ["function"]
    assert found("a=(1 2); echo ${a[0]}") == ["=( array"]
    assert found("source /etc/profile && x") == ["source"]
    assert found("diff <(ls a) <(ls b)") == ["<( process substitution"]
    assert found("((n++)); echo ${s:1:2} ${s/a/b} $'\\t'") == [
        "(( arithmetic", "${var:offset}", "${var/pattern/}", "$'...'"]
    assert found('echo "$(<file)"') == ["$(<"]
    # POSIX sh that looks similar
    for cmd in ["test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }",
                "find /tmp -name x -exec rm {} \\;", "echo $((1+2)) ${x:-def} ${x#a} $(date)",
                "x >/dev/null 2>&1", ". /etc/profile; a && b || c", "echo function source",
                "awk '{print $1,$2}' f", "[ -f /x ] && echo '[[' \\{a,b\\}", "cmd # {a,b} <<<",
                "f() { :; }", "cat <<EOF"]:
        assert found(cmd) == [], cmd


def test_a_crontab_as_watches_with_each_lines_change():
    """Issue 35: `import-crontab --watch` makes a watch per line and says
    how each line changes to ping it (the first step of a migration)."""
    from cronrd.crontab_import import watches_from
    from cronrd.jobspec import parse_job_text
    text = ("MAILTO=ops@example.com\n"
            "30 2 * * * root /usr/local/bin/backup --full\n"
            "*/15 * * * * www-data /usr/bin/php /var/www/cron.php\n")
    res = convert_crontab(text, path="/etc/cron.d/legacy", system=True)
    out = watches_from(res, text, "/etc/cron.d/legacy", "30m")
    assert "  #   30 2 * * * root /usr/local/bin/backup --full && cronrd ping backup-full" in out
    assert "  #   */15 * * * * www-data /usr/bin/php /var/www/cron.php && cronrd ping cron" in out
    parsed = parse_job_text(out, "/etc/cronrd.d/legacy.yaml")
    assert parsed.problems == ()
    assert [(w.name, w.schedule, w.watch.grace) for w in parsed.jobs] == [
        ("backup-full", "30 2 * * *", 1800.0), ("cron", "*/15 * * * *", 1800.0)]
    remote = watches_from(res, text, "/etc/cron.d/legacy", "1h", url="https://cronrd:8177")
    assert "&& cronrd ping --url https://cronrd:8177 cron" in remote
    assert "CRONRD_PING_TOKEN" in remote

"""Job names of imported crontab lines: from the command, stable across edits."""

from __future__ import annotations

import hashlib

import pytest

from cronrd.crontab_import import convert_crontab, job_name_base
from cronrd.jobspec import NAME_RE, parse_job_text


@pytest.mark.parametrize("command, name", [
    ("/usr/local/bin/backup.sh", "backup"),
    ("cd / && run-parts --report /etc/cron.hourly", "run-parts-cron-hourly"),
    ("test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }",
     "run-parts-cron-daily"),
    ("[ -x /usr/lib/php/sessionclean ] && if [ ! -d /run/systemd/system ]; then "
     "/usr/lib/php/sessionclean; fi", "sessionclean"),
    ("php /var/www/artisan schedule:run >> /dev/null 2>&1", "artisan-schedule-run"),
    ("/usr/bin/php8.2 -d memory_limit=-1 /srv/shop/bin/console cache:clear", "console-cache-clear"),
    ("python3 /srv/app/manage.py clearsessions", "manage-clearsessions"),
    ("python3 -m x", "x"),
    ("FOO=1 BAR=2 /usr/bin/python3.11 -m x", "x"),
    ("nice -n 10 ionice -c3 flock -n /run/lock/b.lock /usr/local/bin/backup.sh --full",
     "backup-full"),
    ("timeout 1h /usr/bin/rsync -a --delete /srv/data/ backup:/srv/data/", "rsync-data"),
    ("sudo -u www-data /usr/bin/wp cron event run --due-now", "wp-cron"),
    ("su - postgres -c 'pg_dump -Fc mydb > /var/backups/mydb.dump'", "pg-dump-mydb"),
    ("/bin/bash -c 'cd /srv && ./deploy.sh'", "deploy"),
    ("bash /opt/jobs/nightly.sh", "nightly"),
    ("curl -fsS -o /dev/null https://example.com/cron.php?key=1", "curl"),
    ("wget -q -O - https://example.com/cron", "wget-example-com-cron"),
    ("/usr/sbin/logrotate /etc/logrotate.conf", "logrotate"),
    ("/usr/local/bin/backup.sh --date $(date +%F)", "backup-date"),
    ("certbot renew --quiet", "certbot-renew"),
    ("rm -f /tmp/alice-*.lock", "rm"),
    ("echo hi > /tmp/x 2>&1", "echo-hi"),
    ("[ -x /bin/x ] && /bin/x", "x"),
    ("cd /tmp", "cd-tmp"),
    ("'/opt/my tool/Run'", "run"),
    ("__init__.py", "init"),
    ("'unbalanced", "unbalanced"),
    ("$HOME/bin/x", "x"),
    ("%%%", "job"),
    ("/very/" + "long" * 40 + ".sh", "long" * 10),
])
def test_name_is_the_program_and_a_telling_argument(command, name):
    assert job_name_base(command) == name


def names(text: str, **kw) -> list[str]:
    result = convert_crontab(text, path="/tmp/c", user="u", system=False, **kw)
    parsed = parse_job_text(result.yaml_text, "x.yaml")
    assert parsed.problems == ()
    assert [j.name for j in parsed.jobs] == [j["name"] for j in result.jobs]
    assert all(NAME_RE.fullmatch(j["name"]) for j in result.jobs)
    return [j["name"] for j in result.jobs]


CRONTAB = """\
PATH=/usr/bin:/bin
0 1 * * * /usr/local/bin/backup.sh
*/5 * * * * php /var/www/a/artisan schedule:run
*/5 * * * * php /var/www/b/artisan schedule:run
0 3 * * * certbot renew --quiet
"""


def short(schedule: str, user: str, command: str) -> str:
    return hashlib.sha256(f"{schedule}\0{user}\0{command}".encode()).hexdigest()[:6]


def test_names_carry_no_line_numbers_and_ties_get_a_hash_of_the_job():
    a = short("*/5 * * * *", "u", "php /var/www/a/artisan schedule:run")
    b = short("*/5 * * * *", "u", "php /var/www/b/artisan schedule:run")
    assert a != b
    assert names(CRONTAB) == ["backup", f"artisan-schedule-run-{a}", f"artisan-schedule-run-{b}",
                              "certbot-renew"]


def test_same_input_same_names_and_unrelated_edits_rename_nothing():
    before = names(CRONTAB)
    assert names(CRONTAB) == before
    edited = ("# a comment\nMAILTO=x@example.com\nX=1\n"  # lines above shift every line number
              + CRONTAB.replace("0 1 * * * /usr/local/bin/backup.sh",
                                "30 2 * * * /usr/local/bin/backup.sh\n@daily /usr/bin/sync-now")
              .replace("certbot renew --quiet", "certbot renew --quiet --no-random-sleep-on-renew"))
    after = names(edited)
    assert after == before[:1] + ["sync-now"] + before[1:]
    # reordering lines does not rename either
    lines = CRONTAB.splitlines(keepends=True)
    assert names(lines[0] + "".join(reversed(lines[1:]))) == list(reversed(before))


def test_the_very_same_line_twice_is_numbered():
    line = "0 * * * * /bin/true\n"
    h = short("0 * * * *", "u", "/bin/true")
    assert names(line * 3) == [f"true-{h}", f"true-{h}-2", f"true-{h}-3"]


def test_long_names_stay_valid():
    text = "".join(f"0 {h} * * * /opt/{'x' * 120}{h}.sh\n" for h in range(2))
    got = names(text)
    assert len(set(got)) == 2 and all(len(n) <= 100 for n in got)


def test_shifting_the_lines_changes_no_job():
    def jobs(text):
        return convert_crontab(text, path="/tmp/c", user="u", system=False).jobs

    assert jobs("# new comment\n\n" + CRONTAB) == jobs(CRONTAB)

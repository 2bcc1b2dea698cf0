"""`cronrd import-crontab`: stdin, the format note, exit codes, and a round trip
through `cronrd validate`."""

from __future__ import annotations

import os

import yaml
from click.testing import CliRunner

from cronrd.cli import main

# Debian's /etc/crontab, as kept in a backup copy (root exists on every host).
DEBIAN = """\
# /etc/crontab: system-wide crontab
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin
MAILTO=ops@example.com

# Example of job definition:
# .---------------- minute (0 - 59)
# *  *  *  *  * user-name command to be executed
17 *	* * *	root    cd / && run-parts --report /etc/cron.hourly
25 6	* * *	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
47 6	* * 7	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.weekly; }
52 6	1 * *	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.monthly; }
#30 3	* * *	root	/usr/local/sbin/old-cleanup --all
"""


def run(*argv: str, input: str | None = None):
    return CliRunner().invoke(main, ["import-crontab", *argv], input=input,
                              catch_exceptions=False)


def test_a_copied_system_crontab_is_read_as_one_and_says_so(tmp_path):
    bak = tmp_path / "crontab.bak"
    bak.write_text(DEBIAN)
    res = run(str(bak))
    assert res.exit_code == 0, res.stderr  # MAILTO is a warning, not an error
    jobs = yaml.safe_load(res.stdout)["jobs"]
    assert [(j["name"], j["user"]) for j in jobs] == [
        ("run-parts-cron-hourly", "root"), ("run-parts-cron-daily", "root"),
        ("run-parts-cron-weekly", "root"), ("run-parts-cron-monthly", "root")]
    assert jobs[0]["command"] == "cd / && run-parts --report /etc/cron.hourly"
    err = res.stderr.splitlines()
    assert err[0] == (f"{bak}: read as a system crontab (each job line has a user column: "
                      "root); pass --user if it is not")
    assert err[1].startswith(f"{bak}:4:1: warning: MAILTO=ops@example.com becomes notify: "
                             "mailto-ops-example.com (on failed, launch_failed)")
    assert err[-1] == "4 job(s) converted, 0 line(s) not converted, 1 warning(s)"
    assert ("# MAILTO=ops@example.com: the jobs below notify mailto-ops-example.com (define "
            "it under notifiers: in the daemon config)\n# line 9\n- name: "
            "run-parts-cron-hourly") in res.stdout
    assert jobs[0]["notify"] == [{"to": "mailto-ops-example.com",
                                  "on": ["failed", "launch_failed"]}]

    forced = run("--user", "--owner", "alice", str(bak))
    assert forced.exit_code == 0
    assert yaml.safe_load(forced.stdout)["jobs"][0]["command"].split()[:2] == ["root", "cd"]
    assert "read as" not in forced.stderr  # forced: nothing decided


def test_dash_reads_stdin():
    res = run("-", "--include-commented", input=DEBIAN)
    assert res.exit_code == 0, res.stderr
    jobs = yaml.safe_load(res.stdout)["jobs"]
    assert jobs[-1]["name"] == "old-cleanup-all" and jobs[-1]["enabled"] is False
    assert jobs[0]["description"] == "imported from <stdin>"
    assert "# line 9\n- name: run-parts-cron-hourly" in res.stdout
    assert res.stderr.startswith("<stdin>: read as a system crontab")


def test_exit_1_names_each_line_not_converted(tmp_path):
    tab = tmp_path / "tab"
    tab.write_text("0 1 * * * /bin/a\n61 * * * * /bin/b\n0 2 * * * echo 50%\n"
                   "0 3 * * * grep x <<< y\n")
    res = run(str(tab), "--owner", "alice", "-o", str(tmp_path / "out.yaml"))
    assert res.exit_code == 1
    assert res.stdout == ""
    assert f"{tab}:2:1: invalid schedule '61 * * * *'" in res.stderr
    assert f"{tab}:3:1: the command contains %" in res.stderr
    assert f"{tab}:4:18: warning: uses bash syntax (<<<) but runs under /bin/sh" in res.stderr
    assert res.stderr.splitlines()[-1] == ("2 job(s) converted, 2 line(s) not converted, "
                                           "1 warning(s)")
    jobs = yaml.safe_load((tmp_path / "out.yaml").read_text())["jobs"]
    assert [(j["name"], j["user"]) for j in jobs] == [("a", "alice"), ("grep-x", "alice")]


def test_usage_errors_exit_2(tmp_path):
    tab = tmp_path / "tab"
    tab.write_text("0 1 * * * root /bin/a\n")
    res = run("--system", "--owner", "bob", str(tab))
    assert res.exit_code == 2 and "--owner is for a user crontab" in res.stderr
    res = run("--owner", "bob", str(tab))  # decided: system; the hint's --user works
    assert res.exit_code == 2
    assert res.stderr == (f"cronrd: {tab} is read as a system crontab (each job line has a "
                          "user column: root), which names the user on each line, so --owner "
                          "does not apply: drop --owner, or pass --user to read it as bob's "
                          "crontab\n")
    assert run("--owner", "bob", "--user", str(tab)).exit_code == 0
    assert run(str(tmp_path / "missing")).exit_code == 2
    assert run(str(tab), "--no-such-option").exit_code == 2


def test_an_output_that_cannot_be_written_is_an_error(tmp_path):
    res = run("-", "--owner", "alice", "-o", str(tmp_path / "no" / "x.yaml"),
              input="0 1 * * * /bin/a\n")
    assert res.exit_code == 1
    assert res.stderr.splitlines()[-1] == (
        f"cronrd: {tmp_path}/no/x.yaml: cannot write the job file (No such file or directory); "
        "check that its directory exists and is writable, or leave out -o to print it")


def validate(d) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["validate", str(d)], catch_exceptions=False)
    return res.exit_code, res.stdout + res.stderr


def write_0644(path, text):
    path.write_text(text)
    os.chmod(path, 0o644)


def test_round_trip_through_validate(tmp_path):
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    tab = tmp_path / "crontab.bak"
    tab.write_text(DEBIAN + "*/5 * * * * root printf '\\%s\\n' x >/dev/null 2>&1\n"
                   "CRON_TZ=Europe/Berlin\nRANDOM_DELAY=5\n@daily nobody /bin/true\n")
    res = run(str(tab), "--include-commented", "-o", str(jobs_dir / "crontab.yaml"))
    assert res.exit_code == 0, res.stderr
    os.chmod(jobs_dir / "crontab.yaml", 0o644)
    code, out = validate(jobs_dir)
    assert code == 0, out
    assert "7 job(s) valid" in out


def test_round_trip_with_shell(tmp_path):
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    res = run("-", "--owner", "alice", input="SHELL=/bin/bash\n0 1 * * * grep x <<< y\n")
    assert res.exit_code == 0 and "warning:" not in res.stderr  # bash runs it: no warning
    assert yaml.safe_load(res.stdout)["jobs"][0]["shell"] == "/bin/bash"
    write_0644(jobs_dir / "c.yaml", res.stdout)
    code, out = validate(jobs_dir)
    assert code == 0, out

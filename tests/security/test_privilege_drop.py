"""Part 4 of issue 9: a job's environment and working_dir are applied only
after the switch to its user; import-crontab drops loader variables."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

import pytest

from cronrd.crontab_import import convert_crontab

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")

PRELOAD_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void report(void) {
    FILE *f = fopen(OUT, "a");
    if (f) { fprintf(f, "%d %d\n", (int)getuid(), (int)geteuid()); fclose(f); }
}
"""


def shared_dirs(node):
    """node.base is 0700 (mkdtemp): let nobody reach out/, which anyone may write."""
    os.chmod(node.base, 0o755)
    os.chmod(node.out, 0o1777)


@pytest.fixture
def preload_lib(node):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the LD_PRELOAD library")
    shared_dirs(node)
    src = node.base / "report.c"
    src.write_text(PRELOAD_C)
    lib = node.base / "libreport.so"
    out = node.out / "uids"
    res = subprocess.run([cc, "-shared", "-fPIC", f'-DOUT="{out}"', "-o", str(lib), str(src)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cc could not build a shared library: {res.stderr[-500:]}")
    os.chmod(lib, 0o755)
    return lib, out


@pytest.mark.integration
@needs_root
def test_ld_preload_of_a_user_job_never_loads_as_root(node, preload_lib):
    lib, out = preload_lib
    nobody = pwd.getpwnam("nobody")
    node.write_job("preload", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                               "env": {"LD_PRELOAD": str(lib), "ODD": "a'b $HOME \"c\"\nd"},
                               "command": f'printf "%s" "$ODD" > {node.out}/odd'})
    node.start()
    res = node.cli("run-now", "preload", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [tuple(map(int, ln.split())) for ln in out.read_text().splitlines()]
    # The library was loaded (so the test can fail), and only ever as nobody.
    assert lines, "the LD_PRELOAD library never ran"
    assert (0, 0) not in lines and all(0 not in ids for ids in lines), lines
    assert (nobody.pw_uid, nobody.pw_uid) in lines
    # The job's environment still reaches its command, byte for byte.
    assert (node.out / "odd").read_text() == "a'b $HOME \"c\"\nd"


@pytest.mark.integration
@needs_root
def test_working_dir_is_entered_as_the_jobs_user(node):
    shared_dirs(node)
    secret_dir = node.base / "root-only"
    secret_dir.mkdir(mode=0o700)
    node.write_job("peek", {"schedule": "@yearly", "user": "nobody",
                            "working_dir": str(secret_dir),
                            "command": f"pwd > {node.out}/pwd; ls > {node.out}/ls"})
    node.start()
    res = node.cli("run-now", "peek", "--wait")
    assert res.returncode != 0
    [run] = node.runs("peek")
    assert run["state"] == "failed" and run["started_at"] is None, run
    reason = run["reason"]
    assert str(secret_dir) in reason and "nobody" in reason and \
        "permission denied" in reason.lower(), reason
    assert not (node.out / "pwd").exists() and not (node.out / "ls").exists()
    # The log says the same thing.
    logs = node.cli("logs", "peek")
    assert "permission denied" in logs.stdout.lower(), logs.stdout + logs.stderr


@pytest.mark.integration
@needs_root
def test_user_job_with_an_accessible_working_dir_starts_there(node):
    shared_dirs(node)
    node.write_job("here", {"schedule": "@yearly", "user": "nobody",
                            "working_dir": str(node.out),
                            "command": "pwd > pwd-seen; env > env-seen"})
    node.start()
    res = node.cli("run-now", "here", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (node.out / "pwd-seen").read_text().strip() == str(node.out)
    env = dict(ln.split("=", 1) for ln in (node.out / "env-seen").read_text().splitlines()
               if "=" in ln)
    assert env["USER"] == "nobody" and env["CRONRD_JOB"] == "here"
    assert "OLDPWD" not in env


# -- import-crontab ------------------------------------------------------------------
LOADER_CRONTAB = """\
PATH=/usr/bin:/bin
LD_PRELOAD=/home/eve/evil.so
LD_LIBRARY_PATH=/home/eve/lib
LD_AUDIT=/home/eve/audit.so
LD_BIND_NOW=1
GREETING=hello
* * * * * echo $GREETING
"""


def test_import_crontab_drops_loader_variables_with_a_warning():
    res = convert_crontab(LOADER_CRONTAB, path="/var/spool/cron/crontabs/eve")
    [job] = res.jobs
    assert job["user"] == "eve"
    assert job["env"] == {"PATH": "/usr/bin:/bin", "GREETING": "hello"}
    messages = {p.line: p.message for p in res.problems}
    for line, name in ((2, "LD_PRELOAD"), (3, "LD_LIBRARY_PATH"), (4, "LD_AUDIT"),
                       (5, "LD_BIND_NOW")):
        msg = messages[line]
        assert name in msg and "dropped" in msg and "dynamic loader" in msg, msg
    body = res.yaml_text[res.yaml_text.index("jobs:"):]
    assert "LD_" not in body and "evil.so" not in body


def test_import_crontab_cli_warns_about_loader_variables(tmp_path):
    import sys
    from harness import REPO
    tab = tmp_path / "eve"
    tab.write_text(LOADER_CRONTAB)
    res = subprocess.run([sys.executable, "-m", "cronrd", "import-crontab", str(tab),
                          "--owner", "eve"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 1  # lines need attention
    assert "LD_PRELOAD" in res.stderr and "dropped" in res.stderr, res.stderr
    assert "evil.so" not in res.stdout[res.stdout.index("jobs:"):]


@needs_root
def test_a_user_jobs_stdout_and_stderr_are_kept_apart(node):
    """The switching shell reads the job's environment from its stdout and
    finds the stdout pipe as descriptor 3 (launch.DROP_SCRIPT): the job's
    own stdout and stderr still land in their streams."""
    node.write_job("apart", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                             "command": "echo out-$USER; echo err >&2; ls /proc/self/fd"})
    node.start()
    res = node.cli("run-now", "apart", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    out = node.cli("logs", "apart", "--stdout").stdout.split()
    assert out[0] == "out-nobody" and node.cli("logs", "apart", "--stderr").stdout == "err\n"
    assert sorted(out[1:]) == ["0", "1", "2", "3"]  # ls's own directory fd is 3


# -- process controls (issue 13, point 9) ------------------------------------------------
@pytest.mark.integration
@needs_root
def test_env_file_is_read_as_the_jobs_user(node):
    """A job cannot read through env_file what its user may not read."""
    shared_dirs(node)
    secret = node.base / "root-only.env"
    secret.write_text("TOKEN=root-secret\n")
    os.chmod(secret, 0o600)
    mine = node.out / "nobody.env"
    mine.write_text("GREETING='hello nobody'\n")
    os.chmod(mine, 0o644)
    node.write_job("steal", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                             "env_file": str(secret),
                             "command": f"echo $TOKEN > {node.out}/stolen"})
    node.write_job("own", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                           "env_file": str(mine),
                           "command": f'echo "$GREETING $(id -un)" > {node.out}/own'})
    node.start()
    node.cli("run-now", "steal", "--wait")
    [run] = node.runs("steal")
    assert run["state"] == "failed" and run["started_at"] is None, run
    assert run["reason"] == (f"run not started: cannot read env_file {secret}: user nobody "
                             "may not read it (permission denied)"), run
    assert not (node.out / "stolen").exists()
    logs = node.cli("logs", "steal").stdout
    assert "root-secret" not in logs and "permission denied" in logs, logs
    res = node.cli("run-now", "own", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (node.out / "own").read_text() == "hello nobody nobody\n"


@pytest.mark.integration
@needs_root
def test_controls_of_a_user_job_need_root_and_get_it(node):
    """A negative nice and the realtime I/O class are set before the switch
    (as systemd sets them); the job itself runs as its user."""
    shared_dirs(node)
    node.write_job("eager", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                             "nice": -5, "ioclass": "realtime", "ioprio": 3, "umask": "0077",
                             "command": f"{{ id -un; cut -d' ' -f19 /proc/$$/stat; umask; "
                                        f"ionice -p $$; }} > {node.out}/eager"})
    node.start()
    res = node.cli("run-now", "eager", "--wait")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (node.out / "eager").read_text().splitlines() == [
        "nobody", "-5", "0077", "realtime: prio 3"]


@pytest.mark.integration
@needs_root
def test_tasks_limit_stops_a_user_jobs_forks(node):
    shared_dirs(node)
    node.write_job("forky", {"schedule": "@yearly", "user": "nobody", "working_dir": "/",
                             "limits": {"tasks": 4},
                             "command": "for i in 1 2 3 4 5 6 7 8; do sleep 2 & done; wait"})
    node.start()
    node.cli("run-now", "forky", "--wait")
    logs = node.cli("logs", "forky").stdout
    assert "fork" in logs.lower(), logs

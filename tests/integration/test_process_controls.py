"""Issue 13, point 9: the process controls of a job (shell, nice, ioclass/
ioprio, umask, env_file, limits), each observed from inside a real job that
a real daemon ran."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

pytestmark = pytest.mark.integration


def run_now(node, name: str) -> dict:
    res = node.cli("run-now", name, "--wait")
    [run] = node.runs(name)
    assert run["state"] in ("succeeded", "failed"), run
    return {**run, "rc": res.returncode, "cli": res.stdout + res.stderr}


def seen(node, name: str) -> list[str]:
    return (node.out / name).read_text().splitlines()


def test_shell_runs_a_string_command_and_is_ignored_by_an_argv(node):
    node.write_job("bashy", {"schedule": "@yearly", "shell": "/bin/bash",
                             "command": f'echo "${{BASH_VERSION:+bash}} $SHELL" > {node.out}/bashy'})
    node.write_job("argv", {"schedule": "@yearly", "shell": "/no/such/shell",
                            "command": ["/bin/sh", "-c", f"echo argv > {node.out}/argv"]})
    node.write_job("nosh", {"schedule": "@yearly", "shell": "/no/such/shell",
                            "command": f"touch {node.out}/nosh"})
    node.start()
    assert run_now(node, "bashy")["state"] == "succeeded"
    assert seen(node, "bashy") == ["bash /bin/bash"]
    assert run_now(node, "argv")["state"] == "succeeded"
    assert seen(node, "argv") == ["argv"]
    run = run_now(node, "nosh")
    assert run["state"] == "failed" and run["started_at"] is None, run
    assert run["reason"].startswith("shell /no/such/shell does not exist or is not executable "
                                    "on node n1; install it there or fix shell: in "), run
    assert not (node.out / "nosh").exists()


def test_nice_umask_ioclass_and_limits_are_what_the_job_sees(node):
    show = [
        "umask",
        "cut -d' ' -f19 /proc/$$/stat",         # nice
        "ulimit -n", "ulimit -Hn",             # open_files
        "ulimit -v",                           # memory (KiB of address space)
        "ulimit -p",                           # tasks
        "ionice -p $$" if shutil.which("ionice") else "echo no-ionice",
        "touch made; stat -c %a made",         # the umask at work
    ]
    node.write_job("ctl", {"schedule": "@yearly", "working_dir": str(node.out),
                           "nice": 11, "umask": "0027", "ioclass": "best-effort", "ioprio": 6,
                           "limits": {"memory": "512MiB", "tasks": 300, "open_files": 200},
                           "command": "{ " + "; ".join(show) + f"; }} > {node.out}/ctl"})
    node.write_job("plain", {"schedule": "@yearly", "working_dir": str(node.out),
                             "command": f"{{ umask; cut -d' ' -f19 /proc/$$/stat; }} "
                                        f"> {node.out}/plain"})
    node.start()
    assert run_now(node, "ctl")["state"] == "succeeded"
    lines = seen(node, "ctl")
    assert lines[:6] == ["0027", "11", "200", "200", str(512 * 1024), "300"], lines
    if lines[6] != "no-ionice":
        assert lines[6] == "best-effort: prio 6", lines
    assert lines[7] == "640", lines
    # Without controls the job gets what cron would give it.
    assert run_now(node, "plain")["state"] == "succeeded"
    mine = os.umask(0o22)
    os.umask(mine)
    assert seen(node, "plain") == [f"{mine:04o}", "0"]  # the daemon's, as cron gives its own


def test_the_memory_limit_stops_an_allocation_beyond_it(node):
    grab = f"{sys.executable} -c 'bytearray(300 << 20)'"
    node.write_job("small", {"schedule": "@yearly", "limits": {"memory": "128MiB"},
                             "command": grab})
    node.write_job("roomy", {"schedule": "@yearly", "command": grab})
    node.start()
    small = run_now(node, "small")
    assert small["state"] == "failed" and small["exit_code"] == 1, small
    logs = node.cli("logs", "small").stdout
    assert "MemoryError" in logs, logs
    assert run_now(node, "roomy")["state"] == "succeeded"


def test_idle_io_class(node):
    if not shutil.which("ionice"):
        pytest.skip("no ionice(1) to read the class back")
    node.write_job("idle", {"schedule": "@yearly", "ioclass": "idle",
                            "command": f"ionice -p $$ > {node.out}/idle"})
    node.start()
    assert run_now(node, "idle")["state"] == "succeeded"
    assert seen(node, "idle") == ["idle"]


ENV_FILE = """\
# a comment, then a blank line

; another comment
  PLAIN=one two
SPACED = "  kept  "
SINGLE='$HOME `not run`'
PATH=/opt/app/bin:/usr/bin:/bin
OVERRIDDEN=from-file
EMPTY=
"""


def test_env_file_sits_between_the_defaults_and_env(node):
    envf = node.base / "app.env"
    envf.write_text(ENV_FILE)
    node.write_job("envy", {
        "schedule": "@yearly", "env_file": str(envf), "env": {"OVERRIDDEN": "from-env"},
        "command": f"env > {node.out}/envy"})
    node.write_job("maybe", {"schedule": "@yearly", "env_file": f"-{node.base}/missing.env",
                             "command": f"echo ran > {node.out}/maybe"})
    node.start()
    assert run_now(node, "envy")["state"] == "succeeded"
    env = dict(ln.split("=", 1) for ln in seen(node, "envy") if "=" in ln)
    assert env["PLAIN"] == "one two" and env["SPACED"] == "  kept  "
    assert env["SINGLE"] == "$HOME `not run`" and env["EMPTY"] == ""
    assert env["PATH"] == "/opt/app/bin:/usr/bin:/bin"      # over the default
    assert env["OVERRIDDEN"] == "from-env"                   # env: wins
    assert env["CRONRD_JOB"] == "envy"
    assert not any(k.startswith("__cr_") for k in env), env
    # "-/path": a missing file is no error.
    assert run_now(node, "maybe")["state"] == "succeeded"
    assert seen(node, "maybe") == ["ran"]


@pytest.mark.parametrize("text, line, problem", [
    ("A=1\nthis is not an assignment\n", 2, "expected NAME=VALUE"),
    ("A=1\n\n9LIVES=cat\n", 3, "invalid variable name '9LIVES'"),
    ('A="unterminated\n', 1, "unterminated quote in the value of A"),
    ("CRONRD_JOB=fake\n", 1, "variable CRONRD_JOB is reserved"),
])
def test_a_bad_env_file_line_fails_the_run_with_file_and_line(node, text, line, problem):
    envf = node.base / "bad.env"
    envf.write_text(text)
    node.write_job("bad", {"schedule": "@yearly", "env_file": str(envf),
                           "command": f"touch {node.out}/bad"})
    node.start()
    run = run_now(node, "bad")
    assert run["state"] == "failed" and run["started_at"] is None, run
    assert run["reason"].startswith(f"run not started: {envf}:{line}: {problem}"), run
    assert not (node.out / "bad").exists()


def test_a_missing_env_file_fails_the_run(node):
    node.write_job("gone", {"schedule": "@yearly", "env_file": f"{node.base}/gone.env",
                            "command": f"touch {node.out}/gone"})
    node.start()
    run = run_now(node, "gone")
    assert run["state"] == "failed" and run["started_at"] is None, run
    assert f"env_file {node.base}/gone.env does not exist" in run["reason"], run
    assert not (node.out / "gone").exists()


def test_validate_warns_about_what_this_host_will_not_do(tmp_path):
    import subprocess
    from harness import REPO
    from cronrd.runtime.runs.cgroups import host_controllers
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "a.yaml").write_text('schedule: "@daily"\ncommand: echo hi\nshell: /no/such/sh\n'
                                 "limits: {cpu: 50%, open_files: 64}\n")
    res = subprocess.run([sys.executable, "-m", "cronrd", "validate", "--no-permissions",
                          str(jobs)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stdout + res.stderr  # warnings are not problems
    lines = res.stdout.splitlines()
    assert lines[0] == (f"{jobs}/a.yaml:1:1: warning: job a: shell /no/such/sh does not exist "
                        "or is not executable on this host; the job's runs fail here until it "
                        "is installed")
    has_cpu = "cpu" in host_controllers()[1]
    assert (f"{jobs}/a.yaml:1:1: warning: job a: limits.cpu: this host has no cgroup v2 cpu "
            "controller to delegate to cronrd; the limit is not enforced" in lines) != has_cpu
    assert res.stderr.strip() == f"1 job(s) valid, {len(lines)} warning(s) about this host"


# -- cgroup v2 (runs only where the host has the controllers, as root) --------------------
@pytest.fixture
def delegated(node):
    """A cgroup of the test's own under the v2 root, with the daemon started
    in its ``daemon`` leaf, as systemd's DelegateSubgroup=daemon starts it."""
    from harness import wait_for
    from cronrd.runtime.runs.cgroups import host_controllers
    mount, offered = host_controllers()
    if os.geteuid() != 0 or mount is None or not {"memory", "pids", "cpu"} <= offered:
        pytest.skip("needs root and cgroup v2 with the memory, pids and cpu controllers")
    with open(os.path.join(mount, "cgroup.subtree_control")) as f:
        if not {"memory", "pids", "cpu"} <= set(f.read().split()):
            pytest.skip("the cgroup v2 root does not hand memory, pids and cpu down")
    base = os.path.join(mount, f"crd-test-{os.getpid()}-{node.base.name}")
    os.makedirs(os.path.join(base, "daemon"))
    node.wrap = ["/bin/sh", "-c", f'echo $$ > {base}/daemon/cgroup.procs && exec "$@"', "sh"]
    yield mount, base
    node.cleanup()

    def gone():
        for sub in ("runs", ""):
            top = os.path.join(base, sub)
            for name in (os.listdir(top) if os.path.isdir(top) else []):
                if os.path.isdir(os.path.join(top, name)):
                    try:
                        os.rmdir(os.path.join(top, name))
                    except OSError:
                        pass
        try:
            os.rmdir(base)
        except OSError:
            return False
        return True
    wait_for(gone, 15, what=f"{base} removed")


def test_limits_hold_in_a_cgroup_of_the_runs_own(node, delegated):
    mount, base = delegated
    show = (f'p=$(sed -n "s/^0:://p" /proc/self/cgroup); echo "$p"; '
            f'cat "{mount}$p/memory.max" "{mount}$p/pids.max" "{mount}$p/cpu.max"; ulimit -v')
    node.write_job("caged", {"schedule": "@yearly", "command": f"{{ {show}; }} > {node.out}/caged",
                             "limits": {"memory": "64MiB", "tasks": 50, "cpu": "25%"}})
    node.write_job("hog", {"schedule": "@yearly", "limits": {"memory": "64MiB"},
                           "command": f"{sys.executable} -c 'b = b\"x\" * (512 << 20)'"})
    node.start()
    assert run_now(node, "caged")["state"] == "succeeded"
    lines = seen(node, "caged")
    assert lines[0].startswith(base[len(mount):] + "/runs/"), lines
    assert lines[1:] == [str(64 << 20), "50", "25000 100000", "unlimited"], lines
    with open("/proc/swaps") as f:
        swap = len(f.read().splitlines()) > 1
    hog = run_now(node, "hog")
    if not swap:  # with swap the kernel may page out instead of killing
        assert hog["state"] == "failed", hog
        assert "the memory limit (limits.memory 64MiB) killed 1 of its process" in \
            hog["reason"], hog
    # The runs' cgroups go with them.
    runs = os.path.join(base, "runs")
    from harness import wait_for
    wait_for(lambda: not [d for d in os.listdir(runs)
                          if os.path.isdir(os.path.join(runs, d))], 10, what="run cgroups gone")

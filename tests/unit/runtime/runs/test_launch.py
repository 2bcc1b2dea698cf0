"""How a run is launched (cronrd/runtime/runs/launch.py): the process
controls handed to the supervisors, the shell of a string command, and the
environment script with env_file. Jobs run for real in
integration/test_process_controls.py and security/test_privilege_drop.py."""

from __future__ import annotations

import resource
import subprocess

import pytest

from cronrd.errors import CronrdError
from cronrd.jobspec import JobSpec, Limits
from cronrd.runtime.runs.launch import (controls, env_file_lines, env_script, host_warnings,
                                        launch)
from cronrd.model.run import Run

SPEC = JobSpec(name="j", schedule="@daily", command="echo hi", source="/etc/cronrd.d/j.yaml")
AS, NPROC, NOFILE = resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE


def spec(**kw) -> JobSpec:
    return JobSpec(**{**SPEC.__dict__, **kw})


def test_no_controls_no_strings():
    assert controls(SPEC) == ()


def test_controls_in_order_with_rlimits_for_limits():
    got = controls(spec(nice=-3, ioclass="realtime", ioprio=1, umask=0o027,
                        limits=Limits(memory=1 << 30, cpu=50.0, tasks=10, open_files=64)))
    assert got == (f"rlimit {AS} {1 << 30} {1 << 30} limits.memory",
                   f"rlimit {NPROC} 10 10 limits.tasks",
                   f"rlimit {NOFILE} 64 64 limits.open_files",
                   "nice -3", f"ioprio {(1 << 13) | 1}", f"umask {0o027}")


@pytest.mark.parametrize("ioclass, ioprio, value", [
    (None, 6, (2 << 13) | 6),          # a level alone: best-effort
    ("best-effort", None, (2 << 13) | 4),
    ("idle", None, 3 << 13),
    ("none", None, 0),
])
def test_io_priority_values(ioclass, ioprio, value):
    assert controls(spec(ioclass=ioclass, ioprio=ioprio)) == (f"ioprio {value}",)


def test_a_cgroup_replaces_the_rlimits_its_controllers_enforce():
    lim = Limits(memory=1 << 30, cpu=50.0, tasks=10, open_files=64)
    assert controls(spec(limits=lim), "/cg/runs/1.a", frozenset({"memory", "pids", "cpu"})) == (
        "cgroup /cg/runs/1.a", f"rlimit {NOFILE} 64 64 limits.open_files")
    # A controller the cgroup lacks: that limit stays an rlimit.
    assert controls(spec(limits=lim), "/cg/runs/1.a", frozenset({"memory"})) == (
        "cgroup /cg/runs/1.a", f"rlimit {NPROC} 10 10 limits.tasks",
        f"rlimit {NOFILE} 64 64 limits.open_files")


RUN = Run(run_id=5, job="j", origin="schedule", kind="scheduled", fire_time=1_700_000_000,
          attempt=1, target="", state="assigned", node="n1", token=3, due_at=1_700_000_000.0,
          created_at=1_699_999_999.0)
IDENT = {"ids": None, "prefix": [], "home": "/", "user": "root", "switch": False}


def go(s: JobSpec, **kw):
    return launch(RUN, s, IDENT, node_id="n1", log_path="/l", job_nofile=1024, **kw)


def test_shell_runs_a_string_command_and_a_missing_one_is_a_run_failure():
    how = go(spec(shell="/bin/bash"))
    assert how.argv[-3:] == ["/bin/bash", "-c", "echo hi"] and how.env["SHELL"] == "/bin/bash"
    assert go(SPEC).argv[-3:] == ["/bin/sh", "-c", "echo hi"]
    assert go(spec(shell="/no/sh", command=("/bin/true",))).argv[-1] == "/bin/true"
    with pytest.raises(CronrdError) as err:
        go(spec(shell="/no/sh"))
    assert str(err.value) == ("shell /no/sh does not exist or is not executable on node n1; "
                              "install it there or fix shell: in /etc/cronrd.d/j.yaml")


def test_open_files_sets_the_soft_limit_the_gate_shell_gives_back():
    assert go(spec(limits=Limits(open_files=64))).argv[4] == "64"
    assert go(SPEC).argv[4] == "1024"


def test_env_file_goes_through_the_preparing_shell_between_defaults_and_env(tmp_path):
    envf = tmp_path / "e"
    envf.write_text("PATH=/opt/bin\nA=file\nB=file\n")
    how = go(spec(env_file=str(envf), env=(("B", "job"),)))
    assert how.switch and how.env == {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    script = how.env_script.decode()
    assert script.index("export HOME=") < script.index("\n_cronrd_env_file ") \
        < script.index("export B=job") < script.index("export CRONRD_JOB=")
    # What a shell makes of it.
    out = subprocess.run(["/bin/sh", "-c", script + 'echo "$PATH|$A|$B"'],
                         capture_output=True, text=True)
    assert out.stdout == "/opt/bin|file|job\n", out.stderr


def test_an_optional_env_file_is_marked():
    assert env_file_lines("-/etc/x y").endswith("_cronrd_env_file '/etc/x y' optional\n")
    assert env_file_lines("/etc/x").endswith("_cronrd_env_file /etc/x ''\n")
    assert env_script({"A": "it's"}) == b"export A='it'\"'\"'s'\n"


def test_host_warnings_name_what_this_host_will_not_do(tmp_path):
    lim = Limits(memory=1 << 30, cpu=50.0, tasks=10, open_files=64)
    everything = frozenset({"memory", "pids", "cpu"})
    assert host_warnings(spec(shell="/bin/sh", env_file=f"-{tmp_path}/x", limits=lim),
                         everything) == []
    got = host_warnings(spec(shell="/no/sh", env_file=f"{tmp_path}/x", limits=lim,
                             user="nobody"), frozenset())
    assert got == [
        "shell /no/sh does not exist or is not executable on this host; the job's runs fail "
        "here until it is installed",
        f"env_file {tmp_path}/x does not exist on this host; the job's runs fail here until "
        f"it does (env_file: -{tmp_path}/x for a file that may be missing)",
        "limits.memory: this host has no cgroup v2 memory controller to delegate to cronrd; "
        "it is enforced as RLIMIT_AS instead (address space: memory reserved but never used "
        "counts too)",
        "limits.tasks: this host has no cgroup v2 pids controller to delegate to cronrd; it is "
        "enforced as RLIMIT_NPROC instead, which counts every process of user nobody, not "
        "only this job's",
        "limits.cpu: this host has no cgroup v2 cpu controller to delegate to cronrd; the "
        "limit is not enforced"]
    assert "does not hold for root" in host_warnings(spec(limits=Limits(tasks=3)),
                                                     frozenset())[0]
    # A list command ignores shell; open_files needs no cgroup.
    assert host_warnings(spec(shell="/no/sh", command=("true",),
                              limits=Limits(open_files=64)), frozenset()) == []


def test_workflow_variables_join_the_run_environment_and_the_env_script(tmp_path):
    wf = {"CRONRD_IDEMPOTENCY_KEY": "j/2023-11-14T22:13:20Z", "CRONRD_PARAM_DAY": "it's"}
    how = go(SPEC, workflow=wf)
    assert how.env["CRONRD_IDEMPOTENCY_KEY"] == "j/2023-11-14T22:13:20Z"
    assert how.env["CRONRD_PARAM_DAY"] == "it's" and how.env["CRONRD_RUN_KEY"] == RUN.key
    assert "CRONRD_PARAM_DAY" not in go(SPEC).env
    # a run prepared by a shell as the job's user gets them through its script
    envf = tmp_path / "e"
    envf.write_text("A=1\n")
    script = go(spec(env_file=str(envf)), workflow=wf).env_script.decode()
    out = subprocess.run(["/bin/sh", "-c", script + 'echo "$CRONRD_PARAM_DAY"'],
                         capture_output=True, text=True)
    assert out.stdout == "it's\n", out.stderr

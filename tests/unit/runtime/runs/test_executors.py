"""Executors (runtime/runs/executors.py): what each makes of a job's
command, and placement only on nodes that offer a job's executor."""

from __future__ import annotations

import pytest

from cronrd.decisions.placement import NodeView, fits
from cronrd.jobspec import ExecutorSpec, JobSpec, Limits, RunOn, parse_job_text
from cronrd.runtime.runs import executors as X
from cronrd.runtime.runs.launch import launch


def container_job(**kw) -> JobSpec:
    spec = dict(name="c", schedule="@daily", command="echo hi",
                executor=ExecutorSpec(type="container", image="localhost/bb:1",
                                      volumes=("/srv/in:/in:ro",)))
    spec.update(kw)
    return JobSpec(**spec)


def test_local_runs_the_command_as_it_is():
    cmd = X.LocalExecutor().command(JobSpec(name="l", schedule="@daily", command="x"),
                                    "7.ab", ["/bin/sh", "-c", "x"], ["A"])
    assert cmd.argv == ["/bin/sh", "-c", "x"] and cmd.on_host


def test_a_container_run_is_named_after_its_run_and_takes_the_jobs_settings_inside():
    spec = container_job(user="app", group="app", working_dir="/work",
                         limits=Limits(memory=256 << 20, cpu=50.0, tasks=64, open_files=512),
                         kill_grace=7.0)
    cmd = X.ContainerExecutor("/usr/bin/podman", "n1").command(
        spec, "42.0a1b", ["/bin/sh", "-c", "echo hi"], ["CRONRD_JOB", "SECRET"])
    a = cmd.argv
    assert a[:2] == ["/usr/bin/podman", "run"] and not cmd.on_host
    assert a[a.index("--name") + 1] == "cronrd-42-0a1b"
    assert "cronrd.key=42.0a1b" in a and "cronrd.node=n1" in a
    assert a[a.index("--network") + 1] == "none" and a[a.index("--pull") + 1] == "never"
    assert a[a.index("--user") + 1] == "app:app" and a[a.index("--workdir") + 1] == "/work"
    assert a[a.index("--memory") + 1] == str(256 << 20) and a[a.index("--cpus") + 1] == "0.5"
    assert a[a.index("--pids-limit") + 1] == "64" and "nofile=512:512" in a
    assert a[a.index("--stop-timeout") + 1] == "7" and "--init" in a and "--rm" in a
    assert a[a.index("--volume") + 1] == "/srv/in:/in:ro"
    assert "--env-file" not in a
    # the environment goes by name: no value on the command line
    envs = [a[i + 1] for i, x in enumerate(a) if x == "--env"]
    assert envs == ["CRONRD_JOB", "SECRET"]
    # the image, then the command, after the end of podman's options
    assert a[-5:] == ["--", "localhost/bb:1", "/bin/sh", "-c", "echo hi"]


def test_the_host_side_of_a_container_job_has_none_of_the_containers_settings(tmp_path):
    """The podman client runs as the daemon's user, with no limits: the
    job's user, directory and limits are the container's. The job's shell
    is the image's, not this host's to check."""
    from cronrd.runtime.runs.launch import Identities
    from cronrd.model.run import Run
    spec = container_job(user="nobody-here", working_dir="/nonexistent/dir",
                         shell="/opt/only/in/image/sh",
                         limits=Limits(memory=64 << 20))
    host = X.host_side(spec)
    assert (host.user, host.working_dir, host.limits) == (None, None, None)
    run = Run(run_id=3, job="c", origin="schedule", kind="scheduled", fire_time=1,
              attempt=1, target="", state="assigned", node="n1", token=5, due_at=1.0,
              created_at=0.5)
    ident = Identities("n1")(host)
    ex = X.ContainerExecutor("/usr/bin/podman", "n1")
    how = launch(run, host, ident, node_id="n1", log_path=str(tmp_path / "l"), job_nofile=1024,
                 wrap=lambda command, names: ex.command(spec, "3.ff", command, names).argv)
    assert "/usr/bin/podman" in how.argv and not how.controls
    assert how.argv[-3:] == ["/opt/only/in/image/sh", "-c", "echo hi"]
    assert "CRONRD_RUN_ID" in how.env and how.env["CRONRD_RUN_ID"] == "3"


def test_a_node_without_the_jobs_executor_is_not_eligible():
    plain = NodeView("a", True, "up", frozenset({"gpu"}))
    podman = NodeView("b", True, "up", frozenset({"gpu", "executor:container"}))
    assert fits(RunOn(), plain) and not fits(RunOn(), plain, "container")
    assert fits(RunOn(), podman, "container")
    assert not fits(RunOn("tags", ("ssd",)), podman, "container")


def test_a_node_offers_container_only_with_podman(monkeypatch):
    monkeypatch.setattr(X, "find_podman", lambda: None)
    ex = X.Executors("n1", podman="")
    assert set(ex.by_name) == {"local"} and ex.tags() == ()
    from cronrd.errors import CronrdError
    with pytest.raises(CronrdError, match="install podman"):
        ex.of(container_job())
    ex = X.Executors("n1", podman="/usr/bin/podman")
    assert ex.of(container_job()).name == "container" and ex.tags() == ("executor:container",)
    assert ex.named("gone").name == "local"


@pytest.mark.parametrize("text, problem", [
    ("executor: container", "executor: container needs its image"),
    ("executor: docker", "executor must be one of local, container"),
    ("executor: {type: container, image: '-v'}", "must be an image reference"),
    ("executor: {type: container, image: a, volumes: [rel:/x]}", "both absolute paths"),
    ("executor: {type: container, image: a, volumes: ['/a/../etc:/x']}", "both absolute"),
    ("executor: {type: container, image: a, network: bridge}", "one of none, host"),
    ("executor: {type: local, image: a}", "executor: local takes no image"),
    ("executor: {type: container, image: a, volumes: ['/:/host']}", "the whole host file system"),
    ("executor: {type: container, image: a, volumes: ['/srv:/x:Z']}", "both absolute"),
    ("executor: {image: a}", "executor needs type:"),
])
def test_a_bad_executor_names_the_line_and_what_to_write(text, problem):
    res = parse_job_text(f"schedule: '@daily'\ncommand: 'true'\n{text}\n", "j.yaml")
    assert not res.jobs
    (p,) = res.problems
    assert p.line == 3 and problem in p.message, p.message


def test_a_container_executor_is_part_of_the_definition_and_local_is_not():
    """An executor changes the digest (a node with another definition is a
    conflict); local, the default, leaves it as older versions compute it."""
    plain = JobSpec(name="j", schedule="@daily", command="x")
    local = JobSpec(name="j", schedule="@daily", command="x",
                    executor=ExecutorSpec(type="local"))
    assert plain.digest() == local.digest()
    c = container_job()
    back = JobSpec.from_dict(c.to_dict())
    assert back.executor == c.executor and back.digest() == c.digest() != plain.digest()


def test_validate_warns_of_a_container_job_on_a_host_without_podman(monkeypatch):
    from cronrd.runtime.runs.launch import host_warnings
    monkeypatch.setattr(X, "find_podman", lambda: None)
    spec = container_job(shell="/only/in/the/image", limits=Limits(cpu=50.0))
    (warning,) = host_warnings(spec, controllers=frozenset())
    assert "needs podman" in warning and "apt-get install podman" in warning
    monkeypatch.setattr(X, "find_podman", lambda: "/usr/bin/podman")
    assert host_warnings(spec, controllers=frozenset()) == []   # the image's and podman's


@pytest.mark.parametrize("extra, problem", [
    ("env: {LD_PRELOAD: /x.so}", "env LD_PRELOAD would reach podman itself"),
    ("env: {CONTAINERS_CONF: /x}", "env CONTAINERS_CONF would reach podman itself"),
    ("env_file: /etc/app.env", "env_file is not read for a container job"),
    ("heartbeat_timeout: 1m", "cannot reach the daemon's socket"),
])
def test_a_container_job_refuses_what_would_reach_podman_or_cannot_work(extra, problem):
    """Review: the job's environment reaches the podman client, which runs as
    the daemon's user; a heartbeat cannot leave the container."""
    res = parse_job_text("schedule: '@daily'\ncommand: 'true'\n"
                         "executor: {type: container, image: a}\n" + extra + "\n", "j.yaml")
    assert not res.jobs and any(problem in p.message for p in res.problems), res.problems
    fine = parse_job_text("schedule: '@daily'\ncommand: 'true'\n" + extra + "\n", "j.yaml")
    assert fine.jobs  # a local job may

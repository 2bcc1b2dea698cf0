"""depends_on across a jobs directory: unknown parents and cycles, with
FILE:LINE:COL; and the dependency keys of one job."""

from __future__ import annotations

import os

from cronrd.jobspec import JobSpec, load_jobs_dir, parse_job_text
from cronrd.jobspec.dependencies import check_dependencies, find_cycles
from cronrd.jobspec.model import Dependency


def _write(d, name, text):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, 0o644)
    return p


def _jobs(tmp_path):
    res = load_jobs_dir(str(tmp_path), check_permissions=False)
    assert res.problems == [], [str(p) for p in res.problems]
    return res.jobs


def test_depends_on_parses_with_positions_and_shorthand():
    text = ('schedule: "@after"\ncommand: x\ndepends_on:\n  - job: extract\n'
            '  - job: fx-rates\n    within: 6h\n  - other\ntrigger_rule: none_failed\n'
            'on_upstream_failure: fail\n')
    res = parse_job_text(text, "/d/load.yaml")
    assert res.problems == ()
    job = res.jobs[0]
    assert [(d.job, d.within, d.line, d.col) for d in job.depends_on] == [
        ("extract", None, 4, 10), ("fx-rates", 21600.0, 5, 10), ("other", None, 7, 5)]
    assert (job.trigger_rule, job.on_upstream_failure, job.wait_for_upstream) == (
        "none_failed", "fail", 0.0)
    # the definition round-trips through the state's JSON
    again = JobSpec.from_dict(job.to_dict())
    assert again.to_dict() == job.to_dict() and again.depends_on == job.depends_on


def test_jobs_without_dependencies_keep_their_digest():
    plain = parse_job_text('schedule: "0 3 * * *"\ncommand: x\n', "/d/j.yaml").jobs[0]
    d = plain.to_dict()
    for key in ("depends_on", "trigger_rule", "on_upstream_failure", "wait_for_upstream"):
        assert key not in d
    # the digest an older version computed for the same job
    import hashlib
    import json
    old = {k: v for k, v in d.items()}
    text = json.dumps(old, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert plain.digest() == hashlib.sha256(text.encode()).hexdigest()
    with_dep = parse_job_text('schedule: "0 3 * * *"\ncommand: x\ndepends_on: [a]\n',
                              "/d/j.yaml").jobs[0]
    assert with_dep.digest() != plain.digest()


def test_after_needs_depends_on_and_no_wait():
    res = parse_job_text('schedule: "@after"\ncommand: x\n', "/d/j.yaml")
    assert [str(p) for p in res.problems] == [
        '/d/j.yaml:1:11: schedule "@after" runs the job after its parents: add '
        'depends_on: [{job: PARENT}]']
    res = parse_job_text('schedule: "@after"\ncommand: x\ndepends_on: [a]\n'
                         'wait_for_upstream: 1h\n', "/d/j.yaml")
    assert len(res.problems) == 1
    assert str(res.problems[0]).startswith("/d/j.yaml:4:1: wait_for_upstream applies to a job "
                                           "with a schedule of its own")


def test_unknown_parent_is_reported_at_its_entry(tmp_path):
    _write(tmp_path, "extract.yaml", 'schedule: "@hourly"\ncommand: x\n')
    p = _write(tmp_path, "load.yaml", 'schedule: "@after"\ncommand: x\ndepends_on:\n'
                                      '  - job: extract\n  - job: extrakt\n')
    problems = check_dependencies(_jobs(tmp_path))
    assert [str(p_) for p_ in problems] == [
        f"{p}:5:10: job 'load' depends on 'extrakt', which no job file defines; did you "
        "mean 'extract'? add a job named 'extrakt' or fix the name (`cronrd jobs` lists the "
        "jobs)"]


def test_cycle_is_named_and_placed(tmp_path):
    a = _write(tmp_path, "a.yaml", 'schedule: "@after"\ncommand: x\ndepends_on: [{job: b}]\n')
    _write(tmp_path, "b.yaml", 'schedule: "@after"\ncommand: x\ndepends_on: [{job: c}]\n')
    _write(tmp_path, "c.yaml", 'schedule: "@hourly"\ncommand: x\ndepends_on: [{job: a}]\n')
    _write(tmp_path, "d.yaml", 'schedule: "@after"\ncommand: x\ndepends_on: [{job: a}]\n')
    problems = check_dependencies(_jobs(tmp_path))
    assert [str(p) for p in problems] == [
        f"{a}:3:20: dependency cycle: a -> b -> c -> a (each job waits for the next); "
        "remove one of these depends_on entries"]


def test_self_dependency_is_a_cycle(tmp_path):
    a = _write(tmp_path, "a.yaml", 'schedule: "@hourly"\ncommand: x\ndepends_on: [a]\n')
    assert [str(p) for p in check_dependencies(_jobs(tmp_path))] == [
        f"{a}:3:14: dependency cycle: a -> a (each job waits for the next); remove one of "
        "these depends_on entries"]


def test_find_cycles_each_once_and_deep_chains():
    assert find_cycles({"a": ["b"], "b": ["a"], "c": ["c"], "d": ["a"]}) == [["a", "b"], ["c"]]
    chain = {f"j{i:05d}": [f"j{i + 1:05d}"] for i in range(20000)}
    assert find_cycles(chain) == []
    chain["j20000"] = ["j00000"]
    (cyc,) = find_cycles(chain)
    assert len(cyc) == 20001 and cyc[0] == "j00000"


def test_a_dag_is_fine(tmp_path):
    for name, deps in (("extract", ""), ("fx", ""), ("transform", "[extract]"),
                       ("load", "[transform, fx]")):
        sched = '"@hourly"' if not deps else '"@after"'
        _write(tmp_path, f"{name}.yaml", f"schedule: {sched}\ncommand: x\n"
                                         + (f"depends_on: {deps}\n" if deps else ""))
    assert check_dependencies(_jobs(tmp_path)) == []
    assert Dependency("a") == Dependency("a", line=3, col=4)  # positions are no part of it


def test_a_definition_from_another_node_passes_revalidation():
    from cronrd.state.forwarded import revalidate_spec
    for text in ('schedule: "@after"\ncommand: x\ndepends_on: [a, {job: b, within: 1h}]\n'
                 'trigger_rule: any_failed\n',
                 'schedule: "@hourly"\ncommand: x\ndepends_on: [a]\nwait_for_upstream: 5m\n'
                 'on_upstream_failure: fail\n'):
        job = parse_job_text(text, "/d/j.yaml").jobs[0]
        assert revalidate_spec(job.to_dict(), "/d/j.yaml").digest() == job.digest()


def test_after_job_cannot_run_on_every_node():
    res = parse_job_text('schedule: "@after"\ncommand: x\ndepends_on: [a]\nrun_on: all\n',
                         "/d/j.yaml")
    assert [str(p) for p in res.problems] == [
        '/d/j.yaml:4:9: run_on: all makes one run per node at each fire time; an "@after" '
        "job runs once per generation of its parents: use run_on: any, node ids or tags"]

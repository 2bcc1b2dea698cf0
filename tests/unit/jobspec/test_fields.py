"""Job fields (jobspec/fields.py): pool, pool_slots, priority and start_deadline, checked against
the daemon config's pools when they are known; triggers (the webhooks that start a job)."""

from __future__ import annotations

from cronrd.jobspec import JobSpec, parse_job_text
from cronrd.jobspec.files import file_digest, load_jobs_dir

BASE = 'schedule: "0 3 * * *"\ncommand: /bin/true\n'


def problems(text: str, pools=None) -> list[str]:
    return [str(p) for p in parse_job_text(BASE + text, "/etc/cronrd.d/j.yaml", pools).problems]


def test_pool_fields_are_parsed_and_kept_in_the_definition():
    [spec] = parse_job_text(BASE + "pool: db\npool_slots: 2\npriority: -5\n"
                            "start_deadline: 5m\n", "j.yaml", {"db": 2}).jobs
    assert (spec.pool, spec.pool_slots, spec.priority, spec.start_deadline) == ("db", 2, -5, 300)
    assert spec.slots_needed == 2
    assert JobSpec.from_dict(spec.to_dict(), spec.source, spec.line) == spec


def test_a_job_without_pool_fields_keeps_its_digest():
    [spec] = parse_job_text(BASE, "j.yaml").jobs
    assert "pool" not in spec.to_dict() and "priority" not in spec.to_dict()
    assert spec.slots_needed == 1


def test_an_unknown_pool_is_an_error_at_its_line_and_column():
    assert problems("pool: dbb\n", {"db": 2, "gpu": 1}) == [
        "/etc/cronrd.d/j.yaml:3:7: unknown pool 'dbb' (the daemon config defines: db, gpu); "
        "did you mean 'db'? add it under pools: in the daemon config or fix the name"]
    assert problems("pool: db\n", {}) == [
        "/etc/cronrd.d/j.yaml:3:7: unknown pool 'db' (the daemon config defines: none); "
        "add it under pools: in the daemon config or fix the name"]
    assert problems("pool: db\n") == []  # the config's pools unknown: not checked


def test_pool_slots_must_fit_the_pool_and_need_a_pool():
    assert problems("pool: db\npool_slots: 3\n", {"db": 2}) == [
        "/etc/cronrd.d/j.yaml:4:13: pool_slots is 3 but pool 'db' has only 2 slots: a run "
        "could never start; lower pool_slots or raise the pool's slots in the daemon config"]
    assert problems("pool_slots: 1\n", {"db": 2}) == [
        "/etc/cronrd.d/j.yaml:3:1: pool_slots applies only to a job with pool: add pool: NAME "
        "or remove it"]


def test_the_file_digest_changes_with_the_pools_so_files_are_read_again():
    data = b"pool: db\n"
    assert file_digest(data) == file_digest(data, {}) == file_digest(data, None)
    assert file_digest(data, {"db": 1}) != file_digest(data, {"db": 2}) != file_digest(data)
    # a file that names no pool keeps its digest whatever the pools
    assert file_digest(b"command: x\n", {"db": 1}) == file_digest(b"command: x\n")


def test_a_jobs_dir_is_checked_against_the_pools(tmp_path):
    (tmp_path / "a.yaml").write_text(BASE + "pool: nope\n")
    res = load_jobs_dir(str(tmp_path), check_permissions=False, pools={"db": 1})
    assert res.jobs == {} and "unknown pool 'nope'" in str(res.problems[0])


# -- triggers: the webhooks that start a job ------------------------------------------
def test_triggers_are_kept_sorted_in_the_definition():
    [spec] = parse_job_text(BASE + "triggers: [deploy, build]\n", "j.yaml").jobs
    assert spec.triggers == ("build", "deploy")
    assert spec.to_dict()["triggers"] == ["build", "deploy"]
    assert JobSpec.from_dict(spec.to_dict(), spec.source, spec.line) == spec


def test_a_job_without_triggers_keeps_its_digest():
    [spec] = parse_job_text(BASE, "j.yaml").jobs
    assert "triggers" not in spec.to_dict() and spec.triggers == ()


def test_bad_triggers_are_errors_at_their_line_and_column():
    assert problems("triggers: deploy\n") == [
        "/etc/cronrd.d/j.yaml:3:11: triggers must be a non-empty list of hook names, e.g. "
        "triggers: [deploy] (the daemon config's hooks:) (got 'deploy')"]
    assert problems("triggers: []\n")[0].startswith("/etc/cronrd.d/j.yaml:3:11: triggers "
                                                    "must be a non-empty list")
    assert problems("triggers: [ok, 'no good']\n")[0].startswith(
        "/etc/cronrd.d/j.yaml:3:16: each entry of triggers must be a hook name")
    assert problems("triggers: [a, a]\n") == [
        "/etc/cronrd.d/j.yaml:3:15: hook 'a' is listed twice in triggers; remove one"]
    assert "did you mean 'triggers'" in problems("trigers: [a]\n")[0]

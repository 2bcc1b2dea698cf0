"""A job as written beside what is in force (cronrd/jobspec/as_written.py),
and the read that may touch only this node's job files (control/reads.py)."""

from __future__ import annotations

from cronrd.jobspec import parse_job_text
from cronrd.jobspec.as_written import effective, written
from cronrd.runtime.control.reads import as_written

ONE = """# nightly backup; ask the DB team before changing
schedule: "0 3 * * *"
command: |
  tar czf /var/backups/etc.tgz /etc
  echo done
timeout: 30m


"""

MANY = """jobs:
  - name: a
    schedule: '@hourly'
    command: 'true'
  # b runs after midnight
  - name: b
    schedule: '@daily'
    command: [echo, hi]
    retries: 2
"""


def test_a_file_of_one_job_is_shown_whole_with_its_comments_and_line_numbers(tmp_path):
    """Issue 33 (3): the definition shown was a normalised dump (`timeout:
    1800.0`, a multi-line command broken up, nulls for every unset key)."""
    path = tmp_path / "backup.yaml"
    path.write_text(ONE)
    line, lines = written(str(path), "backup")
    assert line == 2
    assert lines == [(1, "# nightly backup; ask the DB team before changing"),
                     (2, 'schedule: "0 3 * * *"'), (3, "command: |"),
                     (4, "  tar czf /var/backups/etc.tgz /etc"), (5, "  echo done"),
                     (6, "timeout: 30m")]


def test_a_job_of_a_list_is_its_own_item_only(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(MANY)
    assert written(str(path), "a") == (2, [(2, "  - name: a"), (3, "    schedule: '@hourly'"),
                                           (4, "    command: 'true'")])
    line, lines = written(str(path), "b")
    assert line == 6 and [n for n, _ in lines] == [6, 7, 8, 9]
    assert written(str(path), "gone") is None                 # changed since
    assert written(str(tmp_path / "nosuch.yaml"), "a") is None


def test_in_force_every_key_with_its_value_and_whether_it_is_the_default(tmp_path):
    (spec,) = parse_job_text(ONE, "/etc/cronrd.d/backup.yaml").jobs
    got = {k: (v, d) for k, v, d in effective(spec)}
    assert got["timeout"] == ("30m", False)                   # set, as a duration
    assert got["kill_grace"] == ("10s", True)                 # the default, filled in
    assert got["catchup_window"] == ("1d", True)
    assert got["concurrency"] == ("forbid", True)
    assert got["command"] == ("tar czf /var/backups/etc.tgz /etc\necho done\n", False)
    assert got["retries"][1] and got["retries"][0].startswith("max 0, delay 10s")
    assert got["user"] == ("-", True)


def test_only_a_yaml_file_of_this_nodes_jobs_dir_is_read(tmp_path):
    """The source path comes from the replicated state: a member could name
    /etc/shadow there. Nothing outside this node's jobs_dir is read."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "backup.yaml").write_text(ONE)
    secret = tmp_path / "shadow.yaml"
    secret.write_text(ONE.replace("nightly", "secret"))
    (jobs / "link.yaml").symlink_to(secret)

    def view(path: str, node: str = "a") -> dict:
        return {"spec": {"name": "backup"}, "source": path,
                "sources": [{"node": node, "source": path, "digest": "d"}]}
    mine = as_written(view(str(jobs / "backup.yaml")), "a", str(jobs))
    assert mine["lines"][0] == (1, "# nightly backup; ask the DB team before changing")
    for path in (str(secret), str(jobs / "link.yaml"), str(jobs / ".." / "shadow.yaml")):
        refused = as_written(view(path), "a", str(jobs))
        assert refused["lines"] is None and "cannot be read here" in refused["why"], path
    elsewhere = as_written(view(str(jobs / "backup.yaml"), node="b"), "a", str(jobs))
    assert elsewhere["lines"] is None and elsewhere["node"] == "b"
    assert "`cronrd show backup` there" in elsewhere["why"]

"""jobspec/watch.py: watches in job files."""

from __future__ import annotations

from cronrd.jobspec import parse_job_text
from cronrd.jobspec.model import JobSpec, WatchSpec


def parse(text: str, path: str = "/etc/cronrd.d/legacy.yaml"):
    res = parse_job_text(text, path)
    return res.jobs, [str(p) for p in res.problems]


def test_watches_beside_jobs_and_one_watch_alone():
    jobs, problems = parse(
        "jobs:\n  - {name: j, schedule: '@daily', command: 'true'}\n"
        "watches:\n  - name: legacy-backup\n    schedule: '30 2 * * *'\n"
        "    timezone: Europe/Berlin\n    grace: 30m\n    sla: {finish_within: 1h}\n")
    assert problems == []
    j, w = jobs
    assert j.watch is None and w.watch == WatchSpec(grace=1800.0) and w.command == ""
    assert w.timezone == "Europe/Berlin" and w.sla.finish_within == 3600.0
    again = JobSpec.from_dict(w.to_dict())
    assert again.watch == w.watch and again.digest() == w.digest()
    jobs, problems = parse("watch:\n  schedule: '@hourly'\n")
    assert problems == [] and jobs[0].name == "legacy" and jobs[0].watch.grace == 3600.0


def test_a_watch_says_what_does_not_belong_in_it():
    _, problems = parse("watches:\n  - name: w\n    schedule: '@reboot'\n    command: x\n"
                        "    grac: 1h\n  - name: v\n")
    assert problems == [
        "/etc/cronrd.d/legacy.yaml:3:15: a watch needs a schedule with fire times (a cron "
        "expression, @daily, @every D, @at T): a ping is expected at each",
        "/etc/cronrd.d/legacy.yaml:4:5: unknown key 'command' in a watch (valid keys are: "
        "name, description, schedule, timezone, grace, enabled, notify, sla, calendar, user); a "
        "watch runs nothing: command belongs to a job (jobs:)",
        "/etc/cronrd.d/legacy.yaml:5:5: unknown key 'grac' in a watch (did you mean 'grace'?)",
        "/etc/cronrd.d/legacy.yaml:6:5: a watch needs schedule: (when its pings are "
        "expected), e.g. schedule: \"30 2 * * *\""]
    _, problems = parse("watches: {name: w}\n")
    assert problems == ["/etc/cronrd.d/legacy.yaml:1:10: watches must be a list of watch "
                        "mappings (got a mapping)"]

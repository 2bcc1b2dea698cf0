"""jobspec/calendar_field.py: a job's calendar: key in job files."""

from __future__ import annotations

from cronrd.jobspec import parse_job_text
from cronrd.jobspec.model import JobSpec
from cronrd.schedule.calendars import CalendarRule


def one(body: str):
    text = "jobs:\n  - name: j\n    schedule: '0 18 * * *'\n    command: 'true'\n" + body
    res = parse_job_text(text, "/etc/cronrd.d/j.yaml")
    return res.jobs, [str(p) for p in res.problems]


def test_a_calendar_is_read_and_round_trips():
    jobs, problems = one("    calendar: {skip: [de-holidays, de-holidays], only: weekdays, "
                         "shift: previous}\n")
    assert problems == []
    rule = jobs[0].calendar
    assert rule == CalendarRule(skip=("de-holidays",), only=("weekdays",), shift="previous")
    again = JobSpec.from_dict(jobs[0].to_dict())
    assert again.calendar == rule and again.digest() == jobs[0].digest()
    jobs, _ = one("    calendar: {only: [business-days], business_day: -1}\n")
    assert jobs[0].calendar.business_day == -1
    assert "calendar" not in JobSpec(name="j", schedule="@daily", command="true").to_dict()


def test_bad_calendars_say_what_to_write():
    cases = {
        "    calendar: {shift: next}\n": "calendar needs skip: or only:",
        "    calendar: {skip: [x], shift: sideways}\n": "calendar.shift must be one of none, next,"
                                                      " previous",
        "    calendar: {skip: [x], business_day: 24}\n": "calendar.business_day must be a whole "
                                                       "number 1 to 23",
        "    calendar: {skip: [x], business_day: 1, shift: next}\n": "use one of them",
        "    calendar: {skip: [], only: [x]}\n": "calendar.skip must list calendar names",
        "    calendar: {skip: [x], days: 3}\n": "unknown key 'days' in calendar",
        "    calendar: {skip: [x y]}\n": "each entry of calendar.skip must be a calendar name",
    }
    for body, said in cases.items():
        _, problems = one(body)
        assert len(problems) == 1 and said in problems[0], (body, problems)
        assert problems[0].startswith("/etc/cronrd.d/j.yaml:5:")

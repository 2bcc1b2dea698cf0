"""Integration (issue 35): calendars through a real daemon. A fire time on
a day a job's calendar excludes is recorded skipped naming the calendar
(and `explain` says so); `only:` lets it run on the days listed; a job
naming a calendar the config lacks is a problem of its file; `next` and
`show` give the fire times the calendar allows; an ICS file and a
country's public holidays are read."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from harness import at_cluster_version, cli_ok, wait_for

pytestmark = pytest.mark.integration




ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//cronrd//EN
BEGIN:VEVENT
UID:1@test
DTSTART;VALUE=DATE:{day}
DTEND;VALUE=DATE:{next}
SUMMARY:Closed
END:VEVENT
END:VCALENDAR
"""


def test_fire_times_on_excluded_days_are_recorded_skipped_naming_the_calendar(node_factory,
                                                                            tmp_path):
    today = dt.datetime.now(dt.timezone.utc).date()
    # (a fire time near midnight UTC would cross to another day: wait it out)
    wait_for(lambda: time.time() % 86400 < 86400 - 40, 60, what="not the last 40 s of a day")
    ics = tmp_path / "closed.ics"
    ics.write_text(ICS.format(day=today.strftime("%Y%m%d"),
                              next=(today + dt.timedelta(days=1)).strftime("%Y%m%d")))
    ics.chmod(0o644)
    node = node_factory(calendars={
        "today": {"dates": [today.isoformat()]},
        "closed": {"ics": str(ics)},
        "de-holidays": {"holidays": "DE"},
        "not-today": {"weekdays": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                      "except": ["today"]}})
    node.start()
    at_cluster_version(node)
    node.write_job("skipped", {"schedule": "* * * * * *", "command": "true",
                               "calendar": {"skip": ["closed"]}})
    node.write_job("only", {"schedule": "* * * * * *", "command": "true",
                            "calendar": {"only": ["today"], "skip": ["de-holidays"]}})
    node.write_job("never", {"schedule": "* * * * * *", "command": "true",
                             "calendar": {"only": ["not-today"]}})
    node.write_job("typo", {"schedule": "* * * * * *", "command": "true",
                            "calendar": {"skip": ["de-holiday"]}})
    # an SLA: a day the calendar skips is no miss (the job beside it, which no
    # node may run, misses every fire time: it shows the SLA watch looked)
    node.write_job("promised", {"schedule": "* * * * * *", "command": "true",
                                "sla": {"start_within": "1s"},
                                "calendar": {"skip": ["closed"]}})
    node.write_job("nowhere", {"schedule": "* * * * * *", "command": "true",
                               "run_on": {"tags": ["gpu"]}, "sla": {"start_within": "1s"}})

    runs = node.wait_runs(lambda rs: len(rs) >= 2, job="skipped")
    assert {r["state"] for r in runs} == {"skipped"}
    assert runs[0]["reason"] == f"calendar: {today.isoformat()} " \
        f"({('mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun')[today.weekday()]}) is in " \
        "calendar closed"
    never = node.wait_runs(lambda rs: len(rs) >= 2, job="never")
    assert {r["state"] for r in never} == {"skipped"}
    assert "is not in calendar not-today" in never[0]["reason"]
    holiday = today in __import__("holidays").country_holidays("DE", years=[today.year])
    ran = node.wait_runs(lambda rs: len(rs) >= 2, job="only")
    want = "skipped" if holiday else "succeeded"
    node.wait_runs(lambda rs: any(r["state"] == want for r in rs), job="only")

    out = json.loads(cli_ok(node.cli("explain", "skipped", "--at", runs[0]["fire_time"],
                                 "--json")))
    texts = [s["text"] for s in out["steps"]]
    assert any("is in calendar closed" in t for t in texts), texts
    assert "calendar closed" in out["verdict"]["text"] if isinstance(out["verdict"], dict) \
        else "calendar closed" in out["verdict"]

    problems = wait_for(lambda: [p for p in node.call("status")["problems"]
                                 if "typo" in p], 10, what="the typo's problem")
    assert problems == [f"{node.jobs_dir}/typo.yaml:1:1: job 'typo': calendar names "
                        "'de-holiday', which the daemon config does not define (it defines: "
                        "closed, de-holidays, not-today, today, weekdays, weekends); add it "
                        "under calendars: in the daemon config or fix the name"]
    assert "typo" not in [j["name"] for j in node.call("jobs")]
    assert ran  # (the job was loaded and fired)

    # next and show give the fire times with the calendar's word on each
    nxt = cli_ok(node.cli("next", "skipped", "-n", "2")).splitlines()
    assert len(nxt) == 2 and all("skipped: calendar: " in ln and "calendar closed" in ln
                                 for ln in nxt), nxt
    assert "skipped: calendar: " in cli_ok(node.cli("show", "skipped"))
    # explain --next: would be skipped, by the calendar
    out = json.loads(cli_ok(node.cli("explain", "skipped", "--next", "--json")))
    cal = [st for st in out["steps"] if st["step"] == "calendar"]
    assert cal and cal[0]["text"].startswith("skipped: ") and "calendar closed" in cal[0]["text"]
    assert out["verdict"]["outcome"] == "would_skip", out["verdict"]
    # a backfill over skipped fire times leaves them skipped
    first, last = sorted(r["fire_time"] for r in runs[:2])
    dry = cli_ok(node.cli("backfill", "skipped", "--from", first, "--to", last, "--dry-run"))
    assert dry.count("skip: calendar: ") == 2, dry

    def sla_alerts():
        return json.loads(cli_ok(node.cli("alerts", "--json")))
    wait_for(lambda: any(a["job"] == "nowhere" for a in sla_alerts()), 30,
             what="the SLA watch's alert for the job no node may run")
    assert [a for a in sla_alerts() if a["job"] == "promised"] == []
    assert {r["state"] for r in node.runs("promised")} == {"skipped"}


"""decisions/impact.py: what a change to job files does (`cronrd diff`)."""

from __future__ import annotations

from cronrd.decisions.impact import Context, impact
from cronrd.jobspec.model import Dependency, JobSpec, Sla
from cronrd.schedule import iso_utc, parse_iso

START = parse_iso("2027-03-25T00:00:00Z")   # Berlin's clocks go forward on the 28th
END = START + 7 * 86400


def job(name: str, schedule: str, **kw) -> JobSpec:
    return JobSpec(name=name, schedule=schedule, command="true", **kw)


def notes(report, name: str, kind: str) -> list[str]:
    (j,) = [j for j in report.jobs if j.name == name]
    return [t for k, t in j.notes if k == kind]


def test_fire_times_moved_added_and_removed_by_day():
    old = {"b": job("b", "0 1 * * *", timezone="Europe/Berlin")}
    new = {"b": job("b", "30 2 * * *", timezone="Europe/Berlin")}
    r = impact(old, new, Context(), START, END)
    (b,) = r.jobs
    assert b.change == "changed" and b.keys == ["schedule"]
    assert b.old_fires == b.new_fires == 7
    # each day's 01:00 became 02:30; on the 28th 02:30 does not exist: the jump
    moved = {iso_utc(a): iso_utc(c) for a, c in b.moved}
    assert moved["2027-03-26T00:00:00Z"] == "2027-03-26T01:30:00Z"
    assert moved["2027-03-28T00:00:00Z"] == "2027-03-28T01:00:00Z"
    assert moved["2027-03-29T23:00:00Z"] == "2027-03-30T00:30:00Z"
    assert r.changed


def test_daylight_saving_effects_of_fixed_and_wildcard_schedules():
    spring = impact({}, {"f": job("f", "30 2 * * *", timezone="Europe/Berlin"),
                         "w": job("w", "*/15 2 * * *", timezone="Europe/Berlin")},
                    Context(), START, END)
    assert notes(spring, "f", "dst") == [
        "2027-03-28: the clocks go forward in Europe/Berlin; 02:30 does not exist that day: "
        "it runs at 2027-03-28T01:00:00Z, the jump"]
    assert notes(spring, "w", "dst") == [
        "2027-03-28: the clocks go forward in Europe/Berlin; 4 fire times from 02:00 fall in "
        "the missing hour and do not happen"]
    autumn_start = parse_iso("2027-10-28T00:00:00Z")
    autumn = impact({}, {"f": job("f", "30 2 * * *", timezone="Europe/Berlin"),
                         "w": job("w", "*/30 * * * *", timezone="Europe/Berlin"),
                         "u": job("u", "30 2 * * *")},   # UTC: no change
                    Context(), autumn_start, autumn_start + 7 * 86400)
    assert notes(autumn, "f", "dst") == [
        "2027-10-31: the clocks go back in Europe/Berlin; 02:30 happens twice that day: it "
        "runs once, in the first pass"]
    assert notes(autumn, "w", "dst") == [
        "2027-10-31: the clocks go back in Europe/Berlin; 2 fire times from 02:00 happen "
        "twice (the repeated hour runs again)"]
    assert notes(autumn, "u", "dst") == []


def test_a_pool_over_committed_by_the_change_and_not_before():
    old = {"a": job("a", "0 1 * * *", pool="db", timeout=3600.0),
           "b": job("b", "0 3 * * *", pool="db", timeout=3600.0)}
    new = {"a": job("a", "0 1 * * *", pool="db", timeout=3600.0),
           "b": job("b", "30 1 * * *", pool="db", timeout=3600.0)}
    r = impact(old, new, Context(pools={"db": 1}), START, END)
    assert r.pools == ["pool db: 2 slots wanted at 2027-03-25T01:30:00Z (a, b), it has 1; the "
                       "runs beyond wait for a slot (was at most 1 at once)"]
    # two slots: no conflict; recorded durations beat the timeout
    assert impact(old, new, Context(pools={"db": 2}), START, END).pools == []
    short = Context(pools={"db": 1}, durations={"a": 60.0, "b": 60.0})
    assert impact(old, new, short, START, END).pools == []
    assert impact({}, {"x": job("x", "@daily", pool="gpu")}, Context(pools={}), START,
                  END).pools == ["pool gpu: jobs use it (x) but the daemon config does not "
                                 "define it"]


def test_overlap_deps_and_unmeetable_slas():
    old = {"p": job("p", "*/10 * * * *", timeout=300.0), "parent": job("parent", "@daily")}
    new = {"p": job("p", "*/5 * * * *", timeout=600.0),
           "child": job("child", "@after", depends_on=(Dependency("parent"),)),
           "s": job("s", "0 5 * * *", sla=Sla(finish_within=600.0, finish_by="05:10"))}
    r = impact(old, new, Context(durations={"s": 900.0}), START, END)
    assert notes(r, "p", "overlap") == [
        "runs may overlap: fire times as close as 5m, a run takes 10m (its timeout); "
        "concurrency forbid: a fire time that finds a run still going is skipped"]
    assert notes(r, "child", "depends_on") == [
        "depends on parent, which the new set does not define (the old set had it): its gate "
        "never opens"]
    assert notes(r, "s", "sla") == [
        "sla.finish_within 10m cannot be met: its runs take 15m (recorded median)",
        "sla.finish_by 05:10 cannot be met by 7 of its 7 fire times in the window: its runs "
        "take 15m (recorded median)"]


def test_no_change_is_no_change():
    same = {"a": job("a", "0 1 * * *", pool="db")}
    r = impact(same, dict(same), Context(pools={"db": 1}), START, END)
    assert not r.changed and r.to_dict()["unchanged"] == ["a"] and r.to_dict()["jobs"] == []

"""A job's ``notify``: notifier names or {to, on} routes, FILE:LINE:COL
problems, kept through the canonical definition (None: the cluster default,
[]: nobody)."""

from __future__ import annotations

import pytest

from cronrd.jobspec import JobSpec, parse_job_text
from cronrd.jobspec.notify import DEFAULT_ON, EVENT_KINDS, NotifyRoute
from cronrd.state import events as EV

BASE = 'schedule: "0 3 * * *"\ncommand: /bin/true\n'


def job(text: str) -> JobSpec:
    result = parse_job_text(BASE + text, "/etc/cronrd.d/j.yaml")
    assert result.problems == (), [str(p) for p in result.problems]
    return result.jobs[0]


def problems(text: str) -> list[str]:
    return [str(p) for p in parse_job_text(BASE + text, "/etc/cronrd.d/j.yaml").problems]


def test_the_event_kinds_are_the_outboxs():
    assert EVENT_KINDS == EV.KINDS


def test_names_and_routes_are_read_and_survive_the_canonical_form():
    spec = job("notify:\n  - chat\n  - {to: oncall, on: [failed, sla_miss]}\n")
    assert spec.notify == (NotifyRoute("chat", DEFAULT_ON),
                           NotifyRoute("oncall", ("failed", "sla_miss")))
    again = JobSpec.from_dict(spec.to_dict())
    assert again.notify == spec.notify and again.digest() == spec.digest()
    assert spec.notify[1].wants("sla_finish_by") and not spec.notify[1].wants("recovered")


def test_absent_means_the_default_and_an_empty_list_means_nobody():
    plain, off = job(""), job("notify: []\n")
    assert plain.notify is None and "notify" not in plain.to_dict()
    assert off.notify == () and JobSpec.from_dict(off.to_dict()).notify == ()
    assert plain.digest() != off.digest()


@pytest.mark.parametrize("text, expected", [
    ("notify: 5\n", "3:9: notify must be a list of notifier names or {to: NAME, on: "),
    ("notify: [{on: [failed]}]\n", "3:10: a notify entry needs to: NOTIFIER"),
    ("notify: [{to: a, onn: [failed]}]\n", "3:18: unknown key 'onn' in notify"),
    ("notify: [{to: a, on: []}]\n", "3:22: notify on must be a non-empty list of events"),
    ("notify: ['a b']\n", "3:10: notify: a notifier name is letters, digits"),
    ("notify: [a, {to: a}]\n", "3:13: notifier 'a' is listed twice in notify"),
])
def test_problems_point_at_the_value(text, expected):
    found = problems(text)
    assert len(found) == 1, found
    assert found[0].startswith("/etc/cronrd.d/j.yaml:" + expected), found

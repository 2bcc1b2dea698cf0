"""Catch-up staleness (cronrd/schedule/catchup.py): one source of rules and
reasons for fires never committed (plan_catchup) and fires committed but
never started (stale_reason, used by the executor after a restart)."""

from __future__ import annotations

import pytest

from cronrd.schedule import make_trigger, parse_schedule
from cronrd.schedule.catchup import NONE_REASON, plan_catchup, stale_reason

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
EVERY_SECOND = make_trigger(parse_schedule("* * * * * *"), "UTC")


def planned(policy, window, fire, now):
    """What plan_catchup says about ``fire`` when the cursor is just before it."""
    plan = plan_catchup(EVERY_SECOND, fire - 1, now, policy, window, max_records=10_000)
    if fire in plan.run:
        return None
    return dict(plan.skipped)[fire]


@pytest.mark.parametrize("policy, window", [("none", None), ("none", 3600.0),
                                            ("all", 30.0), ("all", 0.0), ("all", None)])
@pytest.mark.parametrize("late", [0, 1, 2, 5, 29, 30, 31, 3599, 3601])
def test_a_started_late_fire_is_judged_as_the_scheduler_judges_a_missed_one(policy, window,
                                                                            late):
    fire = T0 + 100
    assert stale_reason(policy, window, fire, fire + late) == planned(policy, window, fire,
                                                                       fire + late)


def test_reasons_name_the_policy_and_the_window():
    assert stale_reason("none", None, T0, T0 + 5) == NONE_REASON
    assert stale_reason("latest", 60.0, T0, T0 + 61) == (
        "catchup: missed at 2026-01-01T00:00:00Z, older than catchup_window 1m")
    assert stale_reason("latest", 60.0, T0, T0 + 59) is None
    assert stale_reason("all", None, T0, T0 + 10 ** 6) is None

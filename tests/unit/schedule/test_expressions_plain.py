"""parse_schedule skips croniter for fields of numbers, ranges, steps and
lists (checked whole by our own field checks): every such expression it
accepts, croniter accepts too, and it fires."""

from __future__ import annotations

import datetime as dt
import random

from croniter import croniter

from cronrd.errors import ScheduleError
from cronrd.schedule import expressions as E

RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _item(rng: random.Random, low: int, high: int) -> str:
    kind = rng.randrange(5)
    a = rng.randint(low - 1, high + 1)
    b = rng.randint(low - 1, high + 1)
    step = rng.randint(0, high - low + 2)
    return ["*", str(a), f"{a}-{b}", f"*/{step}", f"{a}-{b}/{step}"][kind]


def test_plain_fields_agree_with_croniter():
    rng = random.Random(12)
    accepted = 0
    for _ in range(3000):
        fields = [",".join(_item(rng, lo, hi) for _ in range(rng.randint(1, 2)))
                  for lo, hi in RANGES]
        expr = " ".join(fields)
        try:
            sched = E.parse_schedule(expr)
        except ScheduleError:
            ours = False
        else:
            ours = True
        try:
            it = E._croniter_for(tuple(sched.fields if ours else fields),
                                 dt.datetime(2000, 1, 1))
            it.get_next(float)
            theirs = True
        except Exception:
            theirs = False
        if ours:
            accepted += 1
            assert theirs, expr  # accepted: croniter builds it and it fires
    assert accepted > 100

"""Fields of numbers, ranges, steps and lists, picked at random, fire exactly
when a brute-force reading of Vixie cron's rules says they should.

The reading below is written from cron(5) and Vixie cron's entry.c/cron.c,
not from cronrd's code: a field is the union of its items, an item
``a-b/s`` is a, a+s, ... up to b (``*`` is the whole range, ``a/s`` runs to
the top, a step larger than the range leaves just the start); day-of-week 7
is Sunday; and if either day field begins with ``*`` a day must match both
day fields, otherwise either.
"""

from __future__ import annotations

import calendar
import datetime as dt
import random

from cronrd.errors import ScheduleError
from cronrd.schedule import make_trigger, parse_schedule

RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def _item(rng: random.Random, low: int, high: int) -> str:
    kind = rng.randrange(6)
    a = rng.randint(low - 1, high + 1)
    b = rng.randint(low - 1, high + 1)
    step = rng.choice([0, 1, 2, 3, 5, 7, 10, 15, 31, 60, 100])
    return ["*", str(a), f"{a}-{b}", f"*/{step}", f"{a}-{b}/{step}", f"{a}/{step}"][kind]


def _set(field: str, low: int, high: int) -> set[int]:
    out: set[int] = set()
    for item in field.split(","):
        rng, _, step = item.partition("/")
        if rng == "*":
            a, b = low, high
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = int(rng)
            b = high if step else a
        out.update(range(a, b + 1, int(step or 1)))
    return out


def _oracle(fields: list[str], after: int, count: int) -> list[int]:
    sec, minute, hour, dom, month, dow = (_set(f, lo, hi) for f, (lo, hi) in zip(fields, RANGES))
    dow = {d % 7 for d in dow}
    both = fields[3].startswith("*") or fields[5].startswith("*")
    times = sorted(h * 3600 + m * 60 + s for h in hour for m in minute for s in sec)
    day = dt.date(1970, 1, 1) + dt.timedelta(days=after // 86400)
    out: list[int] = []
    for _ in range(3 * 366):
        a, b = day.day in dom, (day.weekday() + 1) % 7 in dow
        if day.month in month and ((a and b) if both else (a or b)):
            base = calendar.timegm(day.timetuple())
            out += [base + t for t in times if base + t > after][: count - len(out)]
            if len(out) == count:
                break
        day += dt.timedelta(days=1)
    return out


def test_plain_fields_fire_as_vixie_cron_reads_them():
    rng = random.Random(12)
    compared = 0
    for _ in range(3000):
        fields = [",".join(_item(rng, lo, hi) for _ in range(rng.randint(1, 2))) for lo, hi in RANGES]
        try:
            parse_schedule(" ".join(fields))
        except ScheduleError:
            continue
        after = rng.randrange(946684800, 2208988800)  # 2000 .. 2040
        want = _oracle(fields, after, 4)
        if len(want) < 4:
            continue  # rarer than three years: the calendar tests cover those
        got = list(make_trigger(parse_schedule(" ".join(fields)), "UTC").fires_between(after, want[-1] + 1, 4))
        assert got == want, " ".join(fields)
        compared += 1
    assert compared > 180


def test_out_of_range_and_reversed_items_are_refused_not_read():
    # The generator above makes these too; they must be refused, never read somehow.
    for expr in ("60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "* * 5-2 * *",
                 "-1 * * * *", "*/0 * * * *", "1-5/0 * * * *"):
        try:
            parse_schedule(expr)
        except ScheduleError:
            continue
        raise AssertionError(f"{expr!r} was accepted")

"""The cron forms parse_schedule accepts and refuses (a table).

What the accepted forms mean (their fire times) is tested in test_matching.py;
here: that they are accepted, and that wrong ones are refused with a message
that says what was wrong, where (the column) and what the field does take.
"""

from __future__ import annotations

import pytest

from cronrd.errors import ScheduleError
from cronrd.schedule import parse_schedule

ACCEPTED = [
    "*/100 * * * * *", "*/90 * * * *", "0 */100 * * *", "0 0 */100 * *", "0 0 1 */100 *",
    "0 0 * * */100", "10-20/50 * * * *", "0 0 10-20/50 * *", "5/100 * * * *",
    "1 1 */100,1-7 * MON", "1 1 1-7 * */7",
    "0 0 * * 5L", "0 0 * * 0L", "0 0 * * 7L", "0 0 * * 1,5L", "0 0 * * 5l",
    "0 0 LW * *", "0 0 lw * *", "0 0 LW,15 * *", "0 0 L * *", "0 0 L,1 * *",
    "0 0 * * 5#2", "0 0 * * FRI#2", "0 0 * * 1,3#1", "0 0 15W * *", "0 0 L * 5L",
    "0 0 ? * 5L", "0 0 LW * ?",
    "0 0 * * L5", "0 0 W15 * *",  # croniter's spellings, accepted before: kept
]


@pytest.mark.parametrize("expr", ACCEPTED)
def test_accepted(expr):
    assert parse_schedule(expr).kind == "cron"


@pytest.mark.parametrize(
    "expr, column, fragments",
    [
        # L, W and # outside the day fields
        ("5L * * * *", 0, ["minute field '5L': cannot read '5L'",
                           "L, W and # are only read in the day fields",
                           "5L and 5#2 in day-of-week"]),
        ("0 0 * 5L *", 6, ["month field '5L': cannot read '5L'", "only read in the day fields"]),
        ("0 LW * * *", 2, ["hour field 'LW'", "only read in the day fields"]),
        ("5#2 0 0 * * *", 0, ["second field '5#2': cannot read '5#2'"]),
        # the day-of-month forms in day-of-week, and the other way round
        ("0 0 * * LW", 8, ["day-of-week field 'LW': cannot read 'LW'",
                           "the day-of-week forms are 5L (the last Friday of the month) and 5#2",
                           "L, LW and 15W belong in the day-of-month field"]),
        ("0 0 * * L", 8, ["day-of-week field 'L': cannot read 'L'", "belong in the day-of-month field"]),
        ("0 0 * * 15W", 8, ["day-of-week field '15W'", "belong in the day-of-month field"]),
        ("0 0 5L * *", 4, ["day-of-month field '5L': cannot read '5L'",
                           "the day-of-month forms are L (the last day of the month), LW",
                           "5L and 5#2 belong in the day-of-week field"]),
        ("0 0 1#2 * *", 4, ["day-of-month field '1#2'", "belong in the day-of-week field"]),
        # malformed day forms
        ("0 0 L/2 * *", 4, ["day-of-month field 'L/2': cannot read 'L/2'", "each alone between commas"]),
        ("0 0 LW/2 * *", 4, ["cannot read 'LW/2'"]),
        ("0 0 L-5 * *", 4, ["cannot read 'L-5'"]),
        ("0 0 * * 5L-6", 8, ["day-of-week field '5L-6': cannot read '5L-6'"]),
        ("0 0 * * 5L#1", 8, ["cannot read '5L#1'"]),
        ("0 0 * * 5L/3", 8, ["cannot read '5L/3'"]),
        ("0 0 * * 8L", 8, ["day-of-week field '8L' is not valid", "'8' in '8L' is not a day of the week"]),
        ("0 0 * * 5#0", 8, ["day-of-week field '5#0' is not valid", "1-5"]),
        ("0 0 * * 5#6", 8, ["day-of-week field '5#6' is not valid", "1-5"]),
        ("0 0 * * 5#", 8, ["day-of-week field '5#' is not valid"]),
        ("0 0 * * fun#1", 8, ["'fun' in 'fun#1' is not a day of the week"]),
        ("0 0 0W * *", 4, ["day-of-month field '0W' is not valid", "must be 1-31"]),
        # steps
        ("*/0 * * * *", 0, ["minute field '*/0': step '0' must be a whole number of 1 or more"]),
        ("0 0 1-10/0 * *", 4, ["step '0'"]),
        ("0 0 */ * *", 4, ["step ''"]),
        ("*/\u00b9 * * * *", 0, ["step '\u00b9' must be a whole number"]),  # superscript one: crashed with ValueError
        ("1-5/\u00b2 * * * *", 0, ["step '\u00b2' must be a whole number"]),
        ("*/\u0663 * * * *", 0, ["step '\u0663' must be a whole number"]),  # Arabic-Indic three: not a cron digit
        # never fires: the 1st AND a fourth Monday (the day of month starts with '*')
        ("1 1 */100 * MON#4", 4, ["never fires: no date matches its day and month fields; as in cron, "
                                  "the day-of-month field begins with '*', so a day must match both"]),
        ("0 0 30 2 *", 4, ["never fires: no date matches its day and month fields"]),
    ],
)
def test_refused(expr, column, fragments):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(expr)
    for fragment in fragments:
        assert fragment in err.value.message
    assert err.value.column == column


def test_a_starred_day_of_month_list_makes_an_and_but_a_plain_one_an_or():
    # Both name days 1-7; only the first begins with '*'.  In a month whose
    # 1st is a Monday the first fires once in the week, the second every day of it.
    star = parse_schedule("0 0 */100,1-7 * mon").cron
    plain = parse_schedule("0 0 1-7 * mon").cron
    assert not star.day_or and plain.day_or
    assert star.shape_days(1, 30) == (1,)  # 1st = Monday
    assert plain.shape_days(1, 30) == (1, 2, 3, 4, 5, 6, 7, 8, 15, 22, 29)

"""Schedules, triggers and fire-time math (pure).

Everything here is a function of its arguments: no clocks, no randomness and
no I/O, except :func:`host_timezone`, which reads the host's zone setting.
Times are integer epoch seconds (UTC) throughout the public API.

* :mod:`.durations`   -- ``parse_duration``, ``parse_size``, ``human_duration``
* :mod:`.zones`       -- IANA names, the host's zone, a zone's offset changes
* :mod:`.expressions` -- cron fields, @-words, ``@every``, ``@reboot`` -> ``Schedule``
* :mod:`.matching`    -- ``CronFields``: which wall-clock days and seconds match
* :mod:`.triggers`    -- ``Trigger``: next fire times and counts, the DST rules
* :mod:`.previous`    -- ``prev_before``: the fire time before an instant
* :mod:`.catchup`     -- ``plan_catchup``: what to run and skip after downtime
* :mod:`.delays`      -- ``jitter_for``, ``retry_delay``
* :mod:`.timestamps`  -- ``iso_utc``, ``parse_iso``, ``format_fire``

cron fields are read by :mod:`.expressions` and matched by :mod:`.matching`.
"""

from __future__ import annotations

from .catchup import CatchupPlan, plan_catchup
from .delays import jitter_for, retry_delay
from .durations import human_duration, parse_duration, parse_size
from .expressions import Schedule, parse_schedule
from .previous import prev_before
from .timestamps import format_fire, iso_utc, parse_iso
from .triggers import Trigger, at_time, make_trigger
from .zones import MAX_DST_SHIFT, host_timezone, resolve_timezone


__all__ = [
    "MAX_DST_SHIFT",
    "CatchupPlan",
    "Schedule",
    "Trigger",
    "at_time",
    "format_fire",
    "host_timezone",
    "human_duration",
    "iso_utc",
    "jitter_for",
    "make_trigger",
    "parse_duration",
    "parse_iso",
    "parse_schedule",
    "parse_size",
    "plan_catchup",
    "prev_before",
    "resolve_timezone",
    "retry_delay",
]

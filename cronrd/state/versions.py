"""The cluster version: which rules apply follows at each point of the log.

Every node must reach the same state from the same log, also while a fleet
is upgraded one host at a time (DESIGN.md, "Changing what apply does"). So
what apply does is not the code's to decide alone: the log records the
*cluster version* (``SetClusterVersion``, proposed by the leader once every
member says it can apply it), and apply chooses its behaviour from the
version recorded at that point of the log. A node with new code replaying
entries written before the raise decides what the old code decided there.

The rule for the next change to apply (docs/design.md, "How a change to apply is
made"):

1. Give it the next version in ``VERSIONS`` (and raise ``APPLY_VERSION``).
2. A new command kind sets ``since`` on its class; a new field of a command
   goes in its ``added`` (field -> version) with a default that means "as
   before": it is left out of the encoding while it has that value, so an
   older node still decodes the command.
3. A changed rule reads ``at_least(conn, N)`` and keeps the old rule, as it
   was, for the older versions (a refusal included: the old rule's refusal
   is part of what the older nodes recorded).
4. The proposers need nothing more: ``check_proposable`` refuses a command
   the recorded version does not allow yet, and apply refuses it too.

A database records the version in ``meta`` (``cluster_version``; none
recorded means 1, the rules of cronrd 0.2.0, the first release). From
version 2 on it also says ``schema_version`` 7, which cronrd 0.2.0 refuses
to open ("newer than this cronrd knows"): the only way to make a release
without the gate refuse a state it would misread. Each member writes that
lock when the leader asks it to get ready for the version, before the raise
is proposed (cluster/versions.py), so a member taken back to 0.2.0 after it
said yes cannot skip the raise and go on by the old rules. So above 6,
``schema_version`` is the lock, not the table layout: a layout change is
recognised from the tables themselves (schema.ADDED_COLUMNS), never from
that number.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import apsw

from .. import __version__
from ..errors import Refused, StateError

if TYPE_CHECKING:
    from .commands import Command


@dataclass(frozen=True)
class Version:
    release: str   # the first cronrd release that applies it
    changes: str   # what it changes in apply (operators read it in `cronrd status`)


VERSIONS: dict[int, Version] = {
    1: Version("0.2.0", "the rules of cronrd 0.2.0 (every log before the cluster version)"),
    2: Version("0.3.0", "the cluster version itself; a node-scoped pool's waiting runs are "
                        "released when slots free without a node (they were refused); "
                        "web UI sessions of their own (StartSession, EndSession); an SLA "
                        "alert is resolved when its fire time's run succeeds; a failed "
                        "alert names its event; jobs with executor: container; worker agents; exit-code rules "
                        "(success_exit_codes, retries.retry_on, retries.not_on_exit_codes); "
                        "one-shot runs (schedule @at, run-now --at); calendars (SetCalendars, "
                        "a job's calendar:); watches (Ping, WatchMissed, role ping)"),
}

APPLY_VERSION = max(VERSIONS)   # the newest this code applies
BASE = 1                         # a log that records no version

# The changes of version 2, by name (grep for the name to find the rule).
# 0.3.0 is not released yet, so version 2 may still grow: a change made after
# a release takes the next version. StartSession and EndSession are its
# commands (``since``).
POOL_RELEASE_WITHOUT_NODE = 2
# An open SLA alert of a fire time (start_within, finish_within, finish_by,
# max_runtime) is resolved when that fire time's run succeeds (state/alerts.py).
SLA_RESOLVED_BY_SUCCESS = 2
# A "failed" alert records the id of its run's final-failure event, as the
# SLA alerts do theirs (state/run_events.py).
FAILED_ALERT_EVENT = 2
# A job with a non-local executor (executor: container) is proposed only from
# this version on: a node of 0.2.0 ignores the key it does not know and would
# run the command on its host (runtime/jobfiles/watcher.py holds such jobs back).
EXECUTORS = 2
# Worker agents: the leader registers them (WorkerInfo) and places runs on
# them (runtime/cluster/worker_hub.py); a member of 0.2.0 knows no workers.
WORKERS = 2
# Exit-code rules: success_exit_codes, retries.retry_on and
# retries.not_on_exit_codes decide a run's state and its retry, and the
# run's reason names the rule that decided (decisions/exit_rules.py). A job
# that uses them is loaded only from this version on (jobfiles/watcher.py).
EXIT_RULES = 2
# One-shot runs: schedule "@at TIME" (a 0.2.0 member cannot read it), and
# runs planned for later (`run-now --at`: PlanRun, CancelPlan, the plan_id
# of ManualRun; the planned_runs table, in the digest from its first row).
ONE_SHOTS = 2
# Calendars: SetCalendars (the calendars table, in the digest from its first
# row), and jobs with calendar: (loaded only from this version on).
CALENDARS = 2
# Watches: jobs with watch: (no command; a fire time waits for a ping), the
# Ping and WatchMissed commands, a run moving from waiting to running or
# succeeded (a watch's), and API tokens of role ping.
WATCHES = 2

# Keys of a job definition an older member would ignore, and so run the job
# by other rules: a job using one is loaded only from its version on
# (runtime/jobfiles/watcher.py). (The key as the canonical JSON writes it,
# which only a definition that sets it holds; the version; what it is; what
# an older member would do.)
JOB_KEYS_SINCE = (
    ('"executor":', EXECUTORS, "executor: container",
     "an older member would run the command on its host"),
    ('"success_exit_codes":', EXIT_RULES, "success_exit_codes",
     "an older member would count its exit codes as failures"),
    ('"retry_on":', EXIT_RULES, "retries.retry_on",
     "an older member would retry what it excludes"),
    ('"not_on_exit_codes":', EXIT_RULES, "retries.not_on_exit_codes",
     "an older member would retry those exit codes"),
    ('"schedule":"@at', ONE_SHOTS, "schedule: @at",
     "an older member cannot read the schedule"),
    ('"calendar":', CALENDARS, "calendar",
     "an older member would run the job on the days its calendar excludes"),
    ('"watch":', WATCHES, "a watch",
     "an older member would take it for a job with an empty command"),
)


def job_needs(text: str) -> tuple[int, str, str] | None:
    """(version, key, why) of the newest key a job definition (its
    canonical JSON) uses that the base rules do not know; None: none."""
    found = None
    text = text.lower()   # (the keys are lower case; "@AT" is "@at")
    for marker, version, key, why in JOB_KEYS_SINCE:
        if marker in text and (found is None or version > found[0]):
            found = (version, key, why)
    return found


# ``schema_version`` of a database at each cluster version (machine.migrate):
# a release that cannot apply a version must refuse to open its database.
SCHEMA_LOCK = {1: 6, 2: 7}


# The exit status of a daemon that cannot apply what its state or the log
# holds (EX_CONFIG): the unit does not restart it (RestartPreventExitStatus),
# since only installing a newer cronrd helps.
EXIT_NEWER = 78


def lock_schema(conn: apsw.Connection, version: int) -> None:
    """This node is about to take cluster ``version`` (the leader asked it
    to get ready): from now on the releases before it must refuse this
    database, even if the raise has not reached it yet. Inside or outside
    apply: ``schema_version`` is not replicated state (nor in a digest)."""
    lock = SCHEMA_LOCK.get(version)
    if lock is None:
        return
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version' AND value < ?",
                 (lock, lock))


class NewerLog(StateError):
    """The log holds what only a newer cronrd applies. Not a refusal: the
    node stops applying (it must not skip an entry the others apply)."""


def release_of(version: int) -> str:
    """``0.3.0`` for version 2: the first release that applies it."""
    known = VERSIONS.get(version)
    return known.release if known is not None else f"newer than {__version__}"


def upgrade_hint(version: int) -> str:
    known = VERSIONS.get(version)
    return ("upgrade cronrd on this node to "
            + (f"{known.release} or newer" if known is not None else "a newer release")
            + " (the version the other members run), then start it again")


def recorded(conn: apsw.Connection) -> int:
    """The cluster version recorded in this state (1 when none is)."""
    for (value,) in conn.execute("SELECT value FROM meta WHERE key='cluster_version'"):
        return int(value)
    return BASE


def at_least(conn: apsw.Connection, version: int) -> bool:
    """Do the rules of ``version`` hold at this point of the log?"""
    return recorded(conn) >= version


def readable(meta: dict[str, Any], what: str) -> None:
    """Refuse a state (``what``: "this node's state database", "the snapshot
    from the leader") recorded at a cluster version this code cannot apply,
    naming both versions and what to do."""
    version = int(meta.get("cluster_version") or BASE)
    if version > APPLY_VERSION:
        written = meta.get("written_by")
        raise NewerLog(
            f"{what} is at cluster version {version}"
            + (f" (written by cronrd {written})" if written else "")
            + f"; this cronrd {__version__} applies versions up to {APPLY_VERSION}: "
            f"{upgrade_hint(version)}; running an older cronrd than the cluster's version "
            "is refused, as it would apply the log by rules it does not know")


def added_fields(cmd: Command) -> dict[str, int]:
    return getattr(type(cmd), "added", {})


def needs(cmd: Command) -> int:
    """The cluster version ``cmd`` needs: its kind's, or that of a field it
    uses (one whose value is not its default)."""
    from .commands import at_default
    need = getattr(type(cmd), "since", BASE)
    for f in dataclasses.fields(cmd):
        since = added_fields(cmd).get(f.name)
        if since is not None and not at_default(cmd, f):
            need = max(need, since)
    return need


def check_proposable(cmd: Command, version: int) -> None:
    """Refuse a command the recorded cluster ``version`` does not allow yet
    (the proposers' gate; apply checks the same)."""
    need = needs(cmd)
    if need > version:
        raise Refused(
            f"{cmd.op} needs cluster version {need} (cronrd {release_of(need)}); the cluster "
            f"is at version {version}, because some member runs an older cronrd: upgrade "
            "every member (`cronrd cluster members` shows their versions); the cluster "
            "version rises by itself once they all run it")

"""The typed requests about workflows: backfills, reruns, alerts, the dead
letter, pools, the audit log and notifications (see requests.py).

Only the shape and bounds of a request are checked here; what needs the
state or the clock (the job exists, one open backfill per job, how many fire
times a range holds, who may) stays with the handlers in
``runtime/control/workflows.py``.

``backfill`` is not in ``TYPES``: its socket arguments ``from`` and ``to``
cannot be a dataclass's field names (``from`` is a Python keyword) and the
parser has no mark for a field's name on the wire, so its handler parses the
socket's object with ``parse_backfill`` (the field is ``from_``) and the HTTP
API and the web UI build a ``Backfill`` as the other types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from ..decisions import backfill as BD
from ..errors import UsageError
from .typed import Consistent, Doc, MaxLen, Range, Wire

NOTE = 1_000            # characters of a backfill's, an ack's or a dead letter action's note
MAX_LIST = 100_000      # rows of one backfills, alerts, dead letter or audit answer
MAX_PARALLEL = 1_000    # runs of one backfill at once
MAX_EVENTS = 10_000     # events of one notifications answer (control/notifications.py)
BACKFILL_STATES = ("paused", "running", "cancelled")
DEAD_LETTER_ACTIONS = ("requeue", "discard")

Note = Annotated[str, MaxLen(NOTE, "the note is longer than {n} characters; say it shorter"),
                 Doc("why, kept with the change")]


Limit = Annotated[int, Range(1, MAX_LIST, "limit must be between {lo} and {hi}"),
                  Doc("how many, newest first")]


@dataclass(frozen=True)
class Backfill:
    """Plan (``dry_run``) or start a backfill of a job's fire times from
    ``from`` to ``to`` (``from_`` here: a keyword in Python). At most
    decisions/backfill.py's MAX_FIRES fire times, HARD_MAX_FIRES with
    ``force`` (admins only); one open backfill per job."""
    OP: ClassVar[str] = "backfill"
    job: Annotated[str, Doc("the job")]
    from_: Annotated[int, Wire("from"), Doc("the first fire time to consider (Unix seconds)")]
    to: Annotated[int, Doc("the last fire time to consider (Unix seconds)")]
    reprocess: Annotated[str, Doc("which fire times run again: " + ", ".join(BD.REPROCESS)
                                  + " (those never run, those that failed too, all)")] = \
        "missing"
    order: Annotated[str, Doc("which end first: " + ", ".join(BD.ORDERS))] = "oldest"
    parallel: Annotated[int, Range(1, MAX_PARALLEL, "--parallel must be from {lo} to {hi}"),
                        Doc("runs at once (the job's concurrency bounds it too)")] = 1
    note: Note = ""
    downstream: Annotated[bool, Doc("each fire time run again, its descendants after it")] = False
    force: Annotated[bool, Doc(f"up to {BD.HARD_MAX_FIRES} fire times (admins only)")] = False
    dry_run: Annotated[bool, Doc("plan only: the fire times and what each would get")] = False

    def __post_init__(self) -> None:
        if self.reprocess not in BD.REPROCESS or self.order not in BD.ORDERS:
            raise UsageError(f"--reprocess is one of {', '.join(BD.REPROCESS)}, --order one "
                             f"of {', '.join(BD.ORDERS)}")


@dataclass(frozen=True)
class ListBackfills:
    """Backfills, newest first, with their progress; or one (``id``), with
    each of its fire times (``items``)."""
    OP: ClassVar[str] = "backfills"
    id: Annotated[int | None, Doc("only this backfill")] = None
    limit: Limit = 50
    items: Annotated[bool, Doc("with id: every fire time and what it got")] = False
    consistent: Consistent = False


@dataclass(frozen=True)
class BackfillState:
    """Pause, resume (``running``) or cancel a backfill."""
    OP: ClassVar[str] = "backfill_state"
    id: Annotated[int, Doc("the backfill")]
    state: Annotated[str, Doc("its new state: " + ", ".join(BACKFILL_STATES))]

    def __post_init__(self) -> None:
        if self.state not in BACKFILL_STATES:
            raise UsageError("state is paused, running or cancelled")


@dataclass(frozen=True)
class Rerun:
    """A new attempt of a job's fire time ``at`` (its record must exist);
    ``downstream``: its descendants after it; ``dry_run``: what would run."""
    OP: ClassVar[str] = "rerun"
    job: Annotated[str, Doc("the job")]
    at: Annotated[int, Doc("the fire time to run again (Unix seconds)")]
    downstream: Annotated[bool, Doc("its descendants run again after it")] = False
    dry_run: Annotated[bool, Doc("only say what would run")] = False


@dataclass(frozen=True)
class Pools:
    """The pools in force, their slots in use and the runs waiting."""
    OP: ClassVar[str] = "pools"
    consistent: Consistent = False


@dataclass(frozen=True)
class ListAlerts:
    """Alerts (SLA misses, failures...), newest first: the open ones, or all."""
    OP: ClassVar[str] = "alerts"
    limit: Limit = 100
    all: Annotated[bool, Doc("closed ones too")] = False
    job: Annotated[str | None, Doc("only this job's")] = None
    consistent: Consistent = False


@dataclass(frozen=True)
class AckAlert:
    """Acknowledge an alert, with a note."""
    OP: ClassVar[str] = "alert_ack"
    id: Annotated[int, Doc("the alert")]
    note: Note = ""


@dataclass(frozen=True)
class ListDeadLetter:
    """The dead letter (runs that used up their retries), newest first: the
    open ones, or all, each with its run."""
    OP: ClassVar[str] = "dead_letter"
    limit: Limit = 100
    all: Annotated[bool, Doc("closed ones too")] = False
    consistent: Consistent = False


@dataclass(frozen=True)
class DeadLetterAction:
    """Requeue (a new attempt) or discard a run in the dead letter."""
    OP: ClassVar[str] = "dead_letter_action"
    run_id: Annotated[int, Doc("the dead run")]
    action: Annotated[str, Doc("what to do: " + " or ".join(DEAD_LETTER_ACTIONS))]
    note: Note = ""

    def __post_init__(self) -> None:
        if self.action not in DEAD_LETTER_ACTIONS:
            raise UsageError("action is requeue or discard")


@dataclass(frozen=True)
class Audit:
    """The audit log: who asked for which change, newest first."""
    OP: ClassVar[str] = "audit"
    limit: Limit = 50
    before: Annotated[int | None, Doc("only records below this audit id (the next "
                                      "page)")] = None
    consistent: Consistent = False


@dataclass(frozen=True)
class Notifications:
    """Notification events and every attempt to deliver them, newest first,
    with the notifiers the config defines."""
    OP: ClassVar[str] = "notifications"
    job: Annotated[str | None, Doc("only this job's events")] = None
    limit: Annotated[int, Range(1, MAX_EVENTS, "limit must be between {lo} and {hi}"),
                     Doc("how many events, newest first")] = 50
    before: Annotated[int | None, Doc("only events below this event id (the next "
                                      "page)")] = None
    consistent: Consistent = False


@dataclass(frozen=True)
class NotifyTest:
    """Send a test event through one notifier of the config, at once (as
    the daemon's user), and say what the receiver answered."""
    OP: ClassVar[str] = "notify_test"
    name: Annotated[str, Doc("the notifier")]
    job: Annotated[str, Doc("the job the test event names")] = "cronrd-notify-test"


TYPES: tuple[type[Any], ...] = (
    Backfill, ListBackfills, BackfillState, Rerun, Pools, ListAlerts, AckAlert, ListDeadLetter,
    DeadLetterAction, Audit, Notifications, NotifyTest)

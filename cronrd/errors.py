"""One exception tree for cronrd.

Every error says what was wrong, where, and what to do next. The CLI maps
``UsageError`` to exit code 2 and every other ``CronrdError`` to exit code 1.
"""

from __future__ import annotations

from typing import Any


class CronrdError(Exception):
    """Base of every error cronrd raises on purpose."""


class UsageError(CronrdError):
    """The operator asked for something malformed (exit code 2)."""


class ConfigError(CronrdError):
    """The daemon configuration file is missing or invalid.

    ``problems`` holds each problem of an invalid config (path, line, col,
    message; the message has one line per problem), or is empty.
    """

    def __init__(self, message: str, problems: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        # cronrd.jobspec.model.Problem objects (not imported: this module is a leaf)
        self.problems: tuple[Any, ...] = tuple(problems)


class ScheduleError(CronrdError):
    """A schedule expression, duration or time zone is invalid.

    ``column`` is the 0-based character offset inside the expression where
    the problem starts, when known, so callers can point at it.
    """

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


class JobFileError(CronrdError):
    """A job file could not be used (the message carries FILE:LINE:COL)."""


class DaemonUnavailable(CronrdError):
    """No daemon answers on the control socket."""


class DaemonNotRunning(DaemonUnavailable):
    """Nothing listens on the control socket (no such socket, or refused)."""


class RequestError(CronrdError):
    """The daemon refused a control request (bad input, unknown job...)."""


class StateError(CronrdError):
    """The replicated state refused a command (duplicate key, unknown run)."""


class Refused(StateError):
    """The command is valid but the state does not allow it."""


class Conflict(Refused):
    """Refused for what is under way now, not for the request itself (a
    run-now that the job's concurrency forbids while its run runs): the
    API's 409, where other refusals are 400."""
    http_status = 409


class StorageError(CronrdError):
    """Durable storage is damaged or unusable."""


class NotLeader(CronrdError):
    """This node is not the leader; ``leader`` names the one it knows, if any."""

    def __init__(self, leader: str | None) -> None:
        hint = f"the leader is {leader}" if leader else "no leader is known yet"
        super().__init__(f"this node is not the leader; {hint}: send the request there "
                         "or retry shortly")
        self.leader = leader


class ProposalDropped(CronrdError):
    """A proposal was not committed (leadership changed, or it was refused)."""


class PermissionDenied(RequestError):
    """The caller (a socket user, a peer node, an API token) may not do this."""

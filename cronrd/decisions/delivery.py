"""Who gets an event, and when the leader tries (again): pure decisions over
the outbox (state/events.py), the recorded attempts (state/deliveries.py)
and the daemon config's notifiers. The runtime (runtime/notify/delivery.py)
sends and records what these return.

An event goes to the routes of its job's ``notify`` (the config's ``notify``
when the job has none) that want its kind. For each recipient: attempt 1 at
once; after a failed attempt ``n``, attempt ``n+1`` once
``retry_delay * 2**(n-1)`` (at most ``max_retry_delay``) has passed; after
``max_attempts`` failed attempts, or one success, it is settled. The event
is delivered when every recipient is settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..jobspec.notify import NotifyRoute


@dataclass(frozen=True)
class Attempt:
    notifier: str
    attempt: int
    at: float
    ok: bool
    final: bool


@dataclass(frozen=True)
class Policy:
    """What the decisions need of a notifier of the config."""
    max_attempts: int = 5
    retry_delay: float = 10.0
    max_retry_delay: float = 600.0


@dataclass(frozen=True)
class Send:
    event_id: int
    notifier: str
    attempt: int
    final: bool          # the last attempt the policy allows: a failure gives up


@dataclass(frozen=True)
class GiveUp:
    """Recorded as a final failed attempt without sending, so that it shows
    and the event can settle: ``why`` is ``unknown`` (a route names a
    notifier this config does not define) or ``exhausted`` (its attempts
    were used up under an earlier, larger max_attempts)."""
    event_id: int
    notifier: str
    attempt: int
    why: str


@dataclass
class Plan:
    sends: list[Send] = field(default_factory=list)
    give_up: list[GiveUp] = field(default_factory=list)
    done: list[int] = field(default_factory=list)      # events every recipient settled
    next_at: float | None = None                        # the earliest retry not yet due


def recipients(kind: str, job_routes: Iterable[NotifyRoute] | None,
               default_routes: Iterable[NotifyRoute]) -> list[str]:
    """Notifier names that want an event of ``kind`` (routes: NotifyRoute;
    ``job_routes`` None: the job has no notify of its own)."""
    routes = default_routes if job_routes is None else job_routes
    return list(dict.fromkeys(r.to for r in routes if r.wants(kind)))


def retry_delay(policy: Policy, failed: int) -> float:
    """The wait after the ``failed``-th failed attempt."""
    return min(policy.max_retry_delay, policy.retry_delay * 2.0 ** max(0, failed - 1))


def plan(now: float, events: Iterable[tuple[int, list[str]]],
         attempts: Mapping[int, list[Attempt]], policies: Mapping[str, Policy],
         in_flight: set[tuple[int, str]]) -> Plan:
    """What to do now for ``events`` (event id, its recipients), given the
    recorded ``attempts`` by event and what is being sent (``in_flight``)."""
    out = Plan()
    for event_id, names in events:
        settled = True
        for name in names:
            mine = [a for a in attempts.get(event_id, ()) if a.notifier == name]
            if any(a.ok or a.final for a in mine):
                continue
            settled = False
            if (event_id, name) in in_flight:
                continue
            n = max((a.attempt for a in mine), default=0)
            policy = policies.get(name)
            if policy is None:
                out.give_up.append(GiveUp(event_id, name, n + 1, "unknown"))
                continue
            if n >= policy.max_attempts:  # (a config lowered since): give up now
                out.give_up.append(GiveUp(event_id, name, n + 1, "exhausted"))
                continue
            due = now if not mine else max(a.at for a in mine) + retry_delay(policy, n)
            if due <= now:
                out.sends.append(Send(event_id, name, n + 1, n + 1 >= policy.max_attempts))
            elif out.next_at is None or due < out.next_at:
                out.next_at = due
        if settled:
            out.done.append(event_id)
    return out

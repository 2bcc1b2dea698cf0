"""The seeded fault schedule: ``make_schedule(seed, ...)`` is a pure function
of its arguments, so a seed replays the same faults, in the same order, at
the same offsets, on any machine. A fault this machine cannot make (netem
without sch_netem, ...) is still in the schedule and is reported as skipped
there, so the other faults of the seed do not move.

Faults come one at a time (a Jepsen "nemesis" step: apply, hold, heal), with
a short quiet gap between them. The kinds are dealt from a shuffled deck, so
a seed covers as many different kinds as its duration allows before one
repeats. A target is a node id, or "leader"/"follower" resolved when the
fault starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# kind -> (what it does, hold seconds (low, high))
KINDS: dict[str, tuple[str, tuple[float, float]]] = {
    "isolate": ("iptables: drop all traffic between the target and every peer", (4, 12)),
    "bridge": ("iptables: cut the link between two nodes; the third sees both "
               "(a non-transitive partition; with 5+ nodes a majority/minority split)",
               (4, 12)),
    "one-way": ("iptables: drop only INPUT from, or only OUTPUT to, one peer", (4, 12)),
    "loss": ("iptables statistic: drop a random share of the target's packets", (5, 12)),
    "throttle": ("tc tbf: limit the target's egress bandwidth", (5, 12)),
    "netem-delay": ("tc netem: delay with jitter on the target's eth0", (5, 12)),
    "netem-reorder": ("tc netem: delay, loss and reordering on the target's eth0", (5, 12)),
    "kill": ("kill -9 the daemon, start it again after the hold", (2, 8)),
    "kill-long": ("kill -9 the daemon, leave it dead past node_timeout", (0, 0)),
    "pause": ("SIGSTOP the daemon, SIGCONT after the hold", (2, 12)),
    "clock-skew": ("restart the daemon with its wall clock off (faketime), then set it right",
                   (8, 15)),
    "clock-jump": ("jump the running daemon's wall clock forward and back (faketime)",
                   (8, 15)),
    "disk-full": ("fill the daemon's data_dir (a small tmpfs)", (4, 10)),
    "slow-fsync": ("make every fsync/fdatasync wait (LD_PRELOAD)", (5, 12)),
    # compound faults (issue 29): a bad clock with a failure, the leader's
    # disk or link, and requests as a fault
    "skew+kill-leader": ("a node restarted 30 s off (faketime); meanwhile the leader is "
                         "killed -9 and started again", (8, 15)),
    "skew+pause": ("a node restarted 30 s off (faketime); meanwhile another is SIGSTOPped",
                   (8, 15)),
    "slow-fsync-leader": ("make every fsync/fdatasync of the leader wait (LD_PRELOAD)",
                          (5, 12)),
    "loss-leader": ("drop 10% of the leader's packets (iptables statistic)", (5, 12)),
    "api-abuse": ("flood every node's control socket: job listings, backfill dry runs, "
                  "status (the faces' loop under load)", (5, 12)),
}
CLOCK_KINDS = ("clock-skew", "clock-jump", "skew+kill-leader", "skew+pause")
# Faults whose node is prepared before the start (faketime, the fsync
# library, a tmpfs data_dir): their target is always a node id.
PREPARED_KINDS = (*CLOCK_KINDS, "slow-fsync", "disk-full")
# Faults aimed at whoever leads when they start.
LEADER_KINDS = ("slow-fsync-leader", "loss-leader")
GAP = (1.0, 3.0)


@dataclass
class Fault:
    kind: str
    start: float                  # seconds after the schedule's origin
    hold: float
    target: str                   # node id, "leader" or "follower"
    params: dict = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.hold

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.params.items())
        return (f"{self.start:6.1f}s +{self.hold:4.1f}s {self.kind} {self.target}"
                + (f" {extra}" if extra else ""))


def make_schedule(seed: int, duration: float, nodes: list[str], node_timeout: float,
                  kinds: list[str] | None = None) -> list[Fault]:
    """Faults that start within ``duration`` seconds (the last one may hold
    a little past it)."""
    rng = random.Random(seed)
    kinds = list(kinds or KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(KINDS)}")
    deck: list[str] = []
    out: list[Fault] = []
    t = rng.uniform(*GAP)
    while t < duration:
        if not deck:
            deck = sorted(kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        low, high = KINDS[kind][1]
        hold = round(rng.uniform(low, high), 1)
        if kind == "kill-long":
            hold = round(node_timeout + rng.uniform(2, 6), 1)
        target = ("leader" if kind in LEADER_KINDS else
                  rng.choice(nodes if kind in PREPARED_KINDS else ["leader", "follower", *nodes]))
        f = Fault(kind, round(t, 1), hold, target, _params(rng, kind, nodes))
        out.append(f)
        t = f.end + rng.uniform(*GAP)
    return out


def _params(rng: random.Random, kind: str, nodes: list[str]) -> dict:
    if kind == "bridge":
        return {"seed": rng.randrange(1 << 16)}     # which link (or split) is cut
    if kind == "one-way":
        return {"direction": rng.choice(["in", "out"]), "peer": rng.randrange(len(nodes) - 1)}
    if kind == "loss":
        return {"p": rng.choice([0.1, 0.3, 0.5])}
    if kind == "throttle":
        return {"rate": rng.choice(["64kbit", "256kbit", "1mbit"])}
    if kind == "netem-delay":
        return {"delay_ms": rng.choice([50, 200, 500]), "jitter_ms": rng.choice([10, 50])}
    if kind == "netem-reorder":
        return {"delay_ms": rng.choice([20, 100]), "reorder": rng.choice([25, 50]),
                "loss": rng.choice([0, 5, 20])}
    if kind == "clock-skew":
        return {"offset": rng.choice([-30.0, -2.0, -0.3, 0.3, 2.0, 30.0])}
    if kind in ("skew+kill-leader", "skew+pause"):
        return {"offset": rng.choice([-30.0, 30.0]), "other": rng.randrange(1 << 16)}
    if kind == "slow-fsync-leader":
        return {"ms": rng.choice([200, 1000])}
    if kind == "api-abuse":
        return {"clients": rng.choice([4, 8])}
    if kind == "clock-jump":
        return {"jumps": [rng.choice([-30.0, -5.0, -1.0, 1.0, 5.0, 30.0])
                          for _ in range(rng.randint(2, 4))]}
    if kind == "slow-fsync":
        return {"ms": rng.choice([20, 200, 1000])}
    return {}

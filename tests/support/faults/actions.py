"""Making each fault happen: apply, hold, heal (the heal also runs when
something fails in between). ``run_fault`` returns what was done, with the
true times it started and healed."""

from __future__ import annotations

import random
import signal
import time
from typing import Callable

from .nodes import FaultCluster
from .schedule import Fault


def sleep_until(t: float) -> None:
    """The fault timeline (not a wait for correctness)."""
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.2))


def resolve_target(c: FaultCluster, f: Fault, rng: random.Random) -> str:
    ids = list(c.nodes)
    if f.target in c.nodes:
        return f.target
    alive = [nid for nid in ids if c.alive(nid)] or ids
    roles = {nid: c.role(nid) for nid in alive}
    want = [nid for nid in alive if roles[nid] == f.target]
    return rng.choice(want or alive)


def unavailable(f: Fault, c: FaultCluster, reasons: dict[str, str | None]) -> str | None:
    """Why ``f`` cannot be made here (None: it can)."""
    if f.kind.startswith("netem"):
        return reasons.get("netem")
    if f.kind == "throttle":
        return reasons.get("tbf")
    if f.kind.startswith("clock"):
        return None if f.target in c.clock_file else (reasons.get("faketime")
                                                      or "node not under faketime")
    if f.kind == "slow-fsync":
        return None if f.target in c.fsync_file else (reasons.get("fsync")
                                                      or "no slow-fsync library")
    if f.kind == "disk-full":
        return None if f.target in c.fill_file else (reasons.get("tmpfs") or "no tmpfs")
    return None


def run_fault(c: FaultCluster, f: Fault, origin: float, seed: int, index: int,
              reasons: dict[str, str | None], log: Callable[[str], None]) -> dict:
    rng = random.Random(f"{seed}/{index}")
    why = unavailable(f, c, reasons)
    if why:
        log(f"  skip  {f.describe()}: {why}")
        return {"kind": f.kind, "skipped": why, "t0": origin + f.start, "t1": origin + f.end}
    sleep_until(origin + f.start)
    tid = resolve_target(c, f, rng)
    others = [nid for nid in c.nodes if nid != tid]
    lab = c.lab
    heal: list[Callable[[], None]] = []
    detail = ""
    t0 = time.time()
    try:
        if f.kind == "isolate":
            for p in others:
                lab.drop(tid, p, "both")
            heal.append(lambda: lab.heal(tid))
        elif f.kind in ("bridge", "split"):
            side_rng = random.Random(f.params.get("seed", 0))
            rest = list(others)
            side_rng.shuffle(rest)
            if f.kind == "bridge":       # tid sees everyone; the rest split in two
                a, b = rest[:len(rest) // 2], rest[len(rest) // 2:]
            else:                        # a minority with tid against the majority
                k = (len(c.nodes) - 1) // 2
                a, b = [tid, *rest[:k - 1]], rest[k - 1:]
            for x in a:
                for y in b:
                    lab.drop(x, y, "both")
                heal.append(lambda x=x: lab.heal(x))
            detail = f"{','.join(a)} | {','.join(b)}"
        elif f.kind == "one-way":
            peer = others[f.params["peer"] % len(others)]
            lab.drop(tid, peer, f.params["direction"])
            heal.append(lambda: lab.heal(tid))
            detail = f"{tid} drops {'INPUT from' if f.params['direction'] == 'in' else 'OUTPUT to'}" \
                     f" {peer}"
        elif f.kind == "loss":
            for p in others:
                lab.drop(tid, p, "both", probability=f.params["p"])
            heal.append(lambda: lab.heal(tid))
        elif f.kind == "throttle":
            lab.tc(tid, "tbf", "rate", f.params["rate"], "burst", "16kb", "latency", "400ms")
            heal.append(lambda: lab.heal(tid))
        elif f.kind == "netem-delay":
            lab.tc(tid, "netem", "delay", f"{f.params['delay_ms']}ms",
                   f"{f.params['jitter_ms']}ms")
            heal.append(lambda: lab.heal(tid))
        elif f.kind == "netem-reorder":
            lab.tc(tid, "netem", "delay", f"{f.params['delay_ms']}ms", "reorder",
                   f"{f.params['reorder']}%", "50%", "loss", f"{f.params['loss']}%")
            heal.append(lambda: lab.heal(tid))
        elif f.kind in ("kill", "kill-long"):
            c.kill9(tid)
            heal.append(lambda: c.start_node(tid))
        elif f.kind == "pause":
            c.signal(tid, signal.SIGSTOP)
            heal.append(lambda: c.signal(tid, signal.SIGCONT))
        elif f.kind == "clock-skew":
            # The host's clock is off when the daemon starts (NTP broke while down).
            c.kill9(tid)
            c.set_clock(tid, f.params["offset"])
            heal.append(lambda: c.set_clock(tid, 0.0))
            c.start_node(tid)
        elif f.kind == "clock-jump":
            heal.append(lambda: c.set_clock(tid, 0.0))
            jumps = f.params["jumps"]
            for i, off in enumerate(jumps):
                sleep_until(t0 + i * f.hold / len(jumps))
                c.set_clock(tid, off)
        elif f.kind == "disk-full":
            heal.append(lambda: c.free_disk(tid))
            detail = f"{c.fill_disk(tid) // 1024} KiB filler"
        elif f.kind == "slow-fsync":
            heal.append(lambda: c.set_fsync_delay(tid, 0))
            c.set_fsync_delay(tid, f.params["ms"])
        else:
            raise ValueError(f"unknown fault kind {f.kind}")
        log(f"  fault {f.describe()} -> {tid}" + (f" ({detail})" if detail else ""))
        sleep_until(t0 + f.hold)
    finally:
        for undo in reversed(heal):
            undo()
    t1 = time.time()
    exited = [f"{nid} (exit {code})" for nid, _, code in c.take_exits()]
    if exited:
        log(f"  NOTE  daemon(s) exited on their own during {f.kind}: {', '.join(exited)}; "
            "started again after RestartSec, as systemd would")
    return {"kind": f.kind, "target": tid, "t0": t0, "t1": t1, "detail": detail,
            "params": f.params, "exited": exited}

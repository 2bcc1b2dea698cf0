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
    if f.kind.startswith("clock") or f.kind.startswith("skew+"):
        return None if f.target in c.clock_file else (reasons.get("faketime")
                                                      or "node not under faketime")
    if f.kind == "slow-fsync-leader":
        return None if c.fsync_file else (reasons.get("fsync") or "no slow-fsync library")
    if f.kind == "slow-fsync":
        return None if f.target in c.fsync_file else (reasons.get("fsync")
                                                      or "no slow-fsync library")
    if f.kind == "disk-full":
        return None if f.target in c.fill_file else (reasons.get("tmpfs") or "no tmpfs")
    return None


def abuse(c: FaultCluster, until: float, clients: int) -> dict[str, int]:
    """Requests as a fault: ``clients`` threads loop over every live node's
    control socket (reachable from the host; the HTTP face listens inside
    the namespaces) with what an operator's scripts and an attacker send:
    every job, a page of runs, a backfill dry run over three days of a job
    firing every second or two (more than a request may take: refused
    after counting), status. Returns counts of answers by kind."""
    import threading
    counts: dict[str, int] = {}
    lock = threading.Lock()
    names: list[str] = []
    for n in c:
        try:
            names = [j["name"] for j in n.call("jobs", {}, timeout=5)]
            break
        except Exception:  # noqa: BLE001 - a node down: ask another
            continue

    def client(k: int) -> None:
        rng = random.Random(k)
        while time.time() < until:
            alive = [nid for nid in c.nodes if c.alive(nid)]
            if not alive:
                time.sleep(0.1)
                continue
            node = c.nodes[rng.choice(alive)]
            now = int(time.time())
            cmd, args = rng.choice([
                ("jobs", {}), ("runs", {"limit": 500}), ("status", {}),
                ("backfill", {"job": rng.choice(names) if names else "x", "from": now - 3 * 86400,
                              "to": now, "dry_run": True})])
            try:
                node.call(cmd, args, timeout=10)
                what = f"{cmd} ok"
            except Exception:  # noqa: BLE001 - refused (the backfill) or the node is busy
                what = f"{cmd} refused"
            with lock:
                counts[what] = counts.get(what, 0) + 1
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, until - time.time()) + 15)
    return counts


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
        elif f.kind == "slow-fsync-leader":   # tid: the leader when it starts
            heal.append(lambda: c.set_fsync_delay(tid, 0))
            c.set_fsync_delay(tid, f.params["ms"])
        elif f.kind == "loss-leader":
            for p in others:
                lab.drop(tid, p, "both", probability=0.1)
            heal.append(lambda: lab.heal(tid))
        elif f.kind in ("skew+kill-leader", "skew+pause"):
            # tid's host comes back with its clock 30 s off; while it does,
            # the leader dies (or another node is paused)
            c.kill9(tid)
            c.set_clock(tid, f.params["offset"])
            heal.append(lambda: c.set_clock(tid, 0.0))
            c.start_node(tid)
            sleep_until(t0 + f.hold / 3)
            pick = random.Random(f.params["other"])
            alive = [n for n in others if c.alive(n)] or others
            leaders = [n for n in alive if c.role(n) == "leader"]
            victim = (leaders or alive)[0] if f.kind == "skew+kill-leader" else pick.choice(alive)
            if f.kind == "skew+kill-leader":
                c.kill9(victim)
                heal.append(lambda: None if c.alive(victim) else c.start_node(victim))
                sleep_until(t0 + 2 * f.hold / 3)
                c.start_node(victim)
            else:
                c.signal(victim, signal.SIGSTOP)
                heal.append(lambda: c.signal(victim, signal.SIGCONT))
                sleep_until(t0 + 2 * f.hold / 3)
                c.signal(victim, signal.SIGCONT)
            detail = f"{tid} {f.params['offset']:+g}s; {victim} " + (
                "killed" if f.kind == "skew+kill-leader" else "paused")
        elif f.kind == "api-abuse":
            stats = abuse(c, t0 + f.hold, f.params["clients"])
            detail = ", ".join(f"{k} {v}" for k, v in sorted(stats.items()))
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
